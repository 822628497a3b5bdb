"""Issue 34: every public ``to_dict()`` is standard JSON (docs/robustness.md).

``json.dumps(x.to_dict(), allow_nan=False)`` works for every result, as the
command line's JSON line does: a non-finite number is None and the dict
holding it says why in ``why_null``; segment keys that are ±inf are the
strings "Infinity" and "-Infinity".
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import distcal


def _strict(d: dict) -> dict:
    text = json.dumps(d, allow_nan=False)

    def refuse(name: str):
        raise ValueError(f"{name} is not standard JSON")
    return json.loads(text, parse_constant=refuse)


def _rows(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    return pd.DataFrame({"score": s, "label": (rng.random(n) < s).astype(np.int64),
                         "g": np.array([-np.inf, 1.0, np.inf])[np.arange(n) % 3],
                         "z": rng.normal(size=n)})


THRESHOLD_CASES = {
    "all-negatives": lambda: distcal.optimal_threshold(_rows().assign(label=0)),
    "zero-costs": lambda: distcal.optimal_threshold(_rows(), cost_fp=0, cost_fn=0),
    "one-class-positives": lambda: distcal.optimal_threshold(_rows().assign(label=1)),
    "loss-column": lambda: distcal.optimal_threshold(_rows(), loss_col="z"),
    "by-inf-keys": lambda: distcal.optimal_threshold(_rows(), by="g"),
    "by-inf-keys-all-negatives": lambda: distcal.optimal_threshold(_rows().assign(label=0),
                                                                   by="g"),
    "by-two-columns-loss": lambda: distcal.optimal_threshold(
        _rows().assign(h=np.arange(300) % 2), by=["g", "h"], loss_col="z"),
    "tracker-empty-costs": lambda: _tracker(),
}


def _tracker():
    t = distcal.ThresholdTracker(cost_fp=0.0, cost_fn=0.0)
    t.update_many(np.array([0.1, 0.2]), np.array([0, 0]), np.ones(2))
    return t.result()


@pytest.mark.parametrize("name", sorted(THRESHOLD_CASES))
def test_threshold_result_to_dict_is_standard_json(name):
    res = THRESHOLD_CASES[name]()
    d = _strict(res.to_dict())
    for record in [d, *d.get("segments", [])]:
        nulls = {k for k, v in record.items() if v is None and k != "g"}
        assert nulls == set(record.get("why_null", {})), record
    for field in ("threshold", "cost", "tp", "fp", "tn", "fn", "n_positive_predicted"):
        value = getattr(res, field)
        if math.isfinite(value):
            assert d[field] == value
        else:
            assert d[field] is None and d["why_null"][field]


def test_threshold_to_dict_says_why_and_keeps_inf_keys_as_text():
    d = _strict(distcal.optimal_threshold(_rows().assign(label=0), by="g").to_dict())
    assert d["threshold"] is None and d["predict_none"] is True
    assert d["why_null"]["threshold"].startswith("+inf: no score threshold beats")
    assert sorted(map(str, (row["g"] for row in d["segments"]))) == ["-Infinity", "1.0",
                                                                     "Infinity"]
    assert all(row["threshold"] is None and "why_null" in row for row in d["segments"])
    loss = _strict(distcal.optimal_threshold(_rows(), loss_col="z").to_dict())
    assert loss["tp"] is None and "loss_col" in loss["why_null"]["tp"]


def test_the_command_line_and_to_dict_agree():
    """The command's JSON line takes its segments from to_dict (distcal.cli.commands)."""
    from distcal.jsonsafe import json_safe

    res = distcal.optimal_threshold(_rows().assign(label=0), by="g")
    assert json_safe(res.to_dict(), why=True) == res.to_dict()


EVALUATION_CASES = {
    "binary-one-class": lambda: distcal.evaluate(_rows().assign(label=0), prob_col="score"),
    "binary-certain-and-wrong": lambda: distcal.evaluate(
        pd.DataFrame({"p": [0.0, 1.0, 0.0], "label": [1, 0, 0]}), prob_col="p"),
    "binary-by-inf-keys": lambda: distcal.evaluate(_rows(), prob_col="score", by="g"),
    "multiclass-one-class": lambda: distcal.evaluate(_three(label=0), prob_cols=["a", "b", "c"]),
    "multiclass-certain": lambda: distcal.evaluate(_three(certain=True),
                                                   prob_cols=["a", "b", "c"]),
    "multiclass-many-bins": lambda: distcal.evaluate(_three(), prob_cols=["a", "b", "c"],
                                                     n_bins=200),
}


def _three(label=None, certain=False) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    p = rng.dirichlet([1, 1, 1], 300)
    if certain:
        p = np.eye(3)[rng.integers(0, 3, 300)]
    y = rng.integers(0, 3, 300) if label is None else np.full(300, label)
    return pd.DataFrame({"a": p[:, 0], "b": p[:, 1], "c": p[:, 2], "label": y})


@pytest.mark.parametrize("name", sorted(EVALUATION_CASES))
def test_evaluation_reports_to_dict_are_standard_json(name):
    _strict(EVALUATION_CASES[name]().to_dict())
