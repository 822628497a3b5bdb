"""Temperature scaling: one inverse temperature for softmax over logits.

Model: p(x) = softmax(beta * z(x)), beta > 0, z the per-class logits
(Guo et al., 2017). beta minimises the weighted multinomial log loss

    L(beta) = sum_i w_i [ logsumexp(beta z_i) - beta z_i,y_i ]

which is convex in beta, with

    L'(beta)  = sum_i w_i (E_p[z_i] - z_i,y_i)
    L''(beta) = sum_i w_i Var_p(z_i)          (p = softmax(beta z_i)).

Both are sums over rows, so on a cluster every Newton step is one map over
partitions (:func:`temperature_sums`) and a reduce. The search
(:class:`TemperatureSearch`) is safeguarded Newton in beta inside a bracket
on the sign of L', bounded as scikit-learn's ``_TemperatureScaling`` bounds
it (log beta in [-10, 10]), and stops when the error left after a step,
estimated from the quadratic convergence of Newton's method, is below 1e-13
relative (exact to rounding, well inside 1e-9). It starts from the
minimiser on a strided sample of the rows (:func:`_starts`), which leaves
about three passes over all rows. With ``by=``, every segment's search is
one search in arrays over the segments (one per pass, not one per segment).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from .keyed import Key
from .plans import Joint, JointPlan, KeyBatch, sum_parts

__all__ = ["temperature_sums", "fit_temperature", "TemperatureSearch", "temperature_plan",
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
    """The weighted log-loss optimal inverse temperature: :class:`TemperatureSearch` of
    one key.

    Parameters
    ----------
    map_parts : callable
        ``map_parts(beta)`` returns the list of the per-partition results of
        ``temperature_sums(logits, labels, weights, beta)`` (one map over the
        partitions; on a cluster, the collected partition sums). Called once
        per pass of the search.
    max_iter : int
        Newton steps at most.
    rtol : float
        The relative accuracy of beta (:class:`TemperatureSearch`, Stopping).
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
    search = TemperatureSearch(np.array([float(start)]), max_iter, rtol)
    while search.asked().shape[0]:
        parts = map_parts(float(search.point[0]))
        search.send(np.sum(np.asarray(parts, dtype=np.float64), axis=0, keepdims=True)
                    if parts else np.zeros((1, 3)))
    return float(search.beta[0]), {
        "iterations": int(search.iterations[0]), "passes": int(search.passes[0]),
        "loss": float(search.loss[0]), "grad": float(search.g[0]), "hess": float(search.h[0])}


class TemperatureSearch:
    """The inverse temperatures of many keys, each minimising its own L, searched at once.

    Safeguarded Newton in beta, per key: the optimum is kept inside a
    bracket [lo, hi] from the sign of L'; without a bracket on one side beta
    at least doubles (halves), unless the Newton step is trusted (the first
    step and below 10% of beta, or at most half the previous step); a
    Newton step leaving the bracket is replaced by bisection in log beta;
    beta is bounded to [e^-10, e^10] as scikit-learn's ``_TemperatureScaling``
    bounds log beta to [-10, 10], and a bound is the result when L' does not
    change sign there.

    Stopping. Near the minimiser Newton converges quadratically: with
    c = L'''/(2 L''), the step from beta_n is d_n = beta_n - beta* + O(c d_n^2)
    and the next iterate's error is about c d_n^2, with c estimated by
    |d_n| / d_(n-1)^2. A key stops after a step d_n (taken without
    evaluating the sums again) once the error left, about
    |d_n|^3 / d_(n-1)^2, is at most ``rtol * beta``, and ``|d_n| <=
    1e-3 |d_(n-1)|`` shows the quadratic regime; or once a step is at most
    ``rtol * beta`` or the bracket is that narrow. The default rtol = 1e-13
    leaves four orders of magnitude to the 1e-9 the engines must agree to.

    The keys' states are arrays, one entry per key, and every rule is an
    array operation whose entry for a key depends on that key's sums only,
    so a key takes the steps it would take alone, and thousands of keys
    (segments) cost a few array operations a pass. Driven by :meth:`asked`
    (the keys whose ``[loss, grad, hess]`` at ``point`` are needed next)
    and :meth:`send` (those sums), until no key asks.
    """

    # What a key's sums at ``point`` are asked for.
    _START, _RESTART, _STEP, _BOUND = range(4)

    def __init__(self, start: np.ndarray, max_iter: int = 200, rtol: float = 1e-13):
        n = start.shape[0]
        self.max_iter, self.rtol = max_iter, rtol
        finite = np.isfinite(start)
        self.beta = np.where(finite, np.clip(np.where(finite, start, 1.0), BETA_MIN, BETA_MAX),
                             1.0)
        self.point = self.beta.copy()
        self.lo, self.hi = np.full(n, BETA_MIN), np.full(n, BETA_MAX)  # the optimum's bracket
        self.loss, self.g, self.h = np.zeros(n), np.zeros(n), np.zeros(n)  # L, L', L'' at beta
        self.iterations, self.passes = np.zeros(n, np.intp), np.zeros(n, np.intp)
        self.last = np.full(n, np.nan)  # the previous step's size when it was Newton's
        self.newton = np.zeros(n)  # the Newton point of the step in progress
        self.step = np.zeros(n)  # the size of the step whose sums are asked
        self.plain = np.zeros(n, bool)  # ... and whether it is Newton's
        self.done = np.zeros(n, bool)  # ... and whether the key stops after it
        self.phase = np.full(n, self._START)
        self.active = np.ones(n, bool)

    def asked(self) -> np.ndarray:
        """The keys (indices, ascending) whose sums at ``point`` are needed next."""
        return np.flatnonzero(self.active)

    def send(self, sums: np.ndarray) -> np.ndarray:
        """The asked keys' ``[loss, grad, hess]`` at their ``point`` (row i: key
        ``asked()[i]``'s); returns the keys (indices) that it ends."""
        n = self.beta.shape[0]
        got = np.zeros(n, bool)
        got[self.asked()] = True
        self.passes[got] += 1
        loss, g, h = np.zeros(n), np.zeros(n), np.zeros(n)
        loss[got], g[got], h[got] = sums[:, 0], sums[:, 1], sums[:, 2]
        phase = self.phase.copy()
        at_beta = got & (phase != self._BOUND)
        self.loss[at_beta], self.g[at_beta], self.h[at_beta] = \
            loss[at_beta], g[at_beta], h[at_beta]
        # Flat in floating point at the start (all probabilities 0 or 1): the side of
        # the optimum is unknown there; start again where the default does.
        restart = at_beta & (phase == self._START) & (self.g == 0.0) & (self.h == 0.0) \
            & (self.beta != 1.0)
        self.beta[restart] = self.point[restart] = 1.0
        self.phase[restart] = self._RESTART
        stepped = at_beta & (phase == self._STEP)
        self.last[stepped] = np.where(self.plain, self.step, np.nan)[stepped]
        ended = stepped & self.done
        # At a bound: the optimum within the bounds is the bound when L' keeps its
        # sign there; otherwise the bound closes the bracket and beta is bisected.
        at_bound = got & (phase == self._BOUND)
        top, bottom = self.point == BETA_MAX, self.point == BETA_MIN
        taken = at_bound & ((top & (g <= 0)) | (bottom & (g >= 0)))
        self.beta[taken] = self.point[taken]
        self.loss[taken], self.g[taken], self.h[taken] = loss[taken], g[taken], h[taken]
        closed = at_bound & ~taken
        self.hi[closed & top] = BETA_MAX
        self.lo[closed & bottom] = BETA_MIN
        ended |= taken
        # Another step while L' != 0.
        head = at_beta & ~restart & ~ended
        goes = head & (self.iterations < self.max_iter) & (self.g != 0.0)
        ended |= head & ~goes
        new = self._propose(goes)
        to_bound = goes & ((new == BETA_MIN) | (new == BETA_MAX))
        self.point[to_bound] = new[to_bound]
        self.phase[to_bound] = self._BOUND
        new[closed] = np.nan
        ended |= self._take(goes & ~to_bound | closed, new)
        self._end(ended)
        return np.flatnonzero(ended)

    def _propose(self, keys: np.ndarray) -> np.ndarray:
        """The next beta proposed for ``keys`` (the others' entries are not used):
        Newton's when trusted, otherwise at least doubling (halving) beta on a side
        without a bracket yet, up to a bound."""
        beta, g, h = self.beta, self.g, self.h
        self.iterations[keys] += 1
        up = keys & (g > 0)
        self.hi[up] = beta[up]
        self.lo[keys & ~up] = beta[keys & ~up]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton = np.where((h > 0) & np.isfinite(h), beta - g / h, np.nan)
            d = np.abs(newton - beta)
            # A Newton step is trusted on an unbracketed side when it is the first and
            # small (a start close to the optimum: the subsample's minimiser) or at
            # most half the previous one (converging).
            trusted = np.isfinite(newton) & np.where(
                np.isnan(self.last), (self.iterations == 1) & (d <= 0.1 * beta),
                d <= 0.5 * self.last)
        self.newton[keys] = newton[keys]
        # Otherwise, with no bracket on one side yet: at least double (halve) beta, so
        # that an optimum far away, or at a bound, is reached in a few steps (Newton
        # alone crawls when the loss decays exponentially, e.g. separable data: its
        # steps then keep their size).
        doubles = ~trusted & (g < 0) & (self.hi == BETA_MAX)
        halves = ~trusted & ~doubles & (g > 0) & (self.lo == BETA_MIN)
        finite = np.isfinite(newton)
        new = newton.copy()
        new[doubles] = np.minimum(
            np.where(finite, np.fmax(newton, 2.0 * beta), 2.0 * beta), BETA_MAX)[doubles]
        new[halves] = np.maximum(
            np.where(finite, np.fmin(newton, 0.5 * beta), 0.5 * beta), BETA_MIN)[halves]
        return new

    def _take(self, keys: np.ndarray, new: np.ndarray) -> np.ndarray:
        """``keys`` step to ``new`` (bisected in log beta where it leaves the bracket);
        the keys that stop without the sums there (returned), the others ask them."""
        # A step of 0 (Newton's point rounds to beta) is beta exact to rounding, also at
        # an end of the bracket (a start at the optimum, where L' rounds to -0).
        inside = (self.lo < new) & (new < self.hi) | (new == self.beta)
        new = np.where(inside, new, np.sqrt(self.lo * self.hi))
        plain = new == self.newton
        step = np.abs(new - self.beta)
        done = (step <= self.rtol * self.beta) | (self.hi - self.lo <= self.rtol * self.lo)
        with np.errstate(invalid="ignore", over="ignore"):
            # The quadratic regime: the error left is about step^3 / last^2.
            done |= plain & (step <= 1e-3 * self.last) \
                & (step ** 3 <= self.rtol * self.beta * self.last ** 2)
        self.beta[keys] = self.point[keys] = new[keys]
        self.plain[keys], self.step[keys], self.done[keys] = plain[keys], step[keys], done[keys]
        self.phase[keys] = self._STEP
        stops: np.ndarray = keys & done & plain  # a Newton step this small: beta is exact
        return stops

    def _end(self, keys: np.ndarray) -> None:
        # A loss gone flat in floating point (probabilities already 0/1) on the way
        # to a bound: the bound, as the exact minimiser within the bounds is.
        flat = keys & (self.g == 0.0) & (self.h == 0.0)
        top = flat & (self.hi == BETA_MAX) & (self.lo > BETA_MIN)
        bottom = flat & ~top & (self.lo == BETA_MIN) & (self.hi < BETA_MAX)
        self.beta[top], self.beta[bottom] = BETA_MAX, BETA_MIN
        self.active[keys] = False


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


class _TemperatureSums(KeyBatch):
    """``[loss, grad, hess]`` of one part of the rows at ``beta``; the requests of many
    keys (segments) run as one pass over the part's rows (:meth:`pack`: their betas)."""

    def __init__(self, beta: float | np.ndarray, kind: str):
        self.betas = np.atleast_1d(beta)  # one beta per key
        self.kind = kind
        self.batch_id = kind

    @classmethod
    def pack(cls, requests: list[_TemperatureSums]) -> _TemperatureSums:
        return cls(np.concatenate([r.betas for r in requests]), requests[0].kind)

    def run_rows(self, which: np.ndarray, codes: np.ndarray | None, rows: Any) -> np.ndarray:
        """Row k: ``[loss, grad, hess]`` at beta ``which[k]`` over the rows coded k
        (:class:`~distcal.core.plans.KeyBatch`). Each key's sums are added in the
        rows' order, chunk by chunk at fixed rows: the same whatever other keys run."""
        from .multiclass import to_logits

        with np.errstate(invalid="ignore"):  # log of other keys' rows (logits < 0): unused
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


def _starts(samples: list[list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]]], kind: str
            ) -> np.ndarray:
    """Each key's minimiser on its parts' samples (1.0 where it is a bound: no
    information), all keys searched at once over the samples' rows.

    Within a few percent of the full minimiser for typical data, where
    Newton converges quadratically: about three passes instead of seven
    from beta = 1 (bench/multiclass.py). The fit's result does not depend
    on the start beyond its tolerance.
    """
    from .multiclass import to_logits

    parts = [[p for p in key_parts if p[1].shape[0]] for key_parts in samples]
    sizes = np.array([sum(p[1].shape[0] for p in mine) for mine in parts], dtype=np.intp)
    n = sizes.shape[0]
    if not sizes.any():
        return np.ones(n)
    codes = np.repeat(np.arange(n), sizes)
    z = center_logits(to_logits(np.concatenate([p[1] for mine in parts for p in mine]), kind))
    y = np.concatenate([p[2] for mine in parts for p in mine]).astype(np.intp)
    w = np.concatenate([p[3] for mine in parts for p in mine])
    search = TemperatureSearch(np.ones(n))
    while (at := search.asked()).shape[0]:
        on = search.active[codes]
        c = codes[on]
        terms = _row_terms(z[on], y[on], search.point[c])
        search.send(np.stack([np.bincount(c, t * w[on], minlength=n)[at] for t in terms],
                             axis=1))
    beta = search.beta
    return np.where((sizes > 0) & (BETA_MIN < beta) & (beta < BETA_MAX), beta, 1.0)


class _Temperature(Joint):
    """One key's problem: its inverse temperature, from the first pass's sample of its
    rows (:func:`temperature_plan`); all keys' are one :class:`TemperatureSearch`."""

    def __init__(self, samples: list[Any], kind: str, max_iter: int, rtol: float):
        self.samples = samples
        self.joint_id = (kind, max_iter, rtol)

    @classmethod
    def solve(cls, problems: dict[Key, Joint]) -> JointPlan:
        keys = list(problems)
        mine: list[_Temperature] = [problems[key] for key in keys]  # type: ignore[misc]
        kind, max_iter, rtol = mine[0].joint_id
        search = TemperatureSearch(_starts([p.samples for p in mine], kind), max_iter, rtol)
        solved: dict[Key, Any] = {}
        while (at := search.asked().tolist()):
            parts = yield ({keys[i]: _TemperatureSums(float(search.point[i]), kind)
                            for i in at}, solved)
            ended = search.send(sum_parts([keys[i] for i in at], parts))
            solved = {keys[i]: float(search.beta[i]) for i in ended.tolist()}
        return solved


def temperature_plan(max_iter: int = 200, rtol: float = 1e-13
                     ) -> Generator[Any, Any, tuple[float, str]]:
    """Temperature scaling as a plan over parts of the rows (:mod:`distcal.core.plans`).

    The first pass decides scikit-learn's rule over all rows (logits, or
    probabilities turned into log(p + 1e-12)) and brings a strided sample
    of each part; then one pass per Newton step (:class:`TemperatureSearch`,
    all keys' at once: :class:`_Temperature`), from the sample's minimiser
    (:func:`_starts`). Returns (beta, input kind).
    """
    first = yield _InputKind()
    kind = "probabilities" if first and all(f[0] for f in first) else "logits"
    beta = yield _Temperature(first, kind, max_iter, rtol)
    return beta, kind
