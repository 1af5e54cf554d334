"""SVEB, the State Value Estimation Benchmark: build cases, evaluate estimators
against Monte-Carlo targets, report tables and plots; :func:`run` does all three.

``run`` loads its module on first use (PEP 562), so that reading the settings of
:mod:`hista.sveb.presets` (as ``hista --help`` does) imports no torch."""

from typing import Any

__all__ = ["run"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from .pipeline import run

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
