"""Monte-Carlo pi from fuse.random.rand (counter-based Philox: a seed gives the same estimate
everywhere); the function has no array arguments."""
import numpy as np

import fuse


@fuse.jit
def estimate_pi():
    x = fuse.random.rand(100000, seed=1)
    y = fuse.random.rand(100000, seed=2)
    inside = (x * x + y * y <= 1.0).astype(np.float32)
    return 4.0 * inside.mean()


def main():
    pi = float(estimate_pi())
    assert abs(pi - np.pi) < 0.02, pi
    print("pi ~", pi)


if __name__ == "__main__":
    main()
