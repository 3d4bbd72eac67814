"""Exceptions that point at the user's code.

Every IR op carries the source location of the user's line that created it; errors raised
while tracing or emulating name that line, show it, state the rule and a hint. pycoop's own
frames are hidden from tracebacks unless PYCOOP_TRACEBACK=1 (see knobs).
"""
from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in the user's source: file, line, column (1-based; col 0 = unknown)."""
    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f":{self.col}" if self.col else "")

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n")


UNKNOWN = Loc("<unknown>", 0)


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


class CompileError(PycoopError):
    """A kernel breaks a language or SPIR-V rule; raised while tracing, before any SPIR-V exists.

    `rule` quotes the rule (the spec sentence or VUID, short); `rule_id` is its stable key in
    the rules table (docs/rules.md), which names the test that checks it."""

    def __init__(self, message: str, loc: Loc | None = None, *, rule: str | None = None,
                 hint: str | None = None, rule_id: str | None = None):
        self.message, self.loc, self.rule, self.hint = message, loc, rule, hint
        self.rule_id = rule_id
        super().__init__(_render(message, loc, rule, hint, rule_id))

    @property
    def line(self) -> int | None:
        return self.loc.line if self.loc else None


class ArgumentError(PycoopError, TypeError):
    """A launch argument does not match the kernel's signature (raised before any work)."""


class EmulatorError(PycoopError):
    """The emulator caught undefined behaviour or an invalid access at run time."""

    def __init__(self, message: str, loc: Loc | None = None, *, rule: str | None = None,
                 hint: str | None = None, rule_id: str | None = None):
        self.message, self.loc, self.rule, self.hint = message, loc, rule, hint
        self.rule_id = rule_id
        super().__init__(_render(message, loc, rule, hint, rule_id))


class BackendUnavailable(PycoopError):
    """The requested backend cannot run this kernel; the message names what is missing."""
