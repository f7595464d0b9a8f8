# The package under test is the build tree's (PYTHONPATH=BUILD/python, set by CTest); the
# examples are the source tree's.
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
