#!/usr/bin/env python3
"""The cost of calling a @fuse.jit function from Python (bench/README.md):

    PYTHONPATH=build/python /usr/bin/python3 bench/python_dispatch.py

1. Dispatch overhead at steady state on small arrays (1,000 float32 elements, x + y): fuse's
   jitted call against NumPy's own np.add on the same arrays (and Numba's @njit when installed).
2. Large arrays (10M elements, softmax rows): the jitted call from Python against the same
   compiled program run through the C++ API (Executable::run) in a C++ loop, both making a new
   40 MB output per call (and, for scale, the C++ loop reusing one output).
Prints microseconds per call (the median of several repeats of many calls).
"""
import sys
import statistics
import timeit

import numpy as np

import fuse


def median_us(fn, number, repeat=7):
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main():
    n = 1000
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = np.random.default_rng(1).random(n, dtype=np.float32)
    add = fuse.jit(lambda x, y: x + y)
    np.testing.assert_allclose(add(x, y), x + y)

    print(f"dispatch, x + y on {n} float32 elements (us per call, median of 7):")
    calls = 20000
    rows = [("fuse.jit", median_us(lambda: add(x, y), calls)),
            ("np.add", median_us(lambda: np.add(x, y), calls))]
    try:
        import numba

        nb_add = numba.njit(lambda x, y: x + y)
        nb_add(x, y)
        rows.append(("numba.njit", median_us(lambda: nb_add(x, y), calls)))
    except ImportError:
        rows.append(("numba.njit", None))
    for name, us in rows:
        print(f"  {name:<12} " + (f"{us:8.2f}" if us is not None else "  (not installed)"))
    print(f"  fuse - np.add: {rows[0][1] - rows[1][1]:.2f} us of overhead beyond NumPy's own call")

    print("large arrays, softmax over rows of [1000, 10000] float32 (us per call, median of 5):")
    big = np.random.default_rng(2).random((1000, 10000), dtype=np.float32)

    @fuse.jit
    def softmax(x):
        e = fuse.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    softmax(big)
    py_us = median_us(lambda: softmax(big), 10, repeat=5)
    cpp_us = statistics.median(softmax.last.time_cpp([big], 10, False) for _ in range(5)) * 1e6
    reused_us = statistics.median(softmax.last.time_cpp([big], 10, True) for _ in range(5)) * 1e6
    print(f"  fuse.jit from Python (new output per call)      {py_us:10.1f}")
    print(f"  C++ Executable::run (new output per call)       {cpp_us:10.1f}")
    print(f"  Python / C++: {py_us / cpp_us:.3f}")
    print(f"  C++ Executable::run (output reused, no page faults) {reused_us:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
