#!/usr/bin/python3
"""Every float through fuse's compiled f32 sin, cos, tanh and sigmoid, against NumPy's f64.

fuse computes these with algorithms of its own (codegen/scalar_lowering.cpp: sin_cos_f32_inline,
exact in its reduction for |x| < 125, beyond which SLEEF's sincos is called; tanh_f32_inline;
sigmoid_inline), so their accuracy is measured here over every input: sin and cos over every
float in (-125, 125), tanh and sigmoid over every float (about 1.1e9 and 4.3e9 values). Chunks of 2^24 + 7 elements, so that every
chunk has a loop, a masked tail and their out-of-line copy. Prints each function's largest error
in ulps of the exact value and where; fails above 1 ulp, on a zero's sign, or on NaN where the
exact value is not NaN (and the other way). Not part of `make test` (about 2 minutes for sin and
cos, 4 each for tanh and sigmoid, on the 2-core machine):

    PYTHONPATH=build/python /usr/bin/python3 tests/f32_sweep.py [sin cos tanh sigmoid]
"""
import sys
import time

import numpy as np

import fuse


@fuse.jit
def sine_and_cosine(x):
    return fuse.sin(x), fuse.cos(x)


@fuse.jit
def hyperbolic_tangent(x):
    return fuse.tanh(x)


@fuse.jit
def logistic(x):
    return fuse.sigmoid(x)


def exact_sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def ulps(got, exact):
    """|got - exact| in units of the last place of f32 at the exact value (inf where NaN-ness differs)."""
    _, exponent = np.frexp(np.abs(exact))
    with np.errstate(invalid="ignore"):
        error = np.abs(got.astype(np.float64) - exact) / np.ldexp(1.0, np.maximum(exponent - 24, -149))
    both_nan = np.isnan(got) & np.isnan(exact)
    same_inf = np.isinf(exact) & (got.astype(np.float64) == exact)
    error[both_nan | same_inf] = 0
    error[np.isnan(got) != np.isnan(exact)] = np.inf
    return error


def sweep(names, end, compiled):
    chunk = 1 << 24
    worst = {name: (0.0, 0.0) for name in names}
    for sign in (0, 0x80000000):
        for start in range(0, end, chunk):
            x = (np.arange(start, min(start + chunk + 7, end), dtype=np.uint64).astype(np.uint32) | np.uint32(sign)).view(np.float32)
            results = compiled(x)
            results = results if isinstance(results, tuple) else (results,)
            with np.errstate(invalid="ignore"):  # signaling NaNs
                wide = x.astype(np.float64)
            for name, got in zip(names, results):
                error = ulps(got, exact_sigmoid(wide) if name == "sigmoid" else getattr(np, name)(wide))
                i = int(np.argmax(error))
                if error[i] > worst[name][0]:
                    worst[name] = (float(error[i]), float(x[i]))
                if name in ("sin", "tanh"):
                    zeros = x == 0
                    if (np.signbit(got[zeros]) != np.signbit(x[zeros])).any():
                        worst[name] = (np.inf, 0.0)
    return worst


def main(argv):
    wanted = set(argv) or {"sin", "cos", "tanh", "sigmoid"}
    start_time = time.time()
    worst = {}
    if wanted & {"sin", "cos"}:
        worst.update(sweep(["sin", "cos"], 0x42FA0000, sine_and_cosine))  # the bits of 125.0f
    if "tanh" in wanted:
        worst.update(sweep(["tanh"], 0x80000000, hyperbolic_tangent))  # every float, inf and NaN too
    if "sigmoid" in wanted:
        worst.update(sweep(["sigmoid"], 0x80000000, logistic))
    for name, (error, at) in worst.items():
        print(f"{name}: at most {error:.4f} ulp (at {at!r})")
    print(f"{time.time() - start_time:.0f} s")
    return 0 if max(e for e, _ in worst.values()) <= 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
