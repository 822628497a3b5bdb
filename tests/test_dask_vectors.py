"""score_index on a Dask cluster: list columns, equal to the plain column, same errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_vectors import vectors

import distcal


def from_pandas(df, npartitions):
    import dask
    import dask.dataframe as dd

    # Dask turns object columns into strings by default, arrays included.
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_pandas(df, npartitions=npartitions)


def test_dask_vectors_equal_local(client, tmp_path):
    import dask.dataframe as dd

    vec, plain = vectors(n=4000, seed=4)
    ref = distcal.fit(plain, score_col="probability")
    ddf = from_pandas(vec, npartitions=3)
    assert distcal.fit(ddf, score_col="probability", score_index=1) == ref
    path = tmp_path / "v"
    path.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(vec)), 3)):
        pq.write_table(pa.table({"probability": [list(v) for v in vec.probability.iloc[part]],
                                 "label": vec.label.iloc[part].to_numpy()}),
                       path / f"part-{i}.parquet")
    from_parquet = dd.read_parquet(str(path))
    assert distcal.fit(from_parquet, score_col="probability", score_index=1) == ref
    assert (distcal.optimal_threshold(ddf, score_col="probability", score_index=1)
            == distcal.optimal_threshold(plain, score_col="probability"))
    out = ref.transform(from_parquet, score_col="probability", score_index=1).compute()
    np.testing.assert_array_equal(np.sort(out.calibrated.to_numpy()),
                                  np.sort(ref.predict(plain.probability)))


def test_dask_bad_vectors_same_error(client):
    vec, _ = vectors(n=60, seed=5)
    rows = list(vec.probability)
    rows[2], rows[40] = np.array([.5]), np.array([.1, .2, .3, .4])
    bad = vec.assign(probability=rows)
    with pytest.raises(distcal.DataError) as local:
        distcal.fit(bad, score_col="probability", score_index=2)
    with pytest.raises(distcal.DataError) as dist:
        distcal.fit(from_pandas(bad, 3), score_col="probability", score_index=2)
    assert str(dist.value) == str(local.value)
    assert "2 rows have vectors whose length is not 3" in str(local.value)
    assert "score_index 2 is out of range for 1 row" in str(local.value)
