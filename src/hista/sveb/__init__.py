"""SVEB, the State Value Estimation Benchmark: build cases, evaluate estimators
against Monte-Carlo targets, report tables and plots; :func:`run` does all three. The names an
analysis of SVEB's files needs: :func:`read_cases` (a case file's cases, for evaluation),
:func:`read_case_records` (every record of a case file, skipped problems included),
:func:`read_results` (a results file, its cases as :class:`CaseRow`), :func:`bootstrap_ci`,
:func:`mcs_error`, :func:`case_problems` and :func:`rank_summary`.

Each name loads its module on first use (PEP 562), so that reading the settings of
:mod:`hista.sveb.presets` (as ``hista --help`` does) imports no torch."""

import importlib
from typing import Any

#: public name -> (module of this package, name there)
_PUBLIC = {"run": ("pipeline", "run"), "read_cases": ("cases", "read_cases"), "read_case_records": ("cases", "read"),
           "read_results": ("results", "read"), "CaseRow": ("rows", "CaseRow"),
           "bootstrap_ci": ("metrics", "bootstrap_ci"), "mcs_error": ("metrics", "mcs_error"),
           "case_problems": ("metrics", "case_problems"), "rank_summary": ("ranks", "rank_summary")}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        module, attr = _PUBLIC[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
