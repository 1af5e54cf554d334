"""Markdown tables of evaluations: one run's results, and runs side by side.

Scores are percentages with one decimal, as in the paper's tables; an interval is the bootstrap
95% interval in brackets. The *paper layout* puts one run per row and one column per
benchmark, then the category means and ALL, the mean of the categories (the paper's Table 6;
with one category, ALL is the paper's "Average" of Tables 5, 7 and 8).
"""

from __future__ import annotations

from typing import Optional, Sequence


def pct(value: Optional[float], signed: bool = False) -> str:
    """A share as a percentage with one decimal (``57.6``; ``+4.1`` when ``signed``)."""
    if value is None:
        return "n/a"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def with_interval(entry: Optional[dict], signed: bool = False) -> str:
    """``mean [lo, hi]`` of an interval ``{"mean", "lo", "hi"}`` in percent."""
    if entry is None:
        return "n/a"
    return f"{pct(entry['mean'], signed)} [{pct(entry['lo'], signed)}, {pct(entry['hi'], signed)}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def paper_layout(labels: Sequence[str], summaries: Sequence[dict], metric: str = "avg") -> list[str]:
    """One row per run, a column per benchmark then per category and ALL (module
    docstring); runs after the first show their difference from it, as the paper's arrows do."""
    first = summaries[0]
    names = list(first["benchmarks"])
    cats = list(first["categories"])
    header = ["run", *names, *(f"{c} mean" for c in cats), "ALL"] if len(cats) > 1 else ["run", *names, "Average"]

    def value(summary: dict, part: str, name: Optional[str]) -> Optional[float]:
        entry = summary[part] if name is None else summary[part].get(name)
        if entry is None:
            return None
        entry = entry["avg"] if metric == "avg" else entry["pass"].get(metric[5:])
        return None if entry is None else entry["mean"]

    rows = []
    for k, (label, summary) in enumerate(zip(labels, summaries)):
        cells = [("benchmarks", n) for n in names] + ([("categories", c) for c in cats] if len(cats) > 1 else [])
        cells.append(("overall", None))
        row = [label]
        for part, name in cells:
            v, base = value(summary, part, name), value(first, part, name)
            text = pct(v)
            if k and v is not None and base is not None:
                text += f" ({pct(v - base, signed=True)})"
            row.append(text)
        rows.append(row)
    return _table(header, rows)


def _problems(benchmark: dict) -> str:
    """A benchmark's problem count, with its distinct questions when some repeat (results
    written before the count was recorded have none)."""
    n, questions = benchmark["problems"], benchmark.get("questions", benchmark["problems"])
    return str(n) if questions == n else f"{n} ({questions} distinct)"


def result_markdown(results: dict) -> str:
    """The markdown report of one evaluation: the paper layout, then per benchmark
    avg@n and pass@n with intervals, the share of responses without an extractable answer, the
    share cut at the token cap and response lengths; category and overall rows last."""
    s, settings, model = results["summary"], results["settings"], results["model"]
    run = model.get("run") or {}
    origin = f" (hista train run {run['output_dir']}, {run['checkpoint']})" if run else ""
    lines = [f"# hista eval: {model['name']}{origin}", "",
             f"revision `{model['revision']}`; suites {', '.join(settings['suites'])}; max_new_tokens "
             f"{settings['max_new_tokens']}; seed {settings['seed']}; intervals: bootstrap 95% over problems, "
             "a repeated question drawn as one.", ""]
    lines += paper_layout([model["name"]], [s]) + [""]
    rows = []
    for name, b in s["benchmarks"].items():
        n = b["samples_per_problem"]
        length = b["length"]
        rows.append([name, b["category"], _problems(b), f"{b['temperature']:g}", str(n),
                     f"avg@{n} {with_interval(b['avg'])}", f"pass@{n} {with_interval(b['pass'][str(n)])}",
                     f"{100 * b['no_answer']:.1f}%", f"{100 * b['truncated']:.1f}%",
                     f"{length['mean']:.0f} / {length['median']:.0f} / {length['p90']:.0f} / {length['max']}"])
    for c, entry in s["categories"].items():
        rows.append([f"**{c}** (mean of {len(entry['benchmarks'])})", c, "", "", "", with_interval(entry["avg"]),
                     "", "", "", ""])
    rows.append(["**ALL** (mean of categories)", "", "", "", "", with_interval(s["overall"]["avg"]), "", "", "", ""])
    lines += _table(["benchmark", "category", "problems", "temperature", "samples", "accuracy", "pass@k",
                     "no answer", "truncated", "tokens mean / median / p90 / max"], rows)
    return "\n".join(lines) + "\n"


def compare_markdown(comparison: dict) -> str:
    """The markdown of :func:`hista.evaluation.compare.compare`: the paper layout,
    then per benchmark, category and ALL each run's score with its interval and each later
    run's paired difference from the first with its interval."""
    runs, metric = comparison["runs"], comparison["metric"]
    labels = [r["label"] for r in runs]
    lines = [f"# hista eval compare ({metric})", ""]
    lines += [f"- {r['label']}: model {r['model']} (revision `{r['revision']}`), results {r['path']}" for r in runs]
    if comparison["differences"]:
        lines += ["", "Settings differ (compared with --force): " + "; ".join(comparison["differences"])]
    lines += ["", *paper_layout(labels, [r["summary"] for r in runs], metric), ""]
    header = ["", "category", "problems", labels[0]]
    for label in labels[1:]:
        header += [label, f"{label} − {labels[0]}"]
    rows = []
    for part, title in (("benchmarks", None), ("categories", "**{}** mean"), ("overall", "**ALL**")):
        for name, row in comparison["table"][part].items():
            cells = [title.format(name) if title else name, row.get("category", ""), str(row.get("problems", "")),
                     with_interval(row["values"][0])]
            for value, diff in zip(row["values"][1:], row["differences"]):
                cells += [with_interval(value), with_interval(diff, signed=True)]
            rows.append(cells)
    lines += _table(header, rows)
    lines += ["", f"Differences are paired over the problems both runs have (bootstrap 95% interval over problems, "
                  f"seed {comparison['seed']})."]
    return "\n".join(lines) + "\n"
