"""Run the table of bad inputs (tests/reliability/bad_inputs.py) as real ``hista`` processes and print a
markdown table: exit code, whether a traceback was printed, whether any file was changed, and
the first line of the message. ``PYTHONPATH=OTHER/src python tests/helpers/bad_inputs_table.py``
runs it against another checkout (e.g. the commit before a fix)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from bad_inputs import cases, changed, make_files, snapshot  # noqa: E402


def main() -> None:
    only = sys.argv[1:]
    print("| case | exit | traceback | files changed | seconds | message |")
    print("|---|---|---|---|---|---|")
    for case in cases():
        if only and not any(o in case.id for o in only):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_files(root, case)
            before = snapshot(root)
            start = time.time()
            try:
                proc = subprocess.run([sys.executable, "-m", "hista.cli", *case.argv], cwd=root, capture_output=True,
                                      text=True, timeout=120, env={**os.environ, **case.env}, stdin=subprocess.DEVNULL)
                rc, err = str(proc.returncode), proc.stderr
            except subprocess.TimeoutExpired:
                rc, err = "hang (killed at 120 s)", ""
            seconds = time.time() - start
            lost = changed(before, snapshot(root))
            lines = [ln for ln in err.strip().splitlines() if ln.strip()]
            message = (lines[-1] if lines else "").replace("|", "\\|")[:110]
            print(f"| {case.id} | {rc} | {'yes' if 'Traceback' in err else 'no'} | "
                  f"{', '.join(lost) or 'no'} | {seconds:.1f} | {message} |", flush=True)


if __name__ == "__main__":
    main()
