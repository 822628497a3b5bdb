"""A/B in one process: the local fit from a Parquet path with the old and the new spill rule.

Usage: python bench/spill_ab.py PATH [--rounds R]

old: ``TableStore.add`` merged every pending table (a stable argsort of
their concatenation) before spilling the merge as one run; new (shipped):
tables of at least half the memory budget are already sorted runs and are
spilled as they are. Alternates old/new R times on the same file, prints
each time (with the load average) and the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import distcal  # noqa: E402
from distcal.core import store  # noqa: E402
from distcal.core.distinct import merge_tables  # noqa: E402

NEW_ADD = store.TableStore.add


def old_add(self, table):
    if not len(table):
        return
    self.binary &= table.binary
    self._pending.append(table)
    self._pending_rows += len(table)
    if self._pending_rows > self.memory_rows and len(self._pending) > 1:
        merged = merge_tables(self._pending)
        self._pending, self._pending_rows = [merged], len(merged)
        if len(merged) > self.memory_rows // 2:
            self._spill(merged)
            self._pending, self._pending_rows = [], 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    res: dict[str, list[float]] = {"old": [], "new": []}
    models = {}
    for _ in range(args.rounds):
        for name, fn in (("old", old_add), ("new", NEW_ADD)):
            store.TableStore.add = fn
            t0 = time.perf_counter()
            models[name] = distcal.fit(args.path)
            res[name].append(time.perf_counter() - t0)
            print(f"{name} {res[name][-1]:6.2f} s   load {os.getloadavg()[0]:.1f}", flush=True)
    assert models["old"] == models["new"]
    print({k: round(statistics.median(v), 2) for k, v in res.items()})


if __name__ == "__main__":
    main()
