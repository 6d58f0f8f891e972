#!/usr/bin/env bash
# gpu-check on a bare GPU machine: no network, no virtualenvs, the machine's own python3 with its
# CUDA torch and transformers. Run from the repository root, with .carry/wheels carried beside
# it (`make gpu-wheels` makes them on a machine with the registries). The vLLM steps are skipped
# and said so (no serving env there). Writes gpu-check.json to $OUT (or the current folder).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.carry/wheels
if ! compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "error: gpu-check-bare: no wheels in $WHEELS: run make gpu-wheels and carry it" >&2
    exit 2
fi
SITE="${TMPDIR:-/tmp}/gpu-check-site"
# --upgrade: a rerun replaces what an earlier run installed there, never keeps it
python3 -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$PWD" PIPELINE_CACHE="${PIPELINE_CACHE:-$PWD/.cache}" HF_HUB_OFFLINE=1
exec python3 -m pipeline.core.gpu_check --json "${OUT:-.}/gpu-check.json" "$@"
