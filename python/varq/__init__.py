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
    Executor,
    Program as _Program,
    RunFuture,
    Scope,
    Tensor,
    TimedOut,
    Var,
    __version__,
    append_backward,
    from_dlpack,
    tensor,
)
from . import _varq
from . import ops
from .ops import capture

__all__ = [
    "Adam", "AdamW", "Busy", "Cancelled", "Deadlock", "Engine", "Error", "Executor",
    "InferenceSession", "InvalidArgument", "Momentum", "NodeArg", "NotAvailable",
    "OperationFailed", "Optimizer", "OutOfMemory", "Program", "RunFuture", "SGD", "Scope",
    "Tensor", "TimedOut", "Var", "__version__", "append_backward", "capture", "from_dlpack",
    "layers", "lr_schedule", "ops", "tensor", "wrap_future",
]

# ONNX Runtime's names of the element types (NodeArg.type).
_ORT_TYPES = {
    "float32": "tensor(float)",
    "float64": "tensor(double)",
    "int32": "tensor(int32)",
    "int64": "tensor(int64)",
    "bool": "tensor(bool)",
    "float16": "tensor(float16)",
    "bfloat16": "tensor(bfloat16)",
    "int8": "tensor(int8)",
    "uint8": "tensor(uint8)",
    "int16": "tensor(int16)",
    "uint16": "tensor(uint16)",
    "uint32": "tensor(uint32)",
    "uint64": "tensor(uint64)",
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


class InferenceSession(_varq._Session):
    """An ONNX model run by varq, in ONNX Runtime's shape.

    InferenceSession(path_or_bytes, workers=None, gpu=None): the model from a
    file (external data is read beside it) or from its bytes; workers is the
    engine's number of CPU workers (None: VARQ_CPU_WORKERS or every core);
    gpu is a GPU id to run on (None: the CPU).

    run(output_names, input_feed) returns a list of numpy arrays, one per
    name (None: every output in the model's order). input_feed is a dict
    {name: array} of every input, or a list of arrays in the order of
    get_inputs(). The feeds are numpy arrays (or anything numpy.asarray
    takes, or varq.Tensor / torch CPU tensors through varq.tensor) of the
    inputs' dtypes; C-contiguous ones are used in place, without a copy.
    Wrong names, dtypes or shapes raise varq.InvalidArgument (a ValueError);
    a failing run raises the varq.Error of its code with varq's message.
    Several threads may call run on one session at once (the GIL is
    released while it runs).

    run, run_async, close and closed are the C extension's own (no Python
    frame between the caller and the run)."""

    def __init__(self, path_or_bytes, workers=None, gpu=None, **_ignored):
        if hasattr(path_or_bytes, "SerializeToString"):  # an onnx.ModelProto
            path_or_bytes = path_or_bytes.SerializeToString()
        super().__init__(path_or_bytes, workers, gpu)
        self._inputs = [NodeArg(*d) for d in self.inputs()]
        self._outputs = [NodeArg(*d) for d in self.outputs()]

    def get_inputs(self):
        """The model's feeds as NodeArgs, in the model's order (a new list;
        thread-safe)."""
        return list(self._inputs)

    def get_outputs(self):
        """The model's outputs as NodeArgs, in the model's order (a new
        list; thread-safe)."""
        return list(self._outputs)

    def __enter__(self):
        """The session itself; leaving the block closes it."""
        return self

    def __exit__(self, *exc):
        """close(): runs in flight finish first."""
        self.close()


def wrap_future(future, *, loop=None):
    """An asyncio future of loop (None: the running loop) that completes
    with future's result or exception: future is a varq.RunFuture (or a
    concurrent.futures.Future). asyncio.wrap_future takes only the latter;
    `await run_future` calls this. The RunFuture's done callback, on the
    engine worker that completes the run, only hands it to the loop with
    loop.call_soon_threadsafe; result() (the numpy arrays) is then made on
    the loop's thread. Cancelling the asyncio future does not cancel the
    run."""
    import asyncio
    import concurrent.futures
    if isinstance(future, concurrent.futures.Future):
        return asyncio.wrap_future(future, loop=loop)
    if loop is None:
        loop = asyncio.get_running_loop()
    out = loop.create_future()

    def copy(f):
        if out.cancelled():
            return
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(f.result())

    def done(f):
        if not loop.is_closed():
            loop.call_soon_threadsafe(copy, f)

    future.add_done_callback(done)
    return out


# ---- programs ----

import re as _re

_VAR_LINE = _re.compile(r"^( *)var (\S+) : (\w+)\[([^\]]*)\]((?: persistable| stop_gradient)*)$")
_OP_LINE = _re.compile(
    r"^( *)op (\d+) (\S+)\((.*?)\) -> \((.*?)\)(?: \{(.*)\})?(?: priority (-?\d+))?$")
_BLOCK_LINE = _re.compile(r"^( *)block (\d+) \((?:parent (\d+)|[^)]*)\):$")
_SLOT = _re.compile(r"(\w+)=(\[[^\]]*\]|[^,\s]+)")
_ESC = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _attr_value(s, i):
    """The attribute value of the text dump at s[i:] and where it ends."""
    if s[i] == "[":
        out, i = [], i + 1
        while s[i] != "]":
            v, i = _attr_value(s, i)
            out.append(v)
            if s.startswith(", ", i):
                i += 2
        return out, i + 1
    if s[i] == '"':
        out, i = [], i + 1
        while s[i] != '"':
            if s[i] == "\\":
                if s[i + 1] == "x":
                    out.append(chr(int(s[i + 2:i + 4], 16)))
                    i += 4
                else:
                    out.append(_ESC[s[i + 1]])
                    i += 2
            else:
                out.append(s[i])
                i += 1
        return "".join(out), i + 1
    j = i
    while j < len(s) and s[j] not in ",]":
        j += 1
    tok = s[i:j]
    if tok in ("true", "false"):
        return tok == "true", j
    try:
        return int(tok), j
    except ValueError:
        return float(tok), j


def _attrs(text):
    out, i = {}, 0
    while i < len(text):
        eq = text.index("=", i)
        name = text[i:eq]
        out[name], i = _attr_value(text, eq + 1)
        if text.startswith(", ", i):
            i += 2
    return out


def _names(slots):
    out = []
    for _, v in _SLOT.findall(slots):
        out.extend([n for n in v[1:-1].split(", ") if n] if v.startswith("[") else [v])
    return out


class Program(_Program):
    """A varq program: blocks of var declarations and ops over named vars
    (include/varq/graph.h), built op by op (add_var, add_op, add_block, the
    layers and optimizers), decoded from protobuf bytes (Program(bytes)),
    loaded from a .pb file (Program(path)) or read from its text form
    (Program.from_text). Thread-safety: build it from one thread; once
    built, any number of threads may run or save it. An edit while a run of
    it is in flight raises varq.Busy."""

    @classmethod
    def from_text(cls, text):
        """A new program from the text dump() writes (vq_program_dump's
        form): every block, var (persistable, stop_gradient) and op
        (attributes typed by the op's schema, priority). Raises ValueError
        naming the line it cannot read. The caller owns the program."""
        blocks = {0: {"parent": None, "vars": [], "ops": []}}
        stack = [(0, 0)]  # (indent of the block's lines, block)
        for num, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.strip().startswith("#"):
                continue
            indent = len(line) - len(line.lstrip(" "))
            while len(stack) > 1 and stack[-1][0] > indent:
                stack.pop()
            m = _BLOCK_LINE.match(line)
            if m:
                b = int(m.group(2))
                parent = int(m.group(3)) if m.group(3) is not None else stack[-1][1]
                blocks[b] = {"parent": parent, "vars": [], "ops": []}
                stack.append((indent + 2, b))
                continue
            if stack[-1][0] != indent:
                raise ValueError(f"from_text: line {num} is indented {indent}: {line!r}")
            cur = blocks[stack[-1][1]]
            m = _VAR_LINE.match(line)
            if m:
                dims = [None if d == "?" else int(d) for d in m.group(4).split(",") if d]
                cur["vars"].append((m.group(2), m.group(3), dims, m.group(5)))
                continue
            m = _OP_LINE.match(line)
            if not m:
                raise ValueError(f"from_text: line {num} is no var, op or block: {line!r}")
            cur["ops"].append((m.group(3), _names(m.group(4)), _names(m.group(5)),
                               _attrs(m.group(6) or ""), m.group(7)))
        p = cls()
        for b in range(1, len(blocks)):
            if b not in blocks or p.add_block(blocks[b]["parent"]) != b:
                raise ValueError(f"from_text: the blocks are not numbered 0 to {len(blocks) - 1}")
        stops = []
        for b, blk in sorted(blocks.items()):
            for name, dt, dims, flags in blk["vars"]:
                p.add_var(name, dt, dims, persistable="persistable" in flags, block=b)
                if "stop_gradient" in flags:
                    stops.append(name)
        for name in stops:
            p.set_stop_gradient(name, True)
        for b, blk in sorted(blocks.items()):
            for k, (typ, ins, outs, attrs, prio) in enumerate(blk["ops"]):
                p.add_op(typ, ins, outs, attrs, block=b)
                if prio is not None:
                    p.set_op_priority(b, k, int(prio))
        return p

    def __eq__(self, other):
        return isinstance(other, _Program) and self.to_bytes() == other.to_bytes()

    __hash__ = None

    def __str__(self):
        return self.dump()


# ---- training ----

class Optimizer:
    """An update rule for vq_optimizer_minimize; the options are
    vq_optimizer's (include/varq/train.h), zero meaning its default.
    minimize(main, startup, loss) differentiates main (append_backward)
    and appends one update op per parameter to main, the state's
    initialization to startup; it returns the number of parameters
    updated. Edits programs: call it from the thread building them."""

    _kind = 0

    def __init__(self, learning_rate=0.0, *, learning_rate_var=None, weight_decay=0.0,
                 clip_value=0.0, clip_norm=0.0, parameters=None, **rule):
        self.options = dict(learning_rate=float(learning_rate),
                            learning_rate_var=learning_rate_var,
                            weight_decay=float(weight_decay), clip_value=float(clip_value),
                            clip_norm=float(clip_norm),
                            parameters=None if parameters is None else list(parameters),
                            **rule)

    def minimize(self, main, startup, loss):
        """vq_optimizer_minimize(main, startup, loss, this optimizer):
        edits both programs (from the thread building them, not while a
        run of them is in flight: varq.Busy); the number of parameters
        updated. The optimizer object itself is a plain value: reusable,
        shareable between threads."""
        return _varq._optimizer_minimize(main, startup, loss, kind=self._kind, **self.options)

    def __repr__(self):
        return f"{type(self).__name__}({self.options!r})"


class SGD(Optimizer):
    """torch.optim.SGD: param -= lr * grad (weight_decay: L2 added to the
    gradient; clip_value / clip_norm: torch's clip_grad_*_ first)."""
    _kind = 0

    def __init__(self, learning_rate=0.01, **opts):
        super().__init__(learning_rate, **opts)


class Momentum(Optimizer):
    """torch.optim.SGD(momentum=mu, nesterov=...); velocity in "w@VELOCITY"."""
    _kind = 1

    def __init__(self, learning_rate=0.01, mu=0.9, nesterov=False, **opts):
        super().__init__(learning_rate, mu=float(mu), nesterov=bool(nesterov), **opts)


class Adam(Optimizer):
    """torch.optim.Adam (decoupled=True: AdamW's weight decay); state in
    "w@MOMENT1", "w@MOMENT2", "w@STEP"."""
    _kind = 2

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 decoupled=False, **opts):
        super().__init__(learning_rate, beta1=float(beta1), beta2=float(beta2),
                         epsilon=float(epsilon), decoupled=bool(decoupled), **opts)


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (default 0.01,
    torch's)."""

    def __init__(self, learning_rate=0.001, weight_decay=0.01, **opts):
        super().__init__(learning_rate, decoupled=True, weight_decay=weight_decay, **opts)


_LR_KINDS = {"step": 0, "cosine": 1, "linear": 2, "warmup_cosine": 3}


def lr_schedule(main, startup, lr_var, kind, base_lr, dtype="float32", **numbers):
    """vq_lr_schedule_build: declares lr_var in main, computed each run from
    a step counter "<lr_var>@STEP" (kept in the scope) as PyTorch's
    scheduler kind ("step": step_size, gamma; "cosine": t_max, eta_min;
    "linear": start_factor, end_factor, total_iters; "warmup_cosine": all
    of linear's and cosine's) would give it; pass lr_var to an optimizer as
    learning_rate_var. Edits the programs: from the thread building them."""
    if kind not in _LR_KINDS:
        raise InvalidArgument(f"lr_schedule: kind {kind!r} is not one of {sorted(_LR_KINDS)}")
    return _varq._lr_schedule_build(main, startup, lr_var, _LR_KINDS[kind], float(base_lr),
                                    dtype=dtype, **numbers)


class layers:
    """The layers of include/varq/train.h, each appending ops (and, for
    those with parameters, their initialization to startup) to programs
    being built: from the thread building them."""

    @staticmethod
    def linear(main, startup, x, y, out, seed=0):
        """y = x W + b, W "<y>.w" [in, out] and b "<y>.b" initialized like
        torch.nn.Linear from seed."""
        return _varq._layer("linear", main, startup, x, y, number=float(out), seed=seed)

    @staticmethod
    def activation(main, act, x, y):
        """y = act(x), act one of relu, sigmoid, tanh, softmax."""
        return _varq._layer("activation", main, None, act, x, y)

    @staticmethod
    def mse_loss(main, pred, label, loss):
        """loss = mean((pred - label)^2), a scalar."""
        return _varq._layer("mse_loss", main, None, pred, label, loss)

    @staticmethod
    def softmax_cross_entropy(main, logits, label, probs, loss):
        """probs = softmax(logits), loss = mean -log probs[label]."""
        return _varq._layer("softmax_cross_entropy", main, None, logits, label, probs, loss)

    @staticmethod
    def rng_state(main, startup, name, seed):
        """A generator state var for random ops' State input."""
        return _varq._layer("rng_state", main, startup, name, seed=seed)

    @staticmethod
    def dropout(main, x, y, p, state=None):
        """y = dropout(x) with probability p (training mode), mask "<y>.mask"."""
        return _varq._layer("dropout", main, None, x, y, state, number=float(p))
