"""Exceptions that point at the user's code.

Every IR op carries the source location of the user's line that created it; errors raised
while tracing or emulating name that line, show it, state the rule and a hint. pycoop's own
frames are hidden from tracebacks unless PYCOOP_TRACEBACK=1 (see knobs): the message already
names the user's line, and a dozen tracer or emulator frames above it only bury it.
"""
from __future__ import annotations

import functools
import linecache
import os
import sys
import types
from dataclasses import dataclass

from . import knobs


@dataclass(frozen=True)
class Loc:
    """A position in the user's source: file, line, column (1-based; col 0 = unknown)."""
    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        cell = cell_label(self.file)
        if cell is not None:         # a notebook cell: "In [4], line 3", as IPython names it
            return f"{cell}, line {self.line}" + (f", column {self.col}" if self.col else "")
        return f"{self.file}:{self.line}" + (f":{self.col}" if self.col else "")

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n")


UNKNOWN = Loc("<unknown>", 0)


def cell_label(filename: str) -> str | None:
    """`In [4]` for the code of IPython/Jupyter cell 4, else None. ipykernel compiles each cell
    from a temporary file name (/tmp/ipykernel_123/2530548090.py) that the shell's compiler maps
    back to the execution count; plain IPython uses <ipython-input-4-...>."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    found = name(filename) if name is not None else None
    if found:
        return found[1].replace("In[", "In [")
    if filename.startswith("<ipython-input-"):
        return f"In [{filename.split('-')[2]}]"
    return None


def _render(what: str, loc: Loc | None, rule: str | None, hint: str | None,
            rule_id: str | None = None) -> str:
    parts = []
    if loc is not None and loc is not UNKNOWN:
        parts.append(f"{loc}: {what}")
        src = loc.source_line()
        if src:
            parts.append("    " + src)
            if loc.col:
                parts.append("    " + " " * (loc.col - 1) + "^")
    else:
        parts.append(what)
    if rule:
        parts.append(f"  rule: {rule}" + (f" [{rule_id}]" if rule_id else ""))
    if hint:
        parts.append(f"  hint: {hint}")
    return "\n".join(parts)


class PycoopError(Exception):
    """Base of pycoop's errors."""


class RuleError(PycoopError):
    """An error at a line of the user's kernel that breaks a rule: the message, the location
    (`.loc`, `.line`), the rule quoted (the spec sentence or VUID, short), a hint, and
    `rule_id`, the rule's stable key in the rules table (docs/rules.md), which names the test
    that checks it."""

    def __init__(self, message: str, loc: Loc | None = None, *, rule: str | None = None,
                 hint: str | None = None, rule_id: str | None = None):
        self.message, self.loc, self.rule, self.hint = message, loc, rule, hint
        self.rule_id = rule_id
        super().__init__(_render(message, loc, rule, hint, rule_id))

    @property
    def line(self) -> int | None:
        return self.loc.line if self.loc else None


class CompileError(RuleError):
    """A kernel breaks a language or SPIR-V rule; raised while tracing, before any SPIR-V exists."""


class ArgumentError(PycoopError, TypeError):
    """A launch argument does not match the kernel's signature (raised before any work)."""


class ArgumentValueError(ArgumentError, ValueError):
    """An argument of the right type with a value pycoop does not take (a backend name that
    is none of them): an ArgumentError that `except ValueError` also catches."""


class EmulatorError(RuleError):
    """The emulator caught undefined behaviour or an invalid access at run time."""


class KernelFault(RuleError):
    """A checked launch on the GPU caught an out-of-bounds access (the access was suppressed:
    a load gave zero, a store wrote nothing). Raised at the synchronisation that sees the
    launch complete, naming the kernel line of the access, the buffer, the index and the
    invocation, in the emulator's words. `.loc`, `.buffer` ("buffer 'y'" or "shared array"),
    `.index`, `.count` (the buffer's elements), `.workgroup` (x, y, z) and `.invocation` (the
    local invocation index) hold the facts."""

    def __init__(self, message: str, loc: Loc | None = None, *, rule: str | None = None,
                 hint: str | None = None, rule_id: str | None = None, **facts):
        super().__init__(message, loc, rule=rule, hint=hint, rule_id=rule_id)
        self.buffer, self.index, self.count = facts.get("buffer"), facts.get("index"), facts.get("count")
        self.workgroup, self.invocation = facts.get("workgroup"), facts.get("invocation")


class BackendUnavailable(PycoopError):
    """The requested backend cannot run this kernel; the message names what is missing."""


class BackendFallbackWarning(UserWarning):
    """backend="auto" ran a kernel on the emulator because Vulkan cannot run it; warned once per
    kernel. `.kernel` (its name), `.reason` (the full explanation) and `.missing` (what the
    selected device lacks; empty when there is no usable Vulkan device) hold the details.
    Silence it with `warnings.filterwarnings("ignore", category=pycoop.BackendFallbackWarning)`,
    or choose a backend (backend="emulator", PYCOOP_BACKEND=emulator)."""

    def __init__(self, kernel: str, reason: str, missing: tuple[str, ...] = ()):
        self.kernel, self.reason, self.missing = kernel, reason, tuple(missing)
        if missing:
            why = f"the Vulkan device lacks {missing[0]}" + (
                f" and {len(missing) - 1} more" if len(missing) > 1 else "")
        else:
            why = "no usable Vulkan device"
        super().__init__(f"{kernel} runs on the pycoop emulator: {why} (details: the warning's "
                         ".reason, `pycoop info`)")


# ------------------------------------------------------------------ hiding pycoop's frames
# An exception gains a traceback entry for every frame it leaves, so pycoop's frames are removed
# where the error leaves pycoop: each function a user calls (decorators, compile, .spv, launches,
# autotune) is wrapped by `entry_point`, which re-raises the error with only the frames outside
# pycoop (the user's own code, including kernel bodies being traced). The wrapper's own frame is
# unavoidable; it carries `__tracebackhide__` (honoured by IPython/Jupyter and pytest), and a
# sys.excepthook installed with the first such error drops it from uncaught errors' tracebacks.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_KERNEL_LIBRARY = os.path.join(_PACKAGE, "kernels") + os.sep   # kernel code, shown like a user's


def in_package(filename: str) -> bool:
    """Whether `filename` is one of pycoop's files, the bundled kernels included."""
    return os.path.abspath(filename).startswith(_PACKAGE)


def is_internal(filename: str) -> bool:
    """Whether a frame of `filename` is pycoop's own code (not the bundled kernels)."""
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE) and not path.startswith(_KERNEL_LIBRARY)


_POSITIONS: dict = {}     # code object -> its instructions' source positions


def _column(f) -> int:
    """1-based column of the instruction frame `f` is at (0 if unknown). Every traced op asks,
    so each code object's position table is built once, not once per op."""
    code = f.f_code
    pos = _POSITIONS.get(code)
    if pos is None:
        if len(_POSITIONS) > 4096:           # redefined cells in a long notebook session
            _POSITIONS.clear()
        pos = _POSITIONS[code] = tuple(code.co_positions()) if hasattr(code, "co_positions") else ()
    i = f.f_lasti // 2
    return (pos[i][2] or -1) + 1 if i < len(pos) else 0


def current_loc() -> Loc:
    """Location of the innermost frame outside pycoop's implementation (the kernel code being
    traced: the user's, or a kernel of pycoop.kernels)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PACKAGE) or fn.startswith(_KERNEL_LIBRARY):
            return Loc(fn, f.f_lineno, _column(f))
        f = f.f_back
    return UNKNOWN


def without_internal_frames(e: "PycoopError") -> "PycoopError":
    """The error without pycoop's frames, raised `from None` by the caller: the tracer's own
    exceptions must not show as its context (the user-facing methods are `entry_point`s too)."""
    return e if knobs.show_internal_frames() else e.with_traceback(user_frames(e.__traceback__))


def user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A copy of the traceback chain `tb` without pycoop's internal frames."""
    kept = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = types.TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def _excepthook(etype, value, tb):
    if isinstance(value, PycoopError) and not knobs.show_internal_frames():
        tb = user_frames(tb)
        value.with_traceback(tb)        # the default hook prints the exception's own traceback
    _previous_excepthook(etype, value, tb)


_previous_excepthook = None


def _ipython_handler(shell, etype, value, tb, tb_offset=None):
    """IPython/Jupyter's display of a PycoopError (its own traceback printer does not read
    `__tracebackhide__`)."""
    if not knobs.show_internal_frames():
        tb = user_frames(tb)
        value.with_traceback(tb)
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)   # IPython ignores a return


def _install_excepthook() -> None:
    """Chain pycoop's hook in front of the current one, once (a hook that later replaces it is
    left alone); in IPython, register the display of PycoopError unless another custom
    exception handler is set."""
    global _previous_excepthook
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if hasattr(shell, "set_custom_exc") and not shell.custom_exceptions:
        shell.set_custom_exc((PycoopError,), _ipython_handler)


def user_stacklevel() -> int:
    """The `stacklevel` for warnings.warn, called from the function that warns, that points at
    the first frame outside pycoop (the user's launch line)."""
    level, f = 2, sys._getframe(2)
    while f is not None and is_internal(f.f_code.co_filename):
        level, f = level + 1, f.f_back
    return level


def entry_point(fn):
    """Decorator of the functions a user calls: a PycoopError leaving them carries no pycoop
    frames and no chained internal exception, unless PYCOOP_TRACEBACK=1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841  (read by IPython and pytest)
        try:
            return fn(*args, **kwargs)
        except PycoopError as e:
            if knobs.show_internal_frames():
                raise
            _install_excepthook()
            raise e.with_traceback(user_frames(e.__traceback__)) from None
    return wrapper
