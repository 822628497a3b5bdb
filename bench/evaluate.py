"""All of distcal.evaluate vs scikit-learn's metrics on the same arrays, one process.

Usage: python bench/evaluate.py [N] [--repeat R]

Anchor: scikit-learn's ``brier_score_loss`` + ``log_loss`` + ``roc_auc_score``
+ ``calibration_curve`` with the same bins as ours (uniform, or quantile),
each timed on the same numpy arrays (median of R), summed. Ours:
``distcal.evaluate`` from a pandas frame (the local engine; every metric of
the report: Brier and its decomposition, log loss, ECE/MCE, the calibration
curve, exact AUC, the ROC curve and its hull, confusion and accuracy
interval), for probabilities with ties (rounded to 4 decimals, as many
models' outputs are) and all-distinct ones.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from common import timed  # noqa: E402

import distcal  # noqa: E402


def main() -> None:
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float, nargs="?", default=1e7)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = int(args.n)
    rng = np.random.default_rng(5)
    print(f"# evaluate, N = {n:.0e}, median of {args.repeat}, seconds")
    for kind in ("ties", "cont"):
        p = rng.beta(2, 5, n)
        if kind == "ties":
            p = np.round(p, 4)
        y = (rng.random(n) < p).astype(np.int64)
        df = pd.DataFrame({"prob": p, "label": y})
        parts = {
            "brier_score_loss": timed(lambda: brier_score_loss(y, p), args.repeat),
            "log_loss": timed(lambda: log_loss(y, p), args.repeat),
            "roc_auc_score": timed(lambda: roc_auc_score(y, p), args.repeat),
            "calibration_curve (uniform)": timed(lambda: calibration_curve(y, p, n_bins=10),
                                                 args.repeat),
            "calibration_curve (quantile)": timed(
                lambda: calibration_curve(y, p, n_bins=10, strategy="quantile"), args.repeat),
        }
        common = sum(v for k, v in parts.items() if not k.startswith("calibration_curve"))
        anchor_u = common + parts["calibration_curve (uniform)"]
        anchor_q = common + parts["calibration_curve (quantile)"]
        ours_u = timed(lambda: distcal.evaluate(df), args.repeat)
        ours_q = timed(lambda: distcal.evaluate(df, strategy="quantile"), args.repeat)
        rep = distcal.evaluate(df)
        check = abs(rep.auc - roc_auc_score(y, p)) + abs(rep.brier - brier_score_loss(y, p))
        print(f"\n## {kind}: distinct probabilities = {len(np.unique(p)):,}")
        for k, v in parts.items():
            print(f"sklearn {k:<30} {v:7.3f}")
        print(f"sklearn sum, uniform bins              {anchor_u:7.3f}")
        print(f"sklearn sum, quantile bins             {anchor_q:7.3f}")
        print(f"distcal.evaluate (uniform bins)        {ours_u:7.3f}   x sklearn sum = "
              f"{ours_u / anchor_u:.2f}")
        print(f"distcal.evaluate (quantile bins)       {ours_q:7.3f}   x sklearn sum = "
              f"{ours_q / anchor_q:.2f}   |auc diff| + |brier diff| = {check:.1e}")


if __name__ == "__main__":
    main()
