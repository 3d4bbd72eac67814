"""A driver defect found by the exact fuzzing campaign (docs/numerics.md, driver table): the
NVIDIA driver 580.159.04 fails vkCreateComputePipelines (VK_ERROR_UNKNOWN) for seed 310132's
reduced kernel, a valid module (spirv-val). pycoop reports it as `PipelineError` at the launch;
this test prints which variants of the kernel the driver builds, to narrow the condition down
(run with -s), and checks that the failure surfaces as `PipelineError` and that the loop-free
variants build."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import i32, u32
from pycoop.runtime.vulkan import PipelineError

pytestmark = pytest.mark.gpu


def variant(fp: str, loop: bool, abs_: bool, body: bool):
    @pc.kernel(workgroup_size=64, fp=fp)
    def k(A: pc.ReadBuffer[i32], O: pc.Buffer[i32]):
        lid = pc.local_invocation_index()
        wid = pc.workgroup_id.x
        if loop:
            for _ in pc.range(2, 3):
                v = A[(lid * wid) % u32(64)] | i32(1)
                if (pc.abs(v) if abs_ else v) >= i32(1):
                    if body:
                        O[lid] = i32(7)
        else:
            v = A[(lid * wid) % u32(64)] | i32(1)
            if (pc.abs(v) if abs_ else v) >= i32(1):
                if body:
                    O[lid] = i32(7)
    return k


def loop_variant(kind: str):
    """Loops around a load, to narrow the condition: `trip2` (range(0, 2), seed 320465's),
    `trip4`, `used` (the induction variable indexes the load), `noif` (the load stored, no
    `if`), `runtime` (a runtime bound)."""
    @pc.kernel(workgroup_size=64, fp="exact")
    def k(A: pc.ReadBuffer[i32], O: pc.Buffer[i32], n: u32):
        lid = pc.local_invocation_index()
        wid = pc.workgroup_id.x
        if kind == "noif":
            for _ in pc.range(0, 2):
                O[lid] = A[(lid * wid) % u32(64)] | i32(1)
        elif kind == "runtime":
            for _ in pc.range(0, n):
                if A[(lid * wid) % u32(64)] | i32(1) >= i32(1):
                    O[lid] = i32(7)
        elif kind == "used":
            for j in pc.range(0, 2):
                if A[(lid * wid + j) % u32(64)] | i32(1) >= i32(1):
                    O[lid] = i32(7)
        else:
            for _ in pc.range(0, 2 if kind == "trip2" else 4):
                if A[(lid * wid) % u32(64)] | i32(1) >= i32(1):
                    O[lid] = i32(7)
    return k


def builds(k, *scalars) -> bool | str:
    try:
        k[1](np.arange(64, dtype=np.int32), np.zeros(64, np.int32), *scalars, backend="vulkan")
        return True
    except PipelineError:
        return False
    except pc.BackendUnavailable as e:                   # noqa: F841
        pytest.skip(str(e))


def test_seed_310132_pipeline_failure_is_as_documented():
    """The seed's shape (a one-iteration loop around an empty `if` on abs(load | 1) >= 1, exact
    mode) fails to build; the variants' outcomes are printed."""
    report = {}
    for fp in ("exact", "fast"):
        for loop in (True, False):
            for abs_ in (True, False):
                for body in (False, True):
                    report[(fp, loop, abs_, body)] = builds(variant(fp, loop, abs_, body))
    for (fp, loop, abs_, body), ok in report.items():
        print(f"fp={fp} loop={loop} abs={abs_} body={'store' if body else 'empty'}: "
              f"{'builds' if ok else 'PipelineError'}")
    for kind in ("trip2", "trip4", "used", "noif", "runtime"):
        ok = builds(loop_variant(kind), 2)
        print(f"loop {kind}: {'builds' if ok else 'PipelineError'}")
    # the failure is intermittent: seen in every run of this file alone on the H200, not in
    # one run after other GPU tests in the same process; pycoop's part is the clear
    # PipelineError (builds() catches exactly that), and every loop-free variant must build
    if report[("exact", True, True, False)]:
        print("seed 310132's kernel built this time (the failure is intermittent)")
    assert all(ok for (fp, loop, abs_, body), ok in report.items() if not loop)
