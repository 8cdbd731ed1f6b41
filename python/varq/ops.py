"""varq's registered ops as Python functions, run imperatively on an engine
(include/varq/ops.h's vq_op_run): ``varq.ops.matmul(a, b)``,
``varq.ops.softmax(x, axis=1)``, one function per op in the registry, made
at import from its signature (``varq.ops.signature("matmul")``).

Each function takes the op's inputs positionally (numpy arrays, torch CPU
tensors and varq.Tensors, used in place when C-contiguous of a varq
dtype: do not write them until the op is done), its attributes as keyword
arguments (typed by the op's schema), and these keywords:

- ``engine``: the varq.Engine to push on (None: ``default_engine()``);
- ``out``: a list, one entry per output, of None (a new tensor) or a
  varq.Tensor written in place (an optimizer's parameter);
- ``nout``: the number of outputs of an op whose last output slot is
  variadic or optional (split's ``Out...``, dropout's ``StateOut?``);
  by default a variadic slot takes one output per ``sizes`` entry (split)
  and an optional output is made when every optional input is given.

It returns at once, before the kernel ran, with new varq.Tensors (owned by
the caller; one, or a tuple for several outputs) whose values are pending:
``numpy.asarray(t)`` waits for them (GIL released) and raises the op's
failure as its varq.Error. Calls on shared tensors run in call order.
Thread-safe: any thread may call any op at once.

``with varq.capture(engine) as cap:`` records this thread's calls on
engine and runs them as segments of one engine op each (capture.h);
``cap.backward(loss, params)`` differentiates the recorded calls.
"""
import builtins
import keyword
import threading

from . import _varq

__all__ = ["capture", "default_engine", "names", "signature"]

_default = None
_default_lock = threading.Lock()


def default_engine():
    """The engine varq.ops calls push on when given none: one per process,
    made at the first call with VARQ_CPU_WORKERS (or every core) workers,
    and kept until exit. Thread-safe."""
    global _default
    with _default_lock:
        if _default is None:
            _default = _varq.Engine()
        return _default


def names():
    """The registered op types, sorted (a new list)."""
    return _varq._op_names()


def signature(op):
    """vq_op_signature: "matmul(X, Y) -> Out; transpose_x:bool=0 ..."."""
    return _varq._op_signature(op)


def _slots(text):
    return [s.strip() for s in text.split(",") if s.strip()]


def _make(op):
    sig = signature(op)
    head = sig.split(";", 1)[0]
    ins_text, outs_text = head[head.index("(") + 1:head.index(")")], head.split("->", 1)[1]
    ins, outs = _slots(ins_text), _slots(outs_text)
    # (builtins.sum: this module's globals get an op named sum)
    n_fixed_out = builtins.sum(1 for s in outs if not s.endswith("?") and not s.endswith("..."))
    n_optional_out = builtins.sum(1 for s in outs if s.endswith("?"))
    variadic_out = bool(outs) and outs[-1].endswith("...")
    has_optional_in = builtins.any(s.endswith("?") for s in ins)

    def call(*inputs, engine=None, out=None, nout=None, **attrs):
        if engine is None:
            engine = default_engine()
        if out is not None:
            outputs = list(out)
        elif nout is not None:
            outputs = int(nout)
        elif variadic_out:
            sizes = attrs.get("sizes")
            outputs = n_fixed_out + (len(sizes) if sizes is not None else 1)
        elif n_optional_out and has_optional_in and len(inputs) == len(ins):
            outputs = n_fixed_out + n_optional_out  # optional outputs of optional inputs
        else:
            outputs = n_fixed_out
        r = _varq._op_run(engine, op, inputs, outputs, attrs)
        return r[0] if len(r) == 1 else r

    call.__name__ = call.__qualname__ = op
    call.__doc__ = (
        f"{sig}\n\nvq_op_run of '{op}' on engine (None: default_engine()): inputs "
        "positionally (used in place, held until the op is done), attributes as keywords, "
        "out=[None or varq.Tensor written in place], nout= for a variadic or optional "
        "last output. Returns at once with new varq.Tensors owned by the caller (one, or "
        "a tuple), pending until read. Thread-safe; see the module's help.")
    return call


class capture:
    """``with varq.capture(engine) as cap:`` records the calling thread's
    varq.ops calls on engine (None: the default engine) instead of pushing
    them, and pushes them as segments, each one engine op running their
    kernels back to back (include/varq/capture.h: same values and errors
    as eager calls; a host read such as numpy.asarray of a pending tensor
    cuts the segment first). Leaving the block pushes what is left.
    cap.backward(loss, params) appends the gradient ops of the recorded
    calls and returns d loss / d param for each (a new varq.Tensor, or
    None where loss does not depend on it). cap.stats() is
    vq_capture_get_stats as a dict. Per thread: enter and exit on the
    same thread (another thread's calls are not recorded); not
    re-entrant on one engine."""

    def __init__(self, engine=None):
        self.engine = engine if engine is not None else default_engine()
        self._thread = None

    def __enter__(self):
        """vq_capture_begin on the calling thread; the capture object.
        Raises varq.InvalidArgument when this thread captures on the
        engine already."""
        _varq._capture_begin(self.engine)
        self._thread = threading.get_ident()
        return self

    def __exit__(self, *exc):
        """vq_capture_end: pushes what is recorded (even when the block
        raised; the exception propagates). RuntimeError on another
        thread than the one that entered."""
        if threading.get_ident() != self._thread:
            raise RuntimeError("capture: left on another thread than the one that entered it")
        self._thread = None
        _varq._capture_end(self.engine)
        return False

    def backward(self, loss, params):
        """The gradients of loss (a one-element float varq.Tensor the
        recorded calls wrote) with respect to params (varq.Tensors they
        read), recorded into the current segment; a list, None where loss
        does not depend on the param. The caller owns the tensors."""
        return _varq._capture_backward(self.engine, loss, list(params))

    def stats(self):
        """This thread's capture counters for the engine (a new dict)."""
        return _varq._capture_stats(self.engine)


def _install():
    g = globals()
    for op in names():
        if op.isidentifier() and not keyword.iskeyword(op) and op not in g:
            g[op] = _make(op)
            __all__.append(op)


_install()
