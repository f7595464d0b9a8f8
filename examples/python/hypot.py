"""hypot as a broadcasting ufunc with @fuse.vectorize (the overflow-safe form); one kernel."""
import numpy as np

import fuse


@fuse.vectorize
def hypot(x, y):
    x, y = abs(x), abs(y)
    t = fuse.minimum(x, y) / fuse.maximum(x, y)
    return fuse.maximum(x, y) * fuse.sqrt(1 + t * t)


def main():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 100, (1000, 3)).astype(np.float32)
    y = rng.uniform(0.5, 100, 3).astype(np.float32)  # broadcast along rows
    r = hypot(x, y)
    np.testing.assert_allclose(r, np.hypot(x, y), rtol=1e-5)
    print("hypot:", r.shape, r.dtype, "kernels:", hypot.kernel_count())


if __name__ == "__main__":
    main()
