"""The differential fuzzer (pycoop.testing): its generator, runner, shrinker and CLI, and fixed
seed ranges of random kernels that must agree bit for bit between the emulator and Vulkan
(lavapipe in CI; the GPU test adds cooperative matrices)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pycoop as pc
from pycoop.testing import (KNOWN_DEFECTS, Features, Worker, compare_arrays, generate,
                            parse_features, run_program, shrink)
from pycoop.testing.allowances import (ALLOWANCES, allowances_for, device_model,
                                       loop_invariant_buffer_loads, pipeline_defects_for,
                                       vulkan_device)
from pycoop.testing.fuzz import fuzz
from pycoop.testing.gen import float_to_int_bounds
from pycoop.testing.program import Program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALAR = Features()                                   # scalar + shared memory, fast floats
KHR = parse_features("scalar,shared,khr")
ALL = parse_features("scalar,shared,khr,nv")
EXACT = Features(fp="exact")


def _vulkan():
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception as e:                            # noqa: BLE001
        pytest.skip(f"no Vulkan device: {e}")


# ---------------------------------------------------------------------------- generator

@pytest.mark.parametrize("features", [SCALAR, ALL], ids=["scalar", "all"])
def test_generation_is_deterministic_per_seed(features):
    for seed in (0, 7, 12345):
        assert generate(seed, features).render() == generate(seed, features).render()
    assert generate(1, features).render() != generate(2, features).render()


def test_generated_kernels_trace_validate_and_run_on_the_emulator():
    """Every kernel of a seed range traces, passes spirv-val and runs on the emulator with no
    undefined behaviour report (in this process: no worker)."""
    for seed in range(30):
        for features in (SCALAR, ALL):
            outcome = run_program(generate(seed, features), backend="emulator")
            assert outcome.cls == "ok", (seed, features.describe(), outcome.detail)


def test_generator_covers_the_constructs():
    text = "".join(generate(s, SCALAR).render() for s in range(60))
    for construct in ("@pc.func", "pc.shared(", "pc.barrier()", "pc.range(", "while ", "break",
                      "continue", " // ", " % ", " << ", " >> ", "pc.select(", " if ", "pc.min(",
                      "pc.cast(", "i8", "u16", "i64", "f16", "f64", "else:"):
        assert construct in text, construct
    khr = "".join(generate(s, KHR).render() for s in range(40))
    for construct in ("pc.mul_add(", "MC.fill(", '"col_major"', "pc.convert(", "acc = -acc"):
        assert construct in khr, construct
    nv = "".join(generate(s, ALL).render() for s in range(90))
    for construct in ('"undefined"', '"mirror_repeat"', ".clamp_value(", ".slice(", ".stride(",
                      "pc.nv.tensor_view(2, True", ".clip(", "pc.nv.store_tensor(", "object="):
        assert construct in nv, construct


def test_nv_inner_stride_is_generated_only_when_asked():
    """An innermost stride other than 1 meets the NVIDIA driver's defect (docs/numerics.md):
    off by default, on with `--with nv_inner_stride`; the seeds keep their other choices."""
    nv = ALL
    on = parse_features("scalar,shared,khr,nv", "nv_inner_stride")
    strides = [(generate(s, nv).render(), generate(s, on).render()) for s in range(100274, 100274 + 1)]
    assert ".stride(44, 1)" in strides[0][0] and ".stride(80, 2)" in strides[0][1]
    import re
    off = "".join(generate(s, nv).render() for s in range(400))
    assert re.findall(r"\.stride\(\d+, ([0-9]+)\)", off) and \
        set(re.findall(r"\.stride\(\d+, ([0-9]+)\)", off)) == {"1"}
    with_ = "".join(generate(s, on).render() for s in range(400))
    assert {"2", "3"} <= set(re.findall(r"\.stride\(\d+, ([0-9]+)\)", with_))


def test_nv_span_wrap_is_generated_only_when_asked():
    """An innermost span of 16 (the matrix's columns) with fewer than 16 rows of span meets the
    NVIDIA driver's defect (seed 100295, docs/numerics.md): off by default, on with
    `--with nv_span_wrap`; every other choice of a seed stays the same."""
    import re
    on = parse_features("scalar,shared,khr,nv", "nv_span_wrap")
    pattern = r"\.slice\(\d+, (\d+), \d+, 16\)"
    off_text = "".join(generate(s, ALL).render() for s in range(100000, 100400))
    on_text = "".join(generate(s, on).render() for s in range(100000, 100400))
    assert all(int(x) >= 16 for x in re.findall(pattern, off_text))
    assert any(int(x) < 16 for x in re.findall(pattern, on_text))
    strip = lambda t: re.sub(r"\.slice\([^)]*\)|\+nv_span_wrap,?|,\+nv_span_wrap", "", t)  # noqa: E731
    assert strip(off_text) == strip(on_text)


def test_constructs_that_met_fixed_defects_are_generated_by_default():
    """`continue` without `break`, kernel `return`, `pc.range` in runtime loops (also zero-trip
    and unroll=True), narrow negation, INT64_MIN division, i64 -> narrow float and f64 rounding
    all met defects once; they are fixed, so every run generates them."""
    text = "".join(generate(s, SCALAR).render() for s in range(150))
    for construct in ("return\n", "continue\n", "unroll=True", "pc.floor(", "(-"):
        assert construct in text, construct
    assert set(KNOWN_DEFECTS) == {"nv_inner_stride", "nv_span_wrap"}
    with pytest.raises(ValueError, match="unknown constructs"):
        parse_features("scalar", "no_such_thing")


def test_float_to_int_bounds_truncate_into_range():
    for f in ("f16", "f32", "f64"):
        for t in ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"):
            lo, hi = float_to_int_bounds(f, t)
            dt = getattr(pc, f).dtype
            tmin, tmax = (int(x) for x in getattr(pc, t).min_max())
            assert float(dt.type(lo)) == lo and float(dt.type(hi)) == hi   # representable
            assert tmin <= lo <= hi <= tmax


def test_exact_float_mode_follows_the_kernel_decorator():
    """`fp="exact"` is used once `pc.kernel` takes it (NoContraction + float controls); until
    then asking for it is a clear error."""
    from pycoop.testing import exact_mode_available
    if not exact_mode_available():
        with pytest.raises(ValueError, match="fp='exact'"):
            Features(fp="exact")
        return
    exact = Features(fp="exact")
    for seed in range(10):
        program = generate(seed, exact)
        assert 'fp="exact"' in program.render() and not program.ranges
        assert run_program(program, backend="emulator").cls == "ok"


# ---------------------------------------------------------------------------- runner

def test_compare_arrays_float_policy():
    a = np.array([1.0, np.nan, 0.0, 2.0], np.float32)
    b = np.array([1.0, -np.nan, -0.0, 2.0], np.float32)
    assert compare_arrays(a, b, signed_zero=False) is None        # NaN == NaN, +0 == -0
    assert compare_arrays(a, b, signed_zero=True) == 2
    b[3] = np.nextafter(np.float32(2.0), np.float32(3.0))
    assert compare_arrays(a, b, signed_zero=False) == 3           # one ulp is a difference
    i = np.array([1, 2, 3], np.int16)
    assert compare_arrays(i, i.copy(), False) is None
    assert compare_arrays(i, np.array([1, 2, 4], np.int16), False) == 2


_HEADER = ("import pycoop as pc\nfrom pycoop import u32, f32\n"
           "GRID = 1\nLENGTH = {'A': 8}\nSCALARS = {}\nSEED = 0\n\n")


def test_outcome_classes():
    bad_rule = _HEADER + ("@pc.kernel(workgroup_size=8)\ndef kern(A: pc.Buffer[f32]):\n"
                          "    i = pc.local_invocation_index()\n    A[i] = A[i] + u32(1)\n")
    o = run_program(bad_rule, backend="emulator")
    assert o.cls == "compile-error" and o.stage == "trace"
    assert "different types" in o.detail and o.signature.startswith("compile-error: ")
    undefined = _HEADER + ("@pc.kernel(workgroup_size=8)\ndef kern(A: pc.Buffer[f32]):\n"
                           "    A[pc.local_invocation_index()] = nope\n")
    o = run_program(undefined, backend="emulator")          # Python's error, at its line
    assert o.cls == "compile-error" and "NameError: name 'nope' is not defined" in o.detail
    o = run_program(bad_rule.replace("u32(1)", "f32(1)"), backend="emulator")
    assert o.cls == "ok"
    out_of_bounds = _HEADER + ("@pc.kernel(workgroup_size=8)\ndef kern(A: pc.Buffer[f32]):\n"
                               "    A[pc.local_invocation_index() + u32(4)] = f32(1.0)\n")
    o = run_program(out_of_bounds, backend="emulator")
    assert o.cls == "emulator-ub" and "out of bounds" in o.detail, o.detail


def test_an_exception_inside_pycoop_is_a_crash(monkeypatch):
    """An exception that pycoop's own code raises (here its IR verifier, made to fail) is a
    crash, located at pycoop's innermost frame: a defect of pycoop, not of the kernel."""
    from pycoop.frontend import kernel

    def failing_verify(module):
        raise RuntimeError("verifier defect")
    monkeypatch.setattr(kernel, "verify", failing_verify)
    ok = _HEADER + ("@pc.kernel(workgroup_size=8)\ndef kern(A: pc.Buffer[f32]):\n"
                    "    A[pc.local_invocation_index()] = A[0] * f32(3)\n")
    o = run_program(ok, backend="emulator")
    assert o.cls == "crash" and o.stage == "trace"
    assert o.signature.startswith("crash: trace: RuntimeError at pycoop/frontend/kernel.py")


def test_a_differing_element_is_a_mismatch(monkeypatch):
    """A stand-in device that computes like the emulator but flips one bit of the last output:
    the comparison finds the element."""
    from pycoop.frontend.kernel import CompiledKernel
    launch = CompiledKernel.launch

    def flipped_launch(ck, grid, args, *, backend=None, **kw):
        result = launch(ck, grid, args, backend="emulator", **kw)
        if backend == "vulkan":
            args[-1].view(np.uint8)[-1] ^= 1
        return result
    monkeypatch.setattr(CompiledKernel, "launch", flipped_launch)
    source = _HEADER.replace("{'A': 8}", "{'A': 8, 'B': 8}") + (
        "@pc.kernel(workgroup_size=8)\ndef kern(A: pc.ReadBuffer[f32], B: pc.Buffer[f32]):\n"
        "    i = pc.local_invocation_index()\n    B[i] = A[i] + f32(1.0)\n")
    o = run_program(source, backend="vulkan")
    assert o.cls == "mismatch" and o.signature == "mismatch: float32 output", o
    assert o.detail.startswith("B[7]: emulator")


_H200 = "NVIDIA H200 | NVIDIA 580.159.04"
_LOOP_LOADS = {     # loop body -> whether a load in it is at an address the loop does not change
    "for j in range(u32(1) % u32(3)):\n        v = f32(A[(n * n) % u32(8)])\n": True,
    "for j in pc.range(3):\n        if A[i] > f32(0.0):\n            B[i] = f32(1.0)\n": True,
    "for j in pc.range(3):\n        B[i] = A[(i + u32(j)) % u32(8)]\n": False,
    "for j in pc.range(3):\n        B[i] = A[u32(A[(i + u32(j)) % u32(8)]) % u32(8)]\n": False,
    "v = A[i]\n    for j in pc.range(3):\n        B[(i + u32(j)) % u32(8)] = v\n": False,
}


def _loop_program(body: str) -> str:
    return _HEADER.replace("{'A': 8}", "{'A': 8, 'B': 8}").replace(
        "SCALARS = {}", "SCALARS = {'n': 3}") + (
        "@pc.kernel(workgroup_size=8)\n"
        "def kern(A: pc.ReadBuffer[f32], B: pc.Buffer[f32], n: u32):\n"
        "    i = pc.local_invocation_index()\n    " + body)


@pytest.mark.parametrize("body", list(_LOOP_LOADS))
def test_loop_invariant_buffer_loads_are_found(body):
    from pycoop.testing.runner import load
    module = load(_loop_program(body))
    assert bool(loop_invariant_buffer_loads(module.kern.compile().module)) == _LOOP_LOADS[body]


@pytest.mark.parametrize("body", list(_LOOP_LOADS)[:3])
def test_nvidia_pipeline_failure_is_the_known_defect_only_where_the_kernel_meets_it(
        monkeypatch, body):
    """A stand-in NVIDIA 580 device whose driver fails to build every module: the fuzzer
    counts the failure as the documented defect (the kernel then ran on the emulator only)
    where a loop loads at an address it does not change, and as a finding elsewhere."""
    from pycoop.frontend.kernel import CompiledKernel
    from pycoop.runtime.vulkan import PipelineError
    from pycoop.testing import runner
    launch = CompiledKernel.launch

    def failing_launch(ck, grid, args, *, backend=None, **kw):
        if backend == "vulkan":
            raise PipelineError("vkCreateComputePipelines: failed [VK_ERROR_UNKNOWN]")
        return launch(ck, grid, args, backend=backend, **kw)
    monkeypatch.setattr(CompiledKernel, "launch", failing_launch)
    monkeypatch.setattr(runner, "vulkan_device", lambda: _H200)
    o = run_program(_loop_program(body), backend="vulkan")
    if _LOOP_LOADS[body]:
        assert (o.cls, o.ran_on, o.allowed) == ("ok", "emulator",
                                                ("nvidia_nvvm_loop_invariant_load",)), o
    else:
        assert o.cls == "vulkan-error" and "PipelineError" in o.signature, o
    monkeypatch.setattr(runner, "vulkan_device", lambda: "NVIDIA H200 | NVIDIA 590.1")
    assert run_program(_loop_program(body), backend="vulkan").cls == "vulkan-error"
    assert pipeline_defects_for(_H200) == ("nvidia_nvvm_loop_invariant_load",)


def test_worker_survives_a_dying_kernel_process():
    ok = generate(3, SCALAR).render()
    dies = _HEADER + "import os\nos._exit(3)\n"
    w = Worker(timeout_s=60)
    try:
        assert w.run(ok, "emulator").cls == "ok"
        o = w.run(dies, "emulator")
        assert o.cls == "crash" and "exit code 3" in o.detail
        assert w.run(ok, "emulator").cls == "ok"            # a fresh worker took over
    finally:
        w.close()
    hangs = _HEADER + "import time\ntime.sleep(60)\n"
    w = Worker(timeout_s=3)
    try:
        o = w.run(hangs, "emulator")
        assert o.cls == "crash" and "timed out after 3 s" in o.detail
        assert w.run(ok, "emulator").cls == "ok"
    finally:
        w.close()


# ---------------------------------------------------------------------------- device allowances

_LAVAPIPE = "llvmpipe (LLVM 15.0.6, 256 bits) | llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"
_H100 = "NVIDIA H100 80GB HBM3 | NVIDIA 580.159.04"

# One line per lavapipe deviation; A holds -1, 0 and 1 (RANGES), so every line meets it.
_DEVIATIONS = _HEADER.replace("{'A': 8}", "{'A': 64, 'O': 192, 'D': 64, 'H': 64}").replace(
    "GRID = 1", "GRID = 1\nRANGES = {'A': 1}").replace("from pycoop import u32, f32",
                                                       "from pycoop import u32, f16, f32, f64") + (
    '@pc.kernel(workgroup_size=64, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[f32], O: pc.Buffer[f32], D: pc.Buffer[f64], H: pc.Buffer[f16]):\n"
    "    i = pc.global_invocation_id.x\n"
    "    x = A[i]\n"
    "    O[i] = pc.max(x, -f32(0.0))\n"
    "    O[u32(64) + i] = x * f32(0.0)\n"
    "    O[u32(128) + i] = f32(0.0) - x\n"
    "    D[i] = pc.trunc(f64(x) - f64(0.5))\n"
    "    H[i] = pc.cast(f64(x) + f64(1.0004882812509095), f16)\n")   # 1 + 2^-11 + 2^-40


def _deviation_outputs(model=()):
    from pycoop.testing.runner import load, make_args
    module = load(_DEVIATIONS)
    args = make_args(module)
    with device_model(model):
        module.kern[1](*args, backend="emulator")
    return args


_AVX2 = frozenset({"sse4_1", "avx", "avx2", "fma"})          # e.g. an AMD Zen 3 or Intel client CPU
_AVX512 = _AVX2 | {"avx512f"}
_LAVAPIPE_ALL = allowances_for(_LAVAPIPE, _AVX2)
_TRUNC = "lavapipe_f64_trunc_zero"


def test_allowances_are_keyed_by_driver_and_cite_the_numerics_page():
    lavapipe = {a.name for a in ALLOWANCES if a.name.startswith("lavapipe_")}
    assert len(lavapipe) == 6
    assert {a.name for a in _LAVAPIPE_ALL} == lavapipe
    assert {a.name for a in allowances_for(_LAVAPIPE, _AVX512)} == lavapipe - {_TRUNC}
    assert {a.name for a in allowances_for(_H100)} == {"nvidia_f32_denormals_flushed"}
    assert {a.name for a in allowances_for("NVIDIA H200 | NVIDIA 580.159.04")} == \
        {"nvidia_f32_denormals_flushed"}
    assert allowances_for("llvmpipe (LLVM 17.0.6, 256 bits) | llvmpipe Mesa 24.0.1") == ()
    numerics = open(os.path.join(ROOT, "docs", "numerics.md")).read()
    fuzzing = open(os.path.join(ROOT, "docs", "fuzzing.md")).read()
    for a in ALLOWANCES:
        assert a.docs.startswith("docs/numerics.md") and a.docs.split(", ")[-1] in numerics
        assert a.name in fuzzing, a.name


def test_lavapipe_f64_trunc_depends_on_the_host_cpu():
    """Mesa rounds lavapipe's f64 vectors (twice the native width) with a CPU instruction
    where one exists for that width (SSE4.1: 128 bits, AVX: 256, AVX-512F: 512), else through
    integers: the allowance follows the CPU, so the comparison stays bit for bit on the
    others."""
    from pycoop.testing.allowances import lavapipe_f64_trunc_through_int as through_int
    lp = "llvmpipe (LLVM 15.0.6, {} bits) | llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"
    assert through_int(lp.format(256), _AVX2) and not through_int(lp.format(256), _AVX512)
    assert not through_int(lp.format(128), _AVX2)              # 256-bit f64 vectors: AVX
    assert through_int(lp.format(128), frozenset({"sse4_1"}))  # no AVX
    assert not through_int(lp.format(512), _AVX512)            # measured: exact
    assert not through_int(lp.format(256), frozenset({"asimd"}))   # aarch64: NEON rounds
    assert not through_int(_H100, _AVX2)


def test_device_model_computes_as_the_driver_and_is_undone_after():
    """Each allowance turns the emulator's IEEE results into lavapipe's, on exactly the
    elements it concerns; outside the block the emulator is IEEE again."""
    x = _deviation_outputs()[0].astype(np.float64)
    ieee = _deviation_outputs()
    lava = _deviation_outputs(_LAVAPIPE_ALL)
    o, d, h = (a.astype(np.float64) for a in ieee[1:])
    lo, ld, lh = (a.astype(np.float64) for a in lava[1:])
    assert {-1.0, 0.0, 1.0} == set(x) and not np.signbit(x[x == 0]).any()
    zero = x == 0
    assert np.array_equal(np.signbit(o[:64]), x < 0) and np.array_equal(np.signbit(lo[:64]), x <= 0)
    assert np.array_equal(np.signbit(o[64:128]), x < 0) and not np.signbit(lo[64:128]).any()
    assert np.array_equal(np.signbit(o[128:]), x > 0)
    assert np.array_equal(np.signbit(lo[128:]), x >= 0)
    assert np.array_equal(np.signbit(d), x <= 0) and np.array_equal(np.signbit(ld), x < 0)
    assert (h[zero] == 1.0009765625).all() and (lh[zero] == 1.0).all()      # one rounding, two
    assert np.array_equal(h[~zero], lh[~zero])
    again = _deviation_outputs()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(again[1:], ieee[1:]))


_TRUNC_WIDE = _HEADER.replace("{'A': 8}", "{'A': 8, 'D': 8}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, f64") + (
    "@pc.kernel(workgroup_size=8)\ndef kern(A: pc.ReadBuffer[f64], D: pc.Buffer[f64]):\n"
    "    i = pc.local_invocation_index()\n    D[i] = pc.trunc(A[i])\n")


def test_lavapipe_f64_trunc_model_above_two_to_the_24():
    """Mesa's integer path keeps any value above 2^24 as it is (its cut-off for "already an
    integer"): trunc(-438443306495.1085) is itself there, +0.0 for -0.5; IEEE otherwise."""
    from pycoop.testing.runner import load
    module = load(_TRUNC_WIDE)
    a = np.array([-438443306495.1085, -0.5, -0.0, 2.0**24 - 0.5, 2.0**24 + 0.5, 3.75, -1.5,
                  np.inf])
    trunc = next(t for t in _LAVAPIPE_ALL if t.name == _TRUNC)
    outs = []
    for model in ((), (trunc,)):
        d = np.zeros(8)
        with device_model(model):
            module.kern[1](a, d, backend="emulator")
        outs.append(d)
    assert outs[0].tolist() == np.trunc(a).tolist() and np.signbit(outs[0][1:3]).all()
    assert outs[1].tolist() == [a[0], 0.0, 0.0, 2.0**24 - 1, 2.0**24 + 0.5, 3.0, -1.0, np.inf]
    assert not np.signbit(outs[1][1:3]).any()


@pytest.mark.vulkan
def test_lavapipe_deviations_are_allowed_there_and_nowhere_else(monkeypatch):
    """On lavapipe the device computes what the model of this host's allowances says, bit for
    bit (the f64 trunc line exactly where the CPU lacks the rounding instruction: IEEE
    elsewhere), and the runner allows exactly those deviations; claimed to be another device,
    the same kernel is a mismatch."""
    _vulkan()
    import pycoop.testing.runner as runner
    here = allowances_for(vulkan_device())
    if not here:
        pytest.skip(f"not lavapipe 22.3.6: {vulkan_device()}")
    names = {a.name for a in here}
    assert names in ({a.name for a in _LAVAPIPE_ALL}, {a.name for a in _LAVAPIPE_ALL} - {_TRUNC})
    module = runner.load(_DEVIATIONS)
    args = runner.make_args(module)
    module.kern[1](*args, backend="vulkan")
    model = _deviation_outputs(here)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(args[1:], model[1:]))
    ieee_d = _deviation_outputs()[2]
    assert (args[2].tobytes() == ieee_d.tobytes()) == (_TRUNC not in names)
    o = run_program(_DEVIATIONS, backend="vulkan", signed_zero=True)
    # (the dropped abs and the comparisons have kernels of their own below)
    assert o.cls == "ok" and set(o.allowed) == names - {"lavapipe_abs_of_nonnegative_select",
                                                         "lavapipe_sext_compare"}, o
    monkeypatch.setattr(runner, "vulkan_device", lambda: _H100)
    o = run_program(_DEVIATIONS, backend="vulkan", signed_zero=True)
    assert o.cls == "mismatch" and o.detail.startswith("O[") and o.detail.endswith(
        "emulator np.float32(0.0), vulkan np.float32(-0.0)"), o              # max(+0, -0)


# The reduced kernels of seeds 7400636, 7401200 and 7503406 (exact mode, lavapipe,
# 2026-11-28): an abs the driver drops, and zeros it computes at compile time (a difference
# of two truncations of one value; a complement) that make `0.0 - x` into `-x`
_ABS_OF_SELECT = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[f32], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    O[i] = pc.abs(pc.select(A[i] < f32(1.0), -f32(0.0), f32(0.0)))\n")
# seed 7400636 again (2026-11-28, later code): the other arm a sum of a constant and a
# conversion from an unsigned integer, which NIR's range analysis also finds not negative
_ABS_OF_SELECT_SUM = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[f32], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    O[i] = pc.abs(pc.select(A[i] < f32(1.0), -f32(0.0), f32(1.0) + f32(i)))\n")
_TRUNCATIONS = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, u16, i16, u64, f64") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[u64], O: pc.Buffer[f64]):\n"
    "    i = pc.local_invocation_index()\n"
    "    x = A[i]\n"
    "    O[i] = pc.cast(pc.cast(i16(x), u16) - pc.cast(x, u16), f64) - f64(x)\n")
# seed 7503406: a zero the driver computes from `~` (255 % 3)
_COMPLEMENT = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, u8, f32") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[u32], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    O[i] = f32((~u8(0)) % u8(3)) - pc.cast(A[i], f32)\n")


# seed 8105212 (exact mode, lavapipe, 2026-11-28): a select of one zero both ways is that zero
# to the driver, whatever its condition, so `select(c, 0.0, 0.0) - x` becomes `-x` (x is +0.0
# for most of the runner's random inputs here)
_SELECT_SAME = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, i16, f32") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[i16], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    O[i] = pc.select(A[i] > i16(3), f32(0.0), f32(0.0)) - f32(A[i] // i16(30000))\n")


def _on_lavapipe() -> bool:
    """Whether the Vulkan device is lavapipe 22.3.6 (the one these allowances are for)."""
    try:
        return any(a.name.startswith("lavapipe_") for a in allowances_for(vulkan_device()))
    except Exception:                                 # noqa: BLE001  (no Vulkan device)
        return False


@pytest.mark.parametrize("program, name, values, dtypes, hit", [
    (_ABS_OF_SELECT, "lavapipe_abs_of_nonnegative_select", [0.5, 2.0] * 4,
     (np.float32, np.float32), 0.5),
    (_ABS_OF_SELECT_SUM, "lavapipe_abs_of_nonnegative_select", [0.5, 2.0] * 4,
     (np.float32, np.float32), 0.5),
    (_TRUNCATIONS, "lavapipe_zero_operand_folding", [0, 7] * 4, (np.uint64, np.float64), 0),
    (_COMPLEMENT, "lavapipe_zero_operand_folding", [0, 5] * 4, (np.uint32, np.float32), 0),
    (_SELECT_SAME, "lavapipe_zero_operand_folding", [0, 30001] * 4, (np.int16, np.float32), 0)],
    ids=["abs", "abs-sum", "truncations", "complement", "select-same"])
def test_lavapipe_folds_found_by_the_exact_campaign(program, name, values, dtypes, hit):
    """The model gives -0.0 exactly where lavapipe does (inputs equal to `hit`; the IEEE
    result: +0.0), and on lavapipe the runner allows the difference through that allowance
    only."""
    from pycoop.testing.runner import load
    module = load(program)
    model = [a for a in _LAVAPIPE_ALL if a.name == name]
    outs = []
    for m in ((), model):
        o = np.full(8, np.nan, dtypes[1])
        with device_model(m):
            module.kern[1](np.array(values, dtypes[0]), o, backend="emulator")
        outs.append(o)
    zero = np.array(values) == hit
    assert (outs[0][zero] == 0).all() and not np.signbit(outs[0][zero]).any()
    assert np.signbit(outs[1][zero]).all()
    assert outs[0][~zero].tobytes() == outs[1][~zero].tobytes()
    if _on_lavapipe():
        o = run_program(program, backend="vulkan", signed_zero=True)
        assert o.cls == "ok" and o.allowed == (name,), o


# Seed 8104857 (exact mode, lavapipe, 2026-11-28): min(0.0, x) of x = -0.0 is +0.0 there,
# where the allowance said the second operand (-0.0): LLVM moves a constant operand second.
# Every min/max of a constant zero, either side, of a runtime pair, (seed 8105049) of two
# values the driver knows: a select of zeros and an `if` of a known condition, and (seed
# 8205071) of a min of a literal and an f32 from an integer against a negated load
_MIN_MAX_CONSTANT = _HEADER.replace("{'A': 8}", "{'A': 8, 'B': 8, 'O': 96}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, u8, f32") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[f32], B: pc.ReadBuffer[f32], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    x, z, nz = A[i], f32(0.0), -f32(0.0)\n"
    "    for j, v in enumerate([pc.min(z, x), pc.min(x, z), pc.min(nz, x), pc.min(x, nz),\n"
    "                           pc.max(z, x), pc.max(x, z), pc.max(nz, x), pc.max(x, nz),\n"
    "                           pc.min(x, B[i]), pc.max(x, B[i]),\n"
    "                           pc.min(pc.select(x == x, nz, z), z if u8(1) <= u8(1) else x),\n"
    "                           pc.min(pc.min(z, f32(i)), -x)]):\n"
    "        O[j * 8 + i] = v\n")


def test_lavapipe_min_max_with_a_constant_zero_give_the_constant():
    """The allowance's model gives the constant for a +-0 pair with one constant operand and
    the second operand of a runtime pair; on lavapipe it reproduces the device's bits."""
    from pycoop.testing.runner import load
    module = load(_MIN_MAX_CONSTANT)
    a = np.array([-0.0, 0.0, -0.0, 0.0, 1.0, -2.0, 0.0, -0.0], np.float32)
    b = np.array([0.0, -0.0, -0.0, 0.0, 1.0, 3.0, -0.0, 0.0], np.float32)
    model = [m for m in _LAVAPIPE_ALL if m.name == "lavapipe_min_max_of_zeros"]
    outs, bits = [], []
    for m in ((), model):
        o = np.full(96, np.nan, np.float32)
        with device_model(m):
            module.kern[1](a, b, o, backend="emulator")
        outs.append(np.signbit(o.reshape(12, 8)[:, :4]).astype(int).tolist())
        bits.append(o.tobytes())
    ieee, lavapipe = outs
    assert ieee == [[1, 0, 1, 0], [1, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1],
                    [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 1, 0],
                    [1, 1, 1, 0], [0, 0, 1, 0], [1, 1, 1, 1], [0, 1, 0, 1]]
    assert lavapipe == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1],
                        [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1],
                        [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    if _on_lavapipe():
        o = np.full(96, np.nan, np.float32)
        module.kern[1](a, b, o, backend="vulkan")
        assert o.tobytes() == bits[1]


# What lavapipe's compiler computes at compile time, as the allowances model it (the values
# their reductions of the 2026-11-28 campaign needed: seeds 8203505, 8204009, 8204881)
_FOLDED = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, u16, f32") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[u32], O: pc.Buffer[u32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    a = A[i]\n"
    "    w = u32(0)\n"
    "    while w < u32(3):\n"
    "        w += u32(1)\n"
    "    O[0] = w\n"
    "    z = u32(0)\n"
    "    while z < (u32(0) % u32(4)):\n"
    "        z += u32(1)\n"
    "        break\n"
    "    O[1] = z\n"
    "    O[2] = u32(0) >> (i & u32(31))\n"
    "    O[3] = pc.select(u16(a) < u16(0), u32(7), u32(5))\n"
    "    O[4] = pc.select(pc.cast(a, u16) < u16(a), u32(7), u32(5))\n"
    "    O[5] = a ^ pc.select(u32(1) < u32(1), A[0], a)\n"
    "    O[6] = a ^ pc.min(a, a)\n"
    "    O[7] = u32(f32(0.0) if (u16(1) <= u16(1)) else f32(1.0))\n"
    "    for j in range(2):\n"
    "        if a > u32(9):\n"
    "            O[i] = u32(1) << u32(3)\n")


def test_the_model_knows_what_lavapipe_folds():
    """Loops run on known values (a known trip count; a condition false on entry, with a
    break), shifts of 0 and by known amounts, unsigned comparisons with 0 and of a value with
    itself, selects of a known choice, min(x, x), an `if` of a known condition: each store
    is a value the model knows; a load is not."""
    from pycoop.testing.allowances import _known_constant
    from pycoop.testing.runner import load
    module = load(_FOLDED).kern.compile().module
    stores = [op for op in module.walk() if op.name == "store"]
    known = [_known_constant(op.operands[2]) for op in stores]
    assert [None if k is None else int(k) for k in known] == [3, 0, 0, 5, 5, 0, 0, 0, 8, 8]
    loads = [op for op in module.walk() if op.name == "load"]
    assert all(_known_constant(op.results[0]) is None for op in loads)


def _stored_values(program: str, convert=int):
    """(the program's IR module, a function giving what the model knows of each value the
    kernel stores, in order: convert(value), or None where it is not known)."""
    from pycoop.testing.allowances import _known_constant
    from pycoop.testing.runner import load
    module = load(program).kern.compile().module
    stores = [op for op in module.walk() if op.name == "store"]

    def known():
        return [None if k is None else convert(k)
                for k in (_known_constant(op.operands[2]) for op in stores)]
    return module, known


# Seeds 8400468 and 8401952 (lavapipe, 2026-11-28): a loop that makes a value known whatever
# it was on entry, and the counter of a loop that runs once
_LOOPS_FOLDED = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[u32], O: pc.Buffer[u32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    x = A[i]\n"
    "    for q in pc.range(0, 2):\n"
    "        x *= u32(0)\n"
    "    O[0] = x\n"
    "    for j in range(u32(1) % u32(3)):\n"
    "        O[1] = j + u32(4)\n"
    "    for j in range(u32(2)):\n"
    "        O[2] = j\n"
    "    y = A[i]\n"
    "    for q in pc.range(0, A[0]):\n"
    "        y *= u32(0)\n"
    "    O[3] = y\n"
    "    O[4] = A[i] % ((x & u32(7)) + u32(1))\n")


def test_the_model_follows_loops_past_unknown_values_and_once_run_bodies():
    """x * 0 in a loop of a known trip count is 0 after it, whatever x was on entry (not so
    where the trip count is a load), and so is a value % 1; the counter of a loop body that
    runs once is its start (known where the model is given the module,
    `device_model(..., module)`); one that runs twice is not known."""
    module, known = _stored_values(_LOOPS_FOLDED)
    assert known() == [0, None, None, None, 0]
    with device_model((), module):
        assert known() == [0, 4, None, None, 0]
    assert known() == [0, None, None, None, 0]


# Seed 8702809 (lavapipe, 2026-11-28): a value that keeps its known value through a loop of
# unknown trip count (`for j in range(n): if <known true>: continue; x = ...`), which the driver
# then folds with
_LOOP_INVARIANTS = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[u32], O: pc.Buffer[u32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    x = u32(3) + u32(2)\n"
    "    for j in range(A[0]):\n"
    "        if u32(1) > u32(0):\n"
    "            continue\n"
    "        x = A[i]\n"
    "    O[0] = x\n"
    "    y = u32(7)\n"
    "    for j in range(A[0]):\n"
    "        y = y + u32(1)\n"
    "    O[1] = y\n"
    "    z = A[i]\n"
    "    for j in range(A[0]):\n"
    "        continue\n"
    "    O[2] = z\n"
    "    w = u32(9)\n"
    "    for j in range(A[0]):\n"
    "        if A[j] > u32(0):\n"
    "            w = u32(1)\n"
    "    O[3] = w\n"
    "    b = u32(4)\n"
    "    for j in range(A[0]):\n"
    "        O[4] = b * u32(2)\n"
    "        b = b * u32(1)\n")


def test_the_model_keeps_values_a_loop_keeps():
    """A loop of unknown trip count keeps a known value that its body gives back unchanged (a
    `continue` under a known condition, a product by 1), also inside the body where the model
    is given the module; a value the body changes, one it may change on a runtime condition,
    and an unknown one stay unknown."""
    module, known = _stored_values(_LOOP_INVARIANTS)
    assert known() == [5, None, None, None, None]
    with device_model((), module):
        assert known() == [5, None, None, None, 8]


# Seed 8404400 (lavapipe, 2026-11-28): a product of two known floats is folded as IEEE
# arithmetic (0.0 * -10000.0 is -0.0, which then decides a max of a zero pair)
_FLOAT_FOLDS = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[f32], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    O[0] = f32(0.0) * f32(-10000.0)\n"
    "    O[1] = f32(0.0) + -f32(0.0)\n"
    "    O[2] = -f32(0.0) - f32(0.0)\n"
    "    O[3] = A[i] * f32(0.0)\n"
    "    O[4] = f32(0.0) + A[i]\n")


def test_the_model_folds_known_floats_as_ieee_arithmetic():
    """Two known operands give the IEEE result, signs of zero included; one known zero
    operand gives that zero (a product) or leaves the other operand's value, unknown here."""
    _, known = _stored_values(_FLOAT_FOLDS, lambda k: (float(k), bool(np.signbit(k))))
    assert known() == [(0.0, True), (0.0, False), (0.0, True), (0.0, False), None]


# Seed 7800720 (exact mode, lavapipe, 2026-11-28), reduced by hand: comparisons of an i32
# sign-extended to i64 with constants
_SEXT_COMPARE = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 64}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, i32, i64") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[i32], O: pc.Buffer[i32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    w = i64(A[i])\n"
    "    tests = [w < i64(8), w <= i64(8), w > i64(8), w >= i64(8), i64(0) < w,\n"
    "             i64(-3) >= w, w == i64(8), w < i64(5000000000)]\n"
    "    for j in range(8):\n"
    "        O[u32(8) * i + u32(j)] = pc.select(tests[j], i32(1), i32(0))\n")


def test_lavapipe_compares_a_sign_extended_i32_with_a_constant_as_the_greater():
    """The model, for constants the driver computes (`i64(3) + i64(5)`): <, <= false and >,
    >= true with the extended value on the left, the other way round on the right; == and
    constants beyond i32 as IEEE. On lavapipe the runner allows exactly that; with literal
    constants pycoop emits i32 comparisons, which need no allowance."""
    from pycoop.testing.runner import load
    module = load(_SEXT_COMPARE)
    a = np.array([7, 0, -1, 8, 9, 100, -100, -3], np.int32)
    model = [x for x in _LAVAPIPE_ALL if x.name == "lavapipe_sext_compare"]
    src = _SEXT_COMPARE.replace("i64(8)", "(i64(3) + i64(5))")     # constants the driver folds
    module = load(src)
    outs = []
    for m in ((), model):
        o = np.zeros(64, np.int32)
        with device_model(m):
            module.kern[1](a, o, backend="emulator")
        outs.append(o.reshape(8, 8).T)
    w = a.astype(np.int64)
    ieee = [w < 8, w <= 8, w > 8, w >= 8, 0 < w, -3 >= w, w == 8, w < 5000000000]
    assert outs[0].tolist() == np.array(ieee, np.int32).tolist()
    # the comparisons with i64(0) and i64(-3), literals, are emitted in i32: IEEE there
    assert outs[1].tolist() == [[0] * 8, [0] * 8, [1] * 8, [1] * 8] + [
        ieee[j].astype(int).tolist() for j in (4, 5, 6, 7)]
    if _on_lavapipe():
        # pycoop emits these comparisons in i32 (ops.core.narrowable_i64_compare), which the
        # driver gets right: no allowance is needed; one the emitter cannot narrow still is
        o = run_program(_SEXT_COMPARE, backend="vulkan", signed_zero=True)
        assert o.cls == "ok" and o.allowed == (), o
        o = run_program(src, backend="vulkan", signed_zero=True)
        assert o.cls == "ok" and o.allowed == ("lavapipe_sext_compare",), o


# Seed 8901941 (exact mode, lavapipe, 2026-11-28): `i64(x) * i64(1) <= i64(0)`; the driver
# removes the identity and meets the comparison defect. The same through the other
# identities, and two products that are none (IEEE there)
_SEXT_IDENTITIES = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 80}").replace(
    "from pycoop import u32, f32", "from pycoop import u32, i32, i64") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[i32], O: pc.Buffer[i32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    w = i64(A[i])\n"
    "    sides = [w * i64(1), i64(1) * w, w + i64(0), w - i64(0), w | i64(0), w ^ i64(0),\n"
    "             i64(-1) & w, w // i64(1), w * i64(2), i64(0) - w]\n"
    "    for j in range(10):\n"
    "        O[u32(10) * i + u32(j)] = pc.select(sides[j] <= i64(0), i32(1), i32(0))\n")


def test_lavapipe_sext_compare_through_integer_identities():
    """The model takes `x * 1`, `x + 0`, `x - 0`, `x | 0`, `x ^ 0`, `~0 & x`, `x // 1` of an
    extended i32 as the extended value (`<= 0` false for every x), not `x * 2` or `0 - x`; on
    lavapipe the runner allows exactly that."""
    from pycoop.testing.runner import load
    a = np.array([7, 0, -1, 8, 9, 100, -100, -3], np.int32)
    model = [x for x in _LAVAPIPE_ALL if x.name == "lavapipe_sext_compare"]
    o = np.zeros(80, np.int32)
    with device_model(model):
        load(_SEXT_IDENTITIES).kern[1](a, o, backend="emulator")
    w = a.astype(np.int64)
    assert o.reshape(8, 10).T.tolist() == [[0] * 8] * 8 + [
        (2 * w <= 0).astype(int).tolist(), (-w <= 0).astype(int).tolist()]
    if _on_lavapipe():
        o = run_program(_SEXT_IDENTITIES, backend="vulkan", signed_zero=True)
        assert o.cls == "ok" and o.allowed == ("lavapipe_sext_compare",), o


# The reduced kernel of seeds 300422 and 300561 (exact mode, H200, driver 580.159.04): a
# product of two f32 inputs that is subnormal, through a NaN guard and min.
_DENORMAL = _HEADER.replace("{'A': 8}", "{'A': 8, 'O': 8}") + (
    '@pc.kernel(workgroup_size=8, fp="exact")\n'
    "def kern(A: pc.ReadBuffer[f32], O: pc.Buffer[f32]):\n"
    "    i = pc.local_invocation_index()\n"
    "    x5 = A[(i * u32(3)) % u32(8)] * A[i]\n"
    "    O[i] = pc.min(f32(1.0), pc.select(x5 == x5, x5, f32(0.0)))\n")
_TINY = np.array([-2.0**-63, 2.0**-64, 3.0, 1.0, 2.0**-70, -0.5, 2.0**-60, 7.0], np.float32)


def test_nvidia_denormal_flush_is_allowed_only_where_the_flush_model_gives_the_device_bits(monkeypatch):
    """A stand-in NVIDIA device that flushes f32 subnormals (the emulator under the allowance's
    model): the runner allows the difference and names the allowance. A device that gives a
    different wrong value is still a mismatch, and so is the flush on a device without the
    allowance."""
    import pycoop.testing.runner as runner
    from pycoop.frontend.kernel import CompiledKernel
    ftz = allowances_for(_H100)
    launch = CompiledKernel.launch
    wrong = {"value": None}

    def device_launch(ck, grid, args, *, backend=None, **kw):
        if backend != "vulkan":
            return launch(ck, grid, args, backend=backend, **kw)
        args[0][:] = _TINY
        with device_model(ftz):
            result = launch(ck, grid, args, backend="emulator", **kw)
        if wrong["value"] is not None:
            args[-1][0] = wrong["value"]
        return result

    real_make_args = runner.make_args

    def make_args(module):
        args = real_make_args(module)
        args[0][:] = _TINY
        return args
    monkeypatch.setattr(CompiledKernel, "launch", device_launch)
    monkeypatch.setattr(runner, "make_args", make_args)
    monkeypatch.setattr(runner, "vulkan_device", lambda: _H100)
    expected = np.minimum(np.float32(1), _TINY[(np.arange(8) * 3) % 8] * _TINY)
    assert (np.abs(expected[expected != 0]) < np.finfo(np.float32).smallest_normal).any()
    o = run_program(_DENORMAL, backend="vulkan", signed_zero=True)
    assert o.cls == "ok" and o.allowed == ("nvidia_f32_denormals_flushed",), o
    wrong["value"] = np.float32(2.0**-125)          # not what the flush gives
    o = run_program(_DENORMAL, backend="vulkan", signed_zero=True)
    assert o.cls == "mismatch", o
    wrong["value"] = None
    monkeypatch.setattr(runner, "vulkan_device", lambda: "Some GPU | driver 1.0")
    o = run_program(_DENORMAL, backend="vulkan", signed_zero=True)
    assert o.cls == "mismatch" and o.detail.endswith("vulkan np.float32(0.0)"), o


# ---------------------------------------------------------------------------- shrinker

def _body(p: Program) -> int:
    return sum(len(b) for b in p.statement_lists())


def test_shrinker_reduces_a_planted_failure():
    """A planted bug: 'fails' when the kernel still shifts left and still runs. The reduced
    kernel keeps the shift, is valid, and is much smaller."""
    seed = next(s for s in range(100) if " << " in generate(s, SCALAR).render()
                and _body(generate(s, SCALAR)) > 15)
    program = generate(seed, SCALAR)

    def fails(p: Program) -> bool:
        return " << " in p.render() and run_program(p, backend="emulator").cls == "ok"

    small, trials = shrink(program, fails, max_trials=400)
    assert fails(small) and trials > 0
    assert _body(small) < _body(program) // 2
    assert len(small.render()) < len(program.render()) // 2


def test_shrinker_never_removes_guards():
    """Even when any candidate 'fails', the shrinker keeps the shared array's initialising
    writes while something reads it, and the guard expressions."""
    import re

    def reads_shared(p: Program) -> bool:
        return re.search(r"S\[[^\]]*\](?! =)", p.render()) is not None

    def fails(p: Program) -> bool:
        return reads_shared(p) and run_program(p, backend="emulator").cls == "ok"

    program = next(p for p in map(lambda s: generate(s, SCALAR), range(50)) if reads_shared(p))
    small, _ = shrink(program, fails, max_trials=120)
    def protected(p):
        return [s.head for s in p.functions[-1].body if s.protected]
    assert protected(small) == protected(program) and protected(small)    # S, S[lid] = ...
    assert all(e.fixed for e in small.expressions() for e, _, _ in e.nodes() if "% u32(" in e.fmt)


# ---------------------------------------------------------------------------- CLI

def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "pycoop.testing.fuzz", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_print_replay_and_report(tmp_path):
    p = _cli("--print", "5")
    assert p.returncode == 0 and "def kern(" in p.stdout
    case = tmp_path / "case.py"
    case.write_text(p.stdout)
    r = _cli("--replay", str(case), "--backend", "emulator-only")
    assert r.returncode == 0 and r.stdout.startswith("ok (emulator)"), r.stdout + r.stderr
    out = tmp_path / "report.json"
    r = _cli("--count", "4", "--seed", "2", "--backend", "emulator-only", "--out", str(out))
    assert r.returncode == 0 and "ok: 4, crash: 0" in r.stdout, r.stdout + r.stderr
    import json
    rep = json.loads(out.read_text())
    assert rep["counts"]["ok"] == 4 and rep["seeds"] == [2, 6]


# ---------------------------------------------------------------------------- campaigns

def test_fuzz_emulator_only_with_cooperative_matrices():
    report = fuzz(45, seed=500, features=ALL, backend="emulator")
    assert report.failed == 0, report.summary()


@pytest.mark.vulkan
def test_fuzz_lavapipe_exact_scalar_and_shared():
    """The CI's fuzzing: a fixed seed range of exact-mode kernels (floats over their whole
    range, arithmetic unrestricted, signed zeros told apart) on the CI's Vulkan device, bit for
    bit against the emulator but for the device's documented allowances."""
    _vulkan()
    report = fuzz(500, seed=0, features=EXACT, backend="vulkan", max_shrunk=2, shrink_time_s=60)
    assert report.failed == 0, report.summary()
    assert report.ran_on.get("vulkan") == 500
    used = {name for names in report.allowed for name in names.split("+")}
    assert used <= {a.name for a in allowances_for(vulkan_device())}, report.summary()


@pytest.mark.vulkan
def test_fuzz_lavapipe_fast_scalar_and_shared():
    """Fast mode keeps its policy (exact float values only, +0 = -0): a shorter range."""
    _vulkan()
    report = fuzz(60, seed=0, features=SCALAR, backend="vulkan", max_shrunk=2, shrink_time_s=60)
    assert report.failed == 0, report.summary()
    assert report.ran_on.get("vulkan") == 60


@pytest.mark.gpu
def test_fuzz_gpu_with_cooperative_matrices():
    """The GPU machine: 1200 kernels, a third each scalar + shared memory, KHR cooperative
    matrices and NV tensor addressing."""
    report = fuzz(1200, seed=100000, features=ALL, backend="vulkan", max_shrunk=4,
                  shrink_time_s=120)
    assert report.failed == 0, report.summary()
    used = {name for names in report.allowed for name in names.split("+")}
    assert used <= _device_allowances(), report.summary()
    assert report.ran_on.get("vulkan", 0) >= 1000, report.summary()   # coopmat shapes ran there


@pytest.mark.gpu
def test_fuzz_gpu_exact_bit_for_bit():
    """The GPU machine in exact float mode: 2000 scalar + shared-memory kernels, every output
    bit for bit (NaN as NaN), but for the device's documented allowances (on NVIDIA: f32
    subnormals flushed, which exact mode does not forbid), each checked by the emulator
    reproducing the device's bits under the allowance's model."""
    report = fuzz(2000, seed=300000, features=EXACT, backend="vulkan", max_shrunk=4,
                  shrink_time_s=120)
    assert report.failed == 0, report.summary()
    used = {name for names in report.allowed for name in names.split("+")}
    assert used <= _device_allowances(), report.summary()
    unbuilt = sum(n for names, n in report.allowed.items()
                  if set(names.split("+")) & set(pipeline_defects_for(vulkan_device())))
    assert report.ran_on.get("vulkan") == 2000 - unbuilt, report.summary()


def _device_allowances() -> set[str]:
    """The names of this Vulkan device's documented deviations and pipeline-build defects."""
    device = vulkan_device()
    return {a.name for a in allowances_for(device)} | set(pipeline_defects_for(device))
