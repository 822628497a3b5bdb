"""Spark under harsher settings, each in its own process and SparkSession.

* tasks that fail on their first attempt (master local[2,3]) still give the
  exact model.

That only summaries reach the driver (fit, threshold and evaluate, with
weights, on millions of rows under spark.driver.maxResultSize=8m) is
tests/test_scale_spark.py, which runs its child the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import full_jit_env

import distcal

SESSION = """
import json, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
builder = (SparkSession.builder.master({master!r}).config("spark.ui.enabled", "false")
           .config("spark.sql.shuffle.partitions", "8")
           .config("spark.pyspark.python", sys.executable))
for k, v in {conf!r}.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
import distcal
"""


def run_child(body: str, master: str = "local[2]", conf: dict | None = None) -> dict:
    code = SESSION.format(master=master, conf=conf or {}) + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=900, env=full_jit_env())  # millions of rows: C2 pays
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_first_attempt_failures_still_give_the_exact_model(tmp_path):
    out = run_child(f"""
        from pyspark import TaskContext
        from pyspark.sql import functions as F
        from pyspark.sql.types import DoubleType

        marks = {str(tmp_path / 'failures')!r}
        os.makedirs(marks)

        @F.udf(DoubleType())
        def flaky(x):
            # every task of the input stage fails once, then succeeds on retry
            ctx = TaskContext.get()
            if ctx.attemptNumber() == 0:
                open(os.path.join(marks, f"{{ctx.stageId()}}-{{ctx.partitionId()}}"), "w").close()
                raise RuntimeError("injected failure on the first attempt")
            return x

        df = (spark.range(0, 60000, numPartitions=6)
              .select(F.round(F.rand(3), 3).alias("s"), F.rand(4).alias("u"))
              .select(flaky("s").alias("score"),
                      (F.col("u") < F.col("s")).cast("int").alias("label")))
        model = distcal.fit(df)
        model.save({str(tmp_path / 'flaky')!r})
        pdf = df.toPandas()
        distcal.fit(pdf).save({str(tmp_path / 'local')!r})
        print(json.dumps({{"n_rows": model.n_rows, "failures": len(os.listdir(marks))}}))
    """, master="local[2,3]")
    assert out["n_rows"] == 60_000
    assert out["failures"] >= 6  # the injected failures did happen
    assert distcal.load(tmp_path / "flaky") == distcal.load(tmp_path / "local")
