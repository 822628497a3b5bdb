"""distcal as one zip for Spark's ``--py-files`` (``make zip``, ``python -m distcal.packaging``).

PySpark puts the .zip, .egg and .jar files given to ``--py-files`` (or
``spark.submit.pyFiles``) on the executors' ``sys.path``, and Python imports
pure-Python packages from a zip. distcal is pure Python, and the code that
runs on executors needs only numpy, pandas, pyarrow and scipy (what the ML
runtimes of managed Spark ship), so the zip of the ``distcal`` package is
all a cluster needs.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

__all__ = ["build_zip"]


def build_zip(dest: str | os.PathLike) -> Path:
    """Write the ``distcal`` package (its .py files and data, no caches) to ``dest``.

    Entries are sorted and time-stamped 1980-01-01, so the same sources
    give the same bytes. The zip is written aside and renamed into place.
    """
    root = Path(__file__).resolve().parent
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root.parent)
                if path.is_dir() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
                    continue
                info = zipfile.ZipInfo(rel.as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


if __name__ == "__main__":
    print(build_zip(sys.argv[1] if len(sys.argv) > 1 else "dist/distcal.zip"))
