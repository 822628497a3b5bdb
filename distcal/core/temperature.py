"""Temperature scaling: one inverse temperature for softmax over logits.

Model: p(x) = softmax(beta * z(x)), beta > 0, z the per-class logits
(Guo et al., 2017). beta minimises the weighted multinomial log loss

    L(beta) = sum_i w_i [ logsumexp(beta z_i) - beta z_i,y_i ]

which is convex in beta, with

    L'(beta)  = sum_i w_i (E_p[z_i] - z_i,y_i)
    L''(beta) = sum_i w_i Var_p(z_i)          (p = softmax(beta z_i)).

Both are sums over rows, so on a cluster every Newton step is one map over
partitions (:func:`temperature_sums`) and a reduce; :func:`fit_temperature`
is the driver that combines the partition sums. The search is safeguarded
Newton in beta inside a bracket on the sign of L', bounded as scikit-learn's
``_TemperatureScaling`` bounds it (log beta in [-10, 10]), and stops when
the error left after a step, estimated from the quadratic convergence of
Newton's method, is below 1e-13 relative (exact to rounding, well inside
1e-9). The search starts from the minimiser on a strided sample of the
rows (:func:`_start`), which leaves about three passes over all rows.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from .plans import KeyBatch, run_plan

__all__ = ["temperature_sums", "fit_temperature", "temperature_steps", "temperature_plan",
           "softmax_predict", "center_logits", "BETA_MIN", "BETA_MAX"]

BETA_MIN = float(np.exp(-10.0))
BETA_MAX = float(np.exp(10.0))

# beta -> the per-partition [loss, grad, hess] at beta (one map over partitions);
# each item an ndarray of 3 floats or any sequence np.asarray stacks alike.
MapParts = Callable[[float], list[Any]]


def center_logits(logits: np.ndarray) -> np.ndarray:
    """Logits shifted so that every row's maximum is 0 (softmax is shift invariant).

    With centred logits beta * z <= 0 for every beta > 0, so exp never
    overflows and the row maximum need not be found again at each beta.

    Examples
    --------
    >>> center_logits(np.array([[1.0, 3.0], [2.0, -1.0]]))
    array([[-2.,  0.],
           [ 0., -3.]])
    """
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] == 0:
        centered: np.ndarray = z - z.max(axis=1, keepdims=True)
        return centered
    # The row maxima column by column: max(axis=1) over a short last axis is
    # several times slower than K elementwise maxima.
    top = z[:, 0].copy()
    for j in range(1, z.shape[1]):
        np.maximum(top, z[:, j], out=top)
    out = np.empty(z.shape)  # C order, whatever the input's: rows are read together
    np.subtract(z, top[:, None], out=out)
    return out


def temperature_sums(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                     beta: float, centered: bool = False) -> np.ndarray:
    """Weighted loss, first and second derivative in beta over one partition.

    Parameters
    ----------
    logits : ndarray of shape (n, K)
        Finite logits (any per-row shift; pass ``centered=True`` when every
        row's maximum is already 0, see :func:`center_logits`).
    labels : ndarray of shape (n,)
        Class indices 0..K-1.
    weights : ndarray of shape (n,) or None
        Row weights (None: 1 each).
    beta : float
        The inverse temperature.

    Returns
    -------
    ndarray ``[loss, grad, hess]``: sum w (logsumexp(beta z) - beta z_y),
    sum w (E_p[z] - z_y), sum w Var_p(z). Sums over partitions add up.

    Examples
    --------
    >>> z = np.array([[0.0, 1.0], [0.0, 1.0]])
    >>> loss, grad, hess = temperature_sums(z, np.array([1, 0]), None, 1.0)
    >>> round(float(grad), 11)   # E_p[z] - z_y: (p1 - 1) + p1
    0.46211715726
    """
    z = np.asarray(logits, dtype=np.float64)
    if z.shape[0] == 0:
        return np.zeros(3)
    if not centered:
        z = center_logits(z)
    per_loss, per_grad, var = _row_terms(z, np.asarray(labels, dtype=np.intp), beta)
    if weights is None:
        return np.array([per_loss.sum(), per_grad.sum(), var.sum()])
    w = np.asarray(weights, dtype=np.float64)
    return np.array([w @ per_loss, w @ per_grad, w @ var])


def _row_terms(z: np.ndarray, labels: np.ndarray, beta: float | np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's loss, gradient and Hessian terms (:func:`temperature_sums`) at its beta
    (one for all rows, or one per row), of centred logits ``z``."""
    zy = z[np.arange(z.shape[0]), labels]
    # One (n, K) buffer: e = exp(beta z), then e * z; the row sums go through
    # einsum, which reduces a short last axis far faster than ndarray.sum.
    e = np.multiply(z, beta if np.ndim(beta) == 0 else beta[:, None])  # type: ignore[index]
    np.exp(e, out=e)
    s = np.einsum("ij->i", e)
    ez = np.einsum("ij,ij->i", e, z)
    e *= z
    ez2 = np.einsum("ij,ij->i", e, z)
    ez /= s
    ez2 /= s
    return np.log(s) - beta * zy, ez - zy, np.maximum(ez2 - ez * ez, 0.0)


def fit_temperature(map_parts: MapParts, max_iter: int = 200, rtol: float = 1e-13,
                    start: float = 1.0) -> tuple[float, dict[str, Any]]:
    """The weighted log-loss optimal inverse temperature.

    Safeguarded Newton in beta: the optimum is kept inside a bracket
    [lo, hi] from the sign of L'; without a bracket on one side beta at least
    doubles (halves), unless the Newton step is trusted (the first step and
    below 10% of beta, or at most half the previous step); a Newton step
    leaving the bracket is replaced by bisection in log beta; beta is
    bounded to [e^-10, e^10].

    Stopping. Near the minimiser Newton converges quadratically: with
    c = L'''/(2 L''), the step from beta_n is d_n = beta_n - beta* + O(c d_n^2)
    and the next iterate's error is about c d_n^2, with c estimated by
    |d_n| / d_(n-1)^2. The search stops after a step d_n (taken without
    evaluating the sums again) once the error left, about
    |d_n|^3 / d_(n-1)^2, is at most ``rtol * beta``, and ``|d_n| <=
    1e-3 |d_(n-1)|`` shows the quadratic regime; or once a step is at most
    ``rtol * beta`` or the bracket is that narrow. The default rtol = 1e-13
    leaves four orders of magnitude to the 1e-9 the engines must agree to.

    Parameters
    ----------
    map_parts : callable
        ``map_parts(beta)`` returns the list of the per-partition results of
        ``temperature_sums(logits, labels, weights, beta)`` (one map over the
        partitions; on a cluster, the collected partition sums). Called once
        per Newton step.
    max_iter : int
        Newton steps at most.
    rtol : float
        The relative accuracy of beta (see Stopping).
    start : float
        The first beta (e.g. the minimiser on a subsample, as
        :func:`temperature_plan` starts): the closer, the fewer passes.

    Returns
    -------
    (beta, info) with info ``{"iterations", "passes", "grad", "hess", "loss"}``;
    loss and derivatives are those of the last beta evaluated (the one
    before the final step when that step was not evaluated).

    Examples
    --------
    >>> z = np.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.2, 3.0], [1.0, 0.0, 0.0]])
    >>> y = np.array([0, 1, 2, 1])
    >>> beta, info = fit_temperature(lambda b: [temperature_sums(z, y, None, b)])
    >>> bool(abs(temperature_sums(z, y, None, beta)[1]) < 1e-12)
    True
    """
    return run_plan(temperature_steps(max_iter, rtol, start), map_parts)


def temperature_steps(max_iter: int = 200, rtol: float = 1e-13, start: float = 1.0,
                      request: Callable[[float], Any] | None = None
                      ) -> Generator[Any, list[Any], tuple[float, dict[str, Any]]]:
    """:func:`fit_temperature`'s search as a generator: yields ``request(beta)`` (default:
    beta) for each beta whose sums it needs, receives the parts' ``[loss, grad, hess]``
    at that beta (their sum is over all rows), returns (beta, info)."""
    passes = 0

    def sums(beta: float) -> Generator[Any, list[Any], np.ndarray]:
        nonlocal passes
        passes += 1
        parts = yield beta if request is None else request(beta)
        total: np.ndarray = np.sum(np.asarray(parts, dtype=np.float64), axis=0) if parts \
            else np.zeros(3)
        return total

    lo, hi = BETA_MIN, BETA_MAX  # invariant: the optimum lies in [lo, hi]
    start = float(start)
    beta = min(max(start, BETA_MIN), BETA_MAX) if np.isfinite(start) else 1.0
    loss, g, h = yield from sums(beta)
    if g == 0.0 and h == 0.0 and beta != 1.0:
        # Flat in floating point at the start (all probabilities 0 or 1): the
        # side of the optimum is unknown there; start where the default does.
        beta = 1.0
        loss, g, h = yield from sums(beta)
    it = 0
    last: float | None = None  # the size of the previous plain Newton step
    while it < max_iter and g != 0.0:
        it += 1
        if g > 0:
            hi = beta
        else:
            lo = beta
        newton = beta - g / h if (h > 0 and np.isfinite(h)) else np.nan
        new = newton
        # A Newton step is trusted on an unbracketed side when it is the first
        # and small (a start close to the optimum: the subsample's minimiser)
        # or when it is at most half the previous one (converging).
        d = abs(newton - beta)
        trusted = bool(np.isfinite(newton) and (
            d <= 0.5 * last if last is not None else (it == 1 and d <= 0.1 * beta)))
        # Otherwise, with no bracket on one side yet: at least double (halve)
        # beta, so that an optimum far away, or at a bound, is reached in a few
        # steps (Newton alone crawls when the loss decays exponentially, e.g.
        # separable data: its steps then keep their size).
        if trusted:
            pass
        elif g < 0 and hi == BETA_MAX:
            new = max(new, 2.0 * beta) if np.isfinite(new) else 2.0 * beta
            if new >= BETA_MAX:
                new = BETA_MAX
        elif g > 0 and lo == BETA_MIN:
            new = min(new, 0.5 * beta) if np.isfinite(new) else 0.5 * beta
            if new <= BETA_MIN:
                new = BETA_MIN
        if new in (BETA_MIN, BETA_MAX):
            loss_b, g_b, h_b = yield from sums(new)
            if (new == BETA_MAX and g_b <= 0) or (new == BETA_MIN and g_b >= 0):
                beta, loss, g, h = new, loss_b, g_b, h_b
                break  # the optimum within the bounds is the bound
            if new == BETA_MAX:
                hi = new
            else:
                lo = new
            new = np.nan
        if not (lo < new < hi):
            new = float(np.sqrt(lo * hi))  # Newton leaves the bracket: bisect in log beta
        plain = bool(new == newton)
        step = abs(new - beta)
        done = step <= rtol * beta or hi - lo <= rtol * lo
        if plain and last is not None and step <= 1e-3 * last \
                and step ** 3 <= rtol * beta * last ** 2:
            done = True  # quadratic regime: the error left is about step^3 / last^2
        beta = float(new)
        if done and plain:
            break  # a Newton step this small leaves beta exact to rounding: no pass
        loss, g, h = yield from sums(beta)
        last = step if plain else None
        if done:
            break
    if g == 0.0 and h == 0.0:
        # The loss went flat in floating point (probabilities already 0/1) on the
        # way to a bound: the bound, as the exact minimiser in the bounds is.
        if hi == BETA_MAX and lo > BETA_MIN:
            beta = BETA_MAX
        elif lo == BETA_MIN and hi < BETA_MAX:
            beta = BETA_MIN
    return float(beta), {"iterations": it, "passes": passes, "loss": float(loss),
                         "grad": float(g), "hess": float(h)}


def softmax_predict(logits: np.ndarray, beta: float) -> np.ndarray:
    """softmax(beta * logits) row by row; NaN anywhere in a row gives a NaN row.

    A row with +inf logits has its limit: their classes share probability 1
    equally (inf - inf would make the row NaN); a row of -inf only, which has
    none, is NaN.

    Examples
    --------
    >>> softmax_predict(np.array([[0.0, np.log(3.0)]]), 1.0)
    array([[0.25, 0.75]])
    >>> softmax_predict(np.array([[np.inf, 0.0, np.inf]]), 2.0)
    array([[0.5, 0. , 0.5]])
    """
    z = np.asarray(logits, dtype=np.float64)
    a = beta * z
    m = np.max(a, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(a - m)
        p: np.ndarray = e / e.sum(axis=1, keepdims=True)
    top = (m[:, 0] == np.inf) & ~np.isnan(a).any(axis=1)
    if top.any():
        hit = a[top] == np.inf
        p[top] = hit / hit.sum(axis=1, keepdims=True)
    return p


# Rows of each part in the first pass's strided sample (the start of Newton's steps).
SAMPLE_PER_PART = 512


class _InputKind:
    """Whether a part's scores look like ``predict_proba`` output (scikit-learn's rule),
    and a strided sample of the part's rows, each weighted by the rows it stands for.

    A segment's rows take the stride of the part they were cut from: the
    samples of all segments of a part hold about ``SAMPLE_PER_PART`` rows
    (and one row at least a segment), not each segment's every row, which
    with thousands of small segments would be every row (to the driver).
    """

    def __call__(self, rows: Any) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray]:
        from .multiclass import looks_like_probabilities

        s = rows.score
        looks = looks_like_probabilities(s)  # (False for one column of scores)
        step = max(1, max(rows.n_rows, rows.cut_from) // SAMPLE_PER_PART)
        taken = s[::step].shape[0]
        stands_for = rows.n_rows / taken if taken else 0.0
        w = np.full(taken, stands_for) if rows.weight is None \
            else rows.weight[::step] * stands_for
        return looks, np.array(s[::step]), np.array(rows.label[::step]), w


def _start(samples: list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]], kind: str) -> float:
    """The minimiser on the parts' samples (1.0 when it is a bound: no information).

    Within a few percent of the full minimiser for typical data, where
    Newton converges quadratically: about three passes instead of seven
    from beta = 1 (bench/multiclass.py). The fit's result does not depend
    on the start beyond its tolerance.
    """
    from .multiclass import to_logits

    parts = [p for p in samples if p[1].shape[0]]
    if not parts:
        return 1.0
    z = center_logits(to_logits(np.concatenate([p[1] for p in parts]), kind))
    y = np.concatenate([p[2] for p in parts]).astype(np.intp)
    w = np.concatenate([p[3] for p in parts])
    beta, _ = fit_temperature(lambda b: [temperature_sums(z, y, w, b, centered=True)])
    return beta if BETA_MIN < beta < BETA_MAX else 1.0


class _TemperatureSums(KeyBatch):
    """``[loss, grad, hess]`` of one part of the rows at ``beta``; the requests of many
    keys (segments) run as one pass over the part's rows (:meth:`pack`)."""

    def __init__(self, beta: float, kind: str):
        self.beta, self.kind = beta, kind
        self.batch_id = kind

    @classmethod
    def pack(cls, requests: list[_TemperatureSums]) -> _TemperatureBatch:
        return _TemperatureBatch(np.array([r.beta for r in requests]), requests[0].kind)

    def __call__(self, rows: Any) -> np.ndarray:
        out: np.ndarray = self.pack([self]).run_rows(np.zeros(1, np.intp), None, rows)[0]
        return out


class _TemperatureBatch:
    """Many keys' :class:`_TemperatureSums` (their betas), run on a part's rows at once."""

    def __init__(self, betas: np.ndarray, kind: str):
        self.betas, self.kind = betas, kind

    def run_rows(self, which: np.ndarray, codes: np.ndarray | None, rows: Any) -> np.ndarray:
        """Row k: ``[loss, grad, hess]`` at beta ``which[k]`` over the rows coded k
        (:class:`~distcal.core.plans.KeyBatch`). Each key's sums are added in the
        rows' order, chunk by chunk at fixed rows: the same whatever other keys run."""
        from .multiclass import to_logits

        zc = center_logits(to_logits(rows.score, self.kind))
        labels = rows.label.astype(np.intp)
        out = np.zeros((which.shape[0], 3))
        chunk = 1 << 16  # chunks keep the temporaries in cache
        for i in range(0, zc.shape[0], chunk):
            z, y = zc[i:i + chunk], labels[i:i + chunk]
            w = None if rows.weight is None else rows.weight[i:i + chunk]
            if codes is None:
                out[0] += temperature_sums(z, y, w, float(self.betas[which[0]]), centered=True)
                continue
            c = codes[i:i + chunk]
            on = c >= 0
            on[on] = which[c[on]] >= 0
            c = c[on]
            terms = _row_terms(z[on], y[on], self.betas[which[c]])
            for j, term in enumerate(terms):
                out[:, j] += np.bincount(c, term if w is None else term * w[on],
                                         minlength=which.shape[0])
        return out


def temperature_plan(max_iter: int = 200, rtol: float = 1e-13
                     ) -> Generator[Any, list[Any], tuple[float, str]]:
    """Temperature scaling as a plan over parts of the rows (:mod:`distcal.core.plans`).

    The first pass decides scikit-learn's rule over all rows (logits, or
    probabilities turned into log(p + 1e-12)) and brings a strided sample
    of each part; then one pass per Newton step (:func:`temperature_steps`),
    from the sample's minimiser (:func:`_start`). Returns (beta, input kind).
    """
    first = yield _InputKind()
    kind = "probabilities" if first and all(f[0] for f in first) else "logits"
    beta, _ = yield from temperature_steps(max_iter, rtol, _start(first, kind),
                                           lambda b: _TemperatureSums(b, kind))
    return beta, kind
