"""DLPack: fuse's outputs and inputs exchanged with NumPy (and PyTorch when installed) without copies."""
import numpy as np
import pytest

import fuse


class OnlyDLPack:
    """An object that offers nothing but DLPack (as a PyTorch CPU tensor does to NumPy)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_output_round_trip_with_numpy():
    y = fuse.jit(lambda x: x * 2)(np.arange(10, dtype=np.float32))
    z = np.from_dlpack(y)
    assert z.ctypes.data == y.ctypes.data
    w = fuse.from_dlpack(y)
    assert w.ctypes.data == y.ctypes.data
    np.testing.assert_array_equal(w, np.arange(10) * 2)
    # and back into fuse: NumPy's DLPack arrays (read-only in NumPy 1.24) are read in place
    assert fuse._fuse.input_address(z) == y.ctypes.data
    np.testing.assert_array_equal(fuse.jit(lambda x: x + 1)(z), np.arange(10) * 2 + 1)


def test_dlpack_input_is_read_in_place():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    got = fuse.jit(lambda x: x.sum(axis=1))(OnlyDLPack(x))
    np.testing.assert_array_equal(got, x.sum(axis=1))
    assert fuse.from_dlpack(OnlyDLPack(x)).ctypes.data == x.ctypes.data


def test_torch_when_installed():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    y = fuse.jit(lambda x: x + 1)(t)
    back = torch.from_dlpack(y)
    assert back.data_ptr() == y.ctypes.data
    assert torch.equal(back, t + 1)
