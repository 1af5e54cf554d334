"""A benchmark that ships as one data file of an installed package, named by its part:
``PREFIX:all|train|test``. HumanEval (``humaneval:``) and CHAMP (``champ:``) are such sources.

``all`` is every problem in the file's order; ``train`` and ``test`` are a fixed split by the
problem's position in the file: every :data:`TEST_EVERY`-th problem (the 4th, 8th, ...) is test,
the others train, so that the two share no problem. ``n`` takes the first problems; ``seed``
and the loader's ``split`` are not used.
"""

from __future__ import annotations

import importlib.util
from abc import abstractmethod
from pathlib import Path
from typing import Optional

from hista.errors import InputError
from hista.tasks.base import TaskSource

PARTS = ("all", "train", "test")
#: every TEST_EVERY-th problem of the file (counting from TEST_EVERY - 1) is in the test part
TEST_EVERY = 4


def packaged_file(package: str, relative: str) -> Optional[Path]:
    """The file at ``relative`` inside the installed ``package``, found without importing the
    package (SPEC §7: hista reads a benchmark's data file, never its code), or None."""
    spec = importlib.util.find_spec(package)
    for folder in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / relative
        if path.is_file():
            return path
    return None


def in_part(position: int, part: str) -> bool:
    """Whether the problem at ``position`` (0-based, in the file) is in ``part``."""
    return part == "all" or (position % TEST_EVERY == TEST_EVERY - 1) == (part == "test")


class PartsSource(TaskSource):
    """``PREFIX:all|train|test`` over one packaged data file (module docstring). A
    subclass gives its ``prefix``, the file (:meth:`data_file`, an InputError saying how to
    install it when it is missing) and its records with their positions (:meth:`records`)."""

    prefix: str = ""

    @abstractmethod
    def data_file(self) -> Path:
        """The data file; an InputError saying how to install it when missing."""

    @abstractmethod
    def records(self, path: Path) -> list[tuple[int, dict]]:
        """(position in the file, problem record) of every problem of ``path`` the source keeps; an
        InputError naming the file, line and field for a bad one."""

    def part(self, rest: str) -> str:
        """The part ``rest`` names; an InputError listing the parts otherwise."""
        part = rest.strip().lower()
        if part not in PARTS:
            raise InputError(f"{self.prefix}:{rest}: name the part, one of {', '.join(PARTS)} (e.g. "
                             f"{self.prefix}:all)", field="spec")
        return part

    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """The first ``n`` problems (default all) of the part ``rest`` names, in the file's order."""
        part = self.part(rest)
        records = [r for position, r in self.records(self.data_file()) if in_part(position, part)]
        return records if n is None else records[:n]

    def check(self, rest: str) -> None:
        """The part must be all, train or test and the data file there and sound."""
        self.part(rest)
        self.records(self.data_file())

    def files(self, rest: str) -> list[Path]:
        """The data file."""
        try:
            return [self.data_file()]
        except InputError:
            return []

    def example(self, tmp_dir: Path) -> str:
        """The test part; needs the package that ships the file."""
        try:
            self.data_file()
        except InputError as exc:
            raise NotImplementedError(str(exc)) from None
        return "test"
