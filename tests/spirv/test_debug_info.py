"""Debug line info: OpSource/OpString name the kernel's file, and every instruction lowered from
a user op is preceded (in its block) by the OpLine of that op's line and column. Modules with
and without it validate and differ only in debug instructions; the lowering cache keys on the
locations only when they are in the module."""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import pycoop as pc
from pycoop import f32, u32
from pycoop.spirv import grammar, tools

os.environ.setdefault("PYCOOP_CACHE_DIR", "off")


@pc.kernel(workgroup_size=64)
def lines_kernel(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        acc = X[i]
        for _ in range(n):
            acc = acc * 0.5 + 1.0
        Y[i] = acc


def _line(text: str) -> tuple[int, int]:
    """(line, 1-based column) of `text` in lines_kernel's source."""
    src, start = inspect.getsourcelines(lines_kernel.fn)
    for k, ln in enumerate(src):
        if text in ln:
            return start + k, ln.index(text) + 1
    raise AssertionError(text)


DEBUG_LINE = {grammar.opcode(n) for n in ("OpLine", "OpNoLine", "OpString", "OpSource")}


def _opcodes(spv: bytes, keep_debug: bool) -> list[int]:
    words = struct.unpack(f"<{len(spv) // 4}I", spv)
    out, i = [], 5
    while i < len(words):
        op, n = words[i] & 0xFFFF, words[i] >> 16
        if keep_debug or op not in DEBUG_LINE:
            out.append(op)
        i += n
    return out


def test_every_user_instruction_follows_the_opline_of_its_op():
    asm = lines_kernel.compile().spvasm              # .spv passed spirv-val
    file_id = re.search(rf'(%\d+) = OpString "{re.escape(__file__)}"', asm).group(1)
    assert f"OpSource Unknown 0 {file_id}" in asm
    current, seen = None, {}
    for text in asm.split("OpFunctionEnd")[0].split("OpFunction ", 1)[1].splitlines()[1:]:
        words = text.split()
        if words[:1] == ["OpLine"]:
            assert words[1] == file_id
            current = (int(words[2]), int(words[3]))
        elif "OpLabel" in words:
            current = None                     # an OpLine's scope ends with its block
        elif words and current is not None:
            seen.setdefault(words[2] if words[1] == "=" else words[0], set()).add(current)
    assert _line("Y[i] = acc") in seen["OpStore"]
    assert _line("X[i]") in seen["OpLoad"]
    # a binary op's column is where its expression starts (Python's own position of it)
    assert _line("acc * 0.5") in seen["OpFMul"] and _line("acc * 0.5") in seen["OpFAdd"]
    assert _line("i < n") in seen["OpULessThan"]
    assert (_line("if i < n")[0], _line("if i < n")[1]) in seen["OpSelectionMerge"]


def test_debug_info_off_changes_only_debug_instructions():
    on, off = lines_kernel.compile(), lines_kernel.compile(debug_info=False)
    assert "OpLine" not in off.spvasm and "OpString" not in off.spvasm
    assert "OpSource" not in off.spvasm
    assert _opcodes(on.spv, False) == _opcodes(off.spv, True)
    assert on.metadata()["debug_info"] is True and off.metadata()["debug_info"] is False
    x = np.arange(5, dtype=np.float32)
    y = np.zeros(5, np.float32)
    lines_kernel[1](x, y, 5, backend="emulator")     # the launch path is unchanged
    ref = x.copy()
    for _ in range(5):
        ref = ref * np.float32(0.5) + np.float32(1)
    np.testing.assert_allclose(y, ref)


SOURCE = textwrap.dedent('''
    import pycoop as pc
    from pycoop import f32

    @pc.kernel(workgroup_size=64)
    def k(X: pc.Buffer[f32]):
        X[pc.global_invocation_id.x] = 1.0
''')


def _load(path: Path):
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k.compile()


def test_cache_keys_include_locations_only_with_debug_info(tmp_path):
    from pycoop.cache import _key
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _load(tmp_path / "a" / "same.py"), _load(tmp_path / "b" / "same.py")
    assert _key(a.module) != _key(b.module)                 # OpString paths differ
    assert str(tmp_path / "a" / "same.py") in a.spvasm and str(tmp_path / "b") in b.spvasm
    assert _key(a.module, debug_info=False) == _key(b.module, debug_info=False)
    assert a.variant(False, "device_address").spv == b.variant(False, "device_address").spv
    assert _key(a.module, abi="descriptors") != _key(a.module)


def test_cli_flags(tmp_path):
    src = tmp_path / "kern.py"
    src.write_text(SOURCE)
    out = tmp_path / "k.spv"
    env = {**os.environ, "PYTHONPATH": str(Path(pc.__file__).parent.parent)}
    subprocess.run([sys.executable, "-m", "pycoop", "compile", f"{src}:k", "-o", str(out),
                    "--no-debug-info", "--abi", "descriptors"], check=True, env=env,
                   capture_output=True)
    side = json.loads((tmp_path / "k.spv.json").read_text())
    assert side["debug_info"] is False and side["abi"]["abi"] == "descriptors"
    assert side["abi"]["args"][0]["binding"] == 0
    asm = tools.disassemble(out.read_bytes())
    assert "OpLine" not in asm and "OpDecorate %X Binding 0" in asm


def test_jupyter_links_oplines_to_source_lines():
    page = lines_kernel.compile()._repr_html_()
    line, col = _line("Y[i] = acc")
    link = re.search(rf"OpLine %\d+ {line} {col}  <a href='#([\w-]+)'", page)
    assert link and f"id='{link.group(1)}'" in page            # the anchor of that line
    assert f"# {Path(__file__).name}:{line}</a>" in page


def test_opencl_target_modules_carry_lines_too():
    @pc.kernel(workgroup_size=16)
    def prefetch(src: pc.Buffer[pc.u16]):
        pc.intel.block_prefetch(src, width=16, height=8, memory_width=64, memory_height=8,
                                pitch=64, coord=(0, 0))

    line = inspect.getsourcelines(test_opencl_target_modules_carry_lines_too)[1] + 3
    on = prefetch.compile()                                 # validated (opencl2.2)
    assert on.target == "opencl" and re.search(rf"OpLine %\d+ {line} 9", on.spvasm)
    assert "OpLine" not in prefetch.compile(debug_info=False).spvasm
