"""The ``hista`` entry point: the command parser, built from one module per command
group, and :func:`main`, which turns bad input into exit code 2 with a located message."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Optional, Sequence

from .. import __version__
from ..errors import InputError
from . import data, evaluate, sveb, train


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``hista`` command; building it imports no torch."""
    parser = argparse.ArgumentParser(prog="hista", description=(
        "Credit assignment for RL of LLMs: token-level advantages, the SVEB benchmark, training."))
    parser.add_argument("--version", action="version", version=f"hista {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (data, sveb, train, evaluate):
        group.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``hista`` command: bad input (an InputError, or an OSError
    about a path, such as a full disk or a permission) exits 2 with a message naming the file,
    line and field; any other exception is a bug and keeps its traceback."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `hista train RECIPE --dry-run key=value`: overrides after options, as users type them
        if getattr(args, "trailing_overrides", False) and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except InputError as exc:
        print(f"hista: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            print(f"hista: error: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if exc.filename is None:
            raise
        where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        print(f"hista: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hista: interrupted", file=sys.stderr)
        return 130
