"""Every ```python block of README.md and docs/*.md runs as written, on its own, in a fresh
interpreter with the repository root as the working directory. A block that cannot run alone is
marked by the line `<!-- fragment -->` directly above its opening fence, and is not run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "<!-- fragment -->"


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(line of the opening fence, code, is a fragment) of every ```python block."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"the fence at line {i + 1} is never closed"
            if fence == "```python":
                fragment = i > 0 and lines[i - 1].strip() == FRAGMENT
                out.append((i + 1, "\n".join(lines[i + 1:end]) + "\n", fragment))
            i = end
        i += 1
    return out


BLOCKS = [(page, line, code) for page in PAGES
          for line, code, fragment in python_blocks(page.read_text()) if not fragment]


def test_the_extractor():
    text = "\n".join(["intro", "```python", "x = 1", "```", FRAGMENT, "```python", "y(", "```",
                      "```sh", "ls", "```", "```python", "```"])
    assert python_blocks(text) == [(2, "x = 1\n", False), (6, "y(\n", True), (12, "\n", False)]
    with pytest.raises(AssertionError, match="never closed"):
        python_blocks("```python\nx = 1\n")
    assert len(BLOCKS) >= 10                   # the pages really hold runnable examples


@pytest.mark.parametrize("page, line, code", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in BLOCKS])
def test_block_runs_on_its_own(page, line, code, tmp_path):
    script = tmp_path / f"{page.stem}_{line}.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYCOOP_CACHE_DIR": str(tmp_path / "cache"),
           "MPLBACKEND": "Agg"}
    before = set(os.listdir(ROOT))
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"{page.relative_to(ROOT)}:{line} failed:\n{r.stderr[-3000:]}"
    assert set(os.listdir(ROOT)) == before, "the block left files in the repository"
