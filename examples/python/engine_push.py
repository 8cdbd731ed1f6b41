#!/usr/bin/python3
"""The dependency engine with Python callables as ops: two writers of one
var run in push order, and readers of it wait for the writer before them.

    /usr/bin/python3 examples/python/engine_push.py
"""
import varq

log = []
eng = varq.Engine(workers=2)
a, b = eng.new_var(), eng.new_var()
eng.push(lambda: log.append("fill a"), writes=[a])
eng.push(lambda: log.append("read a, write b"), reads=[a], writes=[b])
eng.push(lambda: log.append("read b"), reads=[b])
eng.wait_all()                                  # releases the GIL while it waits
print(log)                                      # always in this order


def fails():
    raise ValueError("bad input")


eng.push(fails, writes=[a])
try:
    eng.wait_var(a)                             # the op's failure, raised here
except varq.OperationFailed as e:
    print("failed as expected:", e, "| cause:", repr(e.__cause__))
