"""Every Python block of README.md runs as written, in a fresh process and directory.

Each block is a complete script: nothing from the test environment is
prepared for it (no PYSPARK_PYTHON, no data files), as for a user who
copies it. Blocks that start Spark or a Dask cluster are marked so that
``make test-fast`` leaves them out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_blocks(lang: str) -> list[str]:
    """Fenced code blocks of the README whose fence names ``lang`` ("" for none)."""
    blocks, current, fence = [], [], None
    for line in (ROOT / "README.md").read_text().splitlines():
        if fence is None and line.startswith("```"):
            fence, current = line[3:].strip(), []
        elif fence is not None and line.startswith("```"):
            if fence == lang:
                blocks.append("\n".join(current) + "\n")
            fence = None
        elif fence is not None:
            current.append(line)
    return blocks


def _params() -> list:
    out = []
    for i, block in enumerate(readme_blocks("python")):
        marks = []
        if "pyspark" in block:
            marks.append(pytest.mark.spark)
        if "distributed" in block:
            marks.append(pytest.mark.dask)
        out.append(pytest.param(block, id=f"block{i}", marks=marks))
    return out


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess:
    script = cwd / "block.py"
    script.write_text(block)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_readme_has_python_blocks():
    assert len(readme_blocks("python")) >= 7


@pytest.mark.parametrize("block", _params())
def test_readme_block_runs(block, tmp_path):
    r = run_block(block, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


def assert_example_prints_its_output(code_marker: str, output_marker: str, cwd: Path) -> None:
    """The README's Python block containing ``code_marker`` prints, exactly, the plain
    block containing ``output_marker``."""
    example = next(b for b in readme_blocks("python") if code_marker in b)
    table = next(b for b in readme_blocks("") if output_marker in b)
    r = run_block(example, cwd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == table.strip()


def test_readme_worked_example_prints_its_table(tmp_path):
    assert_example_prints_its_output("points = ", "SCORE >=", tmp_path)


def test_readme_threshold_example_prints_the_papers_answer(tmp_path):
    example = next(b for b in readme_blocks("python") if "loss_col" in b)
    r = run_block(example, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2.0", "-5.0"]


def test_readme_modl_example_prints_its_tables(tmp_path):
    assert_example_prints_its_output('method="modl"', "bad  fair  good", tmp_path)


def test_readme_centered_example_prints_its_table(tmp_path):
    assert_example_prints_its_output('interpolation in ("step"', "centered           AUC",
                                     tmp_path)


def test_readme_methods_example_prints_its_table(tmp_path):
    assert_example_prints_its_output('method="venn_abers"', "{'a': 2.05", tmp_path)
