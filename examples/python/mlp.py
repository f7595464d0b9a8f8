"""A two-layer MLP (matmul + bias + relu, then matmul + bias), and its gradient with respect to the
first layer's weights by fuse.value_and_grad."""
import numpy as np

import fuse


def mlp(x, w1, b1, w2, b2):
    hidden = fuse.relu(x @ w1 + b1)
    return hidden @ w2 + b2


mlp_jit = fuse.jit(mlp)


def loss(x, w1, b1, w2, b2):
    return (mlp(x, w1, b1, w2, b2) ** 2).mean()


loss_and_grads = fuse.value_and_grad(loss, argnums=[1, 3])


def reference(x, w1, b1, w2, b2):
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def reference_grads(x, w1, b1, w2, b2):
    pre = x @ w1 + b1
    hidden = np.maximum(pre, 0)
    y = hidden @ w2 + b2
    dy = 2 * y / y.size
    dw2 = hidden.T @ dy
    dpre = (dy @ w2.T) * (pre > 0)
    return (y ** 2).mean(), x.T @ dpre, dw2


def main():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 20))
    w1, b1 = rng.standard_normal((20, 16)), rng.standard_normal(16)
    w2, b2 = rng.standard_normal((16, 3)), rng.standard_normal(3)
    np.testing.assert_allclose(mlp_jit(x, w1, b1, w2, b2), reference(x, w1, b1, w2, b2), rtol=1e-10)
    value, (dw1, dw2) = loss_and_grads(x, w1, b1, w2, b2)
    ref_value, ref_dw1, ref_dw2 = reference_grads(x, w1, b1, w2, b2)
    np.testing.assert_allclose(value, ref_value, rtol=1e-10)
    np.testing.assert_allclose(dw1, ref_dw1, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dw2, ref_dw2, rtol=1e-9, atol=1e-12)
    print("mlp: loss", float(value))


if __name__ == "__main__":
    main()
