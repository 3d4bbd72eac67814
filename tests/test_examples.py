"""Every example runs as a script on the emulator and checks its own result."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

import pycoop as pc

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_and_checks_itself(path, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", [str(path)])      # as `python examples/x.py` runs it
    with pc.use_backend("emulator"):
        runpy.run_path(str(path), run_name="__main__")
    assert "error" in capsys.readouterr().out
