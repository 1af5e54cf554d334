"""Evaluation of policies on benchmark suites: ``hista eval`` and ``hista eval compare``.

:mod:`.suites` (benchmarks, presets, problems), :mod:`.checkpoint` (what ``--model`` names,
``hista train`` runs included), :mod:`.metrics` (avg@k, pass@k, bootstrap intervals),
:mod:`.store` (the per-problem file that makes an evaluation resumable), :mod:`.summary`,
:mod:`.run` (:func:`evaluate`), :mod:`.compare` (:func:`compare`) and :mod:`.report`
(markdown tables).
"""

from .checkpoint import ModelSource
from .compare import compare
from .metrics import pass_at_k
from .run import EvalConfig, check_suites, evaluate, output_paths, read_results
from .suites import PRESETS
from .summary import summarise

__all__ = ["PRESETS", "EvalConfig", "ModelSource", "check_suites", "compare", "evaluate", "output_paths", "pass_at_k",
           "read_results", "summarise"]
