"""distcal as one zip for ``--py-files``: what executors import, with optional packages blocked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

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
