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
the step is below 1e-13 relative (the fixed point is exact to rounding,
well inside 1e-9).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["temperature_sums", "fit_temperature", "softmax_predict", "center_logits",
           "BETA_MIN", "BETA_MAX"]

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
    centered: np.ndarray = z - z.max(axis=1, keepdims=True)
    return centered


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
    n = z.shape[0]
    if n == 0:
        return np.zeros(3)
    if not centered:
        z = center_logits(z)
    rows = np.arange(n)
    zy = z[rows, np.asarray(labels, dtype=np.intp)]
    e = np.exp(beta * z)
    s = e.sum(axis=1)
    ez = np.einsum("ij,ij->i", e, z) / s
    ez2 = np.einsum("ij,ij->i", e * z, z) / s
    var = np.maximum(ez2 - ez * ez, 0.0)
    per_loss = np.log(s) - beta * zy
    per_grad = ez - zy
    if weights is None:
        return np.array([per_loss.sum(), per_grad.sum(), var.sum()])
    w = np.asarray(weights, dtype=np.float64)
    return np.array([w @ per_loss, w @ per_grad, w @ var])


def fit_temperature(map_parts: MapParts, max_iter: int = 200,
                    rtol: float = 1e-13) -> tuple[float, dict[str, Any]]:
    """The weighted log-loss optimal inverse temperature.

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
        Stop when a step moves beta by less than ``rtol * beta``.

    Returns
    -------
    (beta, info) with info ``{"iterations", "grad", "hess", "loss"}`` at beta.

    Examples
    --------
    >>> z = np.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.2, 3.0], [1.0, 0.0, 0.0]])
    >>> y = np.array([0, 1, 2, 1])
    >>> beta, info = fit_temperature(lambda b: [temperature_sums(z, y, None, b)])
    >>> abs(info["grad"]) < 1e-12
    True
    """
    def sums(beta: float) -> np.ndarray:
        parts = map_parts(beta)
        return np.sum(np.asarray(parts, dtype=np.float64), axis=0) if parts else np.zeros(3)

    lo, hi = BETA_MIN, BETA_MAX  # invariant: the optimum lies in [lo, hi]
    beta = 1.0
    loss, g, h = sums(beta)
    it = 0
    while it < max_iter and g != 0.0:
        it += 1
        if g > 0:
            hi = beta
        else:
            lo = beta
        new = beta - g / h if (h > 0 and np.isfinite(h)) else np.nan
        # No bracket on one side yet: at least double (halve) beta, so that an
        # optimum far away, or at a bound, is reached in a few steps (Newton
        # alone crawls when the loss decays exponentially, e.g. separable data).
        if g < 0 and hi == BETA_MAX:
            new = max(new, 2.0 * beta) if np.isfinite(new) else 2.0 * beta
            if new >= BETA_MAX:
                new = BETA_MAX
        elif g > 0 and lo == BETA_MIN:
            new = min(new, 0.5 * beta) if np.isfinite(new) else 0.5 * beta
            if new <= BETA_MIN:
                new = BETA_MIN
        if new in (BETA_MIN, BETA_MAX):
            loss_b, g_b, h_b = sums(new)
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
        done = abs(new - beta) <= rtol * beta or hi - lo <= rtol * lo
        beta = float(new)
        loss, g, h = sums(beta)
        if done:
            break
    if g == 0.0 and h == 0.0:
        # The loss went flat in floating point (probabilities already 0/1) on the
        # way to a bound: the bound, as the exact minimiser in the bounds is.
        if hi == BETA_MAX and lo > BETA_MIN:
            beta = BETA_MAX
        elif lo == BETA_MIN and hi < BETA_MAX:
            beta = BETA_MIN
    return float(beta), {"iterations": it, "loss": float(loss), "grad": float(g),
                         "hess": float(h)}


def softmax_predict(logits: np.ndarray, beta: float) -> np.ndarray:
    """softmax(beta * logits) row by row; NaN anywhere in a row gives a NaN row.

    Examples
    --------
    >>> softmax_predict(np.array([[0.0, np.log(3.0)]]), 1.0)
    array([[0.25, 0.75]])
    """
    z = np.asarray(logits, dtype=np.float64)
    a = beta * z
    m = np.max(a, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(a - m)
        p: np.ndarray = e / e.sum(axis=1, keepdims=True)
        return p
