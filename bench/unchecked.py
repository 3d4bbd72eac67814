"""Imported by the benchmarks that time kernels: they time the unchecked kernels
(PYCOOP_CHECKED=0, the production mode). pycoop reads the setting at each launch, so the
import only has to come before the first one. The cost of checked launches is what
bench/checked_overhead.py measures."""
import os

os.environ["PYCOOP_CHECKED"] = "0"
