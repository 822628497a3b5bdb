"""What every engine does to one partition of raw rows: check, filter, pool.

The rows' columns arrive by role (float64, null as NaN) with masks of text
values; the result is the partition's distinct-value table and the counts
the driver adds up: problems by (role, problem), rows seen and invalid,
valid rows with weight > 0, their weight, and (for probability columns)
the sum of w y^2 that the Brier score needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from .distinct import DistinctTable, pool_ties
from .validate import RowChecker

__all__ = ["pool_valid_rows", "PartitionTotals", "add_up"]


def pool_valid_rows(arrays: dict[str, np.ndarray], text: dict[str, np.ndarray],
                    columns: dict[str, str], finite_scores: bool = False
                    ) -> tuple[DistinctTable, dict[str, Any]]:
    """Validate, keep valid rows with weight > 0, pool by distinct value."""
    value_role = "prob" if "prob" in columns else "score"
    label_role = "loss" if "loss" in columns else "label"
    checker = RowChecker(dict(columns), finite_scores=finite_scores)
    ok = checker.check(arrays, text)
    if ok is not None:
        arrays = {k: v[ok] for k, v in arrays.items()}
    w = arrays.get("weight")
    if w is not None:
        keep = w > 0
        arrays = {k: v[keep] for k, v in arrays.items()}
        w = arrays["weight"]
    s, y = arrays[value_role], arrays[label_role]
    stats = {"problems": checker.problems, "rows": checker.rows_seen,
             "invalid": checker.rows_invalid, "n_rows": int(s.shape[0]),
             "weight_total": float(w.sum()) if w is not None else float(s.shape[0]),
             "sum_wyy": (float(np.dot(y * w, y) if w is not None else np.dot(y, y))
                         if value_role == "prob" else 0.0)}
    return pool_ties(s, y, w), stats


@dataclass(frozen=True)
class PartitionTotals:
    n_rows: int
    weight_total: float
    dropped_rows: int
    sum_wyy: float


def add_up(stats: list[dict[str, Any]], columns: dict[str, str], *, on_invalid: str,
           finite_scores: bool = False) -> PartitionTotals:
    """The partitions' counts added up; raises the input's ``DataError`` if any.

    The message is the local engine's (same rules, same order), and an
    input with no usable row is a ``DataError`` too.
    """
    checker = RowChecker(dict(columns), finite_scores=finite_scores)
    for st in stats:
        checker.problems.update(st["problems"])
        checker.rows_seen += st["rows"]
        checker.rows_invalid += st["invalid"]
    checker.raise_if_invalid(on_invalid)
    n_rows = sum(st["n_rows"] for st in stats)
    if n_rows == 0:
        raise DataError(f"no rows with weight > 0 to use ({checker.rows_seen} rows read, "
                        f"{checker.rows_invalid} invalid)")
    prob = "prob" in columns
    return PartitionTotals(n_rows, float(sum(st["weight_total"] for st in stats)),
                           checker.rows_invalid,
                           float(sum(st["sum_wyy"] for st in stats)) if prob else float("nan"))


def range_bounds(samples: list[tuple[np.ndarray, int]], k: int) -> np.ndarray:
    """Upper bounds of ``k`` ranges of about equal row counts, from per-part samples.

    Each ``(sample, n)`` is an evenly spaced sample of the sorted values of a
    part of ``n`` rows; each sampled value stands for ``n / len(sample)`` rows.
    The bounds are the sampled values at the weighted quantiles i/k
    (i = 1..k-1), without repeats (equal values must fall in one range).
    """
    values = np.concatenate([smp for smp, _ in samples])
    weights = np.concatenate([np.full(smp.shape[0], n / smp.shape[0]) for smp, n in samples])
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    marks = np.searchsorted(cum, cum[-1] * np.arange(1, k) / k)
    return np.unique(values[order][np.minimum(marks, len(order) - 1)])
