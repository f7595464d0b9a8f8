"""The interpreter's existing reductions and softmax against NumPy (also the harness's own check)."""
import numpy as np

from golden import check, check_error, finish

rng = np.random.default_rng(7)
for shape in [(1, 1), (7, 3), (3, 1023)]:
    x = rng.standard_normal(shape).astype(np.float32)
    check(f"sum_rows_{shape}", "input x: f32[N, M]\noutput y = sum(x, axis=1)\n", {"x": x},
          {"y": x.astype(np.float64).sum(axis=1).astype(np.float32)}, rtol=1e-5, atol=1e-5)
    check(f"max_cols_{shape}", "input x: f32[N, M]\noutput y = max(x, axis=0, keepdims=true)\n", {"x": x},
          {"y": x.max(axis=0, keepdims=True)}, exact=True)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    check(f"softmax_{shape}", "input x: f32[N, M]\nlet e = exp(x - max(x, axis=1, keepdims=true))\noutput y = e / sum(e, axis=1, keepdims=true)\n",
          {"x": x}, {"y": e / e.sum(axis=1, keepdims=True)}, rtol=1e-5, atol=1e-6)
i = rng.integers(-5, 5, size=(4, 6)).astype(np.int32)
check("prod_i32", "input x: i32[N, M]\noutput y = prod(x, axis=0)\n", {"x": i}, {"y": i.prod(axis=0).astype(np.int32)})  # fuse keeps i32 (NumPy widens to i64)
check_error("bad_axis", "input x: f32[N]\noutput y = sum(x, axis=3)\n", {"x": np.zeros(3, np.float32)}, "error")
finish()
