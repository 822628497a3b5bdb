"""``python -m distcal ARGS`` in a fresh process each time, without importing it each time.

A new interpreter spends ~0.5 s of CPU importing numpy, pandas, pyarrow and distcal
before the command reads its first argument; a sweep of a few hundred bad inputs
spends most of its time there. Here one server process imports what ``python -m
distcal`` imports first (``distcal.cli.main``; the handshake checks that doing so
printed nothing) and each run is a child forked from it, which then executes
``distcal/__main__.py`` as ``-m`` does (:func:`runpy.run_module`). The run is the
command's own from its first argument on: its own process, working directory,
standard streams (stdin from /dev/null), memory limit, exit code and every byte it
prints. tests/test_cli.py and the other command-line tests start a new interpreter
for every run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

SERVER = textwrap.dedent("""
    import json, os, resource, runpy, sys, traceback

    import distcal.cli.main  # noqa: F401  (what `python -m distcal` imports first)

    control = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    control.write("ready\\n")
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                control.close()
                os.chdir(req["cwd"])
                for fd, name in ((0, os.devnull), (1, req["stdout"]), (2, req["stderr"])):
                    f = os.open(name, os.O_RDONLY if fd == 0 else
                                os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(f, fd)
                    os.close(f)
                if req["as_limit"]:
                    resource.setrlimit(resource.RLIMIT_AS, (req["as_limit"],) * 2)
                sys.argv = ["distcal", *req["argv"]]
                runpy.run_module("distcal", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:  # as the interpreter ends on one
                if isinstance(exc.code, int) or exc.code is None:
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                os._exit(code)
        control.write(json.dumps({"pid": pid}) + "\\n")
        _, status = os.waitpid(pid, 0)
        control.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\\n")
""")


class ForkedCli:
    """Runs of the command line, each in a process forked from one server (see above)."""

    def __init__(self, scratch: Path, env: dict[str, str]):
        self.scratch = scratch
        read, write = os.pipe()
        self.log = scratch / "server.log"
        with open(self.log, "wb") as log:
            self.server = subprocess.Popen([sys.executable, "-c", SERVER, str(write)],
                                           stdin=subprocess.PIPE, stdout=log, stderr=log,
                                           pass_fds=(write,), env=env, text=True)
        os.close(write)
        self.control = os.fdopen(read)
        assert self._line(120) == "ready", self.log.read_text()
        assert self.log.read_text() == "", self.log.read_text()  # the imports print nothing
        self.runs = 0

    def _line(self, timeout: float) -> str:
        if not select.select([self.control], [], [], timeout)[0]:
            raise TimeoutError(f"no answer in {timeout} s")
        return self.control.readline().strip()

    def run(self, argv: list[str], cwd: Path, as_limit: int | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """``python -m distcal *argv`` in ``cwd`` (address space capped at ``as_limit``)."""
        self.runs += 1
        out, err = (self.scratch / f"{self.runs}.{name}" for name in ("out", "err"))
        self.server.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "as_limit": as_limit,
                                            "stdout": str(out), "stderr": str(err)}) + "\n")
        self.server.stdin.flush()
        pid = json.loads(self._line(30))["pid"]
        try:
            code = json.loads(self._line(timeout))["code"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._line(30)
            raise subprocess.TimeoutExpired(["distcal", *argv], timeout) from None
        return subprocess.CompletedProcess(["distcal", *argv], code, out.read_text(),
                                           err.read_text())

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(30)
        self.control.close()
