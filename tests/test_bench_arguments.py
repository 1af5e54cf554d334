"""The bench scripts refuse bad arguments as usage errors (issue 41, SPEC §11, §12): exit 2, one
``SCRIPT: error: ...`` line naming the argument, no traceback, nothing run. Every case fails while
the arguments are parsed or checked, before a model loads. The scripts run in this process, as
``python bench/SCRIPT`` runs them (``runpy``, ``__main__``, their folder first on the path), so
that their imports are paid once (issue 66); one case runs as a process of its own, to show that
the exit status and the one-line message reach a shell."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES_FILE = ROOT / "tests" / "data" / "sveb_cases_tiny.jsonl"

#: (script, arguments, what the message must name); "{tmp}" is a folder that exists
CASES = [
    ("eval.py", ["--limit", "0"], "--limit"),
    ("eval.py", ["--suite", "nosuch"], "nosuch"),
    ("generation.py", ["--batches", "abc"], "--batches"),
    ("generation.py", ["--temperature", "0"], "--temperature"),
    ("estimators.py", ["--grid", "x"], "--grid"),
    ("estimators.py", ["--grid", "16:0"], "--grid"),
    ("train_step.py", ["--recipe", "/nonexistent.yaml"], "--recipe"),
    ("train_step.py", ["--steps", "0"], "--steps"),
    ("train_step.py", ["bogus"], "overrides"),
    ("train_step.py", ["--paths", "trl,fast"], "--paths"),
    ("difficulty.py", ["--specs", "builtin:arith?steps=x"], "steps"),
    ("difficulty.py", ["--specs", "gym:chain_sum?max_terms=x"], "max_terms"),
    ("critic.py", ["--G", "0"], "--G"),
    ("advantages_cost.py", ["--prompts", "0"], "--prompts"),
    ("estimation_traffic.py", ["/nonexistent.yaml"], "recipes"),
    ("sveb_quick.py", ["--out", "{tmp}"], "--out"),
    ("sveb_sweep.py", [str(CASES_FILE), "--grid", "layer"], "--grid"),
    ("gpu_check_train.py", ["/nonexistent.yaml"], "recipe"),
    ("bf16_numerics.py", ["--prompts", "0"], "--prompts"),
    ("bf16_numerics.py", ["--task", "nosuch:x"], "nosuch"),
    ("gym_verifier.py", ["--problems", "0"], "--problems"),
    ("grad_cost.py", ["--groups", "0"], "--groups"),
    ("suite_durations.py", ["/nonexistent.xml"], "/nonexistent.xml"),
    ("suite_durations.py", [str(CASES_FILE), "--top", "0"], "--top"),
    ("examples.py", ["--threads", "0"], "--threads"),
    ("top_p.py", ["--settings", "0.7:1.5"], "--settings"),
]


@pytest.mark.parametrize("script,arguments,needle", CASES, ids=[f"{s} {' '.join(a)}" for s, a, _ in CASES])
def test_a_bad_argument_is_a_usage_error(script, arguments, needle, tmp_path, monkeypatch, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / script), *argv])
    monkeypatch.setattr(sys, "path", [str(ROOT / "bench"), *sys.path])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(ROOT / "bench" / script), run_name="__main__")
    out, err = capsys.readouterr()
    assert info.value.code == 2, err
    assert f"{script}: error:" in err and needle in err.splitlines()[-1], err
    assert out == ""  # refused before any work


def test_a_usage_error_reaches_the_shell():
    """The same refusal from a process of its own: exit 2, one line on stderr, no traceback."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "grad_cost.py"), "--groups", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("grad_cost.py: error:") and "--groups" in proc.stderr
