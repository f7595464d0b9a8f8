"""The hidden layer of the seeds: normalize greyscales, weigh, tanh by exponentials; one kernel."""
import numpy as np

import fuse


@fuse.jit
def hidden_layer(greyscales, weights):
    v = greyscales / 255.0 * weights
    return (fuse.exp(v) - fuse.exp(-v)) / (fuse.exp(v) + fuse.exp(-v))


def reference(greyscales, weights):
    return np.tanh(greyscales / 255.0 * weights)


def main():
    rng = np.random.default_rng(1)
    g = rng.uniform(0, 255, 4096).astype(np.float32)
    w = rng.uniform(-2, 2, 4096).astype(np.float32)
    np.testing.assert_allclose(hidden_layer(g, w), reference(g, w), rtol=1e-5, atol=1e-6)
    print("hidden_layer: kernels", hidden_layer.kernel_count())


if __name__ == "__main__":
    main()
