"""docs/rules.md against the code and the tests: every rule id pycoop raises has a row, every
row names tests that exist and check it, every CompileError/EmulatorError states its rule, the
packages in ID_REQUIRED give every rule an id, and every failing SPIRV-Tools check of
validation_rules_checklist.md is accounted for."""
from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "rules.md"
# Where every rule must carry an id (a package or file, relative to the repository root).
ID_REQUIRED = ("pycoop",)
# Where every error must also say what to do (hint=): the ops and what runs them.
HINT_REQUIRED = ("pycoop/frontend", "pycoop/ops", "pycoop/ir", "pycoop/codegen", "pycoop/emulator")
CHECKED = {"compile time", "emulator", "checked launch", "spirv-val", "by construction"}
ERRORS = ("CompileError", "EmulatorError", "KernelFault")
CHECKLIST_CANDIDATES = [ROOT.parent / "shared", ROOT.parent.parent / "shared", Path("/work/shared")]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _table(heading: str) -> list[list[str]]:
    """Rows of the tables under `## heading` (one per `###` family), without their headers."""
    lines = DOC.read_text().splitlines()
    start = lines.index(f"## {heading}")
    rows, in_table = [], False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        row = line.startswith("|")
        if row and in_table and not set(line) <= set("|- "):
            rows.append(_cells(line))
        in_table = row
    return rows


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


RULES = {_code(r[0])[0]: {"rule": r[1], "checked": r[2], "tests": _code(r[3])} for r in _table("Rules")}


@functools.cache
def _sources() -> tuple:
    return tuple((path, ast.parse(path.read_text(), str(path)))
                 for path in sorted((ROOT / "pycoop").rglob("*.py")))


def _error_calls():
    """(file, call, keywords) of every CompileError/EmulatorError construction in pycoop."""
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                if name in ERRORS:
                    yield path, node, {k.arg: k.value for k in node.keywords}


@functools.cache
def _test_file(path: Path) -> tuple[str, frozenset]:
    """A test file's text and the names of its module-level test functions."""
    src = path.read_text()
    return src, frozenset(n.name for n in ast.parse(src).body if isinstance(n, ast.FunctionDef))


def _is_internal(call: ast.Call) -> bool:
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant):
        return str(first.value).startswith("internal")
    if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
        return str(first.values[0].value).startswith("internal")
    return False


@functools.cache
def _raised_ids() -> dict[str, str]:
    """id -> where: the literal ids in rule_id= arguments of any call (an error's, or a helper's
    such as the emulator's check_instances, which raises with it; `"a" if c else "b"` names
    both), and the values of module-level RULE_IDS."""
    ids = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            for k in node.keywords if isinstance(node, ast.Call) else ():
                if k.arg == "rule_id":
                    for c in ast.walk(k.value):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str) \
                                and re.fullmatch(r"[a-z0-9]+\.[a-z0-9-]+", c.value):
                            ids[c.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    for path, tree in _sources():
        if any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "RULE_IDS" for t in n.targets)
               for n in tree.body):
            mod = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
            for rid in mod.RULE_IDS.values():
                ids[rid] = str(path.relative_to(ROOT))
    return ids


def test_table_is_well_formed():
    rows = _table("Rules")
    ids = [_code(r[0])[0] for r in rows]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert ids == sorted(ids), "keep the rows sorted by id"
    for rid, row in RULES.items():
        assert re.fullmatch(r"[a-z0-9]+\.[a-z0-9-]+", rid), rid
        assert row["rule"], rid
        kinds = {re.sub(r" \(.*\)", "", k.strip()) for k in row["checked"].split(",")}
        assert kinds <= CHECKED, (rid, kinds)
        assert row["tests"], f"{rid}: no test"


def test_every_raised_rule_id_has_a_row():
    missing = {rid: where for rid, where in _raised_ids().items() if rid not in RULES}
    assert not missing, f"rule ids raised in pycoop without a row in docs/rules.md: {missing}"


def test_every_row_is_a_rule_pycoop_raises():
    raised = _raised_ids()
    extra = [rid for rid in RULES if rid not in raised]
    assert not extra, f"rows of docs/rules.md that pycoop does not raise: {extra}"


@pytest.mark.parametrize("rid", sorted(RULES))
def test_row_tests_exist_and_check_the_rule(rid):
    tag = rid.split(".", 1)[1].lower()
    for ref in RULES[rid]["tests"]:
        path, _, func = ref.partition("::")
        file = ROOT / path
        assert file.is_file(), f"{rid}: {path} does not exist"
        src, names = _test_file(file)
        assert func.split("[")[0] in names, f"{rid}: {path} has no test {func}"
        low = src.lower()
        assert rid in src or f'"{tag}"' in low or f"[{tag}]" in low or f"({tag})" in low, \
            f"{rid}: {path} does not name the rule (its id or tag)"


def test_every_error_states_its_rule():
    bare = [f"{p.relative_to(ROOT)}:{c.lineno}" for p, c, kw in _error_calls()
            if "rule" not in kw and not _is_internal(c)]
    assert not bare, f"CompileError/EmulatorError without rule=: {bare}"


def _under(path: Path, places: tuple) -> bool:
    rel = str(path.relative_to(ROOT))
    return any(rel == r or rel.startswith(r + "/") for r in places)


def test_rules_have_ids_where_required():
    bare = [f"{p.relative_to(ROOT)}:{c.lineno}" for p, c, kw in _error_calls()
            if _under(p, ID_REQUIRED) and "rule_id" not in kw and not _is_internal(c)]
    assert not bare, f"rules without rule_id= in {ID_REQUIRED}: {bare}"


def test_errors_say_what_to_do_where_required():
    bare = [f"{p.relative_to(ROOT)}:{c.lineno}" for p, c, kw in _error_calls()
            if _under(p, HINT_REQUIRED) and "hint" not in kw and not _is_internal(c)]
    assert not bare, f"errors without hint= in {HINT_REQUIRED}: {bare}"


def test_every_spirv_tools_check_is_accounted_for():
    checklist = next((d / "reference" / "validation_rules_checklist.md" for d in CHECKLIST_CANDIDATES
                      if (d / "reference" / "validation_rules_checklist.md").is_file()), None)
    if checklist is None:
        pytest.skip("shared/reference/validation_rules_checklist.md is not beside the repository")
    table = {}
    for row in _table("Rules SPIRV-Tools checks"):
        key = _code(row[0])[0]
        ids = _code(row[1])
        table[key] = ids
        assert ids or row[1].startswith(("by construction", "spirv-val")), row
        for rid in ids:
            assert rid in RULES, f"{key}: {rid} is not in the rules table"
    for line in checklist.read_text().splitlines():
        if "SPV_ERROR" not in line:
            continue
        name = re.match(r"TEST_F\(\w+, *(\w*)", line).group(1) or line.split("|")[2].strip().split(" || ")[0]
        assert name in table, f"SPIRV-Tools check {name} is not in docs/rules.md"
