"""Task source ``builtin:NAME[?k=v&k=v]``: the seeded, difficulty-controlled generators.

A generator is a module of this package with ``NAME``, ``DESCRIPTION``, ``KNOBS`` and
``load(spec, query, n, seed, split)``, listed in :data:`BUILTINS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hista.errors import InputError
from hista.tasks import arith, choice
from hista.tasks.base import TaskSource, register

#: Built-in generators by name.
BUILTINS = {module.NAME: module for module in (arith, choice)}


@register("builtin")
class BuiltinSource(TaskSource):
    """``builtin:NAME[?k=v&k=v]``: problems drawn by a seeded generator."""

    description = f"seeded generators {', '.join(f'builtin:{k}' for k in BUILTINS)} with options ?k=v&k=v"

    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """Generate ``n`` problems (default 1000) of generator ``NAME`` with options ``k=v``
        for ``split``, deterministically in (options, seed, split, index)."""
        name, _, query = rest.partition("?")
        module = BUILTINS.get(name.strip())
        if module is None:
            raise InputError(f"unknown built-in task {name!r} in 'builtin:{rest}'; built-in tasks: "
                             f"{', '.join(BUILTINS)}", field="spec")
        return module.load(f"builtin:{rest}", query, n=n, seed=seed, split=split)

    def check(self, rest: str) -> None:
        """Validate the generator name and options by generating one problem."""
        self.load(rest, n=1)

    def example(self, tmp_dir: Path) -> str:
        """A one-step arithmetic generator; needs no files."""
        return "arith?steps=1"
