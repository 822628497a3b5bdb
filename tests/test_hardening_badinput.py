"""The bad-input suite of the robustness promises (README, "Robustness promises").

Table-driven: each case names its surface (API, CLI, Spark job, Dask job),
the input it is given (data, model files, options, faults), the exception
type or exit code expected and the one-line message. Every case runs in a
fresh copy of one working directory, whose tree (names, sizes, times) must
be exactly the same afterwards: nothing written, nothing lost.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from forked_cli import ForkedCli

import distcal
from distcal.errors import OutputPathError, ParameterError
from distcal.model_format import _json_checksum

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Binary models in format 1 (tests/test_model_formats.py): their reader keeps every check.
V1_MODELS = ROOT / "tests" / "fixtures" / "models_v1"


# -- the working directory every case starts from -------------------------------

def _scores(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    return pd.DataFrame({"score": s, "label": (rng.random(n) < s).astype(np.int64),
                         "w": rng.uniform(0.5, 2.0, n)})


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("badinput_base")
    df = _scores()
    df.to_parquet(d / "in.parquet", index=False)
    df.assign(w=1e308).to_parquet(d / "bigw.parquet", index=False)
    (d / "mixed").mkdir()
    df.iloc[:1000].to_parquet(d / "mixed" / "part-0.parquet", index=False)
    pd.DataFrame({"score": pd.date_range("2024-01-01", periods=1000, freq="min"),
                  "label": df.label.iloc[1000:].to_numpy(), "w": 1.0}).to_parquet(
        d / "mixed" / "part-1.parquet", index=False)
    df.to_csv(d / "in.csv", index=False)
    (d / "ds").mkdir()
    df.to_parquet(d / "ds" / "part-0.parquet", index=False)
    (d / "csvdir").mkdir()
    df.to_csv(d / "csvdir" / "part-0.csv", index=False)
    labels = df.label.to_numpy().copy()
    labels[7] = 2**53 + 1
    pq.write_table(pa.table({"score": df.score.to_numpy(), "label": pa.array(labels)}),
                   d / "bigint.parquet")
    (d / "afile").write_text("not a directory\n")
    for method in ("isotonic", "sigmoid", "histogram", "modl"):
        distcal.fit(df, method=method).save(d / f"m_{method}")
    mc = pd.DataFrame({"s": list(np.random.default_rng(1).dirichlet([1, 1, 1], 300)),
                       "y": np.random.default_rng(2).integers(0, 3, 300)})
    distcal.fit(mc, score_col="s", label_col="y").save(d / "m_multi")
    mc.assign(s=[v[:2] if i == 7 else v for i, v in enumerate(mc.s)]).to_parquet(
        d / "ragged.parquet", index=False)
    df.assign(score=[f"{v:.3f}" if i % 500 else "high" for i, v in enumerate(df.score)]
              ).to_parquet(d / "text.parquet", index=False)
    for name in ("isotonic_linear", "sigmoid", "histogram", "venn_abers"):
        shutil.copytree(V1_MODELS / name, d / f"m_v1_{name}")
    (d / "alias.yaml").write_text("a: &x [1, 2]\nb: *x\n")
    (d / "overwrite_str.yaml").write_text('overwrite: "false"\n')
    (d / "engine_hadoop.yaml").write_text("engine: hadoop\n")
    (d / "nbins_str.yaml").write_text('n-bins: "10"\nmethod: histogram\n')
    # Issue 34: previous outputs of each kind, things that are not ours, odd configs.
    df.to_parquet(d / "prev.parquet", index=False)
    from distcal.report import write_report

    write_report([distcal.evaluate(df, prob_col="score")], d / "prev_report")
    (d / "foreign").mkdir()
    (d / "foreign" / "notes.txt").write_text("not a distcal output\n")
    (d / "emptydir").mkdir()
    (d / "dup_method.yaml").write_text("method: isotonic\nmethod: sigmoid\n")
    (d / "dup_spelling.yaml").write_text("score_col: score\nscore-col: label\n")
    (d / "dup_nbins.yaml").write_text("n-bins: 5\nmethod: histogram\nn_bins: 6\n")
    (d / "params.yaml").write_text("params:\n  n_bins: 3\n")
    pq.write_table(pa.table([df.score.to_numpy(), df.label.to_numpy(), df.w.to_numpy()],
                            names=["score", "label", "score"]), d / "dupcol.parquet")
    df.assign(g=[{"a": i % 3} for i in range(len(df))]).to_parquet(d / "struct.parquet")
    df.assign(g=[[i % 3] for i in range(len(df))]).to_parquet(d / "list.parquet")
    df.assign(w=1e305).to_parquet(d / "w305.parquet", index=False)
    df.assign(label=0).to_parquet(d / "negatives.parquet", index=False)
    df.assign(g=np.array([-np.inf, 1.0, np.inf])[np.arange(len(df)) % 3]).to_parquet(
        d / "ginf.parquet", index=False)
    p = np.random.default_rng(3).dirichlet([1, 1, 1], len(df))
    pd.DataFrame({"p0": p[:, 0], "p1": p[:, 1], "p2": p[:, 2],
                  "label": np.random.default_rng(4).integers(0, 3, len(df))}).to_parquet(
        d / "mc3.parquet", index=False)
    return d


def snapshot(root: Path) -> dict[str, tuple[str, int, int, str]]:
    """Every entry under ``root``: kind, size, modification time and, for regular files,
    the SHA-256 of the content (links not followed; FIFOs, sockets never opened). Files
    over 64 MiB (the 2 GiB sparse config) are known by their inode change time instead:
    any write sets it, and hashing one took 6 s."""
    import hashlib
    import stat as st_

    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            kind = ("link" if st_.S_ISLNK(st.st_mode) else "dir" if st_.S_ISDIR(st.st_mode)
                    else "file" if st_.S_ISREG(st.st_mode) else f"special-{st.st_mode:o}")
            digest = (str(st.st_ctime_ns) if kind == "file" and st.st_size > 64 << 20
                      else hashlib.sha256(p.read_bytes()).hexdigest() if kind == "file"
                      else os.readlink(p) if kind == "link" else "")
            out[str(p.relative_to(root))] = (kind, st.st_size if kind == "file" else 0,
                                             st.st_mtime_ns if kind != "dir" else 0, digest)
    return out


@pytest.fixture
def work(base, tmp_path) -> Path:
    d = tmp_path / "work"
    shutil.copytree(base, d, symlinks=True)
    return d


# -- editing model directories as an adversary would (checksums recomputed) --------

def resign(d: Path, edit: Callable[[dict], Any]) -> None:
    meta = json.loads((d / "model.json").read_text())
    edit(meta)
    meta["checksum"] = _json_checksum(meta)
    (d / "model.json").write_text(json.dumps(meta, allow_nan=True))


def retable(d: Path, edit: Callable[[pd.DataFrame], Any], file: str = "blocks.parquet",
            key: str = "blocks") -> None:
    t = pq.read_table(d / file).to_pandas()
    out = edit(t)
    t = t if out is None else out
    write_table(d, pa.Table.from_pandas(t, preserve_index=False), file, key)


def write_table(d: Path, table: pa.Table, file: str, key: str,
                edit: Callable[[dict], Any] = lambda meta: None) -> None:
    """``table`` as ``file`` (table ``key`` of model.json), model.json edited and re-signed."""
    pq.write_table(table, d / file)
    import hashlib

    digest = hashlib.sha256((d / file).read_bytes()).hexdigest()

    def fix(meta):
        meta["tables"][key]["sha256"] = digest
        meta["tables"][key]["rows"] = table.num_rows
        edit(meta)
    resign(d, fix)


def set_map(d: Path, column: str, value: Any, edit: Callable[[dict], Any] = lambda meta: None
            ) -> None:
    """Set ``column`` of the one map of a binary model (maps.parquet), checksums recomputed."""
    t = pq.read_table(d / "maps.parquet")
    i = t.schema.get_field_index(column)
    t = t.set_column(i, column, pa.array([value], t.schema.field(i).type))
    write_table(d, t, "maps.parquet", "maps", edit)


def reparam(d: Path, edit: Callable[[dict], Any]) -> None:
    """Edit the fitted parameters of a binary model (JSON in maps.parquet), re-signed."""
    params = json.loads(pq.read_table(d / "maps.parquet").column("params")[0].as_py())
    edit({"params": params})
    set_map(d, "params", json.dumps(params, allow_nan=True))


def param(name, value):
    """Set a parameter of model.json (``resign``) or of a map (``reparam``)."""
    return lambda meta: meta["params"].__setitem__(name, value)


def raw_json(d: Path, text: str) -> None:
    (d / "model.json").write_text(text)


def symlink_blocks(d: Path, file: str = "blocks.parquet") -> None:
    real = d.parent / "elsewhere.parquet"
    shutil.copy(d / file, real)
    (d / file).unlink()
    (d / file).symlink_to(real)


def symlink_json(d: Path) -> None:
    real = d.parent / "elsewhere.json"
    shutil.copy(d / "model.json", real)
    (d / "model.json").unlink()
    (d / "model.json").symlink_to(real)


def foreign_table(d: Path) -> None:
    """blocks.parquet named as ../m_isotonic_copy/blocks.parquet, its checksum recomputed."""
    other = d.parent / "other_model"
    shutil.copytree(d, other)
    import hashlib

    digest = hashlib.sha256((other / "blocks.parquet").read_bytes()).hexdigest()

    def edit(meta):
        meta["tables"]["blocks"].update(file="../other_model/blocks.parquet", sha256=digest)
    resign(d, edit)


def absolute_table(d: Path) -> None:
    import hashlib

    digest = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    resign(d, lambda meta: meta["tables"]["blocks"].update(file="/etc/passwd", sha256=digest))


def fifo_blocks(d: Path) -> None:
    (d / "blocks.parquet").unlink()
    os.mkfifo(d / "blocks.parquet")


def huge_json(d: Path) -> None:
    with open(d / "model.json", "r+b") as fh:  # sparse: costs no disk
        fh.truncate(200 << 20)


def multi_table(edit):
    def go(d: Path):
        retable(d, edit, file="blocks.parquet", key="blocks")
    return go


@dataclass
class ModelCase:
    id: str
    model: str
    fault: Callable[[Path], Any]
    match: str


def _set(key, value):
    return lambda meta: meta.__setitem__(key, value)


MODEL_CASES = [
    ModelCase("table-absolute-path", "isotonic", absolute_table, "not a plain file name|does "
              "not name"),
    ModelCase("table-dotdot-foreign-checksummed", "isotonic", foreign_table, "does not name"),
    ModelCase("table-symlink", "isotonic", lambda d: symlink_blocks(d), "symbolic link"),
    ModelCase("maps-symlink", "sigmoid", lambda d: symlink_blocks(d, "maps.parquet"),
              "symbolic link"),
    ModelCase("model-json-symlink", "isotonic", symlink_json, "symbolic link"),
    ModelCase("table-fifo", "isotonic", fifo_blocks, "not a regular file"),
    ModelCase("sigmoid-a-nan", "sigmoid", lambda d: reparam(d, param("a", math.nan)),
              "NaN is not a finite number"),
    ModelCase("sigmoid-a-text", "sigmoid", lambda d: reparam(d, param("a", "x")),
              "parameter a must be a finite number"),
    ModelCase("sigmoid-b-missing", "sigmoid",
              lambda d: reparam(d, lambda m: m["params"].pop("b")),
              "parameter b must be a finite number"),
    ModelCase("sigmoid-a-bool", "sigmoid", lambda d: reparam(d, param("a", True)),
              "parameter a must be a finite number"),
    ModelCase("sigmoid-params-not-json", "sigmoid", lambda d: set_map(d, "params", "{'a': 1"),
              "params of all rows"),
    ModelCase("histogram-prob-5", "histogram",
              lambda d: reparam(d, param("bin_prob", [5.0] * 10)),
              r"bin_prob must be 10 probabilities in \[0, 1\]"),
    ModelCase("histogram-edges-short", "histogram", lambda d: reparam(d, param("edges", [0, 1])),
              "edges must be 11 finite numbers"),
    ModelCase("histogram-edges-descending", "histogram",
              lambda d: reparam(d, param("edges", list(np.linspace(1, 0, 11)))),
              "edges are not in ascending order"),
    ModelCase("histogram-n-bins-bool", "histogram", lambda d: reparam(d, param("n_bins", True)),
              "n_bins must be an integer"),
    ModelCase("isotonic-interpolation", "isotonic",
              lambda d: reparam(d, param("interpolation", "cubic")), "interpolation must be"),
    ModelCase("isotonic-increasing", "isotonic",
              lambda d: reparam(d, param("increasing", "yes")), "increasing must be"),
    ModelCase("isotonic-y-min-2", "isotonic", lambda d: reparam(d, param("y_min", 2.0)),
              r"y_min must be null or a number in \[0, 1\]"),
    ModelCase("blocks-prob-5", "isotonic", lambda d: retable(d, lambda t: t.assign(prob=5.0)),
              r"probabilities must lie in \[0, 1\]"),
    ModelCase("blocks-prob-nan", "isotonic",
              lambda d: retable(d, lambda t: t.assign(prob=np.nan)),
              r"probabilities must lie in \[0, 1\]"),
    ModelCase("blocks-unsorted", "isotonic", lambda d: retable(d, lambda t: t.iloc[::-1]),
              "ascending|exceeds"),
    ModelCase("blocks-not-monotone", "isotonic",
              lambda d: retable(d, lambda t: t.assign(prob=t.prob.to_numpy()[::-1])),
              "not monotone"),
    ModelCase("blocks-edges-infinite", "histogram",
              lambda d: retable(d, lambda t: t.assign(score_max=np.inf)), "must be finite"),
    ModelCase("blocks-fewer-than-the-map-says", "isotonic",
              lambda d: retable(d, lambda t: t.iloc[1:]), "blocks in the table"),
    ModelCase("blocks-of-no-map", "isotonic", lambda d: retable(d, lambda t: t.assign(map=7)),
              "blocks in the table"),
    ModelCase("blocks-empty", "isotonic", lambda d: _no_blocks(d), "blocks table is empty"),
    ModelCase("blocks-negative-weight", "isotonic",
              lambda d: retable(d, lambda t: t.assign(weight=-1.0)), "weights must be finite"),
    ModelCase("blocks-text-column", "isotonic",
              lambda d: retable(d, lambda t: t.assign(prob=t.prob.astype(str))),
              "expected blocks"),
    ModelCase("blocks-missing-column", "isotonic",
              lambda d: retable(d, lambda t: t.drop(columns=["prob"])), "expected blocks"),
    ModelCase("sigmoid-with-blocks", "sigmoid", lambda d: _graft_blocks(d), "has no blocks"),
    ModelCase("modl-cost-text", "modl", lambda d: reparam(d, param("cost", "low")),
              "cost must be a finite number"),
    ModelCase("unknown-method", "isotonic", lambda d: resign(d, _set("method", "magic")),
              "unknown method"),
    ModelCase("map-n-rows-negative", "isotonic",
              lambda d: set_map(d, "n_rows", -3, _set("n_rows", -3)), "n_rows and dropped_rows"),
    ModelCase("dropped-rows-negative", "isotonic", lambda d: resign(d, _set("dropped_rows", -3)),
              "n_rows and dropped_rows"),
    ModelCase("n-rows-not-the-maps", "isotonic", lambda d: resign(d, _set("n_rows", 7)),
              "counts of model.json"),
    ModelCase("binary-with-a-class", "isotonic", lambda d: set_map(d, "class", 1),
              "one map, of all rows and no class"),
    ModelCase("extra-table", "isotonic",
              lambda d: resign(d, lambda m: m["tables"].__setitem__("x", {"file": "x"})),
              "unexpected tables"),
    ModelCase("json-deeply-nested", "isotonic",
              lambda d: raw_json(d, '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}"),
              "nested too deeply"),
    ModelCase("json-nested-under-limit-of-parser", "isotonic",
              lambda d: raw_json(d, '{"a": ' + "[" * 500 + "]" * 500 + "}"),
              "nested too deeply"),
    ModelCase("json-huge", "isotonic", huge_json, "larger than"),
    ModelCase("json-infinity", "isotonic", lambda d: raw_json(d, '{"format": Infinity}'),
              "Infinity is not a finite number"),
    ModelCase("json-1e400", "isotonic", lambda d: raw_json(d, '{"format": 1e400}'),
              "out of the range of a float"),
    ModelCase("json-huge-integer", "isotonic", lambda d: raw_json(d, '{"n": ' + "9" * 50_000 + "}"),
              "damaged"),
    ModelCase("json-not-object", "isotonic", lambda d: raw_json(d, "[1, 2, 3]"),
              "not a distcal model"),
    ModelCase("json-not-utf8", "isotonic",
              lambda d: (d / "model.json").write_bytes(b'{"format": "\xff\xfe"}'), "damaged"),
    ModelCase("multiclass-table-symlink", "multi", symlink_blocks, "symbolic link"),
    ModelCase("multiclass-prob-5", "multi", multi_table(lambda t: t.assign(prob=5.0)),
              r"probabilities must lie in \[0, 1\]"),
    # Issue 34, rule 13: the format version is an integer, not a bool or a float equal to it.
    ModelCase("format-version-true", "isotonic", lambda d: resign(d, _set("format_version", True)),
              "model format version True"),
    ModelCase("format-version-float", "isotonic", lambda d: resign(d, _set("format_version", 2.0)),
              "model format version 2.0"),
    ModelCase("format-version-string", "sigmoid", lambda d: resign(d, _set("format_version", "2")),
              "model format version"),
    ModelCase("multiclass-format-version-true", "multi",
              lambda d: resign(d, _set("format_version", True)), "format version True"),
    ModelCase("multiclass-deeply-nested", "multi",
              lambda d: raw_json(d, "[" * 100_000 + "]" * 100_000), "nested too deeply"),
    # Binary models in format 1: their parameters in model.json, their blocks or steps alone.
    ModelCase("v1-table-absolute-path", "v1_isotonic_linear", absolute_table,
              "not a plain file name|does not name"),
    ModelCase("v1-table-dotdot-foreign-checksummed", "v1_isotonic_linear", foreign_table,
              "does not name"),
    ModelCase("v1-table-symlink", "v1_isotonic_linear", lambda d: symlink_blocks(d),
              "symbolic link"),
    ModelCase("v1-steps-symlink", "v1_venn_abers", lambda d: symlink_blocks(d, "steps.parquet"),
              "symbolic link"),
    ModelCase("v1-table-fifo", "v1_isotonic_linear", fifo_blocks, "not a regular file"),
    ModelCase("v1-table-altered", "v1_isotonic_linear",
              lambda d: _flip_byte(d / "blocks.parquet"), "checksum"),
    ModelCase("v1-sigmoid-a-nan", "v1_sigmoid", lambda d: resign(d, param("a", math.nan)),
              "NaN is not a finite number"),
    ModelCase("v1-sigmoid-b-missing", "v1_sigmoid",
              lambda d: resign(d, lambda m: m["params"].pop("b")),
              "parameter b must be a finite number"),
    ModelCase("v1-histogram-edges-descending", "v1_histogram",
              lambda d: resign(d, param("edges", list(np.linspace(1, 0, 9)))),
              "edges are not in ascending order"),
    ModelCase("v1-isotonic-interpolation", "v1_isotonic_linear",
              lambda d: resign(d, param("interpolation", "cubic")), "interpolation must be"),
    ModelCase("v1-blocks-prob-5", "v1_isotonic_linear",
              lambda d: retable(d, lambda t: t.assign(prob=5.0)),
              r"probabilities must lie in \[0, 1\]"),
    ModelCase("v1-blocks-not-monotone", "v1_isotonic_linear",
              lambda d: retable(d, lambda t: t.assign(prob=t.prob.to_numpy()[::-1])),
              "not monotone"),
    ModelCase("v1-steps-prob-2", "v1_venn_abers",
              lambda d: retable(d, lambda t: t.assign(prob=2.0), "steps.parquet", "steps"),
              "step values"),
    ModelCase("v1-n-rows-negative", "v1_isotonic_linear", lambda d: resign(d, _set("n_rows", -3)),
              "n_rows and dropped_rows"),
    ModelCase("v1-extra-table", "v1_sigmoid",
              lambda d: resign(d, lambda m: m["tables"].__setitem__("x", {"file": "x"})),
              "unexpected tables"),
    ModelCase("v1-format-version-true", "v1_isotonic_linear",
              lambda d: resign(d, _set("format_version", True)), "model format version True"),
    ModelCase("v1-format-version-float", "v1_sigmoid",
              lambda d: resign(d, _set("format_version", 1.0)), "model format version 1.0"),
    ModelCase("v1-json-deeply-nested", "v1_sigmoid",
              lambda d: resign(d, param("a", json.loads("[" * 40 + "]" * 40))),
              "nested too deeply"),
]


def _graft_blocks(d: Path) -> None:
    """The blocks of the isotonic model, given to the sigmoid model's map, all re-signed."""
    iso = d.parent / "m_isotonic"
    shutil.copy(iso / "blocks.parquet", d / "blocks.parquet")
    entry = json.loads((iso / "model.json").read_text())["tables"]["blocks"]
    set_map(d, "blocks", entry["rows"], lambda meta: meta["tables"].__setitem__("blocks", entry))


def _no_blocks(d: Path) -> None:
    """An empty blocks table, and a map that says it has none."""
    retable(d, lambda t: t.iloc[:0])
    set_map(d, "blocks", 0)


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("case", MODEL_CASES, ids=[c.id for c in MODEL_CASES])
def test_model_directory(case, work):
    d = work / f"m_{case.model}"
    case.fault(d)
    before = snapshot(work)
    with pytest.raises(distcal.ModelError) as info:
        distcal.load(d)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 600
    assert re.search(case.match, msg), msg
    assert snapshot(work) == before


# -- API: parameters (checked before any data is read), data and numbers ----------

def _fifo(name: str):
    """A FIFO in the case's own working directory (never a real device)."""
    def make(w: Path) -> None:
        (w / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(w / name)
    return make


def _link(name: str, to: str):
    return lambda w: os.symlink(to, w / name)


def _socket(name: str):
    def make(w: Path) -> None:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(w)  # a short relative path: AF_UNIX paths are limited to 108 bytes
        try:
            sock.bind(name)
        finally:
            os.chdir(cwd)
            sock.close()  # the socket file stays
    return make


def _sparse(name: str, size: int):
    def make(w: Path) -> None:
        with open(w / name, "wb") as fh:  # sparse: costs no disk
            fh.truncate(size)
    return make


MISSING = "/nonexistent/distcal/input.parquet"  # proves no data was read


@dataclass
class ApiCase:
    id: str
    call: Callable[[Path], Any]
    error: type
    match: str
    fault: Callable[[Path], Any] | None = None


def _df(work: Path) -> pd.DataFrame:
    return pd.read_parquet(work / "in.parquet")


API_CASES = [
    ApiCase("y-min-nan", lambda w: distcal.fit(MISSING, y_min=math.nan), ValueError, "y_min"),
    ApiCase("y-max-inf", lambda w: distcal.fit(MISSING, y_max=math.inf), ValueError, "y_max"),
    ApiCase("y-min-above-y-max", lambda w: distcal.fit(MISSING, y_min=0.9, y_max=0.1),
            ValueError, "y_min must not exceed y_max"),
    ApiCase("y-min-not-probability", lambda w: distcal.fit(MISSING, y_min=-2.0), ValueError,
            r"y_min must lie in \[0, 1\]"),
    ApiCase("n-bins-0", lambda w: distcal.fit(MISSING, method="histogram", n_bins=0),
            ValueError, "n_bins"),
    ApiCase("n-bins-1e8", lambda w: distcal.fit(MISSING, method="histogram", n_bins=10**8),
            ValueError, "n_bins"),
    ApiCase("n-bins-float", lambda w: distcal.fit(MISSING, method="histogram", n_bins=2.5),
            ValueError, "n_bins"),
    ApiCase("strategy-unknown", lambda w: distcal.fit(MISSING, method="histogram",
                                                      strategy="median"), ValueError, "strategy"),
    ApiCase("method-unknown", lambda w: distcal.fit(MISSING, method="magic"), ValueError,
            "method must be one of"),
    ApiCase("engine-unknown", lambda w: distcal.fit(MISSING, engine="hadoop"), ValueError,
            "engine must be"),
    ApiCase("on-invalid-unknown", lambda w: distcal.fit(MISSING, on_invalid="ignore"),
            ValueError, "on_invalid"),
    ApiCase("threshold-cost-nan", lambda w: distcal.optimal_threshold(MISSING, cost_fp=math.nan),
            ValueError, "cost_fp"),
    ApiCase("evaluate-threshold-nan", lambda w: distcal.evaluate(MISSING, prob_col="p",
                                                                 threshold=math.nan),
            ValueError, "threshold"),
    ApiCase("tracker-cost-inf", lambda w: distcal.ThresholdTracker(cost_fn=math.inf),
            ValueError, "cost_fn"),
    ApiCase("unknown-keyword", lambda w: distcal.fit(_df(w), n_bin=3), TypeError,
            r"fit\(\) got unexpected keyword argument 'n_bin'"),
    ApiCase("n-bins-above-rows", lambda w: distcal.fit(_df(w).iloc[:40], method="histogram",
                                                       n_bins=41),
            ParameterError, r"n_bins must not exceed the number of rows \(40\)"),
    ApiCase("weights-1e308-isotonic", lambda w: distcal.fit(w / "bigw.parquet", weight_col="w"),
            distcal.DataError, "sums overflow float64"),
    ApiCase("weights-1e308-sigmoid", lambda w: distcal.fit(w / "bigw.parquet", method="sigmoid",
                                                           weight_col="w"),
            distcal.DataError, "sums overflow float64"),
    ApiCase("weights-1e308-histogram", lambda w: distcal.fit(w / "bigw.parquet",
                                                             method="histogram", weight_col="w"),
            distcal.DataError, "sums overflow float64"),
    # Temperature scaling's Newton sums may stay finite where the weights' total does not.
    ApiCase("weights-1e308-temperature", lambda w: distcal.fit(
        w / "bigw.parquet", method="temperature", weight_col="w"), distcal.DataError,
        "sums overflow float64"),
    ApiCase("weights-1e306-temperature-by", lambda w: distcal.fit(
        _df(w).assign(w=1e306, g=np.arange(2000) % 2), method="temperature", weight_col="w",
        by="g"), distcal.DataError, "sums overflow float64"),
    # A summary keeps sums of squared weights: they must not overflow nor underflow to 0.
    ApiCase("summarize-weights-1e200", lambda w: distcal.summarize(
        _df(w).assign(w=1e200), weight_col="w"), distcal.DataError,
        r"column 'w' \(weight\): 2000 rows have weights whose squares, summed per score, "
        "overflow float64"),
    ApiCase("summarize-weights-1e-200", lambda w: distcal.summarize(
        _df(w).assign(w=np.where(np.arange(2000) < 7, 1e-200, 1.0)), weight_col="w", by=None),
        distcal.DataError, r"column 'w' \(weight\): 7 rows have weights whose squares, "
        "summed per score, underflow to 0"),
    ApiCase("weights-1e308-threshold", lambda w: distcal.optimal_threshold(w / "bigw.parquet",
                                                                           weight_col="w"),
            distcal.DataError, "sums overflow float64"),
    ApiCase("costs-1e308-threshold", lambda w: distcal.optimal_threshold(
        _df(w), cost_fp=1.7e308, cost_fn=1.7e308), distcal.DataError, "sums overflow float64"),
    ApiCase("tracker-weights-1e308", lambda w: _tracker_overflow(), distcal.DataError,
            "sums overflow float64"),
    ApiCase("label-beyond-2-53", lambda w: distcal.fit(w / "bigint.parquet"), distcal.DataError,
            r"column 'label': 1 row is outside \[0, 1\]"),
    ApiCase("output-col-exists", lambda w: distcal.load(w / "m_isotonic").transform(
        _df(w), output_col="label"), distcal.DataError, "output column 'label' already exists"),
    ApiCase("save-parent-is-file", lambda w: distcal.load(w / "m_isotonic").save(
        w / "afile" / "model"), OutputPathError, "is not a directory"),
    ApiCase("save-name-too-long", lambda w: distcal.load(w / "m_isotonic").save(
        w / ("m" * 300)), OutputPathError, "this filesystem allows 255"),
    ApiCase("save-existing", lambda w: distcal.load(w / "m_isotonic").save(w / "m_sigmoid"),
            FileExistsError, "exists"),
]


def _model(w: Path) -> Any:
    return distcal.load(w / "m_isotonic")


API_CASES += [
    # Rule 3: booleans are bools (numpy's too); a string is not "false".
    ApiCase("save-overwrite-string-no", lambda w: _model(w).save(w / "m_sigmoid", overwrite="no"),
            TypeError, "overwrite must be True or False, got 'no'"),
    ApiCase("save-overwrite-string-false", lambda w: _model(w).save(w / "m_sigmoid",
                                                                    overwrite="false"),
            TypeError, "overwrite must be True or False"),
    ApiCase("save-overwrite-int", lambda w: _model(w).save(w / "m_sigmoid", overwrite=1),
            TypeError, "overwrite must be True or False, got 1"),
    ApiCase("save-overwrite-none", lambda w: _model(w).save(w / "m_new", overwrite=None),
            TypeError, "overwrite must be True or False, got None"),
    ApiCase("multiclass-save-overwrite-string", lambda w: distcal.load(w / "m_multi").save(
        w / "m_multi", overwrite="no"), TypeError, "overwrite must be True or False"),
    ApiCase("write-report-overwrite-string", lambda w: _write_report(w, "yes"), TypeError,
            "overwrite must be True or False"),
    ApiCase("increasing-int", lambda w: distcal.fit(MISSING, increasing=1), ValueError,
            "increasing must be True, False or 'auto'"),
    ApiCase("increasing-string-true", lambda w: distcal.fit(MISSING, increasing="true"),
            ValueError, "increasing must be True, False or 'auto'"),
    ApiCase("estimator-ensemble-string", lambda w: _estimator(ensemble="no"), TypeError,
            "ensemble must be True or False"),
    ApiCase("n-bins-numpy-float", lambda w: distcal.fit(MISSING, method="histogram",
                                                        n_bins=np.float64(5)), ValueError,
            "n_bins must be an integer"),
    ApiCase("n-bins-numpy-bool", lambda w: distcal.fit(MISSING, method="histogram",
                                                       n_bins=np.bool_(True)), ValueError,
            "n_bins must be an integer"),
    # Rule 2, from the API: overwrite replaces only a previous output of the same kind.
    ApiCase("save-overwrite-text-file", lambda w: _model(w).save(w / "afile", overwrite=True),
            OutputPathError, "'.*afile' is a file that is not Parquet"),
    ApiCase("save-overwrite-foreign-directory", lambda w: _model(w).save(w / "foreign",
                                                                         overwrite=True),
            OutputPathError, "is a directory that is not a distcal output"),
    ApiCase("save-overwrite-parquet", lambda w: _model(w).save(w / "prev.parquet",
                                                               overwrite=True),
            OutputPathError, "is a Parquet file or dataset, not a model directory"),
    ApiCase("save-overwrite-report", lambda w: _model(w).save(w / "prev_report", overwrite=True),
            OutputPathError, "is a report directory, not a model directory"),
    ApiCase("report-overwrite-model", lambda w: _write_report(w, True, "m_sigmoid"),
            OutputPathError, "is a model directory, not a report directory"),
    ApiCase("save-overwrite-link-to-model", lambda w: _model(w).save(w / "mlink", overwrite=True),
            OutputPathError, "is a symbolic link", fault=_link("mlink", "m_sigmoid")),
    # Rule 5 from the API: a FIFO inside a dataset never blocks the reader.
    ApiCase("fit-fifo-in-dataset", lambda w: distcal.fit(w / "ds"), distcal.DataError,
            "part-9.parquet' is a FIFO", fault=_fifo("ds/part-9.parquet")),
    ApiCase("evaluate-fifo-input", lambda w: distcal.evaluate(w / "f.parquet", prob_col="score"),
            distcal.DataError, "f.parquet' is a FIFO", fault=_fifo("f.parquet")),
    ApiCase("threshold-link-to-fifo-input", lambda w: distcal.optimal_threshold(w / "x.parquet"),
            distcal.DataError, "x.parquet' is a FIFO",
            fault=lambda w: (_fifo("fifo")(w), _link("x.parquet", "fifo")(w))),
    ApiCase("save-overwrite-fifo", lambda w: _model(w).save(w / "fifo", overwrite=True),
            OutputPathError, "is a FIFO", fault=_fifo("fifo")),
]


API_CASES += [
    # Rule 11: the estimator's calibration labels are the fitted classifier's classes.
    ApiCase("estimator-label-not-a-class", lambda w: _prefit(3, lambda y: np.where(y == 2, 7, y)),
            ValueError, r"y holds labels \[7\] that are not among the classifier's classes"),
    ApiCase("estimator-3-classes-on-2-class-y", lambda w: _prefit(3, lambda y: y % 2),
            ValueError, r"the classifier has 3 classes \[0, 1, 2\] but y holds 2 of them"),
    ApiCase("estimator-binary-on-3-class-y", lambda w: _prefit(2, lambda y: np.arange(len(y)) % 3),
            ValueError, r"y holds labels \[2\] that are not among"),
    ApiCase("estimator-string-labels-differ", lambda w: _prefit(
        2, lambda y: np.where(y == 1, "yes", "no"), fit_labels=lambda y: np.where(
            y == 1, "pos", "neg")), ValueError, "y holds labels"),
]


def _prefit(k: int, labels: Callable[[np.ndarray], np.ndarray],
            fit_labels: Callable[[np.ndarray], np.ndarray] | None = None) -> Any:
    """A classifier fitted on ``k`` classes, calibrated on ``labels(y)``."""
    from sklearn.linear_model import LogisticRegression

    from distcal.sklearn import CalibratedClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = rng.integers(0, k, 300)
    clf = LogisticRegression().fit(X, y if fit_labels is None else fit_labels(y))
    return CalibratedClassifier(clf).fit(X, labels(y))


def _complex(w: Path) -> pd.DataFrame:
    return _df(w).assign(score=_df(w).score.astype(complex))


def _vectors(w: Path) -> pd.DataFrame:
    """Vector scores (one list per row) and a segment column: not text, not numbers."""
    df = _df(w)
    return pd.DataFrame({"score": [np.array([1 - s, s]) for s in df.score],
                         "label": df.label, "g": np.arange(len(df)) % 2})


def _vector_keys(w: Path) -> pd.DataFrame:
    """A segment column of lists (all rows but the first, which holds a string)."""
    df = _df(w)
    return df.assign(v=["a"] + [[1, 2]] * (len(df) - 1))


def _arrow_list_keys(w: Path) -> pd.DataFrame:
    """:func:`_vector_keys` as pandas' Arrow lists (the first row null)."""
    lists = pa.array([None] + [[1, 2]] * (len(_df(w)) - 1), pa.list_(pa.int64()))
    return _df(w).assign(v=pd.Series(pd.arrays.ArrowExtensionArray(lists)))


def _dup_pandas(w: Path) -> pd.DataFrame:
    return pd.concat([_df(w), _df(w)[["score"]]], axis=1)


def _three(w: Path) -> pd.DataFrame:
    return _df(w).assign(a=0.2, b=0.3, c=0.5)


API_CASES += [
    # Rule 7: more bins than rows is refused before the bins are computed.
    ApiCase("evaluate-n-bins-1e6", lambda w: distcal.evaluate(w / "in.parquet", prob_col="score",
                                                              n_bins=1_000_000),
            ParameterError, r"n_bins must not exceed the number of rows \(2000\), got 1000000"),
    ApiCase("evaluate-quantile-n-bins-above-rows", lambda w: distcal.evaluate(
        _df(w), prob_col="score", n_bins=2001, strategy="quantile"), ParameterError,
        r"number of rows \(2000\)"),
    ApiCase("evaluate-many-n-bins-above-rows", lambda w: distcal.evaluate_many(
        _df(w), ["score"], n_bins=5000), ParameterError, r"number of rows \(2000\)"),
    ApiCase("evaluate-by-n-bins-above-rows", lambda w: distcal.evaluate(
        _df(w).assign(g=1), prob_col="score", by="g", n_bins=5000), ParameterError,
        r"number of rows \(2000\)"),
    # Rule 9: only real numbers are scores (complex, dates and durations are not).
    ApiCase("fit-complex-scores", lambda w: distcal.fit(_complex(w)), distcal.DataError,
            r"column 'score' \(score\) has type complex128; expected numbers"),
    ApiCase("transform-complex-scores", lambda w: _model(w).transform(_complex(w)),
            distcal.DataError, "has type complex128"),
    ApiCase("evaluate-complex-probabilities", lambda w: distcal.evaluate(_complex(w),
                                                                         prob_col="score"),
            distcal.DataError, "has type complex128"),
    ApiCase("threshold-complex-scores", lambda w: distcal.optimal_threshold(_complex(w)),
            distcal.DataError, "has type complex128"),
    ApiCase("fit-timedelta-scores", lambda w: distcal.fit(_df(w).assign(
        score=pd.to_timedelta(_df(w).score, unit="s"))), distcal.DataError,
        r"has type timedelta64\[ns\]"),
    ApiCase("fit-multiclass-complex-score-cols", lambda w: distcal.fit(
        _three(w).assign(a=0.2 + 1j), score_cols=["a", "b", "c"]), distcal.DataError,
        "column 'a' has type complex128"),
    ApiCase("predict-complex", lambda w: _model(w).predict(np.array([0.5 + 0.5j, 0.2])),
            distcal.DataError, "2 values are complex numbers; scores must be real numbers"),
    ApiCase("predict-complex-objects", lambda w: _model(w).predict([0.5, 1j]),
            distcal.DataError, "complex numbers"),
    ApiCase("predict-datetime64", lambda w: _model(w).predict(
        np.array(["2024-01-01"], dtype="datetime64[ns]")), distcal.DataError,
        r"1 value is dates \(datetime64\)"),
    ApiCase("predict-timedelta64", lambda w: _model(w).predict(
        np.array([1, 2], dtype="timedelta64[s]")), distcal.DataError, "durations"),
    ApiCase("multiclass-predict-complex", lambda w: distcal.load(w / "m_multi").predict(
        np.full((2, 3), 1 / 3 + 0j)), distcal.DataError, "complex numbers"),
    # Rule 10: a column plays one role, once.
    ApiCase("score-cols-twice", lambda w: distcal.fit(_three(w), score_cols=["a", "a", "c"]),
            distcal.DataError, "column 'a' is given twice in score_cols"),
    ApiCase("score-cols-include-label", lambda w: distcal.fit(_three(w),
                                                              score_cols=["a", "b", "label"]),
            distcal.DataError, "column 'label' is given as score_cols and as label_col"),
    ApiCase("label-is-score", lambda w: distcal.fit(_df(w), label_col="score"),
            distcal.DataError, "column 'score' is given as score_col and as label_col"),
    ApiCase("weight-is-label", lambda w: distcal.fit(_df(w), weight_col="label"),
            distcal.DataError, "column 'label' is given as label_col and as weight_col"),
    ApiCase("evaluate-prob-cols-twice", lambda w: distcal.evaluate(
        _three(w), prob_cols=["a", "a", "b"]), distcal.DataError, "given twice in prob_cols"),
    ApiCase("evaluate-many-prob-cols-label", lambda w: distcal.evaluate_many(
        _three(w), [["a", "label"]]), distcal.DataError, "'label' is given as prob_cols"),
    ApiCase("evaluate-prob-is-weight", lambda w: distcal.evaluate(_df(w), prob_col="w",
                                                                  weight_col="w"),
            distcal.DataError, "'w' is given as prob_col and as weight_col"),
    ApiCase("score-col-none", lambda w: distcal.fit(_df(w), score_col=None), TypeError,
            "score_col must be a column name"),
    ApiCase("score-col-list", lambda w: distcal.fit(_df(w), score_col=["score"]), TypeError,
            r"score_col must be a column name .* got \['score'\]"),
    ApiCase("label-col-int", lambda w: distcal.fit(_df(w), label_col=3), TypeError,
            "label_col must be a column name"),
    # Internal errors where the user made the mistake.
    ApiCase("fit-pandas-duplicate-column", lambda w: distcal.fit(_dup_pandas(w)),
            distcal.DataError, "column 'score' appears 2 times in the input"),
    ApiCase("evaluate-arrow-duplicate-column", lambda w: distcal.evaluate(
        pa.table([_df(w).score, _df(w).label, _df(w).score], names=["score", "label", "score"]),
        prob_col="score"),
        distcal.DataError, "column 'score' appears 2 times"),
    ApiCase("threshold-pandas-duplicate-column", lambda w: distcal.optimal_threshold(
        _dup_pandas(w)), distcal.DataError, "appears 2 times"),
    ApiCase("transform-pandas-duplicate-column", lambda w: _model(w).transform(_dup_pandas(w)),
            distcal.DataError, "appears 2 times"),
    ApiCase("fit-parquet-duplicate-column", lambda w: distcal.fit(w / "dupcol.parquet"),
            distcal.DataError, "duplicate field names"),
    ApiCase("evaluate-by-vector-probabilities", lambda w: distcal.evaluate(
        _vectors(w), prob_col="score", by="g"), distcal.DataError,
        r"column 'score' \(prob\) holds vectors"),
    ApiCase("evaluate-weights-1e305", lambda w: distcal.evaluate(
        w / "w305.parquet", prob_col="score", weight_col="w"), distcal.DataError,
        "sums overflow float64"),
    # A by column of vectors: one message, on every entry point that reads segments.
    *(ApiCase(f"{name}-by-column-of-vectors", call, distcal.DataError,
              r"column 'v' \(segment\): 1999 rows hold vectors \(lists or arrays\)")
      for name, call in [
          ("fit", lambda w: distcal.fit(_vector_keys(w), by="v")),
          ("summarize", lambda w: distcal.summarize(_vector_keys(w), by="v")),
          ("evaluate", lambda w: distcal.evaluate(_vector_keys(w), prob_col="score", by="v")),
          ("threshold", lambda w: distcal.optimal_threshold(_vector_keys(w), by="v")),
          ("transform", lambda w: distcal.fit(_vector_keys(w).assign(v=1), by="v").transform(
              _vector_keys(w))),
          ("fit-arrow-lists", lambda w: distcal.fit(_arrow_list_keys(w), by="v"))]),
    ApiCase("summarize-by-column-of-mixed-types", lambda w: distcal.summarize(
        _df(w).assign(g=["a"] + [1] * 1999), by="g"), distcal.DataError,
        r"column 'g' \(segment\) holds values of several types \(1999 rows of int, "
        r"1 row of str\)"),
    ApiCase("save-model-of-by-keys-of-mixed-types", lambda w: distcal.fit(
        _df(w).assign(g=["a"] * 1000 + [1] * 1000), by="g").save(w / "mixed_keys"),
        distcal.DataError, r"column 'g' \(segment\) holds keys of several types \(1 key of "
        r"int, 1 key of str\); a saved model stores one type per column"),
    ApiCase("save-model-of-duration-keys", lambda w: distcal.fit(
        _df(w).assign(g=pd.to_timedelta(np.arange(2000) % 3, unit="s")), by="g").save(
        w / "duration_keys"), distcal.DataError,
        r"column 'g' \(segment\) holds durations \(3 keys\): a saved model does not store"),
    ApiCase("merge-summaries-by-columns-of-two-types", lambda w: distcal.merge_summaries([
        distcal.summarize(_df(w).assign(g=1), by="g"),
        distcal.summarize(_df(w).assign(g="a"), by="g")]), distcal.DataError,
        "merge_summaries: column 'g' \\(segment\\) has type int64 in some summaries and string "
        "in others"),
]


def test_values_of_the_right_kind_work(work):
    """The other side of the rules: numpy bools and ints, scalars, same-kind overwrites."""
    df = _df(work)
    model = distcal.fit(df, increasing=np.bool_(True))
    model.save(work / "npbool", overwrite=np.bool_(False))  # numpy's bool is JSON-safe now
    assert distcal.load(work / "npbool").params["increasing"] is True
    hist = distcal.fit(df, method="histogram", n_bins=np.int64(5))
    hist.save(work / "m_sigmoid", overwrite=True)  # a model replaces a model
    assert distcal.load(work / "m_sigmoid").params["n_bins"] == 5
    assert model.predict(0.5).shape == (1,)
    assert model.predict(0.5)[0] == model.predict([0.5, 0.7])[0]
    assert distcal.evaluate(df.iloc[:5], prob_col="score").n_rows == 5  # default bins: fine


def _write_report(w: Path, overwrite: Any, name: str = "prev_report") -> Any:
    from distcal.report import write_report

    return write_report([distcal.evaluate(_df(w), prob_col="score")], w / name,
                        overwrite=overwrite)


def _estimator(**kw: Any) -> Any:
    from sklearn.linear_model import LogisticRegression

    from distcal.sklearn import CalibratedClassifier

    X = np.random.default_rng(0).normal(size=(200, 2))
    y = (X[:, 0] > 0).astype(int)
    return CalibratedClassifier(LogisticRegression(), **kw).fit(X, y)


@contextmanager
def _deadline(seconds: int):
    """Fail (TimeoutError) instead of hanging when a call blocks, e.g. on a FIFO."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: blocked?")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _tracker_overflow():
    t = distcal.ThresholdTracker()
    t.update_many(np.array([0.1, 0.2, 0.3]), np.array([1, 0, 1]), np.full(3, 1e308))
    return t.result()


@pytest.mark.parametrize("case", API_CASES, ids=[c.id for c in API_CASES])
def test_api(case, work):
    if case.fault is not None:
        case.fault(work)
    before = snapshot(work)
    with pytest.raises(case.error) as info, _deadline(120):  # a FIFO must never block
        case.call(work)
    msg = str(info.value)
    assert "\n" not in msg
    assert re.search(case.match, msg), msg
    assert snapshot(work) == before


# -- the command line, the Spark job and the Dask job -------------------------------

@dataclass
class CliCase:
    id: str
    argv: list[str]
    match: str
    surface: str = "cli"
    fault: Callable[[Path], Any] | None = None
    engine_logs_the_task: bool = False  # Spark's log of a failed task holds its traceback


L258 = "o" * 250 + ".parquet"
CLI_CASES = [
    CliCase("fit-y-min-nan", ["fit", "--input", "in.parquet", "--output", "m", "--y-min", "nan"],
            "y_min must be a finite number"),
    CliCase("fit-n-bins-0-before-reading", ["fit", "--input", "missing.parquet", "--output", "m",
                                            "--method", "histogram", "--n-bins", "0"], "n_bins"),
    CliCase("fit-n-bins-above-rows", ["fit", "--input", "in.parquet", "--output", "m",
                                      "--method", "histogram", "--n-bins", "5000"],
            "n_bins must not exceed the number of rows"),
    CliCase("config-overwrite-string", ["fit", "--config", "overwrite_str.yaml", "--input",
                                        "in.parquet", "--output", "m_sigmoid"],
            "option 'overwrite' .* must be true or false"),
    CliCase("config-engine-hadoop", ["fit", "--config", "engine_hadoop.yaml", "--input",
                                     "in.parquet", "--output", "m"], "option 'engine'"),
    CliCase("config-n-bins-string", ["fit", "--config", "nbins_str.yaml", "--input",
                                     "in.parquet", "--output", "m"], "must be an integer"),
    CliCase("config-yaml-alias", ["fit", "--config", "alias.yaml", "--input", "in.parquet",
                                  "--output", "m"], "YAML alias"),
    CliCase("fit-option-of-another-method", ["fit", "--input", "in.parquet", "--output", "m",
                                             "--method", "venn_abers", "--increasing", "false"],
            "--increasing is an option of --method isotonic; this fit's method is venn_abers"),
    CliCase("fit-bins-for-sigmoid", ["fit", "--input", "in.parquet", "--output", "m", "--method",
                                     "sigmoid", "--n-bins", "5"],
            "--n-bins is an option of --method histogram; this fit's method is sigmoid"),
    CliCase("engine-hadoop", ["fit", "--engine", "hadoop", "--input", "in.parquet", "--output",
                              "m"], "invalid choice: 'hadoop'"),
    CliCase("mixed-type-dataset", ["fit", "--input", "mixed", "--output", "m"],
            r"column 'score' has type timestamp\[ns\] in input file 'mixed/part-1.parquet'"),
    CliCase("csv-input", ["fit", "--input", "in.csv", "--output", "m"],
            "input file 'in.csv' is not a readable Parquet file"),
    CliCase("label-beyond-2-53", ["fit", "--input", "bigint.parquet", "--output", "m"],
            r"column 'label': 1 row is outside \[0, 1\]"),
    CliCase("weights-1e308", ["fit", "--input", "bigw.parquet", "--output", "m", "--weight-col",
                              "w", "--method", "sigmoid"], "sums overflow float64"),
    CliCase("threshold-weights-1e308", ["threshold", "--input", "bigw.parquet", "--weight-col",
                                        "w"], "sums overflow float64"),
    CliCase("apply-output-inside-input", ["apply", "--model", "m_isotonic", "--input", "ds",
                                          "--output", "ds/out.parquet"], "inside the input"),
    CliCase("apply-report-equals-output", ["apply", "--model", "m_isotonic", "--input",
                                           "in.parquet", "--output", "o", "--report", "o"],
            "overlap"),
    CliCase("apply-report-contains-output", ["apply", "--model", "m_isotonic", "--input",
                                             "in.parquet", "--output", "r/o.parquet",
                                             "--report", "r"], "overlap"),
    CliCase("apply-output-col-exists", ["apply", "--model", "m_isotonic", "--input",
                                        "in.parquet", "--output", "o.parquet", "--output-col",
                                        "label"], "output column 'label' already exists"),
    CliCase("apply-model-symlinked-table", ["apply", "--model", "m_isotonic", "--input",
                                            "in.parquet", "--output", "o.parquet"],
            "symbolic link", fault=lambda w: symlink_blocks(w / "m_isotonic")),
    CliCase("apply-model-nan-param", ["apply", "--model", "m_sigmoid", "--input", "in.parquet",
                                      "--output", "o.parquet"], "NaN is not a finite number",
            fault=lambda w: reparam(w / "m_sigmoid", param("b", math.nan))),
    CliCase("apply-model-prob-5", ["apply", "--model", "m_isotonic", "--input", "in.parquet",
                                   "--output", "o.parquet"], r"\[0, 1\]",
            fault=lambda w: retable(w / "m_isotonic", lambda t: t.assign(prob=5.0))),
    CliCase("fit-existing-output", ["fit", "--input", "in.parquet", "--output", "m_sigmoid"],
            "exists"),
    CliCase("fit-parent-is-file", ["fit", "--input", "in.parquet", "--output", "afile/sub/m"],
            "'afile' is not a directory"),
    CliCase("apply-name-too-long", ["apply", "--model", "m_isotonic", "--input", "in.parquet",
                                    "--output", L258], "this filesystem allows 255"),
    CliCase("fit-missing-input-nested-output", ["fit", "--input", "missing.parquet", "--output",
                                                "new/deeper/m"], "does not exist"),
    CliCase("threshold-cost-nan", ["threshold", "--input", "in.parquet", "--cost-fp", "nan"],
            "cost_fp must be a finite number"),
    CliCase("evaluate-threshold-nan", ["evaluate", "--input", "in.parquet", "--prob-col",
                                       "score", "--output", "rep", "--threshold", "nan"],
            "threshold must be a finite number"),
    CliCase("spark-job-csv", ["fit", "--input", "csvdir", "--output", "m"],
            "input file '.*csvdir/part-0.csv' is not a readable Parquet file", surface="spark"),
    CliCase("spark-job-mixed-types", ["fit", "--input", "mixed", "--output", "m"],
            r"column 'score' has type timestamp\[ns\] in input file", surface="spark"),
    CliCase("dask-job-csv", ["fit", "--input", "in.csv", "--output", "m"],
            "input file 'in.csv' is not a readable Parquet file", surface="dask"),
    CliCase("dask-job-label-beyond-2-53", ["fit", "--input", "bigint.parquet", "--output", "m"],
            r"column 'label': 1 row is outside \[0, 1\]", surface="dask"),
    # Bad rows found by the workers as the output is written: a DataError (exit 2) with
    # the workers' message, not the engine's wrapping of it. The engines log the failed
    # task with its traceback, as they do any failed task: -q silences the Dask job's
    # workers; spark-submit's JVM, the job's parent, logs it whatever the job does.
    CliCase("dask-job-apply-text-scores", ["apply", "-q", "--model", "m_isotonic", "--input",
                                           "text.parquet", "--output", "o.parquet"],
            "column 'score': 2000 rows are text, not numbers", surface="dask"),
    CliCase("spark-job-apply-ragged-vectors", ["apply", "--model", "m_multi", "--input",
                                               "ragged.parquet", "--score-col", "s", "--output",
                                               "o.parquet"],
            r"column 's': 1 row has a length other than 3 \(ragged vectors\)", surface="spark",
            engine_logs_the_task=True),
    CliCase("apply-text-scores", ["apply", "--model", "m_isotonic", "--input", "text.parquet",
                                  "--output", "o.parquet"],
            "column 'score': 2000 rows are text, not numbers"),
]


# -- issue 34: outputs never destroy inputs, inputs never hang ----------------------

APPLY = ["apply", "--model", "m_isotonic", "--input", "in.parquet"]
FIT = ["fit", "--input", "in.parquet"]
EVALUATE = ["evaluate", "--input", "in.parquet", "--prob-col", "score"]
REFUSED = "overwrite replaces only a previous distcal output"
SAME_KIND = "overwrite replaces only a previous output of the same kind"
CLI_CASES += [
    # Rule 1: an output (or --report) is never the model or the input, nor inside or
    # around either, however the path is spelled.
    CliCase("apply-output-is-model", APPLY + ["--output", "m_isotonic", "--overwrite"],
            "output 'm_isotonic' is the model 'm_isotonic'"),
    CliCase("apply-output-is-model-dotdot", APPLY + ["--output", "./m_isotonic/../m_isotonic",
                                                     "--overwrite"], "is the model"),
    CliCase("apply-output-is-model-trailing-slash", APPLY + ["--output", "m_isotonic/",
                                                             "--overwrite"], "is the model"),
    CliCase("apply-output-is-model-symlink", APPLY + ["--output", "mlink", "--overwrite"],
            "output 'mlink' is the model", fault=_link("mlink", "m_isotonic")),
    CliCase("apply-output-is-model-absolute-symlinked-parent",
            APPLY + ["--output", "linkdir/m_isotonic", "--overwrite"], "is the model",
            fault=_link("linkdir", ".")),
    CliCase("apply-output-inside-model", APPLY + ["--output", "m_isotonic/o.parquet"],
            "is inside the model"),
    CliCase("apply-output-contains-model", ["apply", "--model", "sub/m", "--input",
                                            "in.parquet", "--output", "sub", "--overwrite"],
            "contains the model", fault=lambda w: shutil.copytree(w / "m_isotonic", w / "sub/m")),
    CliCase("apply-report-is-model", APPLY + ["--output", "o.parquet", "--report", "m_isotonic",
                                              "--overwrite"], "output 'm_isotonic' is the model"),
    CliCase("apply-report-is-model-dotdot", APPLY + ["--output", "o.parquet", "--report",
                                                     "prev_report/../m_isotonic", "--overwrite"],
            "is the model"),
    CliCase("apply-output-is-input", APPLY + ["--output", "in.parquet", "--overwrite"],
            "output 'in.parquet' is the input"),
    CliCase("apply-output-is-input-dotslash", ["apply", "--model", "m_isotonic", "--input", "ds",
                                               "--output", "./ds/", "--overwrite"],
            "output './ds/' is the input 'ds'"),
    CliCase("fit-output-is-input", FIT + ["--output", "./in.parquet", "--overwrite"],
            "is the input"),
    CliCase("evaluate-output-contains-input", ["evaluate", "--input", "ds/part-0.parquet",
                                               "--prob-col", "score", "--output", "ds",
                                               "--overwrite"], "contains the input"),
    CliCase("discretize-output-is-input", ["discretize", "--input", "in.parquet", "--output",
                                           "in.parquet", "--overwrite"], "is the input"),
    # Rule 2: --overwrite replaces only a previous output of the same kind.
    CliCase("apply-overwrite-fifo", APPLY + ["--output", "fifo", "--overwrite"],
            f"'fifo' is a FIFO.*{REFUSED}", fault=_fifo("fifo")),
    CliCase("apply-overwrite-link-to-devnull", APPLY + ["--output", "null", "--overwrite"],
            f"'null' is a symbolic link; {REFUSED}", fault=_link("null", "/dev/null")),
    CliCase("fit-overwrite-link-to-model", FIT + ["--output", "mlink", "--overwrite"],
            f"'mlink' is a symbolic link; {REFUSED}", fault=_link("mlink", "m_sigmoid")),
    CliCase("apply-overwrite-socket", APPLY + ["--output", "sock", "--overwrite"],
            f"'sock' is a socket; {REFUSED}", fault=_socket("sock")),
    CliCase("fit-overwrite-text-file", FIT + ["--output", "afile", "--overwrite"],
            f"'afile' is a file that is not Parquet; {REFUSED}"),
    CliCase("apply-overwrite-csv-file", APPLY + ["--output", "in.csv", "--overwrite"],
            "is a file that is not Parquet"),
    CliCase("fit-overwrite-foreign-directory", FIT + ["--output", "foreign", "--overwrite"],
            f"'foreign' is a directory that is not a distcal output; {REFUSED}"),
    CliCase("evaluate-overwrite-empty-directory", EVALUATE + ["--output", "emptydir",
                                                              "--overwrite"],
            "is a directory that is not a distcal output"),
    CliCase("fit-overwrite-parquet", FIT + ["--output", "prev.parquet", "--overwrite"],
            f"is a Parquet file or dataset, not a model directory; {SAME_KIND}"),
    CliCase("fit-overwrite-report", FIT + ["--output", "prev_report", "--overwrite"],
            "is a report directory, not a model directory"),
    CliCase("apply-overwrite-model", APPLY + ["--output", "m_sigmoid", "--overwrite"],
            "is a model directory, not a Parquet file or dataset"),
    CliCase("apply-report-overwrite-model", APPLY + ["--output", "o.parquet", "--report",
                                                     "m_sigmoid", "--overwrite"],
            "is a model directory, not a report directory"),
    CliCase("evaluate-overwrite-model", EVALUATE + ["--output", "m_sigmoid", "--overwrite"],
            "is a model directory, not a report directory"),
    CliCase("discretize-overwrite-model", ["discretize", "--input", "in.parquet", "--output",
                                           "m_sigmoid", "--overwrite"],
            "is a model directory, not a Parquet file"),
    # Rule 5: only regular files are read; nothing blocks.
    CliCase("config-fifo", FIT + ["--output", "m", "--config", "cfg"],
            "config 'cfg' is a FIFO", fault=_fifo("cfg")),
    CliCase("config-link-to-fifo", FIT + ["--output", "m", "--config", "cfg.yaml"],
            "config 'cfg.yaml' is a FIFO", fault=lambda w: (_fifo("cfg")(w),
                                                            _link("cfg.yaml", "cfg")(w))),
    CliCase("config-directory", FIT + ["--output", "m", "--config", "ds"],
            "config 'ds' is a directory"),
    CliCase("config-socket", FIT + ["--output", "m", "--config", "sock"],
            "config 'sock' is a socket", fault=_socket("sock")),
    CliCase("config-sparse-2gb", FIT + ["--output", "m", "--config", "big.yaml"],
            "larger than 1048576 bytes", fault=_sparse("big.yaml", 2 << 30)),
    CliCase("input-fifo", ["fit", "--input", "fifo", "--output", "m"],
            "input 'fifo' is a FIFO", fault=_fifo("fifo")),
    CliCase("input-link-to-fifo", ["fit", "--input", "x.parquet", "--output", "m"],
            "input 'x.parquet' is a FIFO",
            fault=lambda w: (_fifo("fifo")(w), _link("x.parquet", "fifo")(w))),
    CliCase("input-fifo-in-dataset", ["fit", "--input", "ds", "--output", "m"],
            "input file 'ds/part-1.parquet' is a FIFO", fault=_fifo("ds/part-1.parquet")),
    CliCase("input-fifo-in-partition", ["evaluate", "--input", "ds", "--prob-col", "score",
                                        "--output", "r"],
            "input file 'ds/g=1/part-0.parquet' is a FIFO", fault=_fifo("ds/g=1/part-0.parquet")),
    CliCase("apply-input-socket-in-dataset", ["apply", "--model", "m_isotonic", "--input", "ds",
                                              "--output", "o.parquet"],
            "input file 'ds/sock' is a socket", fault=_socket("ds/sock")),
    CliCase("threshold-input-fifo", ["threshold", "--input", "fifo"], "input 'fifo' is a FIFO",
            fault=_fifo("fifo")),
    CliCase("dask-job-input-fifo-in-dataset", ["fit", "--input", "ds", "--output", "m"],
            "input file 'ds/part-1.parquet' is a FIFO", fault=_fifo("ds/part-1.parquet"),
            surface="dask"),
    CliCase("spark-job-input-fifo", ["fit", "--input", "fifo", "--output", "m"],
            "input '.*fifo' is a FIFO", fault=_fifo("fifo"), surface="spark"),
    # Rule 13: a YAML key given twice is refused; so is a 'params:' key.
    CliCase("config-method-twice", FIT + ["--output", "m", "--config", "dup_method.yaml"],
            "gives key 'method' twice"),
    CliCase("config-two-spellings", FIT + ["--output", "m", "--config", "dup_spelling.yaml"],
            "gives option 'score-col' twice"),
    CliCase("config-n-bins-two-spellings", FIT + ["--output", "m", "--config",
                                                  "dup_nbins.yaml"], "gives option 'n-bins' twice"),
    CliCase("config-params-key", FIT + ["--output", "m", "--config", "params.yaml"],
            "'params' in config 'params.yaml' is not an option"),
    # Rule 7: --n-bins above the rows is refused from the files' footers, before reading.
    CliCase("evaluate-n-bins-1e6", EVALUATE + ["--output", "r", "--n-bins", "1000000"],
            r"n_bins must not exceed the number of rows \(2000\), got 1000000"),
    CliCase("evaluate-n-bins-0", EVALUATE + ["--output", "r", "--n-bins", "0"],
            "n_bins must be an integer from 1 to 1000000, got 0"),
    CliCase("evaluate-quantile-n-bins-2001", EVALUATE + ["--output", "r", "--n-bins", "2001",
                                                         "--strategy", "quantile"],
            r"number of rows \(2000\)"),
    CliCase("evaluate-dataset-n-bins-above-rows", ["evaluate", "--input", "ds", "--prob-col",
                                                   "score", "--output", "r", "--n-bins",
                                                   "2001"], r"number of rows \(2000\)"),
    CliCase("dask-job-evaluate-n-bins-1e6", EVALUATE + ["--output", "r", "--n-bins", "1000000"],
            r"number of rows \(2000\)", surface="dask"),
    # Rule 10: a column plays one role, once.
    CliCase("evaluate-prob-cols-twice", ["evaluate", "--input", "mc3.parquet", "--prob-cols",
                                         "p0,p0,p1", "--output", "r"],
            "column 'p0' is given twice in --prob-cols"),
    CliCase("evaluate-prob-cols-label", ["evaluate", "--input", "mc3.parquet", "--prob-cols",
                                         "p0,p1,label", "--output", "r"],
            "column 'label' is given as --prob-cols and as --label-col"),
    CliCase("evaluate-prob-col-weight", EVALUATE + ["--output", "r", "--weight-col", "score"],
            "column 'score' is given as --prob-col and as --weight-col"),
    CliCase("discretize-label-is-score", ["discretize", "--input", "in.parquet", "--label-col",
                                          "score"],
            "column 'score' is given as --score-col and as --label-col"),
    CliCase("fit-weight-is-label", FIT + ["--output", "m", "--weight-col", "label"],
            "column 'label' is given as --label-col and as --weight-col"),
    CliCase("threshold-loss-is-score", ["threshold", "--input", "in.parquet", "--loss-col",
                                        "score"], "given as --score-col and as --loss-col"),
    # The model reads 'score' (known once it is loaded): the input has that column.
    CliCase("apply-output-col-is-score", APPLY + ["--output", "o.parquet", "--output-col",
                                                  "score"],
            "output column 'score' already exists in the input"),
    CliCase("spark-job-prob-cols-twice", ["evaluate", "--input", "mc3.parquet", "--prob-cols",
                                          "p0,p0,p1", "--output", "r"],
            "given twice in --prob-cols", surface="spark"),
    # Internal errors where the user made the mistake.
    CliCase("fit-duplicate-column-names", FIT[:1] + ["--input", "dupcol.parquet", "--output",
                                                     "m"],
            "input file 'dupcol.parquet' has 1 column name.* used twice or more: 'score'"),
    CliCase("apply-duplicate-column-names", ["apply", "--model", "m_isotonic", "--input",
                                             "dupcol.parquet", "--output", "o.parquet"],
            "used twice or more"),
    CliCase("fit-by-struct", ["fit", "--input", "struct.parquet", "--output", "m", "--by", "g"],
            r"column 'g' \(segment\) has type struct<a: int64>.*--by needs columns"),
    CliCase("evaluate-by-list", ["evaluate", "--input", "list.parquet", "--prob-col", "score",
                                 "--output", "r", "--by", "g"],
            r"column 'g' \(segment\) has type list"),
    CliCase("threshold-by-struct", ["threshold", "--input", "struct.parquet", "--by", "g"],
            "has type struct"),
    CliCase("evaluate-weights-1e305", ["evaluate", "--input", "w305.parquet", "--prob-col",
                                       "score", "--weight-col", "w", "--output", "r"],
            "sums overflow float64"),
    CliCase("y-min-minus-inf", FIT + ["--output", "m", "--y-min", "-inf"],
            "y_min must be a finite number, got -inf"),
    CliCase("y-min-negative", FIT + ["--output", "m", "--y-min", "-0.5"],
            r"y_min must lie in \[0, 1\]"),
    CliCase("n-bins-negative", FIT + ["--output", "m", "--method", "histogram", "--n-bins",
                                      "-3"], "n_bins must be an integer from 1"),
    CliCase("output-path-over-4096-bytes", APPLY + ["--output", "d/" * 2100 + "o.parquet"],
            "the path is .* bytes long"),
    CliCase("output-parent-is-file-dotdot", FIT + ["--output", "afile/../m"],
            "'afile' is not a directory"),
]


def _spark_env() -> dict:
    import pyspark

    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
           "SPARK_HOME": os.path.dirname(pyspark.__file__), "PYTHONPATH": str(ROOT)}
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return env


# The command line runs under a memory limit (an input that never ends, such as
# /dev/zero, would exhaust it); every surface under a timeout (a FIFO would block).
CLI_ADDRESS_SPACE = 3 << 30


@pytest.fixture(scope="module")
def forked_cli(tmp_path_factory):
    """The command line's runs, each a process of its own (tests/forked_cli.py)."""
    cli = ForkedCli(tmp_path_factory.mktemp("forked_cli"), {**os.environ, "PYTHONPATH": str(ROOT)})
    yield cli
    cli.close()


def run_surface(surface: str, argv: list[str], cwd: Path, forked_cli: ForkedCli,
                engine_logs_the_task: bool = False) -> tuple[int, list[str]]:
    """Run the command line or a job in a process; (exit code, its one-line reasons)."""
    if surface == "cli":
        r = forked_cli.run(argv, cwd, as_limit=CLI_ADDRESS_SPACE, timeout=300)
        prog = "distcal"
    else:
        if surface == "dask":
            cmd, prog = [sys.executable, str(ROOT / "jobs" / "dask_calibrate.py"), *argv], \
                "dask_calibrate"
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
        else:
            cmd = [str(BIN / "spark-submit"), "--master", "local[1]", "--conf",
                   f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.enabled=false",
                   str(ROOT / "jobs" / "spark_calibrate.py"), *argv]
            prog, env = "spark_calibrate", _spark_env()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    if surface != "cli":
        # spark-submit adds its own log lines (the Spark job writes its line to
        # spark-submit's stderr, not into the stdout the driver's stderr is merged
        # into); a LocalCluster's workers may warn (ports in use on a shared host).
        # The job's own reason is its one prefixed line on stderr; no traceback anywhere.
        assert engine_logs_the_task or "Traceback" not in r.stdout + r.stderr, \
            r.stderr[-3000:]
        assert prog + ":" not in r.stdout, r.stdout[-3000:]
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith(prog + ":")]
    else:
        assert r.stdout == "", r.stdout
        lines = r.stderr.splitlines()
    return r.returncode, lines


@pytest.mark.parametrize("case", CLI_CASES, ids=[f"{c.surface}-{c.id}" for c in CLI_CASES])
def test_command_line_and_jobs(case, work, forked_cli):
    if case.fault is not None:
        case.fault(work)
    before = snapshot(work)
    code, lines = run_surface(case.surface, case.argv, work, forked_cli,
                              case.engine_logs_the_task)
    assert code == 2, lines
    assert len(lines) == 1, lines  # the one line, nothing else (no warnings, no traceback)
    assert re.search(case.match, lines[0]), lines[0]
    assert lines[0].split(":")[0].split()[0] in ("distcal", "spark_calibrate", "dask_calibrate")
    assert snapshot(work) == before  # nothing written, nothing lost
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # never replaced


def _strict_json(text: str) -> Any:
    """Parse as a standard JSON parser would: NaN and Infinity are errors."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not standard JSON")
    return json.loads(text, parse_constant=refuse)


def _cli_ok(work: Path, argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "distcal", *argv], capture_output=True, text=True,
                       timeout=300, cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    return _strict_json(r.stdout)


def test_command_line_json_is_standard(work):
    """Rule 12: null plus why_null for non-finite numbers; ±inf segment keys kept as text."""
    out = _cli_ok(work, ["threshold", "--input", "negatives.parquet", "--cost-fp", "0",
                         "--cost-fn", "0"])
    assert out["threshold"] is None and out["predict_none"] is True
    assert "+inf" in out["why_null"]["threshold"]
    out = _cli_ok(work, ["evaluate", "--input", "negatives.parquet", "--prob-col", "score",
                         "--output", "r"])
    metrics = out["metrics"]["score"]
    assert metrics["auc"] is None and "one class" in metrics["why_null"]["auc"]
    out = _cli_ok(work, ["threshold", "--input", "ginf.parquet", "--by", "g"])
    assert sorted(map(str, (row["g"] for row in out["segments"]))) == [
        "-Infinity", "1.0", "Infinity"]
    _cli_ok(work, ["evaluate", "--input", "ginf.parquet", "--prob-col", "score", "--output",
                   "rg", "--by", "g"])
    report = _strict_json((work / "rg" / "report.json").read_text())
    assert sorted(map(str, report["segments"]["g"])) == ["-Infinity", "1.0", "Infinity"]
    # The other side: negative values after an option are read as values.
    out = _cli_ok(work, ["threshold", "--input", "in.parquet", "--cost-fp", "-1e-3"])
    assert out["cost"] <= 0
    # ... and q/../q names q (committed in one piece, no temporary left).
    _cli_ok(work, ["fit", "--input", "in.parquet", "--output", "q/../q"])
    assert (work / "q" / "model.json").is_file()
    assert not [p for p in os.listdir(work) if p.startswith(".q.")]


@pytest.mark.subprocess
def test_overwrite_replaces_previous_outputs_of_the_same_kind(work):
    """Rule 2's other side: a model replaces a model, Parquet Parquet, a report a report."""
    _cli_ok(work, ["fit", "--input", "in.parquet", "--output", "m_sigmoid", "--overwrite"])
    assert distcal.load(work / "m_sigmoid").method == "isotonic"
    _cli_ok(work, ["apply", "--model", "m_isotonic", "--input", "in.parquet", "--output",
                   "prev.parquet", "--report", "prev_report", "--overwrite"])
    assert "calibrated" in pq.read_schema(work / "prev.parquet").names
    _cli_ok(work, ["apply", "--model", "m_isotonic", "--input", "in.parquet", "--output",
                   "ds/", "--overwrite"])  # a dataset directory, replaced by a Parquet file
    assert (work / "ds").is_file()
    _cli_ok(work, ["evaluate", "--input", "in.parquet", "--prob-col", "score", "--output",
                   "prev_report", "--overwrite"])
    assert (work / "prev_report" / "report.json").is_file()


@pytest.mark.spark
def test_quiet_spark_prints_nothing_but_the_result(work):
    """``-q`` with the Spark engine: no WARN lines, no progress bars on stderr."""
    r = subprocess.run([sys.executable, "-m", "distcal", "fit", "--engine", "spark", "-q",
                        "--input", "in.parquet", "--output", "m"], capture_output=True,
                       text=True, timeout=600, cwd=work, env=_spark_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr == "", r.stderr[-3000:]
    assert _strict_json(r.stdout)["n_rows"] == 2000
    r = subprocess.run([sys.executable, "-m", "distcal", "fit", "--engine", "spark", "-q",
                        "--input", "in.parquet", "--output", "m"], capture_output=True,
                       text=True, timeout=600, cwd=work, env=_spark_env())
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "distcal: error: output 'm' exists (pass --overwrite / overwrite=True to replace it)"]


def test_suite_size():
    """The issue asks for at least 60 cases across API, CLI, Spark job and Dask job."""
    surfaces = {c.surface for c in CLI_CASES}
    assert len(MODEL_CASES) + len(API_CASES) + len(CLI_CASES) >= 60
    assert {"cli", "spark", "dask"} <= surfaces


_FILE_TYPES = [  # (column, first file's values, a later file's values, refused: why)
    ("label", pa.array([True, False] * 20), pa.array([0.5, 0.25] * 20),
     "would change its values"),  # 0.5 -> True
    ("score", pa.array(np.linspace(0.1, 0.9, 40), pa.float32()),
     pa.array(np.linspace(0.11, 0.91, 40)),  # float64 rounded to the first file's float32
     "read in the types of its first file, whose narrower type would change"),
    ("score", pa.array(np.linspace(0.1, 0.9, 40)), pa.array(["0.3"] * 40),
     "would change its values"),  # parsed
    ("score", pa.array(np.linspace(0.1, 0.9, 40), pa.float32()),
     pa.array(np.linspace(0.1, 0.9, 40), pa.float32()), None),
    ("label", pa.array([0, 1] * 20, pa.int64()), pa.array([1, 0] * 20, pa.int32()), None),
]


@pytest.mark.parametrize("column, first, later, refused", _FILE_TYPES)
def test_a_dataset_whose_files_disagree_on_a_column_s_type(tmp_path, column, first, later,
                                                           refused):
    """A Parquet dataset is read through its first file's schema, and Arrow casts every
    other file to it without a word: a type that would change values is a DataError
    naming the column, the file and both types, for fits, path transforms and
    apply_to_parquet (nothing written); exact widenings read the rows as pandas would."""
    from distcal.apply import apply_to_parquet

    rng = np.random.default_rng(0)
    files = []
    for i, values in enumerate((first, later)):
        other = {"score": pa.array(rng.random(40)), "label": pa.array(rng.integers(0, 2, 40))}
        other[column] = values
        files.append(pa.table(other))
        pq.write_table(files[-1], tmp_path / f"part-{i}.parquet")
    if refused:
        want = rf"column '{column}' has type .* in file '.*part-1.parquet' but .* first " \
               rf"file; .*{refused}"
        with pytest.raises(distcal.DataError, match=want):
            distcal.fit(str(tmp_path))
        model = distcal.fit(files[0].to_pandas())
        with pytest.raises(distcal.DataError, match=want):
            model.transform(str(tmp_path))
        with pytest.raises(distcal.DataError, match=want):
            apply_to_parquet(model, str(tmp_path), str(tmp_path.parent / "out"))
        assert not (tmp_path.parent / "out").exists()
    else:
        rows = pd.concat([f.to_pandas() for f in files], ignore_index=True)
        assert distcal.fit(str(tmp_path)) == distcal.fit(rows)
