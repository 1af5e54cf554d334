"""How SVEB numbers are shown (SPEC §8 ``report``, ``sweep``): the number formats, the caption
fragment that says what an interval resampled, and the figure canvas both the report and the
sweep draw on. Pure presentation: no SVEB data is read or computed here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from ..jsonio import write_atomic

__all__ = ["finite", "fmt", "signed", "percent", "resampled", "new_figure", "save_figure"]


def finite(x: Any) -> bool:
    """Whether ``x`` is a finite number (a bool is not one), SPEC §8: what a table prints."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt(x: Any) -> str:
    """``x`` with three decimals (``0.252``), or ``n/a`` when it is not a finite number."""
    return f"{x:.3f}" if finite(x) else "n/a"


def signed(x: Any) -> str:
    """``x`` with its sign and three decimals (``-0.023``), or ``n/a`` (SPEC §8: a ΔMAE)."""
    return f"{x:+.3f}" if finite(x) else "n/a"


def percent(x: Any) -> str:
    """``x`` as a whole percentage (``55%``), or ``n/a`` (SPEC §8: a win rate)."""
    return f"{x:.0%}" if finite(x) else "n/a"


def resampled(summary: Mapping[str, Any]) -> str:
    """What the intervals of ``summary`` (of :func:`hista.sveb.metrics.summarise`, of
    :func:`hista.sveb.paired.paired_summary` or of a sweep) resampled, for captions:
    "over problems (cases share problems)" or "over cases" (also when it does not say, as in
    results written before it did)."""
    return "over problems (cases share problems)" if summary.get("resampled") == "problems" else "over cases"


def new_figure(width: float, height: float) -> Any:
    """A matplotlib figure of ``width`` x ``height`` inches on the Agg canvas (SPEC §8 plots):
    the object-oriented API, so no pyplot global state and no GUI backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically (SPEC §11 output files); returns the path."""
    return write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=120), mode="wb", kind="png")
