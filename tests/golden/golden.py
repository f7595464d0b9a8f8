"""Golden checks of fuse's reference interpreter against NumPy.

Each test script (tests/golden/test_*.py) writes a small .expr program, runs it on the interpreter
through `fusec run --target=interp` with .npy inputs, and compares every output with what NumPy
computes for the same inputs. Scripts are plain Python (no pytest needed) run by CTest:

    /usr/bin/python3 tests/golden/test_NAME.py --fusec build/frontends/fusec/fusec

A case failing prints the program, the inputs and both results, and the script exits 1.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

_FUSEC = None
_FAILURES = []
_CASES = 0


def _args():
    global _FUSEC
    if _FUSEC is None:
        p = argparse.ArgumentParser()
        p.add_argument("--fusec", required=True)
        _FUSEC = p.parse_args().fusec
    return _FUSEC


def run_expr(source, inputs, target="interp", extra=()):
    """Runs `source` (.expr text) on `inputs` (name -> np.ndarray): returns name -> np.ndarray.

    Raises RuntimeError with fusec's stderr when fusec fails."""
    fusec = _args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "case.expr")
        with open(path, "w") as f:
            f.write(source)
        cmd = [fusec, "run", path, "--target=" + target, "--out", os.path.join(d, "out"), *extra]
        for name, value in inputs.items():
            file = os.path.join(d, "in_" + name + ".npy")
            np.save(file, value)
            cmd += ["--input", name + "=" + file]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"fusec failed ({r.returncode}):\n{r.stderr}{r.stdout}")
        out = {}
        for file in sorted(os.listdir(os.path.join(d, "out"))):
            if file.endswith(".npy") and not file.endswith(".bound.npy"):
                out[file[:-4]] = np.load(os.path.join(d, "out", file))
        return out


def check(name, source, inputs, expected, rtol=1e-6, atol=1e-6, exact=False, target="interp"):
    """One case: runs `source` on `inputs` and compares each output with `expected` (name ->
    array). Integer and bool outputs, and `exact=True`, compare exactly (NaNs equal NaNs);
    dtypes and shapes must match."""
    global _CASES
    _CASES += 1
    try:
        got = run_expr(source, inputs, target)
    except RuntimeError as e:
        _FAILURES.append(f"{name}: {e}")
        return
    for out, want in expected.items():
        want = np.asarray(want)
        have = got.get(out)
        problem = None
        if have is None:
            problem = f"no output '{out}' (outputs: {sorted(got)})"
        elif have.dtype != want.dtype:
            problem = f"dtype {have.dtype}, NumPy {want.dtype}"
        elif have.shape != want.shape:
            problem = f"shape {have.shape}, NumPy {want.shape}"
        elif exact or want.dtype.kind in "biu":
            if not np.array_equal(have, want, equal_nan=want.dtype.kind == "f"):
                problem = "values differ"
        elif not np.allclose(have, want, rtol=rtol, atol=atol, equal_nan=True):
            problem = f"values differ beyond rtol={rtol} atol={atol}"
        if problem:
            shown = {k: np.asarray(v).tolist() if np.asarray(v).size <= 64 else f"{v.dtype}{v.shape}" for k, v in inputs.items()}
            _FAILURES.append(f"{name}: output '{out}': {problem}\n--- program\n{source}\n--- inputs {shown}\n"
                             f"--- fuse  {None if have is None else have.tolist() if have.size <= 64 else have}\n"
                             f"--- numpy {want.tolist() if want.size <= 64 else want}")


def check_error(name, source, inputs, needle, target="interp"):
    """One case that must fail: fusec exits non-zero and its message contains `needle`."""
    global _CASES
    _CASES += 1
    try:
        run_expr(source, inputs, target)
        _FAILURES.append(f"{name}: expected an error containing {needle!r}, but it ran")
    except RuntimeError as e:
        if needle not in str(e):
            _FAILURES.append(f"{name}: error does not contain {needle!r}:\n{e}")


def finish():
    """Prints the summary and exits 1 when a case failed (call at the end of a script)."""
    for f in _FAILURES:
        print("FAILED " + f + "\n", file=sys.stderr)
    print(f"{_CASES - len(_FAILURES)}/{_CASES} golden cases passed")
    sys.exit(1 if _FAILURES or _CASES == 0 else 0)
