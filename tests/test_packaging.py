"""distcal as one zip for ``--py-files``: what executors import, with optional packages blocked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np

from distcal.packaging import build_zip

# Everything distcal may use on the driver or the command line but never on an executor.
OPTIONAL = ("yaml", "tqdm", "matplotlib", "sklearn", "dask", "distributed", "fsspec",
            "relplot", "IPython")

EXECUTOR_SIDE = textwrap.dedent("""
    import sys
    for name in {optional!r}:
        sys.modules[name] = None  # "import name" now raises ImportError
    sys.path.insert(0, {zip!r})
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    import distcal
    from distcal.engines.spark import keyed, schema
    from distcal.core.keyed import KeySpec
    from distcal.core.rows import read_rows

    assert distcal.__file__.startswith({zip!r}), distcal.__file__
    # what a range partition does: validate, pool, fit
    rng = np.random.default_rng(0)
    s, y = rng.random(500), (rng.random(500) < 0.5).astype(float)
    rows, stats = read_rows(pa.table({{"score": s, "label": y}}), KeySpec())
    table = keyed.KeyedRuns()
    table.add(keyed.pool_rows(rows, [None]))
    assert stats["n_rows"] == 500 and len(table.table().table) == 500
    model = distcal.fit(pd.DataFrame({{"score": s, "label": y}}))
    print(model.n_rows, sorted(set({optional!r}) & {{m.split(".")[0] for m in sys.modules
                                                     if sys.modules[m] is not None}}))
""")


def test_zip_has_the_package_and_nothing_else(tmp_path):
    path = build_zip(tmp_path / "dist" / "distcal.zip")
    names = zipfile.ZipFile(path).namelist()
    assert "distcal/__init__.py" in names
    assert "distcal/engines/spark/keyed.py" in names
    assert all(n.startswith("distcal/") and "__pycache__" not in n and not n.endswith(".pyc")
               for n in names)
    again = build_zip(tmp_path / "again.zip")
    assert again.read_bytes() == path.read_bytes()  # reproducible


def test_executor_side_imports_need_no_optional_package(tmp_path):
    path = build_zip(tmp_path / "distcal.zip")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", EXECUTOR_SIDE.format(optional=OPTIONAL,
                                                                   zip=str(path))],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["500", "[]"]


# The executor-side kernels that numba compiles, run where numba cannot be imported (an
# executor with numpy, pandas, pyarrow and scipy only): Venn-Abers' range pass past
# COMPILE_ROWS rows, PAV over segments of at least _JIT_MIN_BLOCKS blocks, and the pooling
# of many keys' unit rows (at least _JIT_MIN_ROWS); and on the driver, MODL's greedy
# search past COMPILED_MIN_ROWS.
WITHOUT_NUMBA = textwrap.dedent("""
    import sys
    if {blocked}:
        sys.modules["numba"] = None  # "import numba" now raises ImportError
    import numpy as np
    import pandas as pd

    import distcal
    from distcal.core import keyed, modl, segment_pav, venn_abers
    from distcal.core.isotonic import Blocks

    rng = np.random.default_rng(7)
    n = venn_abers.COMPILE_ROWS + 5_000
    s = rng.random(n)
    df = pd.DataFrame({{"score": s, "label": (rng.random(n) < s).astype(int)}})
    p0, p1 = distcal.fit(df, method="venn_abers").predict_interval(np.linspace(0, 1, 101))
    m = segment_pav._JIT_MIN_BLOCKS + 1_000  # blocks of 3-block segments, out of order
    w = rng.integers(1, 4, m).astype(float)
    pos = np.floor(w * rng.random(m))
    score = np.tile(np.arange(3.0), m // 3 + 1)[:m]
    blocks = Blocks(score, score, w, pos, pos / w)
    starts = np.append(np.arange(0, m, 3), m)
    pooled, new_starts = segment_pav.pav_segments(blocks, starts, True)
    r = keyed._JIT_MIN_ROWS + 10_000  # 0/1 labels, unit weights, 50 keys, tied scores
    table = keyed.pool_keyed(rng.integers(-1, 50, r), [(k, None) for k in range(50)],
                             rng.integers(0, 500, r) / 500, rng.integers(0, 2, r) * 1.0, None)
    # MODL (on the driver) past COMPILED_MIN_ROWS mixed rows: its greedy search
    counts = rng.integers(1, 4, (modl.COMPILED_MIN_ROWS + 500, 2))
    found = modl.modl_partition(counts)
    np.savez({out!r}, p0=p0, p1=p1, prob=pooled.prob, starts=new_starts,
             modl_cost=found.cost, modl_exact=found.exact,
             keys=table.starts, score=table.table.score, count=table.table.count,
             positives=table.table.positives,
             compiled=[segment_pav._jit_pav_runs() is not None,
                       keyed._jit_pool_unit_rows() is not None,
                       "distcal.core.modl_jit" in sys.modules])
""")


def test_compiled_kernels_fall_back_to_python_without_numba(tmp_path):
    got = {}
    for blocked in (True, False):
        out = tmp_path / f"{blocked}.npz"
        r = subprocess.run([sys.executable, "-c", WITHOUT_NUMBA.format(blocked=blocked,
                                                                      out=str(out))],
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        got[blocked] = dict(np.load(out))
    assert not got[True]["compiled"].any() and got[False]["compiled"].all()  # both ran
    for name in ("p0", "p1", "prob", "starts", "keys", "score", "count", "positives"):
        np.testing.assert_allclose(got[True][name], got[False][name], rtol=1e-12, atol=0,
                                   err_msg=name)
    # the compiled greedy search prices spans with the C library's lgamma: equal to rounding
    assert not got[True]["modl_exact"] and not got[False]["modl_exact"]
    np.testing.assert_allclose(got[True]["modl_cost"], got[False]["modl_cost"], rtol=1e-9)
