"""``sveb run``: build, evaluate and report in one call (SPEC §8), the project's main
demonstration. ``hista.sveb.run`` is this module's :func:`run`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ..jsonio import check_output_dir, write_json_atomic
from . import report
from .build import BuildConfig, build
from .eval import evaluate
from .presets import DEFAULT_METHODS, preset


def run(settings: Union[str, BuildConfig] = "quick", out: Union[str, Path] = "runs/sveb", *,
        methods: Sequence[str] = DEFAULT_METHODS, overrides: Optional[dict[str, Any]] = None,
        device: Optional[str] = None, progress: bool = True) -> dict:
    """Build (or resume) ``out/cases.jsonl`` with a preset's settings (by name, or a
    BuildConfig) and ``overrides`` of its fields, evaluate ``methods`` on it into
    ``out/results.json``, and write the report (``report.md``, ``report.json``, plots) into
    ``out`` (SPEC §8). Returns the build counts, the output paths, the summary and the labels."""
    config = preset(settings) if isinstance(settings, str) else settings
    config = dataclasses.replace(config, **(overrides or {}))
    out = Path(out)
    check_output_dir(out, ("cases.jsonl", "results.json", "report.md", "report.json", "mae.png", "differences.png",
                           "delta.png"))
    cases_path, results_path = out / "cases.jsonl", out / "results.json"
    counts = build(config, cases_path, progress=progress)
    results = evaluate(cases_path, methods, device=device, progress=progress)
    write_json_atomic(results_path, results)
    paths = report.write_report(results["summary"], results["cases"], list(results["methods"]), out,
                                labels=results["labels"])
    return {"counts": counts, "cases": cases_path, "results": results_path, "report": paths,
            "summary": results["summary"], "labels": results["labels"]}
