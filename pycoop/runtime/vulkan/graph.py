"""Launch graphs on Vulkan: a sequence of launches recorded once into a secondary command
buffer and executed again by each replay.

The command buffer is recorded with VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, so one graph
may be replayed several times in one batch and be pending in several submissions at once:
back-to-back replays need no copy of it. Inside, a `Hazards` tracker puts pipeline barriers
only where one launch depends on an earlier one, as in a batch. A replay (`VulkanRuntime.replay`)
executes it from the open batch between two timestamps; the batch's tracker sees the union of
the graph's byte ranges, so a barrier goes before the replay where it depends on earlier work
and before later work that depends on it.

What the replays use lives as long as the graph: the command buffer, its descriptor sets (one
set per descriptor-ABI launch, written at capture), argument buffers of `arg_buffer` kernels
and the fault records of checked launches. A checked launch writes its first out-of-bounds
access into its own record; the graph ends with a fault harvest (harvest.py) that moves the
records holding a fault into the replay's own slot of a host-visible ring, so every replay's
faults are read from its own copy, whatever runs next.
"""
from __future__ import annotations

from typing import Any

from .batch import Barrier, DescriptorSets, Hazards
from .errors import check
from .ext import ffi, lib, vk


class GraphRecording(DescriptorSets):
    """The Vulkan side of one launch graph (see the module docstring). The runtime records
    into it like into a Submission (`cmd`, `hazards`, `barrier`, `descriptor_set`); after
    `end()`, `touches` is the union of its accesses as (key, lo, hi, write)."""

    def __init__(self, ctx: Any):
        self._init_sets(ctx.device.handle)
        self.ctx = ctx
        self.command_pool = ctx.command_pool
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            "commandPool": self.command_pool, "level": vk.VK_COMMAND_BUFFER_LEVEL_SECONDARY,
            "commandBufferCount": 1})
        self.command_buffers = ffi.new("VkCommandBuffer[1]")
        check(lib.vkAllocateCommandBuffers(self.device, alloc, self.command_buffers),
              "vkAllocateCommandBuffers")
        self.cmd = self.command_buffers[0]
        inheritance = ffi.new("VkCommandBufferInheritanceInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO})
        begin = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT,
            "pInheritanceInfo": inheritance})
        try:
            check(lib.vkBeginCommandBuffer(self.cmd, begin), "vkBeginCommandBuffer")
        except BaseException:
            self._free_command_buffer()
            raise
        self.hazards = Hazards()
        self.barriers = 0
        self.bound_pipeline = None
        self.last_push = None
        self.dispatches = 0               # dispatches and copies recorded
        self.first_dispatches: list[str] = []   # pipelines never run before (to the 1st replay)
        self.ranges: dict[tuple[int, int, int], bool] = {}   # (key, lo, hi) -> written
        self.allocations: list[Any] = []  # argument buffers and fault slabs (pooled memory)
        self.slab = None                  # the fault slab being filled, and its records used
        self.slab_used = 0
        self.records: list[tuple[Any, int, dict, tuple, str]] = []  # (slab, offset, ops, grid, label)
        # per slab of records: its ring (u32, slots x records x words, host-mapped) and the
        # index of its first record; the ring's slots, the replays queued and those read
        self.rings: list[tuple[Any, int]] = []
        self.slots = 0
        self.replays = 0
        self.harvested = 0
        self.touches: tuple = ()
        self.ended = False
        self.destroyed = False

    # ------------------------------------------------------------------ recording
    def barrier(self, barrier: Barrier, hazard: bool = True) -> None:
        """A global memory barrier between dependent commands of the graph."""
        self.barriers += hazard
        barrier.record(self.cmd)
        self.hazards.clear()

    def note(self, accesses) -> None:
        """Remember the (key, lo, hi, write) accesses of a recorded command for `touches`."""
        ranges = self.ranges
        for key, lo, hi, write in accesses:
            ranges[(key, lo, hi)] = ranges.get((key, lo, hi), False) or write

    def end(self) -> None:
        """Finish recording: the graph can be replayed from now on."""
        check(lib.vkEndCommandBuffer(self.cmd), "vkEndCommandBuffer")
        self.touches = tuple((key, lo, hi, write) for (key, lo, hi), write in self.ranges.items())
        self.ended = True

    def slabs(self) -> list[tuple[Any, int]]:
        """(slab, records in use) of every fault slab, in record order."""
        used: dict[int, list] = {}
        for slab, *_ in self.records:
            used.setdefault(id(slab), [slab, 0])[1] += 1
        return [tuple(v) for v in used.values()]

    # ------------------------------------------------------------------ teardown
    def _free_command_buffer(self) -> None:
        lib.vkFreeCommandBuffers(self.device, self.command_pool, 1, self.command_buffers)

    def destroy(self) -> None:
        """Free the command buffer, the descriptor sets and the pooled memory (no replay may
        be in flight). Safe to call twice."""
        if self.destroyed:
            return
        self.destroyed = True
        ctx = self.ctx
        ctx.graphs.discard(self)
        if not ctx.alive:       # the context destroys (or destroyed) everything of its own
            return
        self._free_command_buffer()
        self._destroy_sets()
        for allocation in self.allocations:
            ctx.memory.release(allocation)
        self.allocations.clear()

    def destroy_with_context(self) -> None:
        """The context is being destroyed: free the descriptor pools and the graph's buffers
        (the command pool frees the command buffer)."""
        if not self.destroyed:
            self.destroyed = True
            self._destroy_sets()
            for allocation in self.allocations:
                self.ctx.memory._destroy(allocation)
            self.allocations.clear()
