"""Evaluation metrics as functions of a distinct-probability table.

Pooling rows by distinct predicted probability p keeps, per p, the weight
W_p and weighted positives Y_p. Every metric below is a sum over that table
(plus, for the Brier score with fractional labels, the scalar sum w y^2):

* Brier score  (1/W) sum_i w_i (p_i - y_i)^2
             = (1/W) [ sum_p (W_p p^2 - 2 p Y_p) + sum_i w_i y_i^2 ]
* log loss     -(1/W) sum_p [ Y_p log p + (W_p - Y_p) log(1 - p) ], p clipped
  to [eps, 1 - eps] with eps the float64 machine epsilon, whatever the input's
  type (scikit-learn's rule for float64 input; it clips float32 input at float32's).
* calibration curve over scikit-learn's bins; ECE = sum_b (W_b / W)
  |true_b - pred_b|, MCE = max_b |true_b - pred_b|; Murphy's (1973)
  decomposition  reliability = sum_b (W_b/W) (pred_b - true_b)^2,
  resolution = sum_b (W_b/W) (true_b - ybar)^2, uncertainty = ybar (1 - ybar).
* exact AUC = sum_p P_p (N_{<p} + N_p / 2) / (P N), ties counting one half
  (Mann-Whitney), with P_p = Y_p and N_p = W_p - Y_p;
* the ROC curve, one point per distinct p, and its convex hull.

The sums of the first four are added per key (all rows, each segment) by
:mod:`distcal.core.segment_metrics`; this module keeps the ROC.

**The ROC at scale.** The full curve has one point per distinct p, so it is
gathered only on request (``roc_points=None``). Otherwise each range sends
its *hull candidates* (:func:`roc_candidates`: the boundaries of the PAV
blocks of its own positive rates, i.e. the vertices of its own ROC hull),
whose number grows like the number of isotonic blocks, not like the range.
A vertex of the global hull is a vertex of the hull of any contiguous piece
of the curve holding it (the piece's points are a subset of the curve's and
a translation does not change a hull), so the hull of the candidates is the
exact global hull. A second pass, given each range's offset (its rank and
cumulative positives and negatives above it, known from the first pass),
returns the points of the exact curve at evenly spaced global ranks that
fall inside it (:func:`roc_sample`); :func:`roc_select` puts both together.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .distinct import DistinctTable
from .isotonic import tie_runs

__all__ = ["range_partials", "combine_partials", "roc_points", "roc_hull", "roc_candidates",
           "roc_sample", "roc_plan", "roc_select", "desc_cumsums", "wilson_interval"]

EPS = float(np.finfo(np.float64).eps)


def range_partials(t: DistinctTable, threshold: float, roc_full: bool = True) -> dict[str, Any]:
    """What the global report needs of one range besides every key's sums
    (:mod:`distcal.core.segment_metrics`): its positives and negatives at or
    above ``threshold``, its ROC and its number of distinct probabilities.

    ``roc_full``: the range's whole ROC (one point per distinct p); else
    only its hull candidates (:func:`roc_candidates`).
    """
    p, y = t.score, t.positives
    n = t.weight - y
    above = p >= threshold
    return {"above": (float(y[above].sum()), float(n[above].sum())),
            "roc": (p, y, n) if roc_full else roc_candidates(t), "d": int(p.shape[0])}


def combine_partials(parts: list[dict[str, Any]], positives: float, negatives: float
                     ) -> dict[str, Any]:
    """The confusion at the threshold, the number of distinct probabilities and, from
    full curves, the ROC, from the ordered ranges' partials and the global totals."""
    tp = sum(q["above"][0] for q in parts)
    fp = sum(q["above"][1] for q in parts)
    out = {"n_distinct": sum(q["d"] for q in parts),
           "confusion": {"tp": tp, "fp": fp, "tn": negatives - fp, "fn": positives - tp}}
    if parts and isinstance(parts[0]["roc"], tuple):  # full curves
        score = np.concatenate([q["roc"][0] for q in parts])
        ys = np.concatenate([q["roc"][1] for q in parts])
        ns = np.concatenate([q["roc"][2] for q in parts])
        out.update({"roc": roc_points(score, ys, ns), "roc_pos": ys, "roc_neg": ns})
    return out


def roc_points(score: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> dict[str, np.ndarray]:
    """(fpr, tpr, threshold) from (0, 0) at +inf, one point per distinct p, descending.

    ``score`` ascending distinct probabilities with their positive and
    negative weights.
    """
    tps, fps = _from_top(pos), _from_top(neg)
    return _rates(tps, fps, tps[-1], fps[-1], np.concatenate(([np.inf], score[::-1])))


def _rates(tp: np.ndarray, fp: np.ndarray, p_total: float, n_total: float,
           threshold: np.ndarray) -> dict[str, np.ndarray]:
    """(fpr, tpr, threshold) from cumulative counts; a class of no weight has NaN rates."""
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = tp / p_total if p_total > 0 else np.full_like(tp, np.nan)
        fpr = fp / n_total if n_total > 0 else np.full_like(fp, np.nan)
    return {"fpr": fpr, "tpr": tpr, "threshold": threshold}


def _hull_steps(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Positions (0 .. n, from the highest score down) of the ROC hull's vertices.

    ``pos``, ``neg`` ascending; position j is the point after the j highest
    entries. Neighbouring blocks of equal rate are one segment.
    """
    from scipy.optimize import isotonic_regression

    n = pos.shape[0]
    w = pos + neg
    res = isotonic_regression(pos / w, weights=w, increasing=True)
    starts = np.asarray(res.blocks[:-1], dtype=np.intp)
    bp = np.add.reduceat(pos, starts)[::-1]
    bn = np.add.reduceat(neg, starts)[::-1]
    rate = bp / (bp + bn)
    # Neighbouring blocks of one rate (to rounding, as isotonic blocks) are one segment.
    keep = np.zeros(rate.shape[0], dtype=bool)
    keep[tie_runs(rate) - 1] = True  # the last block of each run; the very last's index -1
    ends = n - starts[::-1]  # position after each block, descending blocks
    return np.concatenate(([0], ends[keep])).astype(np.int64)


def roc_hull(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the ROC convex hull, from (0, 0) to (1, 1).

    ``pos``, ``neg``: positive and negative weight per distinct probability,
    ascending. The upper hull's segments are exactly the blocks of the
    isotonic regression of the label on the probability (Fawcett &
    Niculescu-Mizil, "PAV and the ROC convex hull", 2007): a block's slope
    is its positive rate, and PAV makes rates decrease from the top score
    down, which is convexity. So the hull is one O(n) PAV (scipy) and the
    cumulative sums at block boundaries, read from the highest score;
    collinear points fall inside merged blocks. With one class only, the
    rate of the other is 0/0 at both ends (NaN, as on the curve).
    """
    p_total, n_total = float(pos.sum()), float(neg.sum())
    if p_total <= 0.0 or n_total <= 0.0:
        return _hull_ends(p_total, n_total)
    at = _hull_steps(pos, neg)
    # Divided by the cumulative sums' own totals (not pos.sum(), which numpy adds
    # pairwise): the hull ends at (1, 1) exactly, as the curve does.
    tp, fp = _from_top(pos), _from_top(neg)
    return fp[at] / fp[-1], tp[at] / tp[-1]


def _hull_ends(p_total: float, n_total: float) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) of a hull from (0, 0) to (1, 1) alone; a rate of a class without
    weight is 0/0, NaN."""
    ends = np.array([0.0, 1.0])
    return (ends if n_total > 0.0 else np.full(2, np.nan),
            ends if p_total > 0.0 else np.full(2, np.nan))


def _from_top(v: np.ndarray) -> np.ndarray:
    """0, then the cumulative sums of ``v`` from its last (highest) entry down."""
    return np.concatenate(([0.0], np.cumsum(v[::-1])))


def desc_cumsums(t: DistinctTable) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative positives and negatives from the table's top, (d + 1,) each."""
    return _from_top(t.positives), _from_top(t.weight - t.positives)


def roc_candidates(t: DistinctTable) -> dict[str, np.ndarray]:
    """The vertices of one range's own ROC hull, in the range's coordinates.

    ``j``: positions 1 .. d (the point after the range's j highest distinct
    probabilities; position 0 is the point above the range, which belongs
    to the range above), with the cumulative positives ``tp``, negatives
    ``fp`` from the range's top and the point's ``threshold``. Every boundary
    of the PAV blocks is kept (no merging of equal rates), a superset of
    the range's hull vertices; the range's last point is always there.
    """
    from scipy.optimize import isotonic_regression

    d = len(t)
    res = isotonic_regression(t.positives / t.weight, weights=t.weight, increasing=True)
    j = (d - np.asarray(res.blocks[:-1], dtype=np.int64))[::-1]  # ascending, ends with d
    cy, cn = desc_cumsums(t)
    return {"j": j, "tp": cy[j], "fp": cn[j], "threshold": t.score[d - j]}


def roc_sample(t: DistinctTable, at: dict[float, np.ndarray]) -> dict[str, np.ndarray]:
    """Points of one range's curve at the positions ``at[first score]`` (1 .. d)."""
    j = at.get(float(t.score[0]))
    if j is None:
        raise RuntimeError("the score ranges changed between two passes over them; keep them "
                           "(persist) between passes")
    cy, cn = desc_cumsums(t)
    return {"j": j, "tp": cy[j], "fp": cn[j], "threshold": t.score[len(t) - j]}


def _to_global(parts: list[dict[str, Any]], d: list[int], tp_r: list[float],
               fp_r: list[float]) -> dict[str, np.ndarray]:
    """Per-range points (ranges ascending) to global ROC points, rank ascending."""
    idx, tp, fp, thr = [np.zeros(1, dtype=np.int64)], [np.zeros(1)], [np.zeros(1)], \
        [np.array([np.inf])]
    o_i, o_tp, o_fp = 0, 0.0, 0.0
    for r in range(len(parts) - 1, -1, -1):  # from the highest range down
        q = parts[r]
        idx.append(q["j"] + o_i)
        tp.append(q["tp"] + o_tp)
        fp.append(q["fp"] + o_fp)
        thr.append(np.asarray(q["threshold"], dtype=np.float64))
        o_i, o_tp, o_fp = o_i + d[r], o_tp + tp_r[r], o_fp + fp_r[r]
    return {"i": np.concatenate(idx), "tp": np.concatenate(tp), "fp": np.concatenate(fp),
            "threshold": np.concatenate(thr)}


def roc_plan(parts: list[dict[str, Any]], firsts: list[float], roc_points: int
             ) -> dict[str, Any]:
    """The global hull from the ranges' candidates, and what the second pass fetches.

    ``parts``: :func:`range_partials` of the ordered ranges (with
    ``roc_full=False``), ``firsts`` each range's lowest probability.
    Returns the hull (``hull``: global points; ``hull_fpr``, ``hull_tpr``)
    and ``at``: first score -> positions (1 .. d) of that range to fetch
    with :func:`roc_sample`, so that the union with the hull vertices has at
    most ``roc_points`` points (unless the hull alone has more).
    """
    d = [q["d"] for q in parts]
    # A range's offsets are its own last cumulative sums (its candidates end
    # at its last point), not its totals summed apart: a range's last point
    # is then, to the bit, where the range below starts, the curve is
    # monotone, and it ends exactly at (1, 1) as scikit-learn's does
    # (tps / tps[-1]); with float weights the two sums differ in the last bits.
    tp_r = [float(q["roc"]["tp"][-1]) if len(q["roc"]["j"]) else 0.0 for q in parts]
    fp_r = [float(q["roc"]["fp"][-1]) if len(q["roc"]["j"]) else 0.0 for q in parts]
    total = int(sum(d))
    cand = _to_global([q["roc"] for q in parts], d, tp_r, fp_r)
    p_total, n_total = float(cand["tp"][-1]), float(cand["fp"][-1])
    if p_total > 0.0 and n_total > 0.0 and cand["i"].shape[0] > 1:
        # the candidates' segments, ascending, for the same PAV as roc_hull
        steps = _hull_steps(np.diff(cand["tp"])[::-1], np.diff(cand["fp"])[::-1])
        hull = {k: v[steps] for k, v in cand.items()}
        hx, hy = hull["fp"] / n_total, hull["tp"] / p_total
    else:
        ends = np.array([0, cand["i"].shape[0] - 1])
        hull = {k: v[ends] for k, v in cand.items()}
        hx, hy = _hull_ends(p_total, n_total)
    if total + 1 <= roc_points:
        want = np.arange(total + 1, dtype=np.int64)
    else:
        m = max(roc_points - hull["i"].shape[0] + 2, 2)
        want = np.unique(np.rint(np.linspace(0.0, total, m)).astype(np.int64))
    want = np.setdiff1d(want, hull["i"])
    at: dict[float, np.ndarray] = {}
    o_i = 0
    for r in range(len(parts) - 1, -1, -1):
        at[float(firsts[r])] = want[(want > o_i) & (want <= o_i + d[r])] - o_i
        o_i += d[r]
    return {"hull": hull, "hull_fpr": hx, "hull_tpr": hy, "at": at, "d": d, "tp_r": tp_r,
            "fp_r": fp_r, "firsts": firsts, "p_total": p_total, "n_total": n_total}


def roc_select(plan: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """(fpr, tpr, threshold) of the hull vertices and the sampled points, descending p."""
    got = _to_global(samples, plan["d"], plan["tp_r"], plan["fp_r"])
    i = np.concatenate((plan["hull"]["i"], got["i"][1:]))
    order = np.argsort(i, kind="stable")
    keep = np.concatenate(([True], np.diff(i[order]) != 0))
    order = order[keep]

    def pick(k: str) -> np.ndarray:
        return np.concatenate((plan["hull"][k], got[k][1:]))[order]

    return _rates(pick("tp"), pick("fp"), plan["p_total"], plan["n_total"], pick("threshold"))


def wilson_interval(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson, 1927)."""
    from scipy.special import ndtri

    if n <= 0:
        return (math.nan, math.nan)
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    z = float(ndtri(0.5 + confidence / 2.0))
    p = successes / n
    # Wilson's centre (p + z^2 / 2n) / (1 + z^2 / n) minus and plus its half-width
    # z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n), multiplied through by
    # r = n / z^2 (no term over- or underflows for any weight total n: tiny weights
    # overflowed 1 / n^2), and the lower end rationalised: centre - half =
    # p^2 r / (p r + 1/2 + sqrt(p q r + 1/4)), q = 1 - p (no cancellation when it is
    # near 0); the upper end is 1 minus the same of q.
    q = 1.0 - p
    r = n / (z * z)
    root = math.sqrt(p * q * r + 0.25)
    lo = p * p * r / (p * r + 0.5 + root)
    hi = 1.0 - q * q * r / (q * r + 0.5 + root)
    return (max(0.0, lo), min(1.0, hi))
