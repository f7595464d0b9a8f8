"""DeviceArrays on the simulated CUDA device (docs/cuda-simulator.md): jit(target="cuda-sim")
with host arrays in and out, and with device arrays that stay on the device between calls."""
import numpy as np
import pytest

import fuse


@pytest.fixture(scope="module")
def softmax():
    @fuse.jit(target="cuda-sim")
    def softmax(x):
        e = fuse.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return softmax


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("n", [1, 7, 1023])
def test_host_arrays_on_the_simulator(softmax, n):
    x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
    np.testing.assert_allclose(softmax(x), np_softmax(x), rtol=1e-5, atol=1e-7)


def test_device_arrays_stay_on_the_device(softmax):
    x = np.random.default_rng(0).standard_normal((7, 33)).astype(np.float32)
    d = fuse.to_device(x, target="cuda-sim")
    assert isinstance(d, fuse.DeviceArray) and d.shape == (7, 33) and d.dtype == np.float32
    y = softmax(d)
    assert isinstance(y, fuse.DeviceArray) and y.shape == (7, 33)
    z = softmax(y)  # a result as the next input, without leaving the device
    np.testing.assert_allclose(z.copy_to_host(), np_softmax(np_softmax(x)), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(d.copy_to_host(), x)  # inputs are left as they were


def test_device_array_errors(softmax):
    d = fuse.to_device(np.ones((2, 3), np.float32), target="cuda-sim")
    with pytest.raises(TypeError, match="mixes"):
        fuse.jit(lambda a, b: a + b, target="cuda-sim")(d, np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="CUDA target"):
        fuse.jit(lambda a: a + 1)(d)
    with pytest.raises(AttributeError):
        d.__cuda_array_interface__
    with pytest.raises(TypeError):
        fuse.to_device(np.ones(3, np.float16), target="cuda-sim")


def test_simulated_memory_is_not_exported():
    d = fuse.to_device(np.ones(3, np.float32), target="cuda-sim")
    with pytest.raises(BufferError):
        d.__dlpack__()
