"""Several fits over one set of ranges, their passes shared: one pass serves them all.

A one-vs-rest multiclass fit runs the same binary method (isotonic,
sigmoid, histogram) once per class, each over its own ordered score ranges
(:data:`~distcal.core.ranges.MapRanges`). On a cluster the ranges of all
classes live in one range-partitioned table (partitioned on (class, score)),
and every pass over it costs a job. :func:`run_in_lockstep` runs the K fits
unchanged, each in its own thread; whenever every fit still running waits
for a pass, one combined pass runs the K range functions together
(``map_all``) and hands each fit its own results. K fits then cost as many
passes as the longest single fit (one for isotonic, three for quantile
histograms), not K times that. The fits only do numpy between passes; the
passes run in the calling thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .distinct import DistinctTable
from .ranges import MapRanges

__all__ = ["run_in_lockstep", "MapAll"]

T = TypeVar("T")

# {key: range function} -> {key: that function's results over the key's ranges, in order}
MapAll = Callable[[dict[Any, Callable[[DistinctTable], Any]]], dict[Any, list[Any]]]


def run_in_lockstep(jobs: dict[Any, Callable[[MapRanges], T]], map_all: MapAll) -> dict[Any, T]:
    """Run ``jobs[key](map_ranges_of_key)`` for every key, sharing the passes.

    Parameters
    ----------
    jobs : dict
        key -> a function of a map over that key's ordered ranges (e.g.
        ``lambda m: fit_isotonic(m)``).
    map_all : callable
        One pass over all ranges: ``{key: fn}`` -> ``{key: [fn(range) for
        the key's non-empty ranges in ascending order]}``.

    Returns
    -------
    dict
        key -> the job's result. The first job (in key order) that raised
        has its exception re-raised here, after all jobs stopped.

    Examples
    --------
    >>> import numpy as np
    >>> from distcal.core.distinct import pool_ties
    >>> tables = {0: [pool_ties(np.array([1.0]), np.array([1.0]))],
    ...           1: [pool_ties(np.array([2.0, 3.0]), np.array([0.0, 1.0]))]}
    >>> def map_all(fns):
    ...     return {k: [fn(t) for t in tables[k]] for k, fn in fns.items()}
    >>> run_in_lockstep({k: lambda m: sum(m(len)) for k in tables}, map_all)
    {0: 1, 1: 2}
    """
    cond = threading.Condition()
    pending: dict[Any, Callable[[DistinctTable], Any]] = {}
    answers: dict[Any, list[Any]] = {}
    running = set(jobs)
    results: dict[Any, Any] = {}
    errors: dict[Any, BaseException] = {}
    failed = threading.Event()

    def mapper(key: Any) -> MapRanges:
        def map_ranges(fn: Callable[[DistinctTable], Any]) -> list[Any]:
            with cond:
                if failed.is_set():
                    raise _Abandoned()
                pending[key] = fn
                cond.notify_all()
                while key not in answers and not failed.is_set():
                    cond.wait()
                if key not in answers:
                    raise _Abandoned()
                return answers.pop(key)
        return map_ranges

    def run(key: Any, job: Callable[[MapRanges], Any]) -> None:
        try:
            out = job(mapper(key))
            with cond:
                results[key] = out
        except _Abandoned:
            pass
        except BaseException as exc:  # re-raised by the caller below
            with cond:
                errors[key] = exc
                failed.set()
        finally:
            with cond:
                running.discard(key)
                cond.notify_all()

    threads = [threading.Thread(target=run, args=(k, j), daemon=True,
                                name=f"distcal-lockstep-{k}") for k, j in jobs.items()]
    for t in threads:
        t.start()
    try:
        while True:
            with cond:
                # Every running job waits for a pass (or all are done / one failed).
                while running and not failed.is_set() and set(pending) != running:
                    cond.wait()
                if not running or failed.is_set():
                    break
                batch = dict(pending)
                pending.clear()
            try:
                out = map_all(batch)
            except BaseException:
                with cond:
                    failed.set()
                    cond.notify_all()
                raise
            with cond:
                answers.update({k: out.get(k, []) for k in batch})
                cond.notify_all()
    finally:
        with cond:
            if failed.is_set():
                cond.notify_all()
        for t in threads:
            t.join()
    if errors:
        raise errors[min(errors, key=list(jobs).index)]
    return {k: results[k] for k in jobs}


class _Abandoned(Exception):
    """Another job failed: this one stops at its next pass."""
