"""Exports reproduce ``model.predict``: SQL run by DuckDB, Spark SQL and PostgreSQL
(BigQuery and Snowflake parsed by sqlglot and run through DuckDB), ONNX run by
onnxruntime, MLflow's pyfunc and spark_udf, and the command line.

Every engine is real: DuckDB and onnxruntime in process, the shared Spark
session, a throwaway PostgreSQL cluster started here with initdb/pg_ctl.
Scores probe every knot, its neighbouring doubles, the range, beyond it,
+-inf, NaN and NULL.
"""

from __future__ import annotations

import datetime
import glob
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import sqlglot
from conftest import make_scores

import distcal
import distcal.mlflow as dmlflow
from distcal.cli.main import main as cli_main
from distcal.core.piecewise import piecewise

BINARY = {
    "step": {"interpolation": "step"},
    "linear": {},
    "centered": {"interpolation": "centered"},
    "clipped": {"y_min": 0.1, "y_max": 0.9},
    "decreasing": {"increasing": False},
    "infinite-scores": {},
    "sigmoid": {"method": "sigmoid"},
    "histogram": {"method": "histogram", "n_bins": 12},
    "histogram-quantile": {"method": "histogram", "n_bins": 8, "strategy": "quantile"},
    "modl": {"method": "modl"},
    "beta": {"method": "beta"},
    "venn_abers": {"method": "venn_abers"},
}
TOL = 1e-9


def _binary_data(name: str) -> pd.DataFrame:
    df = make_scores(3000, seed=len(name), negative=name in ("sigmoid", "linear"))
    if name == "decreasing":
        df["score"] = -df["score"]
    if name == "infinite-scores":  # blocks of only -inf / +inf: no finite knot at the ends
        extra = pd.DataFrame({"score": [-np.inf] * 20 + [np.inf] * 20,
                              "label": [0] * 20 + [1] * 20})
        df = pd.concat([df, extra], ignore_index=True)
    return df


@pytest.fixture(scope="module")
def binary_models() -> dict[str, distcal.CalibrationModel]:
    return {name: distcal.fit(_binary_data(name), **kw) for name, kw in BINARY.items()}


def _knots(model) -> np.ndarray:
    pw = piecewise(model)
    if pw is None:
        return np.array([0.0])
    return np.concatenate([pw.thresholds, pw.x0])


@pytest.fixture(scope="module")
def probes(binary_models) -> np.ndarray:
    """Every knot of every model, its neighbouring doubles, a spread, the extremes."""
    knots = np.concatenate([_knots(m) for m in binary_models.values()])
    knots = knots[np.isfinite(knots)]
    rng = np.random.default_rng(7)
    return np.unique(np.concatenate([
        knots, np.nextafter(knots, -np.inf), np.nextafter(knots, np.inf),
        rng.uniform(-6.0, 6.0, 300), [-1e300, 1e300, -np.inf, np.inf, 0.0, -0.0]]))


def _expected(model, scores, **kw) -> list:
    return model.predict(np.asarray(scores, dtype=np.float64), **kw)


def _assert_close(got: list, want: np.ndarray, null_rows=()) -> None:
    """SQL NULL where the score was NULL; NaN where predict gives NaN; else to 1e-9."""
    got_a = np.array([np.nan if g is None else g for g in got], dtype=np.float64)
    nulls = np.array([g is None for g in got])
    assert list(np.flatnonzero(nulls)) == sorted(null_rows)
    want = np.array(want, dtype=np.float64)
    want_nan = np.isnan(want)
    want_nan[list(null_rows)] = True
    np.testing.assert_array_equal(np.isnan(got_a), want_nan)
    ok = ~want_nan
    assert np.max(np.abs(got_a[ok] - want[ok]), initial=0.0) <= TOL


# -- engines -----------------------------------------------------------------------------

def run_duckdb(exprs: list[str], columns: dict[str, list]) -> list[list]:
    """One row per input row, one value per expression."""
    con = duckdb.connect()
    table = pa.table({c: pa.array(v, type=pa.string() if isinstance(_first(v), str)
                                  else pa.int64() if isinstance(_first(v), (int, np.integer))
                                  and not isinstance(_first(v), bool) else pa.float64())
                      for c, v in columns.items()})
    con.register("t", table)
    select = ", ".join(f"{e} AS p{i}" for i, e in enumerate(exprs))
    return [list(r) for r in con.execute(f"SELECT {select} FROM t").fetchall()]


def _first(values: list):
    return next((v for v in values if v is not None), 0.0)


def run_spark(spark, exprs: list[str], columns: dict[str, list]) -> list[list]:
    types = {c: "string" if isinstance(_first(v), str) else "bigint"
             if isinstance(_first(v), (int, np.integer)) else "double" for c, v in columns.items()}
    rows = list(zip(*[[None if x is None else (float(x) if types[c] == "double" else x)
                       for x in v] for c, v in columns.items()]))
    df = spark.createDataFrame(rows, ", ".join(f"`{c}` {t}" for c, t in types.items()))
    df = df.coalesce(1)  # keep the row order
    return [list(r) for r in df.selectExpr(*[f"{e} AS p{i}" for i, e in enumerate(exprs)])
            .collect()]


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL cluster (Debian's server) on a Unix socket in a temp dir.

    initdb refuses to run as root: as root, the cluster belongs to the
    ``postgres`` user the Debian package creates.
    """
    import psycopg

    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    bindir = Path(bins[-1]) if bins else Path(shutil.which("initdb") or "initdb").parent
    root = Path(tempfile.mkdtemp(prefix="distcal-pg-"))
    run_as: list[str] = []
    if os.getuid() == 0:
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data = root / "data"
    subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                    "distcal", "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l",
                    str(root / "log"), "-o", f"-k {root} -c listen_addresses='' -p 5433 "
                    "-c fsync=off", "start"], check=True, capture_output=True)
    try:
        with psycopg.connect(host=str(root), port=5433, user="distcal", dbname="postgres",
                             autocommit=True) as conn:
            yield conn
    finally:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def run_postgres(conn, exprs: list[str], columns: dict[str, list]) -> list[list]:
    types = {c: "text" if isinstance(_first(v), str) else "int8"
             if isinstance(_first(v), (int, np.integer)) else "float8" for c, v in columns.items()}
    arrays = ", ".join(f"%s::{t}[]" for t in types.values())
    select = ", ".join(f"{e} AS p{i}" for i, e in enumerate(exprs))
    names = ", ".join('"' + c.replace('"', '""') + '"' for c in types)  # case, spaces kept
    sql = f"SELECT {select} FROM unnest({arrays}) AS t({names})"
    values = [[None if x is None else (float(x) if types[c] == "float8" else
                                       int(x) if types[c] == "int8" else x) for x in v]
              for c, v in columns.items()]
    return [list(r) for r in conn.execute(sql, values).fetchall()]


ENGINES = ["duckdb", "spark", "postgres", "bigquery", "snowflake"]


@pytest.fixture
def run_sql(request):
    """``run(model_exprs_of(dialect), columns)`` on the engine of the test's ``engine``."""
    engine = request.node.callspec.params["engine"]
    if engine == "spark":
        spark = request.getfixturevalue("spark")
        return lambda exprs, cols: run_spark(spark, exprs, cols)
    if engine == "postgres":
        conn = request.getfixturevalue("postgres")
        return lambda exprs, cols: run_postgres(conn, exprs, cols)
    if engine == "duckdb":
        return run_duckdb

    def through_duckdb(exprs, cols):  # BigQuery / Snowflake: parsed, transpiled, run
        return run_duckdb([sqlglot.transpile(e, read=engine, write="duckdb")[0]
                           for e in exprs], cols)

    return through_duckdb


def _columns(result: list[list], i: int) -> list:
    return [row[i] for row in result]


# -- SQL ---------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_sql_binary_methods(engine, run_sql, binary_models, probes):
    scores = [*probes.tolist(), float("nan"), None]
    exprs = [m.to_sql("score", dialect=engine) for m in binary_models.values()]
    result = run_sql(exprs, {"score": scores})
    for i, model in enumerate(binary_models.values()):
        want = _expected(model, [np.nan if s is None else s for s in scores])
        _assert_close(_columns(result, i), want, null_rows=[len(scores) - 1])


def test_sql_is_a_binary_search_and_round_trips(binary_models):
    """Depth log2(blocks), literals that read back as the same doubles, sqlglot parses all."""
    model = binary_models["linear"]
    sql = model.to_sql("score", dialect="postgres")
    depth = max_depth = 0
    for token in sql.split():
        depth += token == "CASE"
        depth -= token == "END"
        max_depth = max(max_depth, depth)
    n = len(model.blocks)
    assert max_depth <= 2 + int(np.ceil(np.log2(2 * n + 1)))
    for dialect in ENGINES:
        text = model.to_sql("score", dialect=dialect)
        tree = sqlglot.parse_one(text, read=dialect)
        assert sqlglot.parse_one(tree.sql(dialect=dialect), read=dialect) == tree
        numbers = []  # double literals, and the values of Spark's and DuckDB's arrays
        for lit in tree.find_all(sqlglot.exp.Literal):
            if lit.is_number and "e" in lit.this:  # not Spark's loop steps
                numbers.append(-float(lit.this) if isinstance(lit.parent, sqlglot.exp.Neg)
                               else float(lit.this))
            elif lit.is_string and lit.this != "," and "," in lit.this and "true" not in lit.this:
                numbers += [float(v) for v in lit.this.split(",") if v != "NaN"]
        pw = piecewise(model)
        exact = {*pw.thresholds.tolist(), *pw.x0.tolist(), *pw.y0.tolist(),
                 *pw.slope.tolist(), 0.0, 1.0}
        # every literal reads back as exactly one of the model's doubles (PostgreSQL
        # adds the bounds of its underflow guards, below 1e-290)
        assert len(numbers) > 3 * n
        assert {x for x in numbers if not 0 < abs(x) < 1e-290} <= exact


@pytest.mark.parametrize("engine", ["duckdb", "spark", "postgres"])
def test_sql_many_blocks(engine, run_sql):
    """3,000 blocks, 6,000 knots: DuckDB's CASE over slices of loops, Spark's one loop."""
    rng = np.random.default_rng(2)
    score = np.cumsum(rng.uniform(0.5, 1.5, 3000))
    rate = np.sort(rng.uniform(0.0, 1.0, 3000))
    model = distcal.fit(pd.DataFrame({"score": score, "label": rate}))
    assert len(model.blocks) > 2900
    s = np.concatenate([score, score + 0.25, [-1.0, score[-1] + 1.0]])
    _assert_close(_columns(run_sql([model.to_sql("score", dialect=engine)],
                                   {"score": s.tolist()}), 0), model.predict(s))


def _segment_data(n: int = 4000) -> pd.DataFrame:
    df = make_scores(n, seed=11)
    rng = np.random.default_rng(3)
    df["seg"] = rng.choice(["fr", "de", "it's"], n, p=[0.5, 0.45, 0.05])
    df["n"] = rng.integers(0, 3, n)
    df.loc[df.index[:50], "seg"] = None  # null keys form no segment
    return df


@pytest.fixture(scope="module")
def segment_models():
    df = _segment_data()
    return {"string": distcal.fit(df, by="seg", min_segment_weight=300.0),
            "string-int": distcal.fit(df, by=["seg", "n"], interpolation="step"),
            "sigmoid": distcal.fit(df, by="n", method="sigmoid"),
            "beta": distcal.fit(df, by="n", method="beta"),
            "venn_abers": distcal.fit(df, by="n", method="venn_abers")}


@pytest.mark.parametrize("engine", ENGINES)
def test_sql_segments(engine, run_sql, segment_models, probes):
    """Each key's map, the global one for fallbacks, unseen keys and null keys."""
    assert segment_models["string"].segments["fallback"].sum() == 1  # "it's"
    scores = probes[::3].tolist()
    segs = ["fr", "de", "it's", "zz", None]
    seg = [segs[i % len(segs)] for i in range(len(scores))]
    n = [i % 4 for i in range(len(scores))]  # 3 is unseen
    cols = {"score": scores, "seg": seg, "n": n}
    exprs = [m.to_sql("score", dialect=engine) for m in segment_models.values()]
    result = run_sql(exprs, cols)
    keys = pd.DataFrame({"seg": seg, "n": n})
    for i, model in enumerate(segment_models.values()):
        want = model.predict(np.array(scores), segments=keys[model.by])
        _assert_close(_columns(result, i), want)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_sql_of_100000_blocks_in_500_segments(engine, run_sql):
    """The size the contract names, in segments: 500 isotonic maps of 200 blocks (one CASE
    arm a segment), exact in DuckDB and Spark SQL with null and unseen keys."""
    rng = np.random.default_rng(3)
    df = pd.concat([pd.DataFrame({"score": np.cumsum(rng.uniform(0.5, 1.5, 200)) / 200,
                                  "label": np.sort(rng.uniform(0, 1, 200)), "g": g})
                    for g in range(500)], ignore_index=True)
    model = distcal.fit(df, by="g", min_segment_weight=0)
    assert sum(len(model.segment(g).blocks) for g in range(500)) == 100_000
    keys = [int(k) for k in rng.integers(0, 500, 400)]
    keys[:5], keys[5:8] = [None] * 5, [503] * 3  # null keys, an unseen key: the global map
    scores = rng.uniform(-0.1, 1.1, 400)
    scores[8:12] = [-np.inf, np.inf, 0.0, 1.0]
    result = run_sql([model.to_sql("score", dialect=engine)],
                     {"score": scores.tolist(), "g": keys})
    _assert_close(_columns(result, 0), model.predict(scores, segments=pd.Series(
        keys, dtype=object)))


@pytest.mark.parametrize("engine", ENGINES)
def test_sql_segment_columns_of_any_name(engine, run_sql):
    """by columns named with a space, as keywords (``select``, ``order``, ``end``), as
    PostgreSQL's ``user`` (its current user when bare: every row got the global map), in
    mixed case, with quotes: quoted, so that each dialect reads exactly that column."""
    rng = np.random.default_rng(14)
    n = 1600
    names = ["my seg", "select", "Seg", "order", "user", "end", "it's", 'q"b']
    df = pd.DataFrame({"score": np.round(rng.random(n), 2),
                       **{c: rng.choice(["x", "y"], n) for c in names}})
    df["label"] = (rng.random(n) < df.score).astype(int)
    probe = df.sample(60, random_state=1)
    for by in (names[:3], names[3:6], names[6:]):
        model = distcal.fit(df, by=by)
        result = run_sql([model.to_sql("score", dialect=engine)],
                         {c: probe[c].tolist() for c in ["score", *by]})
        _assert_close(_columns(result, 0), model.predict(probe.score.to_numpy(),
                                                         segments=probe[model.by]))


def test_sql_expressions_of_one_value_only(binary_models):
    """An alias, a query or a statement where a value goes is a ValueError, not SQL that
    fails when the database runs it."""
    model = binary_models["linear"]
    for bad in ("x AS y", "my score", "select", "DROP TABLE t"):
        with pytest.raises(ValueError, match="is not a postgres SQL expression of one value"):
            model.to_sql(bad, dialect="postgres")
    # A subquery: Spark and DuckDB refuse one inside the search's lambda (it was accepted,
    # and the SQL failed when run).
    for dialect in ("duckdb", "spark", "postgres"):
        with pytest.raises(ValueError, match="holds a subquery: compute it in an inner query"):
            model.to_sql("(SELECT max(s) FROM t)", dialect=dialect)
    with pytest.raises(ValueError, match="holds a subquery"):
        model.to_sql("s + (SELECT 1)", dialect="duckdb")
    assert "max" in model.to_sql("max(s) OVER ()", dialect="duckdb").lower()


def _class_data(n: int = 3000, k: int = 3, seed: int = 5, decimals: int | None = 2
                ) -> pd.DataFrame:
    """Per-class scores s0..s{k-1} (Dirichlet rows, rounded: ties), labels drawn from them."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(k), n)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    if decimals is not None:
        p = np.round(p, decimals)
    df = pd.DataFrame({f"s{j}": p[:, j] for j in range(k)})
    df["label"] = y
    df["seg"] = rng.choice(["a", "b"], n)
    return df


@pytest.fixture(scope="module")
def class_models():
    # few rows, few blocks: Spark's analyser takes seconds per large expression
    df3, df2 = _class_data(800), _class_data(800, k=2, seed=6)
    logits = df3.assign(**{f"s{j}": np.log(df3[f"s{j}"] + 0.05) * 3 for j in range(3)})
    cols3 = ["s0", "s1", "s2"]
    return {
        "isotonic": (distcal.fit(df3, score_cols=cols3), cols3),
        "sigmoid": (distcal.fit(df3, score_cols=cols3, method="sigmoid"), cols3),
        "beta": (distcal.fit(df3, score_cols=cols3, method="beta"), cols3),
        "histogram": (distcal.fit(df3, score_cols=cols3, method="histogram"), cols3),
        "k2": (distcal.fit(df2, score_cols=["s0", "s1"]), ["s0", "s1"]),
        "temperature": (distcal.fit(logits, score_cols=cols3, method="temperature"), cols3),
        "segments": (distcal.fit(df3, score_cols=cols3, by="seg"), cols3),
    }


def _class_probes(k: int) -> np.ndarray:
    rng = np.random.default_rng(9)
    s = np.round(rng.dirichlet(np.ones(k), 200), 2)
    s = np.vstack([s, np.full((3, k), -1.0), np.full((2, k), 2.0)])  # all below / above
    s[5, 0] = np.nan
    return s


def _logit_probes(k: int) -> np.ndarray:
    """Logits, with rows of +inf (one class, two classes: predict's limit shares 1 among
    them), of -inf only (NaN) and of +inf beside NaN (NaN)."""
    s = np.log(np.abs(_class_probes(k)) + 0.05) * 3
    s[6, 0] = s[7, :2] = s[9, 0] = np.inf
    s[8] = -np.inf
    s[9, 1] = np.nan
    return s


@pytest.mark.parametrize("engine", ENGINES)
def test_sql_one_vs_rest_and_temperature(engine, run_sql, class_models):
    """A list of K expressions, p_k = q_k / sum(q), 1/K for all-zero rows (one query)."""
    frame: dict[str, list] = {}
    exprs, wanted = [], []
    for name, (model, cols) in class_models.items():
        s = _logit_probes(len(cols)) if name == "temperature" else _class_probes(len(cols))
        names = [f"{name}_{c}" for c in cols]  # each model reads its own columns
        frame.update({c: s[:, j].tolist() for j, c in enumerate(names)})
        out = model.to_sql(names, dialect=engine)
        assert isinstance(out, list) and len(out) == model.n_classes
        exprs += out
        seg = ["a", "b", "c"] * (s.shape[0] // 3) + ["a"] * (s.shape[0] % 3)
        wanted.append(model.predict(s, **({"segments": seg} if model.by else {})))
    frame["seg"] = seg
    result = run_sql(exprs, frame)
    want = np.hstack(wanted)
    for k in range(want.shape[1]):
        _assert_close(_columns(result, k), want[:, k])
    assert any(np.any(np.all(w == 1.0 / w.shape[1], axis=1)) for w in wanted)  # all-zero rows


def test_knots_closer_than_the_smallest_normal_are_a_step_everywhere():
    """Two knots 1e-310 apart with other values: an infinite slope. predict, SQL and ONNX
    all take the step at the left knot (the exports' documented rule), no inf."""
    model = distcal.fit(pd.DataFrame({"score": [0.0, 1e-310, 0.5], "label": [0, 1, 1]}))
    probe = np.array([5e-311, 0.0, 1e-310, 0.25, np.nan])
    want = model.predict(probe)
    np.testing.assert_array_equal(want[:4], [0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(_onnx_run(model, probe), want)
    result = run_duckdb([model.to_sql("s", dialect="duckdb")], {"s": probe.tolist()})
    _assert_close(_columns(result, 0), want)


@pytest.mark.parametrize("interpolation", ["linear", "centered"])
def test_knots_further_apart_than_the_largest_double_agree_everywhere(interpolation):
    """Centered, the knots are the means -8.5e307 and 1.7e308: their distance overflows,
    the slope is 0. predict mixed the two knots' values there (1.0 at 1e308 where SQL
    and ONNX give 0.0); now all three keep the left knot's value. Linear, the knots 0 and
    1.7e308 are within range: interpolated."""
    model = distcal.fit(pd.DataFrame({"score": [-1.7e308, 0.0, 1.7e308], "label": [0, 0, 1]}),
                        interpolation=interpolation)
    probe = np.array([-1.0, 0.0, 0.5, 1e307, 1e308, 1.6e308, np.nan])
    want = model.predict(probe)
    if interpolation == "centered":
        np.testing.assert_array_equal(want[:6], 0.0)
    else:
        np.testing.assert_allclose(want[3:6], probe[3:6] / 1.7e308, rtol=1e-15)
    np.testing.assert_array_equal(_onnx_run(model, probe), want)
    result = run_duckdb([model.to_sql("s", dialect="duckdb")], {"s": probe.tolist()})
    _assert_close(_columns(result, 0), want)


def test_sigmoid_of_one_distinct_score_is_constant_at_infinity(spark):
    """One distinct score fitted: a = 0, the constant map 1 / (1 + e^b), at s = +-inf too
    (0 * inf is NaN), in predict, SQL, ONNX and Spark's transform (one map, and a map per
    segment); NaN stays NaN."""
    df = pd.DataFrame({"score": [0.3] * 5, "label": [0, 1, 1, 0, 1], "g": ["a"] * 5})
    model = distcal.fit(df, method="sigmoid")
    segmented = distcal.fit(df, method="sigmoid", by="g", min_segment_weight=0)
    assert model.params["a"] == 0.0 == segmented.segment("a").params["a"]
    probe = np.array([0.3, np.inf, -np.inf, np.nan])
    want = model.predict(probe)
    np.testing.assert_allclose(want[:3], 1.0 / (1.0 + np.exp(model.params["b"])), rtol=1e-15)
    assert np.isnan(want[3])
    np.testing.assert_array_equal(_onnx_run(model, probe), want)
    result = run_duckdb([model.to_sql("s", dialect="duckdb")], {"s": probe.tolist()})
    _assert_close(_columns(result, 0), want)
    sdf = spark.createDataFrame(pd.DataFrame({"score": probe, "g": ["a", "a", "b", "a"],
                                              "i": range(4)}))
    for m in (model, segmented):
        got = m.transform(sdf, output_col="p").toPandas().sort_values("i")["p"].to_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-15)


def test_sql_temperature_of_one_logit_column_at_infinity():
    """One column s is the logit pair (-s, s): s = +-inf gives predict's limit (0, 1) or
    (1, 0), not inf - inf."""
    rng = np.random.default_rng(3)
    s = np.round(rng.normal(size=500), 2)
    df = pd.DataFrame({"s": s, "label": (rng.random(500) < 1 / (1 + np.exp(-s))).astype(int)})
    model = distcal.fit(df, score_cols=["s"], method="temperature")
    probe = np.array([np.inf, -np.inf, 0.3, np.nan])
    want = model.predict(probe)
    np.testing.assert_array_equal(want[:2], [[0.0, 1.0], [1.0, 0.0]])
    result = run_duckdb(model.to_sql(["s"], dialect="duckdb"), {"s": probe.tolist()})
    for k in range(2):
        _assert_close(_columns(result, k), want[:, k])


@pytest.mark.parametrize("engine", ENGINES)
def test_sql_temperature_of_probabilities(engine, run_sql):
    """log(p + 1e-12) as predict takes it, also where it is -inf (p = -1e-12) or NaN
    (p < -1e-12: PostgreSQL's LN refuses a negative number, Spark's is NULL)."""
    df = _class_data(decimals=None)
    model = distcal.fit(df, score_cols=["s0", "s1", "s2"], method="temperature")
    assert model.params["input_"] == "probabilities"
    s = _class_probes(3)[:200]
    s = s[~np.isnan(s).any(axis=1)]
    s = s / s.sum(axis=1, keepdims=True)
    s = np.vstack([s, [[-0.2, 0.7, 0.5], [-1e-12, 0.5, 0.5], [3.0, -1.0, 0.5],
                       [np.nan, 0.5, 0.5]]])
    exprs = model.to_sql(["s0", "s1", "s2"], dialect=engine)
    result = run_sql(exprs, {f"s{j}": s[:, j].tolist() for j in range(3)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a row without logits is NaN, silently
        want = model.predict(s)
    assert np.isnan(want[-4]).all() and want[-3, 0] == 0.0  # the cases meant
    for k in range(3):
        _assert_close(_columns(result, k), want[:, k])


def test_sql_refuses_what_it_cannot_write(binary_models, class_models):
    model = binary_models["linear"]
    with pytest.raises(ValueError, match="dialect"):
        model.to_sql(dialect="oracle")
    with pytest.raises(ValueError, match="not a spark SQL expression"):
        model.to_sql("score +")
    with pytest.raises(ValueError, match="3 expressions"):
        class_models["isotonic"][0].to_sql(["s0", "s1"])
    with pytest.raises(ValueError, match="not a duckdb SQL expression"):  # an unclosed quote
        model.to_sql("sc'ore", dialect="duckdb")
    frame = make_scores(400, seed=3)
    by_bytes = distcal.fit(frame.assign(g=[b"ab", b"cd"] * 200), by="g")
    with pytest.raises(ValueError, match="segment key of bytes"):  # it matched no row
        by_bytes.to_sql("score", dialect="duckdb")
    vectors = pd.DataFrame({"v": [np.array([1 - x, x]) for x in frame.score],
                            "label": frame.label})
    with pytest.raises(ValueError, match="fitted on the vector column 'v'"):
        distcal.fit(vectors, score_col="v").to_sql(dialect="duckdb")
    with pytest.raises(ValueError, match="dialect"):
        class_models["isotonic"][0].to_sql(dialect="oracle")


def test_sql_default_score_columns_as_the_data_names_them():
    """Without score=, the fit's score column(s), quoted: a name with a dot or a space
    (read as a table's column, or refused) or a keyword."""
    rng = np.random.default_rng(6)
    s = rng.random(600)
    df = pd.DataFrame({"s.x": s, "my score": s, "order": s, "g": rng.choice(["a", "b"], 600),
                       "label": (rng.random(600) < s).astype(int)})
    probe = {"s.x": [0.1, 0.5, 0.9], "g": ["a", "b", "a"]}
    seg = distcal.fit(df, score_col="s.x", by="g")
    got = _columns(run_duckdb([seg.to_sql(dialect="duckdb")], probe), 0)
    _assert_close(got, seg.predict(np.array(probe["s.x"]), segments=probe["g"]))
    multi = distcal.fit(df.assign(label=df.label + (df.order > 0.7)),
                        score_cols=["my score", "order", "s.x"])
    rows = np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3], [0.3, 0.3, 0.4]])
    cols = {c: rows[:, j].tolist() for j, c in enumerate(["my score", "order", "s.x"])}
    got = run_duckdb(multi.to_sql(dialect="duckdb"), cols)
    np.testing.assert_allclose(got, multi.predict(rows), rtol=1e-9)
    normalised = distcal.export.ovr_normalise_sql(["q0", "q1", "q2"], dialect="duckdb")
    out = run_duckdb(normalised, {"q0": [0.2, 0.0], "q1": [0.6, 0.0], "q2": [0.2, 0.0]})
    np.testing.assert_allclose(out, [[0.2, 0.6, 0.2], [1 / 3, 1 / 3, 1 / 3]])


# -- ONNX --------------------------------------------------------------------------------

def _onnx_run(model, scores: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    proto = model.to_onnx()
    assert [i.name for i in proto.graph.input] == ["score"]
    assert [o.name for o in proto.graph.output] == ["probability"]
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(["probability"], {"score": scores})[0]


def test_onnx_binary_methods(binary_models, probes):
    scores = np.concatenate([probes, [np.nan]])
    for name, model in binary_models.items():
        got = _onnx_run(model, scores)
        want = model.predict(scores)
        assert got.dtype == np.float64 and got.shape == scores.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        ok = ~np.isnan(want)
        assert np.max(np.abs(got[ok] - want[ok])) <= 1e-12, name


def test_onnx_multiclass(class_models):
    for name, (model, cols) in class_models.items():
        if model.by:
            with pytest.raises(ValueError, match="segment"):
                model.to_onnx()
            model = model.segment("a")
        s = _logit_probes(len(cols)) if name == "temperature" else _class_probes(len(cols))
        got, want = _onnx_run(model, s), model.predict(s)
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        ok = ~np.isnan(want)
        assert np.max(np.abs(got[ok] - want[ok])) <= 1e-12, name
    # temperature fitted on probabilities: log(p + 1e-12) of every row, as predict does
    model = distcal.fit(_class_data(decimals=None), score_cols=["s0", "s1", "s2"],
                        method="temperature")
    p = np.random.default_rng(1).dirichlet(np.ones(3), 50)
    for batch in (p, np.vstack([p, [[3.0, -1.0, 0.5]]])):  # then a row of logits too
        got, want = _onnx_run(model, batch), model.predict(batch)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[:50], want[:50], rtol=0, atol=1e-12)
    # temperature of one logit column (K = 2): the graph takes the pair (-s, s), as
    # docs/export.md says, and gives predict of the single logit
    logit = np.linspace(-4, 4, 301)
    one = distcal.fit(pd.DataFrame({"s": logit, "label": np.arange(301) % 3 == 0}),
                      score_cols=["s"], method="temperature")
    np.testing.assert_allclose(_onnx_run(one, np.column_stack([-logit, logit])),
                               one.predict(logit), rtol=0, atol=1e-12)


# -- MLflow ------------------------------------------------------------------------------

@pytest.fixture
def tracking(tmp_path, monkeypatch):
    """A local tracking directory (MLflow 3 wants its file store opted into)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    yield tmp_path
    mlflow.set_tracking_uri(None)


def test_mlflow_pyfunc_and_round_trip(tracking, segment_models, class_models):
    import mlflow

    binary = distcal.fit(make_scores(2000, seed=2))
    df = _segment_data(500)
    cases = [(binary, df, binary.predict(df["score"].to_numpy())),
             (segment_models["string"], df,
              segment_models["string"].predict(df["score"].to_numpy(), segments=df["seg"]))]
    multi, cols = class_models["isotonic"]
    dfm = _class_data(300)
    cases.append((multi, dfm, multi.predict(dfm[cols].to_numpy())))
    vectors = pd.DataFrame({"probs": list(dfm[cols].to_numpy()), "label": dfm["label"]})
    by_vector = distcal.fit(vectors, score_col="probs", method="sigmoid")
    cases.append((by_vector, vectors, by_vector.predict(dfm[cols].to_numpy())))
    # Keys of dates: MLflow's schema gives pyfunc the column as datetime64.
    days = df.assign(day=[datetime.date(2026, 1, 1 + i % 3) for i in range(len(df))])
    by_day = distcal.fit(days, by="day")
    cases.append((by_day, days[["score", "day"]],
                  by_day.predict(days["score"].to_numpy(), segments=days["day"])))
    for i, (model, frame, want) in enumerate(cases):
        path = tracking / f"saved{i}"
        dmlflow.save_model(model, path)
        got = mlflow.pyfunc.load_model(str(path)).predict(frame)
        np.testing.assert_array_equal(np.asarray(got), want)
        assert dmlflow.load_model(str(path)) == model
        with pytest.raises(FileExistsError, match="exists .choose a new path, or remove"):
            dmlflow.save_model(model, path)
    with pytest.raises(distcal.DataError, match="column 'score': 2 rows are text, not numbers"):
        dmlflow.predict_frame(binary, pd.DataFrame({"score": ["0.2", "high"]}))
    # Integer keys with nulls (float NaN, pandas' Int64 NA): the global map, as predict
    # gives (MLflow's inferred "long" refused them); a binary temperature model's logit.
    ints = df.assign(g=np.arange(len(df)) % 3)
    by_int = distcal.fit(ints, by="g")
    dmlflow.save_model(by_int, tracking / "ints")
    pyfunc = mlflow.pyfunc.load_model(str(tracking / "ints"))
    want = by_int.predict(np.array([0.2, 0.5, 0.7]), segments=pd.Series([1, None, 2]))
    for keys in ([1, np.nan, 2], pd.array([1, None, 2], dtype="Int64"), [1.0, None, 2.0]):
        got = pyfunc.predict(pd.DataFrame({"score": [0.2, 0.5, 0.7], "g": keys}))
        np.testing.assert_array_equal(np.asarray(got), want)
    # Boolean keys with a null (pandas' nullable boolean): MLflow's "boolean" refused them.
    by_bool = distcal.fit(ints.assign(g=ints["g"] == 1), by="g")
    dmlflow.save_model(by_bool, tracking / "bools")
    keys = pd.array([True, None, False], dtype="boolean")
    got = mlflow.pyfunc.load_model(str(tracking / "bools")).predict(
        pd.DataFrame({"score": [0.2, 0.5, 0.7], "g": keys}))
    np.testing.assert_array_equal(np.asarray(got), by_bool.predict(
        np.array([0.2, 0.5, 0.7]), segments=pd.Series([True, None, False], dtype=object)))
    logits = pd.DataFrame({"logit": np.linspace(-3, 3, 400), "label": np.arange(400) % 2})
    temp = distcal.fit(logits, method="temperature", score_col="logit")
    dmlflow.save_model(temp, tracking / "temperature")
    got = mlflow.pyfunc.load_model(str(tracking / "temperature")).predict(logits[["logit"]])
    np.testing.assert_array_equal(np.asarray(got), temp.predict(logits.logit.to_numpy()))
    with mlflow.start_run():
        info = dmlflow.log_model(segment_models["string"], "calibrator")
    loaded = mlflow.pyfunc.load_model(info.model_uri)
    assert loaded.metadata.get_input_schema().input_names() == ["score", "seg"]
    np.testing.assert_array_equal(np.asarray(loaded.predict(df)), cases[1][2])
    assert dmlflow.load_model(info.model_uri) == segment_models["string"]


def test_mlflow_spark_udf(tracking, spark, segment_models):
    import mlflow

    model = segment_models["string"]
    with mlflow.start_run():
        info = dmlflow.log_model(model, "calibrator")
    udf = mlflow.pyfunc.spark_udf(spark, info.model_uri, result_type="double",
                                  env_manager="local")
    df = _segment_data(600)[["score", "seg"]]
    sdf = spark.createDataFrame(df).coalesce(1)
    got = np.array([r.p for r in sdf.withColumn("p", udf("score", "seg")).collect()])
    np.testing.assert_allclose(got, model.predict(df["score"].to_numpy(), segments=df["seg"]),
                               rtol=0, atol=1e-12)
    # A long key column with nulls (it failed the whole job): the global map for them.
    ints = df.assign(g=np.arange(len(df)) % 3)
    by_int = distcal.fit(ints.assign(label=_segment_data(600)["label"]), by="g")
    with mlflow.start_run():
        info = dmlflow.log_model(by_int, "by_int")
    udf = mlflow.pyfunc.spark_udf(spark, info.model_uri, result_type="double",
                                  env_manager="local")
    keys = [None if i % 5 == 0 else int(g) for i, g in enumerate(ints.g)]
    sdf = spark.createDataFrame(list(zip(ints.score.tolist(), keys)),
                                "score double, g bigint").coalesce(1)
    got = np.array([r.p for r in sdf.withColumn("p", udf("score", "g")).collect()])
    np.testing.assert_allclose(got, by_int.predict(ints.score.to_numpy(),
                                                   segments=pd.Series(keys, dtype=object)),
                               rtol=0, atol=1e-12)


# -- command line ------------------------------------------------------------------------

def test_cli_export_each_format(tmp_path, capsys):
    import mlflow
    import onnxruntime as ort

    df = make_scores(1500, seed=4)
    df.to_parquet(tmp_path / "in.parquet")
    assert cli_main(["fit", "--input", str(tmp_path / "in.parquet"), "--output",
                     str(tmp_path / "model"), "-q"]) == 0
    model = distcal.load(tmp_path / "model")
    s = np.linspace(-0.5, 1.5, 101)
    for fmt, extra in (("sql", ["--dialect", "duckdb"]), ("onnx", []), ("mlflow", [])):
        out = tmp_path / f"out-{fmt}"
        assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", fmt,
                         "--output", str(out), *extra]) == 0
        if fmt == "sql":
            (expr,) = out.read_text().splitlines()
            got = np.array(_columns(run_duckdb([expr], {"score": s.tolist()}), 0))
        elif fmt == "onnx":
            got = ort.InferenceSession(out.read_bytes()).run(None, {"score": s})[0]
        else:
            got = mlflow.pyfunc.load_model(str(out)).predict(pd.DataFrame({"score": s}))
        np.testing.assert_allclose(np.asarray(got, dtype=float), model.predict(s), rtol=0,
                                   atol=1e-12)
        # never replaces an output, never writes into the model it reads
        assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", fmt,
                         "--output", str(out), *extra]) == 2
    assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", "sql",
                     "--output", str(tmp_path / "model" / "x.sql")]) == 2
    # ONNX of a per-segment model: a usage error (exit 2) in the command line's words
    df.assign(g=np.arange(len(df)) % 2).to_parquet(tmp_path / "in.parquet")
    assert cli_main(["fit", "--input", str(tmp_path / "in.parquet"), "--output",
                     str(tmp_path / "by"), "--by", "g", "-q"]) == 0
    capsys.readouterr()
    assert cli_main(["export", "--model", str(tmp_path / "by"), "--format", "onnx",
                     "--output", str(tmp_path / "by.onnx")]) == 2
    assert "--format onnx: an ONNX graph takes scores only, not the segment keys of this " \
        "model (by g); export --format sql" in capsys.readouterr().err
    # options of the SQL export with another format: a usage error (they were ignored)
    for fmt, option in (("onnx", ["--dialect", "duckdb"]), ("mlflow", ["--score-col", "s"]),
                        ("onnx", ["--score-cols", "a,b"])):
        assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", fmt,
                         "--output", str(tmp_path / "x"), *option]) == 2
        assert f"{option[0]} is an option of --format sql; this export's format is {fmt}" \
            in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "by", "in.parquet", "model", "out-mlflow", "out-onnx", "out-sql"]
    capsys.readouterr()
