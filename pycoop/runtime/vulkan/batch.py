"""Command batches: launches are recorded into an open command buffer and submitted together.

A `Submission` is one command buffer with its fence and timestamp queries. While it records,
a `Hazards` tracker decides where a pipeline barrier is needed: before a command that reads
or writes a byte range an earlier command of the batch wrote, or writes a range an earlier one
read (since the last barrier). Independent dispatches are recorded back to back. Everything a
submission needs after the GPU is done (timestamps to hand out, host copies, buffers to return
to the pool) is attached to it and run when its fence is seen signalled.

Descriptor-ABI launches take their descriptor set from pools owned by the submission: a set
must stay valid until the GPU is done with the command buffer, which is exactly the
submission's life, so the pools are reset in one call when it is reused (no per-set frees).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .errors import check
from .ext import ffi, lib, vk

DEVICE_READ_WRITE = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
                     | vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
DEVICE_STAGES = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
ALL_READ_WRITE = DEVICE_READ_WRITE | vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_HOST_WRITE_BIT
ALL_STAGES = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT
TOP = vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT
BOTTOM = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
MIN_QUERIES = 1024          # timestamps per submission (two per dispatch); grows for repeat=
POOL_SETS = 64              # descriptor sets per pool; a submission adds pools as it needs
POOL_BUFFERS = 512          # storage-buffer descriptors per pool
OUT_OF_POOL = (-1000069000, -12)    # VK_ERROR_OUT_OF_POOL_MEMORY, VK_ERROR_FRAGMENTED_POOL


class Barrier:
    """A global memory barrier's struct and stages. Between two commands of a batch the
    device barrier (compute and transfer only) is enough; the host barrier, which also makes
    writes visible to the host, ends a batch. The host one costs more on the GPU: NVIDIA's
    driver flushes for host visibility, several microseconds between two short kernels."""

    __slots__ = ("struct", "stages")

    def __init__(self, access: int, stages: int):
        self.struct = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": access,
            "dstAccessMask": access})
        self.stages = stages

    def record(self, cmd: Any) -> None:
        lib.vkCmdPipelineBarrier(cmd, self.stages, self.stages, 0, 1, self.struct, 0, ffi.NULL,
                                 0, ffi.NULL)


class Hazards:
    """Byte ranges read and written since the last barrier, per buffer (VkBuffer handle value).
    Views of one buffer that overlap are the same memory; disjoint views are independent.

    `sole` is the accesses list (as `VulkanRuntime._touch` takes it) when the ranges noted
    since the last barrier are exactly that list's: a loop launching the same prepared kernel
    then decides its barrier from the list's write flags alone, without range checks."""

    __slots__ = ("reads", "writes", "sole")

    def __init__(self):
        self.reads: dict[int, list[tuple[int, int]]] = {}
        self.writes: dict[int, list[tuple[int, int]]] = {}
        self.sole = None

    def empty(self) -> bool:
        return not self.reads and not self.writes

    def conflicts(self, key: int, lo: int, hi: int, write: bool) -> bool:
        if _overlaps(self.writes.get(key), lo, hi):
            return True
        return write and _overlaps(self.reads.get(key), lo, hi)

    def add(self, key: int, lo: int, hi: int, write: bool) -> None:
        (self.writes if write else self.reads).setdefault(key, []).append((lo, hi))

    def clear(self) -> None:
        self.reads.clear()
        self.writes.clear()
        self.sole = None


def _descriptor_pool(device: Any, sets: int, buffers: int) -> Any:
    size = ffi.new("VkDescriptorPoolSize*", {
        "type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": buffers})
    info = ffi.new("VkDescriptorPoolCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        "maxSets": sets, "poolSizeCount": 1, "pPoolSizes": size})
    pool = ffi.new("VkDescriptorPool*")
    check(lib.vkCreateDescriptorPool(device, info, ffi.NULL, pool), "vkCreateDescriptorPool")
    return pool[0]


def _allocate_set(device: Any, pool: Any, layouts: Any, out: Any, retry: bool = False) -> bool:
    """Allocate one set into `out[0]`; True if `retry` and the pool is full."""
    info = ffi.new("VkDescriptorSetAllocateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": pool,
        "descriptorSetCount": 1, "pSetLayouts": layouts})
    result = lib.vkAllocateDescriptorSets(device, info, out)
    if retry and result in OUT_OF_POOL:
        return True
    check(result, "vkAllocateDescriptorSets")
    return False


def _overlaps(ranges, lo: int, hi: int) -> bool:
    if ranges:
        for a, b in ranges:
            if a < hi and lo < b:
                return True
    return False


class BatchTimes:
    """The timestamps of one submission, shared by its launches' PendingTimes: retiring a
    submission sets them once, whatever the number of launches in it."""

    __slots__ = ("ticks", "done", "period_ns", "mask")

    def __init__(self, period_ns: float, mask: int):
        self.ticks = None
        self.done = False
        self.period_ns, self.mask = period_ns, mask


class PendingTimes:
    """Device times of one launch, known once its submission completes (`done`). The raw
    timestamps are kept (shared with the other launches of the submission) and turned into
    milliseconds only when asked for, so retiring a batch costs nothing per launch."""

    __slots__ = ("label", "error", "_batch", "_first", "_count")

    def __init__(self, label: str, batch: BatchTimes | None = None, first: int = 0,
                 count: int = 0):
        self.label = label
        self.error: BaseException | None = None
        self._batch, self._first, self._count = batch, first, count

    @property
    def done(self) -> bool:
        batch = self._batch
        return batch is not None and batch.done

    @property
    def times_ms(self) -> tuple[float, ...] | None:
        """Per dispatch (nan without timestamps); None until done."""
        batch = self._batch
        if batch is None or not batch.done:
            return None
        t, f = batch.ticks, self._first
        if t is None:
            return (math.nan,) * self._count
        period, mask = batch.period_ns, batch.mask
        return tuple(((int(t[f + 2 * i + 1]) - int(t[f + 2 * i])) & mask) * period / 1e6
                     for i in range(self._count))

    @property
    def spans_ns(self) -> tuple[tuple[float, float], ...] | None:
        """(start, end) of each dispatch on the device clock, in ns: gaps between launches
        show where the device sat idle."""
        batch = self._batch
        if batch is None or not batch.done or batch.ticks is None:
            return None
        t, f, p = batch.ticks, self._first, batch.period_ns
        return tuple((int(t[f + 2 * i]) * p, int(t[f + 2 * i + 1]) * p)
                     for i in range(self._count))


class DescriptorSets:
    """Descriptor sets of storage buffers from pools that grow as needed and are reset or
    destroyed together: a command buffer's sets live exactly as long as it may run."""

    def _init_sets(self, device: Any) -> None:
        self.device = device
        self.descriptor_pools: list[Any] = []     # created on the first descriptor-ABI launch
        self.pools_used = 0                       # of them, allocated from since the reset
        self.oversized: list[Any] = []            # one-set pools of sets over POOL_BUFFERS

    def descriptor_set(self, layout: Any, bindings: int) -> Any:
        """A descriptor set of `layout` (`bindings` storage buffers), valid until the pools
        are reset: from the pool in use, or the next one when it is full. A set larger than a
        pool gets a pool of its own, destroyed at the reset."""
        layouts = ffi.new("VkDescriptorSetLayout[1]", [layout])
        out = ffi.new("VkDescriptorSet*")
        if bindings > POOL_BUFFERS:
            self.oversized.append(_descriptor_pool(self.device, 1, bindings))
            _allocate_set(self.device, self.oversized[-1], layouts, out)
            return out[0]
        if self.pools_used == 0:
            self._next_pool()
        while _allocate_set(self.device, self.descriptor_pools[self.pools_used - 1], layouts,
                            out, retry=True):
            self._next_pool()           # full: a fresh pool always has room for one set
        return out[0]

    def _next_pool(self) -> None:
        if self.pools_used == len(self.descriptor_pools):
            self.descriptor_pools.append(_descriptor_pool(self.device, POOL_SETS, POOL_BUFFERS))
        self.pools_used += 1

    def _reset_sets(self) -> None:
        """Free every set (the GPU is done with them); the pools are kept for reuse."""
        for pool in self.descriptor_pools[:self.pools_used]:
            check(lib.vkResetDescriptorPool(self.device, pool, 0), "vkResetDescriptorPool")
        self.pools_used = 0
        for pool in self.oversized:
            lib.vkDestroyDescriptorPool(self.device, pool, ffi.NULL)
        self.oversized.clear()

    def _destroy_sets(self) -> None:
        for pool in self.descriptor_pools + self.oversized:
            lib.vkDestroyDescriptorPool(self.device, pool, ffi.NULL)
        self.descriptor_pools.clear()
        self.oversized.clear()


class Submission(DescriptorSets):
    """One reusable command buffer, fence and timestamp query pool."""

    def __init__(self, device: Any, command_pool: Any, host_query_reset: bool = False,
                 period_ns: float = 1.0, mask: int = (1 << 64) - 1):
        self._init_sets(device)
        self.host_query_reset = host_query_reset     # vkResetQueryPool (Vulkan 1.2 feature)
        self.period_ns, self.mask = period_ns, mask
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            "commandPool": command_pool, "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            "commandBufferCount": 1})
        self.command_buffers = ffi.new("VkCommandBuffer[1]")
        check(lib.vkAllocateCommandBuffers(device, alloc, self.command_buffers),
              "vkAllocateCommandBuffers")
        self.cmd = self.command_buffers[0]
        fence_info = ffi.new("VkFenceCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO})
        self.fences = ffi.new("VkFence[1]")
        check(lib.vkCreateFence(device, fence_info, ffi.NULL, self.fences), "vkCreateFence")
        self.submit_info = ffi.new("VkSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": 1,
            "pCommandBuffers": self.command_buffers})
        self.capacity = 0
        self.query_pool = None
        self.dirty_queries = 0      # queries written since their last reset
        self.timestamps = None
        self.hazards = Hazards()
        self.barriers = 0          # hazard barriers over the submission's life (stats)
        self._reset_state()

    def _reset_state(self) -> None:
        self.queries_used = 0
        self.dispatches = 0
        self.launches: list[PendingTimes] = []
        self.first_dispatches: list[str] = []        # launches of pipelines never run before
        self.times = BatchTimes(self.period_ns, self.mask)      # shared by the launches
        self.last_push = None                         # push constants as last recorded
        self.waits: list[tuple[Any, int]] = []        # (timeline semaphore, value) to wait for
        self.signals: list[tuple[Any, int]] = []      # (timeline semaphore, value) to signal
        self.after: list[Callable[[], None]] = []     # host work once the GPU is done
        self.releases: list[Any] = []                 # allocations to give back to the pool
        self.held = 0                                 # their bytes
        self.bound_pipeline = None
        self.fault_slab = None                        # fault records of checked launches,
        self.fault_words = None                       # as u32 (records x words, mapped),
        self.fault_slots = 0                          # and the records handed out
        self.hazards.clear()

    def reserve_queries(self, count: int) -> None:
        """A query pool of at least `count` timestamps (only while not recording)."""
        if self.query_pool is not None and count <= self.capacity:
            return
        if self.query_pool is not None:
            lib.vkDestroyQueryPool(self.device, self.query_pool, ffi.NULL)
            self.query_pool, self.capacity = None, 0
        capacity = max(MIN_QUERIES, count)
        info = ffi.new("VkQueryPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            "queryType": vk.VK_QUERY_TYPE_TIMESTAMP, "queryCount": capacity})
        pool = ffi.new("VkQueryPool*")
        check(lib.vkCreateQueryPool(self.device, info, ffi.NULL, pool), "vkCreateQueryPool")
        self.query_pool, self.capacity = pool[0], capacity
        self.dirty_queries = capacity       # a new pool's queries start undefined: reset all
        self.timestamps = ffi.new(f"uint64_t[{2 * capacity}]")   # value + availability

    def begin(self, begin_info: Any) -> None:
        """Start recording (the GPU is done with everything of the last use). The timestamps
        written last time are reset on the host where the device allows it (no command on
        the GPU timeline), else by a command at the start of the buffer."""
        self.dirty_queries = max(self.dirty_queries, self.queries_used)
        self._reset_state()
        self._reset_sets()          # the GPU is done with them
        dirty, self.dirty_queries = self.dirty_queries, 0
        if dirty and self.host_query_reset:
            lib.vkResetQueryPool(self.device, self.query_pool, 0, dirty)
        check(lib.vkBeginCommandBuffer(self.cmd, begin_info), "vkBeginCommandBuffer")
        if dirty and not self.host_query_reset:
            lib.vkCmdResetQueryPool(self.cmd, self.query_pool, 0, dirty)

    def hold(self, allocation: Any) -> None:
        """Keep `allocation` until the submission is done, then give it back to the pool."""
        self.releases.append(allocation)
        self.held += allocation.size

    def barrier(self, barrier: Barrier, hazard: bool = True) -> None:
        """A global memory barrier; `hazard`: one a dependency between commands needed (the
        ones counted), not the one that ends a batch."""
        self.barriers += hazard
        barrier.record(self.cmd)
        self.hazards.clear()

    def destroy(self) -> None:
        self._destroy_sets()
        if self.query_pool is not None:
            lib.vkDestroyQueryPool(self.device, self.query_pool, ffi.NULL)
        lib.vkDestroyFence(self.device, self.fences[0], ffi.NULL)
