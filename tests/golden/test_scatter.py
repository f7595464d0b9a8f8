"""take, take_along_axis, index_add, bincount and histogram (issue 16) against NumPy."""
import os
import warnings

import numpy as np

from golden import check, check_error, finish

rng = np.random.default_rng(16)

# ---- take: negative indices, other axes, empty and repeated indices, every dtype
for n in [1, 7, 1023]:
    x = rng.standard_normal(n).astype(np.float32)
    idx = rng.integers(-n, n, size=9).astype(np.int64)
    check(f"take_1d_{n}", "input x: f32[N]\ninput i: i64[M]\noutput y = take(x, i)\n", {"x": x, "i": idx},
          {"y": np.take(x, idx)}, exact=True)
x = rng.standard_normal((4, 5, 3)).astype(np.float64)
for axis in [0, 1, 2, -1]:
    idx = rng.integers(-x.shape[axis], x.shape[axis], size=(2, 3)).astype(np.int32)
    check(f"take_axis_{axis}", f"input x: f64[A, B, C]\ninput i: i32[P, Q]\noutput y = take(x, i, axis={axis})\n",
          {"x": x, "i": idx}, {"y": np.take(x, idx, axis=axis)}, exact=True)
check("take_empty_idx", "input x: f32[N, M]\ninput i: i64[K]\noutput y = take(x, i, axis=1)\n",
      {"x": np.ones((3, 4), np.float32), "i": np.zeros(0, np.int64)}, {"y": np.zeros((3, 0), np.float32)})
check("take_repeated", "input x: i32[N]\ninput i: i64[K]\noutput y = take(x, i)\n",
      {"x": np.arange(5, dtype=np.int32), "i": np.array([4, 4, -1, 0, 0], np.int64)},
      {"y": np.array([4, 4, 4, 0, 0], np.int32)})
check("take_bool", "input x: bool[N]\ninput i: i64[K]\noutput y = take(x, i)\n",
      {"x": np.array([True, False, True]), "i": np.array([1, 2, -3], np.int64)}, {"y": np.array([False, True, True])})
check("take_nan", "input x: f32[N]\ninput i: i64[K]\noutput y = take(x, i) * 2.0\n",
      {"x": np.array([np.nan, 1.0], np.float32), "i": np.array([0, 1, 0], np.int64)},
      {"y": np.array([np.nan, 2.0, np.nan], np.float32)})
check_error("take_out_of_range", "input x: f32[N]\ninput i: i64[K]\noutput y = take(x, i)\n",
            {"x": np.zeros(5, np.float32), "i": np.array([0, 5], np.int64)},
            "case.expr:3:12: error: take: index 5 is out of range for axis 0 of size 5")
check_error("take_negative_out_of_range", "input x: f32[N]\ninput i: i64[K]\noutput y = take(x, i)\n",
            {"x": np.zeros(5, np.float32), "i": np.array([-6], np.int64)}, "index -6 is out of range for axis 0 of size 5")
check_error("take_float_indices", "input x: f32[N]\ninput i: f32[K]\noutput y = take(x, i)\n",
            {"x": np.zeros(5, np.float32), "i": np.zeros(2, np.float32)}, "take: indices must be i32 or i64")

# ---- take with an empty result (np-gaps): fuse checks every index, on every target, as the
# interpreter does. NumPy's fancy indexing flags such an index too (1.24: a DeprecationWarning,
# "In the future the index error will be raised"); np.take itself (1.24) returns the empty result.
with warnings.catch_warnings():
    warnings.simplefilter("error")
    try:
        np.zeros((0, 3))[:, [5]]
        numpy_flags_it = False
    except (IndexError, DeprecationWarning):
        numpy_flags_it = True
assert numpy_flags_it, "NumPy's fancy indexing accepted an out-of-range index into an empty result"
empty_take = "input x: f32[N, M]\ninput i: i64[K]\noutput y = take(x, i, axis=1) + 1.0\n"
for target in ["interp", "cpu"]:
    check_error(f"take_empty_result_bad_{target}", empty_take,
                {"x": np.zeros((0, 3), np.float32), "i": np.array([1, 5], np.int64)},
                "case.expr:3:12: error: take: index 5 is out of range for axis 1 of size 3", target=target)
    good = np.array([2, -3], np.int64)
    check(f"take_empty_result_good_{target}", empty_take, {"x": np.zeros((0, 3), np.float32), "i": good},
          {"y": np.take(np.zeros((0, 3), np.float32), good, axis=1) + np.float32(1)}, target=target)

# ---- take_along_axis: argsort-like indices, broadcasting of the other axes
x = rng.standard_normal((6, 7)).astype(np.float32)
for axis in [0, 1, -1]:
    idx = rng.integers(-x.shape[axis], x.shape[axis], size=x.shape).astype(np.int64)
    check(f"take_along_axis_{axis}", f"input x: f32[N, M]\ninput i: i64[N, M]\noutput y = take_along_axis(x, i, axis={axis})\n",
          {"x": x, "i": idx}, {"y": np.take_along_axis(x, idx, axis=axis)}, exact=True)
labels = rng.integers(0, 7, size=(6, 1)).astype(np.int64)
check("take_along_axis_labels", "input x: f32[N, C]\ninput l: i64[N, 1]\noutput y = take_along_axis(x, l, axis=1)\n",
      {"x": x, "l": labels}, {"y": np.take_along_axis(x, labels, axis=1)}, exact=True)
bidx = rng.integers(0, 6, size=(3, 1)).astype(np.int32)
check("take_along_axis_broadcast", "input x: f32[N, M]\ninput i: i32[K, 1]\noutput y = take_along_axis(x, i, axis=0)\n",
      {"x": x, "i": bidx}, {"y": np.take_along_axis(x, bidx, axis=0)}, exact=True)
check_error("take_along_axis_out_of_range", "input x: f32[N, M]\ninput i: i64[N, 1]\noutput y = take_along_axis(x, i, axis=1)\n",
            {"x": np.zeros((2, 3), np.float32), "i": np.array([[1], [3]], np.int64)},
            "take_along_axis: index 3 is out of range for axis 1 of size 3")
check_error("take_along_axis_rank", "input x: f32[N, M]\ninput i: i64[N]\noutput y = take_along_axis(x, i, axis=1)\n",
            {"x": np.zeros((2, 3), np.float32), "i": np.zeros(2, np.int64)}, "must have the same rank")

# ---- index_add: repeated indices accumulate (np.add.at on a copy), negative indices, axes
for n in [1, 7, 1023]:
    x = rng.standard_normal((n, 3)).astype(np.float32)
    idx = rng.integers(-n, n, size=2 * n + 1).astype(np.int64)
    v = rng.standard_normal((idx.size, 3)).astype(np.float32)
    want = x.copy()
    np.add.at(want, idx, v)
    check(f"index_add_{n}", "input x: f32[N, 3]\ninput i: i64[M]\ninput v: f32[M, 3]\noutput y = index_add(x, i, v)\n",
          {"x": x, "i": idx, "v": v}, {"y": want}, exact=True)
x = np.arange(12, dtype=np.int32).reshape(3, 4)
idx = np.array([3, 3, -1, 0], np.int64)
v = np.ones((3, 4), np.int32) * np.array([1, 10, 100, 1000], np.int32)
want = x.copy()
np.add.at(want, (slice(None), idx), v)
check("index_add_axis1_i32", "input x: i32[N, M]\ninput i: i64[K]\ninput v: i32[N, K]\noutput y = index_add(x, i, v, axis=1)\n",
      {"x": x, "i": idx, "v": v}, {"y": want})
check_error("index_add_out_of_range", "input x: f32[N]\ninput i: i64[K]\ninput v: f32[K]\noutput y = index_add(x, i, v)\n",
            {"x": np.zeros(4, np.float32), "i": np.array([7], np.int64), "v": np.ones(1, np.float32)},
            "index_add: index 7 is out of range for axis 0 of size 4")
check_error("index_add_values_shape", "input x: f32[N]\ninput i: i64[K]\ninput v: f32[N]\noutput y = index_add(x, i, v)\n",
            {"x": np.zeros(4, np.float32), "i": np.array([1], np.int64), "v": np.ones(4, np.float32)},
            "index_add: values have shape [N] but x [N] with indices [K] along axis 0 needs [K]")

# ---- bincount: counts (i64), weights (the weights' dtype; NumPy gives f64), errors
for n in [1, 7, 1023]:
    x = rng.integers(0, 10, size=n).astype(np.int64)
    check(f"bincount_{n}", "input x: i64[N]\noutput y = bincount(x, minlength=10)\n", {"x": x},
          {"y": np.bincount(x, minlength=10).astype(np.int64)})
    w = rng.standard_normal(n)
    check(f"bincount_weighted_{n}", "input x: i64[N]\ninput w: f64[N]\noutput y = bincount(x, minlength=10, weights=w)\n",
          {"x": x, "w": w}, {"y": np.bincount(x, weights=w, minlength=10)}, rtol=1e-12, atol=1e-12)
    w32 = w.astype(np.float32)
    check(f"bincount_weighted_f32_{n}", "input x: i64[N]\ninput w: f32[N]\noutput y = bincount(x, minlength=10, weights=w)\n",
          {"x": x, "w": w32}, {"y": np.bincount(x, weights=w32, minlength=10).astype(np.float32)}, exact=True)
check("bincount_empty", "input x: i32[N]\noutput y = bincount(x, minlength=3)\n", {"x": np.zeros(0, np.int32)},
      {"y": np.zeros(3, np.int64)})
check("bincount_symbolic_length", "input x: i32[N]\ninput t: f32[K]\noutput y = bincount(x, minlength=K)\n",
      {"x": np.array([0, 2, 2], np.int32), "t": np.zeros(4, np.float32)}, {"y": np.array([1, 0, 2, 0], np.int64)})
check_error("bincount_too_large", "input x: i64[N]\noutput y = bincount(x, minlength=3)\n",
            {"x": np.array([0, 3], np.int64)}, "bincount: value 3 is out of range for minlength 3")
check_error("bincount_negative", "input x: i64[N]\noutput y = bincount(x, minlength=3)\n",
            {"x": np.array([-1], np.int64)}, "bincount: value -1 is out of range for minlength 3")
check_error("bincount_no_minlength", "input x: i64[N]\noutput y = bincount(x)\n",
            {"x": np.array([1], np.int64)}, "case.expr:2:12: error: 'bincount' needs minlength=K")

# ---- histogram: edges (left-closed, the last bin closed), outside values and NaN ignored
def hist(x, bins, lo, hi):
    return np.histogram(x, bins=bins, range=(lo, hi))[0].astype(np.int64)

for n in [1, 7, 1023]:
    x = rng.standard_normal(n).astype(np.float32) * 2
    check(f"histogram_{n}", "input x: f32[N]\noutput y = histogram(x, bins=10, range=[-3.0, 3.0])\n", {"x": x},
          {"y": hist(x, 10, -3.0, 3.0)})
edges64 = np.linspace(0.0, 1.0, 11)
x = np.concatenate([edges64, np.nextafter(edges64, -1), np.nextafter(edges64, 2), [np.nan, -0.5, 1.5, np.inf, -np.inf]])
check("histogram_edges_f64", "input x: f64[N]\noutput y = histogram(x, bins=10, range=[0.0, 1.0])\n", {"x": x},
      {"y": hist(x, 10, 0.0, 1.0)})
for lo, hi, bins in [(0.0, 1.0, 10), (-0.3, 0.7, 7), (0.1, 0.4, 3), (-1e3, 1e-3, 13)]:
    e = np.linspace(lo, hi, bins + 1).astype(np.float32)
    x = np.concatenate([e, np.nextafter(e, np.float32(-np.inf)), np.nextafter(e, np.float32(np.inf)),
                        rng.uniform(lo, hi, 200).astype(np.float32), np.array([np.nan], np.float32)])
    check(f"histogram_edges_f32_{lo}_{hi}_{bins}", f"input x: f32[N]\noutput y = histogram(x, bins={bins}, range=[{lo!r}, {hi!r}])\n",
          {"x": x}, {"y": hist(x, bins, lo, hi)})
xi = rng.integers(-5, 15, size=100).astype(np.int32)
check("histogram_i32", "input x: i32[N]\noutput y = histogram(x, bins=4, range=[0, 10])\n", {"x": xi}, {"y": hist(xi, 4, 0, 10)})
check("histogram_equal_range", "input x: f64[N]\noutput y = histogram(x, bins=3, range=[2.0, 2.0])\n",
      {"x": np.array([1.4, 1.5, 2.0, 2.5, 2.6])}, {"y": hist(np.array([1.4, 1.5, 2.0, 2.5, 2.6]), 3, 2.0, 2.0)})
check("histogram_empty", "input x: f32[N]\noutput y = histogram(x, bins=2, range=[0.0, 1.0])\n",
      {"x": np.zeros(0, np.float32)}, {"y": np.zeros(2, np.int64)})
check_error("histogram_no_range", "input x: f32[N]\noutput y = histogram(x, bins=2)\n",
            {"x": np.zeros(1, np.float32)}, "'histogram' needs range=[lo, hi]")
check_error("histogram_bad_range", "input x: f32[N]\noutput y = histogram(x, bins=2, range=[1.0, 0.0])\n",
            {"x": np.zeros(1, np.float32)}, "error: 'range' must have lower bound <= upper bound, got [1, 0]")
check_error("histogram_bad_bins", "input x: f32[N]\noutput y = histogram(x, bins=0, range=[0.0, 1.0])\n",
            {"x": np.zeros(1, np.float32)}, "'bins' must be a positive integer")
# bool operands (np-gaps): NumPy converts them (np.bincount(bool x) counts 0s and 1s); fuse
# rejects them when the graph is built, with the op's name, so no scatter kernel sees a bool.
assert np.bincount(np.array([True, False, True])).tolist() == [1, 2]
b2, i2 = np.array([True, False]), np.array([0, 1], np.int64)
check_error("bincount_bool_x", "input x: bool[N]\noutput y = bincount(x, minlength=2)\n", {"x": b2},
            "bincount: x must be a 1-D i32 or i64 tensor, not bool")
check_error("bincount_bool_weights", "input x: i64[N]\ninput w: bool[N]\noutput y = bincount(x, minlength=2, weights=w)\n",
            {"x": i2, "w": b2}, "bincount: weights must be numeric, not bool")
check_error("histogram_bool", "input x: bool[N]\noutput y = histogram(x, bins=2, range=[0.0, 1.0])\n", {"x": b2},
            "histogram: x must be numeric, not bool")
check_error("index_add_bool", "input x: bool[N]\ninput i: i64[K]\ninput v: bool[K]\noutput y = index_add(x, i, v)\n",
            {"x": b2, "i": i2, "v": b2}, "index_add: x must be numeric, not bool")

# ---- the three examples' building blocks: embedding mean and cross entropy
table = rng.standard_normal((11, 4)).astype(np.float32)
tokens = rng.integers(0, 11, size=6).astype(np.int64)
check("embedding_mean", "input table: f32[V, D]\ninput tokens: i64[T]\noutput y = mean(take(table, tokens), axis=0)\n",
      {"table": table, "tokens": tokens}, {"y": table[tokens].astype(np.float64).mean(axis=0).astype(np.float32)}, rtol=1e-6)
# ---- the examples themselves (examples/*.expr)
_EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def example(name):
    with open(os.path.join(_EXAMPLES, name)) as f:
        return f.read()


x = rng.standard_normal(10000).astype(np.float32) * 1.5
check("example_histogram", example("histogram.expr"), {"x": x}, {"counts": hist(x, 10, -4.0, 4.0)})
table = rng.standard_normal((50, 8)).astype(np.float32)
tokens = rng.integers(-50, 50, size=13).astype(np.int64)
check("example_embedding", example("embedding.expr"), {"table": table, "tokens": tokens},
      {"y": table[tokens].astype(np.float64).mean(axis=0).astype(np.float32)}, rtol=1e-6)
logits = (rng.standard_normal((9, 5)) * 3).astype(np.float32)
labels = rng.integers(0, 5, size=9).astype(np.int64)
l64 = logits.astype(np.float64)
lse = l64.max(axis=1) + np.log(np.exp(l64 - l64.max(axis=1, keepdims=True)).sum(axis=1))
check("example_cross_entropy", example("cross_entropy.expr"), {"logits": logits, "labels": labels},
      {"loss": np.float32((lse - l64[np.arange(9), labels]).mean())}, rtol=1e-5, atol=1e-6)
check_error("example_embedding_bad_token", example("embedding.expr"),
            {"table": table, "tokens": np.array([3, 50], np.int64)},
            "case.expr:5:17: error: take: index 50 is out of range for axis 0 of size 50")
finish()
