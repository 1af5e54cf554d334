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
    found = {s: json.loads((HERE / f"{s}-{half}.json").read_text()) for s in SETS if (HERE / f"{s}-{half}.json").exists()}
    if not found:
        return f"(no {half}-half results yet)\n"
    methods = next(iter(found.values()))["paired"]["methods"]
    lines = [f"| method | leak | " + " | ".join(f"{s}: ΔMAE vs GRPO (LOO)" for s in found) + " |",
             "|---|---|" + "---|" * len(found)]
    first = next(iter(found.values()))
    for m in methods:
        leak = first["leak"].get(m)
        leak_text = "—" if leak is None or (isinstance(leak, float) and math.isnan(leak)) else f"{leak:.3f}"
        mae = {s: d["paired"]["rows"][m]["all"]["all"]["mae"] for s, d in found.items()}
        lines.append(f"| `{m}` | {leak_text} | " + " | ".join(f"{mae[s]:.3f} ({cell(d['paired'], m)})"
                                                          for s, d in found.items()) + " |")
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
                out.append(f"| `{m}` | {c['error']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] | {c['sign']:.0%} | {c['flat']:.0%} |")
            out.append("")
    return "\n".join(out)


print("## Selection halves\n\n" + table("selection") + "\n## Report halves\n\n" + table("report") + "\n## Segments\n\n"
      + segments())
