"""argmax/argmin, cumsum/cumprod and clip on the interpreter against NumPy: ties, NaN, negative
axes, flattened (no axis), keepdims, integer dtypes, empty scans, broadcast bounds, errors."""
import numpy as np

from golden import check, check_error, finish

rng = np.random.default_rng(16)
nan, inf = np.nan, np.inf

# ---- argmax / argmin: i64, the first extreme wins, the first NaN wins outright ----
for shape in [(1, 1), (7, 3), (3, 1023)]:
    x = rng.standard_normal(shape).astype(np.float32)
    for op in ["argmax", "argmin"]:
        f = getattr(np, op)
        check(f"{op}_rows_{shape}", f"input x: f32[N, M]\noutput y = {op}(x, axis=1)\n", {"x": x}, {"y": f(x, axis=1)})
        check(f"{op}_cols_keepdims_{shape}", f"input x: f32[N, M]\noutput y = {op}(x, axis=0, keepdims=true)\n",
              {"x": x}, {"y": f(x, axis=0, keepdims=True)})
        check(f"{op}_flat_{shape}", f"input x: f32[N, M]\noutput y = {op}(x)\n", {"x": x}, {"y": np.int64(f(x))})
        check(f"{op}_neg_axis_{shape}", f"input x: f32[N, M]\noutput y = {op}(x, axis=-1)\n", {"x": x}, {"y": f(x, axis=-1)})
ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, -5, 4, -5]], np.float32)
nans = np.array([[1, nan, 5, nan], [nan, 0, 0, 0], [3, 2, 1, nan], [-inf, -inf, inf, inf], [nan, nan, nan, nan]], np.float32)
for name, x in [("ties", ties), ("nan", nans)]:
    for op in ["argmax", "argmin"]:
        f = getattr(np, op)
        check(f"{op}_{name}", f"input x: f32[N, M]\noutput y = {op}(x, axis=1)\noutput z = {op}(x)\n", {"x": x},
              {"y": f(x, axis=1), "z": np.int64(f(x))})
xi = rng.integers(-3, 3, size=(5, 7)).astype(np.int32)
xd = rng.standard_normal((4, 6))
xb = rng.integers(0, 2, size=(3, 5)).astype(bool)
for name, x, t in [("i32", xi, "i32"), ("f64", xd, "f64"), ("bool", xb, "bool")]:
    for op in ["argmax", "argmin"]:
        f = getattr(np, op)
        check(f"{op}_{name}", f"input x: {t}[N, M]\noutput y = {op}(x, axis=0)\noutput z = {op}(x, axis=1, keepdims=true)\n",
              {"x": x}, {"y": f(x, axis=0), "z": f(x, axis=1, keepdims=True)})
x3 = rng.standard_normal((2, 3, 4)).astype(np.float32)
check("argmax_3d_middle", "input x: f32[A, B, C]\noutput y = argmax(x, axis=1)\n", {"x": x3}, {"y": np.argmax(x3, axis=1)})
check("argmax_of_expression", "input x: f32[N, M]\noutput y = argmax(exp(x) * 2.0 - x, axis=1)\n", {"x": x3[0]},
      {"y": np.argmax(np.exp(x3[0]) * 2 - x3[0], axis=1)})

# ---- cumsum / cumprod: the dtypes of fuse's sum/prod (i32 stays i32, bool gives i32) ----
for shape in [(1, 1), (7, 3), (3, 1023)]:
    x = rng.standard_normal(shape).astype(np.float32)
    for axis in [0, 1, -1]:
        check(f"cumsum_axis{axis}_{shape}", f"input x: f32[N, M]\noutput y = cumsum(x, axis={axis})\n", {"x": x},
              {"y": np.cumsum(x.astype(np.float64), axis=axis).astype(np.float32)}, rtol=1e-5, atol=1e-5)
    check(f"cumsum_flat_{shape}", "input x: f32[N, M]\noutput y = cumsum(x)\n", {"x": x},
          {"y": np.cumsum(x.astype(np.float64)).astype(np.float32)}, rtol=1e-5, atol=1e-4)
    p = (1 + 0.01 * x).astype(np.float32)
    check(f"cumprod_axis1_{shape}", "input x: f32[N, M]\noutput y = cumprod(x, axis=1)\n", {"x": p},
          {"y": np.cumprod(p.astype(np.float64), axis=1).astype(np.float32)}, rtol=1e-5, atol=1e-6)
v = np.array([1, 2, nan, 4, inf, -inf], np.float32)
check("cumsum_nan_inf", "input x: f32[N]\noutput y = cumsum(x)\noutput z = cumprod(x)\n", {"x": v},
      {"y": np.cumsum(v), "z": np.cumprod(v)}, exact=True)
check("cumprod_zero", "input x: f64[N]\noutput y = cumprod(x)\n", {"x": np.array([2.0, 0.0, 3.0])},
      {"y": np.array([2.0, 0.0, 0.0])}, exact=True)
check("cumsum_empty", "input x: f32[N]\noutput y = cumsum(x)\n", {"x": np.zeros(0, np.float32)},
      {"y": np.zeros(0, np.float32)})
check("cumsum_empty_rows", "input x: f32[N, M]\noutput y = cumsum(x, axis=1)\n", {"x": np.zeros((3, 0), np.float32)},
      {"y": np.zeros((3, 0), np.float32)})
check("cumsum_i32", "input x: i32[N, M]\noutput y = cumsum(x, axis=0)\noutput z = cumprod(x, axis=1)\n", {"x": xi},
      {"y": np.cumsum(xi, axis=0).astype(np.int32), "z": np.cumprod(xi, axis=1).astype(np.int32)})  # NumPy widens to i64
big = np.array([2**31 - 1, 1, 1], np.int32)
check("cumsum_i32_wraps", "input x: i32[N]\noutput y = cumsum(x)\n", {"x": big},
      {"y": np.cumsum(big.astype(np.int64)).astype(np.int32)})
check("cumsum_bool", "input x: bool[N, M]\noutput y = cumsum(x, axis=1)\n", {"x": xb},
      {"y": np.cumsum(xb, axis=1).astype(np.int32)})
check("cumsum_i64_3d", "input x: i64[A, B, C]\noutput y = cumsum(x, axis=1)\n", {"x": (x3 * 10).astype(np.int64)},
      {"y": np.cumsum((x3 * 10).astype(np.int64), axis=1)})
check("cumsum_f64_flat_3d", "input x: f64[A, B, C]\noutput y = cumsum(x)\n", {"x": x3.astype(np.float64)},
      {"y": np.cumsum(x3.astype(np.float64))}, rtol=1e-12, atol=1e-12)
check("running_mean", "input x: f32[N]\noutput y = cumsum(x) / f32(arange(N) + 1)\n", {"x": v[:2]},
      {"y": np.cumsum(v[:2]) / np.arange(1, 3, dtype=np.float32)})

# ---- clip: NumPy's minimum(maximum(x, lo), hi) ----
x = np.array([-2, -0.5, 0, 0.5, 2, nan, inf, -inf], np.float32)
check("clip_scalars", "input x: f32[N]\noutput y = clip(x, -1.0, 1.0)\n", {"x": x}, {"y": np.clip(x, -1, 1)}, exact=True)
check("clip_lo_above_hi", "input x: f32[N]\noutput y = clip(x, 1.0, -1.0)\n", {"x": x}, {"y": np.clip(x, 1, -1)}, exact=True)
m = rng.standard_normal((4, 5)).astype(np.float32)
lo = rng.standard_normal((5,)).astype(np.float32) - 0.5
hi = rng.standard_normal((4, 1)).astype(np.float32) + 0.5
check("clip_broadcast", "input x: f32[N, M]\ninput lo: f32[M]\ninput hi: f32[N, 1]\noutput y = clip(x, lo, hi)\n",
      {"x": m, "lo": lo, "hi": hi}, {"y": np.clip(m, lo, hi)}, exact=True)
check("clip_nan_bound", "input x: f32[N]\ninput lo: f32[N]\noutput y = clip(x, lo, 1.0)\n",
      {"x": np.ones(3, np.float32) * 0.5, "lo": np.array([0, nan, 0], np.float32)},
      {"y": np.array([0.5, nan, 0.5], np.float32)}, exact=True)
check("clip_i32", "input x: i32[N, M]\noutput y = clip(x, -1, 1)\n", {"x": xi}, {"y": np.clip(xi, -1, 1)})
check("clip_in_fn", "fn f(v) = clip(v * 2.0, 0.0, 1.0)\ninput x: f32[N]\noutput y = f(x)\n", {"x": x},
      {"y": np.clip(x * 2, 0, 1)}, exact=True)

# ---- errors ----
z = {"x": np.zeros((2, 3), np.float32)}
check_error("argmax_bad_axis", "input x: f32[N, M]\noutput y = argmax(x, axis=2)\n", z, "argmax: axis 2 is out of range")
check_error("argmax_empty", "input x: f32[0, M]\noutput y = argmax(x, axis=0)\n", {"x": np.zeros((0, 3), np.float32)},
            "empty sequence")
check_error("argmax_empty_runtime", "input x: f32[N, M]\noutput y = argmin(x, axis=0)\n", {"x": np.zeros((0, 3), np.float32)},
            "empty sequence")
check_error("cumsum_axis_list", "input x: f32[N, M]\noutput y = cumsum(x, axis=[0, 1])\n", z, "'axis' must be an integer")
check_error("cumprod_bad_axis", "input x: f32[N, M]\noutput y = cumprod(x, axis=-3)\n", z, "cumprod: axis -3 is out of range")
check_error("clip_arity", "input x: f32[N, M]\noutput y = clip(x, 0.0)\n", z, "error")
finish()
