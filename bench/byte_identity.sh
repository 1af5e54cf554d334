#!/usr/bin/env bash
# Byte-identity check of a behaviour-preserving change (issue 67): the same SVEB outputs from two
# source trees. For each tree: `sveb report` of every committed SVEB results file, `sveb eval` of
# model-free methods on CASES under both protocols (and its report), `sveb sweep` of four points on
# CASES; then every output file is compared byte for byte (the results' `code` field, which names
# the commit, left out). Prints one line per differing file and the count; exits 1 if any differs.
#
#     git worktree add /tmp/before <commit>      # the tree before the change
#     bench/byte_identity.sh /tmp/before/src src CASES.jsonl [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 3 ]] || { echo "usage: $0 BEFORE_SRC AFTER_SRC CASES.jsonl [OUT]" >&2; exit 2; }
BEFORE=$(realpath "$1") AFTER=$(realpath "$2") CASES=$(realpath "$3") OUT=${4:-runs/byte-identity}
PY=${PYTHON:-.venv/bin/python}
hista() { PYTHONPATH=$SRC OMP_NUM_THREADS=1 "$PY" -c "import sys; from hista.cli import main; sys.argv[0] = 'hista'; sys.exit(main())" "$@" > /dev/null 2>&1 || echo "failed: hista $*" >&2; }
files=$(git ls-files 'results/*.json' | grep -E '/(results[^/]*|segments-s1-[^/]*|[^/]*-(report|selection))\.json$')
for side in before after; do
  SRC=$BEFORE; [[ $side == after ]] && SRC=$AFTER
  o=$OUT/$side; rm -rf "$o"; mkdir -p "$o"
  n=0; for f in $files; do n=$((n + 1)); hista sveb report --results "$f" --out "$o/report-$n"; done
  for p in leak-free paper; do
    hista sveb eval --cases "$CASES" --out "$o/eval-$p.json" --methods "grpo,numca,numca-reference,mc?num=2" --protocol $p
    hista sveb report --results "$o/eval-$p.json" --out "$o/eval-$p-report"
  done
  printf -- "- numca\n- numca-reference\n- mc?num=1\n- mc?num=2\n" > "$o/specs.yaml"
  hista sveb sweep --cases "$CASES" --out "$o/sweep" --specs "$o/specs.yaml" --select-on
done
differ=0
while read -r f; do
  a=$OUT/before/$f b=$OUT/after/$f
  if [[ $f == *.json ]]; then
    same=$("$PY" -c "import re, sys; t = [re.sub(r'\"code\": *\{[^{}]*\}', '', open(p).read()) for p in sys.argv[1:]]; print(t[0] == t[1])" "$a" "$b")
  else
    cmp -s "$a" "$b" && same=True || same=False
  fi
  [[ $same == True ]] || { echo "differs: $f"; differ=$((differ + 1)); }
done < <(cd "$OUT/before" && find . -type f | sort)
echo "$(cd "$OUT/before" && find . -type f | wc -l) files compared ($(echo "$files" | wc -w) results files reported), $differ differ"
[[ $differ == 0 ]]
