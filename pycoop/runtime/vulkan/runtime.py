"""`VulkanRuntime.launch`: run one compiled kernel on numpy arrays and time it on the device.

Per launch: bind and check arguments (no GPU work yet), get the cached pipeline, take buffers
from the pool, upload, record one command buffer (copies, timestamps around the dispatch,
copies back), submit, wait on a fence with a finite timeout, copy results into the caller's
arrays, return the buffers. Device loss or a hang tears the device down; the next launch
creates a fresh one. Out-of-memory frees the pool; the next launch starts clean.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import check_repeat
from .abi import BoundArguments, bind
from .capabilities import Capabilities
from .device import MEMORY_DEVICE_LOCAL, MEMORY_HOST_COHERENT, MEMORY_HOST_VISIBLE, Device
from .errors import (ArgumentError, DeviceLost, OutOfDeviceMemory, OutOfHostMemory,
                     VulkanTimeout, check)
from .ext import ffi, lib, vk
from .instance import Instance
from .memory import Allocation, Memory
from .pipeline import Pipelines

TRANSFER_MODES = ("auto", "direct", "staged")
_ALL_READ_WRITE = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
                   | vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
                   | vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_HOST_WRITE_BIT)


@dataclass(frozen=True)
class LaunchResult:
    device_times_ms: tuple[float, ...]   # per dispatch, from timestamp queries (nan if unsupported)


@dataclass
class _Transfer:
    array: np.ndarray
    target: Allocation          # what the kernel reads/writes
    staging: Allocation | None  # host-visible copy (staged mode), else None
    upload: bool
    readback: bool


class _Context:
    """One device and everything created on it; replaced wholesale after device loss."""

    def __init__(self, device_spec: str | None, transfer: str):
        self.instance = Instance()
        self.device: Device | None = None
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
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            "commandPool": self.command_pool, "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            "commandBufferCount": 1})
        self.command_buffers = ffi.new("VkCommandBuffer[1]")
        check(lib.vkAllocateCommandBuffers(dev, alloc, self.command_buffers),
              "vkAllocateCommandBuffers")
        fence_info = ffi.new("VkFenceCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO})
        self.fences = ffi.new("VkFence[1]")
        check(lib.vkCreateFence(dev, fence_info, ffi.NULL, self.fences), "vkCreateFence")
        self.queries = 0
        self.reserve_timestamps(1)
        # Reused per launch (the hot path allocates no structs beyond copy regions).
        self.begin_info = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})
        self.barrier = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": _ALL_READ_WRITE,
            "dstAccessMask": _ALL_READ_WRITE})
        self.submit_info = ffi.new("VkSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": 1,
            "pCommandBuffers": self.command_buffers})
        bits = self.device.timestamp_bits
        self.timestamp_mask = (1 << bits) - 1 if bits < 64 else (1 << 64) - 1
        self.timestamp_period_ns = self.device.capabilities.timestamp_period_ns

    def reserve_timestamps(self, dispatches: int) -> None:
        """A query pool (and result array) for two timestamps around each of `dispatches`."""
        if 2 * dispatches <= self.queries:
            return
        dev = self.device.handle
        if self.queries:
            lib.vkDestroyQueryPool(dev, self.query_pool, ffi.NULL)
            self.queries = 0
        query_info = ffi.new("VkQueryPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            "queryType": vk.VK_QUERY_TYPE_TIMESTAMP, "queryCount": 2 * dispatches})
        query_pool = ffi.new("VkQueryPool*")
        check(lib.vkCreateQueryPool(dev, query_info, ffi.NULL, query_pool), "vkCreateQueryPool")
        self.query_pool, self.queries = query_pool[0], 2 * dispatches
        self.timestamps = ffi.new(f"uint64_t[{2 * dispatches}]")

    def destroy(self) -> None:
        """Destroy everything (also valid after device loss). Never call with work in flight."""
        if self.device is not None and self.device.handle is not None:
            dev = self.device.handle
            if hasattr(self, "pipelines"):
                self.pipelines.destroy()
            if hasattr(self, "memory"):
                self.memory.trim()
            if getattr(self, "queries", 0):
                lib.vkDestroyQueryPool(dev, self.query_pool, ffi.NULL)
            if hasattr(self, "fences"):
                lib.vkDestroyFence(dev, self.fences[0], ffi.NULL)
            if hasattr(self, "command_pool"):
                lib.vkDestroyCommandPool(dev, self.command_pool, ffi.NULL)
            self.device.destroy()
        self.instance.destroy()


class VulkanRuntime:
    """Runs compiled kernels on one Vulkan device (chosen by `device` or $PYCOOP_DEVICE).

    `transfer`: "direct" (kernels use host-visible memory in place: no copies), "staged"
    (device-local buffers, copied through host-visible staging buffers) or "auto" (direct
    where device-local memory is host-visible anyway: CPU and integrated devices). Default
    $PYCOOP_VK_TRANSFER, else auto. Thread-safe (launches are serialised).
    """

    def __init__(self, device: str | None = None, transfer: str | None = None):
        self._device_spec = device
        self._transfer = transfer or os.environ.get("PYCOOP_VK_TRANSFER", "auto")
        if self._transfer not in TRANSFER_MODES:
            raise ValueError(f"transfer mode {self._transfer!r} not in {TRANSFER_MODES}")
        self._lock = threading.RLock()
        self._ctx: _Context | None = None
        self._context()     # fail now, not at the first launch, if there is no device

    def _context(self) -> _Context:
        if self._ctx is None:
            self._ctx = _Context(self._device_spec, self._transfer)
        return self._ctx

    @property
    def capabilities(self) -> Capabilities:
        with self._lock:
            return self._context().device.capabilities

    @property
    def transfer_mode(self) -> str:
        with self._lock:
            return "direct" if self._context().direct else "staged"

    def stats(self) -> dict[str, Any]:
        """Pipeline cache hits/misses and live Vulkan memory (to spot leaks)."""
        with self._lock:
            ctx = self._context()
            return {"pipeline_hits": ctx.pipelines.hits, "pipeline_misses": ctx.pipelines.misses,
                    "live_allocations": ctx.memory.live_count,
                    "live_bytes": ctx.memory.live_bytes,
                    "heap_usage": ctx.device.heap_usage()}

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                ctx, self._ctx = self._ctx, None
                lib.vkDeviceWaitIdle(ctx.device.handle)
                ctx.destroy()

    def launch(self, spv: bytes, entry: str, grid: tuple[int, int, int], abi: dict,
               args: list, *, timeout_s: float = 10.0, repeat: int = 1) -> LaunchResult:
        """Dispatch `grid` workgroups of the kernel; buffers written by it (access "write" or
        "readwrite") are copied back into the same numpy arrays. `repeat` dispatches it that
        many times back to back on the same buffers (one upload, one readback; each dispatch
        sees the previous one's writes), each timed."""
        bound = bind(abi, args)
        grid = _check_grid(grid)
        repeat = check_repeat(repeat)
        with self._lock:
            ctx = self._context()
            caps = ctx.device.capabilities
            for axis, (n, limit) in enumerate(zip(grid, caps.max_compute_workgroup_count)):
                if n > limit:
                    raise ArgumentError(f"grid[{axis}] = {n} exceeds the device limit {limit}")
            push_size = 8 if abi["mode"] == "arg_buffer" else abi["size"]
            if push_size > caps.max_push_constants_size:
                raise ArgumentError(
                    f"kernel needs {push_size} bytes of push constants; {caps.device_name} "
                    f"allows {caps.max_push_constants_size} (compile with arg_buffer mode)")
            try:
                pipeline = ctx.pipelines.get(bytes(spv), entry, abi.get("required_subgroup_size"),
                                             push_size, abi.get("specialization", ()))
                ctx.reserve_timestamps(repeat)
                return self._run(ctx, pipeline, grid, abi["mode"], bound, timeout_s, repeat)
            except (DeviceLost, VulkanTimeout):
                self._abandon()
                raise
            except (OutOfDeviceMemory, OutOfHostMemory):
                ctx.memory.trim()
                raise

    def _abandon(self) -> None:
        """Drop the context after loss or a hang. It is destroyed only if its last submission
        is over (done or lost): destroying objects a hung kernel still uses is undefined."""
        ctx, self._ctx = self._ctx, None
        if ctx is not None and lib.vkGetFenceStatus(ctx.device.handle, ctx.fences[0]) in (0, -4):
            ctx.destroy()

    def _run(self, ctx: _Context, pipeline: Any, grid: tuple[int, int, int], mode: str,
             bound: BoundArguments, timeout_s: float, repeat: int) -> LaunchResult:
        acquired: list[Allocation] = []
        memory = ctx.memory

        def take(kind: str, size: int) -> Allocation:
            allocation = memory.acquire(kind, size)
            acquired.append(allocation)
            return allocation

        try:
            transfers = []
            for b in bound.buffers:
                nbytes = b.array.nbytes
                if ctx.direct:
                    target, staging = take("unified", nbytes), None
                    if b.upload and nbytes:
                        ffi.memmove(target.mapped, b.array, nbytes)
                else:
                    target = take("device", nbytes)
                    staging = take("host", nbytes) if nbytes else None
                    if b.upload and nbytes:
                        ffi.memmove(staging.mapped, b.array, nbytes)
                bound.set_address(b, target.address)
                transfers.append(_Transfer(b.array, target, staging, b.upload, b.readback))
            if mode == "arg_buffer":
                arg_buffer = take("unified" if ctx.direct else "host", len(bound.block))
                ffi.memmove(arg_buffer.mapped, bytes(bound.block), len(bound.block))
                push = arg_buffer.address.to_bytes(8, "little")
            else:
                push = bytes(bound.block)
            self._record(ctx, pipeline, grid, push, transfers, repeat)
            self._submit_and_wait(ctx, timeout_s)
            for t in transfers:
                if t.readback and t.array.nbytes:
                    ffi.memmove(t.array, (t.staging or t.target).mapped, t.array.nbytes)
            return LaunchResult(self._device_times_ms(ctx, repeat))
        finally:
            for allocation in acquired:
                memory.release(allocation)

    @staticmethod
    def _record(ctx: _Context, pipeline: Any, grid: tuple[int, int, int], push: bytes,
                transfers: list[_Transfer], repeat: int) -> None:
        cmd = ctx.command_buffers[0]
        check(lib.vkBeginCommandBuffer(cmd, ctx.begin_info), "vkBeginCommandBuffer")
        lib.vkCmdResetQueryPool(cmd, ctx.query_pool, 0, 2 * repeat)
        uploads = [t for t in transfers if t.upload and t.staging is not None]
        for t in uploads:
            _copy(cmd, t.staging, t.target, t.array.nbytes)
        all_stages = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT
        lib.vkCmdPipelineBarrier(cmd, all_stages, all_stages, 0, 1, ctx.barrier, 0, ffi.NULL,
                                 0, ffi.NULL)
        bottom = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
        lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
        if push:
            lib.vkCmdPushConstants(cmd, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                   len(push), push)
        for i in range(repeat):
            lib.vkCmdWriteTimestamp(cmd, bottom, ctx.query_pool, 2 * i)
            lib.vkCmdDispatch(cmd, *grid)
            lib.vkCmdWriteTimestamp(cmd, bottom, ctx.query_pool, 2 * i + 1)
            lib.vkCmdPipelineBarrier(cmd, all_stages, all_stages, 0, 1, ctx.barrier, 0,
                                     ffi.NULL, 0, ffi.NULL)
        readbacks = [t for t in transfers if t.readback and t.staging is not None]
        for t in readbacks:
            _copy(cmd, t.target, t.staging, t.array.nbytes)
        if readbacks:
            lib.vkCmdPipelineBarrier(cmd, all_stages, all_stages, 0, 1, ctx.barrier, 0,
                                     ffi.NULL, 0, ffi.NULL)
        check(lib.vkEndCommandBuffer(cmd), "vkEndCommandBuffer")

    @staticmethod
    def _submit_and_wait(ctx: _Context, timeout_s: float) -> None:
        dev = ctx.device.handle
        check(lib.vkResetFences(dev, 1, ctx.fences), "vkResetFences")
        check(lib.vkQueueSubmit(ctx.device.queue, 1, ctx.submit_info, ctx.fences[0]),
              "vkQueueSubmit")
        result = lib.vkWaitForFences(dev, 1, ctx.fences, 1, max(0, int(timeout_s * 1e9)))
        if result == 2:
            raise VulkanTimeout(f"kernel did not finish within {timeout_s} s; the GPU may have "
                                "hung (a loop that never ends?). The device will be recreated "
                                "on the next launch.", result)
        check(result, "waiting for the kernel")

    @staticmethod
    def _device_times_ms(ctx: _Context, repeat: int) -> tuple[float, ...]:
        if ctx.device.timestamp_bits == 0:
            return (math.nan,) * repeat
        result = lib.vkGetQueryPoolResults(
            ctx.device.handle, ctx.query_pool, 0, 2 * repeat, 16 * repeat, ctx.timestamps, 8,
            vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        check(result, "vkGetQueryPoolResults")
        ts = ctx.timestamps
        return tuple(((ts[2 * i + 1] - ts[2 * i]) & ctx.timestamp_mask) * ctx.timestamp_period_ns / 1e6
                     for i in range(repeat))


def _copy(cmd: Any, src: Allocation, dst: Allocation, size: int) -> None:
    region = ffi.new("VkBufferCopy*", {"size": size})
    lib.vkCmdCopyBuffer(cmd, src.buffer, dst.buffer, 1, region)


def _check_grid(grid: Any) -> tuple[int, int, int]:
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
