"""`python -m pycoop` runs the same command line as the `pycoop` script."""
import subprocess
import sys


def test_python_dash_m_runs_the_demo():
    r = subprocess.run([sys.executable, "-m", "pycoop", "demo", "--backend", "emulator", "--size", "128"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "backend: emulator" in r.stdout and "-> OK" in r.stdout


def test_python_dash_m_reports_usage_errors():
    r = subprocess.run([sys.executable, "-m", "pycoop", "no-such-command"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and "invalid choice" in r.stderr


# ---------------------------------------------------------------- the command line's promises
import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from pycoop import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYCOOP_CACHE_DIR": "off"}


def _pycoop(*args, env=ENV, **kw):
    return subprocess.run([sys.executable, "-m", "pycoop", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT, **kw)


@pytest.mark.parametrize("driver", ["present", "absent"])
def test_info_json_is_only_json(driver):
    env = dict(ENV)
    if driver == "absent":            # the Vulkan loader finds no driver at all
        env["VK_ICD_FILENAMES"] = env["VK_DRIVER_FILES"] = str(ROOT / "no-such-icd.json")
    r = _pycoop("info", "--json", env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)                       # nothing but JSON on stdout
    assert data["backends"]["emulator"]["available"] is True
    vk = data["backends"]["vulkan"]
    if driver == "absent":
        assert vk["available"] is False and vk["selected"] is None
        assert "driver" in vk["reason"].lower() or "vulkan" in vk["reason"].lower()
    elif vk["available"]:                             # lavapipe here: the selected device's caps
        assert vk["selected"]["device_name"] and vk["devices"]
    assert data["cache"]["dir"] is None               # PYCOOP_CACHE_DIR=off


def test_info_text_names_the_backends(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "emulator: available" in out and "vulkan:" in out and "SPIR-V cache:" in out


def test_info_into_a_closed_pipe_is_quiet():
    read_end, write_end = os.pipe()
    os.close(read_end)                                # like `pycoop info | head` once head exits
    try:
        r = subprocess.run([sys.executable, "-m", "pycoop", "info"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=300, env=ENV, cwd=ROOT)
    finally:
        os.close(write_end)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    assert r.returncode == 141


def test_disasm_of_a_missing_file_is_one_line(tmp_path):
    r = _pycoop("disasm", str(tmp_path / "missing.spv"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"pycoop disasm: No such file or directory: "
                                             f"{tmp_path / 'missing.spv'}"]


def test_disasm_of_an_invalid_binary_is_reported(tmp_path, capsys):
    bad = tmp_path / "bad.spv"
    bad.write_bytes(b"not SPIR-V at all")
    assert cli.main(["disasm", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pycoop disasm: ") and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["demo", "--size", "100"], "size must be a positive multiple of 64"),
    (["demo", "--size", "-64"], "size must be a positive multiple of 64"),
    (["demo", "--size", "big"], "size must be a positive multiple of 64"),
    (["compile", "x.py:k", "--subgroup-size", "12"], "subgroup size must be a power of two"),
    (["compile", "x.py:k", "-D", "TM"], "expected NAME=VALUE"),
    (["compile", "x.py:k", "-D", "2x=1"], "expected NAME=VALUE"),
])
def test_argparse_rejects_bad_values(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("define, message", [
    ("TM=banana", "-D TM=banana: TM expects an integer (its default is 2)"),
    ("TM=1.5", "-D TM=1.5: TM expects an integer (its default is 2)"),
    ("TM=true", "-D TM=true: TM expects an integer (its default is 2)"),
    ("TX=1", "-D TX: gemm_khr has no Const parameter 'TX' (its Const parameters: TM, TN)"),
])
def test_defines_are_checked_against_the_kernel(define, message, capsys):
    assert cli.main(["disasm", "pycoop.kernels.gemm:gemm_khr", "-D", define]) == 2
    assert capsys.readouterr().err.strip() == f"pycoop disasm: {message}"


def test_a_define_given_twice_and_an_empty_output_are_refused(tmp_path, capsys):
    # the last -D won in silence; -o "" wrote KERNEL.spv into the working directory
    assert cli.main(["disasm", "pycoop.kernels.gemm:gemm_khr", "-D", "TM=1", "-D", "TM=4"]) == 2
    assert capsys.readouterr().err.strip() == "pycoop disasm: -D TM: given twice (1 and 4)"
    assert cli.main(["compile", "pycoop.kernels.gemm:gemm_khr", "-o", ""]) == 2
    assert capsys.readouterr().err.strip() == "pycoop compile: -o: the output path is empty"


def test_defines_specialise(tmp_path, capsys):
    out = tmp_path / "g.spv"
    assert cli.main(["compile", "pycoop.kernels.gemm:gemm_khr", "-D", "TM=1", "-o", str(out)]) == 0
    meta = json.loads(Path(str(out) + ".json").read_text())
    assert meta["constants"] == {"TM": "1", "TN": "2"}
    assert out.read_bytes()[:4] == b"\x03\x02\x23\x07"


def test_missing_kernel_file_and_name(tmp_path, capsys):
    assert cli.main(["compile", str(tmp_path / "nope.py") + ":k"]) == 2
    assert "no such file" in capsys.readouterr().err
    src = tmp_path / "mod.py"
    src.write_text("x = 1\n")
    assert cli.main(["compile", f"{src}:k"]) == 2
    assert "has no kernel 'k' (kernels: none)" in capsys.readouterr().err


@pytest.mark.parametrize("source,message", [
    ("def (:\n", "SyntaxError: invalid syntax"),
    ("import pycoop\nraise RuntimeError('boom')\n", "RuntimeError: boom ({src}:2)"),
])
def test_a_kernel_file_that_fails_to_load_is_one_line(tmp_path, source, message):
    src = tmp_path / "broken.py"
    src.write_text(source)
    r = _pycoop("compile", f"{src}:k")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"pycoop compile: cannot load {src}: ")
    assert message.format(src=src) in r.stderr
    r = _pycoop("compile", "..:k")                        # a relative module name
    assert r.returncode == 2 and "Traceback" not in r.stderr and "cannot load .." in r.stderr


def test_a_kernel_file_named_like_a_module_does_not_replace_it(tmp_path):
    # registered as sys.modules["pycoop"], pycoop.py replaced pycoop itself: its own
    # `from pycoop import f32` failed
    (tmp_path / "pycoop.py").write_text(
        "import pycoop as pc\nfrom pycoop import f32\n\n"
        "@pc.kernel\ndef k(x: pc.Buffer[f32]):\n    x[0] = 1.0\n")
    r = _pycoop("compile", f"{tmp_path / 'pycoop.py'}:k", "-o", str(tmp_path / "k.spv"))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("var,value", [("PYCOOP_CACHE_MAX_MB", "lots"),
                                       ("PYCOOP_SUBGROUP_SIZE", "3"), ("PYCOOP_BACKEND", "gpu")])
def test_a_bad_setting_is_one_line(var, value):
    r = _pycoop("info", env={**ENV, var: value})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"pycoop info: {var}='{value}': expected ")


def test_a_kernel_that_breaks_a_rule_is_reported_without_traceback(tmp_path, capsys):
    src = tmp_path / "bad.py"
    src.write_text("import pycoop as pc\nfrom pycoop import f32, u32\n\n"
                   "@pc.kernel\ndef bad(x: pc.Buffer[f32], n: u32):\n    x[0] = x[1] + n\n")
    assert cli.main(["compile", f"{src}:bad", "-o", str(tmp_path / "bad.spv")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pycoop compile: {src}:6") and "rule:" in err and "Traceback" not in err


def test_every_option_has_help():
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help, f"pycoop {name} {action.option_strings or action.dest} has no help"
    for choice in subparsers._choices_actions:
        assert choice.help


def test_warnings_are_lines_of_the_command(monkeypatch, capsys):
    import warnings
    from pycoop.runtime import backend
    monkeypatch.setattr(backend, "_noticed", set())
    monkeypatch.setattr(backend, "vulkan_missing", lambda ck: ["extension VK_KHR_cooperative_matrix"])
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["demo", "--size", "64"]) == 0
    out, err = capsys.readouterr()
    assert "backend: emulator" in out and "-> OK" in out
    assert err.strip().splitlines() == [
        "pycoop demo: gemm_khr runs on the pycoop emulator: the Vulkan device lacks extension "
        "VK_KHR_cooperative_matrix (details: the warning's .reason, `pycoop info`)"]


def test_stats_prints_the_drivers_statistics_or_says_why_not(tmp_path, capsys):
    src = tmp_path / "fillmod.py"
    src.write_text("import pycoop as pc\n\n@pc.kernel(workgroup_size=64)\n"
                   "def fill(y: pc.Buffer[pc.f32]):\n    y[pc.global_invocation_id.x] = 1.0\n")
    rc = cli.main(["stats", f"{src}:fill", "--no-checked", "--json"])
    out, err = capsys.readouterr()
    if rc == 0:                      # a driver with VK_KHR_pipeline_executable_properties
        data = json.loads(out)
        assert data["kernel"] == "fill" and data["statistics"]
    else:                            # lavapipe reports none; no Vulkan at all: says so
        assert rc == 1 and err.startswith("pycoop stats: ") and "Traceback" not in err
        assert "statistics" in err or "Vulkan" in err
    assert cli.main(["stats", "pycoop.kernels.gemm:gemm_khr", "-D", "TX=1"]) == 2
    assert "gemm_khr has no Const parameter 'TX'" in capsys.readouterr().err
