"""Weighted logistic regression on a few features of a score, by Newton passes.

Platt's sigmoid (:mod:`distcal.core.sigmoid`) and beta calibration
(:mod:`distcal.core.beta`) both minimise

    L(theta) = sum_s  W(s) softplus(z_s) - Y(s) z_s,   z_s = theta . (x(s), 1),

over a distinct-score table: W(s) a distinct score's weight, Y(s) its
target mass (its positives, or Platt's smoothed targets times W) and x(s)
one or two features of s. L, its gradient sum (W expit(z) - Y) (x, 1) and
its Hessian sum W expit(z) (1 - expit(z)) (x, 1)(x, 1)^T are sums over the
score ranges, so each Newton iterate is one pass over the ranges plus a
small solve on the driver, and the fit is exact on any engine. Per row they
are computed as (W - Y) softplus(z) + Y softplus(-z), (W - Y) p - Y q and
W p q (p = expit(z), q = expit(-z)): with 0 <= Y <= W no term cancels
another, so L stays accurate where scores that separate the classes drive
|z| up, and backtracking compares true losses there, not rounding noise.
A pass sums many keys' problems at once (:class:`Terms`, :class:`_Sums`),
and the driver takes their Newton steps at once (:class:`_Newton`).

L is convex. Each pass gives L with the derivatives, so a step is checked
by the pass that computes the next: a step that does not lower L is halved
(backtracking), except in the quadratic region (a step below 1e-4
relative), where L cannot tell steps apart from rounding any more. The fit
stops after a Newton step below 1e-10 relative (the error left is its
square): a rule on the step, not on the loss, so that every engine,
whatever the order of its sums, stops at the same point to rounding. A
fit whose loss falls below 2^-40 of its start stops too (:data:`SEPARATED`:
scores that separate the classes, no finite optimum). There the
parameters run off: Newton's steps keep their size while each lowers L by
about a factor e, so ~28 passes would reach that bound; steps that keep
their size and are taken whole are tried twice as long each time
(accepted only where they gain more than L's quadratic model would from
Newton's step, which gains nothing at twice its length), which reaches
it in a few (and the bound of nearly separated scores, below). A
singular Hessian (the optimum is then a line or a plane of parameters,
all giving the same predictions at the fitted scores) takes the
least-squares (minimum-norm) step.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import sums_overflow
from .distinct import DistinctTable
from .keyed import Key
from .plans import Joint, JointPlan, KeyFailed, KeySums, sum_parts

__all__ = ["Terms", "newton_plan", "SEPARATED", "power_of_two_scale"]


def power_of_two_scale(magnitude: float) -> float:
    """1, or the power of two that brings ``magnitude`` (a sum of weights, a bound on the
    scores) outside [2^-500, 2^500] into [1/2, 1), at most 2^1000: scaling by it is
    exact, and sums of squares of the scaled values neither overflow nor underflow."""
    if magnitude == 0.0 or 2.0 ** -500 <= magnitude <= 2.0 ** 500:
        return 1.0
    return math.ldexp(1.0, min(-math.frexp(magnitude)[1], 1000))

#: The fit stops once the loss is below this fraction of its value at the start.
#: Only scores that separate the classes get there: the loss then falls on
#: towards 0 by about a factor e per Newton step while the parameters grow
#: without bound, so more passes change nothing but how steep the map is
#: between the classes (every fitted probability is within ~1e-12 of its
#: label, relative to the weights). R's ``glm.fit`` stops on the loss's
#: change too (``glm.control(epsilon = 1e-8)``) and warns that "fitted
#: probabilities numerically 0 or 1 occurred".
SEPARATED = 2.0 ** -40

#: The fit stops once a long step (beyond Newton's quadratic region, where
#: the steps shrink) lowers the loss by less than this fraction of it. Only
#: scores that nearly separate the classes get there (both labels at some
#: scores, one label above or below them): the loss falls towards a limit
#: above 0, its decrease shrinking by about a factor e per step, while the
#: parameters grow without bound; the fitted probabilities of the rows are
#: then within ~1e-12 of that limit's.
NEARLY_SEPARATED = 2.0 ** -40


@dataclass(frozen=True)
class Terms:
    """One problem's features and target masses, as numbers (many keys' passes run at once).

    Feature j of a distinct score s is ``(f_j(s) * s_scale - shift_j) /
    spread_j`` (``f_j`` a module-level function of the scores, so that the
    terms travel to the workers); its target mass is ``pos_mass P(s) +
    neg_mass (W(s) - P(s))``, P(s) its positives. Weights and target masses
    are multiplied by ``w_scale`` (a power of two: exact; the minimiser does
    not change).
    """

    features: tuple[Callable[[np.ndarray], np.ndarray], ...]
    shift: tuple[float, ...]
    spread: tuple[float, ...]
    s_scale: float = 1.0
    pos_mass: float = 1.0
    neg_mass: float = 0.0
    w_scale: float = 1.0


class _Sums(KeySums):
    """L, its gradient and its Hessian at ``theta`` over one range's table (one pass).

    Requests with the same feature functions (``batch_id``) run together
    (:class:`~distcal.core.plans.KeySums`): thousands of keys cost one
    vectorised pass over a range, not one Python call each. The sums come
    as L, then the gradient, then the Hessian's rows.
    """

    def __init__(self, theta: np.ndarray, terms: Terms):
        self.theta, self.terms = theta, terms
        self.batch_id = terms.features

    def numbers(self) -> tuple[float, ...]:
        x = self.terms
        return (x.w_scale, x.pos_mass, x.neg_mass, x.s_scale, *x.shift, *x.spread,
                *self.theta)

    def columns(self, t: DistinctTable, number: Callable[[int], float | np.ndarray]
                ) -> list[np.ndarray]:
        features = self.terms.features
        m = len(features)
        w_scale = number(0)
        # Scaled first: below 2^-1022 a product with a target rounds (to 0 at 2^-1075).
        w, pos = t.weight * w_scale, t.positives * w_scale
        y = pos * number(1) + (w - pos) * number(2)
        s_scale = number(3)
        cols = [(f(t.score) * s_scale - number(4 + j)) / number(4 + m + j)
                for j, f in enumerate(features)]
        theta = 4 + 2 * m
        z = number(theta) * cols[0]
        for j in range(1, m):
            z = z + number(theta + j) * cols[j]
        z = number(theta + m) + z
        # p = expit(z), q = 1 - p = expit(-z) and softplus(+-z) from e = exp(-|z|) (two
        # transcendental functions a row). With 0 <= y <= w every term below is a sum
        # of terms of one sign: no cancellation, however far z is from 0 (scores that
        # separate the classes drive it there).
        e = np.exp(-np.abs(z))
        log1p_e = np.log1p(e)
        pos = z >= 0.0
        p, q = np.where(pos, 1.0, e) / (1.0 + e), np.where(pos, e, 1.0) / (1.0 + e)
        r = (w - y) * p - y * q
        h = w * p * q
        loss = (w - y) * (np.maximum(z, 0.0) + log1p_e) + y * (np.maximum(-z, 0.0) + log1p_e)
        grad = [*(r * x for x in cols), r]  # the intercept's feature last: 1
        hx = [*(h * x for x in cols), h]
        # (the Hessian is symmetric: entry (j, i) is entry (i, j)'s very array)
        upper = {(i, j): hx[i] * cols[j] if j < m else hx[i]
                 for i in range(m + 1) for j in range(i, m + 1)}
        hess = [upper[min(i, j), max(i, j)] for i in range(m + 1) for j in range(m + 1)]
        return [loss, *grad, *hess]


def newton_plan(terms: Terms, start: list[float], *, max_iter: int = 100,
                name: str = "logistic regression") -> Generator[Any, Any, np.ndarray]:
    """The minimiser theta of L (module docstring) from ``start``, by Newton passes.

    A plan (:mod:`distcal.core.plans`): one pass per iterate, the keys'
    steps taken together (:class:`_Newton`). ``theta``'s last element is
    the intercept. After ``max_iter`` passes without convergence (scores
    that separate the classes have no finite optimum) it warns, naming
    ``name``, and returns the last iterate.
    """
    theta: np.ndarray = yield _Newton(terms, np.array(start, dtype=np.float64), max_iter, name)
    return theta


class _Newton(Joint):
    """One key's problem: L's minimiser from ``start`` (:func:`newton_plan`)."""

    def __init__(self, terms: Terms, start: np.ndarray, max_iter: int, name: str):
        self.terms, self.start = terms, start
        self.joint_id = (terms.features, max_iter, name)

    @classmethod
    def solve(cls, problems: dict[Key, Joint]) -> JointPlan:
        """Every key's Newton iterates at once, in arrays over the keys (one row each).

        Each key takes the steps it would alone: a key's row of every array
        below depends on its own sums only. Per key and pass: the sums at
        ``point`` (its iterate, or the step it tries) arrive; a step tried is
        accepted, halved, or ends the key (the stopping rules of the module
        docstring); an accepted one is the next iterate, from which the next
        step (Newton's, least squares where H is singular) is tried.
        """
        keys = list(problems)
        mine: list[_Newton] = [problems[key] for key in keys]  # type: ignore[misc]
        _, max_iter, name = mine[0].joint_id
        n = len(keys)
        theta = np.array([p.start for p in mine])
        m = theta.shape[1]
        point = theta.copy()  # where each key's sums are asked for
        step = np.zeros_like(theta)
        loss, separated = np.zeros(n), np.zeros(n)
        g, h = np.zeros((n, m)), np.zeros((n, m, m))
        size, scale, gain, lam = np.zeros(n), np.zeros(n), np.zeros(n), np.ones(n)
        grow, last_size = np.ones(n), np.full(n, math.inf)  # step length tried; last size
        running = np.zeros(n, bool)  # trying a doubled step right after a run-off
        steps = np.zeros(n, np.intp)  # steps taken
        started = np.zeros(n, bool)  # the sums at the start are in
        active = np.ones(n, bool)
        warned: set[str] = set()

        def warn(which: np.ndarray, message: str) -> None:
            if which.any() and message not in warned:
                warned.add(message)
                warnings.warn(f"{name}: {message}", RuntimeWarning, stacklevel=4)

        solved: dict[Key, Any] = {}

        def finish(which: np.ndarray, at: np.ndarray) -> None:
            for i in np.flatnonzero(which).tolist():
                solved[keys[i]] = at[i].copy()
            active[which] = False

        while True:
            at = np.flatnonzero(active)
            parts = yield ({keys[i]: _Sums(point[i], mine[i].terms) for i in at.tolist()},
                           solved)
            solved = {}
            sums = sum_parts([keys[i] for i in at.tolist()], parts)
            bad = ~np.isfinite(sums).all(axis=1)
            if bad.any():
                raise KeyFailed(keys[at[np.argmax(bad)]], sums_overflow())
            c_loss = np.zeros(n)
            c_g, c_h = np.zeros((n, m)), np.zeros((n, m, m))
            c_loss[at], c_g[at], c_h[at] = sums[:, 0], sums[:, 1:1 + m], \
                sums[:, 1 + m:].reshape(-1, m, m)
            # The start's sums: the iterate's.
            first = active & ~started
            loss[first], g[first], h[first] = c_loss[first], c_g[first], c_h[first]
            separated[first] = loss[first] * SEPARATED
            started |= first
            tried = active & ~first
            # Run off, and L flat to 2^-40 along the doubled step tried: its limit.
            flat = tried & running & (np.abs(loss - c_loss) <= NEARLY_SEPARATED * loss)
            warn(flat, _NEARLY_SEPARATED)
            finish(flat, theta + step)
            tried &= ~flat
            running[tried] = False
            # A step longer than Newton's must lower L by more than Newton's step would
            # if L were its quadratic model (twice Newton's step gains nothing there).
            # In the quadratic region (a step below 1e-4 relative) full steps are taken.
            better = c_loss <= loss - np.where(lam > 1.0, gain, 0.0)
            quadratic = (lam <= 1.0) & (size <= 1e-4 * scale)
            refused = tried & ~(better | quadratic)
            lam[refused] = np.where(lam[refused] <= 1.0, 0.5 * lam[refused], 1.0)
            stuck = refused & (lam < 1e-12)  # no descent left: optimal to rounding
            finish(stuck, theta)
            taken = tried & ~refused
            # Newton steps that keep their size (or grow) and are taken whole: the
            # parameters run off (scores that separate the classes, or nearly), each
            # step lowering L by about a factor e (or its excess over its limit). The
            # next step is tried twice as long, so the stopping rules are reached in a
            # few passes, not ~28; one that does not gain enough falls back to Newton's.
            runs = (c_loss < loss) & (lam >= grow) & (size >= 0.9 * last_size)
            grow[taken] = np.where(runs[taken], 2.0 * lam[taken], 1.0)
            last_size[taken] = size[taken]
            # Long steps that no longer lower the loss: it nears a limit above 0 as the
            # parameters run off (labels of both classes at some scores only). Stopped
            # here, where the loss's decrease crosses a bound far above its rounding,
            # the fit ends after the same passes whatever the order of the sums; run
            # on, it would end where rounding stops the descent, on each engine elsewhere.
            limit = taken & (size > 1e-4 * scale) & (loss - c_loss <= NEARLY_SEPARATED * loss)
            warn(limit, _NEARLY_SEPARATED)
            finish(limit, point)
            taken &= ~limit
            theta[taken], loss[taken], g[taken], h[taken] = \
                point[taken], c_loss[taken], c_g[taken], c_h[taken]
            steps[taken] += 1
            # From each new iterate (the start's or a step's): the next step, or a stop.
            new = first | taken
            over = new & (steps >= max_iter)
            # A warning, not a log record: the core imports no logging set-up (only
            # the core and the errors), and a caller sees it where the fit ran.
            warn(over, f"no convergence in {max_iter} Newton passes (scores that separate "
                       "the classes have no finite optimum); the last step's parameters "
                       "are used")
            finish(over, theta)
            off = new & ~over & (loss <= separated)
            warn(off, "the scores separate the classes (the loss fell below 2^-40 of its "
                      "start, and would fall on towards 0: there is no finite optimum); "
                      "the last step's parameters are used")
            finish(off, theta)
            new &= ~(over | off)
            if new.any():
                # Least squares: the minimum-norm step where H is singular, singular
                # values cut below lstsq's (rcond None: m eps of the largest).
                cut = m * np.finfo(np.float64).eps
                step[new] = -(np.linalg.pinv(h[new], rtol=cut) @ g[new][..., None])[..., 0]
                size[new] = np.abs(step[new]).sum(axis=1)
                scale[new] = 1.0 + np.abs(theta[new]).sum(axis=1)
            # The error left is size^2: the rounding of the sums.
            converged = new & (size <= 1e-10 * scale)
            finish(converged, theta + step)
            # Run off, then a step 10^4 times shorter: the direction the parameters
            # ran along no longer moves L in floating point (its limit).
            short = new & ~converged & (grow > 1.0) & (size < 1e-4 * last_size)
            warn(short, _NEARLY_SEPARATED)
            finish(short, theta + step)
            new &= ~(converged | short)
            gain[new] = -(g[new] * step[new]).sum(axis=1) / 2.0
            lam[new] = grow[new]
            running[new] = grow[new] > 1.0
            point[active] = theta[active] + lam[active, None] * step[active]
            if not active.any():
                return solved


_NEARLY_SEPARATED = ("the scores nearly separate the classes (the loss approaches its "
                     "infimum as the parameters grow: there is no finite optimum); the "
                     "last step's parameters are used")


