"""Command line: `pycoop compile | disasm | info | demo`."""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from .errors import PycoopError


def _load_kernel(spec: str):
    """FILE.py:KERNEL (or module:KERNEL) -> the Kernel object."""
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise SystemExit(f"pycoop: expected FILE.py:KERNEL, got {spec!r}")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.exists():
            raise SystemExit(f"pycoop: no such file {target}")
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = mod
        sys.path.insert(0, str(path.parent))
        mod_spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(target)
    from .frontend.kernel import Kernel
    k = getattr(mod, name, None)
    if not isinstance(k, Kernel):
        kernels = [n for n, v in vars(mod).items() if isinstance(v, Kernel)]
        raise SystemExit(f"pycoop: {target} has no kernel {name!r} (kernels: {', '.join(kernels) or 'none'})")
    return k


def _consts(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        key, _, val = p.partition("=")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
    return out


def cmd_compile(a) -> int:
    k = _load_kernel(a.kernel)
    ck = k.compile(subgroup_size=a.subgroup_size, **_consts(a.const))
    out = Path(a.output or f"{k.name}.spv")
    ck.save(out)
    print(f"wrote {out} ({len(ck.spv)} bytes) and {out}.json")
    if a.ir:
        print(ck.ir)
    return 0


def cmd_disasm(a) -> int:
    from .spirv.tools import disassemble
    if a.target.endswith(".spv"):
        print(disassemble(Path(a.target).read_bytes()))
    else:
        k = _load_kernel(a.target)
        print(k.compile(**_consts(a.const)).spvasm)
    return 0


def cmd_info(a) -> int:
    print("pycoop backends:")
    print("  emulator: available (NumPy, vectorised across the dispatch; reports undefined behaviour)")
    try:
        from .runtime.vulkan import VulkanUnavailable, get_runtime, list_devices
        devices = list_devices()
    except Exception as e:        # no loader, no pyvulkan: say why
        print(f"  vulkan:   unavailable ({e})")
        return 0
    print("  vulkan:   " + (f"{len(devices)} device(s)" if devices else "no devices"))
    for d in devices:
        print(f"    [{d.index}] {d.name} ({d.device_type}, Vulkan {d.api_version})"
              + ("" if d.usable else " - not usable"))
    try:
        rt = get_runtime()
    except VulkanUnavailable as e:
        print(f"  selected device: none ({e})")
        return 0
    caps = rt.capabilities
    if a.json:
        print(json.dumps(caps.to_dict(), indent=2, default=str))
    else:
        print("  selected device (PYCOOP_DEVICE chooses):")
        print("    " + caps.describe().replace("\n", "\n    "))
    return 0


def cmd_demo(a) -> int:
    from .demo import main
    return main(a.size, a.backend)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pycoop", description="Cooperative-matrix kernels in Python.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="write FILE.py:KERNEL as a .spv plus a JSON sidecar")
    c.add_argument("kernel", help="FILE.py:KERNEL")
    c.add_argument("-o", "--output", help="output .spv path (default KERNEL.spv)")
    c.add_argument("-D", "--const", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a pycoop.Const parameter (JSON)")
    c.add_argument("--subgroup-size", type=int, default=None)
    c.add_argument("--ir", action="store_true", help="also print the IR")
    c.set_defaults(fn=cmd_compile)
    d = sub.add_parser("disasm", help="disassemble a .spv file or FILE.py:KERNEL")
    d.add_argument("target")
    d.add_argument("-D", "--const", action="append", default=[], metavar="NAME=VALUE")
    d.set_defaults(fn=cmd_disasm)
    i = sub.add_parser("info", help="backends, devices and their cooperative-matrix capabilities")
    i.add_argument("--json", action="store_true")
    i.set_defaults(fn=cmd_info)
    m = sub.add_parser("demo", help="run a GEMM on the best backend and check it against NumPy")
    m.add_argument("--size", type=int, default=512, help="M = N = K (multiple of 64)")
    m.add_argument("--backend", default="auto", choices=["auto", "vulkan", "emulator"])
    m.set_defaults(fn=cmd_demo)
    a = p.parse_args(argv)
    try:
        return a.fn(a)
    except PycoopError as e:
        print(f"pycoop: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
