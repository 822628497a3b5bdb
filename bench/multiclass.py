"""Multiclass calibration: distcal's local fit vs scikit-learn's, on one score matrix.

    python bench/multiclass.py 1e6 [--k 10] [--repeat 3]

N rows x K classes of scores (logits of an over-confident classifier);
one-vs-rest isotonic and temperature scaling. scikit-learn calibrates a
trivial frozen classifier whose ``decision_function`` returns the stored
scores (rows are addressed by X = row index), so that only calibration is
timed. distcal fits from a pandas DataFrame with one column per class
(``score_cols``) and, also shown, from one vector column.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator

from distcal import fit as fit_multiclass


class StoredScores(ClassifierMixin, BaseEstimator):
    """decision_function(X) = the stored score rows X[:, 0] points at."""

    def __init__(self, scores=None):
        self.scores = scores

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        self.n_features_in_ = 1
        return self

    def decision_function(self, X):
        return self.scores[np.asarray(X)[:, 0].astype(np.intp)]

    def predict(self, X):
        return self.classes_[np.argmax(self.decision_function(X), axis=1)]


def make(n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(0.0, 1.0, (n, k))
    z[np.arange(n), y] += 1.5  # informative ...
    z *= 2.5  # ... and over-confident
    return z, y


def timed(fn, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float, nargs="?", default=1e6)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)  # the best of 3: no compile, no cold start
    args = ap.parse_args()
    n, k = int(args.n), args.k
    z, y = make(n, k)
    cols = [f"s{j}" for j in range(k)]
    df = pd.DataFrame(z, columns=cols)
    df["label"] = y
    vec = pd.DataFrame({"scores": list(z), "label": y})
    X = np.arange(n, dtype=np.float64).reshape(-1, 1)
    frozen = FrozenEstimator(StoredScores(z).fit(X, y))
    print(f"# multiclass calibration, N = {n:.0e}, K = {k}, best of {args.repeat}")
    print(f"{'method':12s} {'what':40s} {'seconds':>8s} {'x sklearn':>9s}")
    for method in ("isotonic", "temperature"):
        def sk():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return CalibratedClassifierCV(frozen, method=method).fit(X, y)

        t_sk, cal = timed(sk, args.repeat)
        t_ours, model = timed(lambda: fit_multiclass(df, method=method, score_cols=cols),
                              args.repeat)
        t_vec, _ = timed(lambda: fit_multiclass(vec, method=method, score_col="scores"),
                         args.repeat)
        q = z[:: max(1, n // 100_000)]
        diff = np.abs(model.predict(q) - cal.predict_proba(
            np.arange(0, n, max(1, n // 100_000), dtype=np.float64).reshape(-1, 1))).max()
        extra = (f"beta={model.params['beta']:.9g} sklearn "
                 f"{float(cal.calibrated_classifiers_[0].calibrators[0].beta_):.9g}"
                 if method == "temperature" else "")
        print(f"{method:12s} {'sklearn CalibratedClassifierCV(Frozen)':40s} {t_sk:8.3f}")
        print(f"{method:12s} {'distcal fit_multiclass (score_cols)':40s} {t_ours:8.3f} "
              f"{t_ours / t_sk:9.2f}   max|dp|={diff:.1e} {extra}")
        print(f"{method:12s} {'distcal fit_multiclass (vector column)':40s} {t_vec:8.3f} "
              f"{t_vec / t_sk:9.2f}")


if __name__ == "__main__":
    main()
