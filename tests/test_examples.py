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
ENV = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}


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


def test_own_loop_takes_policy_gradient_steps():
    out = _run(["examples/own_loop.py", "--steps", "2"])
    steps = re.findall(r"^step (\d): mean reward ([\d.]+), hista advantages over (\d+) tokens", out, re.M)
    assert [s[0] for s in steps] == ["0", "1"], out


def test_compare_estimators_prints_values_and_errors():
    out = _run(["examples/compare_estimators.py", "--group", "4", "--continuations", "4"])
    assert len(re.findall(r"rollout \d t=\d+", out)) == 8, out
    for name in ("grpo", "hista"):
        assert re.search(rf"MAE against Monte Carlo \(4 continuations per state\), {name}: [\d.]+ over 8 states", out)
