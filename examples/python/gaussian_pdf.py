"""The Gaussian density of every element, with mean and sigma as Python scalars (weakly typed:
the result stays float32)."""
import numpy as np

import fuse

SQRT_2PI = 2.5066282746


@fuse.jit
def gaussian_pdf(x, mu, sigma):
    return fuse.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * SQRT_2PI)


def main():
    x = np.linspace(-3, 3, 1001, dtype=np.float32)
    y = gaussian_pdf(x, 0.5, 1.5)
    expected = np.exp(-0.5 * ((x - 0.5) / 1.5) ** 2) / (1.5 * SQRT_2PI)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)
    print("gaussian_pdf: peak", float(y.max()))


if __name__ == "__main__":
    main()
