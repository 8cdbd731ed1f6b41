"""varq for Python: tensors shared with numpy and torch without copies, ONNX
models run by varq's executor in ONNX Runtime's shape, and the dependency
engine with Python functions as ops.

The work is done by the C extension ``varq._varq`` over libvarq's public C
API; this module adds the ONNX Runtime-shaped classes around it.
"""

from ._varq import (  # noqa: F401  (the public names of the package)
    Busy,
    Cancelled,
    Deadlock,
    Engine,
    Error,
    InvalidArgument,
    NotAvailable,
    OperationFailed,
    OutOfMemory,
    RunFuture,
    Tensor,
    TimedOut,
    Var,
    __version__,
    from_dlpack,
    tensor,
)
from . import _varq

__all__ = [
    "Busy", "Cancelled", "Deadlock", "Engine", "Error", "InferenceSession",
    "InvalidArgument", "NodeArg", "NotAvailable", "OperationFailed", "OutOfMemory",
    "RunFuture", "Tensor", "TimedOut", "Var", "__version__", "from_dlpack", "tensor",
]

# ONNX Runtime's names of the element types (NodeArg.type).
_ORT_TYPES = {
    "float32": "tensor(float)",
    "float64": "tensor(double)",
    "int32": "tensor(int32)",
    "int64": "tensor(int64)",
    "bool": "tensor(bool)",
}


class NodeArg:
    """One input or output of a model: .name, .shape (a list; None for a dim
    known only when fed), .type (ONNX Runtime's 'tensor(float)') and .dtype
    (numpy's name, 'float32')."""

    __slots__ = ("name", "shape", "type", "dtype")

    def __init__(self, name, dtype, shape):
        self.name = name
        self.dtype = dtype
        self.type = _ORT_TYPES[dtype]
        self.shape = list(shape)

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class InferenceSession:
    """An ONNX model run by varq, in ONNX Runtime's shape.

    InferenceSession(path_or_bytes, workers=None, gpu=None): the model from a
    file (external data is read beside it) or from its bytes; workers is the
    engine's number of CPU workers (None: VARQ_CPU_WORKERS or every core);
    gpu is a GPU id to run on (None: the CPU).

    run(output_names, input_feed) returns a list of numpy arrays, one per
    name (None: every output in the model's order). The feeds are numpy
    arrays (or anything numpy.asarray takes, or varq.Tensor / torch CPU
    tensors through varq.tensor) of the inputs' dtypes; C-contiguous ones are
    used in place, without a copy. Wrong names, dtypes or shapes raise
    varq.InvalidArgument (a ValueError); a failing run raises the varq.Error
    of its code with varq's message. Several threads may call run on one
    session at once (the GIL is released while it runs)."""

    def __init__(self, path_or_bytes, workers=None, gpu=None, **_ignored):
        if hasattr(path_or_bytes, "SerializeToString"):  # an onnx.ModelProto
            path_or_bytes = path_or_bytes.SerializeToString()
        self._s = _varq._Session(path_or_bytes, workers, gpu)
        self._inputs = [NodeArg(*d) for d in self._s.inputs()]
        self._outputs = [NodeArg(*d) for d in self._s.outputs()]

    def get_inputs(self):
        """The model's feeds as NodeArgs, in the model's order (a new list;
        thread-safe)."""
        return list(self._inputs)

    def get_outputs(self):
        """The model's outputs as NodeArgs, in the model's order (a new
        list; thread-safe)."""
        return list(self._outputs)

    def run(self, output_names, input_feed, run_options=None):
        """The fetches named by output_names (None: every output) as a list
        of numpy arrays the caller owns (over the run's own memory, which
        they keep alive). See the class's note on feeds and threads."""
        return self._s.run(output_names, input_feed)

    def run_async(self, output_names, input_feed, run_options=None):
        """Pushes the run and returns at once with a varq.RunFuture, whose
        result(timeout=None) is what run would have returned (or raises what
        it would have raised). The feeds are held (not copied) until the run
        is done: do not write them meanwhile. The run is completed by the
        engine's done callback on a worker, which never takes the GIL; many
        runs may be in flight at once, from any threads (past 64 in flight
        the call waits for the oldest, GIL released). Thread-safe."""
        return self._s.run_async(output_names, input_feed)

    def close(self):
        """Frees the model and the executor (after the runs in flight); run
        raises varq.InvalidArgument afterwards. Arrays already returned stay
        valid."""
        self._s.close()

    @property
    def closed(self):
        return self._s.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
