"""The storage layer: one publish/fetch algorithm on local files, fsspec and Hadoop.

Real stores only: this machine's filesystem, fsspec's in-memory filesystem
and ``file://`` URLs, and a Spark session's Hadoop FileSystem.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import distcal
from distcal.storage import (
    LocalFileSystem,
    OutputExistsError,
    fetch_dir,
    filesystem_for,
    publish_dir,
    publishing,
)
from distcal.storage.fsspec import FsspecFileSystem


def _write(content: str):
    """A writer of a directory that looks like a model (overwrite replaces only outputs)."""
    def write(d: Path) -> None:
        d.mkdir()
        (d / "model.json").write_text(json.dumps({"format": "distcal-model", "test": content}))

    return write


def _read(d: Path) -> str:
    return json.loads((d / "model.json").read_text())["test"]


def _siblings(parent: Path, name: str) -> list[str]:
    return sorted(e for e in os.listdir(parent) if e.startswith(f".{name}."))


def test_local_publish_refuse_and_replace(tmp_path):
    fs, target = LocalFileSystem(), str(tmp_path / "out")
    publish_dir(fs, target, _write("one"))
    assert _read(Path(target)) == "one"
    with pytest.raises(OutputExistsError, match="exists"):
        publish_dir(fs, target, _write("two"))
    assert _read(Path(target)) == "one"
    publish_dir(fs, target, _write("three"), overwrite=True)
    assert _read(Path(target)) == "three"
    assert _siblings(tmp_path, "out") == []  # no temporary or old copies left


def test_local_exchange_swaps_directories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write("A")(a)
    _write("B")(b)
    assert LocalFileSystem().exchange(str(a), str(b)) is True  # Linux renameat2
    assert (_read(a), _read(b)) == ("B", "A")


def test_failed_write_leaves_old_output_and_no_directories(tmp_path):
    fs = LocalFileSystem()
    target = tmp_path / "out"
    publish_dir(fs, str(target), _write("old"))

    def broken(d: Path) -> None:
        d.mkdir()
        (d / "model.json").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        publish_dir(fs, str(target), broken, overwrite=True)
    assert _read(target) == "old" and _siblings(tmp_path, "out") == []
    deep = tmp_path / "x" / "y" / "out"
    with pytest.raises(RuntimeError):
        publish_dir(fs, str(deep), broken)
    assert not (tmp_path / "x").exists()  # parents created for it are gone again


def test_an_interrupt_as_the_temporary_is_first_made_leaves_nothing(tmp_path, monkeypatch):
    """The command line's SIGTERM handler raises KeyboardInterrupt wherever Python is: here
    just after the probe that the directory takes new entries made the temporary (the
    probe's directory was left behind, found by the kill tests on a loaded machine)."""
    made = []
    mkdir = os.mkdir

    def interrupted_mkdir(path, *args, **kwargs):
        mkdir(path, *args, **kwargs)
        if ".out.tmp-" in str(path) and not made:
            made.append(path)
            raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(os, "mkdir", interrupted_mkdir)
    target = tmp_path / "x" / "out"
    with pytest.raises(KeyboardInterrupt):
        publish_dir(LocalFileSystem(), str(target), _write("new"))
    assert made and not (tmp_path / "x").exists()  # neither the temporary nor its parent


def _fail(run) -> None:
    """End a run of :func:`publishing` entered by hand as an exception in its block would."""
    assert run.__exit__(RuntimeError, RuntimeError("disk full"), None) is False


def test_a_run_in_a_directory_a_failing_run_made_keeps_it(tmp_path):
    """Two runs write into one new directory: the first made it, the second found it and
    writes there. The first fails: it removes the directory it made only if empty, and
    the second's empty sibling keeps it so (it was empty: the second's write then
    failed, its directory gone)."""
    fs = LocalFileSystem()
    first = publishing(fs, str(tmp_path / "x" / "a"))
    first.__enter__()
    second = publishing(fs, str(tmp_path / "x" / "b"))
    tmp = Path(second.__enter__())
    _fail(first)
    _write("second")(tmp)
    second.__exit__(None, None, None)
    assert _read(tmp_path / "x" / "b") == "second"
    assert sorted(os.listdir(tmp_path / "x")) == ["b"]


def test_a_run_whose_directory_a_failing_run_removes_as_it_starts_makes_it_again(
        tmp_path, monkeypatch):
    """The same two runs, the first failing just after the second found the directory
    (before anything of the second is in it): the second makes the directory again and
    publishes (it failed: "cannot create files in its directory"); or, failing too,
    removes the directory it made again."""
    from distcal.storage import publish

    fs = LocalFileSystem()
    make_parents, firsts = publish._make_parents, []

    def first_fails_meanwhile(fs_, target):
        made = make_parents(fs_, target)
        if target.endswith("/b") and firsts:
            _fail(firsts.pop())
        return made

    monkeypatch.setattr(publish, "_make_parents", first_fails_meanwhile)
    for d, write in (("x", _write("second")), ("y", _write_then_fail)):
        first = publishing(fs, str(tmp_path / d / "a"))
        first.__enter__()
        firsts.append(first)
        if d == "x":
            publish_dir(fs, str(tmp_path / d / "b"), write)
        else:
            with pytest.raises(RuntimeError, match="disk full"):
                publish_dir(fs, str(tmp_path / d / "b"), write)
        assert not firsts  # the first did fail meanwhile
    assert _read(tmp_path / "x" / "b") == "second"
    assert sorted(os.listdir(tmp_path / "x")) == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["x"]


def _write_then_fail(d: Path) -> None:
    _write("half")(d)
    raise RuntimeError("disk full")


def test_concurrent_writers_one_wins(tmp_path):
    fs, target = LocalFileSystem(), str(tmp_path / "out")
    first, second = publishing(fs, target), publishing(fs, target)
    # Both start while nothing is at the target, and both write ...
    _write("first")(Path(first.__enter__()))
    _write("second")(Path(second.__enter__()))
    first.__exit__(None, None, None)  # ... the first commits,
    with pytest.raises(OutputExistsError):  # and the second, without overwrite, loses
        second.__exit__(None, None, None)
    assert _read(Path(target)) == "first"
    assert _siblings(tmp_path, "out") == []


def _segment_models():
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"score": rng.random(3000), "label": (rng.random(3000) < 0.4) * 1.0,
                       "g": rng.integers(0, 40, 3000)})
    return distcal.fit(df, by="g"), distcal.fit(df.assign(label=1.0 - df.label), by="g")


def test_a_model_replaced_while_it_is_read_is_read_again(tmp_path, monkeypatch, caplog):
    """A load that overlaps an overwrite reads the old model.json and a new table (the
    checksum refuses it) and reads the directory again: it returns the new model. A
    damaged model that nobody replaces is refused after one read."""
    import logging

    from distcal import keyed_model

    old, new = _segment_models()
    path = tmp_path / "m"
    old.save(path)
    read_table, reads, replace = keyed_model.read_table_file, [], [True]

    def replaced_after_model_json(root, *args):
        if replace.pop() if replace else False:
            new.save(path, overwrite=True)
        reads.append(args[-1])
        return read_table(root, *args)

    monkeypatch.setattr(keyed_model, "read_table_file", replaced_after_model_json)
    caplog.set_level(logging.INFO, logger="distcal")
    assert distcal.load(path) == new
    assert reads.count("maps.parquet") == 2 and "was replaced while it was read" in caplog.text
    blocks = path / "blocks.parquet"
    blocks.write_bytes(blocks.read_bytes()[:-9] + b"x" * 9)
    reads.clear()
    with pytest.raises(distcal.ModelError, match="blocks.parquet' is missing or damaged"):
        distcal.load(path)
    assert reads.count("maps.parquet") == 1


def _save_in_turn(path: str, seconds: float, saving) -> None:
    models = _segment_models()
    saving.set()
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        models[i % 2].save(path, overwrite=True)
        i += 1


@pytest.mark.subprocess
def test_loads_during_overwrites_each_return_one_model_whole(tmp_path):
    """A process saves two models in turn with overwrite=True while this one loads: every
    load returns one of the two, whole (before reads were read again, about one load
    in ten overlapped a save and failed as damaged)."""
    import multiprocessing

    models, path = _segment_models(), tmp_path / "m"
    models[0].save(path)
    spawn = multiprocessing.get_context("spawn")
    saving = spawn.Event()
    writer = spawn.Process(target=_save_in_turn, args=(str(path), 3.0, saving))
    writer.start()
    loaded = []
    try:
        assert saving.wait(60)
        while writer.is_alive():
            loaded.append(distcal.load(path))
    finally:
        writer.join()
    assert writer.exitcode == 0 and len(loaded) >= 50
    assert sum(m == models[0] for m in loaded) + sum(m == models[1] for m in loaded) \
        == len(loaded)
    assert any(m == models[1] for m in loaded)


class NoExchange(LocalFileSystem):
    """A real local filesystem that behaves like a store without atomic exchange."""

    def exchange(self, a: str, b: str) -> bool:
        return False


class FailingSecondRename(NoExchange):
    def __init__(self) -> None:
        self.renames = 0

    def rename(self, src: str, dst: str) -> None:
        self.renames += 1
        if self.renames == 2:  # the new output into place
            raise OSError("store went away")
        super().rename(src, dst)


def test_without_exchange_old_output_is_moved_aside_then_removed(tmp_path):
    fs, target = NoExchange(), str(tmp_path / "out")
    publish_dir(fs, target, _write("old"))
    publish_dir(fs, target, _write("new"), overwrite=True)
    assert _read(Path(target)) == "new" and _siblings(tmp_path, "out") == []


def test_failed_second_rename_restores_old_output(tmp_path):
    target = str(tmp_path / "out")
    publish_dir(LocalFileSystem(), target, _write("old"))
    with pytest.raises(OSError, match="went away"):
        publish_dir(FailingSecondRename(), target, _write("new"), overwrite=True)
    assert _read(Path(target)) == "old" and _siblings(tmp_path, "out") == []


def test_next_run_restores_output_left_aside_and_cleans_dead_temporaries(tmp_path):
    fs, target = LocalFileSystem(), tmp_path / "out"
    host = socket.gethostname()
    # A run killed between "old aside" and "new in place" left this:
    _write("old")(tmp_path / f".out.old-999999999@{host}-deadbeef")
    _write("partial")(tmp_path / f".out.tmp-999999999@{host}-0badf00d")
    # ... and a live run (this process) is writing this one:
    live = tmp_path / f".out.tmp-{os.getpid()}@{host}-1234abcd"
    _write("live")(live)
    with pytest.raises(OutputExistsError):
        publish_dir(fs, str(target), _write("new"))
    assert _read(target) == "old"
    assert _siblings(tmp_path, "out") == [live.name]


def test_an_old_output_a_live_run_moved_aside_is_left_to_it(tmp_path):
    """On a store without an atomic exchange a run moves the old output aside, then renames
    the new one in: another run starting in between put the old one back (and the first
    failed), though only a run that died leaves it for others to restore."""
    import subprocess

    fs, target = LocalFileSystem(), tmp_path / "out"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # another process of this host, alive, between its two renames
        aside = tmp_path / f".out.old-{live.pid}@{socket.gethostname()}-1234abcd"
        _write("old")(aside)
        publish_dir(fs, str(target), _write("new"))
        assert _read(target) == "new" and _read(aside) == "old"
    finally:
        live.kill()
        live.wait()
    # This process's own pid is a killed run's that a restart reused (a container keeps
    # its hostname and numbers its processes from 1): its old output is put back.
    own = tmp_path / f".out2.old-{os.getpid()}@{socket.gethostname()}-1234abcd"
    _write("old")(own)
    with pytest.raises(OutputExistsError):
        publish_dir(fs, str(tmp_path / "out2"), _write("new"))
    assert _read(tmp_path / "out2") == "old" and not own.exists()


def test_long_names_fit_the_temporary_prefix(tmp_path):
    name = "m" * 250  # near the 255-byte limit of ext4
    target = tmp_path / name
    publish_dir(LocalFileSystem(), str(target), _write("x"))
    publish_dir(LocalFileSystem(), str(target), _write("y"), overwrite=True)
    assert _read(target) == "y"


def test_fsspec_memory_filesystem():
    root = f"memory://distcal-test-{uuid.uuid4().hex}"
    target = f"{root}/models/out"
    fs = filesystem_for(target)
    assert isinstance(fs, FsspecFileSystem) and not fs.local
    publish_dir(fs, target, _write("one"))
    assert fetch_dir(fs, target, _read) == "one"
    with pytest.raises(OutputExistsError):
        publish_dir(fs, target, _write("two"))
    publish_dir(fs, target, _write("three"), overwrite=True)
    assert fetch_dir(fs, target, _read) == "three"
    assert fs.listdir(f"{root}/models") == ["out"]


def test_fsspec_file_url_through_fsspec(tmp_path):
    fs = FsspecFileSystem.for_uri(f"file://{tmp_path}")
    target = f"file://{tmp_path}/out"
    publish_dir(fs, target, _write("one"))
    publish_dir(fs, target, _write("two"), overwrite=True)
    assert _read(tmp_path / "out") == "two"
    assert _siblings(tmp_path, "out") == []


def test_model_save_and_load_on_fsspec():
    df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
    model = distcal.fit(df)
    uri = f"memory://distcal-test-{uuid.uuid4().hex}/model"
    model.save(uri)
    assert distcal.load(uri) == model
    with pytest.raises(OutputExistsError):
        model.save(uri)


@pytest.mark.spark
def test_hadoop_filesystem_on_a_spark_session(spark, tmp_path):
    from distcal.storage.hadoop import HadoopFileSystem

    fs = filesystem_for(f"hdfs-like://ignored/{tmp_path}", spark)
    assert isinstance(fs, HadoopFileSystem)
    target = f"file://{tmp_path}/out"  # Hadoop's local FileSystem, through the JVM
    fs = HadoopFileSystem(spark)
    publish_dir(fs, target, _write("one"))
    assert fetch_dir(fs, target, _read) == "one"
    with pytest.raises(OutputExistsError):
        publish_dir(fs, target, _write("two"))
    publish_dir(fs, target, _write("three"), overwrite=True)
    assert fetch_dir(fs, target, _read) == "three"
    assert sorted(e for e in os.listdir(tmp_path) if not e.endswith(".crc")) == ["out"]


# -- issue 34: what overwrite may replace, what an input may be --------------------

def test_output_kinds_of_local_paths(tmp_path):
    """Each kind of previous output is recognised; anything else is not ours."""
    from distcal.storage.kinds import output_kind

    fs = LocalFileSystem()
    df = pd.DataFrame({"score": [0.1, 0.9], "label": [0, 1]})
    distcal.fit(df).save(tmp_path / "model")
    df.to_parquet(tmp_path / "t.parquet")
    (tmp_path / "ds").mkdir()
    df.to_parquet(tmp_path / "ds" / "part-0.parquet")
    (tmp_path / "ds" / "_SUCCESS").write_text("")
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.json").write_text('{"table": []}')
    (tmp_path / "text").write_text("hello")
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo")
    os.symlink("model", tmp_path / "link")
    kinds = {name: output_kind(fs, str(tmp_path / name))
             for name in ("model", "t.parquet", "ds", "rep", "text", "empty", "fifo", "link")}
    assert {k: v[0] for k, v in kinds.items()} == {
        "model": "model", "t.parquet": "parquet", "ds": "parquet", "rep": "report",
        "text": None, "empty": None, "fifo": None, "link": None}
    assert kinds["fifo"][1].startswith("a FIFO") and kinds["link"][1] == "a symbolic link"


def test_overwrite_replaces_only_the_same_kind(tmp_path):
    """The storage layer's own rule, whatever the caller: a model never replaces a report."""
    from distcal.errors import OutputPathError

    fs, target = LocalFileSystem(), str(tmp_path / "out")

    def report(d: Path) -> None:
        d.mkdir()
        (d / "report.json").write_text('{"table": []}')

    publish_dir(fs, target, report)
    with pytest.raises(OutputPathError, match="is a report directory, not a model directory"):
        publish_dir(fs, target, _write("model"), overwrite=True, kind="model")
    with pytest.raises(OutputPathError, match="is a report directory, not a model directory"):
        publish_dir(fs, target, _write("model"), overwrite=True)  # kind of what was written
    assert (tmp_path / "out" / "report.json").is_file() and _siblings(tmp_path, "out") == []
    publish_dir(fs, target, report, overwrite=True)  # a report replaces a report


def test_overwrite_must_be_a_bool(tmp_path):
    fs, target = LocalFileSystem(), str(tmp_path / "out")
    publish_dir(fs, target, _write("one"))
    for value in ("no", "false", 0, 1, None):
        with pytest.raises(TypeError, match="overwrite must be True or False"):
            publish_dir(fs, target, _write("two"), overwrite=value)
    assert _read(Path(target)) == "one"


def test_remote_store_kinds_by_marker_file():
    root = f"memory://distcal-test-{uuid.uuid4().hex}"
    fs = filesystem_for(root)
    publish_dir(fs, f"{root}/m", _write("model"))
    from distcal.errors import OutputPathError

    def report(d: Path) -> None:
        d.mkdir()
        (d / "report.json").write_text('{"table": []}')

    with pytest.raises(OutputPathError, match="is a model directory, not a report directory"):
        publish_dir(fs, f"{root}/m", report, overwrite=True, kind="report")
    publish_dir(fs, f"{root}/m", _write("two"), overwrite=True)
    assert fetch_dir(fs, f"{root}/m", _read) == "two"


def test_read_regular_file_is_capped_by_bytes_read(tmp_path):
    """A FIFO is refused before it is opened; a file is read to the cap, not its st_size."""
    from distcal.storage import read_regular_file

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="is a FIFO"):
        read_regular_file(str(tmp_path / "fifo"), 100, "config")
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(ValueError, match="larger than 100 bytes"):
        read_regular_file(str(tmp_path / "big"), 100, "config")
    assert read_regular_file(str(tmp_path / "big"), 101) == b"x" * 101


def test_file_urls_are_read_as_rfc_8089(tmp_path):
    """``file:`` URLs name the paths pyarrow reads from them: ``%20`` is a space,
    ``localhost`` this machine; another host is refused, not made a relative path."""
    model = distcal.fit(pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]}))
    spaced = tmp_path / "a b"
    spaced.mkdir()
    model.save(spaced.as_uri() + "/m")  # file:///.../a%20b/m
    assert (spaced / "m" / "model.json").is_file() and distcal.load(spaced / "m") == model
    model.save(f"file://localhost{tmp_path}/m2")
    assert distcal.load(tmp_path / "m2") == model
    # m%2541 decodes to m%41, which the writers would decode once more, to mA (it was
    # written there, and its overwrite replaced what mA held): refused; a plain path
    # holding '%' is itself.
    from distcal.errors import OutputPathError

    with pytest.raises(OutputPathError, match="its path holds '%' once decoded"):
        model.save(f"file://{tmp_path}/m%2541")
    model.save(tmp_path / "m%41")
    assert distcal.load(tmp_path / "m%41") == model
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b", "m%41", "m2"]
    with pytest.raises(ValueError, match="names the host 'server'"):
        model.save("file://server/share/m")


def test_outputs_of_the_api_never_replace_or_enter_their_input(tmp_path):
    """As on the command line: ``apply_to_parquet`` and a summary's ``save`` refuse an
    output that is, or lies inside, the input they read (any spelling of it), and the
    input is left as it was; a file other than Parquet deep in a dataset is a DataError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from distcal.apply import apply_to_parquet

    df = pd.DataFrame({"score": np.linspace(0, 1, 40), "label": np.arange(40) % 2})
    (tmp_path / "ds").mkdir()
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "ds" / "a.parquet")
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "in.parquet")
    before = (tmp_path / "in.parquet").read_bytes()
    model = distcal.fit(df)
    for source, output in [(tmp_path / "ds", tmp_path / "ds" / "out.parquet"),
                           (tmp_path / "in.parquet", tmp_path / "in.parquet"),
                           (tmp_path / "in.parquet", (tmp_path / "in.parquet").as_uri()),
                           (tmp_path / "ds", f"{tmp_path}/ds/../ds/")]:
        with pytest.raises(distcal.DataError, match="the input"):
            apply_to_parquet(model, source, output, overwrite=True)
    assert (tmp_path / "in.parquet").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["a.parquet"]
    summary = distcal.summarize(str(tmp_path / "ds"))
    with pytest.raises(distcal.DataError, match="is inside the input"):
        summary.save(tmp_path / "ds" / "summary")
    summary.save(tmp_path / "summary")  # beside it: fine
    (tmp_path / "ds" / "sub").mkdir()
    (tmp_path / "ds" / "sub" / "notes.json").write_text("{}")
    with pytest.raises(distcal.DataError, match="notes.json' is not a readable Parquet file"):
        distcal.fit(str(tmp_path / "ds"))


def test_a_directory_of_no_distcal_kind_is_refused_naming_every_kind(tmp_path):
    """The refusal lists what overwrite does replace: every kind distcal writes (the
    summary directories and Spark ML stages were missing from it)."""
    from distcal.errors import OutputPathError
    from distcal.storage.kinds import KIND_NAMES, check_replaceable

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputPathError) as err:
        check_replaceable(LocalFileSystem(), str(tmp_path / "mine"), None)
    assert "a directory that is not a distcal output" in str(err.value)
    for name in KIND_NAMES.values():
        assert name in str(err.value), name
    assert "a summary directory" in str(err.value)


def test_apply_to_parquet_writes_a_url_to_its_store(tmp_path, monkeypatch):
    """The local engine's writer of tables publishes a URL on its store (it made a local
    directory named ``memory:``), from the API and from ``distcal apply``."""
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from distcal.apply import apply_to_parquet
    from distcal.cli.main import main

    monkeypatch.chdir(tmp_path)
    scores = np.linspace(0, 1, 50)
    pq.write_table(pa.table({"score": scores, "label": (scores > .4).astype(np.int8)}),
                   tmp_path / "in.parquet")
    model = distcal.fit(pd.read_parquet(tmp_path / "in.parquet"))
    model.save(tmp_path / "m")
    root = f"memory://distcal-test-{uuid.uuid4().hex}"
    assert apply_to_parquet(model, tmp_path / "in.parquet", f"{root}/api.parquet") == 50
    assert main(["apply", "--model", str(tmp_path / "m"), "--input",
                 str(tmp_path / "in.parquet"), "--output", f"{root}/cli.parquet", "-q"]) == 0
    fs = fsspec.filesystem("memory")
    for name in ("api", "cli"):
        with fs.open(f"{root}/{name}.parquet", "rb") as f:
            table = pq.read_table(f)
        np.testing.assert_array_equal(table.column("calibrated").to_numpy(),
                                      model.predict(scores))
    with pytest.raises(OutputExistsError):
        apply_to_parquet(model, tmp_path / "in.parquet", f"{root}/api.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "m"]


@pytest.mark.parametrize("marker,content", [
    ("model.json", '{"format": "layers-model", "weightsManifest": []}'),  # TensorFlow.js
    ("model.json", "not json"), ("model.json", "[1, 2]"), ("report.json", '{"a": 1}'),
    ("summary.json", '{"format": "other"}')])
def test_overwrite_leaves_a_directory_whose_marker_another_tool_wrote(tmp_path, marker, content):
    """A directory holding a model.json (report.json, summary.json) that distcal did not
    write is not replaced: a TensorFlow.js model's directory and its weights were."""
    from distcal.errors import OutputPathError

    model = distcal.fit(pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]}))
    other = tmp_path / "other"
    other.mkdir()
    (other / marker).write_text(content)
    (other / "group1-shard1of1.bin").write_bytes(b"weights")
    with pytest.raises(OutputPathError, match=f"whose {marker} distcal did not write"):
        model.save(other, overwrite=True)
    assert sorted(p.name for p in other.iterdir()) == sorted([marker, "group1-shard1of1.bin"])
    assert _siblings(tmp_path, "other") == []


def test_a_directory_that_takes_no_new_entry_is_an_output_path_error():
    """/proc exists but creates nothing: the same OutputPathError as a directory that cannot
    be created (it was a PermissionError or FileNotFoundError naming the temporary)."""
    from distcal.errors import OutputPathError

    model = distcal.fit(pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]}))
    with pytest.raises(OutputPathError, match="'/proc/distcal-m': cannot create files in its "
                                              "directory"):
        model.save("/proc/distcal-m")


def test_a_report_larger_than_the_parsed_limit_is_still_distcal_s(tmp_path):
    """A report.json of 71 MB (roc_points=None on 420,000 probabilities) was parsed whole
    against a 64 MiB limit, and overwrite refused distcal's own report: its first key
    (format) tells."""
    from distcal.storage.kinds import output_kind

    rep = tmp_path / "rep"
    rep.mkdir()
    with open(rep / "report.json", "w") as f:
        f.write('{\n  "format": "distcal-report",\n  "roc": [' + "0.5, " * (15 << 20) + "0]}")
    assert (rep / "report.json").stat().st_size > 70 << 20
    assert output_kind(LocalFileSystem(), str(rep))[0] == "report"
    report = distcal.evaluate(pd.DataFrame({"prob": [.1, .4, .6, .8], "label": [0, 1, 0, 1]}))
    from distcal.report import write_report

    write_report(report, rep, overwrite=True)
    assert json.loads((rep / "report.json").read_text())["format"] == "distcal-report"
