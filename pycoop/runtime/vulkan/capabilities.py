"""What a Vulkan device can run, as plain data: used to choose a backend and explain why not.

Pure Python (no Vulkan import): `probe.py` fills it from a physical device; tests and the
backend chooser can build one by hand.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class CoopmatShape(NamedTuple):
    """One VkCooperativeMatrixPropertiesKHR entry; component types as names ("float16", ...)."""
    M: int
    N: int
    K: int
    A: str
    B: str
    C: str
    result: str
    saturating: bool
    scope: str


class FlexibleDimensions(NamedTuple):
    """One VkCooperativeMatrixFlexibleDimensionsPropertiesNV entry: M/N/K may be any multiple
    of the granularities (up to `Capabilities.flexible_max_dimension`)."""
    M_granularity: int
    N_granularity: int
    K_granularity: int
    A: str
    B: str
    C: str
    result: str
    saturating: bool
    scope: str
    workgroup_invocations: int


NV_COOPMAT2_FEATURES = (
    "cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
    "cooperativeMatrixReductions", "cooperativeMatrixConversions",
    "cooperativeMatrixPerElementOperations", "cooperativeMatrixTensorAddressing",
    "cooperativeMatrixBlockLoads",
)


class DriverDefect(NamedTuple):
    """A driver that computes something other than what a valid module means, where pycoop has
    no code-generation workaround: a module whose requirements name the defect
    (`requirements["driver_defects"]`, recorded by the op's lowering) is refused on a matching
    device, so that `backend="auto"` runs it on the emulator (with the fallback warning) and
    `backend="vulkan"` raises BackendUnavailable, instead of returning wrong results."""
    vendor: str               # Capabilities.vendor of the affected devices
    what: str                 # what the driver gets wrong (ends the "lacks ..." message)
    docs: str                 # where it is documented


# Known driver defects, by the name the lowering records (docs/numerics.md, "Driver
# workarounds"). No fixed driver version is known, so every driver of the vendor is affected.
DRIVER_DEFECTS: dict[str, DriverDefect] = {
    "nv_inner_stride": DriverDefect(
        "NVIDIA", "correct NV tensor loads/stores through a layout whose innermost stride is a "
        "constant other than 1, or a runtime value with no view (the driver reads such a row "
        "contiguously)", "docs/numerics.md#driver-workarounds"),
    "nv_span_wrap": DriverDefect(
        "NVIDIA", "correct NV tensor loads/stores through a layout whose innermost span equals the "
        "matrix's column count and whose outer span is smaller than its row count, in the layout's "
        "or a permuting view's order (the driver does not wrap the outer span coordinate)", "docs/numerics.md#driver-workarounds"),
}


@dataclass
class Capabilities:
    device_name: str
    vendor: str
    driver_version: str
    api_version: str
    device_type: str                       # "discrete", "integrated", "virtual", "cpu", "other"
    extensions: tuple[str, ...] = ()
    features: dict[str, bool] = field(default_factory=dict)   # Vulkan feature name -> supported
    khr_coopmat_shapes: list[CoopmatShape] = field(default_factory=list)
    nv_coopmat2: dict[str, bool] = field(default_factory=dict)
    flexible_dimensions: list[FlexibleDimensions] = field(default_factory=list)
    coopmat2_max_workgroup_size: int = 0
    flexible_max_dimension: int = 0
    coopmat2_reserved_shared_memory: int = 0
    decode_vector: bool = False
    qcom_conversion: bool = False
    subgroup_size: int = 0
    subgroup_operations: tuple[str, ...] = ()   # supportedOperations ("basic", "vote", ...)
    subgroup_stages: tuple[str, ...] = ()       # supportedStages ("compute", ...)
    min_subgroup_size: int = 0
    max_subgroup_size: int = 0
    subgroup_size_control: bool = False
    required_subgroup_size_stages: tuple[str, ...] = ()
    max_push_constants_size: int = 0
    # storage-buffer descriptors (the descriptor ABI): an offset must be a multiple of the
    # alignment, a range at most maxStorageBufferRange; defaults are the spec's guarantees
    min_storage_buffer_offset_alignment: int = 256
    max_storage_buffer_range: int = 1 << 27
    max_per_stage_storage_buffers: int = 4
    max_memory_allocation_count: int = 4096     # VkDeviceMemory objects at once (spec minimum)
    max_compute_shared_memory_size: int = 0
    max_compute_workgroup_invocations: int = 0
    max_compute_workgroup_size: tuple[int, int, int] = (0, 0, 0)
    max_compute_workgroup_count: tuple[int, int, int] = (0, 0, 0)
    timestamp_period_ns: float = 0.0
    # VkPhysicalDeviceFloatControlsProperties booleans (shaderSignedZeroInfNanPreserveFloat32,
    # ...); None: not probed, so float-controls requirements are not checked
    float_controls: dict[str, bool] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["khr_coopmat_shapes"] = [s._asdict() for s in self.khr_coopmat_shapes]
        out["flexible_dimensions"] = [f._asdict() for f in self.flexible_dimensions]
        out["extensions"] = list(self.extensions)
        return out

    def has(self, feature: str) -> bool:
        return bool(self.features.get(feature, False))

    # --- requirements ---------------------------------------------------------------------
    def supports_shape(self, shape: tuple, workgroup_invocations: int | None = None) -> bool:
        """`shape` = (M, N, K, A, B, C, Result, scope) or with `saturating` before scope.
        Matches a KHR shape exactly, or an NV flexible-dimensions entry by granularity."""
        want = _normalise_shape(shape)
        if want in self.khr_coopmat_shapes:
            return True
        if not self.nv_coopmat2.get("cooperativeMatrixFlexibleDimensions"):
            return False
        for flex in self.flexible_dimensions:
            if ((flex.A, flex.B, flex.C, flex.result, flex.saturating, flex.scope)
                    != (want.A, want.B, want.C, want.result, want.saturating, want.scope)):
                continue
            if any(dim % gran or dim > self.flexible_max_dimension for dim, gran in
                   ((want.M, flex.M_granularity), (want.N, flex.N_granularity),
                    (want.K, flex.K_granularity))):
                continue
            if (want.scope == "workgroup" and workgroup_invocations is not None
                    and workgroup_invocations != flex.workgroup_invocations):
                continue
            return True
        return False

    def supports_matrix_type(self, rows: int, cols: int, use: str, component: str, scope: str,
                             workgroup_invocations: int | None = None) -> bool:
        """Whether a cooperative matrix type (use "A", "B" or "Accumulator") appears in some
        supported shape: a KHR entry with that operand's size and type, or an NV
        flexible-dimensions entry whose granularities divide it."""
        def fits(m, n, k, a, b, c, r):
            if use == "A":
                return (rows, cols, component) == (m, k, a)
            if use == "B":
                return (rows, cols, component) == (k, n, b)
            return (rows, cols) == (m, n) and component in (c, r)
        for s in self.khr_coopmat_shapes:
            if s.scope == scope and fits(s.M, s.N, s.K, s.A, s.B, s.C, s.result):
                return True
        if not self.nv_coopmat2.get("cooperativeMatrixFlexibleDimensions"):
            return False
        for f in self.flexible_dimensions:
            if f.scope != scope or (scope == "workgroup" and workgroup_invocations is not None
                                    and workgroup_invocations != f.workgroup_invocations):
                continue
            gran = {"A": (f.M_granularity, f.K_granularity, f.A),
                    "B": (f.K_granularity, f.N_granularity, f.B)}.get(
                use, (f.M_granularity, f.N_granularity, None))
            ok_type = component == gran[2] if gran[2] else component in (f.C, f.result)
            if ok_type and rows % gran[0] == 0 and cols % gran[1] == 0 \
                    and max(rows, cols) <= self.flexible_max_dimension:
                return True
        return False

    def supports_subgroup_size(self, size: int) -> bool:
        if size == self.subgroup_size:
            return True
        return (self.subgroup_size_control and "compute" in self.required_subgroup_size_stages
                and self.min_subgroup_size <= size <= self.max_subgroup_size)

    def missing(self, requirements: dict[str, Any]) -> list[str]:
        """Human-readable names of what `requirements` needs and this device lacks.

        Keys (all optional): extensions, features, coopmat_shapes, subgroup_size,
        shared_memory, workgroup_invocations, push_constants. An empty list means supported.
        """
        missing = [f"extension {e}" for e in requirements.get("extensions", ())
                   if e not in self.extensions]
        missing += [f"feature {f}" for f in requirements.get("features", ()) if not self.has(f)]
        invocations = requirements.get("workgroup_invocations")
        shapes = [_normalise_shape(s) for s in requirements.get("coopmat_shapes", ())]
        missing += [f"cooperative matrix shape {_shape_text(s)}" for s in shapes
                    if not self.supports_shape(s, invocations)]
        missing += [f"cooperative matrix type {r}x{c} {comp} {use} ({scope} scope)"
                    for r, c, use, comp, scope in requirements.get("coopmat_types", ())
                    if not self.supports_matrix_type(r, c, use, comp, scope, invocations)]
        workgroup_scope = any(s.scope == "workgroup" for s in shapes) or any(
            t[4] == "workgroup" for t in requirements.get("coopmat_types", ()))
        ops = requirements.get("subgroup_operations", ())
        lacking = [o for o in ops if o not in self.subgroup_operations]
        if lacking or (ops and "compute" not in self.subgroup_stages):
            missing.append(f"subgroup operations {', '.join(lacking or ops)} in compute shaders "
                           f"(device: {', '.join(self.subgroup_operations) or 'none'} in "
                           f"{', '.join(self.subgroup_stages) or 'no stage'})")
        size = requirements.get("subgroup_size")
        if size is not None and not self.supports_subgroup_size(size):
            missing.append(f"subgroup size {size} (device: {self._subgroup_text()})")
        shared = requirements.get("shared_memory")
        if shared is not None:
            available = self.max_compute_shared_memory_size - (
                self.coopmat2_reserved_shared_memory if workgroup_scope else 0)
            if shared > available:
                missing.append(f"{shared} bytes of shared memory (device: {available})")
        if invocations is not None:
            limit = self.max_compute_workgroup_invocations
            if workgroup_scope and self.coopmat2_max_workgroup_size:
                limit = min(limit, self.coopmat2_max_workgroup_size)
            if invocations > limit:
                missing.append(f"{invocations} invocations per workgroup (device: {limit})")
        lacking = [prop for prop in requirements.get("float_controls", ())
                   if self.float_controls is not None and not self.float_controls.get(prop)]
        if lacking:
            missing.append(f"float controls {', '.join(lacking)} (asked for by "
                           f"fp=\"{requirements.get('fp')}\"; fp=\"fast\" asks for none)")
        push = requirements.get("push_constants")
        if push is not None and push > self.max_push_constants_size:
            missing.append(f"{push} bytes of push constants (device: {self.max_push_constants_size})")
        return missing + self.driver_defects(requirements)

    def driver_defects(self, requirements: dict[str, Any]) -> list[str]:
        """The known driver defects (DRIVER_DEFECTS) this device has and the module meets, as
        entries of `missing`: what the driver gets wrong, where the kernel meets it, the docs."""
        out = []
        for name, where in requirements.get("driver_defects", {}).items():
            defect = DRIVER_DEFECTS.get(name)
            if defect is not None and self.vendor == defect.vendor:
                out.append(f"{defect.what}: {', '.join(where)}; driver defect `{name}` of "
                           f"{defect.vendor} {self.driver_version or 'drivers'}, see {defect.docs}")
        return out

    # --- text -----------------------------------------------------------------------------
    def _subgroup_text(self) -> str:
        text = f"{self.subgroup_size}"
        if self.subgroup_size_control:
            text += (f", selectable {self.min_subgroup_size}..{self.max_subgroup_size} in "
                     f"{'/'.join(self.required_subgroup_size_stages) or 'no stage'}")
        return text

    def describe(self) -> str:
        yes = lambda b: "yes" if b else "no"  # noqa: E731
        f = self.has
        lines = [
            f"{self.device_name} ({self.device_type}, {self.vendor})",
            f"  driver {self.driver_version}, Vulkan {self.api_version}",
            f"  subgroup size {self._subgroup_text()}; operations "
            f"{', '.join(self.subgroup_operations) or 'none'} in {', '.join(self.subgroup_stages) or 'no stage'}",
            f"  limits: push constants {self.max_push_constants_size} B, shared memory "
            f"{self.max_compute_shared_memory_size} B, workgroup invocations "
            f"{self.max_compute_workgroup_invocations}, workgroup size "
            f"{'x'.join(map(str, self.max_compute_workgroup_size))}, workgroup count "
            f"{'x'.join(map(str, self.max_compute_workgroup_count))}",
            f"  buffer device address {yes(f('bufferDeviceAddress'))}, Vulkan memory model "
            f"{yes(f('vulkanMemoryModel'))}",
            f"  shader types: float16 {yes(f('shaderFloat16'))}, int8 {yes(f('shaderInt8'))}, "
            f"int16 {yes(f('shaderInt16'))}, int64 {yes(f('shaderInt64'))}, float64 "
            f"{yes(f('shaderFloat64'))}, bfloat16 {yes(f('shaderBFloat16Type'))} (coopmat "
            f"{yes(f('shaderBFloat16CooperativeMatrix'))}), float8 {yes(f('shaderFloat8'))} "
            f"(coopmat {yes(f('shaderFloat8CooperativeMatrix'))})",
            f"  atomics: int64 buffer {yes(f('shaderBufferInt64Atomics'))} shared "
            f"{yes(f('shaderSharedInt64Atomics'))}; float add/min-max (buffer): f16 "
            f"{yes(f('shaderBufferFloat16AtomicAdd'))}/{yes(f('shaderBufferFloat16AtomicMinMax'))}, "
            f"f32 {yes(f('shaderBufferFloat32AtomicAdd'))}/{yes(f('shaderBufferFloat32AtomicMinMax'))}, "
            f"f64 {yes(f('shaderBufferFloat64AtomicAdd'))}/{yes(f('shaderBufferFloat64AtomicMinMax'))}",
            f"  KHR cooperative matrix: {yes(f('cooperativeMatrix'))}",
        ]
        lines += [f"    {_shape_text(s)}" for s in self.khr_coopmat_shapes]
        enabled = [name for name in NV_COOPMAT2_FEATURES if self.nv_coopmat2.get(name)]
        lines.append("  NV cooperative matrix 2: " + (
            ", ".join(n.removeprefix("cooperativeMatrix") for n in enabled) if enabled else "no"))
        if enabled:
            lines.append(f"    workgroup scope up to {self.coopmat2_max_workgroup_size} "
                         f"invocations, {self.coopmat2_reserved_shared_memory} B shared memory "
                         f"reserved; flexible dimensions up to {self.flexible_max_dimension}")
            lines += [f"    flexible {x.M_granularity}x{x.N_granularity}x{x.K_granularity} "
                      f"{x.A}*{x.B}+{x.C}->{x.result}{' sat' if x.saturating else ''} "
                      f"{x.scope}{f' ({x.workgroup_invocations} invocations)' if x.scope == 'workgroup' else ''}"
                      for x in self.flexible_dimensions]
        lines.append(f"  NV decode vector: {yes(self.decode_vector)}, QCOM conversion: "
                     f"{yes(self.qcom_conversion)}")
        if self.float_controls is not None:
            def widths(kind):
                return "/".join(f"f{w}" for w in (16, 32, 64)
                                if self.float_controls.get(f"shader{kind}Float{w}")) or "none"
            lines.append(f"  float controls: signed zero/inf/nan preserve {widths('SignedZeroInfNanPreserve')}, "
                         f"denorm preserve {widths('DenormPreserve')}, round to nearest even "
                         f"{widths('RoundingModeRTE')}")
        return "\n".join(lines)


def _normalise_shape(shape: tuple) -> CoopmatShape:
    if isinstance(shape, CoopmatShape):
        return shape
    if len(shape) == 8:
        m, n, k, a, b, c, r, scope = shape
        return CoopmatShape(m, n, k, a, b, c, r, False, scope)
    return CoopmatShape(*shape)


def _shape_text(s: CoopmatShape) -> str:
    return (f"{s.M}x{s.N}x{s.K} {s.A}*{s.B}+{s.C}->{s.result}"
            f"{' saturating' if s.saturating else ''} ({s.scope} scope)")
