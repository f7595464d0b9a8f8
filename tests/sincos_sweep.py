#!/usr/bin/python3
"""Every f32 in (-125, 125) through fuse's compiled sin and cos, against NumPy's f64 sin and cos.

The range where fuse's inlined sincos is exact in its reduction (ScalarLowering::sin_cos_f32_inline;
beyond it SLEEF's sincos is called); about 1.1e9 values of each sign, in chunks of 2^24 + 7
elements (so every chunk has a loop, a masked tail and its out-of-line copy). Prints the largest
error of each, in ulps of the exact value, and where; fails above 1 ulp or on a zero's sign.
Not part of `make test` (2 minutes on the 2-core machine):

    PYTHONPATH=build/python /usr/bin/python3 tests/sincos_sweep.py
"""
import sys
import time

import numpy as np

import fuse


@fuse.jit
def sine_and_cosine(x):
    return fuse.sin(x), fuse.cos(x)


def ulps(got, exact):
    """|got - exact| in units of the last place of f32 at the exact value."""
    _, exponent = np.frexp(np.abs(exact))
    return np.abs(got.astype(np.float64) - exact) / np.ldexp(1.0, np.maximum(exponent - 24, -149))


def main():
    end = 0x42FA0000  # the bits of 125.0f
    chunk = 1 << 24
    worst = {"sin": (0.0, 0.0), "cos": (0.0, 0.0)}
    start_time = time.time()
    for sign in (0, 0x80000000):
        for start in range(0, end, chunk):
            x = (np.arange(start, min(start + chunk + 7, end), dtype=np.uint32) | np.uint32(sign)).view(np.float32)
            sine, cosine = sine_and_cosine(x)
            wide = x.astype(np.float64)
            for name, got, exact in (("sin", sine, np.sin(wide)), ("cos", cosine, np.cos(wide))):
                error = ulps(got, exact)
                i = int(np.argmax(error))
                if error[i] > worst[name][0]:
                    worst[name] = (float(error[i]), float(x[i]))
            zeros = x == 0
            if (np.signbit(sine[zeros]) != np.signbit(x[zeros])).any():
                print("sin of a zero lost its sign")
                return 1
    for name, (error, at) in worst.items():
        print(f"{name}: at most {error:.4f} ulp (at {at!r})")
    print(f"{time.time() - start_time:.0f} s")
    return 0 if max(e for e, _ in worst.values()) <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
