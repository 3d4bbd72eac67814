"""examples/host_c: a C program built here with the system compiler against libvulkan runs
modules pycoop exports (.spv + JSON sidecar) in both ABIs, with specialization constants set at
pipeline creation, and checks the buffers against NumPy results written by this test."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, u32, u64

pytestmark = pytest.mark.vulkan
HOST_DIR = Path(__file__).resolve().parents[2] / "examples" / "host_c"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("host") / "pycoop_host"
    r = subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-O2", "-o", str(exe),
                        str(HOST_DIR / "host.c"), "-lvulkan", "-lm"], capture_output=True, text=True)
    if r.returncode and ("vulkan/vulkan.h" in r.stderr or "-lvulkan" in r.stderr):
        pytest.skip(f"no Vulkan development files (libvulkan-dev): {r.stderr.strip()[:200]}")
    assert r.returncode == 0, r.stderr          # C99, no warnings with -Wall
    return exe


def run(host: Path, ck, tmp: Path, grid, args: list, want: dict, spec: dict | None = None):
    """Export `ck`, write each buffer argument (and the expected contents of those in `want`,
    by parameter name) and run the host; returns the finished process."""
    spv = ck.save(tmp / f"{ck.name}_{ck.abi_kind}.spv")
    argv = [str(host), str(spv), *map(str, grid)]
    for name, value in (spec or {}).items():
        argv += ["-s", f"{name}={value}"]
    for entry, a in zip(ck.abi["args"], args):
        if entry["kind"] != "buffer":
            argv.append(str(a))
            continue
        path = tmp / f"{entry['name']}.bin"
        np.ascontiguousarray(a).tofile(path)
        if entry["name"] in want:
            np.ascontiguousarray(want[entry["name"]]).tofile(tmp / f"{entry['name']}.want")
            argv.append(f"{path}={tmp / (entry['name'] + '.want')}")
        else:
            argv.append(str(path))
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pc.kernel(workgroup_size=64)
def scaled(X: pc.ReadBuffer[f32], n: u32, Y: pc.Buffer[f32], alpha: f32,
           reps: pc.Spec[u32] = 1, beta: pc.Spec[f32] = 0.0):
    i = pc.global_invocation_id.x
    if i < n:
        acc = Y[i] + alpha * X[i]
        for _ in range(reps):
            acc = acc * 0.5 + beta
        Y[i] = acc


def scaled_ref(x, y, alpha, reps=1, beta=0.0):
    acc = y + np.float32(alpha) * x
    for _ in range(reps):
        acc = acc * np.float32(0.5) + np.float32(beta)
    return acc


@pytest.mark.parametrize("abi", ["device_address", "descriptors"])
@pytest.mark.parametrize("spec", [{}, {"reps": 3, "beta": 1.5}])
def test_scalar_kernel(host, tmp_path, abi, spec):
    rng = np.random.default_rng(len(spec))
    n = 200
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ck = scaled.compile(abi=abi)
    r = run(host, ck, tmp_path, (4, 1, 1), [x, n, y, 0.75], {"Y": scaled_ref(x, y, 0.75, **spec)},
            spec)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


def test_a_wrong_result_is_reported(host, tmp_path):
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    want = scaled_ref(x, y, 2.0)
    want[[3, 40]] += 1
    r = run(host, scaled.compile(abi="descriptors"), tmp_path, (1, 1, 1), [x, 64, y, 2.0],
            {"Y": want})
    assert r.returncode == 1 and r.stdout == "2 mismatching element(s)\n"
    assert "Y[3] = 1, expected 2" in r.stderr and "Y[40]" in r.stderr


@pc.kernel(workgroup_size=1)
def many_args(X: pc.Buffer[u64], a: u64, b: u64, c: u64, d: u64, e: u64, f: u64, g: u64,
              h: u64, i: u64, j: u64, k: u64, l: u64, m: u64, n: u64, o: u64, p: u64, q: u64):
    X[0] = a + b * q
    X[1] = p - o


def test_argument_buffer_mode(host, tmp_path):
    """Over 128 bytes of arguments: the block goes to a buffer whose address is pushed."""
    ck = many_args.compile()
    assert ck.abi["mode"] == "arg_buffer"
    vals = list(range(3, 20))
    r = run(host, ck, tmp_path, (1, 1, 1), [np.zeros(2, np.uint64), *vals],
            {"X": np.array([3 + 4 * 19, 18 - 17], np.uint64)})
    assert r.returncode == 0, r.stdout + r.stderr


MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=32, subgroup_size=32)
def tile_gemm(A: pc.ReadBuffer[f16], B: pc.ReadBuffer[f16], C: pc.WriteBuffer[f32], N: u32,
              K: u32):
    m0, n0 = pc.workgroup_id.x * 16, pc.workgroup_id.y * 16
    acc = Acc.fill(0.0)
    for k in range(0, K, 16):
        acc = pc.mul_add(MatA.load(A, m0 * K + k, K), MatB.load(B, k * N + n0, N), acc)
    pc.store(C, m0 * N + n0, acc, N)


@pytest.mark.gpu
@pytest.mark.parametrize("abi", ["device_address", "descriptors"])
def test_khr_cooperative_matrix_gemm(host, tmp_path, abi):
    from pycoop.runtime.vulkan import get_runtime
    ck = tile_gemm.compile(abi=abi)
    missing = get_runtime().capabilities.missing(ck.requirements)
    if missing:
        pytest.skip(f"the device lacks {', '.join(missing)}")
    M, N, K = 64, 48, 80
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    r = run(host, ck, tmp_path, (M // 16, N // 16, 1), [a, b, c, N, K],
            {"C": a.astype(np.float32) @ b.astype(np.float32)})
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr
