"""Issue 34: discretize's count columns and its number of classes (docs/robustness.md).

Rule 1: a class label names a count column by its text, so a label that
would be one of discretize's own columns (score_min, score_max, n) or that
shares its text with another label (1 and "1") is a DataError naming them.
Rule 2: at most ``max_classes`` distinct labels (default 100, the command
line's --max-classes), refused before the count table is built.
Every refusal leaves the working directory as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_hardening_badinput import snapshot

import distcal
from distcal.discretize import MAX_CLASSES
from distcal.errors import ParameterError

ROOT = Path(__file__).resolve().parents[1]


def _frame(labels: list, n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"score": rng.random(n),
                         "label": pd.Series([labels[i % len(labels)] for i in range(n)],
                                            dtype=object)})


COLLIDING = [
    (["n", "a"], r"class label 'n' would name a count column"),
    (["score_min", "b"], r"class label 'score_min' would name"),
    (["score_max", "score_min", "x"], r"class labels 'score_max', 'score_min' would name"),
    (["n", "score_max", "score_min"], r"class labels 'n', 'score_max', 'score_min'"),
    ([1, "1", 2], r"1 pair of class labels of different types would name the same count "
                  r"column \(1 and '1'\)"),
    ([0, "0", 1, "1"], r"2 pairs of class labels"),
    ([True, "True"], r"True and 'True'"),
    ([2.5, "2.5", 3.0], r"2.5 and '2.5'"),
]


@pytest.mark.parametrize("labels,match", COLLIDING, ids=[repr(c[0]) for c in COLLIDING])
def test_api_refuses_labels_that_collide(labels, match):
    with pytest.raises(distcal.DataError, match=match) as info:
        distcal.discretize(_frame(labels))
    assert str(info.value).startswith("column 'label' (label)")
    assert "\n" not in str(info.value)


def test_labels_that_do_not_collide_keep_their_columns():
    out = distcal.discretize(_frame(["N", "score", "nn", "b"]))
    assert list(out.columns[:3]) == ["score_min", "score_max", "n"]
    assert sorted(map(str, out.columns[3:])) == ["N", "b", "nn", "score"]
    assert (out[["N", "b", "nn", "score"]].sum(axis=1) == out["n"]).all()
    mixed = distcal.discretize(_frame([1, "a", 2]))  # numbers first, then text
    assert list(mixed.columns[3:]) == [1, 2, "a"] and int(mixed["n"].sum()) == 400


def test_parquet_path_is_refused_the_same_way(tmp_path):
    _frame(["a", "n"]).to_parquet(tmp_path / "in.parquet")
    with pytest.raises(distcal.DataError, match="class label 'n'"):
        distcal.discretize(tmp_path / "in.parquet")


# -- rule 2: the number of classes ---------------------------------------------------

def test_max_classes_default_is_documented_and_the_command_line_s():
    from distcal.cli.options import OPTIONS

    opt = next(o for o in OPTIONS if o.name == "max-classes")
    assert MAX_CLASSES == 100 and opt.default == MAX_CLASSES
    assert "(default: 100)" in opt.help
    assert "max_classes" in distcal.discretize.__doc__


@pytest.mark.parametrize("k", [3, 17, 100])
def test_just_above_the_limit_is_refused_naming_column_count_and_limit(k):
    df = _frame(list(range(k + 1)), n=2 * (k + 1))
    with pytest.raises(distcal.DataError,
                       match=rf"column 'label' \(label\) has {k + 1} distinct classes, more than "
                             rf"max_classes={k}") as info:
        distcal.discretize(df, max_classes=k)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("k", [2, 17, 100])
def test_at_the_limit_runs(k):
    out = distcal.discretize(_frame([f"c{i}" for i in range(k)], n=4 * k), max_classes=k)
    assert out.shape[1] == 3 + k and int(out["n"].sum()) == 4 * k


def test_float_labels_are_classes_too():
    rng = np.random.default_rng(1)
    labels = rng.random(2000)  # 2,000 float classes on 2,000 rows
    df = pd.DataFrame({"score": rng.random(2000), "label": labels})
    with pytest.raises(distcal.DataError, match="has 2000 distinct classes, more than "
                                                "max_classes=100"):
        distcal.discretize(df)
    ok = pd.DataFrame({"score": rng.random(600), "label": np.round(labels[:600] * 50) / 10})
    out = distcal.discretize(ok)  # 51 classes 0.0, 0.1, ... 5.0
    assert out.shape[1] == 3 + ok.label.nunique() and int(out["n"].sum()) == 600


def test_many_classes_are_refused_before_the_count_table(monkeypatch):
    """The count table (distinct scores x classes) is never built for too many classes."""
    mod = sys.modules["distcal.discretize"]

    def never(*a, **k):
        raise AssertionError("the count table was built")

    monkeypatch.setattr(mod, "_class_counts", never)
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"score": rng.random(200_000), "label": rng.integers(0, 1000, 200_000)})
    with pytest.raises(distcal.DataError, match="has 1000 distinct classes"):
        distcal.discretize(df)


@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, True, "10", None])
def test_max_classes_must_be_an_integer_of_at_least_2(bad):
    with pytest.raises(ParameterError, match="max_classes must be an integer >= 2"):
        distcal.discretize("/nonexistent/input.parquet", max_classes=bad)


@pytest.mark.parametrize("bad", [-5, 2.5, True, "a", None])
def test_exact_max_must_be_an_integer_of_at_least_0(bad):
    # Refused before any data is read (it failed after both passes, or not at all).
    with pytest.raises(ParameterError, match="exact_max must be an integer >= 0"):
        distcal.discretize("/nonexistent/input.parquet", exact_max=bad)


def test_bad_scores_are_refused_or_dropped_as_the_message_says(engine):
    # The DataError says "pass on_invalid='drop'": discretize takes it (and the command).
    df = _frame(["a", "b"]).assign(score=lambda d: d.score.astype(float))
    bad = df.copy()
    bad.loc[[3, 7], "score"] = np.nan  # (infinite scores are scores: discretize keeps them)
    with pytest.raises(distcal.DataError, match=r"column 'score'.*pass on_invalid='drop'"):
        distcal.discretize(engine(bad))
    pd.testing.assert_frame_equal(distcal.discretize(engine(bad), on_invalid="drop"),
                                  distcal.discretize(df.drop(index=[3, 7])))
    # scores of +-inf are kept (not refused, nor dropped): the outer intervals' bounds
    ends = pd.DataFrame({"score": [-np.inf, 0.2, 0.3, np.inf] * 5, "label": list("abba") * 5})
    for on_invalid in ("raise", "drop"):
        got = distcal.discretize(engine(ends), on_invalid=on_invalid)
        assert got["n"].sum() == 20
        assert (got["score_min"].iloc[0], got["score_max"].iloc[-1]) == (-np.inf, np.inf)


def test_dask_options_are_checked_before_any_work(client):
    import dask.dataframe as dd

    ddf = dd.from_pandas(_frame(["a", "b"]), npartitions=2)
    for name, bad in [("n_ranges", 0), ("n_ranges", 2.7), ("n_ranges", True),
                      ("range_rows", "7"), ("samples_per_range", "x")]:
        with pytest.raises(ParameterError, match=f"^{name} must be"):
            distcal.fit(ddf, **{name: bad})


def test_dask_refuses_too_many_classes_from_a_bounded_sample(client):
    import dask.dataframe as dd

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"score": rng.random(3000), "label": rng.integers(0, 300, 3000)})
    ddf = dd.from_pandas(df, npartitions=4)
    with pytest.raises(distcal.DataError, match=r"has (at least )?\d+ distinct classes, more "
                                                r"than max_classes=50"):
        distcal.discretize(ddf, max_classes=50)
    with pytest.raises(distcal.DataError, match="class label 'n'"):
        distcal.discretize(dd.from_pandas(_frame(["n", "y"]), npartitions=2))
    small = df.assign(label=df.label % 5)
    local = distcal.discretize(small)
    remote = distcal.discretize(dd.from_pandas(small, npartitions=4), max_classes=5)
    pd.testing.assert_frame_equal(remote, local)


def test_spark_refuses_too_many_classes_and_colliding_labels(spark):
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"score": rng.random(3000), "label": rng.integers(0, 300, 3000)})
    with pytest.raises(distcal.DataError, match=r"has (at least )?\d+ distinct classes, more "
                                                r"than max_classes=50"):
        distcal.discretize(spark.createDataFrame(df), max_classes=50)
    with pytest.raises(distcal.DataError, match=r"class labels 'n', 'score_min' would name"):
        distcal.discretize(spark.createDataFrame(_frame(["n", "score_min", "y"])))
    # A class named like the pivot's own score column is a count column like any other.
    labels = _frame(["s", "y", "z"])
    pd.testing.assert_frame_equal(distcal.discretize(spark.createDataFrame(labels)),
                                  distcal.discretize(labels))


# -- the command line ------------------------------------------------------------------

def _cli(work: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distcal", "discretize", *argv],
                          capture_output=True, text=True, timeout=300, cwd=work,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


CLI_CASES = [
    ("n", ["n", "a"], [], r"class label 'n' would name a count column"),
    ("score-min", ["score_min", "a"], [], r"class label 'score_min'"),
    ("score-max-and-n", ["score_max", "n", "a"], [], r"class labels 'n', 'score_max'"),
    ("above-max-classes", list(range(6)), ["--max-classes", "5"],
     r"column 'label' \(label\) has 6 distinct classes, more than max_classes=5"),
    ("above-default", list(range(101)), [], r"has 101 distinct classes, more than "
                                            r"max_classes=100"),
    ("max-classes-1", ["a", "b"], ["--max-classes", "1"], "max_classes must be an integer >= 2"),
]


@pytest.mark.parametrize("name,labels,extra,match", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_with_exit_2_and_writes_nothing(name, labels, extra, match, tmp_path):
    df = _frame(labels, n=max(400, 2 * len(labels)))
    df.to_parquet(tmp_path / "in.parquet")
    before = snapshot(tmp_path)
    r = _cli(tmp_path, "--input", "in.parquet", "--output", "out.parquet", *extra)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and len(lines) == 1, r.stderr
    assert re.search(match, lines[0]), lines[0]
    assert snapshot(tmp_path) == before


def test_cli_at_the_limit_writes_the_intervals(tmp_path):
    _frame([f"c{i}" for i in range(5)]).to_parquet(tmp_path / "in.parquet")
    r = _cli(tmp_path, "--input", "in.parquet", "--max-classes", "5", "--output", "o.parquet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out["intervals"][0]) == {"score_min", "score_max", "n", "c0", "c1", "c2", "c3",
                                        "c4"}
    assert pd.read_parquet(tmp_path / "o.parquet")["n"].sum() == 400
