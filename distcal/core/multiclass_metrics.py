"""Multiclass evaluation as sums over rows: every partition's sums add up.

For rows with probabilities p (n, K), class labels y in 0..K-1 and weights
w, with W = sum w:

* log loss  = -sum w log(clip(p_y, eps, 1 - eps)) / W, eps the float64
  machine epsilon (scikit-learn's ``log_loss``);
* Brier     = sum w sum_k (p_k - [y = k])^2 / W (scikit-learn's multiclass
  ``brier_score_loss``);
* accuracy  = sum w [argmax_k p_k = y] / W (ties to the lowest class);
* top-label ECE: confidence c = max_k p_k against "argmax is right", in
  ``n_bins`` uniform bins on [0, 1] (bin ids ``searchsorted(edges[1:-1], c)``
  as scikit-learn's calibration_curve): sum over bins of
  |sum w [right] - sum w c| / W;
* class-wise ECE: the mean over classes k of the ECE of p_k against
  [y = k] in the same bins (Kull et al., 2019);
* the confusion matrix: C[i, j] = sum w over rows of class i predicted j.

All of these are functions of per-bin sums (weight, sum w p, sum w y) and
a few totals, so :func:`multiclass_sums` runs where the rows are and
:func:`add_sums` / :func:`metrics_from_sums` finish on the driver: nothing
proportional to the rows leaves a partition.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .metrics import EPS

__all__ = ["multiclass_sums", "add_sums", "metrics_from_sums"]


def multiclass_sums(probs: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                    n_bins: int) -> dict[str, np.ndarray]:
    """The sums of one partition (see the module docstring).

    Examples
    --------
    >>> s = multiclass_sums(np.array([[.7, .2, .1], [.2, .5, .3]]), np.array([0, 2]), None, 2)
    >>> s["confusion"].tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    p = np.asarray(probs, dtype=np.float64)
    n, k = p.shape
    y = np.asarray(labels, dtype=np.intp)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    rows = np.arange(n)
    py = p[rows, y]
    pred = p.argmax(axis=1)
    right = (pred == y).astype(np.float64)
    onehot = np.zeros_like(p)
    onehot[rows, y] = 1.0
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    conf = p[rows, pred]
    top = np.searchsorted(edges[1:-1], conf)
    ids = np.searchsorted(edges[1:-1], p)  # (n, K) bin of every class's probability
    flat = (ids + np.arange(k) * n_bins).ravel()
    wk = np.repeat(w, k)
    size = k * n_bins
    return {
        "rows": np.array([float(n)]),
        "weight": np.array([w.sum()]),
        "log_loss": np.array([-(w @ np.log(np.clip(py, EPS, 1.0 - EPS)))]),
        "brier": np.array([w @ ((p - onehot) ** 2).sum(axis=1)]),
        "correct": np.array([w @ right]),
        "top": np.stack([np.bincount(top, weights=w, minlength=n_bins),
                         np.bincount(top, weights=w * conf, minlength=n_bins),
                         np.bincount(top, weights=w * right, minlength=n_bins)]),
        "classes": np.stack([np.bincount(flat, weights=wk, minlength=size),
                             np.bincount(flat, weights=(p * w[:, None]).ravel(),
                                         minlength=size),
                             np.bincount(flat, weights=(onehot * w[:, None]).ravel(),
                                         minlength=size)]).reshape(3, k, n_bins),
        "confusion": np.bincount(y * k + pred, weights=w, minlength=k * k).reshape(k, k),
    }


def add_sums(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The sums of several partitions (elementwise)."""
    parts = [p for p in parts if p]
    out = {key: np.array(value, dtype=np.float64, copy=True) for key, value in parts[0].items()}
    for part in parts[1:]:
        for key, value in part.items():
            out[key] += value
    return out


def _curve(sums: np.ndarray) -> tuple[float, Any]:
    """(ECE, calibration-curve rows) from per-bin [weight, sum w p, sum w y]."""
    from .segment_metrics import curve_frame

    weight, wp, wy = sums
    return float(np.abs(wy - wp).sum() / weight.sum()), curve_frame(sums, None)


def metrics_from_sums(sums: dict[str, np.ndarray]) -> dict[str, Any]:
    """The metrics of the module docstring from the total sums.

    Returns log_loss, brier, accuracy, ece (top-label), classwise_ece,
    per_class_ece (list), confusion_matrix (K x K), top_label_curve and
    class_curves (pandas DataFrames ``prob_pred``, ``prob_true``,
    ``weight``, one row per non-empty bin), n_rows and weight_total.
    """
    if not all(np.isfinite(v).all() for v in sums.values()):  # weights near 1e308
        from ..errors import sums_overflow

        raise sums_overflow()
    w = float(sums["weight"][0])
    ece, top_curve = _curve(sums["top"])
    per_class, curves = [], []
    for k in range(sums["classes"].shape[1]):
        e, c = _curve(sums["classes"][:, k, :])
        per_class.append(e)
        curves.append(c)
    return {"log_loss": float(sums["log_loss"][0] / w), "brier": float(sums["brier"][0] / w),
            "accuracy": float(sums["correct"][0] / w), "ece": ece,
            "classwise_ece": float(np.mean(per_class)), "per_class_ece": per_class,
            "confusion_matrix": sums["confusion"], "top_label_curve": top_curve,
            "class_curves": curves, "n_rows": int(sums["rows"][0]), "weight_total": w}
