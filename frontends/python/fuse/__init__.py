"""fuse from Python: NumPy in, NumPy out, through fuse's fusion compiler (docs/python.md).

    @fuse.jit
    def softmax(x):
        e = fuse.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    y = softmax(np.random.rand(4, 1000).astype(np.float32))

A jitted function is traced on its first call per argument signature (dtypes, ranks, which dims
are 1 and which are equal): its body runs once on traced values, which record a fuse graph, and
the graph is compiled. Sizes are symbolic, so a call with new sizes of the same pattern reuses
the compiled code. Everything here is a thin layer over the C++ API (frontends/api.h).
"""

import builtins
import inspect
import os
import sys
import threading

import numpy as np

from . import _fuse

__all__ = [
    "jit", "vectorize", "load", "grad", "value_and_grad", "Tracer", "rand", "arange", "where",
    "matmul", "reshape", "from_dlpack", "to_device", "DeviceArray", "transpose", "broadcast_to", "expand_dims", "squeeze", "astype",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_DTYPES = ("bool", "int32", "int64", "float32", "float64")


def _where():
    """(file, line) of the innermost caller outside this package: what errors point at."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


def _located(message):
    file, line = _where()
    return f"{file}:{line}: error: {message}"


# ---- Traced values ----

_trace_state = threading.local()


def _current_graph(what):
    graph = getattr(_trace_state, "graph", None)
    if graph is None:
        raise TypeError(_located(f"fuse.{what} is only available inside a @fuse.jit function"))
    return graph


def _operand(x):
    """A traced tensor or a weakly typed Python scalar, as the C++ side takes them."""
    if isinstance(x, Tracer):
        return x._t
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, np.generic) and x.dtype.name in _DTYPES:
        return x.item()
    if isinstance(x, np.ndarray):
        raise TypeError(_located("a NumPy array inside a traced function must be passed as an argument "
                                 "of the jitted function"))
    raise TypeError(_located(f"unsupported operand of type {type(x).__name__}: expected a traced value "
                             "or a Python bool, int or float"))


def _wrap(t):
    return Tracer(t)


def _unary(op, x):
    if not isinstance(x, Tracer):
        _operand(x)
        raise TypeError(_located(f"fuse.{op} takes a traced value inside a @fuse.jit function"))
    return Tracer(_fuse.unary(op, x._t, _where()))


def _binary(op, a, b):
    if not isinstance(a, Tracer) and not isinstance(b, Tracer):
        _operand(a), _operand(b)
        raise TypeError(_located(f"fuse.{op} needs a traced value among its operands"))
    return Tracer(_fuse.binary(op, _operand(a), _operand(b), _where()))


def _tensor(x, what):
    if not isinstance(x, Tracer):
        _operand(x)
        raise TypeError(_located(f"{what} takes a traced value, not {type(x).__name__}"))
    return x._t


def _no_truth(*_):
    raise TypeError(_located("a traced value has no truth value; use fuse.where(cond, a, b) instead of "
                             "Python control flow (if, while, and, or, not) on it"))


class Tracer:
    """A value inside a traced (@fuse.jit) function: a node of the graph being recorded. Supports
    NumPy's operators and methods; sizes may be symbolic (shape entries are then strings)."""

    __slots__ = ("_t",)
    __array_priority__ = 1000  # NumPy scalars on the left defer to our reflected operators
    __array_ufunc__ = None

    def __init__(self, t):
        self._t = t

    dtype = property(lambda self: np.dtype(self._t.dtype))
    shape = property(lambda self: self._t.shape)
    ndim = property(lambda self: self._t.ndim)
    T = property(lambda self: transpose(self))

    def __repr__(self):
        return f"Tracer({self._t.dtype}{list(self.shape)})"

    __bool__ = _no_truth
    __index__ = _no_truth
    __int__ = _no_truth
    __float__ = _no_truth

    def __iter__(self):
        raise TypeError(_located("a traced value cannot be iterated over"))

    def __array__(self, *_):
        raise TypeError(_located("a traced value cannot become a NumPy array inside a traced function"))

    __add__ = lambda a, b: _binary("add", a, b)
    __radd__ = lambda a, b: _binary("add", b, a)
    __sub__ = lambda a, b: _binary("subtract", a, b)
    __rsub__ = lambda a, b: _binary("subtract", b, a)
    __mul__ = lambda a, b: _binary("multiply", a, b)
    __rmul__ = lambda a, b: _binary("multiply", b, a)
    __truediv__ = lambda a, b: _binary("divide", a, b)
    __rtruediv__ = lambda a, b: _binary("divide", b, a)
    __floordiv__ = lambda a, b: _binary("floor_divide", a, b)
    __rfloordiv__ = lambda a, b: _binary("floor_divide", b, a)
    __mod__ = lambda a, b: _binary("mod", a, b)
    __rmod__ = lambda a, b: _binary("mod", b, a)
    __pow__ = lambda a, b: _binary("power", a, b)
    __rpow__ = lambda a, b: _binary("power", b, a)
    __matmul__ = lambda a, b: matmul(a, b)
    __rmatmul__ = lambda a, b: matmul(b, a)
    __lt__ = lambda a, b: _binary("less", a, b)
    __le__ = lambda a, b: _binary("less_equal", a, b)
    __gt__ = lambda a, b: _binary("greater", a, b)
    __ge__ = lambda a, b: _binary("greater_equal", a, b)
    __eq__ = lambda a, b: _binary("equal", a, b)
    __ne__ = lambda a, b: _binary("not_equal", a, b)
    __and__ = lambda a, b: _binary("logical_and", a, b)
    __rand__ = lambda a, b: _binary("logical_and", b, a)
    __or__ = lambda a, b: _binary("logical_or", a, b)
    __ror__ = lambda a, b: _binary("logical_or", b, a)
    __neg__ = lambda a: _unary("negative", a)
    __pos__ = lambda a: a
    __abs__ = lambda a: _unary("abs", a)
    __invert__ = lambda a: _unary("logical_not", a)
    __hash__ = object.__hash__

    def sum(self, axis=None, keepdims=False):
        return _reduce("sum", self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _reduce("mean", self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _reduce("max", self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _reduce("min", self, axis, keepdims)

    def prod(self, axis=None, keepdims=False):
        return _reduce("prod", self, axis, keepdims)

    def any(self, axis=None, keepdims=False):
        return _reduce("any", self, axis, keepdims)

    def all(self, axis=None, keepdims=False):
        return _reduce("all", self, axis, keepdims)

    def argmax(self, axis=None):
        return argmax(self, axis)

    def argmin(self, axis=None):
        return argmin(self, axis)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = axes[0]
        return transpose(self, axes or None)

    def astype(self, dtype):
        return astype(self, dtype)

    def argmax(self, axis=None, keepdims=False):
        return _reduce("argmax", self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return _reduce("argmin", self, axis, keepdims)

    def cumsum(self, axis=None):
        return cumsum(self, axis)

    def cumprod(self, axis=None):
        return cumprod(self, axis)

    def clip(self, lo, hi):
        return clip(self, lo, hi)

    def __getitem__(self, index):
        """NumPy's basic indexing, as a view: integers, slices (negative bounds and steps), None
        and `...`. Arrays as indices (advanced indexing) are not supported: use fuse.take."""
        items = index if isinstance(index, tuple) else (index,)
        spec = []
        for item in items:
            if item is None:
                spec.append(("none",))
            elif item is Ellipsis:
                spec.append(("ellipsis",))
            elif isinstance(item, slice):
                for bound in (item.start, item.stop, item.step):
                    if bound is not None and not _is_int(bound):
                        raise TypeError(_located(f"slice bounds must be ints or None, not {type(bound).__name__}"))
                spec.append(("slice", item.start, item.stop, item.step))
            elif _is_int(item):
                spec.append(("int", int(item)))
            else:
                raise TypeError(_located(f"a traced value is indexed by ints, slices, None and ..., not "
                                         f"{type(item).__name__} (use fuse.take for arrays of indices)"))
        return Tracer(_fuse.index(self._t, spec, repr(index), _where()))


def _axis(axis):
    if axis is None or isinstance(axis, int):
        return axis
    if isinstance(axis, (tuple, list)) and builtins.all(isinstance(a, int) for a in axis):
        return list(axis)
    raise TypeError(_located(f"axis must be an int, a tuple of ints or None, not {type(axis).__name__}"))


def _reduce(kind, x, axis, keepdims):
    return Tracer(_fuse.reduce(kind, _tensor(x, f"fuse.{kind}"), _axis(axis), bool(keepdims), _where()))


# ---- fuse.<name>: NumPy's names for the language's builtins ----

def _make_unary(op, name):
    def f(x):
        return _unary(op, x)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"np.{name} elementwise on a traced value."
    return f


def _make_binary(op, name):
    def f(a, b):
        return _binary(op, a, b)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"np.{name} elementwise, with broadcasting."
    return f


_UNARY = {  # NumPy name -> fuse's op
    "abs": "abs", "absolute": "abs", "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
    "sigmoid": "sigmoid", "relu": "relu", "floor": "floor", "ceil": "ceil", "round": "round",
    "rint": "round", "log1p": "log1p", "expm1": "expm1", "erf": "erf", "arcsin": "asin", "arccos": "acos",
    "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "sign": "sign", "isnan": "isnan", "isinf": "isinf",
    "isfinite": "isfinite", "negative": "negative", "logical_not": "logical_not",
}
_BINARY = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "true_divide": "divide", "floor_divide": "floor_divide", "mod": "mod", "remainder": "mod",
    "power": "power", "pow": "power", "minimum": "minimum", "maximum": "maximum", "arctan2": "atan2",
    "less": "less", "less_equal": "less_equal", "greater": "greater", "greater_equal": "greater_equal",
    "equal": "equal", "not_equal": "not_equal", "logical_and": "logical_and", "logical_or": "logical_or",
}
for _name, _op in _UNARY.items():
    globals()[_name] = _make_unary(_op, _name)
for _name, _op in _BINARY.items():
    globals()[_name] = _make_binary(_op, _name)
__all__ += list(_UNARY) + list(_BINARY)


def _make_reduction(kind):
    def f(x, axis=None, keepdims=False):
        return _reduce(kind, x, axis, keepdims)
    f.__name__ = f.__qualname__ = kind
    f.__doc__ = f"np.{kind} over `axis` (None: every axis)."
    return f


for _kind in ("sum", "mean", "max", "min", "prod", "any", "all"):
    globals()[_kind] = _make_reduction(_kind)
__all__ += ["sum", "mean", "max", "min", "prod", "any", "all"]
amax, amin = globals()["max"], globals()["min"]


def where(cond, a, b):
    """np.where(cond, a, b): elementwise select, with broadcasting."""
    if not builtins.any(isinstance(v, Tracer) for v in (cond, a, b)):
        raise TypeError(_located("fuse.where needs a traced value among its operands"))
    return Tracer(_fuse.where(_operand(cond), _operand(a), _operand(b), _where()))


def matmul(a, b):
    """np.matmul: 1-D operands are promoted to matrices and the added dim dropped."""
    return Tracer(_fuse.matmul(_tensor(a, "fuse.matmul"), _tensor(b, "fuse.matmul"), _where()))


dot = matmul


def reshape(x, shape):
    """np.reshape; one dim may be -1. Dims are ints or the symbolic names that .shape gives."""
    if isinstance(shape, int):
        shape = (shape,)
    return Tracer(_fuse.reshape(_tensor(x, "fuse.reshape"), list(shape), _where()))


def transpose(x, axes=None):
    """np.transpose: reverses the axes, or permutes them by `axes`."""
    return Tracer(_fuse.transpose(_tensor(x, "fuse.transpose"), None if axes is None else list(axes), _where()))


def broadcast_to(x, shape):
    return Tracer(_fuse.broadcast_to(_tensor(x, "fuse.broadcast_to"), list(shape), _where()))


def expand_dims(x, axis):
    return Tracer(_fuse.expand_dims(_tensor(x, "fuse.expand_dims"), int(axis), _where()))


def squeeze(x, axis=None):
    return Tracer(_fuse.squeeze(_tensor(x, "fuse.squeeze"), _axis(axis), _where()))


def _dtype_name(dtype):
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(_located(f"unknown dtype {dtype!r}")) from None
    if name not in _DTYPES:
        raise TypeError(_located(f"unsupported dtype {name}: fuse takes bool, int32, int64, float32 and float64"))
    return name


def astype(x, dtype):
    """x converted to `dtype` (floats to ints truncate and saturate, NaN gives 0)."""
    return Tracer(_fuse.cast(_tensor(x, "astype"), _dtype_name(dtype), _where()))


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def argmax(x, axis=None, keepdims=False):
    """np.argmax: int64 position of the first maximum (the first NaN wins); axis=None: of the
    flattened array."""
    return _reduce("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """np.argmin: int64 position of the first minimum (the first NaN wins)."""
    return _reduce("argmin", x, axis, keepdims)


def cumsum(x, axis=None):
    """np.cumsum along `axis` (None: of the flattened array); dtypes as fuse.sum."""
    return Tracer(_fuse.scan("cumsum", _tensor(x, "fuse.cumsum"), axis, _where()))


def cumprod(x, axis=None):
    """np.cumprod along `axis` (None: of the flattened array); dtypes as fuse.prod."""
    return Tracer(_fuse.scan("cumprod", _tensor(x, "fuse.cumprod"), axis, _where()))


def clip(x, lo, hi):
    """np.clip(x, lo, hi), broadcasting; NaN stays NaN."""
    if not builtins.any(isinstance(v, Tracer) for v in (x, lo, hi)):
        raise TypeError(_located("fuse.clip needs a traced value among its operands"))
    return Tracer(_fuse.clip(_operand(x), _operand(lo), _operand(hi), _where()))


def _tensors(arrays, what):
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(_located(f"{what} takes a list or tuple of traced values"))
    return [_tensor(a, what) for a in arrays]


def concatenate(arrays, axis=0):
    """np.concatenate along `axis` (operands of one dtype: cast first)."""
    return Tracer(_fuse.concatenate("concatenate", _tensors(arrays, "fuse.concatenate"), int(axis), _where()))


def stack(arrays, axis=0):
    """np.stack: the operands (of one shape) along a new axis."""
    return Tracer(_fuse.concatenate("stack", _tensors(arrays, "fuse.stack"), int(axis), _where()))


def pad(x, pad_width, mode="constant", constant_values=0):
    """np.pad with one (before, after) pair per axis (or one pair / one int for every axis);
    mode "constant", "edge" or "reflect"."""
    t = _tensor(x, "fuse.pad")
    rank = len(x.shape)
    if _is_int(pad_width):
        widths = [(int(pad_width), int(pad_width))] * rank
    else:
        pw = [tuple(p) if isinstance(p, (list, tuple)) else (p, p) for p in pad_width]
        if len(pw) == 2 and builtins.all(_is_int(p) for p in pad_width):
            widths = [(int(pad_width[0]), int(pad_width[1]))] * rank
        elif len(pw) == 1:
            widths = [tuple(int(v) for v in pw[0])] * rank
        else:
            widths = [tuple(int(v) for v in p) for p in pw]
    if len(widths) != rank or builtins.any(len(w) != 2 for w in widths):
        raise ValueError(_located(f"fuse.pad: pad_width needs one (before, after) pair for each of {rank} axes"))
    return Tracer(_fuse.pad(t, widths, str(mode), float(constant_values), _where()))


def take(x, indices, axis=0):
    """np.take(x, indices, axis): negative indices count from the end; out of range is a run-time error."""
    return Tracer(_fuse.gather("take", _tensor(x, "fuse.take"), _tensor(indices, "fuse.take"), None, int(axis), _where()))


def take_along_axis(x, indices, axis):
    """np.take_along_axis(x, indices, axis)."""
    return Tracer(_fuse.gather("take_along_axis", _tensor(x, "fuse.take_along_axis"),
                               _tensor(indices, "fuse.take_along_axis"), None, int(axis), _where()))


def index_add(x, indices, values, axis=0):
    """A copy of x with `values` added at `indices` along `axis`, repeats accumulating (np.add.at on a copy)."""
    return Tracer(_fuse.gather("index_add", _tensor(x, "fuse.index_add"), _tensor(indices, "fuse.index_add"),
                               _tensor(values, "fuse.index_add"), int(axis), _where()))


def bincount(x, weights=None, minlength=None):
    """np.bincount with exactly `minlength` bins (required: fuse shapes do not depend on data; a
    value outside [0, minlength) is a run-time error). Counts are int64; weighted sums keep the
    weights' dtype."""
    if minlength is None or not _is_int(minlength) or minlength < 1:
        raise TypeError(_located("fuse.bincount needs minlength=K (a positive int): the result has exactly K bins"))
    w = None if weights is None else _tensor(weights, "fuse.bincount")
    return Tracer(_fuse.bincount(_tensor(x, "fuse.bincount"), int(minlength), w, _where()))


def histogram(x, bins, range):
    """np.histogram(x, bins, range)[0]: int64 counts (the edges are not returned)."""
    if not _is_int(bins):
        raise TypeError(_located("fuse.histogram needs bins as an int"))
    lo, hi = range
    return Tracer(_fuse.histogram(_tensor(x, "fuse.histogram"), int(bins), float(lo), float(hi), _where()))


__all__ += ["argmax", "argmin", "cumsum", "cumprod", "clip", "concatenate", "stack", "pad", "take",
            "take_along_axis", "index_add", "bincount", "histogram"]


def rand(*shape, seed=0):
    """float32 uniform in [0, 1) of `shape`, counter-based (Philox): a seed gives the same numbers
    on every backend. Inside a traced function only."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return Tracer(_current_graph("rand").rand(list(shape), int(seed), _where()))


class _Random:
    """fuse.random.rand, like np.random.rand."""
    rand = staticmethod(rand)


random = _Random()


def arange(n):
    """int64 0..n-1 (n an int or a symbolic size from .shape). Inside a traced function only."""
    return Tracer(_current_graph("arange").arange(n))


def _draw(text, path):
    """Dot text, or drawn to `path` (.svg or .png by Graphviz; another name gets the text)."""
    if path is None:
        return text
    ext = os.path.splitext(str(path))[1].lstrip(".")
    data = _fuse.render(text, ext) if _fuse.is_image_format(ext) else text.encode()
    with open(path, "wb") as f:
        f.write(data)
    return path


# ---- Jitted functions ----

class _Tracing:
    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        self.previous = getattr(_trace_state, "graph", None)
        _trace_state.graph = self.graph

    def __exit__(self, *_):
        _trace_state.graph = self.previous


def _parameter_names(fn, count):
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(count):
        name = params[i] if i < len(params) and params[i] not in names else f"arg{i}"
        names.append(name)
    return names


def _trace_inputs(graph, fn, args):
    """Graph inputs for the array arguments (symbolic sizes: 1 stays 1, equal sizes share a
    symbol, as the dispatcher keys them); Python scalars stay weakly typed literals."""
    names = _parameter_names(fn, len(args))
    symbols = {}
    params = []
    for name, a in zip(names, args):
        if isinstance(a, (bool, int, float)):
            params.append(a)
            continue
        if isinstance(a, DeviceArray):
            arr = a
        elif isinstance(a, np.ndarray):
            arr = a
        elif hasattr(a, "__dlpack__"):
            arr = np.from_dlpack(a)
        else:
            arr = np.asarray(a)
        dims = [1 if d == 1 else symbols.setdefault(d, f"{name}_{len(symbols)}") for d in arr.shape]
        params.append(Tracer(graph.input(name, _dtype_name(arr.dtype), dims)))
    return params


def _outputs(graph, result, what):
    results = result if isinstance(result, tuple) else (result,)
    for i, r in enumerate(results):
        if not isinstance(r, Tracer):
            raise TypeError(_located(f"{what} must return traced values (or a tuple of them), "
                                     f"not {type(r).__name__}"))
        graph.output(f"out{i}", r._t)


class JitFunction(_fuse.Dispatcher):
    """A function compiled by fuse on its first call per argument signature. Calling it runs the
    compiled code on NumPy arrays (read in place when contiguous) and returns NumPy arrays that
    own fuse's output buffers."""

    def __init__(self, fn, target="cpu", build=None):
        super().__init__()
        self.fn = fn
        self.target = target
        self._build = build or self._build_plain
        self.__name__ = getattr(fn, "__name__", "jit")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def _build_plain(self, graph, params):
        _outputs(graph, self.fn(*params), f"@fuse.jit function {self.__name__}")

    def _trace(self, args):
        graph = _fuse.Graph()
        with _Tracing(graph):
            params = _trace_inputs(graph, self.fn, args)
            self._build(graph, params)
        return graph.compile(self.target)

    def _program(self):
        if self.last is None:
            raise RuntimeError(f"{self.__name__} has not been called yet: call it once so that it is traced")
        return self.last

    def explain(self, file=None):
        """Prints the fusion explanation (as fusec --explain-fusion) of the last traced call."""
        text = self._program().explain()
        print(text, end="", file=file)
        return None

    def explanation(self):
        return self._program().explain()

    def ir(self, stage="fused"):
        """The compilation of the last traced call at `stage`: "graph", "fused", "mlir", "llvm",
        "asm" (cpu) or "ptx" (cuda)."""
        return self._program().stage(stage)

    def dot(self, path=None, fused=True):
        """The fused graph as Graphviz dot text, or drawn to `path` (.svg or .png; .dot: the text)."""
        return _draw(self._program().dot(fused, self.__name__), path)

    def kernel_count(self):
        """How many kernels the last traced call's fused program launches."""
        return self._program().kernel_count()


def jit(fn=None, *, target="cpu"):
    """Compiles `fn` with fuse: @fuse.jit or @fuse.jit(target="cpu" | "cuda" | "cuda-sim")."""
    if target not in ("cpu", "cuda", "cuda-sim"):
        raise ValueError(f"unknown target {target!r}: expected 'cpu', 'cuda' or 'cuda-sim'")
    if fn is None:
        return lambda f: JitFunction(f, target)
    return JitFunction(fn, target)


def vectorize(fn=None, *, target="cpu"):
    """A scalar function applied elementwise with broadcasting (Numba's @vectorize). Its body is
    traced on whole arrays, which is the same thing for elementwise code, and fuses into one
    kernel; a reduction or reshape inside it is an error."""
    if fn is None:
        return lambda f: vectorize(f, target=target)

    def build(graph, params):
        result = fn(*params)
        results = result if isinstance(result, tuple) else (result,)
        arrays = [p for p in params if isinstance(p, Tracer)]
        for r in results:
            if isinstance(r, Tracer) and arrays:
                for a in arrays:
                    if len(r.shape) < len(a.shape):
                        raise ValueError(_located(f"@fuse.vectorize function {fn.__name__} is not elementwise: "
                                                  f"a result has shape {list(r.shape)}"))
        _outputs(graph, result, f"@fuse.vectorize function {fn.__name__}")

    jf = JitFunction(fn, target, build)
    return jf


def _argnums(argnums):
    if isinstance(argnums, int):
        return [argnums], True
    return list(argnums), False


def _grad_builder(fn, argnums, with_value):
    nums, single = _argnums(argnums)

    def build(graph, params):
        y = fn(*params)
        if isinstance(y, tuple):
            raise TypeError(_located("fuse.grad differentiates a function with one result"))
        if not isinstance(y, Tracer):
            raise TypeError(_located(f"fuse.grad: the function must return a traced value, not {type(y).__name__}"))
        wrt = []
        for n in nums:
            if n >= len(params) or not isinstance(params[n], Tracer):
                raise TypeError(_located(f"fuse.grad: argument {n} is not an array argument"))
            wrt.append(params[n]._t)
        grads = _fuse.vjp(y._t, wrt, _where())
        outputs = ([y._t] if with_value else []) + grads
        for i, t in enumerate(outputs):
            graph.output(f"out{i}", t)

    return build, single


class _GradFunction:
    def __init__(self, fn, argnums, with_value, target):
        build, self._single = _grad_builder(fn, argnums, with_value)
        self._with_value = with_value
        self._jit = JitFunction(fn, target, build)
        self.__name__ = "grad_" + getattr(fn, "__name__", "f")

    def __call__(self, *args):
        out = self._jit(*args)
        out = out if isinstance(out, tuple) else (out,)
        if self._with_value:
            value, grads = out[0], out[1:]
            return value, (grads[0] if self._single else tuple(grads))
        return out[0] if self._single else tuple(out)

    def __getattr__(self, name):  # explain, ir, dot, kernel_count
        return getattr(self._jit, name)


def grad(fn, argnums=0, *, target="cpu"):
    """The gradient of `fn` (a scalar result; else of its sum) with respect to the arguments in
    `argnums`, as a jitted function: one array for an int argnums, a tuple for a list (MinPy's grad)."""
    return _GradFunction(fn, argnums, False, target)


def value_and_grad(fn, argnums=0, *, target="cpu"):
    """(fn(*args), grad(fn, argnums)(*args)) from one compiled program (MinPy's grad_and_loss)."""
    return _GradFunction(fn, argnums, True, target)


# ---- Device arrays ----

DeviceArray = _fuse.DeviceArray
DeviceArray.__doc__ = """An array in CUDA device memory (a GPU's, or the simulated device's), like Numba's
device arrays: `shape`, `dtype`, `copy_to_host()`, `__cuda_array_interface__` (real GPUs). A
function jitted for "cuda" or "cuda-sim" called on DeviceArrays returns DeviceArrays, so data
stays on the device between calls."""


def to_device(array, target=None):
    """A copy of `array` in device memory. target: "cuda" (GPU 0) or "cuda-sim" (the simulated
    device); by default "cuda-sim" when FUSE_CUDA_SIM=1, else "cuda"."""
    if target is None:
        target = "cuda-sim" if os.environ.get("FUSE_CUDA_SIM") == "1" else "cuda"
    if target not in ("cuda", "cuda-sim"):
        raise ValueError(f"fuse.to_device: unknown target {target!r}: expected 'cuda' or 'cuda-sim'")
    return _fuse.to_device(array, target == "cuda-sim")


# ---- DLPack ----

def from_dlpack(obj):
    """A NumPy array sharing `obj`'s memory (a CPU tensor with __dlpack__: NumPy's, PyTorch's, ...).
    fuse's results are NumPy arrays, so they export themselves (np.from_dlpack(y), torch.from_dlpack(y));
    jitted functions take DLPack objects directly, also without copying."""
    return np.from_dlpack(obj)


# ---- .expr programs ----

class ExprProgram:
    """A .expr program as a callable: prog(x=..., ...) returns a dict of its outputs by name."""

    def __init__(self, path, target="cpu"):
        self.path = str(path)
        self._graph = _fuse.load_expr(self.path)
        self.inputs = {name: (dtype, shape) for name, dtype, shape in _fuse.input_specs(self._graph)}
        self._program = self._graph.compile(target)
        self.outputs = list(self._program.output_names)

    def __call__(self, *args, **kwargs):
        names = list(self._program.input_names)
        if len(args) > len(names):
            raise TypeError(f"{self.path} takes {len(names)} inputs, got {len(args)} positional arguments")
        values = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise TypeError(f"{self.path} has no input '{k}' (inputs: {', '.join(names) or 'none'})")
            if k in values:
                raise TypeError(f"input '{k}' given twice")
            values[k] = v
        missing = [n for n in names if n not in values]
        if missing:
            raise TypeError(f"{self.path}: missing input(s) {', '.join(missing)}")
        arrays = []
        for n in names:
            v = values[n]
            if isinstance(v, (bool, int, float)):
                v = np.asarray(v, dtype=self.inputs[n][0])
            arrays.append(v)
        return dict(zip(self.outputs, self._program.run(arrays)))

    def explain(self, file=None):
        print(self._program.explain(), end="", file=file)

    def ir(self, stage="fused"):
        return self._program.stage(stage)

    def dot(self, path=None, fused=True):
        return _draw(self._program.dot(fused, self.__name__), path)

    @property
    def __name__(self):
        return os.path.splitext(os.path.basename(self.path))[0]


def load(path, target="cpu"):
    """A .expr program (docs/language.md) compiled for `target`, as a callable."""
    return ExprProgram(path, target)
