"""Argument types of the bench scripts (SPEC §11, §12): a bad value is an argparse usage error
naming the option (exit 2, one line, no traceback), raised while the arguments are parsed,
before any model loads.

Plain Python only (no torch, no hista import at module level), so that a script run with
``PYTHONPATH=OLD/src`` against an older checkout parses its arguments the same way. Each script
imports this module from its own folder (``from arguments import ...``).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def integer(low: int = 1) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (SPEC §11)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: must be an integer >= {low}")
        return value

    return parse


def real(low: float = 0.0, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number >= ``low`` (> ``low`` with ``low_open``; SPEC §11)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: must be a finite number "
                                             f"{'>' if low_open else '>='} {low:g}")
        return value

    return parse


POSITIVE = integer(1)
NON_NEGATIVE = integer(0)
#: a sampling temperature: finite, >= 0 (0 = greedy)
TEMPERATURE = real(0.0)


def seed(text: str) -> int:
    """An argparse type: a seed, an integer in [0, 2**32) (SPEC §11)."""
    value = NON_NEGATIVE(text)
    if value >= 2**32:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: must be an integer in [0, 2**32)")
    return value


def comma_list(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argparse type: a non-empty comma list of ``item`` values (SPEC §11)."""

    def parse(text: str) -> list[T]:
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{text!r} has an empty item: give a comma list such as 1,16,64")
        return [item(part) for part in parts]

    return parse


def grid_cell(text: str) -> tuple[int, ...]:
    """An argparse type: an estimator bench cell ``G:T`` or ``G:T:H`` of integers, G >= 2 and
    T, H >= 1 (SPEC §12)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"{text!r} is not a cell G:T or G:T:H (e.g. 16:2048 or 32:4096:1536)")
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a cell of integers G:T[:H]") from None
    if values[0] < 2 or min(values[1:]) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: G >= 2 (a group), T and H >= 1")
    return values


def existing_file(text: str) -> str:
    """An argparse type: the path of a regular file that exists (SPEC §11)."""
    if not os.path.isfile(os.path.expanduser(text)):
        what = "is a directory" if os.path.isdir(text) else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r} {what}: give a file")
    return text


def existing_folder(text: str) -> str:
    """An argparse type: the path of a folder that exists (SPEC §11)."""
    if not os.path.isdir(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


def new_path(text: str) -> str:
    """An argparse type: a path where nothing exists yet (SPEC §11; a bench that must not resume)."""
    if os.path.lexists(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"{text!r} exists; give a new folder so that nothing is resumed")
    return text


def override(text: str) -> str:
    """An argparse type: a recipe override ``key=value`` (SPEC §9)."""
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return text


def device(text: str) -> str:
    """An argparse type: a torch device this machine has, ``cpu`` or ``cuda[:N]`` (SPEC §11)."""
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: give cpu or cuda")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available() or (index and int(index) >= torch.cuda.device_count()):
            raise argparse.ArgumentTypeError(f"{text!r}: this machine has no such CUDA device")
    return text


def checked(parser: argparse.ArgumentParser, check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``check(*args, **kwargs)``, a library call that validates arguments (a recipe, a suite, a
    grid, a model name), with hista's InputError turned into the ``parser``'s usage error (exit
    2, one line; SPEC §11)."""
    from hista.errors import InputError

    try:
        return check(*args, **kwargs)
    except InputError as exc:
        parser.error(str(exc))
