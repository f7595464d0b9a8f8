"""Every .expr example through fuse.load, and every examples/python workload, against NumPy."""
import importlib
import os

import numpy as np
import pytest

import fuse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
rng = np.random.default_rng(0)


def f32(*shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x, gain, bias, eps=1e-5):
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c ** 2).mean(axis=-1, keepdims=True) + eps) * gain + bias


def transformer(x, ln1_gain, ln1_bias, wq, wk, wv, wo, ln2_gain, ln2_bias, w1, b1, w2, b2):
    h1 = layernorm(x, ln1_gain, ln1_bias)
    q, k, v = h1 @ (wq * 0.125), h1 @ (wk * 0.125), h1 @ (wv * 0.125)
    r = x + softmax((q @ k.T) * 0.125) @ v @ (wo * 0.125)
    h2 = layernorm(r, ln2_gain, ln2_bias)
    u = h2 @ (w1 * 0.125) + b1
    gelu = 0.5 * u * (1 + np.tanh(0.7978845608 * (u + 0.044715 * u ** 3)))
    return r + gelu @ (w2 * 0.0625) + b2


# name -> (inputs, {output: expected}) for sizes 1, 7 and 1023 where the example has free sizes.
def cases(n):
    a, b = f32(n, 5), f32(5)
    x, y = f32(n, low=0.5, high=4), f32(n, low=0.5, high=4)
    m = f32(n, 6)
    t = f32(2, n, 3)
    tf = {k: f32(*s) * 0.5 for k, s in dict(
        x=(128, 64), ln1_gain=(64,), ln1_bias=(64,), wq=(64, 64), wk=(64, 64), wv=(64, 64), wo=(64, 64),
        ln2_gain=(64,), ln2_bias=(64,), w1=(64, 256), b1=(256,), w2=(256, 64), b2=(64,)).items()}
    r1, th1, r2, th2 = f32(n, low=0, high=2), f32(n, low=-3, high=3), f32(n, low=0, high=2), f32(n, low=-3, high=3)
    mlp = dict(x=f32(n, 8), w1=f32(8, 16), b1=f32(16), w2=f32(16, 3), b2=f32(3))
    g, w = f32(n, low=0, high=255), f32(n, low=-2, high=2)
    mu, sigma = np.float32(0.25), np.float32(1.5)
    sx = f32(n + 2)
    hx = (rng.standard_normal(n) * 3).astype(np.float32)
    qkv = [f32(n, 4) for _ in range(3)]
    table, tokens = f32(9, 4), rng.integers(0, 9, n).astype(np.int64)
    logits, labels = f32(n, 5), rng.integers(0, 5, n).astype(np.int64)
    batch = f32(3, n)
    count = np.arange(1, n + 1, dtype=np.float32)
    return {
        "stencil": (dict(x=sx), dict(blur=(sx[:-2] + sx[1:-1] + sx[2:]) / 3)),
        "histogram": (dict(x=hx), dict(counts=np.histogram(hx, bins=10, range=(-4.0, 4.0))[0])),
        "attention": (dict(q=qkv[0], k=qkv[1], v=qkv[2]), dict(y=softmax(
            qkv[0] @ qkv[1].T * 0.125 + np.where(np.arange(n)[None, :] > np.arange(n)[:, None], -np.inf, 0.0)) @ qkv[2])),
        "embedding": (dict(table=table, tokens=tokens), dict(y=table[tokens].mean(axis=0))),
        "cross_entropy": (dict(logits=logits, labels=labels), dict(loss=np.float32(np.mean(
            np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(n), labels])))),
        "running_mean": (dict(x=sx[:n], batch=batch), dict(mean=np.cumsum(sx[:n]) / count,
                                                           batch_mean=np.cumsum(batch, axis=1) / count)),
        "add": (dict(a=a, b=b), dict(c=a + b)),
        "batched_matmul": (dict(a=f32(3, n, 4), b=f32(4, 5)), None),
        "gaussian_pdf": (dict(x=x, mu=mu, sigma=sigma),
                         dict(y=np.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * 2.5066282746))),
        "hidden_layer": (dict(greyscales=g, weights=w), dict(activations=np.tanh(g / 255.0 * w))),
        "hypot": (dict(x=x, y=y), dict(r=np.hypot(x, y))),
        "layernorm": (dict(x=m, gamma=f32(6), beta=f32(6)), None),
        "logsumexp": (dict(x=m), dict(y=np.log(np.exp(m).sum(axis=1)))),
        "matmul": (dict(a=f32(n, 4), b=f32(4, 3)), None),
        "mlp": (mlp, dict(y=np.maximum(mlp["x"] @ mlp["w1"] + mlp["b1"], 0) @ mlp["w2"] + mlp["b2"])),
        "monte_carlo_pi": ({}, None),
        "polar_distance": (dict(r1=r1, theta1=th1, r2=r2, theta2=th2), dict(distance=np.hypot(
            r1 * np.cos(th1) - r2 * np.cos(th2), r1 * np.sin(th1) - r2 * np.sin(th2)))),
        "reductions": (dict(x=m), dict(total=m.sum(), row_sums=m.sum(axis=1), col_max=m.max(axis=0, keepdims=True),
                                       row_min=m.min(axis=-1), average=m.mean(), row_prod=m.prod(axis=1),
                                       any_positive=(m > 0).any(axis=1), all_above=(m > -0.5).all(axis=0),
                                       row_absmax=np.abs(m).max(axis=1))),
        "softmax": (dict(x=m), dict(y=softmax(m))),
        "transformer_block": (tf, dict(y=transformer(**tf))),
        "transpose": (dict(x=m, t=t), dict(xt=m.T, permuted=t.transpose(1, 0, 2), flat=m.T.reshape(-1))),
    }


def test_every_example_is_covered():
    names = sorted(os.path.splitext(f)[0] for f in os.listdir(EXAMPLES) if f.endswith(".expr"))
    assert names == sorted(cases(1))


@pytest.mark.parametrize("n", [1, 7, 1023])
@pytest.mark.parametrize("name", sorted(cases(1)))
def test_expr_example(name, n):
    inputs, expected = cases(n)[name]
    prog = fuse.load(os.path.join(EXAMPLES, name + ".expr"))
    out = prog(**inputs)
    if expected is None:  # the matmuls and layernorm: NumPy's own functions on the same inputs
        expected = {
            "batched_matmul": lambda: dict(c=inputs["a"] @ inputs["b"]),
            "matmul": lambda: dict(c=inputs["a"] @ inputs["b"]),
            "layernorm": lambda: dict(y=layernorm(inputs["x"], inputs["gamma"], inputs["beta"])),
            "monte_carlo_pi": lambda: dict(pi=np.float32(np.pi)),
        }[name]()
    assert sorted(out) == sorted(expected)
    for k, v in expected.items():
        v = np.asarray(v)
        assert out[k].shape == v.shape, k
        # NumPy 1.24 promotes float32 scalars with Python floats to float64; fuse's are weak.
        assert out[k].dtype == (np.float32 if v.dtype.kind == "f" else v.dtype), k
        if name == "monte_carlo_pi":
            assert abs(float(out[k]) - np.pi) < 0.02
        elif v.dtype == bool:
            np.testing.assert_array_equal(out[k], v)
        else:
            np.testing.assert_allclose(out[k], v, rtol=2e-4, atol=2e-5, err_msg=k)


@pytest.mark.parametrize("module", ["hypot", "gaussian_pdf", "monte_carlo_pi", "hidden_layer", "softmax",
                                    "layernorm", "mlp"])
def test_python_example(module):
    importlib.import_module(module).main()
