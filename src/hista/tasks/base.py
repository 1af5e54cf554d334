"""The interface every task source implements (CONTRIBUTING.md)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Optional

from hista.registry import Registry


class TaskSource(ABC):
    """A source of problem records ``{id, problem, answer, verifier, field}`` (plus an optional
    ``meta`` dict), named in a spec ``PREFIX:REST`` by the prefix it is registered under with
    ``@hista.tasks.register(prefix)``. Only ``REST`` reaches the methods below.

    ``example`` lets the contract tests (tests/tasks/test_source_contract.py) load every registered
    source offline, so a new source is tested the moment it is registered."""

    #: One line saying what the source reads and how ``REST`` is written.
    description: str = ""

    @abstractmethod
    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """Problem records of ``REST``: at most ``n`` of them (None: the source's
        default); ``seed`` and ``split`` are used where the source has such a notion. ``n``,
        ``seed`` and ``split`` arrive validated by :func:`hista.tasks.load`. Raises InputError."""

    @abstractmethod
    def check(self, rest: str) -> None:
        """Validate ``REST`` without downloading anything; raises InputError."""

    def files(self, rest: str) -> list[Path]:
        """The local files ``REST`` reads (§11: inputs that no output of a command may
        overwrite); none by default."""
        return []

    @abstractmethod
    def example(self, tmp_dir: Path) -> str:
        """The ``REST`` of a tiny spec this source loads offline, creating any files it needs
        under ``tmp_dir``. Raises NotImplementedError, with the reason, when the
        source cannot load anything offline here (the contract tests then skip it)."""


def _build(cls: type, name: str, cfg: dict) -> TaskSource:
    return cls(**cfg)


# The registry imports the source modules of this package on first use; they import
# ``register`` from here, below the package face that imports them.
REGISTRY = Registry("task source", "hista.tasks", "hista.tasks", _build,
                    adopt=lambda prefix, cls: register(prefix)(cls))


def register(prefix: str, *, replace: bool = False) -> Callable[[type], type]:
    """Class decorator registering a :class:`TaskSource` under the spec prefix ``prefix``. A taken
    prefix raises ValueError unless ``replace=True``."""

    def wrap(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, TaskSource)):
            raise TypeError(f"@register({prefix!r}) decorates TaskSource subclasses, not {cls!r}")
        if not isinstance(prefix, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", prefix):
            raise ValueError(f"a task source prefix is lower-case letters, digits, '_' or '-', got {prefix!r}")
        if not isinstance(cls.description, str) or not cls.description.strip() or "\n" in cls.description:
            raise ValueError(f"task source {prefix!r} needs a one-line description")
        return REGISTRY.register(prefix, cls, replace=replace)

    return wrap
