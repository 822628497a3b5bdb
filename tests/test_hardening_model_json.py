"""Issue 34: every JSON a model directory holds is parsed with size and depth limits.

model.json of every format (version 2, binary or keyed; 0.1 binary,
multiclass and segmented) and the JSON parameters of every map (maps.parquet
of a version-2 model, segments.parquet of a 0.1 segmented model) are
tampered with here,
their checksums recomputed so the parser is reached: anything wrong is a
``distcal.ModelError`` naming the file, never RecursionError, and nothing
on disk changes. Also here: loading a tampered segmented model and exiting
leaves a clean process (exit code and stderr), several times over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_hardening_badinput import snapshot

import distcal
from distcal.model_format import _json_checksum

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "models_0_1"
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("json_models")
    rng = np.random.default_rng(0)
    s = rng.random(1500)
    df = pd.DataFrame({"score": s, "label": (rng.random(1500) < s).astype(np.int64),
                       "g": rng.integers(1, 4, 1500)})
    distcal.fit(df).save(d / "binary")
    distcal.fit(df, by="g").save(d / "keyed")
    distcal.fit(df, by="g", method="sigmoid").save(d / "keyed_sigmoid")
    distcal.fit(df.assign(g=df.g % 2), by="g").save(d / "keyed01")
    distcal.fit(df, method="beta").save(d / "beta")
    probabilities = rng.dirichlet([1, 1, 1], 1500)
    distcal.fit(pd.DataFrame({"z": list(probabilities), "label": rng.integers(0, 3, 1500),
                              "g": df.g}), score_col="z", by="g").save(d / "keyed_multiclass")
    logits = rng.normal(size=(1500, 3))
    distcal.fit(pd.DataFrame({"z": list(logits), "label": logits.argmax(1)}), score_col="z",
                method="temperature").save(d / "temperature")
    for name in ("segmented_isotonic", "segmented_sigmoid", "multiclass_isotonic",
                 "binary_isotonic"):
        shutil.copytree(FIXTURES / name, d / name)
    return d


def _resign(d: Path, edit: Callable[[dict], None]) -> None:
    meta = json.loads((d / "model.json").read_text())
    edit(meta)
    meta["checksum"] = _json_checksum(meta)
    (d / "model.json").write_text(json.dumps(meta))


def _params(file: str, key: str, row: int, text: str | None):
    """Replace the JSON params of one row of ``file`` (table ``key`` of model.json)."""
    def go(d: Path) -> None:
        t = pq.read_table(d / file)
        params = t.column("params").to_pylist()
        params[row] = text
        t = t.set_column(t.schema.get_field_index("params"), "params",
                         pa.array(params, pa.string()))
        pq.write_table(t, d / file)
        digest = hashlib.sha256((d / file).read_bytes()).hexdigest()
        _resign(d, lambda m: m["tables"][key].__setitem__("sha256", digest))
    return go


def _cell(file: str, key: str, column: str, row: int, edit: Callable[[Any], Any]):
    """Replace one cell of ``file``'s ``column`` by ``edit(cell)`` (its type kept), and
    sign the table again."""
    def go(d: Path) -> None:
        t = pq.read_table(d / file)
        values = t.column(column).to_pylist()
        values[row] = edit(values[row])
        i = t.schema.get_field_index(column)
        t = t.set_column(i, column, pa.array(values, t.schema.field(i).type))
        pq.write_table(t, d / file)
        digest = hashlib.sha256((d / file).read_bytes()).hexdigest()
        _resign(d, lambda m: m["tables"][key].__setitem__("sha256", digest))
    return go


def _raw(text: str):
    return lambda d: (d / "model.json").write_text(text)


def _deep_field(d: Path) -> None:
    """A deeply nested value inside a well-formed, re-signed model.json."""
    _resign(d, lambda m: m["params"].__setitem__("extra", json.loads("[" * 40 + "]" * 40)))


def _sparse(d: Path) -> None:
    with open(d / "model.json", "r+b") as fh:
        fh.truncate(200 << 20)


# (id, model, tampering, file named in the message, what the message says)
CASES = [
    # maps.parquet of a keyed (version 2) model
    ("keyed-params-5000-deep", "keyed", _params("maps.parquet", "maps", 1, DEEP),
     "maps.parquet", "params of g=.*: nested too deeply"),
    ("keyed-params-40-deep", "keyed", _params("maps.parquet", "maps", 0, "[" * 40 + "]" * 40),
     "maps.parquet", "nested too deeply"),
    ("keyed-params-nan", "keyed_sigmoid", _params("maps.parquet", "maps", 1, '{"a": NaN, "b": 1}'),
     "maps.parquet", "NaN is not a finite number"),
    ("keyed-params-1e400", "keyed_sigmoid",
     _params("maps.parquet", "maps", 0, '{"a": 1e400, "b": 1}'), "maps.parquet",
     "out of the range of a float"),
    ("keyed-params-not-json", "keyed", _params("maps.parquet", "maps", 2, "{'a': 1"),
     "maps.parquet", "params of"),
    ("keyed-params-null", "keyed", _params("maps.parquet", "maps", 2, None), "maps.parquet",
     "not JSON text"),
    ("keyed-params-huge-integer", "keyed",
     _params("maps.parquet", "maps", 1, '{"n": ' + "9" * 50_000 + "}"), "maps.parquet",
     "params of"),
    # maps.parquet of a binary model: its one map
    ("binary-params-5000-deep", "binary", _params("maps.parquet", "maps", 0, DEEP),
     "maps.parquet", "params of all rows: nested too deeply"),
    ("binary-params-nan", "binary", _params("maps.parquet", "maps", 0, '{"y_min": NaN}'),
     "maps.parquet", "NaN is not a finite number"),
    # segments.parquet of a 0.1 segmented model
    ("0.1-segmented-params-5000-deep", "segmented_isotonic",
     _params("segments.parquet", "segments", 0, DEEP), "segments.parquet",
     "params of segment g='de': nested too deeply"),
    ("0.1-segmented-params-deep-object", "segmented_sigmoid",
     _params("segments.parquet", "segments", 1, '{"a": ' * 3000 + "1" + "}" * 3000),
     "segments.parquet", "nested too deeply"),
    ("0.1-segmented-params-infinity", "segmented_sigmoid",
     _params("segments.parquet", "segments", 2, '{"a": Infinity, "b": 0}'), "segments.parquet",
     "Infinity is not a finite number"),
    ("0.1-segmented-params-bad-utf8-escape", "segmented_isotonic",
     _params("segments.parquet", "segments", 1, '{"a": "\\ud800\\x"}'), "segments.parquet",
     "params of"),
    # model.json of every format
    ("keyed-model-json-5000-deep", "keyed", _raw('{"a": ' + DEEP + "}"), "model.json",
     "nested too deeply"),
    ("keyed-model-json-deep-field", "keyed", _deep_field, "model.json", "nested too deeply"),
    ("keyed-model-json-huge", "keyed", _sparse, "model.json", "larger than"),
    ("keyed-model-json-nan", "keyed", _raw('{"format": "distcal-keyed-model", "x": NaN}'),
     "model.json", "NaN is not a finite number"),
    ("0.1-segmented-model-json-deep", "segmented_isotonic", _raw(DEEP), "model.json",
     "nested too deeply"),
    ("0.1-segmented-model-json-deep-field", "segmented_isotonic", _deep_field, "model.json",
     "nested too deeply"),
    ("0.1-multiclass-model-json-deep", "multiclass_isotonic", _raw('{"a": ' + DEEP + "}"),
     "model.json", "nested too deeply"),
    ("0.1-multiclass-model-json-deep-field", "multiclass_isotonic", _deep_field, "model.json",
     "nested too deeply"),
    ("binary-model-json-deep-field", "binary", _deep_field, "model.json", "nested too deeply"),
    # consistency: what a fit never writes (another parser would read another model, or
    # the counts and maps would be impossible)
    ("keyed-model-json-duplicate-key", "keyed",
     _raw('{"format": "distcal-keyed-model", "format": "distcal-model"}'), "model.json",
     "the key 'format' appears twice"),
    ("keyed-params-duplicate-key", "keyed_sigmoid",
     _params("maps.parquet", "maps", 0, '{"a": 1.0, "b": 0.0, "a": -3.0}'), "maps.parquet",
     "the key 'a' appears twice"),
    ("keyed-negative-n-rows", "keyed", lambda d: _resign(d, lambda m: m.__setitem__(
        "n_rows", -5)), "", "n_rows, dropped_rows and weight_total must be numbers >= 0"),
    ("keyed-segment-weight-text", "keyed", lambda d: _resign(
        d, lambda m: m["segments"]["weight"].__setitem__(0, "nan")), "",
     "segments.weight does not match"),
    ("keyed-segment-n-rows-negative", "keyed", lambda d: _resign(
        d, lambda m: m["segments"]["n_rows"].__setitem__(1, -1)), "",
     "segments.n_rows does not match"),
    # every fitted segment has one map per class of the model, no more
    ("keyed-segment-of-class-3", "keyed", _cell("maps.parquet", "maps", "class", 1,
                                                lambda c: 3), "",
     r"the maps of g=3 are for classes \[3\]; every segment of this model has one map of "
     "no class"),
    ("keyed-multiclass-segment-without-class-2", "keyed_multiclass",
     _cell("maps.parquet", "maps", "class", 9, lambda c: 7), "",
     r"the maps of g=3 are for classes \[0, 1, 7\]; every segment of this model has "
     r"classes \[0, 1, 2\]"),
    ("keyed-multiclass-of-2-classes-with-3-maps", "keyed_multiclass", lambda d: _resign(
        d, lambda m: m.__setitem__("n_classes", 2)), "",
     r"the maps of all rows are for classes \[0, 1, 2\]; every segment of this model has "
     r"classes \[1\]"),
    ("beta-negative-a", "beta", _cell("maps.parquet", "maps", "params", 0, lambda p: json.dumps(
        {**json.loads(p), "a": -1.0})), "", "a and b must be >= 0"),
    ("temperature-negative-rows", "temperature", _cell("maps.parquet", "maps", "n_rows", 0,
                                                       lambda n: -n), "",
     "n_rows and weight must be numbers >= 0"),
    ("binary-model-json-not-utf8", "binary",
     lambda d: (d / "model.json").write_bytes(b'{"format": "\xff"}'), "model.json", "damaged"),
    ("0.1-binary-model-json-deep-field", "binary_isotonic", _deep_field, "model.json",
     "nested too deeply"),
    ("0.1-binary-model-json-5000-deep", "binary_isotonic", _raw('{"a": ' + DEEP + "}"),
     "model.json", "nested too deeply"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_json_of_a_model_directory_is_parsed_with_limits(case, models, tmp_path):
    _, name, tamper, file, match = case
    d = tmp_path / name
    shutil.copytree(models / name, d)
    tamper(d)
    before = snapshot(tmp_path)
    with pytest.raises(distcal.ModelError) as info:
        distcal.load(d)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 600
    assert f"'{d / file}' is " in msg, msg  # the file, named
    assert re.search(match, msg), msg
    assert snapshot(tmp_path) == before


def test_the_untampered_models_load(models):
    for name in ("binary", "keyed", "keyed_sigmoid", "keyed_multiclass", "segmented_isotonic",
                 "segmented_sigmoid", "multiclass_isotonic", "binary_isotonic"):
        distcal.load(models / name)


# -- a keyed model whose tables disagree on its keys ---------------------------------

def _retype_segments(d: Path, convert: Callable[[pa.Array], pa.Array]) -> None:
    t = pq.read_table(d / "segments.parquet")
    t = t.set_column(0, "g", convert(t.column("g").combine_chunks()))
    pq.write_table(t, d / "segments.parquet")
    digest = hashlib.sha256((d / "segments.parquet").read_bytes()).hexdigest()
    _resign(d, lambda m: m["tables"]["segments"].__setitem__("sha256", digest))


@pytest.mark.parametrize("model,convert", [
    ("keyed", lambda a: a.cast(pa.string())),
    ("keyed", lambda a: pa.array([str(v) + "x" for v in a.to_pylist()])),
    ("keyed01", lambda a: a.cast(pa.bool_())),  # True == 1 in Python, yet not the key 1
], ids=["as-text", "other-keys", "0-1-as-bool"])
def test_segments_table_and_maps_must_agree_on_keys_and_types(model, convert, models, tmp_path):
    d = tmp_path / "keyed"
    shutil.copytree(models / model, d)
    _retype_segments(d, convert)
    with pytest.raises(distcal.ModelError, match="disagree on the segments or the types"):
        distcal.load(d)
    e = tmp_path / "float_keys"  # integers stored as floats are the same keys
    shutil.copytree(models / "keyed", e)
    _retype_segments(e, lambda a: a.cast(pa.float64()))
    assert distcal.load(e).predict([0.5], segments=[2]).shape == (1,)


# -- item 6: loading a tampered segmented model, then exiting -------------------------

EXIT_SCRIPT = """
import sys
import distcal
for path in sys.argv[1:]:
    try:
        distcal.load(path)
        print("loaded")
    except distcal.ModelError:
        print("refused")
"""


@pytest.mark.subprocess
def test_loading_tampered_models_then_exiting_is_clean(models, tmp_path):
    """Each process loads every tampering (parquet truncated or garbled, bad JSON, deep
    params, wrong types, mismatched keys) and exits: exit 0, nothing on stderr.

    Model tables are read on the calling thread: a read on Arrow's thread pools left
    native threads that aborted about 1 exit in 40 ("terminate called without an
    active exception", exit 134)."""
    good = models / "keyed"
    kinds: dict[str, Callable[[Path], None]] = {
        "truncated-blocks": lambda d: _cut(d, "blocks.parquet", "blocks"),
        "garbled-maps": lambda d: _garble(d, "maps.parquet", "maps"),
        "garbled-segments-footer": lambda d: _garble(d, "segments.parquet", "segments", tail=60),
        "bad-json": lambda d: (d / "model.json").write_text('{"format": "distcal-keyed-model", '),
        "deep-params": _params("maps.parquet", "maps", 1, DEEP),
        "wrong-types": lambda d: _retype_segments(d, lambda a: a.cast(pa.string())),
        "untampered": lambda d: None,
    }
    paths = []
    for name, tamper in kinds.items():
        shutil.copytree(good, tmp_path / name)
        tamper(tmp_path / name)
        paths.append(str(tmp_path / name))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(4):  # about 2 s each on a quiet machine
        r = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, *paths], capture_output=True,
                           text=True, timeout=120, env=env)
        assert (r.returncode, r.stderr) == (0, ""), r.stderr[-2000:]
        assert r.stdout.split() == ["refused"] * 6 + ["loaded"]


def _cut(d: Path, file: str, key: str) -> None:
    data = (d / file).read_bytes()
    (d / file).write_bytes(data[: len(data) // 2])
    digest = hashlib.sha256((d / file).read_bytes()).hexdigest()
    _resign(d, lambda m: m["tables"][key].__setitem__("sha256", digest))


def _garble(d: Path, file: str, key: str, tail: int = 0) -> None:
    data = bytearray((d / file).read_bytes())
    span = range(len(data) - tail, len(data) - 8) if tail else range(8, len(data) - 8, 7)
    for i in span:
        data[i] ^= 0x5A
    (d / file).write_bytes(bytes(data))
    digest = hashlib.sha256((d / file).read_bytes()).hexdigest()
    _resign(d, lambda m: m["tables"][key].__setitem__("sha256", digest))


def test_model_tables_are_read_without_starting_threads(models):
    """What the exit test relies on, checked directly: loading starts no native thread."""
    code = ("import os, sys, distcal\n"
            "n = len(os.listdir('/proc/self/task'))\n"
            "for p in sys.argv[1:]: distcal.load(p)\n"
            "print(n, len(os.listdir('/proc/self/task')))\n")
    r = subprocess.run([sys.executable, "-c", code, *[str(models / n) for n in (
        "binary", "keyed", "segmented_isotonic", "multiclass_isotonic", "binary_isotonic")]],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    before, after = map(int, r.stdout.split())
    assert after == before


@pytest.mark.parametrize("content", ["[" * 5000 + "]" * 5000, '{"checksum": NaN}', "fifo"])
def test_a_report_reads_the_model_json_of_its_provenance_with_the_same_limits(tmp_path,
                                                                               content):
    """The report's provenance names the model's checksum; a tampered model.json (deep,
    non-standard, a FIFO) leaves it out instead of failing or blocking."""
    import pandas as pd

    from distcal.report import build_document

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    if content == "fifo":
        os.mkfifo(model_dir / "model.json")
    else:
        (model_dir / "model.json").write_text(content)
    rep = distcal.evaluate(pd.DataFrame({"prob": [0.1, 0.4, 0.8, 0.9],
                                         "label": [0, 1, 0, 1]}))
    doc = build_document(rep, provenance={"model_dir": str(model_dir)})["json"]
    assert "model_checksum" not in doc["provenance"]
