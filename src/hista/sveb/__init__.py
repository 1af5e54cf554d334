"""SVEB, the State Value Estimation Benchmark (SPEC §8): build cases, evaluate estimators
against Monte-Carlo targets, report tables and plots; :func:`run` does all three."""

from .pipeline import run

__all__ = ["run"]
