"""Launch-time argument checking (ArgumentError naming the parameter, before any work is done)
and backend selection."""
import re

import numpy as np
import pytest

import pycoop
from pycoop import f16, f32, i8, i32, u32

WG = 32


@pycoop.kernel(workgroup_size=WG)
def k_scale(X: pycoop.ReadBuffer[f32], Y: pycoop.Buffer[f32], a: f32, n: u32):
    i = pycoop.global_invocation_id.x
    if i < n:
        Y[i] = X[i] * a


@pycoop.kernel(workgroup_size=WG)
def k_small_ints(Y: pycoop.Buffer[i32], s: i8, u: u32):
    i = pycoop.global_invocation_id.x
    Y[i] = pycoop.cast(s, i32) + pycoop.cast(u, i32)


@pycoop.kernel(workgroup_size=WG)
def k_tiled(Y: pycoop.Buffer[f32], tile: pycoop.Const = 4):
    i = pycoop.global_invocation_id.x
    Y[i] = f32(tile)


def args_ok(n=40):
    return np.arange(n, dtype=np.float32), np.zeros(n, np.float32), 2.0, n


def test_valid_launch_on_the_emulator():
    x, y, a, n = args_ok()
    r = k_scale[2](x, y, a, n, backend="emulator")
    assert isinstance(r, pycoop.LaunchResult) and r.backend == "emulator" and r.time_ms >= 0
    np.testing.assert_array_equal(y, x * 2)
    y2 = np.zeros_like(y)
    k_scale[(2, 1, 1)](X=x, Y=y2, a=3.0, n=n, backend="emulator")     # keywords, 3-D grid
    np.testing.assert_array_equal(y2, x * 3)


def test_use_backend_context_sets_the_default_backend():
    x, y, a, n = args_ok()
    with pycoop.use_backend("emulator"):
        r = k_scale[2](x, y, 4.0, n)
    assert r.backend == "emulator"
    np.testing.assert_array_equal(y, x * 4)
    with pytest.raises(ValueError, match="backend must be one of"):
        with pycoop.use_backend("cuda"):
            pass
    with pytest.raises(ValueError, match="backend must be one of"):
        k_scale[2](x, y, a, n, backend="metal")


@pytest.mark.parametrize("call", [
    lambda x, y, a, n: k_scale[2](x, y, a, n, backend=""),
    lambda x, y, a, n: pycoop.asarray(x, backend=""),
    lambda x, y, a, n: pycoop.zeros(4, backend=""),
])
def test_an_empty_backend_name_is_refused_not_read_as_auto(call):
    """backend="" is a mistake (an unset variable, say), not "auto": an error, not a silent
    choice of device."""
    with pytest.raises(ValueError, match="backend must be one of .* got ''"):
        call(*args_ok())


@pytest.mark.parametrize("var,value,takes", [
    ("PYCOOP_SUBGROUP_SIZE", "abc", "a power of two"),      # was int()'s message, no name
    ("PYCOOP_SUBGROUP_SIZE", "0", "a power of two"),        # was a ZeroDivisionError
    ("PYCOOP_SUBGROUP_SIZE", "3", "a power of two"),        # was taken: subgroup_size() == 3
    ("PYCOOP_CACHE_MAX_MB", "nan", "a finite size"),        # was "cannot convert float NaN"
    ("PYCOOP_CACHE_MAX_MB", "inf", "a finite size"),
    ("PYCOOP_VK_TRANSFER", "bogus", "auto, direct or staged"),
    ("PYCOOP_EMULATOR_MEMO", "nope", "1"),                  # was on (anything but 0/off)
    ("PYCOOP_VK_VALIDATION", "maybe", "1"),                 # was off (anything but "1")
    ("PYCOOP_CHECK_DECODE_VECTOR", "sometimes", "1"),
    ("PYCOOP_CHECKED", "2", "1"),
])
def test_settings_refuse_a_value_naming_the_variable(monkeypatch, var, value, takes):
    from pycoop import knobs
    read = {"PYCOOP_SUBGROUP_SIZE": knobs.subgroup_size, "PYCOOP_CACHE_MAX_MB": knobs.cache_max_bytes,
            "PYCOOP_VK_TRANSFER": knobs.vk_transfer, "PYCOOP_EMULATOR_MEMO": knobs.emulator_memo,
            "PYCOOP_VK_VALIDATION": knobs.vk_validation,
            "PYCOOP_CHECK_DECODE_VECTOR": knobs.check_decode_vector_enabled,
            "PYCOOP_CHECKED": knobs.checked}[var]
    monkeypatch.setenv(var, value)
    with pytest.raises(knobs.SettingError, match=f"{var}='{value}': expected {takes}"):
        read()
    assert issubclass(knobs.SettingError, ValueError)


def test_settings_read_empty_as_the_default_and_ignore_case(monkeypatch):
    from pycoop import knobs
    for var in ("PYCOOP_SUBGROUP_SIZE", "PYCOOP_CACHE_MAX_MB", "PYCOOP_VK_TRANSFER",
                "PYCOOP_EMULATOR_MAX_ITERATIONS", "PYCOOP_EMULATOR_MEMO"):
        monkeypatch.setenv(var, " ")
    assert (knobs.subgroup_size(), knobs.cache_max_bytes(), knobs.vk_transfer(),
            knobs.emulator_max_iterations(), knobs.emulator_memo()) == (32, 256 << 20, "auto",
                                                                        1 << 20, True)
    monkeypatch.setenv("PYCOOP_VK_TRANSFER", "Staged")
    monkeypatch.setenv("PYCOOP_SUBGROUP_SIZE", " 16 ")
    assert knobs.vk_transfer() == "staged" and knobs.subgroup_size() == 16
    for on, off in (("ON", "Off"), ("True", "FALSE"), ("yes", "No"), ("1", "0")):
        monkeypatch.setenv("PYCOOP_VK_VALIDATION", on)
        monkeypatch.setenv("PYCOOP_EMULATOR_MEMO", off)
        assert knobs.vk_validation() and not knobs.emulator_memo()


def test_the_traceback_setting_never_raises(monkeypatch):
    """PYCOOP_TRACEBACK is read while an error is shown: a word it does not know turns it on
    rather than raising over the error."""
    from pycoop import knobs
    for value, on in (("", False), ("0", False), ("off", False), ("1", True), ("full", True)):
        monkeypatch.setenv("PYCOOP_TRACEBACK", value)
        assert knobs.show_internal_frames() is on


def test_use_backend_context_nests_and_restores(monkeypatch):
    from pycoop.runtime import backend as be
    monkeypatch.setenv("PYCOOP_BACKEND", "emulator")
    ck = k_scale.compile()
    with pycoop.use_backend("emulator"):
        with pycoop.use_backend("auto"):
            assert be._local.backend == "auto"
        assert be.choose(None, ck) == "emulator"
    assert getattr(be._local, "backend", None) is None
    assert be.choose(None, ck) == "emulator"      # from PYCOOP_BACKEND
    assert be.choose("emulator", ck) == "emulator"


@pytest.mark.parametrize("bad,name,msg", [
    (dict(X=np.zeros(40, np.float64)), "X", "dtype float32, got float64"),
    (dict(Y=np.zeros(40, np.float16)), "Y", "dtype float32, got float16"),
    (dict(X=np.zeros((40, 2), np.float32)[:, 0]), "X", "C-contiguous"),
    (dict(Y=np.zeros(80, np.float32)[::2]), "Y", "C-contiguous"),
    (dict(X=[1.0, 2.0]), "X", "must be an array, got list"),
    (dict(X="not an array"), "X", "must be an array"),
    (dict(n=-1), "n", "out of range 0..4294967295"),
    (dict(n=2 ** 32), "n", "out of range"),
    (dict(n=3.5), "n", "must be an integer"),
    (dict(n=True), "n", "must be a number"),
    (dict(a="2"), "a", "must be a number"),
    (dict(a=np.zeros(3)), "a", "must be a number"),
])
def test_bad_arguments_raise_argument_error_naming_the_parameter(bad, name, msg):
    x, y, a, n = args_ok()
    kw = dict(X=x, Y=y, a=a, n=n)
    kw.update(bad)
    before = y.copy()
    with pytest.raises(pycoop.ArgumentError, match=msg) as ei:
        k_scale[2](**kw, backend="emulator")
    assert f"'{name}'" in str(ei.value)
    assert isinstance(ei.value, TypeError)        # ArgumentError is also a TypeError
    np.testing.assert_array_equal(y, before)      # nothing ran


def test_scalar_ranges_follow_the_parameter_type():
    y = np.zeros(WG, np.int32)
    k_small_ints[1](y, -128, 2 ** 32 - 1, backend="emulator")
    assert (y == -128 + -1).all()                 # u32 max cast to i32 wraps to -1
    with pytest.raises(pycoop.ArgumentError, match=r"'s' \(i8\) = 128 is out of range -128..127"):
        k_small_ints[1](y, 128, 0, backend="emulator")
    k_small_ints[1](y, np.int64(5), np.uint32(7), backend="emulator")
    assert (y == 12).all()


def test_missing_and_extra_arguments():
    x, y, a, n = args_ok()
    with pytest.raises(pycoop.ArgumentError, match="missing a required argument: 'n'") as ei:
        k_scale[2](x, y, a, backend="emulator")
    assert "parameters:" in str(ei.value) and "n: u32" in str(ei.value)
    with pytest.raises(pycoop.ArgumentError, match="too many"):
        k_scale[2](x, y, a, n, 5, backend="emulator")
    with pytest.raises(pycoop.ArgumentError, match="unexpected keyword argument 'm'"):
        k_scale[2](x, y, a, n, m=3, backend="emulator")


def test_read_only_array_written_by_the_kernel():
    x, y, a, n = args_ok()
    y.flags.writeable = False
    with pytest.raises(pycoop.ArgumentError, match="'Y' is written by the kernel but the array is "
                                                   "read-only"):
        k_scale[2](x, y, a, n, backend="emulator")
    x.flags.writeable = False               # X is only read: a read-only array is fine
    y2 = np.zeros(n, np.float32)
    k_scale[2](x, y2, a, n, backend="emulator")
    np.testing.assert_array_equal(y2, x * 2)


@pytest.mark.parametrize("grid", [0, -1, (1, 0), (1, 2, 3, 4), (), (2.0,), "2", (8, -1),
                                  1.5, True, (2, True)])
def test_bad_grid(grid):
    with pytest.raises(pycoop.ArgumentError, match="grid must be 1 to 3 positive ints"):
        k_scale[grid]


@pytest.mark.parametrize("grid", [2.0, True, (2.0, 1), (2, True)])
def test_a_grid_equal_to_a_launched_one_is_still_checked(grid):
    """Launchers are kept per grid, and 2.0 == 2, True == 1: a float or bool grid used to
    find the launcher of the equal int grid and run."""
    x, y, a, n = args_ok()
    for g in (1, 2, (2, 1)):
        k_scale[g](x, y, a, n, backend="emulator")
    with pytest.raises(pycoop.ArgumentError, match="grid must be 1 to 3 positive ints"):
        k_scale[grid](x, y, a, n, backend="emulator")


def test_const_parameters_at_launch():
    y = np.zeros(WG, np.float32)
    k_tiled[1](y, backend="emulator")
    assert (y == 4).all()
    k_tiled[1](y, tile=7, backend="emulator")
    assert (y == 7).all()
    with pytest.raises(pycoop.ArgumentError, match="unknown compile-time parameter"):
        k_tiled.compile(tile=2, other=3)


def test_calling_a_kernel_directly_explains_how_to_launch():
    with pytest.raises(TypeError, match=r"k_scale\[grid\]"):
        k_scale(*args_ok())


def test_bad_kernel_declarations():
    with pytest.raises(pycoop.CompileError, match="workgroup_size"):
        pycoop.kernel(workgroup_size=(0, 1))(lambda A: None)
    with pytest.raises(pycoop.CompileError, match="power of two"):
        pycoop.kernel(workgroup_size=32, subgroup_size=24)(lambda A: None)

    def untyped(A, n):
        pass
    with pytest.raises(pycoop.CompileError, match="parameter 'A' of kernel untyped"):
        pycoop.kernel(untyped)

    def bool_param(flag: pycoop.bool_):
        pass
    with pytest.raises(pycoop.CompileError, match="parameter 'flag'"):
        pycoop.kernel(bool_param)


def test_buffer_of_f16_requires_float16_arrays():
    @pycoop.kernel(workgroup_size=WG)
    def k_half(H: pycoop.Buffer[f16]):
        i = pycoop.global_invocation_id.x
        H[i] = H[i] + 1.0
    h = np.zeros(WG, np.float16)
    k_half[1](h, backend="emulator")
    assert (h == 1).all()
    with pytest.raises(pycoop.ArgumentError, match="'H'.*astype\\('float16'\\)"):
        k_half[1](np.zeros(WG, np.float32), backend="emulator")


def test_vector_buffers_check_their_arguments_and_uses():
    import pycoop as pc
    from pycoop import f16, u32
    V4 = pc.vec(u32, 4)

    @pc.kernel(workgroup_size=32)
    def copy4(A: pc.ReadBuffer[V4], B: pc.WriteBuffer[V4]):
        i = pc.global_invocation_id.x
        B[i] = A[i]

    with pytest.raises(pc.ArgumentError, match="not a multiple of the 4 components"):
        copy4[1](np.zeros(130, np.uint32), np.zeros(128, np.uint32), backend="emulator")
    with pytest.raises(pc.ArgumentError, match="must have dtype uint32"):
        copy4[1](np.zeros(128, np.float32), np.zeros(128, np.uint32), backend="emulator")

    with pytest.raises(pc.CompileError, match="numeric vectors of 2 or 4 components"):
        @pc.kernel(workgroup_size=32)
        def vec3(A: pc.Buffer[pc.vec(u32, 3)]):
            A[0] = A[1]

        vec3.compile()

    Mat = pc.coopmat[f16, pc.Workgroup, 32, 32, pc.UseA]

    @pc.kernel(workgroup_size=128)
    def tensor_from_vectors(A: pc.ReadBuffer[pc.vec(f16, 4)], O: pc.Buffer[f16]):
        t = pc.nv.load_tensor(A, pc.nv.tensor_layout(2).dimension(32, 32), Mat)
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(32, 32), pc.convert(t, f16))

    with pytest.raises(pc.CompileError, match="load_tensor through an array of vec4<f16>"):
        tensor_from_vectors.compile()

    @pc.kernel(workgroup_size=32)
    def all_write_one(B: pc.Buffer[V4]):
        l = pc.local_invocation_index()
        B[0] = pc.make_vector([l, l, l, l])

    with pytest.raises(pc.EmulatorError, match="more than once with different values"):
        all_write_one[1](np.zeros((4, 4), np.uint32), backend="emulator")


@pycoop.kernel(workgroup_size=WG)
def k_vec(X: pycoop.Buffer[pycoop.vec(u32, 4)], i: u32):
    if pycoop.global_invocation_id.x == 0:
        X[i + 1] = X[i]


def test_vector_views_must_start_at_an_element_boundary():
    """The elements of a vector buffer are loaded and stored aligned to their size: a view
    that starts inside an element is refused (it would be undefined on a GPU)."""
    base = pycoop.zeros(64, pycoop.u32, backend="emulator")
    with pytest.raises(pycoop.ArgumentError, match=r"'X' \(Buffer\[vec4<u32>\]\) is a view 4 "
                       r"bytes into its buffer: .* a multiple of 16 bytes"):
        k_vec[1](base[1:17], 0)
    k_vec[1](base[4:20], 0)


M16C = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=WG)
def k_matrix_copy(A: pycoop.ReadBuffer[f16], T: pycoop.ReadBuffer[f16],
                  B: pycoop.WriteBuffer[f16]):
    """Copies A (a KHR load and store) and reads T through a tensor layout."""
    m = M16C.load(A, 0, 16)
    t = pycoop.nv.load_tensor(T, pycoop.nv.tensor_layout(2).dimension(16, 16), M16C)
    pycoop.store(B, 0, m + t, 16)


@pytest.mark.parametrize("arg,halves,ok", [
    ("A", 1, False), ("A", 4, False), ("A", 8, True), ("A", 24, True),
    ("T", 2, False), ("T", 8, True), ("B", 4, False), ("B", 16, True)])
def test_matrix_buffers_take_views_at_their_pointer_alignment(arg, halves, ok):
    """A cooperative-matrix load or store needs its pointer aligned (16 bytes for these
    matrices, VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986; 16 bytes for every tensor
    load, SPV_NV_cooperative_matrix2): a view of such a buffer that starts elsewhere is
    refused at the launch, naming the argument, its offset and the rule (a GPU would read or
    write the wrong elements, and the emulator takes every buffer to start aligned)."""
    base = pycoop.zeros(halves + 256, f16, backend="emulator")
    args = {n: pycoop.zeros(256, f16, backend="emulator") for n in "ATB"}
    args[arg] = base[halves:]
    if ok:
        k_matrix_copy[1](*args.values())
        return
    op = "tensor loads" if arg == "T" else "stores" if arg == "B" else "loads"
    rule = "SPV_NV_cooperative_matrix2" if arg == "T" else "VUID-RuntimeSpirv-OpCooperative"
    with pytest.raises(pycoop.ArgumentError, match=rf"argument '{arg}' is a view {2 * halves} "
                       rf"bytes into its buffer, but the kernel's cooperative-matrix {op} need "
                       rf"it to start at a multiple of 16 bytes \({rule}.*aligned copy"):
        k_matrix_copy[1](*args.values())


M16x4 = pycoop.coopmat[f16, pycoop.Subgroup, 16, 4, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=WG)
def k_narrow_rows(A: pycoop.ReadBuffer[f16], B: pycoop.WriteBuffer[f16]):
    """Rows of 4 halves: the KHR rule asks for the lesser of 16 bytes and a row, 8 bytes."""
    pycoop.store(B, 0, M16x4.load(A, 0, 4), 4)


def test_a_matrix_of_narrow_rows_takes_views_at_a_row():
    base = pycoop.zeros(80, f16, backend="emulator")
    out = pycoop.zeros(64, f16, backend="emulator")
    base[4:68].copy_from(np.arange(64, dtype=np.float16))
    k_narrow_rows[1](base[4:68], out)                       # 8 bytes in
    np.testing.assert_array_equal(out.numpy(), np.arange(64, dtype=np.float16))
    with pytest.raises(pycoop.ArgumentError, match=r"'A' is a view 4 bytes into its buffer, "
                                                   r"but .* a multiple of 8 bytes"):
        k_narrow_rows[1](base[2:66], out)


def test_buffers_past_the_32_bit_index_range_are_refused(monkeypatch):
    """Buffers are indexed with 32-bit integers that SPIR-V reads as signed: an element at 2^31
    would be addressed 2 GiB before the buffer, so longer buffers are refused (the limit is
    lowered here to keep the arrays small)."""
    from pycoop.frontend import kernel
    monkeypatch.setattr(kernel, "MAX_ELEMENTS", 40)
    x, y, a, n = args_ok(41)
    for X in (x, pycoop.asarray(x, backend="emulator")):
        with pytest.raises(pycoop.ArgumentError, match="'X' .* has 41 elements: buffers are "
                           "indexed with 32-bit integers, so at most 40"):
            k_scale[2](X, y, a, n, backend="emulator")
    with pytest.raises(pycoop.ArgumentError, match="'X' .* has 41 elements"):
        k_vec[1](pycoop.zeros(4 * 41, pycoop.u32, backend="emulator"), 0)    # 41 vec4
    k_scale[2](*args_ok(40), backend="emulator")


def test_a_compiled_kernel_checks_its_argument_count():
    ck = k_scale.compile()
    x, y, a, n = args_ok()
    for args in ([x, y, a], [x, y, a, n, 5]):
        with pytest.raises(pycoop.ArgumentError, match=r"k_scale takes 4 runtime arguments "
                           r"\(X, Y, a, n\), got"):
            ck.launch((2, 1, 1), args, backend="emulator")


@pytest.mark.parametrize("value,arg", [(1e300, "a"), (-3.5e38, "a")])
def test_float_scalars_out_of_their_types_range(value, arg):
    """A finite value that its float type cannot hold is refused, as the Vulkan ABI does
    (infinities and NaN are passed as they are)."""
    x, y, a, n = args_ok()
    with pytest.raises(pycoop.ArgumentError, match=rf"argument '{arg}' \(f32\) = .* is out of "
                       r"range for f32"):
        k_scale[2](x, y, value, n, backend="emulator")
    for special in (float("inf"), float("nan")):
        k_scale[2](x, y, special, n, backend="emulator")


def test_the_emulator_refuses_grids_past_its_invocation_limit():
    """The emulator holds every invocation's values at once: a grid past MAX_INVOCATIONS is
    an ArgumentError naming the count, not a MemoryError from NumPy."""
    x, y, a, n = args_ok()
    with pytest.raises(pycoop.ArgumentError, match=r"k_scale: the grid \(67108864, 1, 1\) of "
                       r"32-invocation workgroups is 2147483648 invocations"):
        k_scale[2 ** 26](x, y, a, n, backend="emulator")


@pytest.mark.parametrize("size", [3, 0, -8, 256, True, "8", 16.0])
def test_a_subgroup_size_no_device_has_is_refused_before_any_work(size):
    """At a launch and at compile(): a power of two from 1 to 128 (3 traced and ran with
    pc.subgroup_size() == 3, True with 1; "8" and -8 were raw TypeError/OverflowError)."""
    x, y, a, n = args_ok()
    for call in (lambda: k_scale[2](x, y, a, n, backend="emulator", subgroup_size=size),
                 lambda: k_scale.compile(subgroup_size=size)):
        with pytest.raises(pycoop.ArgumentError, match=r"k_scale: subgroup_size must be a power "
                                                       r"of two from 1 to 128 .*got " + re.escape(repr(size))):
            call()
    assert not y.any()


def test_a_numpy_integer_subgroup_size_is_the_same_kernel():
    x, y, a, n = args_ok()
    k_scale[2](x, y, a, n, backend="emulator", subgroup_size=np.int64(16))
    assert k_scale.compile(subgroup_size=np.int32(16)) is k_scale.compile(subgroup_size=16)
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.parametrize("checked", ["yes", 2.0, 0, 1])
def test_checked_is_true_false_or_none(checked):
    x, y, a, n = args_ok()
    with pytest.raises(pycoop.ArgumentError, match="k_scale: checked must be True, False or None"):
        k_scale[2](x, y, a, n, backend="emulator", checked=checked)
    assert not y.any()


@pytest.mark.parametrize("args", [None, iter([1, 2, 3, 4]), "abcd"])
def test_compiled_launch_takes_a_list_or_tuple_of_arguments(args):
    with pytest.raises(pycoop.ArgumentError, match=r"k_scale.launch: args is a list or tuple "
                                                   r"of the runtime arguments \(X, Y, a, n\)"):
        k_scale.compile().launch(1, args, backend="emulator")


def test_abi_and_requirements_are_copies():
    ck = k_scale.compile()
    ck.abi["args"].clear()
    ck.requirements.clear()
    assert ck.abi["args"] and ck.requirements
    x, y, a, n = args_ok()
    ck.launch(2, [x, y, a, n], backend="emulator")
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.parametrize("path", [None, 3, ""])
def test_save_takes_a_file_name(path):
    with pytest.raises(pycoop.ArgumentError, match=r"k_scale.save: path is a file name"):
        k_scale.compile().save(path)


def test_save_writes_both_files_or_neither(tmp_path, monkeypatch):
    ck = k_scale.compile()
    out = tmp_path / "k.spv"

    def refuse(self, *a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(type(out), "write_text", refuse)
    with pytest.raises(OSError, match="disk full"):
        ck.save(out)
    assert not out.exists()
