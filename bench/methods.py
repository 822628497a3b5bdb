"""Beta calibration and Venn-Abers fits against their anchors, in one run.

Usage: python bench/methods.py N [--repeat R] [--spark] [--no-local]
       [--pairs venn_abers,beta] [--data cont,ties]

On the same N rows (scores drawn from Beta(2, 3), distinct or rounded to 4
decimals; 0/1 labels drawn from a beta-calibration curve; unit weights),
the median of R fits of:

* Venn-Abers (``method="venn_abers"``) against the isotonic fit
  (``method="isotonic"``) of the same rows: target <= 2x;
* beta calibration (``method="beta"``) against Platt's sigmoid
  (``method="sigmoid"``): target <= 1.5x.

Local: from a pandas frame. With ``--spark`` also on Spark local[2], each
fit timed from ``spark.read.parquet`` of the same rows written once
(``--no-local``: Spark only). ``--pairs`` picks the pairs by our method
(both by default), ``--data`` the kinds of scores (both by default): at
1e7 rows on Spark local[2] one pair and one kind can take many minutes.
Prints one line per fit and the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from common import spark_session, timed  # noqa: E402  (bench/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import distcal  # noqa: E402

PAIRS = (("isotonic", "venn_abers", 2.0), ("sigmoid", "beta", 1.5))


def make_rows(n: int, decimals: int | None, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.beta(2.0, 3.0, n)
    if decimals is not None:
        s = np.round(s, decimals)
    c = np.clip(s, 1e-12, 1 - 1e-12)
    p = 1.0 / (1.0 + np.exp(-(2.0 * np.log(c) - 0.5 * np.log(1 - c) - 0.5)))
    return pd.DataFrame({"score": s, "label": (rng.random(n) < p).astype(np.int64)})


def run(label: str, fit: object, repeat: int, pairs: list[str]) -> dict[str, object]:
    """Times each pair's fits (one untimed fit of each method first: numba's kernels
    compile on the first large table, Spark's workers start); returns the models."""
    times, models = {}, {}
    for anchor, ours, target in (p for p in PAIRS if p[1] in pairs):
        for method in (anchor, ours):
            models[method] = fit(m := method)  # type: ignore[operator]
            times[method] = timed(lambda m=m: fit(m), repeat)  # type: ignore[operator]
            print(f"{label:<14} {method:<11} {times[method]:8.3f} s", flush=True)
        ratio = times[ours] / times[anchor]
        print(f"{label:<14} {ours} / {anchor} = {ratio:.2f}x (target <= {target}x)", flush=True)
    return models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spark", action="store_true")
    ap.add_argument("--no-local", action="store_true")
    ap.add_argument("--pairs", default="venn_abers,beta")
    ap.add_argument("--data", default="cont,ties")
    args = ap.parse_args()
    pairs, kinds = args.pairs.split(","), args.data.split(",")
    n = int(args.n)
    print(f"# methods, N = {n:.0e}, median of {args.repeat}")
    for name, decimals in (("cont", None), ("ties", 4)):
        if name not in kinds:
            continue
        df = make_rows(n, decimals)
        local = {}
        if not args.no_local:
            local = run(f"local/{name}", lambda m, df=df: distcal.fit(df, method=m),
                        args.repeat, pairs)
        if args.spark:
            spark = spark_session("distcal-bench-methods")
            with tempfile.TemporaryDirectory() as tmp:
                path = str(Path(tmp) / "rows.parquet")
                df.to_parquet(path)
                remote = run(f"spark/{name}",
                             lambda m, path=path: distcal.fit(spark.read.parquet(path), method=m),
                             args.repeat, pairs)
            for method, model in local.items():  # every engine fits the same model
                assert remote[method] == model, f"{method}: Spark and local models differ"


if __name__ == "__main__":
    main()
