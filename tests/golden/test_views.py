"""np-views against NumPy: basic indexing (slices, negative steps, None, ...), concatenate, stack
and pad (constant, edge, reflect), on the interpreter and the CPU target."""
import numpy as np

from golden import check, check_error, finish

rng = np.random.default_rng(16)
TARGETS = ["interp", "cpu"]


def both(name, source, inputs, expected, **kw):
    for t in TARGETS:
        check(f"{name}_{t}", source, inputs, expected, target=t, exact=True, **kw)


# ---- basic indexing, 1-D, every size class
for n in [0, 1, 2, 7, 1023]:
    x = rng.standard_normal(n).astype(np.float32)
    for index in ["1:", ":-1", "1:-1", "::2", "::-1", "-3:", ":-3", "5:2", "2:5", "-2::-2", "1::3", "10:", ":100",
                  "-100:", "::-3", "3:0:-1", ":2:-1"]:
        src = f"input x: f32[N]\noutput y = x[{index}]\n"
        both(f"slice1d_{n}_{index}", src, {"x": x}, {"y": eval(f"x[{index}]")})
    if n > 0:
        both(f"int_first_{n}", "input x: f32[N]\noutput y = x[0] + x[-1]\n", {"x": x}, {"y": np.float32(x[0] + x[-1])})
    # the symbolic forms: a dim bound
    both(f"half_{n}", "input x: f32[N]\noutput y = x[:N // 2]\n", {"x": x}, {"y": x[: n // 2]})
    both(f"half_back_{n}", "input x: f32[N]\noutput y = x[N // 2:]\n", {"x": x}, {"y": x[n // 2:]})

# the stencil: one kernel in the C++ tests, values here
for n in [0, 1, 2, 3, 7, 1023]:
    x = rng.standard_normal(n).astype(np.float64)
    both(f"blur_{n}", "input x: f64[N]\noutput y = (x[:-2] + x[1:-1] + x[2:]) / 3\n", {"x": x},
         {"y": (x[:-2] + x[1:-1] + x[2:]) / 3})

# ---- 2-D and 3-D: mixes of integers, slices, None and ...
a = rng.integers(-100, 100, size=(5, 7)).astype(np.int32)
for index in ["1", "-1", ":, 0", ":, -2", "1:3, ::-2", "..., 0", "None, :", ":, None", "None, ..., None", "2, 3",
              "-1, ::-1", "::-1, None, 1:", "..., 1:4", "1:, ...", "3:1, :", ":, 10:"]:
    both(f"slice2d_{index}", f"input a: i32[R, C]\noutput y = a[{index}]\n", {"a": a}, {"y": eval(f"a[{index}]")})
b = (rng.standard_normal((3, 4, 5)) > 0)
for index in ["..., 1, :", "1, ..., ::2", ":, None, 2, None", "-1, -1, -1"]:
    both(f"slice3d_{index}", f"input b: bool[A, B, C]\noutput y = b[{index}]\n", {"b": b}, {"y": eval(f"b[{index}]")})
# known sizes
k = rng.standard_normal((4, 6)).astype(np.float32)
both("known_slice", "input k: f32[4, 6]\noutput y = k[1:-1, ::-3] * 2\n", {"k": k}, {"y": k[1:-1, ::-3] * 2})
# slice of a slice, slices into a reduction and with broadcasting
x = rng.standard_normal(11).astype(np.float64)
both("slice_of_slice", "input x: f64[N]\nlet s = x[1:]\noutput y = s[::-2]\n", {"x": x}, {"y": x[1:][::-2]})
check("sum_of_slice", "input x: f64[N]\noutput y = sum(x[1::2])\n", {"x": x}, {"y": x[1::2].sum()}, rtol=1e-12)
check("sum_of_slice_cpu", "input x: f64[N]\noutput y = sum(x[1::2])\n", {"x": x}, {"y": x[1::2].sum()}, rtol=1e-12,
      target="cpu")
both("outer", "input x: f64[N]\noutput y = x[:, None] * x[None, ::-1]\n", {"x": x}, {"y": x[:, None] * x[None, ::-1]})

# ---- concatenate and stack
for n in [1, 7, 1023]:
    p = rng.standard_normal((2, n)).astype(np.float32)
    q = rng.standard_normal((3, n)).astype(np.float32)
    both(f"concat0_{n}", "input p: f32[2, N]\ninput q: f32[3, N]\noutput y = concatenate([p, q, p])\n",
         {"p": p, "q": q}, {"y": np.concatenate([p, q, p])})
    both(f"concat1_{n}", "input p: f32[2, N]\noutput y = concatenate([p, p * 2], axis=-1)\n", {"p": p},
         {"y": np.concatenate([p, p * 2], axis=-1)})
    both(f"stack_{n}", "input p: f32[2, N]\noutput y = stack([p, -p], axis=1)\n", {"p": p}, {"y": np.stack([p, -p], axis=1)})
    both(f"stack_last_{n}", "input p: f32[2, N]\noutput y = stack([p, p + 1, p], axis=-1)\n", {"p": p},
         {"y": np.stack([p, p + 1, p], axis=-1)})
e = np.zeros((0, 3), np.int64)
f = np.arange(6, dtype=np.int64).reshape(2, 3)
both("concat_empty", "input e: i64[Z, 3]\ninput f: i64[2, 3]\noutput y = concatenate([e, f, e])\n", {"e": e, "f": f},
     {"y": np.concatenate([e, f, e])})

# ---- pad
for n in [1, 2, 3, 7, 1023]:
    x = rng.standard_normal(n).astype(np.float32)
    for widths in [(0, 0), (1, 2), (3, 0), (0, 5), (6, 7)]:
        w = f"[{widths[0]}, {widths[1]}]"
        both(f"pad_const_{n}_{widths}", f"input x: f32[N]\noutput y = pad(x, {w}, value=1.5)\n", {"x": x},
             {"y": np.pad(x, widths, constant_values=1.5)})
        both(f"pad_edge_{n}_{widths}", f"input x: f32[N]\noutput y = pad(x, {w}, mode=\"edge\")\n", {"x": x},
             {"y": np.pad(x, widths, mode="edge")})
        both(f"pad_reflect_{n}_{widths}", f"input x: f32[N]\noutput y = pad(x, {w}, mode=\"reflect\")\n", {"x": x},
             {"y": np.pad(x, widths, mode="reflect")})
m = rng.integers(0, 9, size=(3, 4)).astype(np.int32)
both("pad2d_const", "input m: i32[R, C]\noutput y = pad(m, [[1, 0], [2, 3]], value=-7)\n", {"m": m},
     {"y": np.pad(m, [[1, 0], [2, 3]], constant_values=-7)})
both("pad2d_reflect", "input m: i32[R, C]\noutput y = pad(m, [[2, 2], [0, 5]], mode=\"reflect\")\n", {"m": m},
     {"y": np.pad(m, [[2, 2], [0, 5]], mode="reflect")})
both("pad2d_edge_all", "input m: i32[R, C]\noutput y = pad(m, 2, mode=\"edge\")\n", {"m": m}, {"y": np.pad(m, 2, mode="edge")})
nan = np.array([np.nan, 1, -np.inf], np.float64)
both("pad_nan", "input x: f64[3]\noutput y = pad(x, [2, 2], mode=\"reflect\") + pad(x, [4, 0], value=nan)[:9]\n",
     {"x": nan}, {"y": np.pad(nan, [2, 2], mode="reflect") + np.pad(nan, [4, 0], constant_values=np.nan)[:9]})
z = np.zeros(0, np.float32)
both("pad_const_empty", "input x: f32[N]\noutput y = pad(x, [1, 2], value=3)\n", {"x": z}, {"y": np.pad(z, [1, 2], constant_values=3)})

# ---- errors
x7 = np.zeros(7, np.float32)
for t in TARGETS:
    check_error(f"runtime_index_{t}", "input x: f32[N]\noutput y = x[9]\n", {"x": x7}, "index 9 is out of range", target=t)
    check_error(f"runtime_neg_index_{t}", "input x: f32[N]\noutput y = x[-8]\n", {"x": x7}, "(N = 7)", target=t)
    check_error(f"reflect_empty_{t}", "input x: f32[N]\noutput y = pad(x, [1, 1], mode=\"reflect\")\n",
                {"x": z}, "cannot extend axis 0", target=t)
check_error("known_index", "input x: f32[4]\noutput y = x[4]\n", {"x": np.zeros(4, np.float32)}, "2:13: error: x[...]: index 4 is out of range")
check_error("too_many", "input x: f32[N]\noutput y = x[1, 2]\n", {"x": x7}, "too many indices")
check_error("zero_step", "input x: f32[N]\noutput y = x[::0]\n", {"x": x7}, "step cannot be zero")
check_error("two_ellipses", "input x: f32[N]\noutput y = x[..., ...]\n", {"x": x7}, "single ellipsis")
check_error("bad_mode", "input x: f32[N]\noutput y = pad(x, 1, mode=\"wrap\")\n", {"x": x7}, "'mode' must be")
check_error("concat_shapes", "input a: f32[2, 3]\ninput b: f32[2, 4]\noutput y = concatenate([a, b])\n",
            {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 4), np.float32)}, "[2, 3] and [2, 4]")
check_error("stack_shapes", "input a: f32[2, 3]\ninput b: f32[2, 4]\noutput y = stack([a, b])\n",
            {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 4), np.float32)}, "same shape")
finish()
