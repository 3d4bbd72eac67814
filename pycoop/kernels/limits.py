"""What the ready-made kernels assume of the device where Vulkan does not tell them.

- `SHARED_BYTES`: the shared memory a kernel may plan for per workgroup: 32 KiB, lavapipe's
  limit, so that every kernel also runs on the software device the tests use (Vulkan
  guarantees only 16 KiB; NVIDIA's GPUs give 48 KiB without opting in).
- `SMS`: the streaming multiprocessors the default configurations aim to fill (grids,
  split-K, decode splits): an H100 SXM's 132. Vulkan does not report the count.
- `MAX_INVOCATIONS`: the invocations of a workgroup, 1,024, the most NVIDIA's, AMD's and
  lavapipe's drivers allow (maxComputeWorkGroupInvocations); a larger workgroup fails only
  when the pipeline is made, so the kernels refuse it when they are built.
"""
from __future__ import annotations

SHARED_BYTES = 32768
SMS = 132
MAX_INVOCATIONS = 1024
