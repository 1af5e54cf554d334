"""``sveb run``: build, evaluate and report in one call, the project's main
demonstration. ``hista.sveb.run`` is this module's :func:`run`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from .. import tasks
from ..jsonio import check_not_inputs, check_output_dir, write_json_atomic
from . import report
from .build import build
from .eval import evaluate
from .labels import report_labels
from .methods import from_results
from .presets import DEFAULT_METHODS, BuildConfig, preset

#: the λ of the critics ``run(with_critic=True)`` trains (the paper's Table 1)
CRITIC_LAMS = (0.95, 1.0)
#: the methods those critics add
CRITIC_METHODS = tuple(f"{mode}?lam={lam:g}" for mode in ("ppo-1", "ppo-n") for lam in CRITIC_LAMS)


def run(settings: Union[str, BuildConfig] = "quick", out: Union[str, Path] = "runs/sveb", *,
        methods: Sequence[str] = DEFAULT_METHODS, overrides: Optional[dict[str, Any]] = None,
        device: Optional[str] = None, progress: bool = True, with_critic: bool = False,
        protocol: str = "leak-free") -> dict:
    """Build (or resume) ``out/cases.jsonl`` with a preset's settings (by name, or a
    BuildConfig) and ``overrides`` of its fields, evaluate ``methods`` on it into
    ``out/results.json``, and write the report (``report.md``, ``report.json``, plots) into
    ``out``. With ``with_critic`` the PPO critics of :data:`CRITIC_METHODS` are
    trained on the cases into ``out/critics`` (:func:`hista.sveb.critic_training.train_critics` with its
    defaults, PPO-1 in 5 folds or one per problem when fewer; resumed when interrupted) and
    their methods are evaluated after ``methods``. ``protocol``: how each case's group is shown
    to the methods (:func:`hista.sveb.eval.evaluate`). Returns the build counts, the output
    paths, the summary and the labels."""
    config = preset(settings) if isinstance(settings, str) else settings
    config = dataclasses.replace(config, **(overrides or {}))
    out = Path(out)
    names = ("cases.jsonl", "results.json", *report.REPORT_FILES.values())
    check_not_inputs([out / name for name in names], tasks.input_files(config.tasks))
    check_output_dir(out, names)
    cases_path, results_path = out / "cases.jsonl", out / "results.json"
    counts = build(config, cases_path, progress=progress)
    critics = None
    if with_critic:
        from .critic_training import train_critics

        critics = [str(out / "critics")]
        train_critics(cases_path, out / "critics", mode=["ppo-1", "ppo-n"], lam=list(CRITIC_LAMS), folds=None,
                      device=device, progress=progress)
        methods = list(methods) + [m for m in CRITIC_METHODS if m not in methods]
    results = evaluate(cases_path, methods, device=device, progress=progress, critics=critics, protocol=protocol)
    write_json_atomic(results_path, results)
    chosen = from_results(results)
    paths = report.write_report(results["summary"], results["cases"], chosen, out, paired=results["paired"],
                                protocol=protocol)
    return {"counts": counts, "cases": cases_path, "results": results_path, "report": paths,
            "summary": results["summary"], "labels": report_labels(chosen)}
