"""The serving engine as users read it, for the layers below its room (config, planning, quantize
cannot import pipeline/engines/; the stages above read it here too, so each name is said once):
its name, the release whose rules the planners follow, its serve command, its package and the
eval backend that runs on it. Standard library only: `make setup` reads RELEASE with a bare
python3 (engines/vllm/cuda_builds.py)."""

ENGINE = "vLLM"
RELEASE = "0.32.0"  # the one pin: requirements/serve-*.txt install it (a test checks they agree)
PINNED = f"{ENGINE} {RELEASE.rsplit('.', 1)[0]}"  # as messages cite it: "vLLM 0.32"
PACKAGE = "vllm"  # its distribution: versions recorded under this key in results and cards
SERVE_COMMAND = f"{PACKAGE} serve"
BACKEND = PACKAGE  # the eval backend that scores on it (--backend), named as lm-eval names it
