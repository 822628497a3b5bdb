"""Issue 34: the type of a segment key is part of a segmented model (docs/robustness.md).

Keys of another kind than the model's (text where it has integers, booleans
where it has numbers, dates where it has text...) are a DataError naming
the column, both types and the rows, on every engine, instead of every row
silently taking the global map. Integers and floats are one kind, compared
by value. And the rows that do take the global map (null keys, keys not
seen in fitting, segments that fall back) are counted:
``model.global_rows(data)`` (local data), the INFO log and
``.attrs["global_rows"]`` of a pandas transform.
"""

from __future__ import annotations

import datetime
import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import distcal

N = 600
DAYS = [datetime.date(2024, 1, d) for d in (1, 2, 3)]
KEYS = {"int": [1, 2, 3], "str": ["a", "b", "c"], "float": [0.5, 1.5, 2.5],
        "bool": [True, False, True], "date": DAYS}


def _rows(keys: list, n: int = N, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    return pd.DataFrame({"score": s, "label": (rng.random(n) < s).astype(np.int64),
                         "g": pd.Series([keys[i % len(keys)] for i in range(n)],
                                        dtype=object if isinstance(keys[0], (str, datetime.date))
                                        else None)})


@pytest.fixture(scope="module")
def fitted() -> dict[str, distcal.KeyedModel]:
    out = {}
    for kind, keys in KEYS.items():
        if kind == "bool":
            keys = [True, False]
        out[kind] = distcal.fit(_rows(keys), by="g")
    return out


def _as(kind: str) -> list:
    return {"int": [1, 2, 3], "str": ["1", "2", "3"], "float": [1.0, 2.0, 3.0],
            "bool": [True, False, True], "date": DAYS,
            "timestamp": list(pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"]))}[kind]


MISMATCHES = [
    ("int", "str", "strings", "numbers"),
    ("int", "bool", "booleans", "numbers"),
    ("int", "date", "dates", "numbers"),
    ("str", "int", "numbers", "strings"),
    ("str", "float", "numbers", "strings"),
    ("float", "str", "strings", "numbers"),
    ("bool", "int", "numbers", "booleans"),
    ("bool", "str", "strings", "booleans"),
    ("date", "str", "strings", "dates"),
    ("date", "timestamp", "timestamps without a time zone", "dates"),
    ("date", "int", "numbers", "dates"),
]


@pytest.mark.parametrize("model_kind,data_kind,got,want", MISMATCHES,
                         ids=[f"{m[0]}-model-{m[1]}-data" for m in MISMATCHES])
def test_local_transform_refuses_keys_of_another_type(fitted, model_kind, data_kind, got, want):
    model = fitted[model_kind]
    df = _rows(_as(data_kind), seed=1)
    with pytest.raises(distcal.DataError) as info:
        model.transform(df)
    msg = str(info.value)
    assert msg.startswith("column 'g' (segment): ") and "\n" not in msg
    assert f"{N} rows hold {got}; the model's keys of 'g' are {want}" in msg
    with pytest.raises(distcal.DataError, match=f"hold {got}"):  # Arrow in, same rule
        model.transform(pa.Table.from_pandas(df, preserve_index=False))
    with pytest.raises(distcal.DataError, match=f"hold {got}"):  # and predict
        model.predict(df.score.to_numpy(), segments=df.g)


def test_only_the_rows_of_the_wrong_type_are_counted(fitted):
    df = _rows([1, 2, "3"], seed=2)
    with pytest.raises(distcal.DataError, match=r"column 'g' \(segment\): 200 rows hold strings"):
        fitted["int"].transform(df)


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_keys_of_the_model_s_type_use_their_segments(fitted, kind):
    model = fitted[kind]
    keys = [True, False] if kind == "bool" else KEYS[kind]
    df = _rows(keys, seed=3)
    out = model.transform(df)
    want = np.concatenate([model.segment(k).predict(df.score[df.g == k].to_numpy())
                           for k in keys])
    got = np.concatenate([out.calibrated[df.g == k].to_numpy() for k in keys])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert out.attrs["global_rows"]["total"] == 0


def test_integers_and_floats_are_one_kind_compared_by_value(fitted):
    model = fitted["int"]
    ints = _rows([1, 2, 3], seed=4)
    floats = ints.assign(g=ints.g.astype(float))  # as pandas holds ints with nulls
    np.testing.assert_array_equal(model.transform(floats).calibrated,
                                  model.transform(ints).calibrated)
    halves = ints.assign(g=ints.g + 0.5)  # 1.5 is no integer key: the global map, counted
    out = model.transform(halves)
    assert out.attrs["global_rows"] == {"null_key": 0, "unseen_key": N, "fallback_segment": 0,
                                        "total": N}


def test_rows_served_by_the_global_map_are_logged_and_counted(caplog):
    df = _rows(["a", "b", "c"], seed=5)
    df = pd.concat([df, _rows(["small"], n=10, seed=6)], ignore_index=True)
    model = distcal.fit(df, by="g", min_segment_weight=50)  # "small" falls back
    probe = _rows(["a", None, "zz", "small", "b"], n=500, seed=7)
    with caplog.at_level(logging.INFO, logger="distcal"):
        out = model.transform(probe)
    want = {"null_key": 100, "unseen_key": 100, "fallback_segment": 100, "total": 300}
    assert out.attrs["global_rows"] == want
    assert "transform: 300 of 500 rows used the global map (100 null keys, 100 keys not seen " \
           "in fitting, 100 rows of segments that fall back)" in caplog.text
    assert model.global_rows(probe) == want
    assert model.global_rows(pa.Table.from_pandas(probe, preserve_index=False)) == want
    glob = model.global_model.predict(probe.score.to_numpy())
    used = probe.g.isna() | probe.g.isin(["zz", "small"])
    np.testing.assert_array_equal(out.calibrated[used], glob[used.to_numpy()])


def test_global_rows_of_a_parquet_path_and_its_refusals(fitted, tmp_path):
    _rows([1, 2, 9], seed=8).to_parquet(tmp_path / "in.parquet")
    assert fitted["int"].global_rows(tmp_path / "in.parquet")["unseen_key"] == 200
    with pytest.raises(distcal.DataError, match="column 'g' \\(segment\\): 600 rows hold "
                                                "numbers; the model's keys of 'g' are strings"):
        fitted["str"].global_rows(tmp_path / "in.parquet")
    with pytest.raises(distcal.DataError, match="column 'g' \\(segment\\) not found"):
        fitted["str"].global_rows(pd.DataFrame({"h": [1]}))


def test_a_saved_model_keeps_its_key_types(fitted, tmp_path):
    for kind in ("int", "date", "bool"):
        fitted[kind].save(tmp_path / kind)
        back = distcal.load(tmp_path / kind)
        with pytest.raises(distcal.DataError, match="rows hold strings"):
            back.transform(_rows(["1", "2"], seed=9))


def test_unsigned_64_bit_keys_save_and_load(tmp_path):
    """Keys of 2^63 and more (a uint64 column) are stored as unsigned (pyarrow's int64
    guess overflowed: a raw OverflowError); integers of both signs beyond 2^63 fit in
    no 64-bit column: a DataError naming the column, nothing written."""
    rng = np.random.default_rng(0)
    keys = np.array([2**64 - 1, 7, 2**63], dtype=np.uint64)
    df = pd.DataFrame({"score": rng.random(300), "label": rng.integers(0, 2, 300),
                       "k": keys[rng.integers(0, 3, 300)]})
    model = distcal.fit(df, by="k")
    model.save(tmp_path / "m")
    back = distcal.load(tmp_path / "m")
    assert back == model and back.segments["k"].dtype == np.uint64
    np.testing.assert_array_equal(back.predict(df.score, segments=df.k),
                                  model.predict(df.score, segments=df.k))
    mixed = distcal.fit(df.assign(k=[2**64 - 1 if i % 2 else -5 for i in range(300)]), by="k")
    with pytest.raises(distcal.DataError, match="column 'k' .segment. holds integer keys"):
        mixed.save(tmp_path / "mixed")
    assert not (tmp_path / "mixed").exists()


def test_dask_transform_checks_key_types(fitted, client):
    """Dask predicts each partition with the model: the keys' values are checked there."""
    import dask.dataframe as dd

    model = fitted["int"]
    text = dd.from_pandas(_rows(_as("str"), seed=10), npartitions=3)
    with pytest.raises(distcal.DataError, match=r"column 'g' \(segment\): 200 rows hold "
                                                r"strings; the model's keys of 'g' are numbers"):
        model.transform(text).compute()
    with pytest.raises(distcal.DataError, match="rows hold booleans"):
        model.transform(dd.from_pandas(_rows(_as("bool"), seed=10), npartitions=3)).compute()
    stamps = _rows(_as("timestamp"), seed=10)
    stamps["g"] = pd.to_datetime(stamps.g)
    with pytest.raises(distcal.DataError, match=r"rows hold timestamps without a time zone; "
                                                r"the model's keys of 'g' "
                                                r"are dates"):
        fitted["date"].transform(dd.from_pandas(stamps, npartitions=3)).compute()
    probe = _rows([1, 2, 7, None], seed=11)
    ddf = dd.from_pandas(probe, npartitions=3)
    np.testing.assert_allclose(model.transform(ddf).compute().calibrated.to_numpy(),
                               model.transform(probe).calibrated.to_numpy(), rtol=1e-12)
    with pytest.raises(TypeError, match="cannot read data of type"):
        model.global_rows(ddf)  # lazy frames: not counted here (documented)


def test_spark_transform_checks_key_types(fitted, spark):
    model = fitted["int"]
    text = spark.createDataFrame(_rows(_as("str"), seed=12))
    with pytest.raises(distcal.DataError, match=r"column 'g' \(segment\) has type string, "
                                                r"which holds strings; the model's keys of 'g' "
                                                r"are numbers"):
        model.transform(text)
    with pytest.raises(distcal.DataError, match="has type boolean, which holds booleans"):
        model.transform(spark.createDataFrame(_rows(_as("bool"), seed=12)))
    with pytest.raises(distcal.DataError, match="has type string, which holds strings; the "
                                                "model's keys of 'g' are dates"):
        fitted["date"].transform(spark.createDataFrame(_rows(["2024-01-01"], seed=12)))
    probe = _rows([1, 2, 7, None], seed=13)
    sdf = spark.createDataFrame(probe.assign(g=probe.g.astype("Int64")))
    got = model.transform(sdf).toPandas()
    np.testing.assert_allclose(got.calibrated.to_numpy(),
                               model.transform(probe).calibrated.to_numpy(), rtol=1e-12)
    dates = _rows(DAYS, seed=14)
    np.testing.assert_allclose(
        fitted["date"].transform(spark.createDataFrame(dates)).toPandas().calibrated,
        fitted["date"].transform(dates).calibrated, rtol=1e-12)


def _stamps(tz: str | None = None) -> list:
    out = list(pd.to_datetime(["2024-01-01 09:30", "2024-03-10 02:30", "2024-11-03 01:30"]))
    return [t.tz_localize(tz) for t in out] if tz else out


def test_naive_and_zoned_timestamps_are_two_kinds():
    """A naive timestamp never equals one with a time zone: either against a model of
    the other is a DataError, not every row on the global map."""
    naive, zoned = _rows(_stamps()), _rows(_stamps("UTC"))
    for model, data, got, want in [(distcal.fit(naive, by="g"), zoned, "with", "without"),
                                   (distcal.fit(zoned, by="g"), naive, "without", "with")]:
        with pytest.raises(distcal.DataError, match=f"{N} rows hold timestamps {got} a time "
                                                    f"zone; the model's keys of 'g' are "
                                                    f"timestamps {want} a time zone"):
            model.transform(data)
        same = zoned if want == "with" else naive
        assert model.global_rows(same)["total"] == 0


def test_spark_timestamp_keys_are_the_session_s_wall_clock_times(spark):
    """Spark's TIMESTAMP keys are read as toPandas() gives them (the session time zone's
    wall-clock times): the model of a Spark fit equals the pandas fit of those rows, and
    a pandas model's segments match them in Spark's transform, in any session time zone
    (New York: a DST gap and a repeated hour among the keys)."""
    rows = _rows(_stamps(), seed=15)
    assert distcal.fit(spark.createDataFrame(rows), by="g") == distcal.fit(rows, by="g")
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        sdf = spark.createDataFrame(rows)
        seen = sdf.toPandas()
        local = distcal.fit(seen, by="g")
        assert distcal.fit(sdf, by="g") == local
        np.testing.assert_allclose(local.transform(sdf).toPandas().calibrated,
                                   local.predict(seen.score, segments=seen.g), rtol=1e-12)
        # A multiclass model's transform (Python workers, not the JVM's join) reads them
        # the same way (its workers were handed instants and refused them).
        rng = np.random.default_rng(15)
        probs = rng.dirichlet([1, 1, 1], len(rows))
        multi = rows.assign(score=list(probs), label=rng.integers(0, 3, len(rows)))
        sdf = spark.createDataFrame(multi.assign(score=[list(p) for p in probs]))
        seen = sdf.toPandas()
        model = distcal.fit(sdf, by="g")
        got = np.stack(model.transform(sdf).toPandas().calibrated)
        np.testing.assert_allclose(got, model.predict(probs, segments=seen.g), rtol=1e-12)
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_spark_transform_of_a_model_whose_segments_all_fall_back(spark):
    """No segment map to join (every segment fell back, or every key was null): every row
    takes the global map, as locally."""
    rows = _rows(KEYS["int"], seed=16)
    for model in (distcal.fit(rows, by="g", min_segment_weight=N),
                  distcal.fit(rows.assign(g=None), by="g")):
        got = model.transform(spark.createDataFrame(rows)).toPandas().calibrated
        np.testing.assert_allclose(got, model.global_model.predict(rows.score), rtol=1e-12)


def test_segments_given_to_predict_in_any_reasonable_form(fitted):
    """One score's key as a scalar, a column of keys (n, 1), 1-tuples (as segment()
    takes): the same predictions; a length or width that does not fit is a DataError."""
    model = fitted["int"]
    rows = _rows(KEYS["int"], n=6, seed=17)
    want = model.predict(rows.score, segments=rows.g.tolist())
    keys = rows.g.to_numpy()
    for given in (keys.reshape(-1, 1), [(k,) for k in keys], pd.Series(keys), pd.Index(keys)):
        np.testing.assert_array_equal(model.predict(rows.score, segments=given), want)
    assert model.predict(rows.score[0], segments=keys[0]) == want[0]
    with pytest.raises(distcal.DataError, match="segments has 5 keys for 6 scores"):
        model.predict(rows.score, segments=keys[:5])
    two = distcal.fit(_rows(KEYS["int"]).assign(h=lambda d: d.g % 2), by=["g", "h"])
    with pytest.raises(distcal.DataError, match=r"each segment key needs 2 values \(g, h\)"):
        two.predict([0.5], segments=[(1,)])


def test_a_key_of_another_type_is_no_segment(fitted):
    """segment(True) of a model of numbers (a dict would take True for 1), segment(1) of a
    model of booleans, an unhashable key: KeyError, as for any key not fitted."""
    for model, key in [(fitted["int"], True), (fitted["bool"], 1), (fitted["int"], "1"),
                       (fitted["int"], [1])]:
        with pytest.raises(KeyError):
            model.segment(key)
    assert fitted["bool"].segment(True).n_rows == N // 2
    assert fitted["int"].segment(1.0) == fitted["int"].segment(1)


def test_keys_of_mixed_types_keep_the_order_of_first_appearance():
    """Keys that do not compare (an object column of numbers and text) are listed in the
    order they first appear, by the model, its thresholds and evaluate's key order
    (``list.sort`` failing half way left them half sorted: 0, 1, 2, 'a')."""
    df = _rows([0, 2, 1, "a"], n=2000)
    df["g"] = df["g"].astype(object)
    model = distcal.fit(df, by="g", method="sigmoid")
    assert list(model.segments["g"]) == [0, 2, 1, "a"]
    assert list(distcal.optimal_threshold(df, by="g").segments["g"]) == [0, 2, 1, "a"]
    ranked = distcal.evaluate(model.transform(df), prob_col="calibrated", by="g").segments
    assert sorted(map(str, ranked["g"])) == ["0", "1", "2", "a"]


def test_decimal_keys_are_numbers_compared_by_value(client):
    """Keys of a decimal column (Arrow, Parquet or Spark decimals) and the same keys as
    floats are one segment, as Spark's join matches them: Decimal('0.1') is not
    Python-equal to 0.1, and such rows took the global map without a word."""
    import decimal

    import dask.dataframe as dd

    df = _rows([0.0, 0.1, 0.2])
    dec = pa.Table.from_pandas(df.drop(columns="g")).append_column(
        "g", pa.array([decimal.Decimal(str(v)) for v in df["g"]], pa.decimal128(5, 1)))
    by_float, by_decimal = distcal.fit(df, by="g"), distcal.fit(dec, by="g")
    want = by_float.transform(df)["calibrated"].to_numpy()
    for model, data in [(by_decimal, df), (by_float, dec)]:
        np.testing.assert_array_equal(np.asarray(model.transform(data).column("calibrated")
                                                 if isinstance(data, pa.Table)
                                                 else model.transform(data)["calibrated"]), want)
        assert model.global_rows(data)["total"] == 0
    got = by_decimal.transform(dd.from_pandas(df, npartitions=2)).compute()
    np.testing.assert_array_equal(got["calibrated"].to_numpy(), want)
