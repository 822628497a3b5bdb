"""What every engine does to one partition of raw rows: check, filter, pool.

The rows' columns arrive by role (float64, null as NaN) with masks of text
values; the result is the partition's distinct-value table and the counts
the driver adds up: problems by (role, problem), rows seen and invalid,
valid rows with weight > 0, their weight, and (for probability columns)
the sum of w y^2 that the Brier score needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .distinct import DistinctTable, pool_ties
from .validate import RowChecker

__all__ = ["pool_valid_rows"]


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
