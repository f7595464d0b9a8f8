"""Issue 16's operations from Python: indexing, concatenate/stack/pad, argmax/argmin, cumsum/cumprod,
clip, take/take_along_axis/index_add, bincount, histogram, each against NumPy; their errors."""
import numpy as np
import pytest

import fuse

rng = np.random.default_rng(16)
SIZES = [1, 7, 1023]


@pytest.mark.parametrize("n", SIZES)
def test_stencil_slices(n):
    @fuse.jit
    def blur(x):
        return (x[:-2] + x[1:-1] + x[2:]) / 3

    x = rng.standard_normal(n + 2).astype(np.float32)
    np.testing.assert_allclose(blur(x), (x[:-2] + x[1:-1] + x[2:]) / 3, rtol=1e-6, atol=1e-6)
    assert blur.kernel_count() == 1  # the slices are index maps read in place


@pytest.mark.parametrize("index", [
    (slice(None, None, -1),), (slice(1, None, 2), 0), (Ellipsis, -1), (None, slice(None)), (-1,),
    (slice(-3, None), slice(None, None, -2)), (slice(5, 2),),
])
def test_basic_indexing(index):
    f = fuse.jit(lambda x: x[index])
    x = rng.standard_normal((6, 5))
    np.testing.assert_array_equal(f(x), x[index])


def test_integer_index_out_of_range_is_a_clear_error():
    f = fuse.jit(lambda x: x[5])
    with pytest.raises(Exception, match="out of range"):
        f(np.zeros(3, np.float32))


def test_concatenate_stack_pad():
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    np.testing.assert_array_equal(fuse.jit(lambda a, b: fuse.concatenate([a, b], axis=0))(a, b),
                                  np.concatenate([a, b], axis=0))
    np.testing.assert_array_equal(fuse.jit(lambda a, b: fuse.stack([a, b], axis=1))(a, a), np.stack([a, a], axis=1))
    for mode in ["constant", "edge", "reflect"]:
        f = fuse.jit(lambda x: fuse.pad(x, [(1, 2), (3, 0)], mode=mode))
        np.testing.assert_array_equal(f(a), np.pad(a, [(1, 2), (3, 0)], mode=mode))


def test_argmax_argmin_first_occurrence_and_nan():
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0], [0.0, -1.0, -1.0, 5.0, 5.0]])
    np.testing.assert_array_equal(fuse.jit(lambda x: x.argmax(axis=1))(x), x.argmax(axis=1))
    np.testing.assert_array_equal(fuse.jit(lambda x: fuse.argmin(x, axis=1, keepdims=True))(x),
                                  np.argmin(x, axis=1, keepdims=True))
    y = rng.standard_normal((4, 9)).astype(np.float32)
    assert fuse.jit(lambda x: fuse.argmax(x))(y) == np.argmax(y)


@pytest.mark.parametrize("n", SIZES)
def test_cumsum_cumprod_clip(n):
    x = rng.uniform(0.5, 1.5, (3, n))
    np.testing.assert_allclose(fuse.jit(lambda x: fuse.cumsum(x, axis=1))(x), np.cumsum(x, axis=1), rtol=1e-12)
    np.testing.assert_allclose(fuse.jit(lambda x: x.cumprod(axis=1))(x), np.cumprod(x, axis=1), rtol=1e-12)
    np.testing.assert_allclose(fuse.jit(lambda x: fuse.cumsum(x))(x), np.cumsum(x), rtol=1e-12)
    np.testing.assert_array_equal(fuse.jit(lambda x: fuse.clip(x, 0.8, 1.2))(x), np.clip(x, 0.8, 1.2))


def test_take_and_scatter_ops():
    x = rng.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([4, -1, 0, 0], np.int64)
    np.testing.assert_array_equal(fuse.jit(lambda x, i: fuse.take(x, i, axis=0))(x, idx), np.take(x, idx, axis=0))
    labels = np.array([[2], [0], [1], [2], [0]], np.int64)
    np.testing.assert_array_equal(fuse.jit(lambda x, i: fuse.take_along_axis(x, i, 1))(x, labels),
                                  np.take_along_axis(x, labels, 1))
    values = rng.standard_normal((4, 3)).astype(np.float32)
    want = x.copy()
    np.add.at(want, idx, values)
    np.testing.assert_allclose(fuse.jit(lambda x, i, v: fuse.index_add(x, i, v))(x, idx, values), want, rtol=1e-6)
    v = np.array([0, 3, 3, 1, 0, 3], np.int64)
    np.testing.assert_array_equal(fuse.jit(lambda v: fuse.bincount(v, minlength=5))(v), np.bincount(v, minlength=5))
    data = np.array([0.0, 0.25, 0.5, 1.0, 1.5, -0.1, np.nan])
    np.testing.assert_array_equal(fuse.jit(lambda d: fuse.histogram(d, 4, (0.0, 1.0)))(data),
                                  np.histogram(data, 4, (0.0, 1.0))[0])


def test_take_out_of_range_is_a_run_time_error():
    f = fuse.jit(lambda x, i: fuse.take(x, i))
    with pytest.raises(Exception, match="out of range|index"):
        f(np.zeros(3, np.float32), np.array([3], np.int64))


def test_misuse_raises_type_errors():
    with pytest.raises(TypeError, match="fuse.take"):
        fuse.jit(lambda x: x[np.array([0, 1])])(np.zeros(3))
    with pytest.raises(TypeError, match="minlength"):
        fuse.jit(lambda v: fuse.bincount(v))(np.zeros(3, np.int64))
