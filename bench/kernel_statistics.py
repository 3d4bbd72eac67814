"""What the Vulkan driver reports of the bundled kernels (`CompiledKernel.gpu_statistics`):
registers per invocation and the other statistics of VK_KHR_pipeline_executable_properties,
for the attention prefill and decode tiles, the N = 1 GEMVs and the GEMMs in the
configurations the other benchmarks time. No timing: registers bound how many workgroups an
SM holds at once (the H100 has 65,536 32-bit registers per SM; a workgroup of 256
invocations at 255 registers takes all of them), and a kernel that needs more than 255 spills
to local memory, which the driver may report as well. Where the driver reports a register
count, the table adds how many workgroups an SM of the H100 / H200 holds at once and which
limit binds (registers, invocations, shared memory), as an estimate from Hopper's limits.

    python3 bench/kernel_statistics.py [--only attention decode gemv gemm]
"""
from __future__ import annotations

import argparse

from pycoop.kernels import (Softmax, attention_decode, attention_decode_vector, attention_merge,
                            attention_prefill, gemm_nv, gemm_q4_0)
from pycoop.kernels.attention_blocks import tuned_softmax
from pycoop.kernels.gemv_planes import planes_gemv_config
from warmup import vulkan_or_skip

PREFILL_TILES = [(128, 64, 128), (128, 64, 256), (128, 128, 256), (64, 64, 128), (64, 64, 256)]


def attention_kernels():
    for d in (64, 128):
        for causal in (False, True):
            for br, bc, inv in PREFILL_TILES:
                yield (f"prefill d{d}{' causal' if causal else ''} {br}x{bc}/{inv}",
                       attention_prefill(d, br, bc, inv, causal))
        for br, bc, inv in PREFILL_TILES[:2]:
            prefetch = tuned_softmax(bc)._replace(prefetch=True)
            yield (f"prefill d{d} {br}x{bc}/{inv} prefetch",
                   attention_prefill(d, br, bc, inv, softmax=prefetch))
    yield "decode d128 32x64/128", attention_decode(128, 32, 64, 128)
    yield "decode d128 32x64/128 Softmax()", attention_decode(128, 32, 64, 128, softmax=Softmax())


def decode_kernels():
    """The vector decode (a group of its own: the attention group compiles for minutes)."""
    # the vector decode at the goal's shape (4 query rows per K/V head, 8 subgroups, 2 keys
    # per iteration, 16-byte loads): the chunks alone, with the merge as a second dispatch
    # (the default) and merged by the last workgroup, whose kernel ran twice as long
    vec = dict(head_dim=128, rows=4, subgroups=8, unroll=2, prefetch=True, width=8,
               merge_unroll=2)
    yield "vector decode d128 r4 g8 (chunks)", attention_decode_vector(**vec)
    yield "vector decode d128 r4 g8 phases", attention_decode_vector(**vec, phases=True)
    yield ("vector decode d128 r4 g8 phases, merge_columns 4",
           attention_decode_vector(**vec, phases=True, merge_columns=4))
    yield "vector decode d128 r4 g8 merged", attention_decode_vector(**vec, merge=True)
    yield "attention_merge d128 (unroll 2)", attention_merge(128, unroll=2)


def gemv_kernels():
    for fmt in ("q4_0", "q4_k", "q8_0"):
        for K in (4096, 14336):
            cfg = planes_gemv_config(fmt, 1, "q8_1_shared", K=K)
            yield f"gemv {fmt} K={K} {cfg}", cfg.kernel(fmt, 32, K, "f32")


def gemm_kernels():
    yield "gemm_nv 128x128x32/256", gemm_nv(128, 128, 32, 256)
    yield "gemm_q4_0 (defaults)", gemm_q4_0()


GROUPS = {"attention": attention_kernels, "decode": decode_kernels, "gemv": gemv_kernels,
          "gemm": gemm_kernels}

# An SM of the H100 / H200 (Hopper): 32-bit registers, invocations, shared memory (bytes a
# workgroup may use of 228 KiB; each workgroup also costs 1 KiB of the driver's) and
# workgroups it holds at once; registers are given to a subgroup in units of 256 (8 per lane)
SM = dict(registers=65536, invocations=2048, shared=233472, workgroups=32)


def per_sm(registers: int, invocations: int, shared: int, reserved: int) -> tuple[int, str]:
    """(workgroups an SM holds at once, the limit that binds) for a kernel taking `registers`
    per invocation, `invocations` per workgroup and `shared` + `reserved` bytes of shared
    memory (`reserved`: what the driver keeps for workgroup-scope matrices)."""
    regs = -(-registers // 8) * 8 * invocations
    limits = {"registers": SM["registers"] // regs if regs else SM["workgroups"],
              "invocations": SM["invocations"] // invocations,
              "shared memory": SM["shared"] // (shared + reserved + 1024),
              "workgroups": SM["workgroups"]}
    which = min(limits, key=limits.get)
    return limits[which], which


def register_count(values: dict) -> int | None:
    """The registers per invocation among the driver's statistics (a name with "register"
    in it and an integer value), or None."""
    return next((v for n, v in values.items() if "register" in n.lower() and type(v) is int),
                None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(GROUPS), default=list(GROUPS))
    args = ap.parse_args()
    runtime = vulkan_or_skip()
    if runtime is None:
        return
    caps = runtime.capabilities
    print(f"device: {caps.device_name}, {caps.driver_version}", flush=True)
    rows, names, descriptions = [], [], {}
    for group in args.only:
        for label, kernel in GROUPS[group]():
            try:
                ck = kernel.compile()
                s = ck.gpu_statistics(checked=False)
            except Exception as e:          # one kernel the driver refuses: say so, go on
                rows.append((label, None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
                continue
            names += [n for n in s.values if n not in names]
            descriptions.update(s.descriptions)
            req, regs = ck.requirements, register_count(s.values)
            held = "" if regs is None else "{} ({})".format(*per_sm(
                regs, req["workgroup_invocations"], req["shared_memory"],
                (caps.coopmat2_reserved_shared_memory or 0)
                if "cooperativeMatrixWorkgroupScope" in req["features"] else 0))
            rows.append((label, s, None, req["workgroup_invocations"], req["shared_memory"], held))
            # as it comes (the driver compiles each kernel: minutes for all of them)
            print(f"{label}: " + ", ".join(f"{n} = {v}" for n, v in s.values.items())
                  + (f"; {held} workgroups per SM" if held else ""), flush=True)
    print()
    print("| kernel | invocations | shared bytes | " + " | ".join(names)
          + " | workgroups per SM (Hopper's limits; what binds) |")
    print("|---" * (len(names) + 4) + "|")
    for label, s, error, *sizes in rows:
        cells = [error] if s is None else [str(x) for x in sizes[:2]] + [
            str(s.values.get(n, "")) for n in names] + [sizes[2]]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    for n in names:
        print(f"- {n}: {descriptions[n]}")


if __name__ == "__main__":
    main()
