"""Every bad input of the public contract: the error, its message, and nothing written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import distcal


def frame(**cols):
    base = {"score": [0.1, 0.2, 0.3, 0.4, 0.5], "label": [0, 1, 0, 1, 1]}
    base.update(cols)
    return pd.DataFrame(base)


CASES = [
    (frame(score=[0.1, np.nan, 0.3, np.nan, 0.5]), {}, r"column 'score': 2 rows are null or NaN"),
    (frame(score=pd.array([0.1, None, 0.3, 0.4, 0.5], dtype="Float64")), {},
     r"column 'score': 1 row is null or NaN"),
    (frame(label=[0, 1, 2, -1, 1]), {}, r"column 'label': 2 rows are outside \[0, 1\]"),
    (frame(label=[0, np.nan, 0, 1, 1]), {}, r"column 'label': 1 row is null or NaN"),
    (frame(label=["0", "yes", "1", "no", "1"]), {}, r"column 'label': 5 rows are text"),  # "0" too
    (frame(w=[1.0, -1.0, 1.0, -2.0, 1.0]), {"weight_col": "w"},
     r"column 'w': 2 rows are negative"),
    (frame(w=[1.0, np.nan, 1.0, 1.0, 1.0]), {"weight_col": "w"},
     r"column 'w': 1 row is null or NaN"),
    (frame(w=[1.0, np.inf, 1.0, 1.0, 1.0]), {"weight_col": "w"},
     r"column 'w': 1 row is infinite"),
    (frame(), {"label_col": "target"}, r"column 'target' \(label\) not found"),
    (frame(), {"weight_col": "w"}, r"column 'w' \(weight\) not found"),
    (frame(score=pd.to_datetime(["2024-01-01"] * 5)), {},
     r"column 'score' \(score\) has type (datetime64|timestamp).*; expected numbers"),
    (frame().iloc[:0], {}, r"no rows with weight > 0"),
    (frame(w=[0.0] * 5), {"weight_col": "w"},
     r"no rows with weight > 0 to use \(5 rows read, 0 invalid; column 'w' \(weight\) is 0 "
     r"in the other 5\)"),
]


@pytest.mark.parametrize("df,kwargs,message", CASES)
def test_fit_errors(df, kwargs, message):
    with pytest.raises(distcal.DataError, match=message):
        distcal.fit(df, **kwargs)


@pytest.mark.parametrize("df,kwargs,message", CASES)
def test_errors_from_arrow_and_parquet(df, kwargs, message, tmp_path):
    table = pa.Table.from_pandas(df, preserve_index=False)
    with pytest.raises(distcal.DataError, match=message):
        distcal.fit(table, **kwargs)
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    with pytest.raises(distcal.DataError, match=message):
        distcal.fit(str(path), **kwargs)


def test_several_problems_are_all_named():
    df = frame(score=[np.nan, 0.2, 0.3, 0.4, 0.5], label=[0, 1, 5, 1, 1])
    with pytest.raises(distcal.DataError) as err:
        distcal.fit(df)
    msg = str(err.value)
    assert "column 'score': 1 row is null or NaN" in msg
    assert "column 'label': 1 row is outside [0, 1]" in msg
    assert isinstance(err.value, ValueError)


def test_drop_reports_dropped_rows():
    df = frame(score=[0.1, np.nan, 0.3, 0.4, 0.5], label=[0, 1, 0, 7, 1])
    model = distcal.fit(df, on_invalid="drop")
    assert model.dropped_rows == 2
    assert model.n_rows == 3
    clean = distcal.fit(df.iloc[[0, 2, 4]])
    assert clean.blocks.equals(model.blocks)


def test_counts_are_totals_over_batches(tmp_path):
    s = np.linspace(0, 1, 10_000)
    s[::10] = np.nan
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"score": s, "label": np.zeros(10_000)}), path,
                   row_group_size=1000)
    with pytest.raises(distcal.DataError, match="column 'score': 1000 rows are null or NaN"):
        distcal.fit(str(path), batch_rows=1000)


def test_missing_input_path(tmp_path):
    with pytest.raises(distcal.DataError, match="does not exist"):
        distcal.fit(str(tmp_path / "nope.parquet"))


def test_bool_and_int_labels_are_fine():
    df = frame(label=[False, True, False, True, True])
    assert distcal.fit(df).n_rows == 5
    df = frame(label=pd.array([0, 1, 0, 1, 1], dtype="Int64"))
    assert distcal.fit(df).n_rows == 5


def test_unknown_parameters_are_rejected():
    with pytest.raises(TypeError, match="n_bins"):
        distcal.fit(frame(), method="isotonic", n_bins=3)
    with pytest.raises(ValueError, match="method"):
        distcal.fit(frame(), method="platt")
    with pytest.raises(ValueError, match="engine"):
        distcal.fit(frame(), engine="ray")


def test_row_errors_raised_in_workers_survive_pickling():
    """Spark and Dask send a worker's exception to the driver pickled: the same class,
    message and counts come back (the classes take other arguments than the message)."""
    import pickle

    from distcal.core.rows import InvalidRowsError, LabelsNotBinaryError

    e = InvalidRowsError([("score", "are text, not numbers", 3), ("w", "are negative", 0)])
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is InvalidRowsError and str(back) == str(e) == (
        "column 'score': 3 rows are text, not numbers")
    assert back.items == [("score", "are text, not numbers", 3)]
    e = LabelsNotBinaryError("labels other than 0 and 1", "MODL needs 0/1 labels")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is LabelsNotBinaryError and str(back) == str(e)
    assert back.needs == "MODL needs 0/1 labels"


def test_text_that_reads_as_a_number_is_still_text(engine):
    """A label, score or weight column of text ("0", "1", "0.5") is refused, as any text:
    rows are numbers, and text in them is a DataError counting its rows, on every engine,
    for fit, evaluate and optimal_threshold, and for predict."""
    base = pd.DataFrame({"score": np.linspace(0.05, 0.95, 10), "label": [0, 1] * 5,
                         "w": np.ones(10)}).assign(prob=lambda d: d.score)
    as_text = {"label": base.assign(label=base.label.astype(str)),
               "score": base.assign(score=base.score.astype(str), prob=base.score.astype(str)),
               "w": base.assign(w=base.w.astype(str))}
    for column, df in as_text.items():
        data = engine(df)
        for call, read in ((distcal.fit, column), (distcal.optimal_threshold, column),
                           (distcal.evaluate, "prob" if column == "score" else column)):
            with pytest.raises(distcal.DataError, match=f"column '{read}'.*10 rows are text"):
                call(data, weight_col="w", **engine.opts)
    model = distcal.fit(base)
    for scores in (["0.5"], np.array(["0.5", "0.2"]), pd.Series(["0.5", 0.2], dtype=object)):
        with pytest.raises(distcal.DataError, match="text"):
            model.predict(scores)


def test_complex_numbers_in_an_object_column_are_not_read_as_their_real_part():
    """pandas' to_numeric keeps complex cells and float64 keeps their real part: 0.3j was
    fitted as the score 0. They are refused with the cells that are not numbers."""
    df = pd.DataFrame({"score": pd.Series([0.3j, 0.2, 0.5, np.complex64(0.7)] * 5, dtype=object),
                       "label": [0, 1] * 10})
    with pytest.raises(distcal.DataError, match="column 'score': 10 rows are text, not numbers"):
        distcal.fit(df)
