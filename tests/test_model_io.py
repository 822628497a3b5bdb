"""Saving, loading, damage detection, prediction and transform."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_scores

import distcal


@pytest.fixture(params=["isotonic", "sigmoid", "histogram"])
def model(request):
    return distcal.fit(make_scores(3000, seed=2, weights=True), method=request.param,
                       weight_col="w")


def test_round_trip(model, tmp_path):
    model.save(tmp_path / "m")
    back = distcal.load(tmp_path / "m")
    assert back == model
    q = np.linspace(-0.5, 1.5, 999)
    np.testing.assert_array_equal(back.predict(q), model.predict(q))
    assert type(back) is distcal.CalibrationModel
    assert back.method == model.method and back.n_rows == model.n_rows
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["format"] == "distcal-keyed-model" and meta["format_version"] == 2
    assert meta["library_version"] == distcal.__version__


def test_save_refuses_existing_and_overwrites(model, tmp_path):
    model.save(tmp_path / "m")
    with pytest.raises(FileExistsError):
        model.save(tmp_path / "m")
    other = distcal.fit(make_scores(500, seed=9), method="isotonic")
    other.save(tmp_path / "m", overwrite=True)
    assert distcal.load(tmp_path / "m") == other
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporaries left


def _iso(tmp_path):
    m = distcal.fit(make_scores(3000, seed=3))
    m.save(tmp_path / "m")
    return tmp_path / "m"


def test_missing_and_foreign(tmp_path):
    with pytest.raises(distcal.ModelError, match="does not exist"):
        distcal.load(tmp_path / "none")
    (tmp_path / "model.json").write_text("{}")  # a file where the directory goes
    with pytest.raises(distcal.ModelError, match="'.*model.json' is a file, not a directory"):
        distcal.load(tmp_path / "model.json")
    (tmp_path / "foreign").mkdir()
    with pytest.raises(distcal.ModelError, match="not a distcal model"):
        distcal.load(tmp_path / "foreign")
    (tmp_path / "foreign" / "model.json").write_text('{"format": "something-else"}')
    with pytest.raises(distcal.ModelError, match="not a distcal model"):
        distcal.load(tmp_path / "foreign")


def test_truncated_table(tmp_path):
    d = _iso(tmp_path)
    data = (d / "blocks.parquet").read_bytes()
    (d / "blocks.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(distcal.ModelError, match="damaged"):
        distcal.load(d)


def test_altered_table_byte(tmp_path):
    d = _iso(tmp_path)
    data = bytearray((d / "blocks.parquet").read_bytes())
    data[len(data) // 3] ^= 0x01
    (d / "blocks.parquet").write_bytes(bytes(data))
    with pytest.raises(distcal.ModelError, match="damaged"):
        distcal.load(d)


def test_altered_metadata(tmp_path):
    d = _iso(tmp_path)
    meta = json.loads((d / "model.json").read_text())
    meta["n_rows"] += 1
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(distcal.ModelError, match="checksum"):
        distcal.load(d)
    (d / "model.json").write_text((d / "model.json").read_text()[:40])
    with pytest.raises(distcal.ModelError, match="damaged"):
        distcal.load(d)


def test_replaced_table_with_valid_parquet(tmp_path):
    d = _iso(tmp_path)
    t = pq.read_table(d / "blocks.parquet")
    pq.write_table(t.slice(1), d / "blocks.parquet")
    with pytest.raises(distcal.ModelError):
        distcal.load(d)


def test_future_format_version(tmp_path):
    d = _iso(tmp_path)
    meta = json.loads((d / "model.json").read_text())
    meta["format_version"] = 99
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(distcal.ModelError, match="version 99"):
        distcal.load(d)


def test_transform_kinds(tmp_path):
    df = make_scores(2000, seed=4)
    model = distcal.fit(df)
    expect = model.predict(df.score)
    out = model.transform(df)
    assert list(out.columns) == ["score", "label", "calibrated"]
    np.testing.assert_array_equal(out["calibrated"], expect)
    assert "calibrated" not in df.columns  # input untouched
    table = pa.Table.from_pandas(df, preserve_index=False)
    out_t = model.transform(table, output_col="p")
    assert isinstance(out_t, pa.Table) and out_t.schema.names == ["score", "label", "p"]
    np.testing.assert_array_equal(out_t.column("p").to_numpy(), expect)
    pq.write_table(table, tmp_path / "x.parquet")
    out_p = model.transform(str(tmp_path / "x.parquet"))
    assert isinstance(out_p, pd.DataFrame)
    np.testing.assert_array_equal(out_p["calibrated"], expect)
    with pytest.raises(distcal.DataError, match="column 'nope'"):
        model.transform(df, score_col="nope")


def test_mapping_and_describe_for_decreasing():
    df = pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": [1, 1, 0, 0]})
    model = distcal.fit(df, increasing=False)
    assert model.mapping() == [(0.3, 0.0), (0.1, 1.0)]
    assert model.describe().splitlines()[0].startswith("1.000 > SCORE >= 0.300")


def test_repr_and_sigmoid_describe():
    m = distcal.fit(make_scores(500, seed=1), method="sigmoid")
    assert "sigmoid" in repr(m) and "exp(" in m.describe()
    with pytest.raises(AttributeError):
        m.blocks  # noqa: B018


def test_equality_tolerates_summation_order_only():
    df = make_scores(4000, seed=21, weights=True)
    a = distcal.fit(df, weight_col="w")
    b = distcal.fit(df.iloc[::-1], weight_col="w")
    assert a == b
    c = distcal.fit(df.assign(w=df.w * (1 + 1e-6)), weight_col="w")
    assert a != c  # weight_total differs by 1e-6 relative: not equal
    d = distcal.fit(df, weight_col="w", interpolation="step")
    assert a != d
