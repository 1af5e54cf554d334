"""Which code wrote a result: hista's version and, when hista runs from a git checkout of its
repository, the commit and whether tracked files had uncommitted changes (``dirty``). Every
results and metrics file hista writes records :func:`code` (docs/architecture.md "Results that
name their code"). An installed wheel has no checkout: commit and dirty are then None."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Optional

from . import __version__

__all__ = ["code"]

#: the repository root of a source checkout (src/hista/provenance.py → the folder above src/)
ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def code() -> dict:
    """``{"hista": version, "commit": sha or None, "dirty": bool or None}``, read once per process.
    Only a checkout whose ``src/hista`` is this package counts: a wheel installed inside some other
    repository (a virtual environment in a project's folder) is not attributed to its commits."""
    checkout = (ROOT / ".git").exists() and (ROOT / "src" / "hista").resolve() == Path(__file__).resolve().parent
    head = _git("rev-parse", "HEAD") if checkout else None
    status = _git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"hista": __version__, "commit": head.strip() if head else None,
            "dirty": bool(status.strip()) if status is not None else None}
