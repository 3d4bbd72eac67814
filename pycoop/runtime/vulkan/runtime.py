"""`VulkanRuntime`: run compiled kernels on one Vulkan device, asynchronously in batches.

Launches are recorded into an open command buffer (see batch.py) and submitted together: on
`synchronize()`, when a launch has NumPy arguments (those keep synchronous semantics: results
are in the caller's arrays when `launch` returns), when a host copy needs the data, or when a
batch grows large. Device arrays (`DeviceView` arguments) are passed by address (or, for a
kernel of the descriptor ABI, bound as a storage-buffer descriptor at their view's offset),
never copied. Descriptor sets come from pools of the submission that records the launch (see
batch.py): core Vulkan 1.0, so no extension (VK_KHR_push_descriptor) is needed to launch them.
NumPy arguments go through pooled host-visible staging buffers: one memmove in, one out, read
back from host-cached memory where the device has it. Every NumPy buffer is uploaded, written
or not, so elements a kernel does not write keep the caller's values. Pooled device memory is
zeroed (vkCmdFillBuffer) before a new array sees it.

Launch graphs (graph.py) are secondary command buffers recorded once; a replay executes one
from the open batch, ordered against the batch's other work by the same hazard tracking.

Device loss or a hang surfaces at the next synchronisation, naming the launch(es) concerned;
the device is then torn down and the next use creates a fresh one (arrays on the old device
are gone). Out-of-memory frees the pool; the next launch starts clean.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import knobs
from .. import capturing
from . import faults, hostcopy, timeline
from .abi import Binder, BoundArguments, DeviceView, check_repeat, check_timeout
from .batch import (ALL_READ_WRITE, ALL_STAGES, BOTTOM, DEVICE_READ_WRITE, DEVICE_STAGES, TOP,
                    Barrier, PendingTimes, Submission)
from .capabilities import Capabilities
from .device import MEMORY_DEVICE_LOCAL, MEMORY_HOST_COHERENT, MEMORY_HOST_VISIBLE, Device
from .errors import (ArgumentError, DeviceLost, OutOfDeviceMemory, OutOfHostMemory,
                     VulkanError, VulkanTimeout, check)
from .ext import ffi, lib, vk
from .graph import GraphRecording
from .harvest import RECORD_WORDS
from .instance import Instance
from .memory import Allocation, Memory
from .pipeline import Pipelines

TRANSFER_MODES = ("auto", "direct", "staged")
MAX_BATCH_DISPATCHES = 256      # a batch this large is submitted without waiting
# ... and one holding this many bytes of buffers that wait for it (staging copies of uploads,
# arrays freed while it may use them): without launches nothing else would submit it, and 50
# uploads into one 16 MiB array kept 816 MiB alive
MAX_BATCH_HELD_BYTES = 256 << 20
MAX_IN_FLIGHT = 8               # submissions queued on the GPU before the oldest is waited for
EAGER_MS = 0.05                 # launches this long on the device are submitted eagerly
LAZY_BATCH = 32                 # shorter ones are submitted in batches of this many
SPIN_S = 200e-6                 # a synchronisation polls the fence this long before blocking
TIMEOUT_S = 10.0                # how long a synchronisation waits for one submission
CPU_TIMEOUT_S = 120.0           # the same on a CPU device, which compiles at first dispatch
# ... and by default for a submission there that holds a pipeline's first dispatch: lavapipe
# compiles the shader then, inside the wait, and a large kernel's cold compile took over 120 s
CPU_COMPILE_TIMEOUT_S = 900.0


@dataclass
class Prepared:
    """A checked, bound launch (`VulkanRuntime.prepare`). With only device arrays in the
    push-constant ABI, `push` holds the final argument block and `accesses` the byte ranges
    it touches, so recording it again costs only the Vulkan calls."""
    ctx: Any
    pipeline: Any
    grid: tuple[int, int, int]
    mode: str
    bound: BoundArguments
    repeat: int
    push: bytes | None
    accesses: list
    checked: dict | None = None      # the ABI's "checked" entry: a bounds-checked kernel
    # descriptor ABI, device arrays only: (binding, allocation, offset, range) of each buffer
    descriptors: list | None = None


@dataclass(frozen=True)
class LaunchResult:
    device_times_ms: tuple[float, ...]   # per dispatch, from timestamp queries (nan if unsupported)


class _Context:
    """One device and everything created on it; replaced wholesale after device loss."""

    def __init__(self, device_spec: str | None, transfer: str):
        self.instance = Instance()
        self.device: Device | None = None
        self.alive = True
        try:
            self.device = Device(self.instance, device_spec)
            self.memory = Memory(self.device)
            self.pipelines = Pipelines(self.device)
            self.direct = _use_direct(self.device, transfer)
            self._create_commands()
        except BaseException:
            self.destroy()
            raise

    def _create_commands(self) -> None:
        dev = self.device.handle
        pool_info = ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
            "queueFamilyIndex": self.device.queue_family})
        pool = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(dev, pool_info, ffi.NULL, pool), "vkCreateCommandPool")
        self.command_pool = pool[0]
        self.submissions: list[Submission] = []       # every one created (for destroy)
        self.idle: list[Submission] = []
        self.recording: Submission | None = None
        self.in_flight: deque[Submission] = deque()
        # Reused per launch (the hot path allocates no structs beyond copy regions).
        self.begin_info = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})
        self.barrier = Barrier(DEVICE_READ_WRITE, DEVICE_STAGES)     # between commands
        self.host_barrier = Barrier(ALL_READ_WRITE, ALL_STAGES)      # at the end of a batch
        self.copy_region = ffi.new("VkBufferCopy*")
        bits = self.device.timestamp_bits
        self.timestamp_mask = (1 << bits) - 1 if bits < 64 else (1 << 64) - 1
        self.timestamp_period_ns = self.device.capabilities.timestamp_period_ns
        self.host_query_reset = bool(self.device.support.features.get("hostQueryReset"))
        self.grids_ok: set[tuple[int, int, int]] = set()     # within the device's limits
        self.eager = True           # the last finished launch was long: submit at once
        self.array_count = 0        # allocations held by device arrays
        self.faults: list = []      # KernelFaults of retired checked launches, not yet raised
        self.next_waits: list = []  # (timeline semaphore, value): the next submission waits
        self.torch_sync = None      # interop.CudaSync once torch shares an array of this device
        self.array_bytes = 0
        self.graphs: set[GraphRecording] = set()    # launch graphs not yet destroyed

    def submission(self) -> Submission:
        if self.idle:
            return self.idle.pop()
        sub = Submission(self.device.handle, self.command_pool, self.host_query_reset,
                         self.timestamp_period_ns, self.timestamp_mask)
        self.submissions.append(sub)
        return sub

    def all_done(self) -> bool:
        return all(lib.vkGetFenceStatus(self.device.handle, s.fences[0]) in (0, -4)
                   for s in self.in_flight)

    def destroy(self, healthy: bool = False) -> None:
        """Destroy everything (also valid after device loss). Never call with work in flight.
        `healthy`: the device was not lost (CUDA may then be waited for)."""
        self.alive = False
        if self.device is not None and self.device.handle is not None:
            dev = self.device.handle
            if hasattr(self, "pipelines"):
                self.pipelines.destroy()
            if hasattr(self, "memory"):
                self.memory.trim()
            for sub in getattr(self, "submissions", ()):
                sub.destroy()
            for graph in list(getattr(self, "graphs", ())):
                graph.destroy_with_context()
            if getattr(self, "torch_sync", None) is not None:
                self.torch_sync.destroy(wait=healthy)
                self.torch_sync = None
            if hasattr(self, "command_pool"):
                lib.vkDestroyCommandPool(dev, self.command_pool, ffi.NULL)
            self.device.destroy()
        self.instance.destroy()


def push_size(abi: dict) -> int:
    """Bytes of push constants a launch with this ABI takes: the argument block, or in
    arg_buffer mode the 8-byte address of the buffer holding it."""
    return 8 if abi["mode"] == "arg_buffer" else abi["size"]


class VulkanRuntime:
    """Runs compiled kernels on one Vulkan device (chosen by `device` or $PYCOOP_DEVICE).

    `transfer`: "direct" (kernels use host-visible memory in place: no copies), "staged"
    (device-local buffers, copied through host-visible staging buffers) or "auto" (direct
    where device-local memory is host-visible anyway: CPU and integrated devices). Default
    $PYCOOP_VK_TRANSFER, else auto. Thread-safe (launches are serialised).
    """

    def __init__(self, device: str | None = None, transfer: str | None = None):
        self._device_spec = device
        self._transfer = transfer or knobs.vk_transfer()
        if self._transfer not in TRANSFER_MODES:
            raise ValueError(f"transfer mode {self._transfer!r} not in {TRANSFER_MODES}")
        self._lock = threading.RLock()
        self._ctx: _Context | None = None
        self._held = 0              # open `batch()` blocks
        ctx = self._context()       # fail now, not at the first launch, if there is no device
        # default wait for one submission at a synchronisation; CPU implementations (lavapipe)
        # compile a kernel at its first dispatch, which can take seconds on a busy machine
        self.timeout_s = CPU_TIMEOUT_S if ctx.device.info.device_type == "cpu" else TIMEOUT_S

    def _context(self) -> _Context:
        if self._ctx is None:
            self._ctx = _Context(self._device_spec, self._transfer)
        return self._ctx

    @property
    def context(self) -> _Context:
        """The live device context (arrays remember theirs: after device loss it changes)."""
        with self._lock:
            return self._context()

    @property
    def capabilities(self) -> Capabilities:
        with self._lock:
            return self._context().device.capabilities

    @property
    def transfer_mode(self) -> str:
        with self._lock:
            return "direct" if self._context().direct else "staged"

    def stats(self) -> dict[str, Any]:
        """Pipeline cache hits/misses, memory (to spot leaks) and queued work. `live_*`: every
        Vulkan buffer that exists (in use or pooled); `pooled_*`: free ones kept for reuse;
        `array_*`: buffers held by device arrays; `pending_launches`: recorded or submitted
        launches not yet seen complete; `barriers`: pipeline barriers recorded so far between
        dependent commands; `torch_sync`: how launches on arrays torch shares are ordered
        against torch's stream ("semaphore", or "coarse (why)"; None until torch shares one);
        `graph_count`: launch graphs whose command buffers exist (freed ones go once no
        replay of theirs is in flight)."""
        with self._lock:
            ctx = self._context()
            memory = ctx.memory
            pending = sum(len(s.launches) for s in ctx.in_flight)
            if ctx.recording is not None:
                pending += len(ctx.recording.launches)
            return {"backend": "vulkan", "device": ctx.device.info.name,
                    "pipeline_hits": ctx.pipelines.hits, "pipeline_misses": ctx.pipelines.misses,
                    "live_allocations": memory.live_count, "live_bytes": memory.live_bytes,
                    "pooled_count": memory.pooled_count, "pooled_bytes": memory.pooled_bytes,
                    "array_count": ctx.array_count, "array_bytes": ctx.array_bytes,
                    "pending_launches": pending, "graph_count": len(ctx.graphs),
                    "barriers": sum(s.barriers for s in ctx.submissions),
                    "torch_sync": ctx.torch_sync.describe() if ctx.torch_sync else None,
                    "heap_usage": ctx.device.heap_usage()}

    def pipeline_statistics(self, spv: bytes, entry: str, abi: dict | Binder) -> list[dict]:
        """The driver's statistics of the pipeline a launch of `spv` with this ABI would use
        (Pipelines.statistics); no GPU work."""
        binder = abi if isinstance(abi, Binder) else Binder(abi)
        abi = binder.abi
        with self._lock:
            ctx = self._context()
            return ctx.pipelines.statistics(
                bytes(spv), entry, abi.get("required_subgroup_size"),
                push_size(abi), abi.get("specialization", ()),
                binder.bindings if binder.descriptors else None)

    def close(self) -> None:
        """Run what is queued (its launches report as at any synchronisation: nothing is
        dropped), then destroy the device's objects."""
        with self._lock:
            try:
                self._synchronize()
            finally:
                if self._ctx is not None:
                    ctx, self._ctx = self._ctx, None
                    lib.vkDeviceWaitIdle(ctx.device.handle)
                    ctx.destroy(healthy=True)

    # ------------------------------------------------------------------ launches
    def launch(self, spv: bytes, entry: str, grid: tuple[int, int, int], abi: dict,
               args: list, *, timeout_s: float | None = None, repeat: int = 1) -> LaunchResult:
        """Dispatch `grid` workgroups of the kernel and wait (at most `timeout_s`, by default
        the runtime's `timeout_s`). NumPy buffers written by it
        (access "write" or "readwrite") are copied back into the same arrays. `repeat`
        dispatches it that many times back to back on the same buffers (one upload, one
        readback; each dispatch sees the previous one's writes), each timed."""
        pending = self.enqueue(spv, entry, grid, abi, args, repeat=repeat, label="kernel")
        self._synchronize(timeout_s)
        return LaunchResult(pending.times_ms)

    def enqueue(self, spv: bytes, entry: str, grid: tuple[int, int, int], abi: dict | Binder,
                args: list, *, repeat: int = 1, label: str = "kernel",
                timeout_s: float | None = None) -> PendingTimes:
        """Record a launch into the open batch and return without waiting, unless an argument
        is a NumPy array: then the batch is submitted and waited for, and results are in the
        arrays on return. The returned PendingTimes gets its device times at the
        synchronisation that sees the launch complete. `abi` may be a Binder made once for
        the kernel (faster)."""
        return self.record(self.prepare(spv, entry, grid, abi, args, repeat), label, timeout_s)

    def prepare(self, spv: bytes, entry: str, grid: tuple[int, int, int], abi: dict | Binder,
                args: list, repeat: int = 1) -> Prepared:
        """Check and bind a launch (no GPU work): `record` records it, and may record it again
        (same arguments) when it has only device arrays."""
        binder = abi if isinstance(abi, Binder) else Binder(abi)
        bound = binder.bind(args)
        abi = binder.abi
        grid = _check_grid(grid)
        if repeat != 1:
            repeat = check_repeat(repeat)
        with self._lock:
            ctx = self._context()
            caps = ctx.device.capabilities
            if grid not in ctx.grids_ok:
                for axis, (n, limit) in enumerate(zip(grid, caps.max_compute_workgroup_count)):
                    if n > limit:
                        raise ArgumentError(f"grid[{axis}] = {n} exceeds the device limit {limit}")
                if len(ctx.grids_ok) < 1024:
                    ctx.grids_ok.add(grid)
            push = push_size(abi)
            if push > caps.max_push_constants_size:
                raise ArgumentError(
                    f"kernel needs {push} bytes of push constants; {caps.device_name} "
                    f"allows {caps.max_push_constants_size} (compile with arg_buffer mode)")
            device_only = abi["mode"] == "push_constants"
            accesses = []
            descriptors = [] if binder.descriptors else None
            if binder.descriptors and binder.bindings > caps.max_per_stage_storage_buffers:
                raise ArgumentError(
                    f"kernel binds {binder.bindings} storage buffers; {caps.device_name} allows "
                    f"{caps.max_per_stage_storage_buffers} per shader stage "
                    "(maxPerStageDescriptorStorageBuffers): use the device-address ABI")
            for b in bound.buffers:
                view = b.array
                if descriptors is not None:
                    _check_descriptor_range(caps, b)
                if type(view) is not DeviceView:
                    device_only = False
                    continue
                if view.allocation.owner is not ctx.memory:
                    raise ArgumentError(f"parameter {b.names[0]}: the array was made on a device "
                                        "that has since been lost or closed; make it again")
                if descriptors is not None:
                    descriptors += _descriptors(b, view.allocation, view.offset, view.nbytes)
                bound.set_address(b, view.address)
                if view.nbytes:     # a write conflicts with any later access: one entry
                    accesses.append((id(view.allocation), view.offset, view.offset + view.nbytes,
                                     b.readback))
            try:
                pipeline = ctx.pipelines.get(bytes(spv), entry, abi.get("required_subgroup_size"),
                                             push, abi.get("specialization", ()),
                                             binder.bindings if binder.descriptors else None)
            except (DeviceLost, VulkanTimeout):
                self._abandon()
                raise
        return Prepared(ctx, pipeline, grid, abi["mode"], bound, repeat,
                        bytes(bound.block) if device_only else None, accesses, abi.get("checked"),
                        descriptors if device_only else None)

    def record(self, prepared: Prepared, label: str = "kernel",
               timeout_s: float | None = None) -> PendingTimes:
        """Record a prepared launch (see `enqueue`)."""
        with self._lock:
            ctx = self._context()
            if prepared.ctx is not ctx:
                raise ArgumentError("the launch was prepared on a device that has since been "
                                    "lost or closed")
            pending = PendingTimes(label)
            host = prepared.push is None
            checked = prepared.checked
            try:
                push = prepared.push
                sub = self._open(ctx, 2 * prepared.repeat)      # the launch's submission
                if checked is not None:     # a fresh fault record per launch
                    records, index, address = self._fault_record(ctx, sub)
                    at = checked["fault_offset"]
                    if host:
                        prepared.bound.block[at:at + 8] = address
                    else:
                        push = push[:at] + address + push[at + 8:]
                if host:
                    self._record_launch(ctx, prepared.pipeline, prepared.grid, prepared.mode,
                                        prepared.bound, prepared.repeat, pending,
                                        None if checked is None else label)
                else:
                    self._record_dispatch(ctx, sub, prepared.pipeline, prepared.grid, push,
                                          prepared.accesses, prepared.repeat, pending,
                                          prepared.descriptors)
                if checked is not None:
                    assert ctx.recording is sub
                    sub.after.append(lambda: records[index, 0] and self._fault(
                        ctx, pending, faults.read_fault(records[index], checked["ops"],
                                                        prepared.grid, label)))
            except (DeviceLost, VulkanTimeout):
                self._abandon()
                raise
            except (OutOfDeviceMemory, OutOfHostMemory):
                ctx.memory.trim()
                raise
            if host or self._should_submit(ctx):
                self._flush(ctx)
        if host:
            self._synchronize(timeout_s)
        return pending

    # ------------------------------------------------------------------ launch graphs
    def begin_graph(self) -> GraphRecording:
        """A new launch graph to record into (see graph.py)."""
        with self._lock:
            ctx = self._context()
            graph = GraphRecording(ctx)
            ctx.graphs.add(graph)
            return graph

    def _graph_context(self, graph: GraphRecording) -> _Context:
        ctx = self._context()
        if graph.ctx is not ctx or graph.destroyed:
            raise capturing.CaptureError("the launch graph was recorded on a device that has "
                                         "since been lost or closed, or it was freed\n  hint: "
                                         "capture it again")
        return ctx

    def capture_launch(self, graph: GraphRecording, prepared: Prepared, label: str) -> None:
        """Record a prepared launch on device arrays into `graph` instead of the open batch:
        a barrier if it depends on an earlier launch of the graph, then its dispatch. Its
        push constants (scalars included) are recorded as they are now."""
        with self._lock:
            ctx = self._graph_context(graph)
            if prepared.ctx is not ctx:
                raise ArgumentError("the launch was prepared on a device that has since been "
                                    "lost or closed")
            push, checked = prepared.push, prepared.checked
            accesses = prepared.accesses
            if checked is not None:             # its own fault record, harvested at each replay
                slab, offset = self._graph_fault_record(ctx, graph, checked["ops"],
                                                        prepared.grid, label)
                address = (slab.address + offset).to_bytes(8, "little")
                at = checked["fault_offset"]
                if push is None:
                    prepared.bound.block[at:at + 8] = address
                else:
                    push = push[:at] + address + push[at + 8:]
                # noted as written, so that the harvest after the launches waits for them
                accesses = (*accesses, (id(slab), offset, offset + faults.FAULT_BYTES, True))
            if push is None:        # arg_buffer ABI: the argument block in a buffer of the graph
                block = bytes(prepared.bound.block)
                arguments = ctx.memory.acquire("unified" if ctx.direct else "host", len(block))
                graph.allocations.append(arguments)
                ffi.memmove(arguments.mapped, block, len(block))
                push = arguments.address.to_bytes(8, "little")
            self._touch(ctx, graph, accesses)
            pipeline, cmd = prepared.pipeline, graph.cmd
            if not pipeline.dispatched:
                graph.first_dispatches.append(label)
                pipeline.dispatched = True
            if graph.bound_pipeline is not pipeline:
                lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
                graph.bound_pipeline = pipeline
                graph.last_push = None
            if prepared.descriptors is not None:
                self._bind_descriptors(ctx, graph, pipeline, prepared.descriptors)
            if push and push != graph.last_push:
                lib.vkCmdPushConstants(cmd, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                       len(push), push)
                graph.last_push = push
            lib.vkCmdDispatch(cmd, *prepared.grid)
            graph.note(accesses)
            graph.dispatches += 1

    def capture_fill(self, graph: GraphRecording, allocation: Allocation, offset: int,
                     nbytes: int) -> None:
        """Record zeroing `nbytes` (a multiple of 4) at `offset` of `allocation` into `graph`."""
        with self._lock:
            ctx = self._graph_context(graph)
            access = ((id(allocation), offset, offset + nbytes, True),)
            self._touch(ctx, graph, access)
            lib.vkCmdFillBuffer(graph.cmd, allocation.buffer, offset, nbytes, 0)
            graph.note(access)
            graph.dispatches += 1

    def capture_copy(self, graph: GraphRecording, src: Allocation, src_offset: int,
                     dst: Allocation, dst_offset: int, nbytes: int) -> None:
        """Record a device-to-device copy into `graph`."""
        if nbytes:
            with self._lock:
                ctx = self._graph_context(graph)
                graph.note(((id(src), src_offset, src_offset + nbytes, False),
                            (id(dst), dst_offset, dst_offset + nbytes, True)))
                graph.dispatches += self._copy_apart(ctx, graph, src, src_offset, dst,
                                                     dst_offset, nbytes,
                                                     graph.allocations.append)

    def _graph_fault_record(self, ctx: _Context, graph: GraphRecording, ops: dict,
                            grid: tuple, label: str) -> tuple[Allocation, int]:
        """A fault record for a checked launch of `graph`: the slab and byte offset of the next
        record of the graph's slab, a new zeroed slab (device memory, with room for the
        harvest's replay counter after its records) when the last one is full."""
        if graph.slab is None or graph.slab_used == faults.SLAB_RECORDS:
            size = faults.SLAB_RECORDS * faults.FAULT_BYTES + 4
            slab = ctx.memory.acquire("unified" if ctx.direct else "device", size)
            graph.allocations.append(slab)
            if slab.mapped is not None:
                hostcopy.zeroed_words(slab.mapped, slab.size)
            else:                   # zeroed in the open batch, before any replay
                sub = self._open(ctx)
                self._touch(ctx, sub, ((id(slab), 0, slab.size, True),))
                lib.vkCmdFillBuffer(sub.cmd, slab.buffer, 0, slab.size, 0)
            graph.slab, graph.slab_used = slab, 0
        offset = graph.slab_used * faults.FAULT_BYTES
        graph.slab_used += 1
        graph.records.append((graph.slab, offset, ops, grid, label))
        return graph.slab, offset

    def end_graph(self, graph: GraphRecording, harvest: Any = None) -> None:
        """Finish recording `graph`: after checked launches, the fault harvest (harvest.py;
        `harvest`: its compiled module, with `spv` and `abi`), one per slab of records, each
        with its ring of slots in host-visible memory."""
        with self._lock:
            ctx = self._graph_context(graph)
            if graph.records:
                if harvest is None:
                    raise ArgumentError("a launch graph of checked launches needs the fault "
                                        "harvest's module to end it (harvest.py)")
                slabs = graph.slabs()
                slots = faults.ring_slots(max(count for _, count in slabs))
                u32 = np.dtype(np.uint32)
                first = 0
                for slab, count in slabs:
                    nbytes = slots * count * faults.FAULT_BYTES
                    ring = ctx.memory.acquire("unified" if ctx.direct else "host", nbytes)
                    graph.allocations.append(ring)
                    words = hostcopy.zeroed_words(ring.mapped, nbytes)
                    graph.rings.append((words.reshape(slots, count, RECORD_WORDS), first))
                    first += count
                    prepared = self.prepare(
                        harvest.spv, "main", (1, 1, 1), harvest.abi,
                        [DeviceView(slab, 0, (count * RECORD_WORDS + 1) * 4, u32),
                         DeviceView(ring, 0, nbytes, u32), count, slots])
                    self.capture_launch(graph, prepared, "the graph's fault harvest")
                graph.slots = slots
            graph.end()

    def replay(self, graph: GraphRecording, label: str) -> PendingTimes:
        """Queue one run of a recorded graph into the open batch, in order with the other
        work: a barrier first where it depends on earlier work (the batch's tracker sees the
        union of its ranges), the graph between two timestamps (its PendingTimes has one
        time: first command's start to last one's end). With checked launches the graph ends
        with its fault harvest, and the replay's slot of the ring is read when the batch is
        done. Returns without waiting (unless every slot of the ring is still unread)."""
        with self._lock:
            ctx = self._graph_context(graph)
            if graph.rings:
                self._ring_room(ctx, graph)
            pending = PendingTimes(label)
            sub = self._open(ctx, 2)
            self._touch(ctx, sub, graph.touches)
            first, pool, cmd = sub.queries_used, sub.query_pool, sub.cmd
            lib.vkCmdWriteTimestamp(cmd, TOP, pool, first)
            lib.vkCmdExecuteCommands(cmd, 1, graph.command_buffers)
            lib.vkCmdWriteTimestamp(cmd, BOTTOM, pool, first + 1)
            sub.first_dispatches += graph.first_dispatches     # compiled by its first replay
            graph.first_dispatches = []
            sub.bound_pipeline = sub.last_push = None   # a secondary leaves the state undefined
            sub.queries_used += 2
            sub.dispatches += max(1, graph.dispatches)
            pending._batch, pending._first, pending._count = sub.times, first, 1
            sub.launches.append(pending)
            if graph.rings:
                sub.after.append(self._replay_faults(ctx, graph, pending, label))
            if self._should_submit(ctx):
                self._flush(ctx)
        return pending

    def _ring_room(self, ctx: _Context, graph: GraphRecording) -> None:
        """Wait until the ring slot the next replay's harvest writes has been read: the
        oldest replays' batches are submitted and retired until it has."""
        while graph.replays - graph.harvested >= graph.slots:
            self._flush(ctx)
            if not ctx.in_flight:       # (a failed batch: nothing left to read)
                return
            self._retire(ctx, ctx.in_flight[0])

    def _replay_faults(self, ctx: _Context, graph: GraphRecording, pending: PendingTimes,
                       label: str):
        """What reads the faults of the replay being queued, once its batch is done: its
        slot of each ring, zeroed again for the replay that will reuse it."""
        seq = graph.replays
        graph.replays += 1
        slot = seq % graph.slots

        def read():
            graph.harvested = seq + 1
            for ring, first in graph.rings:
                found = ring[slot]
                if not found[:, 0].any():
                    continue
                for record, (_, _, ops, grid, launch) in zip(found, graph.records[first:]):
                    self._fault(ctx, pending, faults.read_fault(record, ops, grid,
                                                                f"{launch}; {label}"))
                found[:] = 0
        return read

    def free_graph(self, graph: GraphRecording) -> None:
        """Destroy a graph's command buffer, descriptor sets and memory once every queued
        replay of it has finished (at once if nothing is queued)."""
        with self._lock:
            ctx = graph.ctx
            if graph.destroyed or ctx is not self._ctx or not ctx.alive:
                graph.destroyed = True
                ctx.graphs.discard(graph)
                return
            if ctx.recording is not None:
                ctx.recording.after.append(graph.destroy)
            elif ctx.in_flight:
                ctx.in_flight[-1].after.append(graph.destroy)
            else:
                graph.destroy()

    @staticmethod
    def _fault_record(ctx: _Context, sub: Submission) -> tuple[np.ndarray, int, bytes]:
        """A zeroed fault record for a checked launch recorded into `sub`, the next of the
        submission's slab (SLAB_RECORDS records in host-visible memory, zeroed when taken):
        the slab's records (u32, host-mapped), the record's index and its device address
        (8 bytes, as the argument block holds it)."""
        if sub.fault_slab is None or sub.fault_slots == faults.SLAB_RECORDS:
            nbytes = faults.SLAB_RECORDS * faults.FAULT_BYTES
            slab = ctx.memory.acquire("unified" if ctx.direct else "host", nbytes)
            sub.hold(slab)
            sub.fault_slab, sub.fault_slots = slab, 0
            sub.fault_words = hostcopy.zeroed_words(slab.mapped, nbytes).reshape(
                faults.SLAB_RECORDS, RECORD_WORDS)
        index = sub.fault_slots
        sub.fault_slots += 1
        address = sub.fault_slab.address + index * faults.FAULT_BYTES
        return sub.fault_words, index, address.to_bytes(8, "little")

    @staticmethod
    def _fault(ctx: _Context, pending: PendingTimes, fault) -> None:
        """Note a checked launch's fault (raised by the next synchronize)."""
        if fault is not None:
            if pending.error is None:
                pending.error = fault
            ctx.faults.append(fault)

    def _should_submit(self, ctx: _Context) -> bool:
        """Keep the GPU busy without a submission per launch: submit when the batch is large,
        or when fewer than two batches are still running (after retiring finished ones) and
        either the last finished launch took long on the device (each submission then pays
        for itself) or the batch has grown to LAZY_BATCH launches."""
        dispatches = ctx.recording.dispatches
        if dispatches >= MAX_BATCH_DISPATCHES or ctx.recording.held >= MAX_BATCH_HELD_BYTES:
            return True
        if self._held:
            return False
        if not ctx.eager and dispatches < LAZY_BATCH:
            return False
        self._retire_finished(ctx)
        return len(ctx.in_flight) < 2

    def _retire_finished(self, ctx: _Context) -> None:
        """Retire the submissions the GPU has finished, oldest first, without waiting."""
        in_flight, dev = ctx.in_flight, ctx.device.handle
        while in_flight and lib.vkGetFenceStatus(dev, in_flight[0].fences[0]) == 0:
            self._retire(ctx, in_flight[0])

    def _limit_held(self, ctx: _Context) -> None:
        """Submit the open batch once the buffers waiting for it reach MAX_BATCH_HELD_BYTES
        (even inside `batch()`), and give back those of finished batches."""
        if ctx.recording is None or ctx.recording.held < MAX_BATCH_HELD_BYTES:
            return
        self._flush(ctx)
        self._retire_finished(ctx)

    def _open(self, ctx: _Context, queries: int = 0) -> Submission:
        """The recording submission, begun if needed, with room for `queries` timestamps."""
        sub = ctx.recording
        if sub is not None and sub.queries_used + queries > sub.capacity:
            self._flush(ctx)
            sub = None
        if sub is None:
            if not ctx.idle and len(ctx.in_flight) >= MAX_IN_FLIGHT:
                self._retire(ctx, ctx.in_flight[0])
            sub = ctx.submission()
            sub.reserve_queries(queries)
            sub.begin(ctx.begin_info)
            ctx.recording = sub
        return sub

    @staticmethod
    def _touch(ctx: _Context, sub: Submission, accesses) -> None:
        """Insert a barrier if any (allocation, lo, hi, write) access conflicts with an earlier
        command of the batch since the last barrier, then note the accesses."""
        hazards = sub.hazards
        if hazards.sole is accesses:
            # Only this same list was noted since the last barrier (a loop of one prepared
            # launch): a write conflicts with itself, reads alone never do, and after a
            # barrier the noted ranges are this list again.
            for access in accesses:
                if access[3]:
                    sub.barrier(ctx.barrier)
                    hazards.sole = accesses
                    for key, lo, hi, write in accesses:
                        hazards.add(key, lo, hi, write)
                    return
            return
        fresh = hazards.empty()
        for key, lo, hi, write in accesses:
            if hazards.conflicts(key, lo, hi, write):
                sub.barrier(ctx.barrier)
                fresh = True
                break
        for key, lo, hi, write in accesses:
            hazards.add(key, lo, hi, write)
        hazards.sole = accesses if fresh else None

    def _copy_apart(self, ctx: _Context, target, src: Allocation, src_offset: int,
                    dst: Allocation, dst_offset: int, size: int, keep) -> int:
        """`_copy` into a batch or graph `target`, through a temporary buffer (given to `keep`
        until `target` is done with it) where the ranges overlap in one buffer, which
        vkCmdCopyBuffer does not allow. Returns the copies recorded."""
        if not (src is dst and src_offset < dst_offset + size and dst_offset < src_offset + size):
            self._copy(ctx, target, src, src_offset, dst, dst_offset, size)
            return 1
        between = ctx.memory.acquire("device", size)
        keep(between)
        self._copy(ctx, target, src, src_offset, between, 0, size)
        self._copy(ctx, target, between, 0, dst, dst_offset, size)
        return 2

    def _copy(self, ctx: _Context, sub: Submission, src: Allocation, src_offset: int,
              dst: Allocation, dst_offset: int, size: int) -> None:
        self._touch(ctx, sub, ((id(src), src_offset, src_offset + size, False),
                               (id(dst), dst_offset, dst_offset + size, True)))
        region = ctx.copy_region
        region.srcOffset, region.dstOffset, region.size = src_offset, dst_offset, size
        lib.vkCmdCopyBuffer(sub.cmd, src.buffer, dst.buffer, 1, region)

    def _record_launch(self, ctx: _Context, pipeline: Any, grid: tuple[int, int, int],
                       mode: str, bound: BoundArguments, repeat: int,
                       pending: PendingTimes, checked: str | None = None) -> None:
        """Record a launch with NumPy arguments: uploads, the dispatches, readbacks (copied
        into the arrays when the submission completes). `checked` (the launch's label): each
        buffer gets a red zone, verified after the launch."""
        memory = ctx.memory
        sub = self._open(ctx, 2 * repeat)
        accesses, readbacks, zones = [], [], []
        descriptors = [] if pipeline.set_layout is not None else None
        pad = faults.RED_ZONE_BYTES + 4 if checked else 0
        for b in bound.buffers:
            view = b.array
            if type(view) is DeviceView:
                if view.nbytes:     # a write conflicts with any later access: one entry
                    accesses.append((id(view.allocation), view.offset, view.offset + view.nbytes,
                                     b.readback))
                bound.set_address(b, view.address)
                if descriptors is not None:
                    descriptors += _descriptors(b, view.allocation, view.offset, view.nbytes)
                continue
            array, nbytes = view, view.nbytes
            # Every NumPy buffer is uploaded, even write-only ones: what the kernel does not
            # write must come back as the caller's own values, never as other memory.
            if ctx.direct:
                target = memory.acquire("unified", nbytes + pad)
                sub.hold(target)
                if nbytes:
                    hostcopy.to_mapped(target.mapped, array)
            elif (target := self._bar_target(memory, array, nbytes + pad)) is not None:
                sub.hold(target)
            else:
                target = memory.acquire("device", nbytes + pad)
                sub.hold(target)
                if nbytes:
                    staging = memory.acquire("host", nbytes)
                    sub.hold(staging)
                    hostcopy.to_mapped(staging.mapped, array)
                    self._copy(ctx, sub, staging, 0, target, 0, nbytes)
            bound.set_address(b, target.address)
            if descriptors is not None:
                descriptors += _descriptors(b, target, 0, nbytes)
            if nbytes:
                accesses.append((id(target), 0, nbytes, b.readback))
                if b.readback:
                    readbacks.append((array, target))
            if checked:
                zones.append((b.names[0], nbytes, target))
                self._fill_red_zone(ctx, sub, target, nbytes)
        if mode == "arg_buffer":
            arg_buffer = memory.acquire("unified" if ctx.direct else "host", len(bound.block))
            sub.hold(arg_buffer)
            ffi.memmove(arg_buffer.mapped, bytes(bound.block), len(bound.block))
            push = arg_buffer.address.to_bytes(8, "little")
        else:
            push = bytes(bound.block)
        self._record_dispatch(ctx, sub, pipeline, grid, push, accesses, repeat, pending,
                              descriptors)
        for array, target in readbacks:
            self._read_into(ctx, sub, target, 0, array)
        for name, nbytes, target in zones:
            zone = np.empty(faults.RED_ZONE_BYTES // 4, np.uint32)
            self._read_into(ctx, sub, target, faults.red_zone_offset(nbytes), zone)
            sub.after.append(lambda zone=zone, name=name, nbytes=nbytes: self._fault(
                ctx, pending, faults.check_red_zone(zone, name, nbytes, checked)))

    @staticmethod
    def _bar_target(memory, array: np.ndarray, size: int) -> Allocation | None:
        """A device buffer of `size` bytes the host writes `array` into through the BAR (see
        memory.py), or None where the device has no such memory or it is full."""
        if not memory.bar or not array.nbytes:
            return None
        try:
            target = memory.acquire("bar", size)
        except OutOfDeviceMemory:
            return None
        hostcopy.to_mapped(target.mapped, array)
        return target

    def _fill_red_zone(self, ctx: _Context, sub: Submission, target: Allocation,
                       nbytes: int) -> None:
        """Write the guard pattern after a staged buffer's `nbytes` bytes."""
        at = faults.red_zone_offset(nbytes)
        if target.mapped is not None and ctx.direct:
            ffi.memmove(target.mapped + at, np.full(faults.RED_ZONE_BYTES // 4, faults.RED_ZONE_WORD,
                                                    np.uint32).tobytes(), faults.RED_ZONE_BYTES)
            return
        self._touch(ctx, sub, ((id(target), at, at + faults.RED_ZONE_BYTES, True),))
        lib.vkCmdFillBuffer(sub.cmd, target.buffer, at, faults.RED_ZONE_BYTES, faults.RED_ZONE_WORD)

    def _record_dispatch(self, ctx: _Context, sub: Submission, pipeline: Any,
                         grid: tuple[int, int, int], push: bytes, accesses: list, repeat: int,
                         pending: PendingTimes, descriptors: list | None = None) -> None:
        """A barrier if a hazard needs one, the pipeline if not bound, the descriptor set
        (descriptor ABI), the push constants, and `repeat` timed dispatches."""
        self._touch(ctx, sub, accesses)
        cmd = sub.cmd
        if not pipeline.dispatched:
            sub.first_dispatches.append(pending.label)
            pipeline.dispatched = True
        if sub.bound_pipeline is not pipeline:
            lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
            sub.bound_pipeline = pipeline
            sub.last_push = None
        if descriptors is not None:
            self._bind_descriptors(ctx, sub, pipeline, descriptors)
        if push and push is not sub.last_push:    # the same bytes are still pushed: skip
            lib.vkCmdPushConstants(cmd, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                   len(push), push)
            sub.last_push = push
        first = sub.queries_used
        pool = sub.query_pool
        for i in range(repeat):
            if i:
                sub.barrier(ctx.barrier)     # each repeat sees the previous one's writes
            lib.vkCmdWriteTimestamp(cmd, TOP, pool, first + 2 * i)
            lib.vkCmdDispatch(cmd, *grid)
            lib.vkCmdWriteTimestamp(cmd, BOTTOM, pool, first + 2 * i + 1)
        if repeat > 1:
            self._touch(ctx, sub, accesses)
        sub.queries_used += 2 * repeat
        sub.dispatches += repeat
        pending._batch, pending._first, pending._count = sub.times, first, repeat
        sub.launches.append(pending)

    @staticmethod
    def _bind_descriptors(ctx: _Context, sub: Submission, pipeline: Any,
                          descriptors: list) -> None:
        """A fresh set 0 from the submission's pools, written with `descriptors` ((binding,
        allocation, offset, range) per buffer parameter) and bound for the dispatch."""
        dset = ffi.new("VkDescriptorSet[1]", [sub.descriptor_set(pipeline.set_layout,
                                                                 pipeline.bindings)])
        if descriptors:
            infos = ffi.new("VkDescriptorBufferInfo[]", [
                {"buffer": allocation.buffer, "offset": offset, "range": size}
                for _, allocation, offset, size in descriptors])
            writes = ffi.new("VkWriteDescriptorSet[]", [
                {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": dset[0],
                 "dstBinding": binding, "descriptorCount": 1,
                 "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": infos + i}
                for i, (binding, _, _, _) in enumerate(descriptors)])
            lib.vkUpdateDescriptorSets(ctx.device.handle, len(descriptors), writes, 0, ffi.NULL)
        lib.vkCmdBindDescriptorSets(sub.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout,
                                    0, 1, dset, 0, ffi.NULL)

    def _read_into(self, ctx: _Context, sub: Submission, source: Allocation, offset: int,
                   out: np.ndarray) -> None:
        """Record a copy of `out.nbytes` bytes at `offset` of `source` into `out` (done on
        the host once the submission completes)."""
        nbytes = out.nbytes
        if not nbytes:
            return
        if source.mapped is not None and ctx.direct:
            self._touch(ctx, sub, ((id(source), offset, offset + nbytes, False),))
            host, host_offset = source, offset
        else:
            host, host_offset = ctx.memory.acquire("host", nbytes), 0
            sub.hold(host)
            self._copy(ctx, sub, source, offset, host, 0, nbytes)
        sub.after.append(lambda: hostcopy.from_mapped(out, host.mapped + host_offset))

    # ------------------------------------------------------------------ device memory
    def allocate(self, nbytes: int, zero: bool = True) -> tuple[Allocation, _Context]:
        """A buffer for a device array of `nbytes` (pooled), zero-filled on the device first
        unless the caller writes every byte itself. Returns it and the context that owns it."""
        with self._lock:
            ctx = self._context()
            allocation = ctx.memory.acquire("unified" if ctx.direct else "device", nbytes)
            ctx.array_count += 1
            ctx.array_bytes += allocation.size
            if zero:
                sub = self._open(ctx)
                self._touch(ctx, sub, ((id(allocation), 0, allocation.size, True),))
                lib.vkCmdFillBuffer(sub.cmd, allocation.buffer, 0, allocation.size, 0)
            self._limit_held(ctx)
            return allocation, ctx

    def free(self, allocation: Allocation, ctx: _Context) -> None:
        """Give a device array's buffer back to the pool once no queued work uses it."""
        with self._lock:
            if ctx is not self._ctx or not ctx.alive:
                return          # its device is gone (the whole context was destroyed)
            ctx.array_count -= 1
            ctx.array_bytes -= allocation.size
            if ctx.recording is not None:   # (submitted at the next call, not here: this one
                ctx.recording.hold(allocation)   # may come from a __del__ mid-launch)
            elif ctx.in_flight:
                ctx.in_flight[-1].hold(allocation)
            else:
                ctx.memory.release(allocation)

    def write(self, allocation: Allocation, offset: int, data: np.ndarray) -> None:
        """Queue an upload of `data` (C-contiguous) to byte `offset` of `allocation`. The bytes
        are copied into staging memory now, so `data` may change right after."""
        nbytes = data.nbytes
        if not nbytes:
            return
        with self._lock:
            ctx = self._context()
            sub = self._open(ctx)
            staging = ctx.memory.acquire("host", nbytes)
            sub.hold(staging)
            hostcopy.to_mapped(staging.mapped, data)
            self._copy(ctx, sub, staging, 0, allocation, offset, nbytes)
            self._limit_held(ctx)

    def copy(self, src: Allocation, src_offset: int, dst: Allocation, dst_offset: int,
             nbytes: int) -> None:
        """Queue a device-to-device copy. Overlapping ranges of one buffer (which
        vkCmdCopyBuffer does not allow) go through a temporary buffer: the result is that of
        a copy of the source as it was."""
        if nbytes:
            with self._lock:
                ctx = self._context()
                sub = self._open(ctx)
                self._copy_apart(ctx, sub, src, src_offset, dst, dst_offset, nbytes, sub.hold)

    def read(self, allocation: Allocation, offset: int, out: np.ndarray,
             timeout_s: float | None = None) -> None:
        """Copy bytes at `offset` of `allocation` into `out` after all queued work (waits)."""
        with self._lock:
            ctx = self._context()
            self._read_into(ctx, self._open(ctx), allocation, offset, out)
        self._synchronize(timeout_s)

    # ------------------------------------------------------------------ synchronisation
    @contextmanager
    def batch(self):
        """`with runtime.batch(): ...` records the launches inside into as few command
        buffers as possible (up to MAX_BATCH_DISPATCHES each) and submits at the end, instead
        of submitting early to keep the GPU busy: no submission gaps between them."""
        with self._lock:
            self._held += 1
        try:
            yield self
        finally:
            with self._lock:
                self._held -= 1
            if not self._held:
                self.flush()

    def flush(self, signal: tuple[Any, int] | None = None) -> None:
        """Submit the open batch without waiting. `signal`: (timeline semaphore, value) to
        signal once it and everything submitted before it are done (an empty submission
        carries it if nothing is open)."""
        with self._lock:
            if signal is not None:
                ctx = self._context()
                self._open(ctx).signals.append(signal)
            if self._ctx is not None:
                self._flush(self._ctx)

    def wait_before_next(self, semaphore: Any, value: int) -> None:
        """Make the next submission (the open batch, or the next one opened) wait on the GPU
        until timeline `semaphore` reaches `value` before any of its commands run."""
        with self._lock:
            self._context().next_waits.append((semaphore, value))

    def _flush(self, ctx: _Context) -> None:
        sub = ctx.recording
        if sub is None:
            return
        ctx.recording = None
        sub.barrier(ctx.host_barrier, hazard=False)  # the host and the next batch see every write
        check(lib.vkEndCommandBuffer(sub.cmd), "vkEndCommandBuffer")
        check(lib.vkResetFences(ctx.device.handle, 1, sub.fences), "vkResetFences")
        if ctx.next_waits or sub.signals:
            sub.waits, ctx.next_waits = ctx.next_waits, []
            info, keep = timeline.submit_info(sub, sub.waits, sub.signals)
            result = lib.vkQueueSubmit(ctx.device.queue, 1, info, sub.fences[0])
            del keep
        else:
            result = lib.vkQueueSubmit(ctx.device.queue, 1, sub.submit_info, sub.fences[0])
        ctx.in_flight.append(sub)
        if result:
            self._fail(ctx, DeviceLost if result == -4 else VulkanError,
                       f"submitting the batch failed ({result})", sub)

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Submit the open batch and wait for every queued launch; raises the first error of
        a launch (device lost, hang) naming it. Not allowed inside a launch-graph capture."""
        if capturing.active:
            capturing.refuse_sync("synchronize()")
        check_timeout(timeout_s)
        self._synchronize(timeout_s)

    def _synchronize(self, timeout_s: float | None = None) -> None:
        with self._lock:
            ctx = self._ctx
            if ctx is None:
                return
            self._flush(ctx)
            while ctx.in_flight:
                self._retire(ctx, ctx.in_flight[0], timeout_s)
            if ctx.faults:          # checked launches that faulted: the first one is raised
                fault = ctx.faults[0]
                ctx.faults.clear()
                raise fault

    def _retire(self, ctx: _Context, sub: Submission, timeout_s: float | None = None) -> None:
        """Wait for the oldest submission (at most `timeout_s`; None: the runtime's
        `timeout_s`, or on a CPU device CPU_COMPILE_TIMEOUT_S where the submission holds a
        pipeline's first dispatch, which compiles it), hand out its timestamps, run its host
        copies and release its buffers."""
        compiles = ctx.device.info.device_type == "cpu" and sub.first_dispatches
        if timeout_s is None:
            timeout_s = max(self.timeout_s, CPU_COMPILE_TIMEOUT_S) if compiles else self.timeout_s
        dev = ctx.device.handle
        # Poll briefly first: a blocking wait wakes up tens of microseconds late, which is
        # most of a short launch's round trip.
        fence, deadline = sub.fences[0], time.perf_counter() + SPIN_S
        result = lib.vkGetFenceStatus(dev, fence)
        while result == 1 and time.perf_counter() < deadline:
            result = lib.vkGetFenceStatus(dev, fence)
        if result == 1:
            result = lib.vkWaitForFences(dev, 1, sub.fences, 1, max(0, int(timeout_s * 1e9)))
        if result == 2:
            culprit = self._unfinished(ctx, sub)
            compiling = (f" (the wait included compiling {', '.join(sub.first_dispatches)}: "
                         "this CPU device compiles a kernel at its first launch)"
                         if compiles else "")
            self._fail(ctx, VulkanTimeout,
                       f"{culprit} did not finish within {timeout_s} s{compiling}; the GPU may "
                       "have hung (a loop that never ends?). The device will be recreated on "
                       "the next launch.", sub)
        if result:
            self._fail(ctx, DeviceLost if result == -4 else VulkanError,
                       f"the device failed ({result}) while running "
                       f"{_names(sub.launches)}", sub)
        ctx.in_flight.popleft()
        try:
            self._hand_out_times(ctx, sub)
            for work in sub.after:
                work()
        finally:
            for allocation in sub.releases:
                ctx.memory.release(allocation)
            sub.releases.clear()
            sub.held = 0
            sub.after.clear()
            sub.launches.clear()
            ctx.idle.append(sub)

    def _fail(self, ctx: _Context, kind: type, message: str, sub: Submission) -> None:
        """Mark every launch not yet complete as failed, drop the device, raise."""
        error = kind(message)
        subs = list(ctx.in_flight) + ([ctx.recording] if ctx.recording else [])
        for s in subs:
            for pending in s.launches:
                pending.error = error
            # the dead context drops them: it must not keep the error, whose traceback holds
            # the frames (and arrays) of whoever synchronised, alive as long as it exists
            s.launches.clear()
        self._abandon()
        raise error

    def _unfinished(self, ctx: _Context, sub: Submission) -> str:
        """The first launch of `sub` whose last timestamp is not available yet."""
        n = sub.queries_used
        if n and ctx.device.timestamp_bits:
            lib.vkGetQueryPoolResults(ctx.device.handle, sub.query_pool, 0, n, 16 * n,
                                      sub.timestamps, 16, vk.VK_QUERY_RESULT_64_BIT
                                      | vk.VK_QUERY_RESULT_WITH_AVAILABILITY_BIT)
            for pending in sub.launches:
                if not sub.timestamps[2 * (pending._first + 2 * pending._count - 1) + 1]:
                    return pending.label
        return _names(sub.launches)

    @staticmethod
    def _hand_out_times(ctx: _Context, sub: Submission) -> None:
        n = sub.queries_used
        if not n:
            sub.times.done = True
            return
        ticks = None
        if ctx.device.timestamp_bits:
            check(lib.vkGetQueryPoolResults(ctx.device.handle, sub.query_pool, 0, n, 8 * n,
                                            sub.timestamps, 8, vk.VK_QUERY_RESULT_64_BIT
                                            | vk.VK_QUERY_RESULT_WAIT_BIT),
                  "vkGetQueryPoolResults")
            ticks = np.frombuffer(ffi.buffer(sub.timestamps, 8 * n), np.uint64).copy()
        times = sub.times
        times.ticks, times.done = ticks, True       # every launch of the batch at once
        if ticks is not None:
            last = (int(ticks[n - 1]) - int(ticks[n - 2])) & ctx.timestamp_mask
            ctx.eager = last * ctx.timestamp_period_ns / 1e6 >= EAGER_MS

    def _abandon(self) -> None:
        """Drop the context after loss or a hang. It is destroyed only if its submissions are
        over (done or lost): destroying objects a hung kernel still uses is undefined."""
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.alive = False
            if ctx.all_done():
                ctx.destroy()


def _names(pendings: list[PendingTimes]) -> str:
    labels = list(dict.fromkeys(p.label for p in pendings))
    if len(labels) == 1:
        return labels[0]
    more = f" and {len(labels) - 4} more" if len(labels) > 4 else ""
    return "one of " + ", ".join(labels[:4]) + more


def _descriptors(b, allocation: Allocation, offset: int, nbytes: int) -> list:
    """(binding, allocation, offset, range) for each binding `b` is passed to. A descriptor's
    range must not be 0: an empty buffer is bound as its whole (pooled, non-empty) allocation,
    which a kernel given no elements never reads."""
    if not nbytes:
        offset, nbytes = 0, allocation.size
    return [(binding, allocation, offset, nbytes) for binding in b.bindings]


def _check_descriptor_range(caps: Capabilities, b) -> None:
    """A storage-buffer descriptor's offset must be a multiple of the device's
    minStorageBufferOffsetAlignment and its range at most maxStorageBufferRange."""
    view, name = b.array, b.names[0]
    if b.array.nbytes > caps.max_storage_buffer_range:
        raise ArgumentError(
            f"parameter {name}: {view.nbytes} bytes exceed the device's maxStorageBufferRange "
            f"({caps.max_storage_buffer_range}) for a storage-buffer descriptor; use the "
            "device-address ABI")
    align = caps.min_storage_buffer_offset_alignment
    if type(view) is DeviceView and view.offset % align and view.nbytes:
        raise ArgumentError(
            f"parameter {name}: the view starts at byte {view.offset} of its buffer, not a "
            f"multiple of the device's minStorageBufferOffsetAlignment ({align}), so the "
            "descriptor ABI cannot bind it; pass a view starting at a multiple of "
            f"{align} bytes, a copy of it, or use the device-address ABI")


def _check_grid(grid: Any) -> tuple[int, int, int]:
    if type(grid) is tuple and len(grid) == 3:
        a, b, c = grid
        if type(a) is int and type(b) is int and type(c) is int and min(a, b, c) >= 0:
            return grid
    try:
        values = tuple(int(n) for n in grid)
    except (TypeError, ValueError):
        raise ArgumentError(f"grid must be 3 non-negative integers, got {grid!r}") from None
    if len(values) != 3 or min(values) < 0:
        raise ArgumentError(f"grid must be 3 non-negative integers, got {grid!r}")
    return values


def _use_direct(device: Device, transfer: str) -> bool:
    if transfer != "auto":
        return transfer == "direct"
    unified = MEMORY_DEVICE_LOCAL | MEMORY_HOST_VISIBLE | MEMORY_HOST_COHERENT
    return device.info.device_type in ("cpu", "integrated") and device.has_memory(unified)


_runtime: VulkanRuntime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> VulkanRuntime:
    """The process-wide runtime, created on first use (raises VulkanUnavailable if none)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = VulkanRuntime()
        return _runtime


def reset_runtime() -> None:
    """Close the process-wide runtime (the next get_runtime() creates a new one)."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            _runtime.close()
            _runtime = None
