"""fuse.jit: tracing, dtypes, odd sizes and broadcasting against NumPy; zero copy; lifetimes and
threads; errors; grad; vectorize; explain/ir/dot."""
import gc
import os
import sys
import threading
import weakref

import numpy as np
import pytest

import fuse

DTYPES = [np.bool_, np.int32, np.int64, np.float32, np.float64]
SIZES = [1, 7, 1023]
rng = np.random.default_rng(0)


def array(shape, dtype):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@fuse.jit
def softmax(x):
    e = fuse.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ---- arithmetic across dtypes, sizes and broadcasting ----

@fuse.jit
def arith(a, b):
    return a + b, a - b, a * b, a < b, a == b, -a if a.dtype != np.bool_ else a


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_arithmetic_matches_numpy(dtype, n):
    a, b = array((n, 3), dtype), array((3,), dtype)
    got = arith(a, b)
    want = (a + b, a - b, a * b, a < b, a == b, -a)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_bool_logic(n):
    f = fuse.jit(lambda a, b: ((a & b) | ~a, fuse.logical_not(b)))
    a, b = array((n,), np.bool_), array((n,), np.bool_)
    x, y = f(a, b)
    np.testing.assert_array_equal(x, (a & b) | ~a)
    np.testing.assert_array_equal(y, ~b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_modulo_power(dtype):
    f = fuse.jit(lambda a, b: (a / b, a // b, a % b, abs(a) ** 2, 2 ** a))
    a = array((7, 5), dtype)
    b = array((5,), dtype) + 3
    for g, w in zip(f(a, b), (a / b, a // b, a % b, np.abs(a) ** 2, 2 ** a)):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_integer_division_gives_float32_and_python_modulo():
    f = fuse.jit(lambda a, b: (a / b, a // b, a % b))
    a = np.array([-7, 7, -8, 9], np.int32)
    b = np.array([2, -2, 3, 4], np.int32)
    q, fq, m = f(a, b)
    assert q.dtype == np.float32
    np.testing.assert_allclose(q, a / b, rtol=1e-6)
    np.testing.assert_array_equal(fq, a // b)
    np.testing.assert_array_equal(m, a % b)


def test_python_scalars_are_weakly_typed():
    f = fuse.jit(lambda x, s: x * s + 1)
    x = array((10,), np.float32)
    y = f(x, 2.5)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x * np.float32(2.5) + 1, rtol=1e-6)
    np.testing.assert_allclose(f(x, 3.0), x * 3 + 1, rtol=1e-6)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "tanh", "floor", "ceil", "arctan", "expm1",
                                  "log1p", "sign", "abs"])
def test_unary_functions(name):
    x = rng.uniform(0.1, 3, (7, 9)).astype(np.float64)
    got = fuse.jit(lambda x: getattr(fuse, name)(x))(x)
    np.testing.assert_allclose(got, getattr(np, name)(x), rtol=1e-12)


def test_binary_functions_and_where():
    f = fuse.jit(lambda a, b: (fuse.minimum(a, b), fuse.maximum(a, b), fuse.arctan2(a, b),
                               fuse.where(a > b, a, b * 2), fuse.power(fuse.abs(a), b)))
    a, b = array((1023,), np.float64), array((1023,), np.float64)
    want = (np.minimum(a, b), np.maximum(a, b), np.arctan2(a, b), np.where(a > b, a, b * 2), np.abs(a) ** b)
    for g, w in zip(f(a, b), want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


# ---- reductions, matmul, views ----

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reductions(n, dtype):
    f = fuse.jit(lambda x: (x.sum(), x.sum(axis=0), x.mean(axis=1, keepdims=True), x.max(axis=-1),
                            x.min(axis=(0, 1)), x.prod(axis=1), (x > 0).any(axis=1), (x > -3).all()))
    x = array((n, 4), dtype)
    want = (x.sum(), x.sum(axis=0), x.mean(axis=1, keepdims=True), x.max(axis=-1), x.min(axis=(0, 1)),
            x.prod(axis=1), (x > 0).any(axis=1), (x > -3).all())
    for g, w in zip(f(x), want):
        w = np.asarray(w)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4)


@pytest.mark.parametrize("n", SIZES)
def test_matmul_and_views(n):
    f = fuse.jit(lambda a, b: (a @ b, fuse.matmul(a, b).T, a.reshape(-1), a.transpose(1, 0), a.T.reshape(a.shape[1], -1),
                               fuse.expand_dims(b, 0), b.astype(np.int32)))
    a, b = array((n, 4), np.float64), array((4, 3), np.float64)
    want = (a @ b, (a @ b).T, a.reshape(-1), a.T, a.T.reshape(4, -1), b[None], b.astype(np.int32))
    for g, w in zip(f(a, b), want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_softmax_sizes_are_symbolic():
    f = fuse.jit(softmax.fn)
    for shape in [(4, 1000), (5, 1000), (4, 2000), (3, 9)]:
        x = array(shape, np.float32)
        np.testing.assert_allclose(f(x), np_softmax(x), rtol=1e-5, atol=1e-7)
    assert f.cache_size == 1  # every shape had the same pattern (no 1s, no equal dims)
    f(array((1, 9), np.float32))  # a size-1 dim is another specialization
    assert f.cache_size == 2
    f(array((3, 9), np.float64))  # so is another dtype
    assert f.cache_size == 3


def test_kernel_count_after_fusion():
    softmax(array((4, 100), np.float32))
    assert softmax.kernel_count() == 1


def test_several_results_are_a_tuple():
    f = fuse.jit(lambda x: (x + 1, x * 2))
    out = f(np.ones(3))
    assert isinstance(out, tuple) and len(out) == 2


def test_random_and_no_arguments():
    f = fuse.jit(lambda: fuse.rand(1000, seed=3))
    a, b = f(), f()
    assert a.dtype == np.float32 and a.shape == (1000,)
    np.testing.assert_array_equal(a, b)
    assert 0 <= a.min() and a.max() < 1


# ---- memory: zero copy, ownership, lifetimes, threads ----

def test_inputs_are_read_in_place():
    # The address a call hands the kernels: the array's own memory when it is contiguous and
    # aligned, a copy's otherwise.
    x = array((1000,), np.float32)
    assert fuse._fuse.input_address(x) == x.ctypes.data
    assert fuse._fuse.input_address(x[10:]) == x[10:].ctypes.data
    assert fuse._fuse.input_address(x[::2]) != x[::2].ctypes.data
    f = fuse.jit(lambda x: x * 1.0)
    y = f(x)
    assert y.ctypes.data != x.ctypes.data
    np.testing.assert_array_equal(y, x)


def test_outputs_own_their_buffers():
    f = fuse.jit(lambda x: x + 1)
    y = f(np.zeros(100, np.float32))
    assert y.flags.writeable and y.flags.c_contiguous
    assert y.base is not None and type(y.base).__name__ == "PyCapsule"
    y2 = f(np.zeros(100, np.float32))
    assert y2.ctypes.data != y.ctypes.data  # each call returns fresh arrays; earlier ones stay valid
    np.testing.assert_array_equal(y, 1)


def test_non_contiguous_inputs():
    f = fuse.jit(lambda x, y: x + y)
    base = array((8, 10), np.float64)
    x = base[:, ::2]
    y = base.T[::2, :8].T[:, :5]
    np.testing.assert_allclose(f(x, y), x + y)
    big_endian = np.arange(5, dtype=">f8")
    np.testing.assert_allclose(f(big_endian, big_endian), 2 * np.arange(5))


def test_output_outlives_function():
    def make():
        f = fuse.jit(lambda x: x * 3)
        return f(np.arange(10, dtype=np.int64)), weakref.ref(f)
    y, ref = make()
    gc.collect()
    assert ref() is None  # the function and its compiled code are freed; the output stays
    np.testing.assert_array_equal(y, np.arange(10) * 3)


def test_refcounts_do_not_grow():
    x = array((100,), np.float32)
    f = fuse.jit(lambda x: x + 1)
    f(x)
    before = sys.getrefcount(x)
    for _ in range(100):
        f(x)
    assert sys.getrefcount(x) == before


def test_two_threads_at_once():
    f = fuse.jit(lambda x: (x * 2).sum(axis=1))
    inputs = [array((500, 64), np.float64) for _ in range(4)]
    alone = [f(x) for x in inputs]  # each call alone; concurrent calls must give exactly these
    for x, y in zip(inputs, alone):
        np.testing.assert_allclose(y, (x * 2).sum(axis=1), rtol=1e-10)
    errors = []

    def work(x, expected):
        try:
            for _ in range(50):
                np.testing.assert_array_equal(f(x), expected)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(x, y)) for x, y in zip(inputs, alone)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ---- errors ----

THIS_FILE = os.path.abspath(__file__)


def line_of(marker):
    with open(THIS_FILE) as f:
        for i, text in enumerate(f, 1):
            if marker in text and "line_of(" not in text:
                return i
    raise AssertionError(marker)


def test_shape_error_is_value_error_with_python_line():
    def bad(a, b):
        return a + b  # MARK-shape
    with pytest.raises(ValueError) as e:
        fuse.jit(bad)(np.ones((3, 4)), np.ones((5,)))
    assert f"{THIS_FILE}:{line_of('MARK-shape')}" in str(e.value)
    assert "broadcast" in str(e.value)


def test_matmul_shape_error():
    with pytest.raises(ValueError, match="matmul"):
        fuse.jit(lambda a, b: a @ b)(np.ones((3, 4)), np.ones((5, 2)))


def test_unsupported_dtype_is_type_error():
    with pytest.raises(TypeError, match="float16"):
        fuse.jit(lambda x: x + 1)(np.ones(3, np.float16))
    with pytest.raises(TypeError, match="complex"):
        fuse.jit(lambda x: x + 1)(np.ones(3, np.complex64))
    with pytest.raises(TypeError):
        fuse.jit(lambda x: x + 1)("hello")
    with pytest.raises(TypeError):
        fuse.jit(lambda x: x + "a")(np.ones(3))
    with pytest.raises(TypeError, match="unsupported dtype"):
        fuse.jit(lambda x: x.astype(np.float16))(np.ones(3))


def test_gradient_of_an_integer_is_type_error():
    with pytest.raises(TypeError, match="float"):
        fuse.grad(lambda x: x * 2)(np.ones(3, np.int32))


def test_control_flow_on_traced_value():
    def branchy(x):
        if x.sum() > 0:  # MARK-bool
            return x
        return -x
    with pytest.raises(TypeError, match="no truth value; use fuse.where") as e:
        fuse.jit(branchy)(np.ones(3))
    assert f"{THIS_FILE}:{line_of('MARK-bool')}" in str(e.value)


def test_bad_axis_and_bad_results():
    with pytest.raises(ValueError):
        fuse.jit(lambda x: x.sum(axis=5))(np.ones((2, 3)))
    with pytest.raises(TypeError, match="must return traced values"):
        fuse.jit(lambda x: 3)(np.ones(3))
    with pytest.raises(TypeError):
        fuse.jit(lambda x: x.sum(axis="a"))(np.ones(3))


def test_errors_leave_the_function_usable():
    f = fuse.jit(lambda a, b: a + b)
    with pytest.raises(ValueError):
        f(np.ones(3), np.ones(4))
    np.testing.assert_array_equal(f(np.ones(3), np.ones(3)), 2)


def test_functions_outside_a_trace():
    with pytest.raises(TypeError, match="traced function"):
        fuse.exp(np.ones(3))
    with pytest.raises(TypeError, match="inside a @fuse.jit"):
        fuse.exp(2.0)
    with pytest.raises(TypeError):
        fuse.rand(3)


def test_unknown_target():
    with pytest.raises(ValueError):
        fuse.jit(lambda x: x, target="tpu")


# ---- vectorize, grad ----

def test_vectorize_hypot_broadcasts():
    @fuse.vectorize
    def hypot(x, y):
        x, y = abs(x), abs(y)
        t = fuse.minimum(x, y) / fuse.maximum(x, y)
        return fuse.maximum(x, y) * fuse.sqrt(1 + t * t)
    x, y = array((7, 1), np.float64) + 5, array((1023,), np.float64) + 5
    np.testing.assert_allclose(hypot(x, y), np.hypot(x, y), rtol=1e-12)
    assert hypot.kernel_count() == 1


def test_vectorize_rejects_reductions():
    with pytest.raises(ValueError, match="not elementwise"):
        fuse.vectorize(lambda x: x.sum())(np.ones(3))


def test_grad_and_value_and_grad():
    def f(x, w):
        return ((x @ w) ** 2).sum()
    x, w = array((5, 3), np.float64), array((3,), np.float64)
    dx = fuse.grad(f)(x, w)
    np.testing.assert_allclose(dx, 2 * np.outer(x @ w, w), rtol=1e-12)
    dx, dw = fuse.grad(f, argnums=[0, 1])(x, w)
    np.testing.assert_allclose(dw, 2 * x.T @ (x @ w), rtol=1e-12)
    value, (dx2, dw2) = fuse.value_and_grad(f, argnums=[0, 1])(x, w)
    np.testing.assert_allclose(value, ((x @ w) ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose(dw2, dw, rtol=1e-12)
    with pytest.raises(TypeError):
        fuse.grad(lambda x: (x > 0).sum())(np.ones(3))


# ---- explanations ----

def test_explain_ir_dot(tmp_path, capsys):
    softmax(array((4, 10), np.float32))
    softmax.explain()
    assert "kernel" in capsys.readouterr().out.lower()
    assert 'input "x"' in softmax.ir("graph")
    assert "kernel" in softmax.ir("fused")
    assert "func" in softmax.ir("mlir")
    assert "define" in softmax.ir("llvm")
    assert softmax.ir("asm")
    with pytest.raises(ValueError, match="unknown stage"):
        softmax.ir("ptx")
    assert softmax.dot().startswith("digraph")
    path = softmax.dot(str(tmp_path / "softmax.svg"))
    assert open(path).read().lstrip().startswith("<?xml")
    with pytest.raises(RuntimeError, match="not been called"):
        fuse.jit(lambda x: x).explain()


def test_load_errors(tmp_path):
    bad = tmp_path / "bad.expr"
    bad.write_text("input x: f32[N]\noutput y = x +\n")
    with pytest.raises(ValueError, match="bad.expr:2"):
        fuse.load(str(bad))
    with pytest.raises(FileNotFoundError):
        fuse.load(str(tmp_path / "missing.expr"))
    ok = tmp_path / "ok.expr"
    ok.write_text("input x: f32[N]\noutput y = x * 2.0\n")
    prog = fuse.load(str(ok))
    with pytest.raises(TypeError, match="no input 'z'"):
        prog(z=np.ones(3))
    with pytest.raises(TypeError, match="missing"):
        prog()
    with pytest.raises(TypeError, match="dtype"):
        prog(x=np.ones(3))  # float64 for an f32 input
    np.testing.assert_array_equal(prog(x=np.ones(3, np.float32))["y"], 2)


def test_cuda_without_a_gpu_is_a_clear_error():
    # (This process never selects the simulator, so "cuda" means a real GPU.)
    try:
        fuse.to_device(np.ones(3), target="cuda")
    except RuntimeError as e:
        assert "CUDA unavailable" in str(e)
    else:
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA unavailable"):
        fuse.jit(lambda x: x + 1, target="cuda")(np.ones(3))
