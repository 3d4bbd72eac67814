"""Running one generated program on the emulator and on Vulkan, and classifying the outcome.

Every program is written to a file and imported, so pycoop traces it from real source and
its errors point at real lines, exactly as for a user's kernel. Both backends get copies of the
same seeded inputs; the outputs are compared bit for bit under the float policy of
`compare_arrays`.
"""
from __future__ import annotations

import atexit
import importlib.util
import itertools
import linecache
import os
import re
import shutil
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import pycoop as pc
from pycoop.spirv.errors import SpirvValidationError

from .allowances import allowances_for, device_model, known_pipeline_defect, vulkan_device
from .program import Program
from pycoop import cache

# Outcome classes, in report order. Every class but "ok" is a failure: generated programs are
# valid and free of undefined behaviour, so an emulator report of undefined behaviour is as
# much a defect as a crash.
CLASSES = ("ok", "crash", "spirv-val", "compile-error", "emulator-ub", "vulkan-error", "mismatch")


@dataclass
class Outcome:
    cls: str                 # one of CLASSES
    stage: str = ""          # load, trace, lower, emulator, vulkan, compare
    detail: str = ""         # the exception or the first differing element
    signature: str = ""      # what two failures of one cause share (for dedup and shrinking)
    ran_on: str = ""         # "vulkan" or "emulator" (no device could run it)
    allowed: tuple = ()      # names of the device allowances that explain a difference

    @property
    def failed(self) -> bool:
        return self.cls != "ok"


_dir: str | None = None
_count = itertools.count()


def _workdir() -> str:
    global _dir
    if _dir is None:
        _dir = tempfile.mkdtemp(prefix="pycoop-fuzz-")
        atexit.register(shutil.rmtree, _dir, True)
    return _dir


def load(source: str, path: str | os.PathLike | None = None):
    """Import `source` as a fresh module (written to `path`, else to a new temporary file;
    file names are never reused, so no stale source is traced)."""
    if path is None:
        path = os.path.join(_workdir(), f"case_{next(_count)}.py")
    Path(path).write_text(source)
    name = f"pycoop_fuzz_case_{next(_count)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- inputs

def random_values(dtype: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` values of `dtype`: extremes, small numbers and values spread over the range, so that
    wrap-around, rounding and overflow are all exercised. Floats are finite."""
    dtype = np.dtype(dtype)
    kind = rng.choice(4, size=n, p=[0.2, 0.4, 0.3, 0.1])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
        extremes = np.array([lo, hi, lo + 1, hi - 1, 0, 1, min(hi, 2), max(lo, -1) if lo else 3],
                            dtype=dtype)
        small = rng.integers(max(lo, -10), min(hi, 10) + 1, n).astype(dtype)
        wide = rng.integers(lo, hi, n, endpoint=True, dtype=dtype)
        pick = rng.choice(extremes, n)
        return np.select([kind == 0, kind == 1, kind == 2], [pick, small, wide], wide).astype(dtype)
    info = np.finfo(dtype)
    fmax = float(info.max)
    halves = rng.integers(-16, 17, n) / 2.0
    spread = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, np.log10(fmax) / 2, n)
    special = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, fmax / 2, float(info.smallest_normal)]), n)
    uniform = rng.uniform(-1000.0, 1000.0, n)
    out = np.select([kind == 0, kind == 1, kind == 2], [special, halves, spread], uniform)
    out = np.clip(out, -fmax, fmax)
    return out.astype(dtype)


def make_args(module) -> list:
    """The launch arguments of a loaded program: buffers of LENGTH[name] seeded values (small
    integers for those named in RANGES), scalars from SCALARS."""
    rng = np.random.default_rng(module.SEED)
    ranges = getattr(module, "RANGES", {})
    args = []
    for p in module.kern.params:
        if p.name in ranges:
            dtype, r = np.dtype(p.type.elem.dtype), ranges[p.name]
            lo = 0 if dtype.kind == "u" else -r
            args.append(rng.integers(lo, r, module.LENGTH[p.name], endpoint=True).astype(dtype))
        elif p.name in module.LENGTH:
            args.append(random_values(p.type.elem.dtype, module.LENGTH[p.name], rng))
        else:
            args.append(module.SCALARS[p.name])
    return args


# ---------------------------------------------------------------------------- comparison

def compare_arrays(a: np.ndarray, b: np.ndarray, signed_zero: bool) -> int | None:
    """Index of the first element where `a` and `b` differ, or None. Integers compare bit for
    bit. Floats compare bit for bit except that every NaN equals every NaN (payload and sign
    of a NaN are not specified by SPIR-V) and, unless `signed_zero`, +0 equals -0 (a driver
    may drop the sign of zero where the module does not declare SignedZeroInfNanPreserve)."""
    if a.dtype.kind != "f":
        diff = a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)
        bad = np.flatnonzero(diff.any(axis=1))
        return int(bad[0]) if bad.size else None
    uint = np.dtype(f"u{a.dtype.itemsize}")
    ua, ub = a.view(uint).copy(), b.view(uint).copy()
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    ua[nan_a], ub[nan_b] = 0, 0
    if not signed_zero:
        ua[a == 0], ub[b == 0] = 0, 0
    bad = np.flatnonzero((ua != ub) | (nan_a != nan_b))
    return int(bad[0]) if bad.size else None


# ---------------------------------------------------------------------------- classification

def _pycoop_frame(exc: BaseException) -> str:
    """`file:function` of the innermost traceback frame inside pycoop (or the last frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    root = os.path.dirname(os.path.abspath(pc.__file__))
    inside = [f for f in frames if os.path.abspath(f.filename).startswith(root)]
    f = (inside or frames or [None])[-1]
    if f is None:
        return "?"
    return f"{os.path.relpath(f.filename, os.path.dirname(root))}:{f.name}"


def _shape(text: str) -> str:
    """A message with its numbers and SPIR-V ids blanked, for grouping failures by cause."""
    text = re.sub(r"%\w+", "%", text.strip().splitlines()[0] if text.strip() else "")
    return re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "N", text)[:160]


def classify_exception(exc: BaseException, stage: str) -> Outcome:
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SpirvValidationError):
        return Outcome("spirv-val", stage, detail, f"spirv-val: {_shape(exc.message)}")
    if isinstance(exc, pc.CompileError):
        key = exc.rule or exc.message
        return Outcome("compile-error", stage, detail, f"compile-error: {_shape(key)}")
    if isinstance(exc, pc.EmulatorError):
        key = exc.rule or exc.message
        return Outcome("emulator-ub", stage, detail, f"emulator-ub: {_shape(key)}")
    if stage == "vulkan":
        return Outcome("vulkan-error", stage, detail,
                       f"vulkan-error: {type(exc).__name__}: {_shape(str(exc))}")
    where = _pycoop_frame(exc)
    return Outcome("crash", stage, detail + "\n  at " + where,
                   f"crash: {stage}: {type(exc).__name__} at {where}")


def run_module(module, backend: str = "vulkan", signed_zero: bool = False,
               on_stage: Callable[[str], None] = lambda stage: None) -> Outcome:
    """Trace, lower (spirv-val), emulate and, if `backend` is "vulkan" and a device can run
    the kernel, launch on Vulkan; compare. `on_stage(name)` is called before the Vulkan
    launch (see `Worker`)."""
    stage = "trace"
    try:
        ck = module.kern.compile()
        stage = "lower"
        ck.spv
        stage = "emulator"
        emu_args = make_args(module)
        ck.launch(module.GRID, emu_args, backend="emulator")
    except Exception as e:                  # noqa: BLE001  (every exception is a finding)
        return classify_exception(e, stage)
    if backend != "vulkan":
        return Outcome("ok", ran_on="emulator")
    vk_args = make_args(module)
    on_stage("vulkan")
    try:
        ck.launch(module.GRID, vk_args, backend="vulkan")
    except pc.BackendUnavailable:
        return Outcome("ok", ran_on="emulator")
    except Exception as e:                  # noqa: BLE001
        defect = known_pipeline_defect(e, ck.module, vulkan_device())
        if defect is not None:              # a documented driver failure: ran on the emulator
            return Outcome("ok", ran_on="emulator", allowed=(defect,))
        return classify_exception(e, "vulkan")
    mismatch = _first_difference(module, emu_args, vk_args, signed_zero)
    if mismatch is None:
        return Outcome("ok", ran_on="vulkan")
    allowed = _explained(module, ck, vk_args, signed_zero)
    if allowed:
        return Outcome("ok", ran_on="vulkan", allowed=allowed)
    return mismatch


def _first_difference(module, expected: list, got: list, signed_zero: bool) -> Outcome | None:
    for p, a, b in zip(module.kern.params, expected, got):
        if not isinstance(a, np.ndarray):
            continue
        i = compare_arrays(a, b, signed_zero)
        if i is not None:
            return Outcome("mismatch", "compare",
                           f"{p.name}[{i}]: emulator {a[i]!r}, vulkan {b[i]!r}",
                           f"mismatch: {a.dtype} output", "vulkan")
    return None


def _explained(module, ck, vk_args: list, signed_zero: bool) -> tuple[str, ...]:
    """The names of this device's allowances (see `allowances`) under which the emulator
    computes exactly the device's outputs, none of them superfluous; () if they do not (a
    new difference, or one they explain only in part)."""
    candidates = allowances_for(vulkan_device())
    if not candidates:
        return ()

    def explains(chosen) -> bool:
        args = make_args(module)
        try:
            with device_model(chosen, ck.module):
                ck.launch(module.GRID, args, backend="emulator")
        except Exception:               # noqa: BLE001  (then the model does not explain it)
            return False
        return _first_difference(module, args, vk_args, signed_zero) is None

    if not explains(candidates):
        return ()
    needed = list(candidates)
    for a in candidates:                # drop the allowances the difference does not need
        if len(needed) > 1 and explains(tuple(x for x in needed if x is not a)):
            needed.remove(a)
    return tuple(a.name for a in needed)


def run_program(program: Program | str, backend: str = "vulkan", signed_zero: bool = False,
                path: str | None = None,
                on_stage: Callable[[str], None] = lambda stage: None) -> Outcome:
    """Outcome of one program (a Program or its source), in this process."""
    source = program if isinstance(program, str) else program.render()
    try:
        module = load(source, path)
    except Exception as e:                  # noqa: BLE001
        return classify_exception(e, "load")
    return run_module(module, backend, signed_zero, on_stage)


# ---------------------------------------------------------------------------- worker process

def _serve(read_fd: int, write_fd: int) -> None:
    """Worker loop: run the programs received on `read_fd` until the pipe closes, answering on
    `write_fd`. The parent sends the worker's stderr to a file, so that the last words of a
    driver that aborts the process can be reported; it holds one program's messages only."""
    from multiprocessing.connection import Connection
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    done = 0
    while True:
        try:
            source, backend, signed_zero = inbox.recv()
        except EOFError:
            return
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
        outcome = run_program(source, backend, signed_zero,
                              on_stage=lambda stage: outbox.send(("stage", stage)))
        outbox.send(("done", outcome))
        done += 1
        if done % 200 == 0:
            release_caches()


class Worker:
    """Runs programs in a child process, so that a driver that aborts (an LLVM error inside a
    Vulkan driver kills the process that compiles the pipeline), hangs or corrupts memory
    costs one test case, not the campaign. The child is restarted after such a death. It is a
    plain `python -c` subprocess (not multiprocessing), so callers need no `__main__` guard."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self.proc = None
        self.log = os.path.join(_workdir(), f"worker_{os.getpid()}_{next(_count)}.log")

    def _start(self) -> None:
        import subprocess
        import sys
        from multiprocessing.connection import Connection
        child_reads, parent_writes = os.pipe()
        parent_reads, child_writes = os.pipe()
        root = os.path.dirname(os.path.dirname(os.path.abspath(pc.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        code = ("import sys; from pycoop.testing.runner import _serve; "
                "_serve(int(sys.argv[1]), int(sys.argv[2]))")
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", code, str(child_reads), str(child_writes)],
                                         pass_fds=(child_reads, child_writes), stderr=err, env=env)
        os.close(child_reads)
        os.close(child_writes)
        self.outbox = Connection(parent_writes, readable=False)
        self.inbox = Connection(parent_reads, writable=False)

    def close(self) -> None:
        if self.proc is not None:
            self.outbox.close()
            self.inbox.close()
            try:
                self.proc.wait(10)
            except Exception:          # noqa: BLE001  (still busy: a hung driver)
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def _died(self, stage: str, why: str) -> Outcome:
        try:
            tail = Path(self.log).read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            tail = []
        self.close()
        words = " | ".join(tail) or why
        cls = "vulkan-error" if stage == "vulkan" else "crash"
        return Outcome(cls, stage, f"process {why}: {words}", f"{cls}: {stage}: {_shape(words)}")

    def run(self, source: str, backend: str = "vulkan", signed_zero: bool = False) -> Outcome:
        """The outcome of one program (source text), with a timeout."""
        import time
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.outbox.send((source, backend, signed_zero))
        stage = "emulator"
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0 or not self.inbox.poll(left):
                    self.proc.kill()
                    return self._died(stage, f"timed out after {self.timeout_s:g} s")
                kind, value = self.inbox.recv()
            except (EOFError, OSError):
                self.proc.wait()
                return self._died(stage, f"died (exit code {self.proc.returncode})")
            if kind == "stage":
                stage = value
            else:
                return value


def release_caches() -> None:
    """Drop what thousands of throw-away kernels leave behind: Vulkan pipelines (the runtime
    is closed; the next launch opens it again), lowered modules and cached source lines."""
    cache._memory.clear()
    linecache.clearcache()
    try:
        from pycoop.runtime.vulkan.runtime import reset_runtime
    except ImportError:             # no Vulkan loader: nothing to release
        return
    reset_runtime()
