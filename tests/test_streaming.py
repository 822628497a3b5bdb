"""Parquet inputs read in batches, spilled to disk past a budget: same models."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_scores

import distcal

SMALL = {"batch_rows": 3000, "chunk_rows": 9000, "memory_rows": 8000}


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory):
    df = make_scores(120_000, seed=12, ties=False, weights=True)
    path = tmp_path_factory.mktemp("stream") / "scores.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=5000)
    return path, df


@pytest.mark.parametrize("method,params", [
    ("isotonic", {}), ("isotonic", {"increasing": "auto", "interpolation": "step"}),
    ("sigmoid", {}), ("histogram", {"strategy": "quantile", "n_bins": 13}),
    ("histogram", {"strategy": "uniform"}),
])
def test_spilled_fit_equals_in_memory_fit(parquet_file, method, params):
    path, df = parquet_file
    whole = distcal.fit(df, method=method, weight_col="w", **params)
    spilled = distcal.fit(str(path), method=method, weight_col="w", **params, **SMALL)
    q = np.linspace(-0.1, 1.1, 2401)
    if method == "sigmoid":
        assert spilled.params["a"] == pytest.approx(whole.params["a"], rel=1e-9)
        assert spilled.params["b"] == pytest.approx(whole.params["b"], rel=1e-9)
        np.testing.assert_allclose(spilled.predict(q), whole.predict(q), atol=1e-12)
        return
    if method == "histogram":
        # cumulative weights summed in another order move the edges in the last bits
        np.testing.assert_allclose(spilled.params["edges"], whole.params["edges"], rtol=1e-9)
    a, b = spilled.blocks, whole.blocks
    exact = method == "isotonic"  # histogram bounds are computed edges
    for col in ("score_min", "score_max"):
        np.testing.assert_allclose(a[col], b[col], rtol=0 if exact else 1e-9)
    np.testing.assert_allclose(a[["prob", "weight", "positives"]],
                               b[["prob", "weight", "positives"]], rtol=1e-11)
    np.testing.assert_allclose(spilled.predict(q), whole.predict(q), atol=1e-12)
    assert spilled.n_rows == whole.n_rows
    assert spilled == whole


def test_spill_really_happens(parquet_file):
    from distcal.core.keyed import KeySpec
    from distcal.engines.local_keyed import LocalKeyedRanges

    path, _ = parquet_file
    with LocalKeyedRanges(str(path), KeySpec(weight_col="w"), **SMALL) as keyed:
        ranges = keyed.map(lambda t: t.key_table(0))
        assert keyed.store.spilled
        assert len(ranges) > 10
        for a, b in zip(ranges[:-1], ranges[1:]):
            assert a.score[-1] < b.score[0]  # ascending, non-overlapping
        assert sum(len(r) for r in ranges) == keyed.n_rows  # all-distinct scores


def test_hive_partitioned_directory(tmp_path):
    df = make_scores(30_000, seed=13, weights=True)
    df["region"] = np.where(np.arange(len(df)) % 3 == 0, "eu", "us")
    pq.write_to_dataset(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "ds",
                        partition_cols=["region"])
    from_dir = distcal.fit(str(tmp_path / "ds"), weight_col="w")
    assert from_dir == distcal.fit(df, weight_col="w")
    # the partition column is a column like any other
    t = distcal.optimal_threshold(tmp_path / "ds", weight_col="w")
    assert t.threshold == distcal.optimal_threshold(df, weight_col="w").threshold


def test_threshold_and_evaluate_read_in_batches(parquet_file):
    path, df = parquet_file
    a = distcal.optimal_threshold(str(path), weight_col="w", cost_fn=2.0, **SMALL)
    b = distcal.optimal_threshold(df, weight_col="w", cost_fn=2.0)
    assert a.threshold == b.threshold and a.cost == pytest.approx(b.cost, rel=1e-12)
    df2 = df.rename(columns={"score": "prob"})
    r1 = distcal.evaluate(df2, weight_col="w")
    r2 = distcal.evaluate(str(path), prob_col="score", weight_col="w", batch_rows=3000)
    assert r1.brier == pytest.approx(r2.brier, rel=1e-12)
    assert r1.auc == pytest.approx(r2.auc, rel=1e-12)
