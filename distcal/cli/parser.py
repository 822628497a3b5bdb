"""The argument parser of the command line and of the job entry points."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from .options import COMMANDS, OPTIONS, add_options

__all__ = ["build_parser", "attach_negative_values", "read_url_arguments"]

_HELP = {
    "fit": "fit a calibration map and save the model directory",
    "apply": "add calibrated probabilities to a table",
    "evaluate": "metrics, plots and an HTML report",
    "threshold": "print the cost-optimal threshold as JSON",
    "discretize": "MODL's Bayes-optimal intervals of the score for any class labels",
    "export": "write a model as SQL, ONNX or an MLflow model (docs/export.md)",
    "summarize": "write the exact mergeable summary of the rows (docs/history.md)",
    "monitor": "calibration over time from one summary per period: alerts and a report",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def build_parser(prog: str, entry_point: str) -> argparse.ArgumentParser:
    """The parser of ``prog``: every subcommand (``COMMANDS``) with the options of
    ``entry_point``."""
    from .. import __version__

    # @FILE stands for the arguments in FILE, one per line (argparse's own rule; a URL:
    # read_url_arguments): a scheduler writes a window of summary directories there
    # (docs/history.md).
    parser = _Parser(prog=prog, description="Exact probability calibration and thresholds; "
                     "@FILE reads arguments from FILE (a path or URL), one per line.",
                     fromfile_prefix_chars="@")
    parser.add_argument("--version", action="version", version=f"distcal {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        p = sub.add_parser(command, help=_HELP[command], description=_HELP[command])
        add_options(p, command, entry_point)
        loud = p.add_mutually_exclusive_group()
        loud.add_argument("-v", "--verbose", action="count", default=0,
                          help="log what is read, the engine's path and the time per phase "
                               "(-vv: debug), and show tracebacks (default: warnings only)")
        loud.add_argument("-q", "--quiet", action="store_true", default=False,
                          help="log errors only, no progress bar (default: warnings)")
    return parser


def read_url_arguments(argv: list[str]) -> list[str]:
    """``@URL`` (``@s3://...``, ``@file:///...``, any fsspec URL) replaced by the lines of
    the file there, one argument a line, as argparse reads a local ``@FILE``: a
    scheduler writes the window's arguments beside the data, wherever that is."""
    out: list[str] = []
    for arg in argv:
        if not (arg.startswith("@") and "://" in arg):
            out.append(arg)
            continue
        try:
            import fsspec

            with fsspec.open(arg[1:], "rt", encoding="utf-8") as f:
                out.extend(f.read().splitlines())
        except ImportError as exc:
            raise UsageError(f"{arg}: reading arguments from a URL needs fsspec "
                             "(pip install fsspec, and its filesystem's package)") from exc
        except (OSError, ValueError) as exc:
            raise UsageError(f"{arg}: cannot read the arguments there: {exc}") from exc
    return out


def attach_negative_values(argv: list[str]) -> list[str]:
    """``--cost-fp -1e-3`` as ``--cost-fp=-1e-3``: a value starting with "-" after an
    option that takes one.

    argparse takes "-inf", "-1e3" or "-x" for an option of its own and fails
    with "expected one argument"; only words that are no option of ours
    are attached, so ``--score-col -v`` still reads ``-v`` as the flag.
    """
    takes_value = {"--" + o.name for o in OPTIONS if o.kind is not bool}
    short_flags = {"-v", "-q", "-h"}  # a word starting with "--" is never attached
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if (tok in takes_value and i + 1 < len(argv) and argv[i + 1].startswith("-")
                and argv[i + 1] not in short_flags and not argv[i + 1].startswith("--")):
            out.append(f"{tok}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out
