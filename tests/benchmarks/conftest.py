"""The benchmarks run as scripts (`python benchmarks/X.py`), which puts their
folder on sys.path, so they import their shared modules by bare name
(`import bench_common`); their tests import them the same way."""

import os
import sys

BENCHMARKS_FOLDER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"
)
# Appended, not prepended: the benchmarks' module names are their own, and must
# not shadow anything the rest of the suite imports.
if BENCHMARKS_FOLDER not in sys.path:
    sys.path.append(BENCHMARKS_FOLDER)
