"""A 100,000-block model exported to SQL and run by DuckDB and Spark SQL.

Usage: python bench/export.py [--blocks B] [--rows N] [--repeat R] [--no-spark]

The model: linear isotonic with B blocks (scores 0..B-1, each its own block:
rates rising with the score), so the linear map has 2B knots, the worst case.
For each engine, on the same N scores (spread over the fitted range and
beyond it), the median of R runs of:

* generating the SQL (``model.to_sql``);
* running it: DuckDB ``SELECT <expr> FROM t`` fetched as numpy; Spark
  ``selectExpr(<expr>)`` planned and executed by a no-op write (the plan,
  the analysis of the expression included, is timed separately too);
* the anchor: ``model.predict`` on the same scores in this process.

Every engine's result is checked against ``model.predict`` (DuckDB on all
rows, Spark on a sample of 20,000 collected rows) before it is timed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import spark_session, timed  # noqa: E402

import distcal  # noqa: E402


def build_model(blocks: int) -> distcal.CalibrationModel:
    """B blocks: distinct scores whose rates rise (no pooling), random spacing."""
    rng = np.random.default_rng(0)
    score = np.cumsum(rng.uniform(0.5, 1.5, blocks))
    rate = np.sort(rng.uniform(0.0, 1.0, blocks))
    rate[1:] = np.maximum(rate[1:], rate[:-1] + 1e-12)  # strictly rising: no two pool
    model = distcal.fit(pd.DataFrame({"score": score, "label": np.clip(rate, 0, 1)}))
    assert len(model.blocks) >= blocks * 0.99, len(model.blocks)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()

    model = build_model(args.blocks)
    b = model.blocks
    lo, hi = float(b["score_min"].iloc[0]), float(b["score_max"].iloc[-1])
    rng = np.random.default_rng(1)
    scores = rng.uniform(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo), args.rows)
    anchor = timed(lambda: model.predict(scores), args.repeat)
    want = model.predict(scores)
    rows = []

    import duckdb

    gen = timed(lambda: model.to_sql("score", dialect="duckdb"), args.repeat)
    sql = model.to_sql("score", dialect="duckdb")
    con = duckdb.connect()
    con.register("t", pd.DataFrame({"score": scores}))
    query = f"SELECT {sql} AS p FROM t"
    got = con.execute(query).fetchnumpy()["p"]
    assert np.max(np.abs(np.asarray(got, dtype=np.float64) - want)) <= 1e-9
    run = timed(lambda: con.execute(query).fetchnumpy(), args.repeat)
    rows.append(("DuckDB", len(sql), gen, None, run))

    if not args.no_spark:
        spark = spark_session("distcal-bench-export")
        gen = timed(lambda: model.to_sql("score", dialect="spark"), args.repeat)
        sql = model.to_sql("score", dialect="spark")
        sdf = spark.createDataFrame(pd.DataFrame({"score": scores})).cache()
        sdf.count()
        sample = sdf.limit(20_000).toPandas()["score"].to_numpy()
        check = spark.createDataFrame(pd.DataFrame({"score": sample})).coalesce(1)
        got = np.array([r.p for r in check.selectExpr(f"{sql} AS p").collect()])
        assert np.max(np.abs(got - model.predict(sample))) <= 1e-9

        def plan() -> None:  # parse, analyse, optimise, plan: no row is read
            sdf.selectExpr(f"{sql} AS p")._jdf.queryExecution().executedPlan()

        def execute() -> None:
            sdf.selectExpr(f"{sql} AS p").write.format("noop").mode("overwrite").save()

        rows.append(("Spark SQL (local[2])", len(sql), gen, timed(plan, args.repeat),
                     timed(execute, args.repeat)))
        spark.stop()

    print(f"model: linear isotonic, {len(b):,} blocks ({2 * len(b):,} knots); "
          f"{args.rows:,} scores; median of {args.repeat}; "
          f"anchor model.predict {anchor:.3f} s ({time.strftime('%Y-%m-%d %H:%M')})")
    print("| engine | SQL length | to_sql | plan (parse + analyse) | run on all rows | "
          "run / predict |")
    print("|---|---|---|---|---|---|")
    for name, length, g, p, r in rows:
        plan_text = "-" if p is None else f"{p:.2f} s"
        print(f"| {name} | {length / 1e6:.1f} MB | {g:.2f} s | {plan_text} | {r:.2f} s | "
              f"{r / anchor:.1f}x |")


if __name__ == "__main__":
    main()
