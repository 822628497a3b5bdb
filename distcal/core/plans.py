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
key's table. A plan may hand a sub-problem over (``result = yield
problem``, a :class:`Joint`): the same sub-problems of all keys are then
solved by one plan over all of them, in arrays (Newton's steps of many
keys' logistic regressions: a few array operations a pass, not a Python
call per key).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .distinct import DistinctTable
from .keyed import Key, KeyedTable

__all__ = ["Plan", "run_plan", "run_plans", "KeyFailed", "KeyCounts", "Split", "KeyBatch",
           "KeyResults", "KeySums", "Joint", "JointPlan", "sum_parts"]

R = TypeVar("R")
Request = Callable[[Any], Any]
Plan = Generator[Request, list[Any], R]
MapParts = Callable[[Callable[[Any], Any]], list[Any]]
#: A part's (key, data) pairs, only the wanted keys' (None: every key's).
Split = Callable[[Any, Container[Key] | None], Iterable[tuple[Key, Any]]]


def run_plan(plan: Generator[Any, list[Any], R], map_parts: Callable[[Any], list[Any]]) -> R:
    """Run one plan: each request it yields (a function to map over the parts) goes to
    ``map_parts``, whose results are sent back (a :class:`Joint` is solved alone)."""
    try:
        request = next(plan)
        while True:
            if isinstance(request, Joint):
                request = plan.send(_solve_alone(request, map_parts))
            else:
                request = plan.send(map_parts(request))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class Joint:
    """A sub-problem that a key's plan hands over (``result = yield problem``), to be
    solved together with the same sub-problems of the other keys.

    The problems of one class and ``joint_id`` handed over in one pass are
    solved by one plan over all their keys, ``cls.solve(problems)``
    (:data:`JointPlan`): it yields, pass after pass, each running key's
    request and the results of the keys it has solved (each sent back to
    its key's plan at once, which goes on in the same pass), receives each
    requesting key's results of the parts, and returns the last keys'
    results. A key's problem raising ends the fit with :class:`KeyFailed`.
    """

    joint_id: Any = ()

    @classmethod
    def solve(cls, problems: dict[Key, Joint]) -> JointPlan:
        raise NotImplementedError


#: A plan over many keys' :class:`Joint` problems: yields (requests, solved), receives
#: each requesting key's results of the parts, returns the keys solved last.
JointPlan = Generator[tuple[dict[Key, Request], dict[Key, Any]], dict[Key, list[Any]],
                      dict[Key, Any]]


def sum_parts(keys: list[Key], results: dict[Key, list[Any]]) -> np.ndarray:
    """Row i: the sum of ``keys[i]``'s results of the parts (arrays of one length), added
    in the parts' order (as ``np.sum(parts, axis=0)``), for all keys at once."""
    lists = [results[key] for key in keys]
    sizes = np.array([len(parts) for parts in lists])
    assert sizes.all(), "every requesting key has rows in some part"
    rows = np.array([row for parts in lists for row in parts], dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # inf: each plan checks its sums
        out: np.ndarray = np.add.reduceat(rows, np.cumsum(sizes) - sizes, axis=0)
    return out


def _solve_alone(problem: Joint, map_parts: Callable[[Any], list[Any]]) -> Any:
    """``problem`` solved as the one key of its :class:`Joint` plan (a plan run alone)."""
    solving = type(problem).solve({_ALONE: problem})
    try:
        requests, solved = next(solving)
        while _ALONE not in solved:
            requests, solved = solving.send({key: map_parts(fn) for key, fn in requests.items()})
    except StopIteration as stop:
        solved = stop.value
    except KeyFailed as failed:
        raise failed.error from None
    return solved[_ALONE]


_ALONE: Key = (None, None)  # the one key of a plan run alone


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


class KeyBatch:
    """A request that runs for many keys at once (what a pass ships once for all of them).

    The requests of one class and ``batch_id`` run together in a pass:
    ``pack(requests)`` makes one object of them, whose
    ``run(which, part)`` returns, for the keys of the
    :class:`~distcal.core.keyed.KeyedTable` ``part`` (none without rows),
    a sequence whose item k is the result of request ``which[k]`` on
    ``part``'s key k. Thousands of keys then cost one vectorised call per
    range, not a Python call each, and their requests and results travel
    as a few arrays (:class:`KeyResults`), not as an object per key.
    A request over parts of the rows (not score ranges) is packed alike
    and has ``run_rows(which, codes, rows)`` instead: item k of its result
    is request ``which[k]``'s over the rows whose ``codes`` are k (``codes``
    None: every row is key 0's; ``which[k]`` -1: key k is not wanted).
    """

    batch_id: Any = ()
    #: About how many bytes this request's results bring to the driver, over all
    #: ranges (0: a few numbers). :func:`run_plans` with a ``budget`` runs a pass
    #: in waves of keys whose requests add up to at most that many.
    driver_bytes: int = 0

    @classmethod
    def pack(cls, requests: list[Any]) -> Any:
        """The requests as one object with ``run``; by default the first request (one
        that carries nothing per key: a pass's first function)."""
        return requests[0]

    def __call__(self, t: DistinctTable) -> Any:
        return self.pack([self]).run(np.zeros(1, np.intp), KeyedTable.single(t))[0]


class KeyResults:
    """A batch's results, key after key, as a few flat arrays (:class:`KeyBatch`).

    Item i is a tuple with, for each column, ``column[starts[i]:starts[i + 1]]``
    (a ragged column: its ``starts``) or ``column[i]`` (``starts`` None: one
    value per key). Pickled, these are a few arrays: 10^4 keys' small
    arrays pickled one by one cost more than computing them.
    """

    def __init__(self, columns: list[np.ndarray], starts: list[np.ndarray | None]):
        self.columns, self.starts = columns, starts

    def __len__(self) -> int:
        s = self.starts[0]
        return int(self.columns[0].shape[0] if s is None else s.shape[0] - 1)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return tuple(c[i] if s is None else c[s[i]:s[i + 1]]
                     for c, s in zip(self.columns, self.starts))

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        # Column by column (a pass gathers 10^5-10^6 items: one tuple each, built by zip).
        return zip(*(list(c) if s is None else
                     [c[a:b] for a, b in zip(s[:-1].tolist(), s[1:].tolist())]
                     for c, s in zip(self.columns, self.starts)))


class KeySums(KeyBatch):
    """A request whose result is a few sums over a key's rows of a range.

    A subclass gives :meth:`numbers` (this request's parameters) and
    :meth:`columns` (the terms summed, one array per sum, over the rows of a
    table that may hold many keys' rows). A batch (:class:`KeyBatch`) makes
    one numpy pass over all its keys' rows of a range, then each key's sums
    by ``np.add.reduceat`` (the columns listed in ``maxima`` take
    ``np.maximum.reduceat``). Its order of addition is not ``np.sum``'s: a
    sum may differ from it in the last bits, the same on every run and
    whether a key runs alone or among others.
    """

    maxima: tuple[int, ...] = ()

    def numbers(self) -> tuple[float, ...]:
        """This request's parameters (the same count for every request of a batch)."""
        return ()

    def columns(self, t: DistinctTable, number: Callable[[int], float | np.ndarray]
                ) -> list[np.ndarray]:
        """The terms of each sum, one per row of ``t`` (rows of many keys);
        ``number(j)``: parameter j of each row's key (a float when all share it)."""
        raise NotImplementedError

    @classmethod
    def pack(cls, requests: list[KeySums]) -> _KeySumsBatch:
        """Requests of one batch as one object: an array of their numbers, one row each."""
        numbers = np.array([r.numbers() for r in requests], dtype=np.float64)
        return _KeySumsBatch(requests[0], numbers.reshape(len(requests), -1))


class _KeySumsBatch:
    """Many :class:`KeySums` requests of one batch (what a pass ships for them)."""

    def __init__(self, first: KeySums, numbers: np.ndarray):
        self.first, self.numbers = first, numbers

    def run(self, which: np.ndarray, part: KeyedTable) -> np.ndarray:
        """Row k: the sums of request ``which[k]`` over key k's rows of ``part``.

        The columns are computed a chunk of about ``_CHUNK_ROWS`` rows at a
        time, so that their dozens of temporary arrays stay in the CPU's
        cache instead of each being a fresh array of the range's length
        (a Newton pass over 10^7 rows: ~3x faster). Each key's rows are
        summed in blocks of ``_CHUNK_ROWS`` counted from its own first row,
        then the blocks' sums in order: a key's sums do not depend on the
        other keys of the range.
        """
        sizes = np.diff(part.starts)
        assert sizes.all(), "every key of a range has rows in it"
        numbers = self.numbers[which]
        n_keys = len(sizes)
        # The blocks: each key's rows from its first, _CHUNK_ROWS at a time.
        per_key = -(-sizes // _CHUNK_ROWS)
        first_block = np.concatenate(([0], np.cumsum(per_key)))
        block_key = np.repeat(np.arange(n_keys), per_key)
        block_start = part.starts[:-1][block_key] + _CHUNK_ROWS * (
            np.arange(first_block[-1]) - first_block[:-1][block_key])
        block_end = np.append(block_start[1:], part.starts[-1])
        # The chunks: runs of whole blocks, cut where a multiple of _CHUNK_ROWS is passed.
        cuts = np.unique(np.append(np.searchsorted(
            block_start, np.arange(0, int(part.starts[-1]), _CHUNK_ROWS)), first_block[-1]))
        maxima = self.first.maxima
        # A parameter that all keys share is a float, else an array of each row's key's.
        shared = [float(v[0]) if n_keys and np.all(v == v[0]) else None for v in numbers.T]

        def numbers_of(b0: int, b1: int) -> Callable[[int], float | np.ndarray]:
            """``number`` of the rows of blocks b0:b1."""
            keys, rows = block_key[b0:b1], block_end[b0:b1] - block_start[b0:b1]

            def number(j: int) -> float | np.ndarray:
                value = shared[j]
                return np.repeat(numbers[keys, j], rows) if value is None else value

            return number

        partial: np.ndarray | None = None
        for b0, b1 in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            a = int(block_start[b0])
            cols = self.first.columns(part.table.take(slice(a, int(block_end[b1 - 1]))),
                                      numbers_of(b0, b1))
            if partial is None:
                partial = np.empty((first_block[-1], len(cols)))
            with np.errstate(over="ignore", invalid="ignore"):  # inf: each plan checks
                for j, col in enumerate(cols):
                    reduce = np.maximum if j in maxima else np.add
                    partial[b0:b1, j] = reduce.reduceat(col, block_start[b0:b1] - a)
        if partial is None:  # no key: the columns' count from the empty table
            return np.empty((0, len(self.first.columns(part.table, lambda j: 0.0))))
        out = np.empty((n_keys, partial.shape[1]))
        with np.errstate(over="ignore", invalid="ignore"):
            for j in range(partial.shape[1]):
                reduce = np.maximum if j in maxima else np.add
                out[:, j] = reduce.reduceat(partial[:, j], first_block[:-1])
        return out


#: Rows of a range whose per-row terms :class:`_KeySumsBatch` computes at a time.
_CHUNK_ROWS = 1 << 15


class _Pass:
    """The function a pass applies to one part (shipped to the workers as is).

    :class:`KeyBatch` requests (e.g. a Newton step's sums) are packed by
    their class and ``batch_id`` (``pack``: one object for all their keys)
    and run once per part for all their keys there (``run``); the others
    run key by key. The first pass's function
    is one request for every key, batched in the same way when it can be.
    ``split`` None: the parts are score ranges (keyed tables); otherwise
    parts of the rows, whose keys ``split`` lists (:data:`Split`).
    """

    def __init__(self, requests: dict[Key, Request] | None, first: Request | None,
                 split: Split | None):
        self.first, self.split = first, split
        self.single: dict[Key, Request] = {}
        self.batches: list[Any] = []
        # Every requested key: (its batch, its position in it), or (-1, 0): run singly.
        self.where: dict[Key, tuple[int, int]] | None = None
        # The first pass's one function, for every key: batched when it can be.
        self.first_at = (-1, 0)
        if requests is None:
            if isinstance(first, KeyBatch):
                self.batches.append(first.pack([first]))
                self.first_at = (0, 0)
            return
        self.where = {}
        groups: dict[Any, list[Key]] = {}
        for key, fn in requests.items():
            if isinstance(fn, KeyBatch):
                groups.setdefault((type(fn), fn.batch_id), []).append(key)
            else:
                self.single[key] = fn
                self.where[key] = (-1, 0)
        for b, keys in enumerate(groups.values()):
            fns = [requests[key] for key in keys]
            self.batches.append(fns[0].pack(fns))  # type: ignore[attr-defined]
            self.where.update((key, (b, i)) for i, key in enumerate(keys))

    def __call__(self, part: Any) -> PassResult:
        """(results of the keys run singly, [(keys, their results: item i is key i's)]
        of the batches, each key's (rows, weight, all labels 0/1) in the first pass)."""
        if self.split is None:
            return self._range(part)
        return self._rows(part)

    def _rows(self, part: Any) -> PassResult:
        """:meth:`__call__` of a part of the rows. The first pass runs ``first`` on each
        key's rows (``split``) and counts them; a later pass runs each batch once per
        grouping of the rows by key (``split.groups(part)``: [(keys, each row's key
        index)], the index None when every row is the one key's), on the rows as they lie
        (its requests are all batched)."""
        split = self.split
        assert split is not None
        if self.where is None:
            assert self.first is not None and not self.batches, "a first pass over rows counts"
            results: dict[Key, Any] = {}
            counted: dict[Key, tuple[int, float, bool]] = {}
            for key, sub in split(part, None):
                counted[key] = (sub.n_rows, sub.weight_total, bool(sub.binary))
                results[key] = self.first(sub)
            return results, [], counted
        assert not self.single, "a later pass over rows runs batched requests only"
        batched = []
        for keys, codes in split.groups(part):  # type: ignore[attr-defined]
            spots = [self.where.get(key, (-2, 0)) for key in keys]
            for b, batch in enumerate(self.batches):
                which = np.array([i if at == b else -1 for at, i in spots], dtype=np.intp)
                mine = np.flatnonzero(which >= 0)
                if mine.shape[0]:
                    out = batch.run_rows(which, codes, part)
                    batched.append(([keys[i] for i in mine.tolist()], out[mine]))
        return {}, batched, {}

    def _single(self, key: Key) -> Request:
        fn = self.first if self.where is None else self.single[key]
        assert fn is not None  # the first pass has ``first``, later ones requests
        return fn

    def _range(self, part: KeyedTable) -> PassResult:
        """:meth:`__call__` of a score range's keyed table: the keys of a batch run on
        their rows as they lie in the table (one index, no table per key)."""
        spots = [self.first_at if self.where is None else self.where.get(key, (-2, 0))
                 for key in part.keys]  # (-2, 0): not wanted
        counted: dict[Key, tuple[int, float, bool]] = {}
        if self.where is None:  # the first pass counts
            with np.errstate(over="ignore"):  # inf: the fit refuses such weights
                rows, weight = part.key_totals()
            counted = {key: (int(n), float(w), bool(b)) for key, n, w, b in
                       zip(part.keys, rows.tolist(), weight.tolist(), part.binary)}
        results = {key: self._single(key)(part.key_table(i))
                   for i, (key, (b, _)) in enumerate(zip(part.keys, spots)) if b == -1}
        batched = []
        for b, batch in enumerate(self.batches):
            mine = [i for i, spot in enumerate(spots) if spot[0] == b]
            if mine:
                sub = part if len(mine) == len(part.keys) else part.take(mine)
                which = np.array([spots[i][1] for i in mine], dtype=np.intp)
                batched.append((sub.keys, batch.run(which, sub)))
        return results, batched, counted


#: What a pass returns from one part (:meth:`_Pass.__call__`).
PassResult = tuple[dict[Key, Any], list[tuple[list[Key], Any]], dict[Key, tuple[int, float, bool]]]


def _gather(outs: list[PassResult], into: dict[Key, list[Any]]) -> None:
    """Each key's results of the parts, in the parts' order, appended to ``into[key]``."""
    for results, batched, _ in outs:
        for key, res in results.items():
            into.setdefault(key, []).append(res)
        for keys, rows in batched:
            for key, row in zip(keys, rows):
                into.setdefault(key, []).append(row)


def run_plans(make_plan: Callable[[Key | None], Plan[Any]], map_parts: MapParts,
              split: Split | None = None,
              keep: Callable[[Key, KeyCounts], bool] | None = None,
              counts: dict[Key, KeyCounts] | None = None,
              narrow: Callable[[set[Key]], None] | None = None,
              budget: int | None = None) -> dict[Key, Any]:
    """Run ``make_plan(key)`` for every key found in the parts, all keys in lock step.

    ``map_parts`` maps a function over the parts (an engine's ranges, or
    row parts) and returns its results in order; ``split``: None when the
    parts are score ranges (keyed tables), otherwise what lists a row
    part's (key, data) pairs, of the keys it is given (:data:`Split`),
    and groups its rows by key for batched requests. The first
    function a plan yields must not depend on the key (``make_plan(None)``
    gives it): it is applied to every key in the first pass, which also
    counts each key's rows and weight (into ``counts``, when given); keys
    for which ``keep(key, counts)`` is false are dropped after it (a
    segment too small to fit). Returns each kept key's plan result; a plan
    that raises stops the fit with :class:`KeyFailed`. ``narrow(keys)``
    tells the parts that later passes read only ``keys``: called when the
    keys still running hold at most a quarter of the rows last read (the
    big keys, the global one first, converge in a few passes; keys whose
    classes are separated run for tens), so a late pass reads their rows
    only, not every range whole. ``budget``: at most how many bytes of
    results (the requests' ``driver_bytes``, :class:`KeyBatch`) one job
    brings to the driver (the engine's ``result_bytes``); a pass whose
    requests announce more runs as several jobs, each over a wave of keys
    (a key alone may exceed it), so what the driver receives at once does
    not grow with the number of keys.
    """
    probe = make_plan(None)
    first = next(probe)
    probe.close()
    results: dict[Key, list[Any]] = {}
    totals = counts if counts is not None else {}
    outs = map_parts(_Pass(None, first, split))
    _gather(outs, results)
    for _, _, counted in outs:
        for key, (n, w, binary) in counted.items():
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
    # Each running Joint plan and its keys' requests of the coming pass.
    joints: list[tuple[JointPlan, dict[Key, Request]]] = []
    _start_joints(joints, plans, pending, done)
    held = sum(c.n_rows for c in totals.values())
    while pending or joints:
        singly = dict(pending)
        pending.clear()
        requests = dict(singly)
        for _, asked in joints:
            requests.update(asked)
        needed = sum(totals[key].n_rows for key in requests)
        if narrow is not None and needed <= held // 4:
            narrow(set(requests))
            held = needed
        gathered: dict[Key, list[Any]] = {key: [] for key in requests}
        for wave in _waves(requests, budget):
            _gather(map_parts(_Pass(wave, None, split)), gathered)
        for key in singly:
            _advance(key, plans[key], gathered[key], plans, pending, done)
        running = joints[:]
        joints.clear()
        for solving, asked in running:
            try:
                asked, solved = solving.send({key: gathered[key] for key in asked})
                joints.append((solving, asked))
            except StopIteration as stop:
                solved = stop.value
            for key, result in solved.items():
                _advance(key, plans[key], result, plans, pending, done)
        _start_joints(joints, plans, pending, done)
    return done


def _start_joints(joints: list[tuple[JointPlan, dict[Key, Request]]],
                  plans: dict[Key, Plan[Any]], pending: dict[Key, Request],
                  done: dict[Key, Any]) -> None:
    """The :class:`Joint` problems among the ``pending`` requests, solved by one plan per
    class and ``joint_id`` (added to ``joints``); keys solved at once go on."""
    while True:
        groups: dict[Any, dict[Key, Joint]] = {}
        for key, fn in pending.items():
            if isinstance(fn, Joint):
                groups.setdefault((type(fn), fn.joint_id), {})[key] = fn
        if not groups:
            return
        for (kind, _), problems in groups.items():
            for key in problems:
                del pending[key]
            solving = kind.solve(problems)
            try:
                asked, solved = next(solving)
                joints.append((solving, asked))
            except StopIteration as stop:
                solved = stop.value
            for key, result in solved.items():
                _advance(key, plans[key], result, plans, pending, done)


def _waves(requests: dict[Key, Request], budget: int | None) -> Iterator[dict[Key, Request]]:
    """The requests in key order, cut into waves of at most ``budget`` announced bytes."""
    if budget is None:
        yield requests
        return
    wave: dict[Key, Request] = {}
    size = 0
    for key, fn in requests.items():
        grows = getattr(fn, "driver_bytes", 0)
        if wave and size + grows > budget:
            yield wave
            wave, size = {}, 0
        wave[key] = fn
        size += grows
    yield wave


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

