"""Engine-free multiclass math: logits, one-vs-rest normalisation, label checks.

* One-vs-rest (scikit-learn's ``CalibratedClassifierCV`` with "isotonic"
  or "sigmoid"): class k's binary calibrator maps its own score to
  q_k; with K >= 3 the row is divided by its sum (the uniform 1/K where the
  sum is 0); with K = 2 only class 1 is calibrated and p0 = 1 - p1.
* Temperature scaling takes logits. :func:`to_logits` is scikit-learn's
  ``_convert_to_logits``: a one-column score s becomes the pair (-s, s); a
  matrix of K >= 2 columns whose entries all lie in [0, 1] and whose row
  sums are all ``numpy.isclose`` to 1 (rtol 1e-5, atol 1e-8) is taken as
  probabilities and mapped to log(p + 1e-12); anything else is logits.
"""

from __future__ import annotations

import numpy as np

__all__ = ["looks_like_probabilities", "to_logits", "normalise_ovr", "label_problems",
           "EPS"]

EPS = 1e-12

def looks_like_probabilities(scores: np.ndarray) -> bool:
    """scikit-learn's test for ``predict_proba`` output (see the module docstring).

    Examples
    --------
    >>> looks_like_probabilities(np.array([[0.2, 0.8], [0.5, 0.5]]))
    True
    >>> looks_like_probabilities(np.array([[0.2, 0.7], [0.5, 0.5]]))
    False
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        return False
    return bool(np.all((s >= 0) & (s <= 1))
                and np.all(np.isclose(s.sum(axis=1), 1.0, rtol=1e-5, atol=1e-8)))


def to_logits(scores: np.ndarray, kind: str = "auto") -> np.ndarray:
    """(n, K) logits from scores, as scikit-learn's ``_convert_to_logits``.

    ``kind``: "auto" (the rule of the module docstring), "logits" or
    "probabilities" (forced).

    Examples
    --------
    >>> to_logits(np.array([1.5, -2.0]))
    array([[-1.5,  1.5],
           [ 2. , -2. ]])
    >>> np.round(to_logits(np.array([[0.5, 0.5]])), 6)
    array([[-0.693147, -0.693147]])
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 1:
        s = s.reshape(-1, 1)
    if s.shape[1] == 1:
        return np.concatenate([-s, s], axis=1)
    if kind == "probabilities" or (kind == "auto" and looks_like_probabilities(s)):
        # An entry below -EPS has no logit: NaN (its row's prediction is NaN, as the
        # SQL and ONNX exports give it), not a RuntimeWarning per call.
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log(s + EPS)
    return s


def normalise_ovr(q: np.ndarray) -> np.ndarray:
    """Rows of per-class calibrated probabilities divided by their sums.

    ``q``: (n, K) with K >= 3, or (n, 2) where only column 1 is used
    (p0 = 1 - p1). A row summing to 0 becomes the uniform 1/K; a value
    above 1 by at most 1e-5 is set to 1 (scikit-learn does both).

    Examples
    --------
    >>> normalise_ovr(np.array([[0.2, 0.6, 0.2], [0.0, 0.0, 0.0]]))
    array([[0.2       , 0.6       , 0.2       ],
           [0.33333333, 0.33333333, 0.33333333]])
    >>> normalise_ovr(np.array([[np.nan, 0.3]]))
    array([[0.7, 0.3]])
    """
    q = np.asarray(q, dtype=np.float64)
    k = q.shape[1]
    if k == 2:
        out = np.empty_like(q)
        out[:, 1] = q[:, 1]
        out[:, 0] = 1.0 - q[:, 1]
    else:
        total = q.sum(axis=1, keepdims=True)
        out = np.full_like(q, 1.0 / k)
        np.divide(q, total, out=out, where=total != 0)
    out[(out > 1.0) & (out <= 1.0 + 1e-5)] = 1.0
    return out


def label_problems(labels: np.ndarray, n_classes: int,
                   text: np.ndarray | None = None) -> list[tuple[str, np.ndarray]]:
    """The rows whose label is not a class index 0..K-1, problem by problem.

    ``labels``: float64 (null as NaN); ``text``: mask of rows whose value
    was text. Returns ``[(problem, mask), ...]`` in message order, each bad
    row in exactly one mask: text, null/NaN, not a whole number, outside
    0..K-1.

    Examples
    --------
    >>> [(p, int(m.sum())) for p, m in label_problems(np.array([0, 1, 2.5, np.nan, 3, -1]), 3)]
    [('are text, not numbers', 0), ('are null or NaN', 1), \
('are not whole numbers (class indices)', 1), ('are outside the class indices 0..2', 2)]
    """
    y = np.asarray(labels, dtype=np.float64)
    texts = np.zeros(y.shape, bool) if text is None else np.asarray(text, bool)
    nan = np.isnan(y) & ~texts
    with np.errstate(invalid="ignore"):
        fraction = ~texts & ~nan & (np.isinf(y) | (np.floor(y) != y))
        outside = ~texts & ~nan & ~fraction & ((y < 0) | (y > n_classes - 1))
    return [("are text, not numbers", texts), ("are null or NaN", nan),
            ("are not whole numbers (class indices)", fraction),
            (f"are outside the class indices 0..{n_classes - 1}", outside)]

