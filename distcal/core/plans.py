"""Methods as plans: sequences of passes that many keyed problems advance together.

Every method of this package needs only sums (or small summaries) over the
ordered score ranges of its distinct-score table, pass after pass: isotonic
regression one pass, Platt's sigmoid a few Newton passes, histogram binning
two or three, temperature scaling one pass over the rows per Newton step.
A method is written once, as a *plan*: a generator that yields the function
to apply to each range (or row part) and receives the list of its results,
in ascending score order::

    def mean_plan():
        parts = yield lambda t: (t.positives.sum(), t.weight.sum())
        return sum(p for p, _ in parts) / sum(w for _, w in parts)

:func:`run_plan` drives one plan over one map (a binary fit).
:func:`run_plans` drives one plan per key over a keyed map, all keys in
lock step: each pass applies every key's current function to that key's
part of every range, in one job over the data, so a fit of many keys costs
the passes of its slowest key, not their sum, and no threads are needed.
What a pass returns to the driver is each key's small result, never a
key's table.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Generator, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from .keyed import Key, KeyedTable

__all__ = ["Plan", "run_plan", "run_plans", "KeyFailed", "KeyCounts", "Split", "split_keyed"]

R = TypeVar("R")
Request = Callable[[Any], Any]
Plan = Generator[Request, list[Any], R]
MapParts = Callable[[Callable[[Any], Any]], list[Any]]
#: A part's (key, data) pairs, only the wanted keys' (None: every key's).
Split = Callable[[Any, Container[Key] | None], Iterable[tuple[Key, Any]]]


def run_plan(plan: Generator[Any, list[Any], R], map_parts: Callable[[Any], list[Any]]) -> R:
    """Run one plan: each request it yields (a function to map over the parts) goes to
    ``map_parts``, whose results are sent back."""
    try:
        request = next(plan)
        while True:
            request = plan.send(map_parts(request))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class KeyFailed(Exception):
    """A key's plan raised ``error`` (the caller names the key in its message)."""

    def __init__(self, key: Key, error: Exception):
        super().__init__(key, error)
        self.key, self.error = key, error


@dataclass
class KeyCounts:
    """Rows, weight and whether all labels are 0/1, of one key over all ranges."""

    n_rows: int = 0
    weight: float = 0.0
    binary: bool = True


def split_keyed(part: KeyedTable, wanted: Container[Key] | None = None
                ) -> Iterable[tuple[Key, Any]]:
    """The keys of one range and their distinct-score tables (only the ``wanted`` keys':
    a late pass of a few keys does not build the others' tables)."""
    for i, key in enumerate(part.keys):
        if wanted is None or key in wanted:
            yield key, part.key_table(i)


class _Pass:
    """The function a pass applies to one part (shipped to the workers as is)."""

    def __init__(self, requests: dict[Key, Request] | None, first: Request | None,
                 split: Split, count: bool):
        self.requests, self.first, self.split, self.count = requests, first, split, count

    def __call__(self, part: Any) -> dict[Key, Any]:
        results: dict[Key, Any] = {}
        # Requests with a ``batch_id`` (a vectorised pass, e.g. a Newton step's sums) run
        # as one call of their class's ``run_batch`` per batch, over all their keys' data.
        batches: dict[Any, tuple[list[Key], list[Any], list[Any]]] = {}
        subs: dict[Key, Any] = {}
        for key, sub in self.split(part, self.requests):
            fn = self.requests[key] if self.requests is not None else self.first
            assert fn is not None  # the first pass has ``first``, later ones ``requests``
            subs[key] = sub
            batch_id = getattr(fn, "batch_id", None)
            if batch_id is None:
                results[key] = fn(sub)
            else:
                keys, fns, data = batches.setdefault((type(fn), batch_id), ([], [], []))
                keys.append(key)
                fns.append(fn)
                data.append(sub)
        for keys, fns, data in batches.values():
            results.update(zip(keys, type(fns[0]).run_batch(fns, data)))
        if not self.count:
            return results
        return {key: (res, subs[key].n_rows, subs[key].weight_total, bool(subs[key].binary))
                for key, res in results.items()}


def run_plans(make_plan: Callable[[Key | None], Plan[Any]], map_parts: MapParts,
              split: Split = split_keyed,
              keep: Callable[[Key, KeyCounts], bool] | None = None,
              counts: dict[Key, KeyCounts] | None = None) -> dict[Key, Any]:
    """Run ``make_plan(key)`` for every key found in the parts, all keys in lock step.

    ``map_parts`` maps a function over the parts (an engine's ranges, or
    row parts) and returns its results in order; ``split`` lists a part's
    (key, data) pairs, of the keys it is given (:data:`Split`). The first
    function a plan yields must not depend on the key (``make_plan(None)``
    gives it): it is applied to every key in the first pass, which also
    counts each key's rows and weight (into ``counts``, when given); keys
    for which ``keep(key, counts)`` is false are dropped after it (a
    segment too small to fit). Returns each kept key's plan result; a plan
    that raises stops the fit with :class:`KeyFailed`.
    """
    probe = make_plan(None)
    first = next(probe)
    probe.close()
    results: dict[Key, list[Any]] = {}
    totals = counts if counts is not None else {}
    for out in map_parts(_Pass(None, first, split, True)):
        for key, (res, n, w, binary) in out.items():
            results.setdefault(key, []).append(res)
            c = totals.setdefault(key, KeyCounts())
            c.n_rows += n
            c.weight += w
            c.binary &= binary
    plans: dict[Key, Plan[Any]] = {}
    pending: dict[Key, Request] = {}
    done: dict[Key, Any] = {}
    for key in results:
        if keep is not None and not keep(key, totals[key]):
            continue
        plan = make_plan(key)
        next(plan)
        _advance(key, plan, results[key], plans, pending, done)
    while pending:
        requests = dict(pending)
        pending.clear()
        gathered: dict[Key, list[Any]] = {key: [] for key in requests}
        for out in map_parts(_Pass(requests, None, split, False)):
            for key, res in out.items():
                gathered[key].append(res)
        for key in requests:
            _advance(key, plans[key], gathered[key], plans, pending, done)
    return done


def _advance(key: Key, plan: Plan[Any], parts: list[Any], plans: dict[Key, Plan[Any]],
             pending: dict[Key, Request], done: dict[Key, Any]) -> None:
    try:
        pending[key] = plan.send(parts)
        plans[key] = plan
    except StopIteration as stop:
        done[key] = stop.value
        plans.pop(key, None)
    except (ValueError, ArithmeticError) as exc:
        raise KeyFailed(key, exc) from exc

