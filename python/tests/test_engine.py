"""varq.Engine: Python callables as ops on worker threads, ordered by the
vars they read and write; failures, waits, and lifetimes."""
import gc
import threading
import time

import pytest

import varq
from conftest import run_script


def test_writes_to_one_var_run_in_push_order():
    e = varq.Engine(workers=4)
    v = e.new_var("log")
    log = []
    for i in range(2000):
        e.push(lambda i=i: log.append(i), writes=[v])
    e.wait_var(v)
    assert log == list(range(2000))


def test_ops_run_on_workers_and_reads_wait_for_the_write_before_them():
    e = varq.Engine(workers=4)
    v = e.new_var()
    state = {"x": 0}
    seen, threads = [], set()

    def write(val):
        time.sleep(0.002)
        state["x"] = val
        threads.add(threading.get_ident())

    def read():
        seen.append(state["x"])

    for k in range(1, 21):
        e.push(lambda k=k: write(k), writes=[v])
        for _ in range(3):
            e.push(read, reads=[v])
    e.wait_all()
    assert seen == [k for k in range(1, 21) for _ in range(3)]
    assert threading.get_ident() not in threads or len(threads) > 1


def test_independent_vars_run_in_parallel():
    e = varq.Engine(workers=2)
    a, b = e.new_var(), e.new_var()
    both = threading.Barrier(2, timeout=10)
    e.push(both.wait, writes=[a])
    e.push(both.wait, writes=[b])  # would time out if run one after the other
    e.wait_all()


def test_an_exception_fails_the_op_and_what_depends_on_it():
    e = varq.Engine(workers=2)
    v, w = e.new_var("v"), e.new_var("w")
    ran = []

    def boom():
        raise KeyError("missing thing")

    e.push(boom, writes=[v])
    e.push(lambda: ran.append("skipped"), reads=[v], writes=[w])
    with pytest.raises(varq.OperationFailed, match="missing thing") as exc:
        e.wait_var(v)
    assert isinstance(exc.value.__cause__, KeyError)
    assert exc.value.code == -5
    with pytest.raises(varq.Error):
        e.wait_var(w)  # the failure passed on to what the skipped op writes
    assert ran == []
    e.push(lambda: ran.append("again"), writes=[v])  # cleared by the wait
    e.wait_var(v)
    assert ran == ["again"]
    with pytest.raises(varq.Error):
        e.push(boom)
        e.wait_all()
    e.wait_all()  # the record was cleared


def test_bad_arguments():
    e, other = varq.Engine(workers=1), varq.Engine(workers=1)
    v = other.new_var()
    with pytest.raises(varq.InvalidArgument, match="not a Var of this engine"):
        e.push(lambda: None, writes=[v])
    with pytest.raises(varq.InvalidArgument):
        e.wait_var(v)
    with pytest.raises(TypeError):
        e.push(42)
    with pytest.raises(varq.InvalidArgument):
        varq.Engine(workers=0)


def test_an_engine_dropped_with_ops_in_flight_runs_them_first():
    done = []
    e = varq.Engine(workers=2)
    v = e.new_var()
    for i in range(100):
        e.push(lambda i=i: (time.sleep(0.0005), done.append(i)), writes=[v])
    del v, e
    gc.collect()
    assert done == list(range(100))


def test_pushes_from_several_threads_and_from_inside_ops():
    e = varq.Engine(workers=4)
    v = e.new_var()
    count = {"n": 0}

    def bump():
        count["n"] += 1

    def pusher():
        for _ in range(500):
            e.push(bump, writes=[v])

    def nested():
        e.push(bump, writes=[v])

    threads = [threading.Thread(target=pusher) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    e.push(nested)
    e.wait_all()
    e.wait_all()  # the nested push may land after the first wait_all began
    assert count["n"] == 2001


def test_naive_engine_runs_ops_in_the_pushing_thread():
    e = varq.Engine(naive=True)
    where = []
    e.push(lambda: where.append(threading.get_ident()))
    e.wait_all()
    assert where == [threading.get_ident()]


def test_the_interpreter_exits_with_engines_sessions_and_arrays_alive(tmp_path):
    out = run_script(
        tmp_path,
        "import time, numpy as np, varq\n"
        "from conftest import mlp_model\n"
        "s = varq.InferenceSession(mlp_model()[0])\n"
        "ys = [s.run(None, {'x': np.ones((3, 4), np.float32)}) for _ in range(50)]\n"
        "e = varq.Engine(workers=2)\n"
        "v = e.new_var()\n"
        "for i in range(100):\n"
        "    e.push(lambda: time.sleep(0.001), writes=[v])\n"
        "t = varq.tensor(np.arange(5.0))\n"
        "class Holder: pass\n"
        "h = Holder(); h.e = varq.Engine(workers=2); h.v = h.e.new_var(); h.me = h\n"
        "for i in range(20):\n"
        "    h.e.push(lambda: time.sleep(0.01), writes=[h.v])\n"
        "print('exiting')\n")
    assert out == "exiting\n"


def test_an_engine_whose_last_reference_goes_inside_an_op_neither_deadlocks_nor_crashes():
    import weakref

    e = varq.Engine(workers=1)
    ref = weakref.ref(e)
    holder = [e]
    ran = threading.Event()

    def drop():
        holder.clear()  # the engine's last reference, inside its own op
        ran.set()

    e.push(drop)
    del e
    assert ran.wait(10)
    for _ in range(20):  # the main thread frees it at a pending-call check
        time.sleep(0.01)
    assert ref() is None
    e2 = varq.Engine(workers=1)  # and the process goes on using engines
    e2.push(lambda: None)
    e2.wait_all()


def python_thread_states():
    """The number of the interpreter's thread states (ctypes over the C API)."""
    import ctypes
    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.restype = ctypes.c_void_p
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
    n, t = 0, api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
    while t:
        n += 1
        t = api.PyThreadState_Next(t)
    return n


def test_a_workers_thread_state_is_kept_between_ops_and_deleted_at_its_exit():
    gc.collect()
    before = python_thread_states()
    for _ in range(10):
        e = varq.Engine(workers=2)
        v = e.new_var()
        for _ in range(200):
            e.push(lambda: None, writes=[v])
        e.wait_all()
        # at most one state per worker (and the pushing thread's own), not one per op
        assert python_thread_states() <= before + 2
        del v, e
        gc.collect()
    assert python_thread_states() == before


def test_push_arguments_by_name_and_position():
    e = varq.Engine(workers=2)
    v, w = e.new_var(), e.new_var()
    log = []
    e.push(lambda: log.append(1), [], [v])
    e.push(fn=lambda: log.append(2), reads=(v,), writes=[w], priority=3)
    e.push(lambda: log.append(3), None, None)
    e.wait_all()
    assert sorted(log) == [1, 2, 3] and log.index(1) < log.index(2)
    with pytest.raises(TypeError, match="unexpected"):
        e.push(lambda: None, write=[v])
    with pytest.raises(TypeError, match="repeated"):
        e.push(lambda: None, fn=lambda: None)
    with pytest.raises(TypeError):
        e.push()
    with pytest.raises(TypeError):
        e.push(lambda: None, 5)
    with pytest.raises(varq.InvalidArgument, match="writes\\[9\\] is not a Var"):
        e.push(lambda: None, writes=[v] * 9 + [object()])
    many = [e.new_var() for _ in range(12)]  # past the stack arrays
    e.push(lambda: log.append(4), reads=many[:6], writes=many[6:])
    e.wait_all()
    assert log[-1] == 4
