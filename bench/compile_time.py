"""Compile speed: trace + lower + spirv-val of the KHR GEMM, cold (first specialisation in the
process) and cached (same specialisation again).

    python3 bench/compile_time.py
"""
from __future__ import annotations

import os
import time

os.environ["PYCOOP_CACHE_DIR"] = "off"       # measure real compiles, not the disk cache


def main() -> None:
    t0 = time.perf_counter()
    import pycoop  # noqa: F401
    from pycoop.kernels.gemm import gemm_khr
    t_import = (time.perf_counter() - t0) * 1e3
    rows = []
    for tm, tn in ((2, 2), (4, 2), (4, 4)):
        t0 = time.perf_counter()
        ck = gemm_khr.compile(TM=tm, TN=tn)
        t_trace = time.perf_counter()
        ck.spv
        t_done = time.perf_counter()
        t1 = time.perf_counter()
        gemm_khr.compile(TM=tm, TN=tn).spv
        t_cached = (time.perf_counter() - t1) * 1e3
        rows.append((f"TM={tm} TN={tn}", (t_trace - t0) * 1e3, (t_done - t_trace) * 1e3,
                     (t_done - t0) * 1e3, t_cached))
    print(f"# compile time, {time.strftime('%Y-%m-%d')} (import of pycoop: {t_import:.1f} ms)")
    print(f"{'kernel':<14}{'trace ms':>10}{'lower+val ms':>14}{'cold ms':>10}{'cached ms':>11}")
    for r in rows:
        print(f"{r[0]:<14}{r[1]:>10.2f}{r[2]:>14.2f}{r[3]:>10.2f}{r[4]:>11.3f}")


if __name__ == "__main__":
    main()
