"""A generated matrix of control flow: every loop kind x exit x exit condition x nesting depth x
(kernel or @pycoop.func helper). Each combination is written out as Python source (tracing
reads the source), traced, validated with spirv-val, run on the emulator and on Vulkan
(lavapipe in CI), and compared bit for bit with each other and with the same program run
as plain Python on each invocation's inputs.

Every body carries values out of its loop (`acc`, `last`) and computes a dead value inside it;
exits sit before the update (`continue`) and after it (`break`, `return`)."""
from __future__ import annotations

import importlib.util
import itertools
import textwrap

import numpy as np
import pytest


KINDS = ("range", "static_range", "pc_range", "pc_range_unroll", "while")
EXITS = ("none", "break", "continue", "both", "return")
CONDS = ("uniform", "divergent")
WG, GRID = 16, 2
BOUNDS = (3, 4)                 # outer, inner trip counts (runtime n, m where the kind allows)

# exit conditions on the loop index J (uniform) or also on the invocation's data x (divergent)
_COND = {
    ("continue", "uniform"): "{J} % u32(3) == u32(2)",
    ("continue", "divergent"): "(x + {J}) % u32(3) == u32(0)",
    ("break", "uniform"): "{J} == u32(3)",
    ("break", "divergent"): "(x ^ {J}) % u32(4) == u32(1)",
    ("return", "uniform"): "{J} == u32(2)",
    ("return", "divergent"): "(x + {J}) % u32(5) == u32(2)",
}


def combinations():
    """(kind, exit, cond, depth, helper); `none` has no condition, so it appears once."""
    out = []
    for kind, ex, depth, helper in itertools.product(KINDS, EXITS, (1, 2), (False, True)):
        for cond in (CONDS if ex != "none" else ("uniform",)):
            out.append((kind, ex, cond, depth, helper))
    return out


def _loop(kind: str, var: str, bound: str, n: int, lines: list[str], python: bool) -> tuple[str, str]:
    """The header of a loop over `var` (and the statements before it); returns the header and
    the expression of its index in the body."""
    if kind == "range":
        return f"for {var} in range({bound}):", var
    if kind == "static_range":
        return f"for {var} in range({n}):", var
    if kind in ("pc_range", "pc_range_unroll"):
        rng = "range" if python else "pc.range"
        unroll = ", unroll=True" if kind == "pc_range_unroll" and not python else ""
        return f"for {var} in {rng}(0, {n}{unroll}):", var
    lines.append(f"{var} = u32(0)")
    return f"while {var} < {bound}:", var


def _body(kind: str, ex: str, cond: str, depth: int, helper: bool, python: bool) -> list[str]:
    """The statements computing `acc` and `last` (indented by 4 per level)."""
    lines = ["acc = u32(1)", "last = u32(0)"]
    ret = ("return acc + u32(1000)" if helper or python
           else "O[gid] = acc + u32(1000)\nreturn")

    def inner(pre: str, ind: str):
        out: list[str] = []
        head, J = _loop(kind, "j", "m", BOUNDS[1], out, python)
        out = [ind + s for s in out] + [ind + head]
        b = ind + "    "
        if kind == "while":
            out.append(b + "j += u32(1)")
        out.append(b + f"dead = acc * x + {J}{pre}")            # never used
        if ex in ("continue", "both"):
            out += [b + f"if {_COND['continue', cond].format(J=J)}:", b + "    continue"]
        out.append(b + f"acc = (acc * u32(3) + x + {J}{pre}) % u32(65521)")
        out.append(b + f"last = u32({J})")
        if ex in ("break", "both"):
            out += [b + f"if {_COND['break', cond].format(J=J)}:", b + "    break"]
        if ex == "return":
            out += [b + f"if {_COND['return', cond].format(J=J)}:"]
            out += [b + "    " + s for s in ret.split("\n")]
        return out

    if depth == 1:
        lines += inner("", "")
    else:
        pre: list[str] = []
        head, I = _loop(kind, "i", "n", BOUNDS[0], pre, python)
        lines += pre + [head]
        if kind == "while":
            lines.append("    i += u32(1)")
        lines.append(f"    acc = acc + {I}")
        lines += inner(f" + {I}", "    ")
        lines.append(f"    last = last + {I} * u32(16)")
    return lines


def _name(c) -> str:
    kind, ex, cond, depth, helper = c
    return f"{kind}_{ex}_{cond}_d{depth}_{'func' if helper else 'kernel'}"


def _source(combos) -> str:
    """One module with a kernel (and a helper where asked) and a Python reference per combination."""
    parts = ["import pycoop as pc", "from pycoop import u32", "", ""]
    for c in combos:
        kind, ex, cond, depth, helper = c
        name = _name(c)
        body = _body(kind, ex, cond, depth, helper, python=False)
        result = "acc + last * u32(7)"
        if helper:
            parts += ["@pc.func", f"def h_{name}(x, n, m):"]
            parts += ["    " + s for s in "\n".join(body).split("\n")]
            parts += [f"    return {result}", ""]
        parts += [f"@pc.kernel(workgroup_size={WG})",
                  f"def k_{name}(A: pc.ReadBuffer[u32], O: pc.Buffer[u32], n: u32, m: u32):",
                  "    gid = pc.global_invocation_id.x",
                  "    x = A[gid]"]
        if helper:
            parts.append(f"    O[gid] = h_{name}(x, n, m)")
        else:
            parts += ["    " + s for s in "\n".join(body).split("\n")]
            parts.append(f"    O[gid] = {result}")
        # the reference: the same program on Python ints (u32 is int: no value exceeds 2**32)
        ref = _body(kind, ex, cond, depth, helper, python=True)
        parts += ["", f"def ref_{name}(x, n, m):", "    u32 = int"]
        parts += ["    " + s for s in "\n".join(ref).split("\n")]
        parts += [f"    return {result}", "", ""]
    return "\n".join(parts)


COMBOS = combinations()


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("cf_matrix") / "cf_matrix_kernels.py"
    path.write_text(_source(COMBOS))
    spec = importlib.util.spec_from_file_location("cf_matrix_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def vulkan():
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception:               # no Vulkan driver here: the emulator half still runs
        return False
    return True


def _inputs():
    x = np.random.default_rng(23).integers(0, 100, WG * GRID).astype(np.uint32)
    return x, np.full(WG * GRID, 0xDEAD, np.uint32)


def test_the_matrix_has_every_combination():
    assert len(COMBOS) == len(KINDS) * (len(EXITS) - 1) * len(CONDS) * 2 * 2 + len(KINDS) * 2 * 2
    assert len({_name(c) for c in COMBOS}) == len(COMBOS)


@pytest.mark.parametrize("combo", COMBOS, ids=_name)
def test_control_flow_combination(combo, generated, vulkan):
    name = _name(combo)
    k = getattr(generated, f"k_{name}")
    ref = getattr(generated, f"ref_{name}")
    x, init = _inputs()
    n, m = BOUNDS
    want = np.array([ref(int(v), n, m) for v in x], np.uint32)
    ck = k.compile()
    assert ck.spv                                          # lowered and passed spirv-val
    out = init.copy()
    k[GRID](x, out, n, m, backend="emulator")
    np.testing.assert_array_equal(out, want, err_msg=f"emulator, {name}")
    if vulkan:
        out_vk = init.copy()
        assert k[GRID](x, out_vk, n, m, backend="vulkan").backend == "vulkan"
        np.testing.assert_array_equal(out_vk, want, err_msg=f"Vulkan, {name}")


def test_generated_source_reads_like_user_code():
    """The generator writes what a user would (a spot check of one combination)."""
    src = _source([("range", "both", "divergent", 1, False)])
    body = textwrap.dedent(src.split("x = A[gid]\n", 1)[1].split("\n\n", 1)[0])
    assert body.splitlines()[:4] == ["acc = u32(1)", "last = u32(0)", "for j in range(m):",
                                     "    dead = acc * x + j"]
    assert "    if (x + j) % u32(3) == u32(0):\n        continue" in body
    assert "    if (x ^ j) % u32(4) == u32(1):\n        break" in body
