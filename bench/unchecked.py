"""Imported first by the benchmarks that time kernels, before pycoop: they time the unchecked
kernels (PYCOOP_CHECKED=0, the production mode). The cost of checked launches is what
bench/checked_overhead.py measures."""
import os

os.environ["PYCOOP_CHECKED"] = "0"
