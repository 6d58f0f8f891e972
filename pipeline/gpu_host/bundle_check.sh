#!/usr/bin/env bash
# The bundle's check on an offline GPU host (`make gpu-bundle` made this folder): no network, the
# host's own python3 and CUDA torch. Run it from anywhere:
#     bash <bundle>/check.sh [gpu-check's flags, e.g. --only fp8,gptq]
# Installs the carried wheels with --no-index into a temp folder, puts the carried tiny-llama
# under this host's build key (it is not retrained there), then runs gpu-check's table; writes
# gpu-check.json to $OUT (default: the bundle's folder). PYTHON picks another interpreter.
set -uo pipefail
BUNDLE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
made_for=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['python'])" "$BUNDLE/bundle.json")
have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$made_for" != "$have" ]; then
    echo "error: gpu-bundle: made for Python $made_for, this host's $PY is $have: make gpu-bundle BUNDLE_PYTHON=$have" >&2
    exit 2
fi
SITE=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-site.XXXXXX")
export PIP_NO_INDEX=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
wheels=("$BUNDLE"/wheels/*.whl)
echo "installing ${#wheels[@]} carried wheels with no index into $SITE (Python $have)"
if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
        --target "$SITE" "${wheels[@]}"; then
    echo "error: gpu-bundle: the carried wheels did not install with $PY (see above)" >&2
    exit 2
fi
export PYTHONPATH="$SITE:$BUNDLE/project" GPU_BUNDLE_SITE="$SITE"
export PIPELINE_CACHE=${PIPELINE_CACHE:-$BUNDLE/cache}
key=$("$PY" -c "from pipeline.models.tiny.build import build_key; print(build_key())") || exit 2
if [ ! -f "$PIPELINE_CACHE/tiny-llama-$key/build.json" ]; then
    mkdir -p "$PIPELINE_CACHE" && cp -r "$BUNDLE/tiny-llama" "$PIPELINE_CACHE/tiny-llama-$key"
fi
cd "$BUNDLE/project" || exit 2
exec "$PY" -m pipeline.gpu_host.check --json "${OUT:-$BUNDLE}/gpu-check.json" "$@"
