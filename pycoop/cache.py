"""Lowering with validation, cached in memory and on disk.

The disk key is a SHA-256 over pycoop's version, the canonical IR text, the target, the ABI
and the validator. The IR text carries source locations only when the module gets debug line
info (OpLine holds file paths and lines, so moving a kernel changes its binary); without it,
the same kernel anywhere shares one entry; entries are written atomically, and their stored key
and a digest of their contents are checked on every hit, so a stale, foreign or damaged file
is never used (it is rebuilt). A hit refreshes the
entry's modification time; when a store takes the directory past PYCOOP_CACHE_MAX_MB, the
least recently used entries are deleted (a bounded cache, not one that only grows).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path

from . import knobs
from .codegen import extensions
from .codegen.lower import Lowered
from .codegen.targets import Target, target_of
from .ir.core import Module
from .ir.printer import print_module
from .spirv.errors import SpirvValidationError
from .spirv.tools import validate
from .version import __version__

_memory: dict[str, Lowered] = {}
_ENTRY = re.compile(r"[0-9a-f]{64}\.json")      # an entry's file name: its key
_log = logging.getLogger(__name__)        # disk hits, stores and evictions, at DEBUG level


@functools.cache
def _compiler_hash() -> str:
    """Hash of pycoop's own source: a changed compiler never reuses old binaries."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for f in sorted(root.rglob("*.py")) + [root / "spirv" / "grammar.json"]:
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _key(module: Module, target: Target | None = None, omit: frozenset[str] = frozenset(),
         debug_info: bool = True, abi: str = "device_address", checked: bool = False) -> str:
    target = target or target_of(module)
    text = print_module(module, locs=False)
    # OpLine operands, and a checked module's fault table, name the full path, line and column
    # of every op: the key includes them
    if debug_info or checked:
        text += "".join(f"\n{op.loc.file}:{op.loc.line}:{op.loc.col}" if op.loc else "\n-"
                        for op in module.walk())
    variant = "".join(f"omit={e}\n" for e in sorted(omit)) + f"abi={abi}\n" \
        + ("debug_info\n" if debug_info else "") + ("checked\n" if checked else "")
    return hashlib.sha256(f"pycoop {__version__} {_compiler_hash()}\n{target.validator_env}\n"
                          f"{variant}{text}".encode()).hexdigest()


def lower_cached(module: Module, *, omit: frozenset[str] = frozenset(), debug_info: bool = True,
                 abi: str = "device_address", checked: bool = False) -> Lowered:
    """The module lowered for its target and validated. `omit`: optional extensions left out
    (codegen.extensions). A module using an extension with its own check (its record's
    `check`) is checked by it, and by spirv-val only if spirv-val knows the extension.
    `checked=True`: the bounds-checked module of checked launches (codegen/checked.py)."""
    target = target_of(module)
    checked = checked and target.checked      # OpenCL-environment kernels are not guarded
    key = _key(module, target, omit, debug_info, abi, checked)
    hit = _memory.get(key)
    if hit is not None:
        return hit
    d = knobs.cache_dir()
    path = d / f"{key}.json" if d else None
    low = _load(path, key) if path is not None else None
    if low is not None:
        _memory[key] = low
        return low
    low = target.lower(module, omit, debug_info=debug_info, abi=abi, checked=checked)
    own = [e for e in extensions.used(low.extensions) if e.check is not None]
    for ext in own:
        problems = ext.check(low.spv)
        if problems:
            raise SpirvValidationError(f"pycoop's {ext.name} check: " + "; ".join(problems))
    unknown = [e.name for e in own if not e.validator_knows()]
    if unknown:
        low.notes.append(f"the module was checked by pycoop's own verifier of {', '.join(unknown)}: "
                         "the installed spirv-val predates it")
    else:
        validate(low.spv, target.validator_env)
    _memory[key] = low
    if path is not None:
        _store(path, key, low)
    return low


def _digest(data: dict) -> str:
    """SHA-256 of an entry's contents as JSON reads them back (all but the digest itself)."""
    return hashlib.sha256(json.dumps({k: v for k, v in data.items() if k != "digest"},
                                     sort_keys=True).encode()).hexdigest()


def _load(path: Path, key: str) -> Lowered | None:
    """The entry at `path`, or None where there is none or it is not exactly what pycoop wrote
    for `key` (the caller rebuilds and overwrites it). The digest catches a truncated, edited
    or damaged file whose key still matches: its SPIR-V must never reach a driver."""
    try:
        data = json.loads(path.read_text())
        if not (isinstance(data, dict) and data.get("key") == key
                and data.get("digest") == _digest(data)):
            return None
        low = Lowered(bytes.fromhex(data["spv"]), data["abi"], data["capabilities"],
                      data["extensions"], _requirements(data["requirements"]),
                      data.get("notes", []))
    except (OSError, ValueError, KeyError, TypeError):
        return None       # missing or unreadable
    _touch(path)
    _log.debug("disk cache hit %s", path)
    return low


def _requirements(r: dict) -> dict:
    r = dict(r)
    for key in ("coopmat_shapes", "coopmat_types"):
        r[key] = [tuple(s) for s in r.get(key, [])]
    return r


def _store(path, key: str, low: Lowered) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"key": key, "spv": low.spv.hex(), "abi": low.abi, "capabilities": low.capabilities,
                "extensions": low.extensions, "requirements": low.requirements, "notes": low.notes}
        data["digest"] = _digest(json.loads(json.dumps(data)))
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            os.unlink(tmp)    # a half-written or unplaceable entry: never left behind
            raise
        _log.debug("disk cache store %s", path)
        _evict(path.parent, knobs.cache_max_bytes(), keep=path)
    except OSError:
        pass              # a read-only cache directory only costs recompilation


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass              # read-only: the entry just looks older than it is


def _entries(d: Path) -> list[tuple[float, int, Path]]:
    """(last use, size, path) of every SPIR-V entry in `d`: only files named as pycoop names
    them (the key, 64 hex digits), since the directory may hold other files, such as a `.spv`
    and its `.spv.json` sidecar, that eviction must never delete (autotune choices live in a
    subdirectory and are never evicted)."""
    out = []
    for p in d.glob("*.json"):
        if not _ENTRY.fullmatch(p.name):
            continue
        try:
            st = p.stat()
        except OSError:       # deleted by another process meanwhile
            continue
        out.append((st.st_mtime, st.st_size, p))
    return out


def _evict(d: Path, limit: int, keep: Path | None = None) -> None:
    """Delete the least recently used entries until the directory holds at most `limit` bytes
    (never `keep`, the entry just written)."""
    entries = sorted(_entries(d))
    total = sum(size for _, size, _ in entries)
    for _, size, p in entries:
        if total <= limit:
            break
        if p == keep:
            continue
        try:
            p.unlink()
        except OSError:
            continue
        _log.debug("disk cache evicted %s (%d bytes; limit %d)", p, size, limit)
        total -= size


def cache_stats() -> dict:
    """The disk cache's directory (None when off), its entries, bytes and size limit."""
    d = knobs.cache_dir()
    try:
        entries = _entries(d) if d is not None and d.is_dir() else []
    except OSError:       # a path the system refuses (too long): an empty cache
        entries = []
    return {"dir": str(d) if d is not None else None, "entries": len(entries),
            "bytes": sum(size for _, size, _ in entries), "max_bytes": knobs.cache_max_bytes()}
