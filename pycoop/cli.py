"""Command line: `pycoop compile | disasm | stats | info | demo`.

Every failure a user can cause (a missing file, a bad option value, a kernel that breaks a
rule) ends in one `pycoop: ...` message on stderr and a non-zero exit status, never in a
traceback; option values are checked by argparse (`type=`) before any work.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

from . import knobs
from .cache import cache_stats
from .demo import main as demo_main
from .errors import PycoopError, is_internal
from .frontend.kernel import Kernel
from .kernels.gemm import gemm_workgroup_tile
from .runtime.vulkan import get_runtime, list_devices
from .spirv.errors import SpirvError
from .spirv.tools import disassemble
from .version import __version__


class UsageError(Exception):
    """A command-line value that is well formed but does not fit the kernel (exit status 2)."""


# ------------------------------------------------------------------ argparse type= validators
def _define(text: str) -> tuple[str, object]:
    """-D NAME=VALUE -> (NAME, VALUE); VALUE is JSON (42, 1.5, true, "x", [1, 2]) or else a
    bare string. Whether it suits the kernel is checked once the kernel is loaded."""
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (e.g. TM=2), got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def _subgroup_size(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0 or n & (n - 1):
        raise argparse.ArgumentTypeError(f"the subgroup size must be a power of two (8, 16, 32, "
                                         f"64, ...), got {text!r}")
    return n


def _demo_size(text: str) -> int:
    tile = max(gemm_workgroup_tile())
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0 or n % tile:
        raise argparse.ArgumentTypeError(
            f"size must be a positive multiple of {tile} (the GEMM computes {tile}x{tile} tiles "
            f"and has no edge handling), got {text!r}")
    return n


# ------------------------------------------------------------------ kernels and their Consts
def _load_kernel(spec: str):
    """FILE.py:KERNEL (or module:KERNEL) -> the Kernel object."""
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise UsageError(f"expected FILE.py:KERNEL, got {spec!r}")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise UsageError(f"no such file: {target}")
        # registered under its stem, unless that names a module already loaded: a kernel file
        # called pycoop.py (or json.py) must not replace pycoop (or json) for this process
        mod_name = path.stem if path.stem not in sys.modules else f"_pycoop_cli_{path.stem}"
        mod_spec = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_name] = mod
        sys.path.insert(0, str(path.parent))
        try:
            mod_spec.loader.exec_module(mod)
        except (PycoopError, SpirvError):   # a kernel refused at its decorator: reported as such
            raise
        except Exception as e:
            raise _load_error(target, e) from None
    else:
        try:
            mod = importlib.import_module(target)
        except ModuleNotFoundError as e:
            raise UsageError(f"cannot import {target!r}: {e}") from None
        except (PycoopError, SpirvError):
            raise
        except Exception as e:          # a relative name (TypeError), the module's own error
            raise _load_error(target, e) from None
    k = getattr(mod, name, None)
    if not isinstance(k, Kernel):
        kernels = [n for n, v in vars(mod).items() if isinstance(v, Kernel)]
        raise UsageError(f"{target} has no kernel {name!r} (kernels: {', '.join(kernels) or 'none'})")
    return k


_IMPORTLIB = os.path.dirname(importlib.__file__)


def _load_error(target: str, e: Exception) -> UsageError:
    """The error of a kernel file or module that failed to load, as one line naming where."""
    if isinstance(e, SyntaxError):
        return UsageError(f"cannot load {target}: {e.filename}:{e.lineno}: SyntaxError: {e.msg}")
    frames = [f for f in traceback.extract_tb(e.__traceback__)       # not the import machinery
              if not f.filename.startswith(("<frozen", _IMPORTLIB)) and not is_internal(f.filename)]
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return UsageError(f"cannot load {target}: {type(e).__name__}: {e}{where}")


_TYPE_NAMES = {bool: "a boolean (true or false)", int: "an integer", float: "a number",
               str: "a string"}


def _consts(k, defines: list[tuple[str, object]]) -> dict:
    """The -D values checked against the kernel's Const (and Spec: the module's default)
    parameters: the name must be one, and a parameter with a default takes a value of the
    default's type (so `-D TM=banana` is reported here, not deep inside the trace)."""
    params = {p.name: p for p in k.params if not p.is_runtime}
    out = {}
    for name, value in defines:
        p = params.get(name)
        if p is None:
            raise UsageError(f"-D {name}: {k.name} has no Const parameter {name!r} (its Const "
                             f"parameters: {', '.join(params) or 'none'})")
        if name in out:             # two values: neither silently wins
            raise UsageError(f"-D {name}: given twice ({out[name]!r} and {value!r})")
        default = p.default
        want = type(default)
        if want in _TYPE_NAMES:
            ok = (isinstance(value, want) and (want is not int or not isinstance(value, bool))
                  or want is float and isinstance(value, int) and not isinstance(value, bool))
            if not ok:
                raise UsageError(f"-D {name}={json.dumps(value) if not isinstance(value, str) else value}: "
                                 f"{name} expects {_TYPE_NAMES[want]} (its default is {default!r})")
        out[name] = value
    return out


# ------------------------------------------------------------------ commands
def cmd_compile(a) -> int:
    if a.output == "":              # `-o "$OUT"` with OUT unset: not the default name
        raise UsageError("-o: the output path is empty")
    k = _load_kernel(a.kernel)
    ck = k.compile(subgroup_size=a.subgroup_size, debug_info=a.debug_info, abi=a.abi,
                   **_consts(k, a.const))
    out = Path(a.output or f"{k.name}.spv")
    ck.save(out)
    print(f"wrote {out} ({len(ck.spv)} bytes) and {out}.json")
    if a.ir:
        print(ck.ir)
    return 0


def cmd_disasm(a) -> int:
    if a.target.endswith(".spv"):
        print(disassemble(Path(a.target).read_bytes()))
    else:
        k = _load_kernel(a.target)
        print(k.compile(**_consts(k, a.const)).spvasm)
    return 0


def cmd_stats(a) -> int:
    k = _load_kernel(a.kernel)
    ck = k.compile(subgroup_size=a.subgroup_size, **_consts(k, a.const))
    s = ck.gpu_statistics(checked=a.checked)
    if a.json:
        print(json.dumps({"kernel": s.kernel, "device": s.device, "executable": s.executable,
                          "subgroup_size": s.subgroup_size, "statistics": s.values,
                          "descriptions": s.descriptions}, indent=2))
    else:
        print(s)
    return 0


def info() -> dict:
    """What `pycoop info` reports, as JSON-ready data: the backends, every Vulkan device, the
    selected device's capabilities, and why Vulkan is unavailable when it is."""
    vulkan: dict = {"available": False, "reason": None, "devices": [], "selected": None}
    try:
        vulkan["devices"] = [{"index": d.index, "name": d.name, "device_type": d.device_type,
                              "vendor": d.vendor, "api_version": d.api_version, "usable": d.usable}
                             for d in list_devices()]
        vulkan["selected"] = get_runtime().capabilities.to_dict()
        vulkan["available"] = True
    except Exception as e:         # no loader, no driver, no Vulkan 1.3 device: say why
        vulkan["reason"] = str(e) or type(e).__name__
    return {"pycoop_version": __version__,
            "default_backend": knobs.backend(),
            "backends": {"emulator": {"available": True, "description": "NumPy, vectorised across "
                                      "the dispatch; reports undefined behaviour"},
                         "vulkan": vulkan},
            "cache": cache_stats(),
            "subgroup_size": knobs.subgroup_size()}


def cmd_info(a) -> int:
    data = info()
    if a.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    vk = data["backends"]["vulkan"]
    print(f"pycoop {data['pycoop_version']} backends (default: {data['default_backend']}):")
    print(f"  emulator: available ({data['backends']['emulator']['description']})")
    if not vk["devices"] and vk["reason"]:
        print(f"  vulkan:   unavailable ({vk['reason']})")
    else:
        print(f"  vulkan:   {len(vk['devices'])} device(s)" if vk["devices"] else "  vulkan:   no devices")
        for d in vk["devices"]:
            print(f"    [{d['index']}] {d['name']} ({d['device_type']}, Vulkan {d['api_version']})"
                  + ("" if d["usable"] else " - not usable"))
        if vk["available"]:
            print("  selected device (PYCOOP_DEVICE chooses):")
            print("    " + get_runtime().capabilities.describe().replace("\n", "\n    "))
        else:
            print(f"  selected device: none ({vk['reason']})")
    c = data["cache"]
    print(f"  SPIR-V cache: {c['dir'] or 'off'}"
          + (f" ({c['entries']} entries, {c['bytes'] / 2**20:.1f} MiB of {c['max_bytes'] / 2**20:.0f} MiB)"
             if c["dir"] else ""))
    return 0


def cmd_demo(a) -> int:
    return demo_main(a.size, a.backend)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pycoop", description="Cooperative-matrix kernels in Python.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    define = dict(action="append", type=_define, default=[], metavar="NAME=VALUE",
                  help="value of a pycoop.Const parameter of the kernel (or the default of a "
                       "pycoop.Spec one): JSON (2, 1.5, true, \"s\") or a bare string; repeatable")
    c = sub.add_parser("compile", help="write FILE.py:KERNEL as a .spv plus a JSON sidecar",
                       description="Trace, specialise and validate a kernel; write its SPIR-V "
                                   "and the JSON description of its ABI.")
    c.add_argument("kernel", metavar="FILE.py:KERNEL",
                   help="the kernel: a file and a name in it (or module:KERNEL)")
    c.add_argument("-o", "--output", metavar="OUT.spv", help="output .spv path (default KERNEL.spv)")
    c.add_argument("-D", "--const", **define)
    c.add_argument("--subgroup-size", type=_subgroup_size, default=None, metavar="N",
                   help="subgroup size to trace with (a power of two; default: the kernel's, "
                        "else PYCOOP_SUBGROUP_SIZE, else 32)")
    c.add_argument("--ir", action="store_true", help="also print the IR")
    c.add_argument("--abi", choices=["device_address", "descriptors"], default="device_address",
                   help="how buffers are bound: device addresses in push constants (default) or "
                        "StorageBuffer descriptors of set 0 (docs/abi.md)")
    c.add_argument("--no-debug-info", dest="debug_info", action="store_false",
                   help="leave out OpSource/OpString/OpLine (the source file, line and column "
                        "of each instruction)")
    c.set_defaults(fn=cmd_compile)
    d = sub.add_parser("disasm", help="disassemble a .spv file or FILE.py:KERNEL",
                       description="Print the SPIR-V assembly of a .spv file or of a kernel.")
    d.add_argument("target", metavar="FILE.spv|FILE.py:KERNEL", help="a SPIR-V binary or a kernel")
    d.add_argument("-D", "--const", **define)
    d.set_defaults(fn=cmd_disasm)
    t = sub.add_parser("stats", help="what the Vulkan driver reports of FILE.py:KERNEL "
                                     "(registers, code size)",
                       description="Compile a kernel for the Vulkan device and print the "
                                   "driver's statistics of its pipeline "
                                   "(VK_KHR_pipeline_executable_properties), such as the "
                                   "registers each invocation takes. No GPU work.")
    t.add_argument("kernel", metavar="FILE.py:KERNEL",
                   help="the kernel: a file and a name in it (or module:KERNEL)")
    t.add_argument("-D", "--const", **define)
    t.add_argument("--subgroup-size", type=_subgroup_size, default=None, metavar="N",
                   help="subgroup size to trace with (as for compile)")
    t.add_argument("--checked", action=argparse.BooleanOptionalAction, default=None,
                   help="the bounds-checked pipeline (--checked) or the production one "
                        "(--no-checked); default: what a launch uses (PYCOOP_CHECKED)")
    t.add_argument("--json", action="store_true", help="print the statistics as JSON")
    t.set_defaults(fn=cmd_stats)
    i = sub.add_parser("info", help="backends, devices and their cooperative-matrix capabilities",
                       description="Report the backends, every Vulkan device, the selected "
                                   "device's cooperative-matrix support and the cache.")
    i.add_argument("--json", action="store_true",
                   help="print the report as JSON (only JSON on stdout)")
    i.set_defaults(fn=cmd_info)
    m = sub.add_parser("demo", help="run a GEMM on the best backend and check it against NumPy",
                       description="Run an f16 GEMM with f32 accumulation on the best backend "
                                   "and compare it with NumPy.")
    m.add_argument("--size", type=_demo_size, default=512, metavar="N",
                   help="M = N = K, a positive multiple of 64 (default 512)")
    m.add_argument("--backend", default="auto", choices=["auto", "vulkan", "emulator"],
                   help="where to run: auto (Vulkan if capable, else the emulator), vulkan or "
                        "emulator (default auto)")
    m.set_defaults(fn=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    try:
        with warnings.catch_warnings():
            # a warning (e.g. the emulator fallback) is a line of the command's output, not a
            # Python warning pointing into pycoop's own files
            warnings.showwarning = lambda message, *_: print(f"pycoop {a.cmd}: {message}",
                                                             file=sys.stderr)
            rc = a.fn(a)
        sys.stdout.flush()      # a closed pipe shows here, inside the handler below
        return rc
    except BrokenPipeError:
        # `pycoop info | head`: the reader is gone. Point stdout at devnull so the interpreter's
        # final flush does not fail again, and exit as a process killed by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except (UsageError, knobs.SettingError) as e:     # e.g. PYCOOP_CACHE_MAX_MB=lots
        print(f"pycoop {a.cmd}: {e}", file=sys.stderr)
        return 2
    except OSError as e:        # a missing or unreadable file
        where = f": {e.filename}" if e.filename else ""
        print(f"pycoop {a.cmd}: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except (PycoopError, SpirvError) as e:     # a kernel's rule, an invalid .spv
        print(f"pycoop {a.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
