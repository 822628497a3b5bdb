"""``make demo``: build a demo scores table and run the whole job on it.

A multinomial naive Bayes classifier, trained on half of scikit-learn's
handwritten digits (task: "is the digit odd?"), scores the other half.
Naive Bayes pushes its scores towards 0 and 1, so they are badly calibrated.
The held-out scores are resampled to about a million rows per table (a
calibration table and a "new data" table), then the job runs end to end on
the local engine: fit isotonic, apply to the new table, evaluate the raw
and the calibrated probabilities, and pick a cost-optimal threshold.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .cli.main import main as distcal_main


def build_tables(out: Path, rows: int = 1_000_000, seed: int = 0) -> tuple[Path, Path]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.naive_bayes import MultinomialNB

    X, digit = load_digits(return_X_y=True)
    y = (digit % 2).astype(np.int8)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.5, random_state=seed,
                                              stratify=y)
    scores = MultinomialNB().fit(X_tr, y_tr).predict_proba(X_te)[:, 1]
    # Split the held-out rows once, so that calibration and new data never share a row.
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y_te))
    half = len(perm) // 2
    paths = []
    for name, idx in (("calibration", perm[:half]), ("new_data", perm[half:])):
        pick = rng.choice(idx, size=rows, replace=True)
        table = pa.table({"id": np.arange(rows, dtype=np.int64),
                          "score": scores[pick].astype(np.float64),
                          "label": y_te[pick]})
        path = out / f"{name}.parquet"
        pq.write_table(table, path, row_group_size=1 << 18)
        paths.append(path)
    return paths[0], paths[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="distcal-demo")
    ap.add_argument("--out", default="demo_output")
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"[1/5] building demo tables ({args.rows:,} rows each) in {out}/ ...", flush=True)
    calib, new = build_tables(out, args.rows)
    steps = [
        ("[2/5] fitting isotonic calibration on calibration.parquet",
         ["fit", "--input", str(calib), "--output", str(out / "model"), "--overwrite"]),
        ("[3/5] applying the model to new_data.parquet",
         ["apply", "--model", str(out / "model"), "--input", str(new),
          "--output", str(out / "calibrated.parquet"), "--output-col", "calibrated",
          "--overwrite"]),
        ("[4/5] evaluating raw scores and calibrated probabilities on the new data",
         ["evaluate", "--input", str(out / "calibrated.parquet"), "--output",
          str(out / "report"), "--prob-col", "score", "--prob-col", "calibrated",
          "--overwrite"]),
        ("[5/5] cost-optimal threshold (a false negative costs 5 false positives)",
         ["threshold", "--input", str(out / "calibrated.parquet"), "--score-col",
          "calibrated", "--cost-fp", "1", "--cost-fn", "5"]),
    ]
    for title, cmd in steps:
        print(title, flush=True)
        print("      $ distcal " + " ".join(cmd), flush=True)
        code = distcal_main(cmd)
        if code:
            return code
    report = json.loads((out / "report" / "report.json").read_text())["reports"]
    print("\nBefore -> after calibration (new data):")
    for key in ("brier", "log_loss", "ece", "auc"):
        print(f"  {key:<9} {report['score'][key]:.4f} -> {report['calibrated'][key]:.4f}")
    print(f"""
Outputs:
  model              {out / 'model'}/  (model.json + Parquet tables)
  calibrated table   {out / 'calibrated.parquet'}
  report             {out / 'report' / 'report.html'}  (one self-contained page; report.json has
                     every number, the figures are also PNG files beside it)
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
