"""The README's library snippet and the scripts of examples/ run as a new user runs them (issue
47; docs/estimators.md "Use in your own loop"): each in a process of its own, on the embedded
model, offline, printing what it computed. The tiny random model would earn no reward, so its
advantages would all be zero and the examples would show nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the threads are the worker's share of the cores (tests/conftest.py); the examples' own claim, two
#: minutes on two cores, is timed by bench/examples.py
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def _run(args: list[str], timeout: int = 600) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=ENV, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_readme_snippet_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"As a library.*?```python\n(.*?)```", readme, re.S).group(1)
    out = _run(["-c", snippet])
    assert re.match(r"torch\.Size\(\[4, \d+\]\) tensor\(\[", out), out


def test_own_loop_takes_policy_gradient_steps_with_credit_that_differs_from_grpo():
    """Issue 66: the example trains on groups with mixed rewards, shows Hista's credit beside
    GRPO's where they differ, and what the step did. One step of two problems (every step runs the
    same code; bench/examples.py times the default, two steps of four)."""
    out = _run(["examples/own_loop.py", "--steps", "1", "--problems", "2"])
    steps = re.findall(r"^step (\d): mean reward ([\d.]+), (\d) of 2 groups with mixed rewards", out, re.M)
    assert [s[0] for s in steps] == ["0"] and all(int(s[2]) > 0 for s in steps), out
    differ = re.findall(r"hista's credit differs from GRPO's by more than 0.1 on (\d+) of (\d+) tokens", out)
    assert len(differ) == 1 and all(0 < int(n) <= int(total) for n, total in differ), out
    assert re.search(r"^ +[-+]\d\.\d{3} +[-+]\d\.\d{3}  '", out, re.M), out  # the response's credit, run by run
    moved = re.findall(r"rewarded completions by ([-+][\d.]+), of the \d+ unrewarded by ([-+][\d.]+)", out)
    assert len(moved) == 1 and all(float(up) > float(down) for up, down in moved), out


def test_compare_estimators_prints_values_that_differ_and_errors():
    """Issue 66: states of groups with mixed rewards, valued differently by the estimators."""
    out = _run(["examples/compare_estimators.py", "--continuations", "4"])
    rows = re.findall(r"rollout \d t=\d+ +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) ", out)
    assert 6 <= len(rows) <= 8, out
    assert any(grpo != other for _, grpo, *others in rows for other in others), out  # credit that differs
    assert any(float(grpo) > 0 for _, grpo, *_ in rows), out
    for name in ("grpo", "hista", "numca"):
        assert re.search(rf"MAE against Monte Carlo \(4 continuations per state\), {name}: [\d.]+ over "
                         rf"{len(rows)} states", out), out
