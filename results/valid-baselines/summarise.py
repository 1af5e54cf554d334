"""The tables of README.md here from the results files of run.sh and segments.sh (issue 63).

    python results/valid-baselines/summarise.py            # prints markdown
"""

import json
import math
from pathlib import Path

HERE = Path(__file__).parent
SETS = ["sveb-study-short", "sveb-study-long", "train-study-2-s1", "train-study-2-s2"]


def cell(paired: dict, method: str) -> str:
    row = paired["rows"][method]["all"]["all"]
    star = "*" if row["excludes_zero"] else ""
    return f"{row['delta']:+.3f} [{row['lo']:+.3f}, {row['hi']:+.3f}]{star}"


def table(half: str) -> str:
    paths = {s: HERE / f"{s}-{half}.json" for s in SETS}
    found = {s: json.loads(p.read_text()) for s, p in paths.items() if p.exists()}
    if not found:
        return f"(no {half}-half results yet)\n"
    methods = next(iter(found.values()))["paired"]["methods"]
    lines = ["| method | leak | " + " | ".join(f"{s}: ΔMAE vs GRPO (LOO)" for s in found) + " |",
             "|---|---|" + "---|" * len(found)]
    first = next(iter(found.values()))
    for m in methods:
        leak = first["leak"].get(m)
        leak_text = "—" if leak is None or (isinstance(leak, float) and math.isnan(leak)) else f"{leak:.3f}"
        mae = {s: d["paired"]["rows"][m]["all"]["all"]["mae"] for s, d in found.items()}
        lines.append(f"| `{m}` | {leak_text} | " + " | ".join(f"{mae[s]:.3f} ({cell(d['paired'], m)})"
                                                          for s, d in found.items()) + " |")
    return "\n".join(lines) + "\n"


#: the tables as published before issue 63 (paper protocol, the defaults of the time, with their leaks)
BEFORE = {"sveb-study-short": "results/sveb-study/short/results-report-blend-rule-2.json",
          "sveb-study-long": "results/sveb-study/long/results-report-blend-rule-2.json",
          "train-study-2-s1": "results/train-study-2/sveb-1/results-report.json",
          "train-study-2-s2": "results/train-study-2/sveb-2/results-report.json"}


def before_after() -> str:
    """Report halves: ΔMAE vs GRPO as published (paper protocol) and now (leak-free, today's defaults)."""
    lines = ["| set | method | before (paper protocol, leak) | now (leak-free) | leak now |", "|---|---|---|---|---|"]
    for name, old_path in BEFORE.items():
        new_path = HERE / f"{name}-report.json"
        if not new_path.exists():
            continue
        old, new = (json.loads(Path(p).read_text()) for p in (HERE.parent.parent / old_path, new_path))
        for m in ("hista", "numca", "probe", "blend"):
            if m in old["paired"]["rows"]:
                lines.append(f"| {name} | `{m}` | {cell(old['paired'], m)} | {cell(new['paired'], m)} | "
                             f"{new['leak'][m]:.3f} |")
    return "\n".join(lines) + "\n"


def segments() -> str:
    out = []
    for protocol in ("leak-free", "paper"):
        path = HERE / f"segments-s1-{protocol}.json"
        if path.exists():
            seg = json.loads(path.read_text())["segments"]
            out.append(f"Protocol `{protocol}`: {seg['n_pairs']} segments, {seg['n_decisive']} decisive\n")
            out.append("| method | error [95%] | right sign (decisive) | no credit (decisive) |\n|---|---|---|---|")
            for m, c in seg["methods"].items():
                out.append(f"| `{m}` | {c['error']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] | {c['sign']:.0%} | "
                           f"{c['flat']:.0%} |")
            out.append("")
    return "\n".join(out)


print("## Selection halves\n\n" + table("selection") + "\n## Report halves\n\n" + table("report")
      + "\n## Before and after (report halves)\n\n" + before_after() + "\n## Segments\n\n" + segments())
