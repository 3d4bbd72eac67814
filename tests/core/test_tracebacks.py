"""pycoop's own frames are not shown in the tracebacks of its errors (PYCOOP_TRACEBACK=1 keeps
them): at every entry point a user calls, on the emulator and on Vulkan, caught or uncaught."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32
from pycoop.errors import is_internal

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = str(ROOT / "pycoop")


def _internal_frames(e: BaseException) -> list[str]:
    """The pycoop frames a traceback printer shows: every internal frame but the entry point's
    wrapper, which is marked `__tracebackhide__` (IPython and pytest skip it; pycoop's
    sys.excepthook drops it from uncaught errors)."""
    out, tb = [], e.__traceback__
    while tb is not None:
        f = tb.tb_frame
        if is_internal(f.f_code.co_filename) and not f.f_locals.get("__tracebackhide__"):
            out.append(f"{f.f_code.co_filename}:{tb.tb_lineno} in {f.f_code.co_name}")
        tb = tb.tb_next
    return out


def _raises(exc, fn):
    with pytest.raises(exc) as info:
        fn()
    e = info.value
    assert _internal_frames(e) == []
    assert e.__cause__ is None and e.__suppress_context__
    return e


def test_decorating():
    def bad_size():
        @pc.kernel(workgroup_size=0)
        def k(x: pc.Buffer[f32]):
            pass

    def bad_annotation():
        @pc.kernel
        def k(x: int):
            pass
    _raises(pc.CompileError, bad_size)
    _raises(pc.CompileError, bad_annotation)


@pc.kernel(workgroup_size=64)
def mixed(x: pc.Buffer[f32], n: u32):
    x[0] = x[1] + n                            # MIXED


@pc.kernel(workgroup_size=64)
def oob(x: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    x[i + 1] = 1.0                             # OOB


@pc.kernel(workgroup_size=64)
def prints(x: pc.Buffer[f32], n: u32):
    print("n is", n)                           # PRINT
    x[0] = 1.0


def test_print_of_a_runtime_value_shows_the_kernel_frame_only():
    e = _raises(pc.CompileError, prints.compile)
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert (tb.tb_frame.f_code.co_filename, tb.tb_lineno) == (__file__, e.loc.line)
    assert "# PRINT" in str(e)


def test_compile_keeps_the_kernel_frame_only():
    e = _raises(pc.CompileError, mixed.compile)
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    # the user's kernel line is the innermost frame, as in the message
    assert frames[-1] == (__file__, e.loc.line)
    assert "x[0] = x[1] + n" in str(e)


def test_launch_on_the_emulator():
    e = _raises(pc.EmulatorError, lambda: oob[1](np.zeros(64, np.float32), backend="emulator"))
    assert "out of bounds" in e.message


def test_launch_argument_errors():
    _raises(pc.ArgumentError, lambda: oob[1](np.zeros(64, np.float64), backend="emulator"))
    _raises(pc.ArgumentError, lambda: oob[0])
    _raises(pc.ArgumentError, lambda: oob.compile(TILE=4))
    e = _raises(ValueError, lambda: oob[1](np.zeros(64, np.float32), backend="cuda"))
    assert isinstance(e, pc.ArgumentError) and "torch CUDA tensors are taken" in str(e)
    _raises(pc.ArgumentError, lambda: pc.zeros(4, backend="metal"))


Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=32)
def fill(C: pc.Buffer[f32]):
    pc.store(C, 0, Acc.fill(1.0), 16)


def test_launch_on_vulkan():
    C = np.zeros(256, np.float32)
    try:
        fill[1](C, backend="vulkan")
    except pc.BackendUnavailable as e:           # no Vulkan, or no cooperative matrices
        assert _internal_frames(e) == []
    else:
        pytest.skip("this Vulkan device runs cooperative matrices: no error to look at")


def test_compiled_kernel_artifacts(monkeypatch):
    import pycoop.frontend.kernel

    def failing_lowering(module, **kw):
        raise pc.CompileError("lowering refused", None, rule="a rule", hint="a hint")
    ok = oob.compile()
    monkeypatch.setattr(pycoop.frontend.kernel, "lower_cached", failing_lowering)
    for attr in ("spv", "spvasm", "abi", "requirements"):
        ok._lowered = None
        ok.__dict__.pop("spvasm", None)
        _raises(pc.CompileError, lambda: getattr(ok, attr))
    _raises(pc.CompileError, ok.metadata)


def test_autotune():
    def run(config, repeat):
        return oob[1](np.zeros(64, config), backend="emulator", repeat=repeat)
    e = _raises(pc.PycoopError, lambda: pc.autotune([np.float64, np.float32], run))
    assert "no configuration ran" in str(e) and "must have dtype float32" in str(e)
    e = _raises(pc.PycoopError, lambda: pc.autotune(["x"], lambda c, r: oob.compile(bad=c)))
    assert "no configuration ran" in str(e)


SCRIPT = """
import numpy as np, pycoop as pc
from pycoop import f32

@pc.kernel(workgroup_size=64)
def oob(x: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    x[i + 1] = 1.0

oob[1](np.zeros(64, np.float32), backend="emulator")
"""


@pytest.mark.parametrize("knob", ["", "1"])
def test_uncaught_error_printed_by_python(tmp_path, knob):
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYCOOP_TRACEBACK": knob,
           "PYCOOP_CACHE_DIR": "off"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 1
    files = [line.split('"')[1] for line in r.stderr.splitlines() if line.startswith('  File "')]
    internal = [f for f in files if f.startswith(PACKAGE)]
    assert files[0] == str(script)
    if knob:
        assert internal, r.stderr                  # PYCOOP_TRACEBACK=1: everything
    else:
        assert internal == [], r.stderr
        assert files == [str(script)]
        assert f"{script}:8:5: undefined behaviour" in r.stderr and "x[i + 1] = 1.0" in r.stderr


def test_ipython_display_hides_them():
    pytest.importorskip("IPython")
    code = textwrap.dedent("""
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_cell('''%s''')
    """) % SCRIPT
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYCOOP_CACHE_DIR": "off"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    out = r.stdout + r.stderr
    assert "EmulatorError" in out and out.count("store out of bounds") == 1   # shown once
    assert "Cell In[1], line 9" in out and "In [1], line 7, column 5" in out   # cells, not files
    assert PACKAGE not in out, out


@pc.kernel(workgroup_size=64)
def double(x: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    x[i] = x[i] * 2.0


@pytest.mark.vulkan
def test_error_from_inside_the_vulkan_runtime():
    try:
        from pycoop.runtime.vulkan import get_runtime
        limit = get_runtime().capabilities.max_compute_workgroup_count[0]
    except Exception as e:          # no Vulkan here
        pytest.skip(f"no Vulkan device: {e}")
    x = np.zeros(64, np.float32)
    e = _raises(pc.ArgumentError, lambda: double[limit + 1](x, backend="vulkan"))
    assert f"grid[0] = {limit + 1} exceeds the device limit {limit}" in str(e)
