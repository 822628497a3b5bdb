"""Smooth ECE (Blasiok & Nakkiran, 2023) from mergeable grid sums.

This reproduces ``relplot.smECE`` (relplot 1.0.3, the version on PyPI and
the head of apple/ml-calibration) exactly, with row weights in place of
row counts (unit weights give relplot's number).

relplot's definition, for predictions f_i in [0, 1], labels y_i and
residuals r_i = f_i - y_i:

1. **Grid.** For a bandwidth sigma, a grid of G(sigma) = max(2000,
   round(20 / sigma)) // 2 + 1 points x_j = j / (G - 1). Each row's
   residual (and, for the density, a 1) is split linearly between its two
   neighbouring grid points: with k = min(floor(f (G - 1)), G - 2) and
   frac = f (G - 1) - k, grid point k receives (1 - frac) r and point k + 1
   receives frac r (``smooth_round_to_grid``).
2. **Reflected Gaussian kernel.** The grid vector v is extended by its
   mirror images at both ends, [flip(v)[:-1], v, flip(v)[1:]], and
   convolved ("valid") with the Gaussian exp(-(u - 1/2)^2 / (2 sigma^2)) /
   (sqrt(2 pi) sigma) sampled at u = linspace(0, 1, G); the G central values
   are kept (``ReflectedGaussianKernel.convolve``). This gives R(x) for the
   residuals and D(x) for the ones (the density).
3. **Evaluation.** R and D are linearly interpolated at the T = max(200,
   round(10 / sigma)) points t = linspace(0, 1, T), and with
   D'(t) = D(t) + 1e-4 w_mean

       smECE_sigma = sum_t |R(t) / D'(t)| D'(t) / sum_t D'(t).

   relplot adds 1e-4 to a density of row counts; here the density is of
   weights, so the 1e-4 is in units of the mean row weight w_mean (the
   total weight over the rows of positive weight). Unit weights give
   relplot's number, and the value does not change when every weight is
   multiplied by one factor, as every other metric: a fixed 1e-4 would
   outweigh weights normalised to sum to 1 over a million rows.

4. **Bandwidth.** sigma* is the fixed point smECE_sigma = sigma, found as
   relplot's ``search_param``: if sigma = 1 has smECE_1 > 1 it is taken;
   otherwise 10 bisection steps on [0, 1] keep the bracket [end, start]
   with ``alpha < 0.001 or alpha < smECE_alpha`` true at ``end`` and false
   at ``start``, and sigma* = start (so sigma* is a multiple of 2^-10 and
   smECE = smECE_{sigma*}). relplot's tolerance is therefore the bracket
   width 2^-10 in sigma; the value itself is reproduced to rounding
   (the same grid sums, added in another order), and sigma* exactly unless
   smECE_alpha - alpha is within rounding of 0 at a bisection point.

**Why it is mergeable.** Step 1 is a sum over rows, so over distinct
probabilities p with weight W_p, positives Y_p and N_p rows the grid vectors are

    mass_j  = sum_p W_p          * share_j(p)
    resid_j = sum_p (W_p p - Y_p) * share_j(p)

with a third vector holding the rows' count sum_p N_p in its first cell (only
the total is read, for w_mean); the vectors of disjoint ranges add up
(:func:`grid_partials`, :func:`combine_grid_partials`). Steps 2-4 only read
these vectors on the driver. The search needs G = 1001 for every sigma >= 0.01;
a finer grid is needed only when smECE < 0.01 and is asked for then
(:func:`smooth_ece` maps over the ranges once per grid size it needs; at
most :data:`SEARCH_GRID_SIZES` has 10 sizes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .distinct import DistinctTable
from .ranges import MapRanges, as_map_ranges

__all__ = ["grid_size", "SEARCH_GRID_SIZES", "grid_partials", "combine_grid_partials",
           "smooth_ece_sigma", "search_bandwidth", "smooth_ece", "smooth_curve"]

SEARCH_EPS = 0.001  # relplot's eps: bandwidths below it always pass the predicate
SEARCH_REFINE = 10  # bisection steps
MESH_POINTS = 200  # relplot.config.smECE_mesh_pts
DENSITY_EPS = 1e-4  # added to the density in BaseKernelMixin.smooth


def grid_size(sigma: float) -> int:
    """Grid points relplot uses at bandwidth ``sigma``."""
    return max(2000, round(20 / sigma)) // 2 + 1


def _search_grid_sizes() -> tuple[int, ...]:
    sizes = {grid_size(1.0)}
    for k in range(1, 1 << SEARCH_REFINE):  # bisection midpoints are k / 2^10
        sigma = k / (1 << SEARCH_REFINE)
        if sigma >= SEARCH_EPS:
            sizes.add(grid_size(sigma))
    return tuple(sorted(sizes))


#: Every grid size the bandwidth search can ask for (1001 for sigma >= 0.01).
SEARCH_GRID_SIZES = _search_grid_sizes()
DEFAULT_GRID = grid_size(1.0)


def grid_partials(t: DistinctTable, sizes: tuple[int, ...] = (DEFAULT_GRID,)
                  ) -> dict[int, np.ndarray]:
    """Per grid size G, the (3, G) array [mass, resid, rows] of one range (step 1; rows:
    the range's row count in the first cell, zeros after)."""
    p = t.score
    resid = t.weight * p - t.positives  # sum of w (f - y) over the rows at p
    out = {}
    for g in sizes:
        x = p * (g - 1)
        k = x.astype(np.int64).clip(0, g - 2)
        frac = x - k
        arr = np.zeros((3, g))
        for row, v in ((0, t.weight), (1, resid)):
            arr[row] = (np.bincount(k, weights=(1 - frac) * v, minlength=g)[:g]
                        + np.bincount(k + 1, weights=frac * v, minlength=g)[:g])
        arr[2, 0] = float(t.count.sum())
        out[g] = arr
    return out


def combine_grid_partials(parts: list[dict[int, np.ndarray]]) -> dict[int, np.ndarray]:
    """Add the ranges' grid vectors (any order)."""
    out: dict[int, np.ndarray] = {}
    for q in parts:
        for g, arr in q.items():
            out[g] = arr.copy() if g not in out else out[g] + arr
    return out


def _kernel(sigma: float, g: int) -> np.ndarray:
    u = np.linspace(0, 1, g)
    res = np.exp(-(u - 0.5) * (u - 0.5) / (2 * sigma ** 2))
    res /= np.sqrt(2 * np.pi) * sigma
    return res


def _reflect_convolve(values: np.ndarray, ker: np.ndarray) -> np.ndarray:
    g = values.shape[0]
    ext = np.concatenate([np.flip(values)[:-1], values, np.flip(values)[1:]])
    return np.convolve(ext, ker, "valid")[g // 2: g // 2 + g]


def _interpolate(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    n = y.shape[0]
    size = 1 / (n - 1)
    inds = (t * (n - 1)).astype(int).clip(0, n - 2)
    residual = (t - inds * size) / size
    out: np.ndarray = y[inds] * (1 - residual) + y[inds + 1] * residual
    return out


def _density_eps(grid: np.ndarray) -> float:
    """relplot's 1e-4 in units of the mean row weight (step 3)."""
    rows = float(grid[2].sum())
    return DENSITY_EPS * float(grid[0].sum()) / rows if rows > 0 else DENSITY_EPS


def _smoothed(grid: np.ndarray, sigma: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R(t) / D'(t), D'(t)) as relplot's ``ReflectedGaussianKernel.smooth``."""
    ker = _kernel(sigma, grid.shape[1])
    ys = _interpolate(t, _reflect_convolve(grid[1], ker))
    dens = _interpolate(t, _reflect_convolve(grid[0], ker)) + _density_eps(grid)
    return ys / dens, dens


def smooth_ece_sigma(grid: np.ndarray, sigma: float) -> float:
    """smECE at bandwidth ``sigma`` from the (3, grid_size(sigma)) grid sums."""
    if grid.shape[1] != grid_size(sigma):
        raise ValueError(f"bandwidth {sigma} needs a grid of {grid_size(sigma)} points")
    t = np.linspace(0, 1, max(round(10 / sigma), MESH_POINTS))
    rs, dens = _smoothed(grid, sigma, t)
    return float(np.sum(np.abs(rs) * dens) / np.sum(dens))


def search_bandwidth(ece_at: Callable[[float], float]) -> float:
    """relplot's ``search_param`` for the fixed point smECE_sigma = sigma."""
    def ok(alpha: float) -> bool:
        return alpha < SEARCH_EPS or alpha < ece_at(alpha)

    if ok(1.0):
        return 1.0
    start, end = 1.0, 0.0
    for _ in range(SEARCH_REFINE):
        mid = (start + end) / 2
        if ok(mid):
            end = mid
        else:
            start = mid
    return start


def smooth_ece(data: DistinctTable | MapRanges, *, grids: dict[int, np.ndarray] | None = None
               ) -> dict[str, Any]:
    """smECE and its bandwidth over a distinct table or ordered ranges of one.

    ``grids`` may hold combined grid sums already gathered (e.g. the
    :data:`DEFAULT_GRID` sums from the evaluation's single pass); any other
    size the search needs costs one more map over the ranges. Returns
    ``{"smece": ..., "smece_sigma": ..., "grid": (3, G) array at sigma*}``.
    """
    map_ranges = as_map_ranges(data)
    have = dict(grids or {})

    def get_grid(g: int) -> np.ndarray:
        if g not in have:
            parts = map_ranges(lambda t: grid_partials(t, (g,)))
            have.update(combine_grid_partials(parts))
        if g not in have:  # no rows
            raise ValueError("smooth ECE of no rows")
        return have[g]

    @functools.cache  # each bandwidth's value once: the search reads sigma* again
    def ece_at(sigma: float) -> float:
        return smooth_ece_sigma(get_grid(grid_size(sigma)), sigma)

    sigma = search_bandwidth(ece_at)
    return {"smece": ece_at(sigma), "smece_sigma": sigma, "grid": have[grid_size(sigma)]}


def smooth_curve(grid: np.ndarray, sigma: float, n_points: int = 200) -> dict[str, np.ndarray]:
    """The smoothed reliability curve at ``sigma`` (relplot's diagram line).

    ``mu(t) = t - R(t) / D'(t)``: the kernel-smoothed positive rate near
    t, with the smoothed weight density D(t) (normalised to integrate to 1
    over [0, 1], approximately). ``grid`` is the (3, grid_size(sigma)) sums.
    """
    t = np.linspace(0, 1, n_points)
    rs, dens = _smoothed(grid, sigma, t)
    total = float(grid[0].sum())
    density = (dens - _density_eps(grid)) / total if total > 0 else dens * 0
    return {"t": t, "mu": np.clip(t - rs, 0.0, 1.0), "density": density}
