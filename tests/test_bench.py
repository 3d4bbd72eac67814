"""The benchmark scripts stay runnable: every one imports (in a fresh interpreter, since some
set environment variables such as PYCOOP_CHECKED when imported), and the probes of
bench/prefill_parts.py build modules of their own that pass spirv-val."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from unittest import mock

import pytest

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


@pytest.mark.parametrize("causal", [False, True])
def test_prefill_parts_steps_build_modules_of_their_own(causal):
    """Each step replaces the prefill's per-block step (or its loop; causal: the diagonal's
    masking and loads) while the kernel is traced (a kernel traced after the replacement was
    undone timed the full kernel five times), and every replaced function is the real one
    again afterwards."""
    sys.path.insert(0, str(BENCH))
    try:
        # the script turns checked launches off for the process when imported: not the suite's
        with mock.patch.dict(os.environ):
            import prefill_parts as pp
    finally:
        sys.path.remove(str(BENCH))
    steps = pp.CAUSAL_STEPS if causal else pp.STEPS
    spv = {step: pp.build(64, 32, 32, 64, causal, step).compile().spv for step in steps}
    assert len(set(spv.values())) == len(spv)
    assert (pp.A.attend, pp.A.key_blocks, pp.A.load_kv) == (pp.FULL, pp.KEY_BLOCKS, pp.LOAD_KV)
    assert (pp.A.load_q, pp.A.block_scores, pp.A.store_lse) == (pp.LOAD_Q, pp.SCORES,
                                                                pp.STORE_LSE)
    assert (pp.ATT.causal_score, pp.A.kv_loaders) == (pp.CAUSAL_SCORE, pp.KV_LOADERS)
    from pycoop.kernels import attention_prefill
    assert attention_prefill(64, 32, 32, 64, causal).compile().spv == spv["full"]
