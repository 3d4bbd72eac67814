"""Runs IR with NumPy, vectorised across the whole dispatch (no op knowledge lives here).

Value layout: a per-invocation scalar is an array broadcastable to (workgroups, invocations
per workgroup) — uniform values stay (1, 1), workgroup-uniform ones (W, 1). A cooperative
matrix is (W|1, S|1, rows, cols): one matrix per scope instance (S = subgroups per workgroup
for Subgroup scope, 1 for Workgroup scope). Divergent control flow runs under boolean masks;
ops on cooperative matrices check that every scope instance is entirely active or inactive.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ..errors import ArgumentError, EmulatorError
from ..ir.core import Block, Module, Op, Value
from ..ir.registry import get
from ..types import BufferType, CoopMatType, Scope
from .fast import FAST_OPS, LAZY_OPERANDS, RUNS
from .lazy import LazyBlocks
from .memo import LaunchMemo, launch_memo
from .sync import DeviceSync
from .memory import Memory, PointerArray, SharedMemory


class Dispatch:
    """Geometry of one dispatch and the built-in variables."""

    per_element = False      # a function applied per matrix element (_ElementDispatch)

    def __init__(self, grid: tuple[int, int, int], wg_size: tuple[int, int, int], subgroup_size: int):
        self.grid, self.wg_size, self.sgs = grid, wg_size, subgroup_size
        self.nwg = prod(grid)
        self.wgs = prod(wg_size)
        self.nsg = -(-self.wgs // subgroup_size)
        self.shape = (self.nwg, self.wgs)

    def instance_shape(self, scope: Scope) -> tuple[int, int]:
        return (self.nwg, self.nsg if scope == Scope.Subgroup else 1)

    def scope_invocations(self, scope: Scope) -> int:
        return self.sgs if scope == Scope.Subgroup else self.wgs

    def builtin(self, name: str, comp: int) -> np.ndarray:
        lid = np.arange(self.wgs, dtype=np.uint32)[None, :]
        wid = np.arange(self.nwg, dtype=np.uint32)[:, None]

        def split(i, dims):
            x, y = dims[0], dims[1]
            return (i % x, (i // x) % y, i // (x * y))[comp]
        if name == "local_invocation_index":
            return lid
        if name == "local_invocation_id":
            return split(lid, self.wg_size).astype(np.uint32)
        if name == "workgroup_id":
            return split(wid, self.grid).astype(np.uint32)
        if name == "global_invocation_id":
            return (split(wid, self.grid) * self.wg_size[comp] + split(lid, self.wg_size)).astype(np.uint32)
        if name == "num_workgroups":
            return np.full((1, 1), self.grid[comp], np.uint32)
        if name == "subgroup_id":
            return lid // np.uint32(self.sgs)
        if name == "subgroup_local_id":
            return lid % np.uint32(self.sgs)
        if name == "subgroup_size":
            return np.full((1, 1), self.sgs, np.uint32)
        if name == "num_subgroups":
            return np.full((1, 1), self.nsg, np.uint32)
        raise KeyError(name)


class _ElementDispatch(Dispatch):
    """The 'dispatch' of a function applied element-wise: one row of n lanes, no built-ins."""

    per_element = True

    def __init__(self, n: int, parent: Dispatch):
        self.grid, self.wg_size, self.sgs = (1, 1, 1), (n, 1, 1), parent.sgs
        self.nwg, self.wgs, self.nsg = 1, n, 1
        self.shape = (1, n)

    def builtin(self, name: str, comp: int) -> np.ndarray:
        raise EmulatorError(f"built-in {name} is not available inside a function called per element",
                            rule="SPV_NV_cooperative_matrix2: decode, combine and per-element functions "
                                 "are called per element, outside any invocation's built-in state (pycoop "
                                 "reports built-ins there)",
                            hint="read the built-in in the kernel and pass the value as an operand",
                            rule_id="nv.builtin-in-callback")


class EmuCtx:
    """Execution state: values, the active mask, dead (returned) invocations, memories."""

    def __init__(self, module: Module, dispatch: Dispatch, memories: dict[Value, Memory]):
        self.module = module
        self.dispatch = dispatch
        self.env: dict[Value, np.ndarray] = {}
        self.mask: np.ndarray | None = None       # None: every invocation active
        self.dead: np.ndarray | None = None       # invocations that executed `return`
        self.memories = memories
        self.barrier_epoch = 0
        self.sync = DeviceSync(dispatch.nwg, dispatch.wgs)    # cross-workgroup ordering
        self._blocks: dict[int, tuple] = {}
        # Values undefined in some invocations (e.g. OpUndef lanes of a QCOM extract):
        # value -> (bool mask broadcastable to (W, I), why). Ops that read such a value in an
        # active invocation are reported unless their registry entry sets `poison_aware`
        # (they handle it themselves). if/loop results and loop arguments follow it
        # (merge_poison).
        self.poison: dict[Value, tuple[np.ndarray, str]] = {}
        self.yielded: list[Value] = []            # operands of the last yield/condition
        # Results kept across launches of this configuration (see emulator.memo), and the
        # values invariant in this launch; None for no memo (nested function calls).
        self.memo: LaunchMemo | None = None
        self.invariant: set[Value] = set()

    # ---------------------------------------------------------------- execution

    def run_block(self, block: Block) -> list | None:
        """Run `block`'s ops in order; its yielded values, or None when no invocation reaches
        its end. Code that no invocation reaches is not run at all (see `idle`)."""
        ops, i = block.ops, 0
        while i < len(ops):
            op = ops[i]
            i += 1
            if op.name == "yield" or op.name == "condition":
                self.yielded = op.operands
                return [self._value(v) for v in op.operands]
            batch = RUNS.get(op.name)           # a run of such ops done at once (emulator.fast)
            done = batch(self, ops, i - 1) if batch is not None else 0
            if done:
                i += done - 1
            elif self.execute(op):
                return None
            elif op.regions and self.idle():   # every invocation here returned inside it
                return None
        return []

    def idle(self) -> bool:
        """Whether no invocation is active. Nothing runs then: a GPU executes no instruction
        for no invocation, and values computed for nobody would have no defined shape or
        content (an `if` whose branches all returned has no results to merge). So a region
        entered with no active invocation is skipped, and a block stops at the first op after
        which every invocation has returned; both count as 'no invocation reaches the end',
        like a `return`."""
        return self.mask is not None and not self.mask.any()

    def execute(self, op: Op) -> bool:
        """Run one op (not yield/condition); True if it was a `return`."""
        d = get(op.name)
        if d.emulate is None:
            raise EmulatorError(f"internal: op {op.name} has no emulator semantics", op.loc,
                                rule="pycoop: every op registered for the emulator has NumPy semantics")
        if self.poison and not op.regions and not d.poison_aware:
            self.check_poison(op)
        env = self.env
        lazy = op.name in LAZY_OPERANDS
        if self.memo is not None and self.keeps(op):
            env[op.result] = self.memo.get_or(op, lambda: d.emulate(
                self, op, *[env[v] if lazy else self._value(v) for v in op.operands]))
            self.invariant.add(op.result)
            return False
        args = [env[v] if lazy else self._value(v) for v in op.operands]
        fast = FAST_OPS.get(op.name)               # emulator.fast: None when it does not apply
        out = fast(self, op, args) if fast is not None else None
        if out is None:
            out = d.emulate(self, op, *args)
        if op.name == "return":
            return True
        res = op.results
        if len(res) == 1 and not op.regions:     # region ops give a list of results
            env[res[0]] = out
        elif res:
            for r, v in zip(res, out):
                env[r] = v
        return False

    def keeps(self, op: Op) -> bool:
        """Whether `op`'s result is invariant in this launch (see emulator.memo): memoryless,
        every invocation active, every operand invariant."""
        return (self.mask is None and not self.poison and get(op.name).pure and not op.regions
                and self.invariant.issuperset(op.operands))

    def _value(self, v: Value):
        """The value of `v`, copying lazy product blocks out once (see emulator.lazy)."""
        x = self.env[v]
        if isinstance(x, LazyBlocks):
            x = self.env[v] = x.materialize()
        return x

    def run_region(self, block: Block, args: list, mask: np.ndarray | None) -> list | None:
        """Run `block` with its arguments bound to `args` under `mask`; restore the caller's
        mask (less invocations that returned) afterwards. None if no invocation reaches the
        end of `block` (every one returned, or none entered it)."""
        if mask is not None and not mask.any():
            return None
        saved = self.mask
        self.mask = mask
        for a, v in zip(block.args, args):
            self.env[a] = v
        try:
            out = self.run_block(block)
        finally:
            self.mask = saved if self.dead is None else (
                ~self.dead if saved is None else saved & ~self.dead)
        return out

    def kill(self, mask: np.ndarray | None) -> None:
        m = np.ones(self.dispatch.shape, bool) if mask is None else mask
        self.dead = m.copy() if self.dead is None else (self.dead | m)

    # ---------------------------------------------------------------- checks

    def check_ub(self, bad: np.ndarray, op: Op, message, rule_id: str | None = None,
                 hint: str | None = None) -> None:
        """Report undefined behaviour if any *active* invocation has `bad` set. `message` is
        a string, or a function of the first such (workgroup, invocation) giving it."""
        bad = np.asarray(bad)
        if not bad.any():
            return
        b = np.broadcast_to(bad, np.broadcast_shapes(bad.shape, self.dispatch.shape))
        if self.mask is not None:
            b = b & self.mask.reshape(self.mask.shape + (1,) * (b.ndim - 2))
        if b.any():
            w, i = np.argwhere(b)[0][:2]
            if callable(message):
                message = message(w, i)
            raise EmulatorError(f"undefined behaviour in workgroup {self._wg_name(w)}, "
                                f"invocation {i}: {message}", op.loc,
                                rule="reported by the pycoop emulator", hint=hint,
                                rule_id=rule_id or "emulator.undefined-behaviour")

    def check_poison(self, op: Op, values=None) -> None:
        """Report an active invocation reading a value that is undefined there."""
        for v in op.operands if values is None else values:
            hit = self.poison.get(v)
            if hit is not None:
                self.check_ub(hit[0], op, f"reads an undefined value: {hit[1]}",
                              hint="use the value only where the op defines it (e.g. under an "
                                   "`if` on the lanes that read an active lane)")

    def merge_poison(self, targets: list[Value], take: np.ndarray | None, new: list[Value],
                     old: list[Value | None]) -> None:
        """`targets` take the values `new` where `take` (all if None), else keep `old`: their
        undefined lanes follow."""
        for t, n, o in zip(targets, new, old):
            pn, po = self.poison.get(n), self.poison.get(o) if o is not None else None
            if pn is None and (po is None or take is None):
                self.poison.pop(t, None)
                continue
            mn = pn[0] if pn is not None else False
            mo = po[0] if po is not None else False
            self.poison[t] = (mn if take is None else np.where(take, mn, mo),
                              (pn or po)[1])

    def check_instances(self, bad: np.ndarray, active: np.ndarray | None, op: Op, message: str,
                        rule: str = "reported by the pycoop emulator", hint: str | None = None,
                        rule_id: str | None = None):
        """Report undefined behaviour if any active scope instance has `bad` set."""
        bad = np.asarray(bad)
        if active is not None:
            bad = bad & active
        if bad.any():
            w, s = np.argwhere(np.atleast_2d(bad))[0][:2]
            raise EmulatorError(f"undefined behaviour in workgroup {self._wg_name(w)}, "
                                f"scope instance {s}: {message}", op.loc, rule=rule, hint=hint,
                                rule_id=rule_id or "emulator.undefined-behaviour")

    def endless_loop(self, op: Op, active: np.ndarray | None, limit: int) -> None:
        """Report a loop still running after `limit` iterations for the `active` invocations."""
        still = np.ones(self.dispatch.shape, bool) if active is None else \
            np.broadcast_to(active, self.dispatch.shape)
        w, i = np.argwhere(still)[0][:2]
        raise EmulatorError(
            f"this loop has run {limit} iterations without ending for {int(still.sum())} "
            f"invocations (the first: invocation {i} of workgroup {self._wg_name(w)})", op.loc,
            rule="reported by the pycoop emulator: a loop that does not end hangs the device "
                 "(its queue is lost, VK_ERROR_DEVICE_LOST)",
            hint="check the loop's condition and what its body changes; a loop meant to run "
                 "longer can raise PYCOOP_EMULATOR_MAX_ITERATIONS",
            rule_id="emulator.endless-loop")

    def _wg_name(self, w: int) -> str:
        gx, gy, _ = self.dispatch.grid
        return f"({w % gx}, {(w // gx) % gy}, {w // (gx * gy)})"

    def _scope_split(self, x: np.ndarray, scope: Scope) -> np.ndarray:
        d = self.dispatch
        if scope == Scope.Subgroup:
            if d.wgs % d.sgs:
                raise EmulatorError(f"the workgroup size {d.wgs} is not a multiple of the subgroup "
                                    f"size {d.sgs}: partial subgroups are not emulated",
                                    rule="pycoop emulator: subgroups are whole (the workgroup size is a "
                                         "multiple of the subgroup size), as the Vulkan full-subgroups "
                                         "requirement gives",
                                    hint=f"use a workgroup size that is a multiple of {d.sgs}",
                                    rule_id="emulator.whole-subgroups")
            return x.reshape(x.shape[0], d.nsg, d.sgs)
        return x.reshape(x.shape[0], 1, d.wgs)

    def scope_active(self, scope: Scope, op: Op) -> np.ndarray | None:
        """Which scope instances are active (None: all). Raises if an instance is partly active."""
        if self.mask is None:
            return None
        m = self._scope_split(self.mask, scope)
        anyv, allv = m.any(-1), m.all(-1)
        if (anyv != allv).any():
            w, s = np.argwhere(anyv != allv)[0]
            raise EmulatorError(
                f"a cooperative operation runs with only part of {scope.value.lower()} {s} of "
                f"workgroup {self._wg_name(w)} active", op.loc,
                rule="SPV_KHR_cooperative_matrix: all invocations of the scope instance must be "
                     "active or none of them",
                hint="keep cooperative-matrix code under conditions that are uniform across "
                     "the subgroup/workgroup", rule_id="khr.scope-all-active")
        return allv

    def scope_uniform(self, take: np.ndarray, scope: Scope, op: Op, message: str) -> np.ndarray:
        """Reduce a per-invocation bool to one per scope instance; it must be uniform there."""
        t = np.broadcast_to(take, self.dispatch.shape)
        t3 = self._scope_split(t, scope)
        if self.mask is None:
            anyv, allv = t3.any(-1), t3.all(-1)
            bad = anyv != allv
        else:        # instances with no active invocation take nothing and are not checked
            m3 = self._scope_split(self.mask, scope)
            anyv, allv = (t3 & m3).any(-1), (t3 | ~m3).all(-1)
            bad = (anyv != allv) & m3.any(-1)
        if bad.any():
            w, s = np.argwhere(bad)[0]
            raise EmulatorError(f"{message} (workgroup {self._wg_name(w)}, instance {s})", op.loc,
                                rule="SPV_KHR_cooperative_matrix: operands must be dynamically "
                                     "uniform within the scope instance",
                                hint="compute the operand from values the whole scope shares "
                                     "(workgroup ids, subgroup ids, parameters)",
                                rule_id="khr.scope-uniform-operands")
        return anyv

    def scope_uniform_value(self, x: np.ndarray, scope: Scope, op: Op, what: str) -> np.ndarray:
        """The single value of `x` in each scope instance, shape (W|1, S|1); `x` must be
        uniform among the instance's active invocations."""
        if x.shape[1] == 1:
            return x
        d = self.dispatch
        x3 = self._scope_split(np.broadcast_to(x, (x.shape[0], d.wgs)), scope)
        if self.mask is None:
            first = x3[..., 0]
            ok = (x3 == first[..., None]).all(-1)
        else:
            m3 = self._scope_split(self.mask, scope)
            lane = m3.argmax(-1)[..., None]
            first = np.take_along_axis(np.broadcast_to(x3, m3.shape), lane, -1)[..., 0]
            ok = ((x3 == first[..., None]) | ~m3).all(-1)
        if not ok.all():
            w, s = np.argwhere(~ok)[0]
            raise EmulatorError(f"{what} differs between invocations of {scope.value.lower()} "
                                f"instance {s} in workgroup {self._wg_name(w)}", op.loc,
                                rule="SPV_KHR_cooperative_matrix: all operands must be dynamically "
                                     "uniform within every instance of the scope",
                                hint="compute it from workgroup_id / subgroup_id, not from the "
                                     "invocation's own index", rule_id="khr.scope-uniform-operands")
        return first

    # ---------------------------------------------------------------- calls
    def call(self, fn, args: list, batch_shape: tuple[int, ...]) -> np.ndarray:
        """Run a traced Function once per element of `batch_shape`, vectorised: every
        argument is an array of shape batch_shape (+ its own element axes)."""
        n = int(np.prod(batch_shape))
        sub = EmuCtx(self.module, _ElementDispatch(n, self.dispatch), self.memories)
        sub._blocks = self._blocks
        for p, a in zip(fn.params, args):
            a = np.asarray(a) if not isinstance(a, PointerArray) else a
            if isinstance(a, PointerArray):
                sub.env[p] = a.reshape((1, n))
            else:
                extra = a.shape[len(batch_shape):] if a.ndim >= len(batch_shape) else ()
                a = np.broadcast_to(a, batch_shape + extra)
                sub.env[p] = a.reshape((1, n) + extra)
        out = sub.run_block(fn.body)[0]
        out = np.broadcast_to(out, (1, n) + out.shape[2:])
        return out.reshape(batch_shape + out.shape[2:])

    # ---------------------------------------------------------------- wide copies
    def remember_blocks(self, value: np.ndarray, blocks: np.ndarray, index: np.ndarray) -> None:
        """Record that `value` == blocks[index], so a consumer needing `value` in a wider type
        converts only the distinct blocks (a pure speed-up; `value` stays authoritative)."""
        self._blocks[id(value)] = (value, blocks, index)

    def distinct_blocks(self, value: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray] | None:
        """(the distinct blocks converted to `dtype`, index) with value == blocks[index], if
        recorded by the load that produced `value`."""
        hit = self._blocks.get(id(value))
        if hit is None or hit[0] is not value:
            return None
        cache = hit[3] if len(hit) > 3 else {}
        if ("blocks", dtype) not in cache:
            cache = {**cache, ("blocks", dtype): np.asarray(hit[1], dtype)}
            self._blocks[id(value)] = (*hit[:3], cache)
        return cache[("blocks", dtype)], hit[2]

    def widened(self, value: np.ndarray, dtype) -> np.ndarray:
        """`value` converted to `dtype`, using the distinct blocks recorded for it if any."""
        found = self.distinct_blocks(value, dtype)
        if found is None:
            return np.asarray(value, dtype)
        hit = self._blocks[id(value)]
        wide = hit[3].get(dtype)
        if wide is None:           # one matrix feeds several mul_adds: widen it once
            wide = found[0][found[1]]
            self._blocks[id(value)] = (*hit[:3], {**hit[3], dtype: wide})
        return wide

    # ---------------------------------------------------------------- memory

    def memory_of(self, v: Value) -> Memory:
        return self.memories[v]

    def alloc_shared(self, op: Op) -> np.ndarray:
        t = op.result.type
        self.memories[op.result] = SharedMemory(t.elem, t.length, self.dispatch, self)
        return np.zeros((1, 1), np.uint8)     # the handle; data lives in the Memory

    def barrier(self, op: Op) -> None:
        if self.mask is not None:
            m = self.mask.any(1) != self.mask.all(1)
            if m.any():
                w = int(np.argwhere(m)[0][0])
                raise EmulatorError(f"barrier reached by only part of workgroup {self._wg_name(w)}",
                                    op.loc, rule="OpControlBarrier must be executed in uniform "
                                                 "control flow within the workgroup",
                                    hint="call pycoop.barrier() where every invocation of the "
                                         "workgroup reaches it (outside a divergent if or loop)",
                                    rule_id="control.barrier-uniform")
        self.barrier_epoch += 1
        if op.attrs.get("memory") == "device":
            self.sync.device_barrier(np.ones(self.dispatch.nwg, bool) if self.mask is None
                                     else self.mask.any(1))


# invocations per launch: each holds every value of the kernel in NumPy arrays as wide as the
# dispatch, so 2^30 of them take at least 4 GiB per 32-bit value
MAX_INVOCATIONS = 1 << 30


def run(module: Module, grid: tuple[int, int, int], args: list, *, subgroup_size: int | None = None):
    """Execute `module` over `grid` workgroups; buffer arguments (NumPy arrays) are updated in
    place."""
    d = Dispatch(grid, module.workgroup_size, subgroup_size or module.subgroup_size)
    if d.nwg * d.wgs > MAX_INVOCATIONS:
        raise ArgumentError(f"{module.kernel.name}: the grid {tuple(grid)} of {d.wgs}-invocation "
                            f"workgroups is {d.nwg * d.wgs} invocations; the emulator holds "
                            f"every invocation's values at once, at most {MAX_INVOCATIONS} of "
                            "them per launch (split the launch, or run it on a GPU)")
    if d.wgs % d.sgs and any(isinstance(r.type, CoopMatType) and r.type.scope == Scope.Subgroup
                             for op in module.walk() for r in op.results):
        raise EmulatorError(f"the workgroup size {d.wgs} is not a multiple of the subgroup size "
                            f"{d.sgs}: subgroup-scope matrices with partial subgroups are not "
                            "emulated", module.kernel.body.ops[0].loc if module.kernel.body.ops else None,
                            rule="SPV_KHR_cooperative_matrix: every invocation of the Scope instance "
                                 "executes the instruction together; a partial subgroup has no complete "
                                 "instance",
                            hint=f"use a workgroup size that is a multiple of {d.sgs}",
                            rule_id="emulator.whole-subgroups")
    memories: dict[Value, Memory] = {}
    ctx = EmuCtx(module, d, memories)
    ctx.memo = launch_memo(module, d, args, module.kernel.params)
    # buffers some atomic op updates: their plain accesses are recorded for race checks;
    # buffers both stored to and loaded from: other workgroups' stores are checked
    atomic, stored, loaded = set(), set(), set()
    for op in module.walk():
        if get(op.name).atomic:
            atomic.add(op.operands[0])
        elif op.name in ("store", "load"):
            (stored if op.name == "store" else loaded).add(op.operands[0])
    for p, a, name in zip(module.kernel.params, args, module.param_names):
        if isinstance(p.type, BufferType):
            memories[p] = Memory(name, a, p.type.elem)
            if p in atomic:
                memories[p].track_atomics()
            if p in stored and p in loaded:
                memories[p].track_writers(ctx.sync)
            ctx.env[p] = np.zeros((1, 1), np.uint8)
        else:
            ctx.env[p] = np.full((1, 1), a, dtype=p.type.dtype)
            ctx.invariant.add(p)
    with np.errstate(over="ignore", invalid="ignore"):
        ctx.run_block(module.kernel.body)
