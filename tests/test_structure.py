"""The shape of the code base: imports point down, engines are complete, calls are checked.

* the import graph of the package has no cycle, the core imports no engine,
  nothing below the command line imports it;
* every engine implements the whole :class:`~distcal.engines.base.Engine`;
* unknown keyword arguments and bad parameter values fail before any data
  is read, naming the function or the parameter;
* the command line's exit codes: 2 for the user's input only, 1 for bugs;
* the library logs to the ``distcal`` logger and never prints.
"""

from __future__ import annotations

import ast
import io
import logging
import re
import subprocess
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import distcal
from distcal.engines import get_engine
from distcal.engines.base import Engine

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "distcal"


def _module(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, anywhere in its body.

    Imports inside functions count, and so do package ``__init__`` modules:
    ``from . import x`` is an edge to the submodule ``x`` when there is one,
    else to the package itself (whose ``__init__`` runs).
    """
    root = pkg.parent
    modules = {_module(p, root): p for p in pkg.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, p in modules.items():
        base = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    b = base.split(".")[: len(base.split(".")) - node.level + 1]
                    mod = ".".join(b + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [mod, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[m] |= {t for t in targets if t in modules and t != m}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph (a list of modules), or None."""
    state: dict[str, int] = {}

    def visit(v: str, path: list[str]) -> list[str] | None:
        state[v] = 1
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path + [v, w]
            if w not in state:
                found = visit(w, path + [v])
                if found:
                    return found
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v, [])
            if found:
                return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("layout", ["through the package root", "inside a function"])
def test_the_cycle_check_sees_cycles(tmp_path, layout):
    pkg = tmp_path / "toy"
    pkg.mkdir()
    if layout == "through the package root":
        (pkg / "__init__.py").write_text("from .api import fit\n")
        (pkg / "api.py").write_text("from .low import helper\n\ndef fit():\n    return 1\n")
        (pkg / "low.py").write_text("import toy\n\ndef helper():\n    return toy.fit()\n")
    else:
        (pkg / "__init__.py").write_text("")
        (pkg / "api.py").write_text("from .low import helper\n")
        (pkg / "low.py").write_text("def helper():\n    from . import api\n    return api\n")
    cycle = find_cycle(import_graph(pkg))
    assert cycle is not None and cycle[0] == cycle[-1] or (cycle and cycle[-1] in cycle[:-1])


def test_arrows_point_down():
    graph = import_graph()
    for m, targets in graph.items():
        if m.startswith("distcal.core"):
            assert all(t.startswith("distcal.core") or t == "distcal.errors" for t in targets), \
                (m, targets)
        if not m.startswith("distcal.cli") and m not in ("distcal.demo", "distcal.__main__"):
            assert not any(t.startswith("distcal.cli") for t in targets), (m, targets)
    for p in (PKG / "core").rglob("*.py"):
        text = p.read_text()
        assert not re.search(r"^\s*(import|from)\s+(pyspark|dask|distributed)\b", text, re.M), p


def test_executor_side_imports_nothing_optional():
    code = ("import sys, distcal.engines.spark.keyed\n"
            "print([m for m in ('yaml', 'matplotlib', 'tqdm', 'sklearn') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_nothing_refers_outside_the_repository():
    pattern = re.compile(r"\.\./shared|\b(API|ARCHITECTURE|PERFORMANCE)\.md\b")
    files = [ROOT / "README.md", *PKG.rglob("*.py"), *(ROOT / "jobs").rglob("*.py"),
             *(ROOT / "docs").rglob("*.md"), *(ROOT / "bench").rglob("*")]
    bad = [str(f.relative_to(ROOT)) for f in files
           if f.is_file() and pattern.search(f.read_text(errors="replace"))]
    assert bad == []


@pytest.mark.parametrize("name", ["local", "spark", "dask"])
def test_every_engine_implements_the_whole_interface(name):
    engine = get_engine(name)
    for attr in ("open_keyed", "transform_rows"):
        assert callable(getattr(engine, attr)), (name, attr)
    assert engine.name == name and isinstance(engine.options, frozenset)
    wanted = {a for a in Engine.__dict__ if not a.startswith("_")} - {"name", "options"}
    assert wanted <= set(dir(engine))


DF = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})


@pytest.mark.parametrize("call,match", [
    (lambda: distcal.fit(DF, foo=1), r"fit\(\) got unexpected keyword argument 'foo'"),
    (lambda: distcal.fit(DF, n_bins=3), r"fit\(\) got unexpected keyword argument 'n_bins'"),
    (lambda: distcal.fit(DF, method="sigmoid", increasing=False), r"fit\(\).*'increasing'"),
    (lambda: distcal.evaluate(DF.rename(columns={"score": "prob"}), bogus=1),
     r"evaluate\(\) got unexpected keyword argument 'bogus'"),
    (lambda: distcal.optimal_threshold(DF, memory_row=1),
     r"optimal_threshold\(\) got unexpected keyword argument 'memory_row'"),
    (lambda: distcal.fit_and_threshold(DF, n_range=3), r"fit_and_threshold\(\).*'n_range'"),
])
def test_unknown_keyword_arguments_are_type_errors(call, match):
    with pytest.raises(TypeError, match=match):
        call()


class Unreadable:
    """Data that fails if anything tries to read it (parameters come first)."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError("data was read before the parameters were checked")


@pytest.mark.parametrize("kwargs,name", [
    ({"y_min": float("nan")}, "y_min"), ({"y_max": float("inf")}, "y_max"),
    ({"y_min": 0.8, "y_max": 0.2}, "y_min"), ({"interpolation": "cubic"}, "interpolation"),
    ({"increasing": "up"}, "increasing"), ({"method": "magic"}, "method"),
    ({"method": "histogram", "n_bins": 0}, "n_bins"),
    ({"method": "histogram", "n_bins": 100_000_000}, "n_bins"),
    ({"method": "histogram", "strategy": "kmeans"}, "strategy"),
    ({"engine": "hadoop"}, "engine"), ({"on_invalid": "ignore"}, "on_invalid"),
])
def test_bad_parameters_fail_before_reading(kwargs, name):
    with pytest.raises(ValueError, match=name):
        distcal.fit(Unreadable(), **kwargs)


@pytest.mark.parametrize("kwargs,name", [
    ({"threshold": float("nan")}, "threshold"), ({"n_bins": 0}, "n_bins"),
    ({"strategy": "x"}, "strategy"), ({"confidence": 1.5}, "confidence"),
])
def test_bad_evaluation_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        distcal.evaluate(Unreadable(), **kwargs)


def test_bad_costs():
    with pytest.raises(ValueError, match="cost_fp"):
        distcal.optimal_threshold(Unreadable(), cost_fp=float("nan"))


def test_library_logs_and_never_prints(caplog, capsys):
    with caplog.at_level(logging.INFO, logger="distcal"):
        distcal.fit(DF)
    assert capsys.readouterr().out == ""
    messages = [r.getMessage() for r in caplog.records if r.name == "distcal"]
    assert any("local: read, validate and pool" in m for m in messages), messages
    assert any("5 rows used" in m for m in messages), messages


def _run_cli(argv, factory):
    from distcal.cli.run import run

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run(argv, prog="distcal", entry_point="distcal", backend_factory=factory)
    return code, out.getvalue(), err.getvalue()


def test_a_bug_is_exit_1_not_bad_input(tmp_path):
    def broken_backend(opts):
        raise ValueError("an internal invariant broke")

    argv = ["fit", "--input", "x.parquet", "--output", str(tmp_path / "m")]
    code, out, err = _run_cli(argv, broken_backend)
    assert code == 1 and out == ""
    assert err.strip() == "distcal: failed: ValueError: an internal invariant broke"
    code, _, err = _run_cli([*argv, "--verbose"], broken_backend)
    assert code == 1 and "Traceback (most recent call last)" in err


def test_version_and_help_with_defaults():
    r = subprocess.run([sys.executable, "-m", "distcal", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"distcal {distcal.__version__}"
    for sub in ("fit", "apply", "evaluate", "threshold"):
        r = subprocess.run([sys.executable, "-m", "distcal", sub, "--help"], capture_output=True,
                           text=True, timeout=60)
        listing = r.stdout.split("options:", 1)[1]
        options = re.findall(r"^  (--[\w-]+)", listing, re.M)
        assert options, r.stdout
        for opt in options:
            block = listing.split("  " + opt, 1)[1].split("\n  -", 1)[0]
            assert opt == "--help" or "default" in block or "required" in block, (sub, opt)


def test_job_entry_points_list_only_their_options():
    spark = subprocess.run([sys.executable, str(ROOT / "jobs" / "spark_calibrate.py"), "fit",
                            "--help"], capture_output=True, text=True, timeout=60).stdout
    dask = subprocess.run([sys.executable, str(ROOT / "jobs" / "dask_calibrate.py"), "fit",
                           "--help"], capture_output=True, text=True, timeout=60).stdout
    local = subprocess.run([sys.executable, "-m", "distcal", "fit", "--help"],
                           capture_output=True, text=True, timeout=60).stdout
    assert "--input-table" in spark and "--engine" not in spark and "--scheduler" not in spark
    assert "--scheduler" in dask and "--engine" not in dask and "--input-table" not in dask
    assert "--engine" in local and "--input-table" not in local


def test_verbose_logs_the_phases(tmp_path):
    path = tmp_path / "s.parquet"
    pd.DataFrame({"score": np.linspace(0, 1, 500),
                  "label": np.arange(500) % 2}).to_parquet(path)
    r = subprocess.run([sys.executable, "-m", "distcal", "fit", "-v", "--input", str(path),
                        "--output", str(tmp_path / "m")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "local: read, validate and pool" in r.stderr and "500 rows used" in r.stderr
    quiet = subprocess.run([sys.executable, "-m", "distcal", "fit", "-q", "--input", str(path),
                            "--output", str(tmp_path / "m2")], capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_unknown_keyword_fails_before_the_input_is_opened(tmp_path):
    with pytest.raises(TypeError, match=r"fit\(\) got unexpected keyword argument 'foo'"):
        distcal.fit(str(tmp_path / "missing.parquet"), foo=1)


def test_compiled_kernels_write_nothing_into_the_package(tmp_path):
    """numba's on-disk cache would be written next to the installed package: every kernel
    compiles per process instead (a fit that compiles them leaves no cache file)."""
    code = textwrap.dedent("""
        import numpy as np, pandas as pd, distcal
        from distcal.core import keyed, segment_pav
        rng = np.random.default_rng(0)
        n = 300_000
        df = pd.DataFrame({"score": rng.random(n), "label": rng.integers(0, 2, n),
                           "g": rng.integers(0, 50, n)})
        distcal.fit(df, by="g")
        assert keyed._jit_pool_unit_rows() is not None
        assert segment_pav._jit_pav_runs() is not None
    """)
    before = {p for p in PKG.rglob("*.nb[ic]")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {p for p in PKG.rglob("*.nb[ic]")} - before == set()
    for p in (ROOT / "distcal").rglob("*.py"):
        assert "cache=True" not in p.read_text(), p
