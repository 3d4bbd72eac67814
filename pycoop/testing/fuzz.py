"""Differential fuzzing of pycoop: random valid kernels on the emulator and on Vulkan.

    python -m pycoop.testing.fuzz --count 500 --seed 0 [--features scalar,shared,khr]
        [--with NAME,...] [--fp fast|exact] [--backend vulkan|emulator-only] [--out report.json]
    python -m pycoop.testing.fuzz --replay case.py

Each seed gives one kernel (`gen.generate`), run in a worker process (`runner.Worker`): traced,
lowered and checked by spirv-val, run on the emulator and on Vulkan with the same inputs, and
the outputs compared. Every failure is reduced (`shrink.shrink`) to a minimal kernel of the
same failure class and printed as Python source; failures are grouped by signature.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .features import FAMILIES, KNOWN_DEFECTS, Features, parse_features
from .gen import generate
from .program import Program
from .runner import CLASSES, Outcome, Worker
from .shrink import shrink


@dataclass
class Failure:
    signature: str
    cls: str
    seeds: list[int]
    detail: str
    source: str                 # the generated kernel of the first seed
    shrunk: str = ""            # its reduced form
    shrink_trials: int = 0


@dataclass
class Report:
    features: str
    backend: str
    seeds: tuple[int, int]      # first, one past the last seed run
    counts: dict[str, int]
    ran_on: dict[str, int]      # how many ran on Vulkan / on the emulator only
    seconds: float
    failures: list[Failure] = field(default_factory=list)
    allowed: dict[str, int] = field(default_factory=dict)   # kernels a device allowance let pass

    @property
    def failed(self) -> int:
        return sum(n for cls, n in self.counts.items() if cls != "ok")

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"pycoop fuzz: {sum(self.counts.values())} kernels (seeds {self.seeds[0]}.."
                 f"{self.seeds[1] - 1}), features {self.features}, backend {self.backend}, "
                 f"{self.seconds:.1f} s",
                 "  " + ", ".join(f"{c}: {self.counts.get(c, 0)}" for c in CLASSES),
                 "  ran on: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.ran_on.items()))]
        if self.allowed:
            lines.append("  ok through a device allowance: "
                         + ", ".join(f"{k}: {v}" for k, v in sorted(self.allowed.items())))
        for f in self.failures:
            lines += ["", f"== {f.signature}  ({len(f.seeds)} kernels, first seed {f.seeds[0]})",
                      f"   {f.detail.splitlines()[0] if f.detail else ''}"]
            if f.shrunk:
                lines += [f"-- reduced ({f.shrink_trials} candidates tried):", f.shrunk.rstrip()]
        return "\n".join(lines)


def signed_zero(features: Features) -> bool:
    """Whether -0.0 and +0.0 are told apart: only in exact mode, whose kernels declare
    SignedZeroInfNanPreserve (elsewhere a driver may drop the sign of a zero)."""
    return features.fp == "exact"


def fuzz(count: int, seed: int = 0, features: Features | None = None, backend: str = "vulkan",
         shrink_failures: bool = True, max_shrunk: int = 8, time_limit_s: float | None = None,
         progress: Callable[[int, Outcome], None] | None = None, worker: Worker | None = None,
         shrink_time_s: float = 180.0) -> Report:
    """Run `count` kernels (seeds seed .. seed+count-1); stop early after `time_limit_s`.
    `progress(i, outcome)` is called after each kernel. At most `max_shrunk` distinct failures
    are reduced, each for at most `shrink_time_s` (a reduction runs the kernel a few hundred
    times)."""
    features = features or Features()
    if backend not in ("vulkan", "emulator"):
        raise ValueError(f"backend must be 'vulkan' or 'emulator', not {backend!r}")
    own = worker is None
    worker = worker or Worker()
    sz = signed_zero(features)
    counts: Counter = Counter()
    ran_on: Counter = Counter()
    allowed: Counter = Counter()
    groups: dict[str, Failure] = {}
    programs: dict[str, Program] = {}
    start = time.monotonic()
    end = seed
    try:
        for s in range(seed, seed + count):
            if time_limit_s is not None and time.monotonic() - start > time_limit_s:
                break
            program = generate(s, features)
            outcome = worker.run(program.render(), backend, sz)
            end = s + 1
            counts[outcome.cls] += 1
            if outcome.ran_on:
                ran_on[outcome.ran_on] += 1
            if outcome.allowed:
                allowed["+".join(outcome.allowed)] += 1
            if outcome.failed:
                g = groups.get(outcome.signature)
                if g is None:
                    groups[outcome.signature] = Failure(outcome.signature, outcome.cls, [s],
                                                        outcome.detail, program.render())
                    programs[outcome.signature] = program
                else:
                    g.seeds.append(s)
            if progress:
                progress(s, outcome)
        if shrink_failures:
            for sig in list(groups)[:max_shrunk]:
                def same(p: Program, sig=sig) -> bool:
                    return worker.run(p.render(), backend, sz).signature == sig
                small, trials = shrink(programs[sig], same, time_limit_s=shrink_time_s)
                groups[sig].shrunk, groups[sig].shrink_trials = small.render(), trials
    finally:
        if own:
            worker.close()
    return Report(features.describe(), backend, (seed, end), {c: counts.get(c, 0) for c in CLASSES},
                  dict(ran_on), time.monotonic() - start, list(groups.values()), dict(allowed))


def replay(path: str, backend: str = "vulkan", signed_zero: bool = False) -> Outcome:
    """Run a printed kernel file (its GRID, LENGTH, SCALARS and SEED say how). Zeros keep
    their sign in the comparison if `signed_zero` or the kernel is in exact float mode."""
    with open(path) as f:
        source = f.read()
    signed_zero = signed_zero or 'fp="exact"' in source
    worker = Worker()
    try:
        return worker.run(source, backend, signed_zero)
    finally:
        worker.close()


def _allowance_note(o: Outcome) -> str:
    return f" (device allowance: {'+'.join(o.allowed)})" if o.allowed else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pycoop.testing.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100, help="kernels to run (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--features", default="scalar,shared",
                    help=f"kernel families, comma-separated, from {', '.join(FAMILIES)}")
    ap.add_argument("--with", dest="enabled", default="",
                    help="known-defect constructs to generate anyway: " + ", ".join(KNOWN_DEFECTS))
    ap.add_argument("--fp", default="fast", choices=("fast", "exact"), help="float mode")
    ap.add_argument("--backend", default="vulkan", choices=("vulkan", "emulator-only"))
    ap.add_argument("--out", help="write the report as JSON here")
    ap.add_argument("--no-shrink", action="store_true", help="do not reduce failures")
    ap.add_argument("--time-limit", type=float, help="stop starting kernels after this many seconds")
    ap.add_argument("--shrink-time", type=float, default=180.0,
                    help="seconds spent reducing each distinct failure (default 180)")
    ap.add_argument("--replay", metavar="FILE", help="run one printed kernel and print its outcome")
    ap.add_argument("--print", dest="show", type=int, metavar="SEED",
                    help="print the kernel of SEED and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per kernel")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYCOOP_CACHE_DIR", "off")   # thousands of throw-away kernels
    backend = "emulator" if a.backend == "emulator-only" else "vulkan"
    try:
        features = parse_features(a.features, a.enabled, a.fp)
    except ValueError as e:
        ap.error(str(e))
    if a.show is not None:
        print(generate(a.show, features).render(), end="")
        return 0
    if a.replay:
        o = replay(a.replay, backend, signed_zero(features))
        print(f"{o.cls}" + (f" ({o.ran_on})" if o.ran_on else "") + (f": {o.detail}" if o.detail else "")
              + _allowance_note(o))
        return int(o.failed)

    def progress(s: int, o: Outcome) -> None:
        if a.verbose or o.failed or o.allowed:
            print(f"seed {s}: {o.cls}" + (f" [{o.signature}]" if o.failed else "") + _allowance_note(o),
                  flush=True)

    report = fuzz(a.count, a.seed, features, backend, not a.no_shrink, time_limit_s=a.time_limit,
                  progress=progress, shrink_time_s=a.shrink_time)
    print(report.summary())
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report.to_json(), f, indent=1)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
