"""The selection and report halves of a committed SVEB case file, exactly as the earlier tables
used them: the cases whose ids a committed results file holds (issue 63 re-reports those halves;
`hista sveb split` today groups problems that share a prompt, so it would cut them anew).

    python results/valid-baselines/halves.py CASES.jsonl.gz RESULTS.json OUT.jsonl
"""

import gzip
import json
import sys

cases, results, out = sys.argv[1:4]
wanted = {row["case_id"] for row in json.load(open(results, encoding="utf-8"))["cases"]}
with gzip.open(cases, "rt", encoding="utf-8") as fh:
    lines = [line for line in fh if json.loads(line).get("kind") == "case" and json.loads(line)["key"] in wanted]
if len(lines) != len(wanted):
    sys.exit(f"{cases}: {len(lines)} of the {len(wanted)} cases of {results} found")
with open(out, "w", encoding="utf-8") as fh:
    fh.writelines(lines)
print(f"{out}: {len(lines)} cases")
