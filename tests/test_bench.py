"""The benchmark scripts stay runnable: every one imports (in a fresh interpreter, since some
set environment variables such as PYCOOP_CHECKED when imported), and the probes of
bench/prefill_parts.py build modules of their own that pass spirv-val."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py"))


def test_every_bench_script_imports():
    code = ("import importlib, sys\n"
            f"sys.path.insert(0, {str(BENCH)!r})\n"
            f"for name in {SCRIPTS!r}:\n"
            "    importlib.import_module(name)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(SCRIPTS) >= 15


def test_prefill_parts_steps_build_modules_of_their_own():
    """Each step replaces the prefill's per-block step (or its loop) while the kernel is traced (a kernel
    traced after the replacement was undone timed the full kernel five times), and the
    module's step is the real one again afterwards."""
    sys.path.insert(0, str(BENCH))
    try:
        import prefill_parts
    finally:
        sys.path.remove(str(BENCH))
    spv = {step: prefill_parts.build(64, 32, 32, 64, False, step).compile().spv
           for step in prefill_parts.STEPS}
    assert len(set(spv.values())) == len(spv)
    assert prefill_parts.A.attend is prefill_parts.FULL
    assert prefill_parts.A.key_blocks is prefill_parts.KEY_BLOCKS
    assert prefill_parts.A.load_kv is prefill_parts.LOAD_KV
    assert (prefill_parts.A.load_q, prefill_parts.A.block_scores) == (prefill_parts.LOAD_Q,
                                                                  prefill_parts.SCORES)
    from pycoop.kernels import attention_prefill
    assert attention_prefill(64, 32, 32, 64).compile().spv == spv["full"]


def test_prefill_parts_causal_probes_build_modules_of_their_own():
    """The causal probes (the diagonal's masking left out, its loads strided) each trace a
    module of their own, and the attention module's causal score and K/V loaders are the real
    ones again afterwards."""
    sys.path.insert(0, str(BENCH))
    try:
        import prefill_parts
    finally:
        sys.path.remove(str(BENCH))
    spv = {step: prefill_parts.build(64, 32, 32, 64, True, step).compile().spv
           for step in prefill_parts.CAUSAL_STEPS}
    assert len(set(spv.values())) == len(spv)
    assert prefill_parts.ATT.causal_score is prefill_parts.CAUSAL_SCORE
    assert prefill_parts.A.kv_loaders is prefill_parts.KV_LOADERS
    from pycoop.kernels import attention_prefill
    assert attention_prefill(64, 32, 32, 64, True).compile().spv == spv["full"]
