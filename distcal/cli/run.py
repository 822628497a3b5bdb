"""Running one command: parse, resolve options, run, print one JSON line, exit code.

Exit 0 on success with the command's JSON line on stdout. Exit 2 for the
user's input: bad usage or options, bad data (:class:`~distcal.DataError`),
a bad model directory, a bad parameter value, an existing output without
``--overwrite``; one line on stderr and nothing written. Exit 1 for
anything else (a bug or the environment), also one line, with the
traceback under ``--verbose``. SIGTERM is handled like Ctrl-C: temporary
outputs are removed, nothing is published and the exit code is 130, also
when the signal's KeyboardInterrupt was lost in a native callback (see
:data:`~distcal.storage.publish.commit_guard`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn, TextIO

from ..errors import (
    DataError,
    EngineSetupError,
    ModelError,
    OutputPathError,
    ParameterError,
    UsageError,
)
from ..jsonsafe import json_safe
from ..storage import OutputExistsError, commit_guard
from .backend import Backend, check_input_files, one_line
from .commands import COMMANDS
from .options import resolve_options
from .parser import attach_negative_values, build_parser, read_url_arguments

__all__ = ["run", "exit_process", "BackendFactory"]

BackendFactory = Callable[[dict[str, Any]], Backend]
# The library's advice to callers, as the command line's options say it.
_CLI_WORDS = (("pass on_invalid='drop'", "pass --on-invalid drop"),
              ("(pass weight_col=None)", "(leave out --weight-col)"),
              ("pass score= the SQL of its elements (K expressions;",
               "pass --score-cols, the SQL of its elements comma-separated, e.g. p[0],p[1],"
               "p[2] in Spark SQL (K expressions;"),
              ("pass increasing=True or False", "pass --increasing true or false"),
              ("increasing='auto'", "--increasing auto"))
_USER_ERRORS = (UsageError, DataError, ModelError, ParameterError, OutputExistsError,
                OutputPathError, EngineSetupError)


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted.

    A handler that kept the stream of its first run would write to (and
    flush) a stream closed since: ``-q``'s redirect of stderr, or the
    capture of an earlier caller of :func:`run` in the same process.
    """

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def _cli_words(msg: str) -> str:
    """``msg`` with the API's advice in the command line's words (--on-invalid ...)."""
    for api, cli in _CLI_WORDS:
        msg = msg.replace(api, cli)
    return msg


class _CliFormatter(logging.Formatter):
    """The log lines of a command-line run speak of its options, not the API's."""

    def format(self, record: logging.LogRecord) -> str:
        return _cli_words(super().format(record))


def _configure_logging(verbose: int, quiet: bool) -> Callable[[], None]:
    """The ``distcal`` logger at -v/-q's level, to stderr; returns what puts it back as
    it was (a run in a caller's process leaves its logging as it found it)."""
    level = logging.ERROR if quiet else (logging.DEBUG if verbose > 1 else
                                         logging.INFO if verbose else logging.WARNING)
    log = logging.getLogger("distcal")
    saved_level, saved_propagate, saved_handlers = log.level, log.propagate, list(log.handlers)
    log.setLevel(level)
    if not any(getattr(h, "_distcal_cli", False) for h in log.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(_CliFormatter("%(asctime)s distcal %(levelname)s %(message)s",
                                           "%H:%M:%S"))
        handler._distcal_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False

    def restore() -> None:
        for h in [h for h in log.handlers if h not in saved_handlers]:
            log.removeHandler(h)
        log.setLevel(saved_level)
        log.propagate = saved_propagate

    return restore


class _Termination:
    """SIGTERM's handler for one run, and the commit guard that remembers it."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def check(self) -> None:
        """Raise again what a native callback may have swallowed (before a commit)."""
        if self.signal is not None:
            raise KeyboardInterrupt(f"signal {self.signal}")


def _silence_children() -> Callable[[], None]:
    """With ``-q``: what the engine's processes print goes nowhere; ours still shows.

    A JVM (Spark's WARN lines and progress bars, which it prints before any
    configuration of ours could apply) and worker processes write to file
    descriptor 2, which they inherit: it is pointed at /dev/null while the
    engine runs, and this process's own stderr (the failure line, the
    ``distcal`` logger's errors) is moved to a copy of the real one. Returns
    the function that puts everything back.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    real = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    saved_stderr = sys.stderr
    ours = open(real, "w", buffering=1, closefd=False)  # noqa: SIM115 (closed below)
    sys.stderr = ours  # the distcal logger's handler writes to sys.stderr as it is

    def restore() -> None:
        ours.flush()
        os.dup2(real, 2)
        os.close(real)
        sys.stderr = saved_stderr
        ours.close()

    return restore


def _say(line: str, stream: TextIO) -> None:
    print(line, file=stream, flush=True)
    if stream is not sys.stderr:
        stream.close()


def run(argv: Sequence[str] | None, prog: str, entry_point: str,
        backend_factory: BackendFactory, errors: Callable[[], TextIO] | None = None,
        process: bool = False) -> int:
    """Parse ``argv``, run the command on a backend, print one JSON line; the exit code.

    The one failure line goes to ``errors()`` (default: this process's stderr).
    The ``distcal`` logger and the warnings filters are set for the run and put
    back after it: a caller's process (a notebook, a test) keeps its own, one
    run at a time (they are the process's). Only a process that is the command
    (``process=True``, the console scripts) also points file descriptor 2 at
    /dev/null under ``-q``, for the output of the engine's own processes.
    """
    err = errors or (lambda: sys.stderr)
    backend = None
    verbose = 0
    previous = None
    silenced: Callable[[], None] | None = None
    restore_logging: Callable[[], None] | None = None
    termination = _Termination()
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, termination.handle)
    guarded = commit_guard.set(termination.check)
    try:
        args = build_parser(prog, entry_point).parse_args(attach_negative_values(
            read_url_arguments(list(sys.argv[1:] if argv is None else argv))))
        verbose = args.verbose
        restore_logging = _configure_logging(args.verbose, args.quiet)
        opts = resolve_options(args, entry_point)
        check_input_files(args.command, opts)
        with warnings.catch_warnings():
            # Overflowing sums are refused with a DataError (or computed
            # exactly) by the fits themselves; numpy's warning on the way
            # would only add lines to the one-line message.
            warnings.filterwarnings("ignore", message="overflow encountered",
                                    category=RuntimeWarning)
            if args.quiet:  # errors only: no warnings either (they are not errors)
                warnings.simplefilter("ignore")
                if process:
                    silenced = _silence_children()
            backend = backend_factory(opts)
            result = COMMANDS[args.command](opts, backend)
            termination.check()  # a run told to stop does not report success
    except _USER_ERRORS as exc:
        # The library's advice in the command line's words.
        msg = one_line(exc)
        msg = _cli_words(msg)
        if not msg.startswith(prog):
            msg = f"{prog}: error: {msg}"
        _say(msg, err())
        return 2
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted", err())
        return 130
    except Exception as exc:  # one line for schedulers; the type helps triage
        if verbose:
            traceback.print_exc(file=sys.stderr)
        _say(f"{prog}: failed: {type(exc).__name__}: {one_line(exc)}", err())
        return 1
    finally:
        commit_guard.reset(guarded)
        try:
            if backend is not None:
                backend.close()
        finally:
            if silenced is not None:
                silenced()
            if restore_logging is not None:
                restore_logging()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    # A command may end with another status once its line is printed (monitor
    # --fail-on-alert: 3 when a period alerts).
    status = int(result.pop("exit_status", 0))
    try:
        print(json.dumps(json_safe(result, why=True), allow_nan=False), flush=True)
    except BrokenPipeError:  # the reader closed stdout (| head): the work is done and kept
        pass
    return status


def exit_process(code: int) -> NoReturn:
    """End a command-line process with ``code`` once its streams are flushed.

    The interpreter's own shutdown is skipped (``os._exit``): pyarrow's I/O
    threads can still be alive when it tears down native thread pools, which
    now and then aborts a process that has already finished its work and said
    so ("terminate called without an active exception", exit -6; Arrow issue
    34314), a failure a scheduler would report. Everything a command writes
    is published, and its engine closed, before :func:`run` returns.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more to say
            pass
    os._exit(code)
