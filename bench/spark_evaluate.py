"""distcal.evaluate on Spark vs MLlib's BinaryClassificationEvaluator (AUC only).

Usage: python bench/spark_evaluate.py N [--repeat R]

One SparkSession (local[2], driver memory 4g, as bench/spark_isotonic.py),
the same Parquet files (bench/data/, ``score`` in [0, 1] read as the
probability): "ties" (~1e6 distinct probabilities at N = 1e7), "heavy"
(~9k) and "cont" (all distinct). Times, each from ``spark.read.parquet``:

* anchor: ``BinaryClassificationEvaluator(rawPredictionCol="score",
  metricName="areaUnderROC").evaluate(df)`` (MLlib's AUC: a sort and a
  scan; areaUnderPR not asked for);
* ours: ``distcal.evaluate(df, prob_col="score")`` (default
  ``roc_points=1000``): exact AUC, Brier and its exact decomposition, log
  loss, ECE/MCE, adaptive ECE, smECE, the calibration curve, the confusion
  matrix, the ROC hull and 1000 points of the exact ROC.

Prints both, their ratio and |AUC difference|.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", default="ties,heavy,cont")
    args = ap.parse_args()
    n = int(args.n)
    from spark_isotonic import make_file, session

    import distcal

    spark = session()
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    ev = BinaryClassificationEvaluator(rawPredictionCol="score", labelCol="label",
                                       metricName="areaUnderROC")
    print(f"# Spark local[2], evaluate, N = {n:.0e}, median of {args.repeat}, seconds")
    print(f"{'data':<6}{'MLlib AUC':>10}{'distcal':>10}{'ours/MLlib':>12}  |AUC diff|  "
          "distinct  roc points")
    for kind in args.kinds.split(","):
        path = str(make_file(n, kind))

        def read():
            return spark.read.parquet(path)

        t_ml = timed(lambda: ev.evaluate(read()), args.repeat, warmup=True)
        t_us = timed(lambda: distcal.evaluate(read(), prob_col="score"), args.repeat,
                     warmup=True)
        rep = distcal.evaluate(read(), prob_col="score")
        diff = abs(rep.auc - ev.evaluate(read()))
        # MLlib merges the curve into numBins=1000 bins: its AUC is off by ~1e-6.
        assert diff < 1e-4, f"AUC differs from MLlib's by {diff}"
        print(f"{kind:<6}{t_ml:10.2f}{t_us:10.2f}{t_us / t_ml:12.2f}  {diff:9.1e}  "
              f"{rep.n_distinct:>9,}  {len(rep.roc)}")
    spark.stop()


if __name__ == "__main__":
    main()
