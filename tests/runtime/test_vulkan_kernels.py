"""pycoop kernels without cooperative matrices through the real Vulkan path (lavapipe in CI),
compared with the emulator: integers exactly, floats within the stated tolerance."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, i32, u32

pytestmark = pytest.mark.vulkan


@pytest.fixture(scope="module", autouse=True)
def _device():
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")


def both(kernel, grid, *args):
    """Outputs of the Vulkan run and of the emulator run on copies of the same inputs."""
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    assert kernel[grid](*gpu, backend="vulkan").backend == "vulkan"
    kernel[grid](*emu, backend="emulator")
    return gpu, emu


@pc.kernel(workgroup_size=64)
def arith(X: pc.ReadBuffer[i32], Y: pc.ReadBuffer[i32], Out: pc.WriteBuffer[i32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        x, y = X[i], Y[i]
        r = (x // y) * 3 + x % y - (x >> 2) + (y << 1) ^ (x & y) | (x - y)
        Out[i] = pc.select(x > y, r, pc.max(x, y) - pc.min(x, y) * 2)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_integer_ops_match(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(-2**20, 2**20, n).astype(np.int32)
    Y = rng.integers(1, 2**10, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
    gpu, emu = both(arith, -(-n // 64), X, Y, np.zeros(n, np.int32), n)
    np.testing.assert_array_equal(gpu[2], emu[2])


@pc.kernel(workgroup_size=32)
def floats(X: pc.ReadBuffer[f32], Out: pc.Buffer[f32], H: pc.Buffer[f16], I: pc.Buffer[i32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        x = X[i]
        Out[i] = pc.exp(x * 0.25) + pc.sqrt(pc.abs(x)) - pc.floor(x) * 0.5
        H[i] = f16(x * 3.0)
        I[i] = i32(x * 100.0)


def test_float_math_and_conversions_match():
    rng = np.random.default_rng(1)
    n = 200
    X = (rng.standard_normal(n) * 10).astype(np.float32)
    gpu, emu = both(floats, -(-n // 32), X, np.zeros(n, np.float32), np.zeros(n, np.float16),
                    np.zeros(n, np.int32), n)
    np.testing.assert_allclose(gpu[1], emu[1], rtol=1e-5, atol=1e-5)   # GLSL.std.450 precision
    np.testing.assert_array_equal(gpu[2], emu[2])                       # round to nearest even
    np.testing.assert_array_equal(gpu[3], emu[3])                       # truncation


@pc.kernel(workgroup_size=64)
def control(X: pc.ReadBuffer[u32], Out: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    if i >= n:
        return                                   # early exit for the tail invocations
    x = X[i]
    steps = u32(0)
    while x != 1 and steps < 500:                # Collatz, divergent trip counts
        x = pc.select(x % 2 == 0, x // 2, 3 * x + 1)
        steps += 1
    total = u32(0)
    for j in range(0, steps, 3):                 # runtime bound and step
        if j % 2 == 0:
            total += j
        elif j % 5 == 1:
            total += 2 * j
        else:
            total -= 1
    Out[i] = total


def test_control_flow_matches():
    n = 150
    X = np.arange(1, n + 1, dtype=np.uint32) * 7
    gpu, emu = both(control, -(-n // 64), X, np.zeros(n, np.uint32), n)
    np.testing.assert_array_equal(gpu[1], emu[1])


@pc.kernel(workgroup_size=64)
def reverse(X: pc.ReadBuffer[f32], Out: pc.WriteBuffer[f32]):
    sh = pc.shared(f32, 64)
    t = pc.local_invocation_id.x
    base = pc.workgroup_id.x * 64
    sh[t] = X[base + t]
    pc.barrier()
    Out[base + t] = sh[63 - t]


def test_shared_memory_and_barrier_match():
    X = np.arange(256, dtype=np.float32)
    gpu, emu = both(reverse, 4, X, np.zeros(256, np.float32))
    np.testing.assert_array_equal(gpu[1], emu[1])
    np.testing.assert_array_equal(gpu[1].reshape(4, 64), X.reshape(4, 64)[:, ::-1])


@pc.kernel(workgroup_size=32)
def many(A: pc.Buffer[f32], B: pc.Buffer[f32], C: pc.Buffer[f32], D: pc.Buffer[f32], E: pc.Buffer[f32],
         F: pc.Buffer[f32], G: pc.Buffer[f32], H: pc.Buffer[f32], I: pc.Buffer[f32], J: pc.Buffer[f32],
         K: pc.Buffer[f32], L: pc.Buffer[f32], M: pc.Buffer[f32], N: pc.Buffer[f32], O: pc.Buffer[f32],
         P: pc.Buffer[f32], s: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        P[i] = A[i] + B[i] + C[i] + D[i] + E[i] + F[i] + G[i] + H[i] + I[i] + J[i] + K[i] + L[i] \
            + M[i] + N[i] + O[i] * s


def test_argument_buffer_mode_matches():
    """More than 128 bytes of arguments: passed through an argument buffer."""
    n = 40
    arrays = [np.full(n, k, np.float32) for k in range(15)] + [np.zeros(n, np.float32)]
    assert many.compile().abi["mode"] == "arg_buffer"
    gpu, emu = both(many, 2, *arrays, 2.0, n)
    np.testing.assert_array_equal(gpu[15], emu[15])
    np.testing.assert_array_equal(gpu[15], np.full(n, sum(range(14)) + 28, np.float32))


def test_examples_without_matrices_run_on_vulkan():
    import runpy
    from pathlib import Path
    with pc.use_backend("vulkan"):
        runpy.run_path(str(Path(__file__).parents[2] / "examples" / "softmax_rows.py"),
                       run_name="__main__")


@pc.kernel(workgroup_size=32)
def scan_rows(X: pc.ReadBuffer[f32], Out: pc.Buffer[f32], n: u32, rows: u32):
    r = pc.global_invocation_id.x
    if r < rows:
        s = f32(0.0)
        for j in range(n):
            v = X[r * n + j]
            if v < -0.5:
                continue
            if v > 1.5:
                break
            s += v
        Out[r] = s


def test_break_and_continue_match():
    rng = np.random.default_rng(7)
    rows, n = 70, 33
    X = rng.standard_normal(rows * n).astype(np.float32)
    gpu, emu = both(scan_rows, -(-rows // 32), X, np.zeros(rows, np.float32), n, rows)
    np.testing.assert_allclose(gpu[1], emu[1], rtol=1e-6, atol=1e-6)


@pc.kernel(workgroup_size=64)
def bump(X: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        X[i] = X[i] * 3 + i


@pytest.mark.parametrize("backend", ["vulkan", "emulator"])
def test_repeat_runs_back_to_back_on_the_same_buffers(backend):
    """repeat=N: N timed runs, each seeing the previous run's writes, one readback."""
    n, runs = 1000, 5
    X = np.arange(n, dtype=np.uint32)
    result = bump[-(-n // 64)](X, n, backend=backend, repeat=runs)
    want = np.arange(n, dtype=np.uint32)
    for _ in range(runs):
        want = want * np.uint32(3) + np.arange(n, dtype=np.uint32)
    np.testing.assert_array_equal(X, want)
    assert result.backend == backend and len(result.times_ms) == runs
    assert result.time_ms == min(result.times_ms)
    for bad in (0, -1, 1.5, True, 5000):
        with pytest.raises(pc.ArgumentError, match="repeat must be an int from 1 to 4096"):
            bump[1](X, n, backend=backend, repeat=bad)


@pc.kernel(workgroup_size=64)
def divrem(X: pc.ReadBuffer[i32], Y: pc.ReadBuffer[i32], Q: pc.WriteBuffer[i32],
           R: pc.WriteBuffer[i32], V: pc.WriteBuffer[i32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Q[i] = X[i] // Y[i]
        R[i] = X[i] % Y[i]
        v = pc.make_vector([X[i], -X[i]]) % pc.make_vector([Y[i], Y[i]])
        V[i] = v[1]


def test_signed_division_and_remainder_on_every_sign():
    """`//` truncates and `%` takes the dividend's sign (OpSDiv / OpSRem) for negative
    operands too, where Vulkan leaves OpSRem undefined: pycoop emits an unsigned remainder of
    the magnitudes instead."""
    xs = [7, -7, 0, 1, -1, 707947, -707947, 2**31 - 1, -2**31, 123456789, -5]
    ys = [3, -3, 1, -1, 268, -268, 2**31 - 1, -2**31, 7, -1000]
    pairs = [(x, y) for x in xs for y in ys if not (x == -2**31 and y == -1)]
    X = np.array([p[0] for p in pairs], np.int32)
    Y = np.array([p[1] for p in pairs], np.int32)
    n = len(pairs)

    def quot(x, y):                                  # C: toward zero
        return abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)

    def neg(x):                                      # i32 negation wraps at -2**31
        return -x if x != -2**31 else x
    q = [quot(x, y) for x, y in pairs]
    r = [x - quot(x, y) * y for x, y in pairs]
    rv = [neg(x) - quot(neg(x), y) * y for x, y in pairs]
    gpu, emu = both(divrem, -(-n // 64), X, Y, *(np.zeros(n, np.int32) for _ in range(3)), n)
    for out in (gpu, emu):
        np.testing.assert_array_equal(out[2], np.array(q, np.int64).astype(np.int32))
        np.testing.assert_array_equal(out[3], np.array(r, np.int64).astype(np.int32))
        np.testing.assert_array_equal(out[4], np.array(rv, np.int64).astype(np.int32))
    assert "OpSRem" not in divrem.compile().spvasm


def _vector_kernel(elem, count):
    V = pc.vec(elem, count)

    @pc.kernel(workgroup_size=64)
    def vectors(A: pc.ReadBuffer[V], B: pc.Buffer[V], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            a, b = A[i], B[i]
            s = a + b
            B[i] = pc.make_vector([s[(j + 1) % count] for j in range(count)])   # rotated
    return vectors


@pytest.mark.parametrize("elem,count", [(u32, 4), (f32, 2), (f16, 4), (i32, 2), (pc.u8, 4)])
def test_buffers_of_vectors_match(elem, count):
    """Buffers of 2- and 4-component vectors: one element is one vector (the NumPy array holds
    its components along the last axis), loaded and stored whole."""
    n = 150
    rng = np.random.default_rng(count)
    dt = np.dtype(elem.dtype)
    make = (lambda: rng.integers(0, 100, (n, count)).astype(dt)) if dt.kind in "ui" else \
        (lambda: rng.standard_normal((n, count)).astype(dt))
    A, B = make(), make()
    gpu, emu = both(_vector_kernel(elem, count), -(-n // 64), A, B, n)
    want = np.roll(A + B, -1, axis=1)
    np.testing.assert_array_equal(emu[1], want)
    np.testing.assert_array_equal(gpu[1], want)


@pc.kernel(workgroup_size=64)
def reverse_vectors(A: pc.ReadBuffer[pc.vec(u32, 4)], B: pc.WriteBuffer[pc.vec(u32, 4)]):
    sh = pc.shared(pc.vec(u32, 4), 64)
    l = pc.local_invocation_index()
    g = pc.workgroup_id.x * 64 + l
    sh[l] = A[g]
    pc.barrier()
    B[g] = sh[63 - l]


def test_shared_arrays_of_vectors_match():
    A = np.arange(3 * 64 * 4, dtype=np.uint32).reshape(-1, 4)
    gpu, emu = both(reverse_vectors, 3, A, np.zeros_like(A))
    want = A.reshape(3, 64, 4)[:, ::-1].reshape(-1, 4)
    np.testing.assert_array_equal(emu[1], want)
    np.testing.assert_array_equal(gpu[1], want)


@pytest.mark.parametrize("n", [0, 30, 77])
def test_loops_that_become_runtime_and_walrus_conditions_on_vulkan(n):
    """The `while` loops of tests/core/test_control_flow.py (a condition that becomes a
    runtime value, `while True:` with a runtime `break`, names bound by the condition, a
    short-circuit condition uniform over the invocations still looping) give Python's
    results on the driver, as on the emulator."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
    import test_control_flow as cf
    want = np.array([cf.python_while(i, n) for i in range(cf.WG)], np.int32)
    got = [np.zeros(cf.WG, np.int32) for _ in range(5)]
    cf.k_while_becomes_runtime[(1,)](got[0], backend="vulkan")
    cf.k_while_true_breaks[(1,)](got[1], n, backend="vulkan")
    cf.k_while_walrus[(1,)](got[2], got[3], n, backend="vulkan")
    cf.k_while_or[(1,)](got[4], n, backend="vulkan")
    np.testing.assert_array_equal(np.stack(got[:4], 1), want)
    emu = np.zeros(cf.WG, np.int32)
    cf.k_while_or[(1,)](emu, n, backend="emulator")
    np.testing.assert_array_equal(got[4], emu)


@pc.kernel(workgroup_size=16)
def counted_second(A: pc.Buffer[i32], n: i32):
    i = pc.cast(pc.local_invocation_index(), i32)
    x = i
    c = 0
    while x < n:          # the counter is not the loop's first carried value
        c += 1
        x = x + 1
    A[i] = x * 100 + c


def test_a_counted_loop_whose_index_is_not_the_first_carried_value():
    """The Vulkan lowering looks for counted loops (`while k < n: ... k = k + step`) by the
    loop's carried values; finding the index compared them with ==, which records an op (an
    internal error outside tracing) whenever the index was not the first of them."""
    gpu, emu = both(counted_second, (1,), np.zeros(16, np.int32), 20)
    np.testing.assert_array_equal(gpu[0], [max(i, 20) * 100 + max(0, 20 - i) for i in range(16)])
    np.testing.assert_array_equal(gpu[0], emu[0])


@pytest.mark.parametrize("lo,hi,step", [(0, 5, 1), (3, 1, 2), (4, -2, -3), (-2, 9, 5)])
def test_loop_variables_after_loops_on_vulkan(lo, hi, step):
    """A loop's variable after it (the last index, or the value from before where no
    iteration ran; runtime and unrolled loops) on the driver, as in Python."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
    import test_control_flow as cf
    gpu, emu = both(cf.k_loop_variables_after_loops, (1,), np.zeros(cf.WG * 6, np.int32),
                    lo, hi, step)
    want = [cf.python_loop_variables(i, lo, hi, step) for i in range(cf.WG)]
    np.testing.assert_array_equal(gpu[0].reshape(cf.WG, 6), want)
    np.testing.assert_array_equal(emu[0], gpu[0])
