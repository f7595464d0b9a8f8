"""Row-wise softmax: sizes are symbolic, so new sizes reuse the compiled code."""
import numpy as np

import fuse


@fuse.jit
def softmax(x):
    e = fuse.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    for shape in [(4, 1000), (7, 33), (1023, 5)]:
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(softmax(x), reference(x), rtol=1e-5, atol=1e-7)
    print("softmax: specializations compiled:", softmax.cache_size)
    softmax.explain()


if __name__ == "__main__":
    main()
