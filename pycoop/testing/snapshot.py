"""SPIR-V snapshots: prove that a change to the compiler leaves every emitted module as it was.

As a pytest plugin it records, test by test, for every kernel specialisation the test
compiles, the SHA-256 of its SPIR-V in four variants (as compiled, bounds-checked, descriptor
ABI, without debug info), plus every other module the test hands to spirv-val, and writes
them to a JSON file:

    python -m pytest -q -p pycoop.testing.snapshot --spirv-snapshot=before.json
    ... change the compiler ...
    python -m pytest -q -p pycoop.testing.snapshot --spirv-snapshot=after.json
    python -m pycoop.testing.snapshot before.json after.json

The comparison prints every kernel whose binary changed and exits non-zero if any did.
Debug instructions (OpSource, OpString, OpLine, OpNoLine) are left out of the hash: they hold
file paths, so the same tree checked out elsewhere has the same snapshot. Examples run
in-process under tests/test_examples.py, so their kernels are recorded too.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

from ..spirv import grammar
from pycoop.spirv import tools
import pycoop

_DEBUG = ("OpSourceContinued", "OpSource", "OpSourceExtension", "OpString", "OpLine", "OpNoLine",
          "OpModuleProcessed")
_VARIANTS = {"default": {}, "checked": {"checked": True}, "descriptors": {"abi": "descriptors"},
             "no_debug_info": {"debug_info": False}}


def module_hash(spv: bytes) -> str:
    """SHA-256 of a SPIR-V binary without its debug-location instructions."""
    debug = {grammar.opcode(name) for name in _DEBUG}
    words = memoryview(spv).cast("I")
    kept = [bytes(words[:5])]
    i = 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:                       # malformed: hash the rest as it is
            kept.append(bytes(words[i:]))
            break
        if opcode not in debug:
            kept.append(bytes(words[i:i + count]))
        i += count
    return hashlib.sha256(b"".join(kept)).hexdigest()


class _Recorder:
    def __init__(self, path: str):
        self.path = path
        self.test = "collection"                      # the test running now (its node id)
        # (test, kernel, specialisation) -> its distinct traces (a factory makes kernels of
        # one name and definition that differ in closure values)
        self.compiled: dict[str, list] = {}
        self.validated: dict[str, set] = {}          # test -> hashes of modules spirv-val saw

    def install(self) -> None:

        recorder, init, run = self, pycoop.CompiledKernel.__init__, tools._run

        def __init__(ck, kernel, module, values, *a, **kw):
            init(ck, kernel, module, values, *a, **kw)
            code = kernel.fn.__code__
            key = (f"{recorder.test} {code.co_filename.rsplit('/', 1)[-1]}:{kernel.name}:"
                   f"sgs={module.subgroup_size}:{sorted((k, repr(v)) for k, v in values.items())}")
            if all(c.module is not module for c in recorder.compiled.setdefault(key, [])):
                recorder.compiled[key].append(ck)

        def _run(name, args, data):
            if name == "spirv-val":
                recorder.validated.setdefault(recorder.test, set()).add(module_hash(data))
            return run(name, args, data)

        pycoop.CompiledKernel.__init__ = __init__
        tools._run = _run

    def write(self) -> None:
        kernels = {}
        for key, cks in sorted(self.compiled.items()):
            for variant, options in _VARIANTS.items():
                hashes = []
                for ck in cks:
                    try:
                        spv = ck.variant(options.get("debug_info", True),
                                         options.get("abi", "device_address"),
                                         options.get("checked", False)).spv
                        hashes.append(module_hash(spv))
                    except Exception as e:          # noqa: BLE001  (the error is the result)
                        hashes.append(f"error {type(e).__name__}")
                kernels[f"{key}:{variant}"] = sorted(hashes)
        validated = {t: sorted(h) for t, h in sorted(self.validated.items())}
        with open(self.path, "w") as f:
            json.dump({"kernels": kernels, "validated": validated}, f, indent=0)


def pytest_addoption(parser):
    parser.addoption("--spirv-snapshot", default=None,
                     help="write the SPIR-V snapshot of every compiled kernel to this JSON file")


def pytest_configure(config):
    path = config.getoption("--spirv-snapshot")
    if path:
        config._spirv_recorder = _Recorder(path)
        config._spirv_recorder.install()


def pytest_runtest_setup(item):
    recorder = getattr(item.config, "_spirv_recorder", None)
    if recorder is not None:
        recorder.test = item.nodeid


def pytest_sessionfinish(session):
    recorder = getattr(session.config, "_spirv_recorder", None)
    if recorder is not None:
        recorder.write()


def compare(before: dict, after: dict) -> list[str]:
    """Lines describing every difference between two snapshots (empty if identical)."""
    out = []
    b, a = before["kernels"], after["kernels"]
    for key in sorted(b.keys() | a.keys()):
        if b.get(key) != a.get(key):
            out.append(f"{key}: {b.get(key, 'absent')} -> {a.get(key, 'absent')}")
    b, a = before["validated"], after["validated"]
    for test in sorted(b.keys() | a.keys()):
        gone, new = set(b.get(test, ())) - set(a.get(test, ())), set(a.get(test, ())) - set(b.get(test, ()))
        if gone or new:
            out.append(f"{test}: of the modules it validated, {len(gone)} no longer emitted, "
                       f"{len(new)} new")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pycoop.testing.snapshot",
                                 description="compare two SPIR-V snapshots")
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args(argv)
    with open(args.before) as f, open(args.after) as g:
        before, after = json.load(f), json.load(g)
    diff = compare(before, after)
    for line in diff:
        print(line)
    print(f"{len(before['kernels'])} kernel variants in {len(before['validated'])} tests "
          f"before; {len(after['kernels'])} / {len(after['validated'])} after: "
          + ("identical" if not diff else f"{len(diff)} differences"))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
