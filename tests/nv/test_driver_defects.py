"""NV tensor addressing where the NVIDIA driver differs from the specification
(docs/numerics.md, "Driver workarounds"): seed 100295's span wrap, which the emulator computes
as SPV_NV_cooperative_matrix2 says, and the innermost-stride and span-wrap defects, which
pycoop refuses to run on NVIDIA devices (a stand-in device here; tests/gpu/test_gpu_nv.py on
the GPU)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, u32
from pycoop.ops.nv.tensor import innermost_stride, layout_spans
from pycoop.runtime import backend as backend_module
from pycoop.runtime.vulkan.capabilities import Capabilities, CoopmatShape

M16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]


# ---------------------------------------------------------------- seed 100295: the span wraps

@pc.kernel(workgroup_size=32, subgroup_size=32)
def seed_100295(X: pc.ReadBuffer[f16], Out: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2, "repeat").dimension(6, 2).stride(10, 1).slice(9, 3, 0, 16)
    m = pc.nv.load_tensor(X, lay, M16, object=M16.fill(7.0))
    pc.store(Out, 0, m, 16)


def test_seed_100295_reads_what_the_specification_says():
    """Worked from the pseudo-code of SPV_NV_cooperative_matrix2, not from pycoop:
    SetDimension(6, 2) gives layoutDimension = span = (6, 2); SetStride gives stride (10, 1);
    Slice(9, 3, 0, 16) adds 9 and 0 to the offsets (0, 0) and sets span = (3, 16).
    matrixCoordToLinear: index = row * 16 + col. linearToSpanCoord, dim 1 then dim 0:
    spanCoord[1] = index % 16 = col, index /= 16 -> row; spanCoord[0] = row % 3 (every matrix
    element has a span coordinate: the outer one wraps, nothing is "outside the span", and
    Object is used only for elements a view clips). spanCoordToTensorCoord: c0 = row % 3 + 9 is
    9, 10 or 11 >= 6, out of bounds, Repeat: c0 % 6 = 3 + row % 3; c1 = col, out of bounds
    from col 2 on, Repeat: col % 2. tensorCoordToLinear: 10 * c0 + c1. So element (3, 0),
    Out[48], is X[30] (like (0, 0)), not X[0] (what the H200 returned: row 3 + 9 = 12, 12 % 6 = 0,
    as if the outer coordinate did not wrap)."""
    X = (np.arange(52) * 3 % 61 - 30).astype(np.float16)      # 52 distinct values
    Out = np.zeros(256, np.float16)
    seed_100295[1](X, Out, backend="emulator")
    want = np.empty((16, 16), np.float16)
    for row in range(16):
        for col in range(16):
            want[row, col] = X[10 * (3 + row % 3) + col % 2]
    np.testing.assert_array_equal(Out.reshape(16, 16), want)
    assert Out[48] == X[30] and Out[48] != X[0]


def test_seed_100295_replays_as_printed():
    """The fuzzer's seed 100295 (scalar,shared,khr,nv) generates this kernel only with
    `--with nv_span_wrap`; without it the outer span grows to 16 rows."""
    from pycoop.testing import generate, parse_features
    on = generate(100295, parse_features("scalar,shared,khr,nv", "nv_span_wrap")).render()
    off = generate(100295, parse_features("scalar,shared,khr,nv")).render()
    assert ".dimension(6, 2).stride(10, 1).slice(9, 3, 0, 16)" in on
    assert ".dimension(6, 2).stride(10, 1).slice(9, 16, 0, 16)" in off


# ---------------------------------------------------------------- innermost stride

def _layout_kernel(make, store=False, view=None):
    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k(X: pc.Buffer[f16], Out: pc.Buffer[f16], s: u32):
        lay = make(s)
        v = view() if view else None
        if store:
            pc.nv.store_tensor(Out, lay, M16.load(X, 0, 16), view=v)
        else:
            pc.store(Out, 0, pc.nv.load_tensor(X, lay, M16, view=v), 16)
    return k


def L(clamp="clamp_to_edge"):
    return pc.nv.tensor_layout(2, clamp)


CASES = {   # name: (layout from the runtime scalar s, recorded innermost stride or None)
    "constant 2": (lambda s: L().dimension(24, 36).stride(80, 2).slice(8, 16, 6, 16), 2),
    "constant 0": (lambda s: L().dimension(24, 36).stride(36, 0), 0),
    "stride then slice": (lambda s: L().dimension(24, 36).stride(80, 3).slice(0, 16, 0, 16).clamp_value(0), 3),
    "unit stride": (lambda s: L().dimension(24, 36).stride(80, 1).slice(8, 16, 6, 16), None),
    "default strides": (lambda s: L().dimension(24, 36).slice(8, 16, 6, 16), None),
    "stride then dimension": (lambda s: L().stride(80, 2).dimension(24, 36), None),
    "blocked defaults": (lambda s: L().block_size(1, 2).dimension(24, 36), None),
    "runtime": (lambda s: L().dimension(24, 36).stride(80, s), "a runtime value, no view"),
    "runtime, sliced": (lambda s: L().dimension(24, 36).stride(80, s).slice(8, 16, 6, 16),
                        "a runtime value, no view"),
    "runtime outer, unit inner": (lambda s: L().dimension(24, 36).stride(s, 1), None),
}


@pytest.mark.parametrize("name", CASES)
def test_a_constant_innermost_stride_other_than_1_is_a_requirement(name):
    make, stride = CASES[name]
    reqs = _layout_kernel(make).compile().requirements
    if stride is None:
        assert "driver_defects" not in reqs
    else:
        (entry,) = reqs["driver_defects"]["nv_inner_stride"]
        assert entry.startswith("load_tensor at test_driver_defects.py:")
        assert entry.endswith(f"(innermost stride {stride})")


def test_stores_are_recorded_too():
    reqs = _layout_kernel(lambda s: L().dimension(24, 36).stride(80, 2), store=True).compile().requirements
    (entry,) = reqs["driver_defects"]["nv_inner_stride"]
    assert entry.startswith("store_tensor at ") and entry.endswith("(innermost stride 2)")
    reqs = _layout_kernel(lambda s: L().dimension(24, 36).stride(80, s), store=True).compile().requirements
    (entry,) = reqs["driver_defects"]["nv_inner_stride"]
    assert entry.startswith("store_tensor at ") and entry.endswith("(innermost stride a runtime value, no view)")


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("perm", [(0, 1), (1, 0)])
def test_a_runtime_innermost_stride_through_a_view_is_not_recorded(store, perm):
    """The H200 read and wrote runtime innermost strides of 2 correctly through views
    (test_random_layouts_views); a constant one is recorded with or without a view."""
    view = lambda: pc.nv.tensor_view(2, False, perm)     # noqa: E731
    runtime = _layout_kernel(lambda s: L().dimension(24, 36).stride(80, s), store, view).compile()
    assert "driver_defects" not in runtime.requirements
    constant = _layout_kernel(lambda s: L().dimension(24, 36).stride(80, 2), store, view).compile()
    (entry,) = constant.requirements["driver_defects"]["nv_inner_stride"]
    assert entry.endswith("(innermost stride 2)")


def test_innermost_stride_of_layouts():
    seen = {}

    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k(X: pc.Buffer[f16], s: u32):
        seen["runtime"] = innermost_stride(L().dimension(4, 4).stride(s, s))
        seen["constant"] = innermost_stride(L().dimension(4, 4).stride(8, 2).slice(0, 2, 0, 2))
        seen["dimension"] = innermost_stride(L().dimension(4, s))
        seen["created"] = innermost_stride(L())
    k.compile()
    assert seen == {"runtime": "runtime", "constant": 2, "dimension": 1, "created": None}


def stand_in(vendor: str, reqs: dict) -> Capabilities:
    """A device that has everything `reqs` asks for (so only driver defects can be missing)."""
    return Capabilities(
        "Stand-in GPU", vendor, "580.159.04", "1.4.312", "discrete",
        extensions=tuple(reqs["extensions"]), features={f: True for f in reqs["features"]},
        khr_coopmat_shapes=[CoopmatShape(16, 16, 16, "float16", "float16", "float16", "float16",
                                         False, "subgroup")],
        subgroup_size=32, subgroup_operations=("basic",), subgroup_stages=("compute",),
        min_subgroup_size=32, max_subgroup_size=32, max_push_constants_size=256,
        max_compute_shared_memory_size=49152, max_compute_workgroup_invocations=1024)


def test_only_nvidia_devices_refuse_the_defect():
    k = _layout_kernel(CASES["constant 2"][0])
    reqs = k.compile().requirements
    (why,) = stand_in("NVIDIA", reqs).missing(reqs)
    assert "innermost stride is a constant other than 1" in why
    assert "driver defect `nv_inner_stride` of NVIDIA 580.159.04" in why
    assert "docs/numerics.md#driver-workarounds" in why and "(innermost stride 2)" in why
    assert stand_in("AMD", reqs).missing(reqs) == []
    fine = _layout_kernel(CASES["unit stride"][0]).compile().requirements
    assert stand_in("NVIDIA", fine).missing(fine) == []


class _Runtime:
    def __init__(self, caps):
        self.capabilities = caps


def test_auto_falls_back_and_vulkan_raises_on_a_stand_in_nvidia_device(monkeypatch):
    k = _layout_kernel(CASES["constant 2"][0])
    reqs = k.compile().requirements
    monkeypatch.setattr(backend_module, "get_runtime", lambda: _Runtime(stand_in("NVIDIA", reqs)))
    rng = np.random.default_rng(3)
    X = rng.standard_normal(24 * 80).astype(np.float16)
    with pytest.raises(pc.BackendUnavailable, match="driver defect `nv_inner_stride`") as e:
        k[1](X, np.zeros(256, np.float16), 2, backend="vulkan")
    assert "docs/numerics.md#driver-workarounds" in str(e.value)
    Out = np.zeros(256, np.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch = k[1](X, Out, 2, backend="auto")
    assert launch.backend == "emulator"
    (w,) = [c for c in caught if issubclass(c.category, pc.BackendFallbackWarning)]
    assert "nv_inner_stride" in str(w.message)
    r, c = np.mgrid[0:16, 0:16]
    np.testing.assert_array_equal(Out.reshape(16, 16), X[(8 + r) * 80 + (6 + c) * 2])


# ---------------------------------------------------------------- span wrap

def _span_kernel(make, mat=M16, store=False, view=None):
    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k(X: pc.Buffer[f16], Out: pc.Buffer[f16], s: u32):
        lay = make(s)
        v = view() if view else None
        if store:
            pc.nv.store_tensor(Out, lay, mat.load(X, 0, mat.cols), view=v)
        else:
            pc.store(Out, 0, pc.nv.load_tensor(X, lay, mat, view=v), mat.cols)
    return k


R = lambda: L("repeat")     # noqa: E731
A16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
B16x8 = pc.coopmat[f16, pc.Subgroup, 16, 8, pc.UseB]
M32x16 = pc.coopmat[f16, pc.Subgroup, 32, 16, pc.Accumulator]
M16x32 = pc.coopmat[f16, pc.Subgroup, 16, 32, pc.Accumulator]

SPAN_CASES = {   # name: (layout from the runtime scalar s, matrix, recorded entry or None)
    "seed 100295": (lambda s: R().dimension(6, 2).stride(10, 1).slice(9, 3, 0, 16), M16,
                    "(spans (3, 16) of a 16x16 matrix)"),
    "span from dimension, clamp to edge": (lambda s: L().dimension(5, 16), M16,
                                           "(spans (5, 16) of a 16x16 matrix)"),
    "slice then clamp value": (lambda s: L("constant").dimension(20, 16).slice(2, 15, 0, 16).clamp_value(0),
                               M16, "(spans (15, 16) of a 16x16 matrix)"),
    "UseA": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16), A16, "(spans (5, 16) of a 16x16 matrix)"),
    "16x8, span 8": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 8), B16x8,
                     "(spans (5, 8) of a 16x8 matrix)"),
    "32x16, 20 rows": (lambda s: R().dimension(40, 32).slice(2, 20, 0, 16), M32x16,
                       "(spans (20, 16) of a 32x16 matrix)"),
    "16x32, span 32": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 32), M16x32,
                       "(spans (5, 32) of a 16x32 matrix)"),
    "repeat, whole-dimension slice": (lambda s: R().dimension(5, 16).slice(0, 5, 0, 16), M16,
                                      "(spans (5, 16) of a 16x16 matrix)"),
    # not recorded (the H200 was right: rank 3, spans from .dimension() with Repeat)
    "span from dimension, repeat": (lambda s: R().dimension(8, 16), M16, None),
    "rank 3": (lambda s: pc.nv.tensor_layout(3, "repeat").dimension(4, 6, 16).slice(1, 2, 1, 4, 0, 16),
               M16, None),
    "runtime outer, small constant": (lambda s: pc.nv.tensor_layout(3, "repeat").dimension(4, 6, 16)
                                      .slice(1, s, 1, 4, 0, 16), M16, None),
    "16 rows": (lambda s: R().dimension(20, 32).slice(2, 16, 0, 16), M16, None),
    "innermost 8": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 8), M16, None),
    "innermost 32": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 32), M16, None),
    "16x8, span 16": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16), B16x8, None),
    "16x32, span 16": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16), M16x32, None),
    "32x16, 32 rows": (lambda s: R().dimension(40, 32).slice(2, 32, 0, 16), M32x16, None),
    "runtime outer": (lambda s: R().dimension(20, 32).slice(2, s, 0, 16), M16, None),
    "runtime inner": (lambda s: R().dimension(20, 32).slice(2, 5, 0, s), M16, None),
    "runtime dimension": (lambda s: R().dimension(s, 16), M16, None),
    "rank 1": (lambda s: pc.nv.tensor_layout(1, "repeat").dimension(16), M16, None),
}


@pytest.mark.parametrize("name", SPAN_CASES)
def test_a_load_whose_spans_the_driver_does_not_wrap_is_a_requirement(name):
    make, mat, recorded = SPAN_CASES[name]
    reqs = _span_kernel(make, mat).compile().requirements
    if recorded is None:
        assert "driver_defects" not in reqs, reqs.get("driver_defects")
    else:
        (entry,) = reqs["driver_defects"]["nv_span_wrap"]
        assert entry.startswith("load_tensor at test_driver_defects.py:"), entry
        assert entry.endswith(recorded), entry


V = pc.nv.tensor_view
VIEW_CASES = {   # name: (layout, view, store, recorded entry or None); H200 data: SPAN_WRAP
    # wrong on the H200: stores without a view, a load through a transposing view whose
    # spans meet the condition in the view's order
    "store": (lambda s: R().dimension(20, 16).slice(2, 3, 0, 16), None, True,
              "store_tensor at ", "(spans (3, 16) of a 16x16 matrix)"),
    "store, clamp to edge": (lambda s: L().dimension(20, 32).slice(2, 5, 0, 16), None, True,
                             "store_tensor at ", "(spans (5, 16) of a 16x16 matrix)"),
    "load, transposed": (lambda s: R().dimension(20, 32).slice(2, 16, 0, 5), lambda: V(2, False, (1, 0)),
                         False, "load_tensor at ", "(spans (16, 5) of a 16x16 matrix through a view)"),
    # not checked on a device: recorded when the condition holds in either order
    "store, transposed": (lambda s: R().dimension(20, 32).slice(2, 16, 0, 5), lambda: V(2, False, (1, 0)),
                          True, "store_tensor at ", "(spans (16, 5) of a 16x16 matrix through a view)"),
    "load, transposed, layout's order": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16),
                                         lambda: V(2, False, (1, 0)), False, "load_tensor at ",
                                         "(spans (5, 16) of a 16x16 matrix through a view)"),
    "load, identity with dimensions": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16),
                                       lambda: V(2, True).dimension(16, 16), False, "load_tensor at ",
                                       "(spans (5, 16) of a 16x16 matrix through a view)"),
    "load, identity with a clip": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16),
                                   lambda: V(2).clip(0, 16, 0, 16), False, "load_tensor at ",
                                   "(spans (5, 16) of a 16x16 matrix through a view)"),
    "store, rank 3": (lambda s: pc.nv.tensor_layout(3, "repeat").dimension(4, 6, 16).slice(1, 2, 1, 4, 0, 16),
                      None, True, "store_tensor at ", "(spans (2, 4, 16) of a 16x16 matrix)"),
    # right on the H200: a bare identity view (loads and a store)
    "load, identity view": (lambda s: R().dimension(20, 32).slice(2, 5, 0, 16), lambda: V(2, False, (0, 1)),
                            False, None, None),
    "store, identity view": (lambda s: R().dimension(20, 16).slice(2, 3, 0, 16), lambda: V(2),
                             True, None, None),
    # the condition holds in neither order
    "load, transposed, 16 x 16": (lambda s: R().dimension(20, 32).slice(2, 16, 0, 16),
                                  lambda: V(2, False, (1, 0)), False, None, None),
    "store, 16 rows": (lambda s: R().dimension(20, 16).slice(2, 16, 0, 16), None, True, None, None),
}


@pytest.mark.parametrize("name", VIEW_CASES)
def test_stores_and_views_for_the_span_wrap(name):
    make, view, store, start, end = VIEW_CASES[name]
    reqs = _span_kernel(make, store=store, view=view).compile().requirements
    if start is None:
        assert "driver_defects" not in reqs, reqs.get("driver_defects")
    else:
        (entry,) = reqs["driver_defects"]["nv_span_wrap"]
        assert entry.startswith(start) and entry.endswith(end), entry


def test_layout_spans():
    seen = {}

    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k(X: pc.Buffer[f16], s: u32):
        seen["created"] = layout_spans(L())
        seen["dimension"] = layout_spans(L().dimension(4, 5).stride(9, 1))
        seen["slice"] = layout_spans(L().dimension(4, 5).slice(1, 2, 0, s).block_size(1, 2))
        seen["slice again"] = layout_spans(L().dimension(4, 5).slice(1, 2, 0, 3).slice(0, 1, 1, 2))
        seen["dimension after slice"] = layout_spans(L().slice(1, 2, 0, 3).dimension(7, 8))
    k.compile()
    assert seen == {"created": None, "dimension": (4, 5), "slice": (2, None),
                    "slice again": (1, 2), "dimension after slice": (7, 8)}


def test_span_wrap_is_refused_on_a_stand_in_nvidia_device(monkeypatch):
    k = _span_kernel(SPAN_CASES["seed 100295"][0])
    reqs = k.compile().requirements
    (why,) = stand_in("NVIDIA", reqs).missing(reqs)
    assert "innermost span equals the matrix's column count" in why
    assert "driver defect `nv_span_wrap` of NVIDIA 580.159.04" in why
    assert "docs/numerics.md#driver-workarounds" in why and "(spans (3, 16) of a 16x16 matrix)" in why
    assert stand_in("AMD", reqs).missing(reqs) == []
    monkeypatch.setattr(backend_module, "get_runtime", lambda: _Runtime(stand_in("NVIDIA", reqs)))
    X = (np.arange(60) * 7 % 61).astype(np.float16)
    with pytest.raises(pc.BackendUnavailable, match="driver defect `nv_span_wrap`"):
        k[1](X, np.zeros(256, np.float16), 0, backend="vulkan")
    Out = np.zeros(256, np.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert k[1](X, Out, 0, backend="auto").backend == "emulator"
    (w,) = [c for c in caught if issubclass(c.category, pc.BackendFallbackWarning)]
    assert "nv_span_wrap" in str(w.message)
    r, c = np.mgrid[0:16, 0:16]
    np.testing.assert_array_equal(Out.reshape(16, 16), X[10 * (3 + r % 3) + c % 2])


# ---------------------------------------------------------------- the fuzzer and the defects

def test_default_generation_meets_no_refused_defect():
    """The fuzzer's default NV kernels (seeds 100000-100299) record no driver defect, so none
    is refused on NVIDIA; with `--with nv_span_wrap` / `--with nv_inner_stride` seed 100295 /
    100274 record theirs."""
    from pycoop.testing import generate, parse_features
    from pycoop.testing.runner import load
    feats = parse_features("scalar,shared,khr,nv")
    for seed in range(100000, 100300):
        program = generate(seed, feats)
        text = program.render()
        if "pc.nv.tensor_layout" not in text:
            continue
        reqs = load(text).kern.compile().requirements
        assert "driver_defects" not in reqs, (seed, reqs["driver_defects"])
    for seed, name in ((100295, "nv_span_wrap"), (100274, "nv_inner_stride")):
        reqs = load(generate(seed, parse_features("scalar,shared,khr,nv", name)).render()).kern.compile().requirements
        assert set(reqs["driver_defects"]) == {name}


@pytest.mark.parametrize("seed,name", [(100295, "nv_span_wrap"), (100274, "nv_inner_stride")])
def test_the_runner_counts_a_refused_kernel_as_ok(monkeypatch, seed, name):
    """`--with` kernels that meet a refused defect run on the emulator only on NVIDIA: the
    runner's outcome is "ok" (ran on the emulator), not a failure."""
    from pycoop.testing import generate, parse_features
    from pycoop.testing.runner import load, run_module
    module = load(generate(seed, parse_features("scalar,shared,khr,nv", name)).render())
    reqs = module.kern.compile().requirements
    monkeypatch.setattr(backend_module, "get_runtime", lambda: _Runtime(stand_in("NVIDIA", reqs)))
    outcome = run_module(module, backend="vulkan")
    assert (outcome.cls, outcome.ran_on) == ("ok", "emulator"), outcome
