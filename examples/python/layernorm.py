"""Layer normalization over the last axis."""
import numpy as np

import fuse

EPS = 1e-5


@fuse.jit
def layernorm(x, gamma, beta):
    centered = x - x.mean(axis=-1, keepdims=True)
    variance = (centered ** 2).mean(axis=-1, keepdims=True)
    return centered * fuse.rsqrt(variance + EPS) * gamma + beta


def reference(x, gamma, beta):
    centered = x - x.mean(axis=-1, keepdims=True)
    return centered / np.sqrt((centered ** 2).mean(axis=-1, keepdims=True) + EPS) * gamma + beta


def main():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    gamma = rng.standard_normal(96).astype(np.float32)
    beta = rng.standard_normal(96).astype(np.float32)
    np.testing.assert_allclose(layernorm(x, gamma, beta), reference(x, gamma, beta), rtol=1e-4, atol=1e-5)
    print("layernorm ok")


if __name__ == "__main__":
    main()
