"""Quantize stage: llm-compressor → compressed-tensors artifact in runs/<model>/<recipe>/.

    python -m pipeline quantize --model tiny-llama --recipe gptq   # = make quantize RECIPE=gptq

Two paths: `model-free` (llm-compressor's model_free_ptq, shard by shard; the default for
data-free recipes) and `oneshot` (the model in memory; every calibrating recipe). `--path`
chooses; the path is an input of the stage (recorded, and part of its fingerprint).

The stage is prepared from a QuantizeRequest (request.py: the loaded model and recipe); how it
runs here — calibration, path, processes, tiny-llama's caps — is policy.py's. Everything a user
can get wrong is checked before the run directory is created.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pipeline.config import recipe
from pipeline.config.engine_name import ENGINE
from pipeline.config.recipe import Calibration, RecipeFile
from pipeline.core import devices, environment, memo, progress, quiet
from pipeline.core.checkpoints import Checkpoints
from pipeline.core.errors import ArtifactCheckError, NotOnThisHost, UserError
from pipeline.core.files import sha256_json, staging_dir
from pipeline.core.rundir import RunDir, StageEntry
from pipeline.core.runs import Runs
from pipeline.data.texts import TextSet, load_texts, source_sha
from pipeline.models import aliases, architecture, integrity
from pipeline.planning import deployment, geometry
from pipeline.planning.geometry import Geometry
from pipeline.planning.weights import artifact_bytes
from pipeline.quantize import (
    calibration_record,
    model_free,
    moe_view,
    oneshot,
    plan,
    policy,
    record,
    resume,
    stage_plan,
    verify,
)
from pipeline.quantize.artifact import shard_bytes, size_metrics, tensor_bytes
from pipeline.quantize.request import QuantizeRequest

ARTIFACT = "artifact"
LIBRARIES = ("llmcompressor", "compressed-tensors", "transformers", "torch", "datasets")
if TYPE_CHECKING:
    from pipeline.core.stage_plan import ArtifactPlan

ONLINE = (
    f"an online recipe quantizes nothing ahead: {ENGINE} does as it loads the 16-bit checkpoint"
    " (eval / serve / run --dry-run check this host)"
)


@dataclass
class QuantizeStage:
    """A recipe's quantize stage: an Artifact (pipeline/artifact/protocol.py), as an import is.
    Made by `prepare` from its request; what the request leaves open, the policy decided."""

    request: QuantizeRequest
    geometry: Geometry
    rundir: RunDir
    decided: policy.Decided
    texts: TextSet | None = field(default=None, init=False)  # loaded when needed (load_texts)
    model_path: Path | None = field(default=None, init=False)  # once load_inputs has run
    calibration_tokens: int | None = field(default=None, init=False)  # counted once loaded
    model_identity: dict = field(default_factory=dict, init=False)
    _planned: tuple[str, dict] | None = field(default=None, init=False, repr=False)
    name: ClassVar[str] = "quantize"
    folder: ClassVar[str] = ARTIFACT
    starts_engine: ClassVar[bool] = False  # quantizing starts no serving engine
    resumable: ClassVar[bool] = True  # a killed run's finished layers or shards are kept
    staging = staticmethod(staging_dir)  # not a field: where work writes, renamed when done

    @property
    def ref(self) -> aliases.ModelRef:
        return self.request.ref

    @property
    def recipe(self) -> RecipeFile:
        return self.request.recipe

    @property
    def calibration(self) -> Calibration:
        return self.decided.calibration

    @property
    def path(self) -> str:
        """model-free or oneshot: an input (recorded, part of the fingerprint)."""
        return self.decided.path

    @property
    def capped(self) -> dict:
        return self.decided.capped

    @property
    def nproc(self) -> int:
        """Processes under torchrun (--nproc, or the policy's choice); not an input: the artifact
        is the same one."""
        return self.decided.nproc

    @property
    def workers(self) -> int:
        """Model-free: shards quantized at once; not an input (the same artifact)."""
        return self.request.workers

    @property
    def max_memory(self) -> int | None:
        return self.request.max_memory

    @property
    def header(self) -> dict:
        return record.header(self)

    @property
    def artifact(self) -> Path:
        """What vLLM loads: the artifact, or for an online recipe the original itself (served
        with the recipe's engine_args)."""
        if self.recipe.online:
            return self.model_folder
        return self.rundir.path / ARTIFACT

    @property
    def model_folder(self) -> Path:
        """model_path, which load_inputs sets (execute() asks inputs() before the work)."""
        if self.model_path is None:
            raise RuntimeError(f"quantize {self.ref.name}: the model is read before load_inputs")
        return self.model_path

    def artifact_for(self, backend: str) -> Path:
        """What an eval backend loads: for hf, a Mixtral artifact's view with the expert names
        transformers maps (pipeline/quantize/moe_view.py), one per quantize result."""

        if backend != "hf" or self.recipe.online or not moe_view.needed(self.artifact):
            return self.artifact
        entry = self.rundir.stage(self.name)
        if entry is None:  # eval asks once the quantize stage has run
            raise UserError(f"no quantize entry for {self.ref.name} × {self.recipe.name}")
        fingerprint = entry.fingerprint[:16]
        return moe_view.ensure(self.artifact, self.rundir.path / moe_view.FOLDER / fingerprint)

    @property
    def hf_refusal(self) -> str | None:
        """Why the hf eval backend cannot run this artifact (None: it can)."""
        return None

    @property
    def log(self) -> Path:
        """Where llm-compressor's and transformers' messages go (pipeline/core/quiet.py)."""
        return self.rundir.path / "logs" / "quantize.log"

    @classmethod
    def prepare(cls, req: QuantizeRequest, runs: Runs) -> "QuantizeStage":
        """Everything checked from the request and configs (the policy's decisions too); no
        weights, no writes; its run folder pulled from object storage, as its stages read."""
        ref, rf = req.ref, req.recipe
        g = geometry.of_model(ref)
        if ref.source == "local":  # a half-copied folder fails here, not after loading
            assert ref.path is not None  # resolve() gives a local model its folder
            integrity.check_weights(ref.path)
        fitted = plan.fitted(rf, g, ref.name)
        if fitted is not rf:  # the preset in smaller groups: what every later stage reads
            req, rf = replace(req, recipe=fitted), fitted
        decided = policy.decide(req, g)
        runs.pull_run(ref.name, rf.name)
        rundir = RunDir(ref.name, rf.name, runs)
        rundir.check_writable()
        return cls(req, g, rundir, decided)

    def memory_verdict(self, max_memory: int | None) -> str | None:
        """Why the planned peak RSS does not fit `max_memory` (default: the memory this host
        has available now); None when it fits."""
        import psutil

        if self.recipe.online:  # vLLM quantizes as it loads: nothing to hold here
            return None
        planned = self.plan()
        limit = max_memory or psutil.virtual_memory().available
        need = planned["memory_bytes"]["cpu_ram_peak_estimate"]
        if need <= limit:
            return None
        gib = 2**30
        given = "--max-memory" if max_memory else "this host has available"
        hint = "a GPU host keeps the model in bf16"
        if self.path == "oneshot" and not model_free.unsupported_for(self.recipe, self.geometry):
            other = replace(self, decided=replace(self.decided, path="model-free"))
            other.model_path = self.model_path  # the same shards read
            needs = other.plan()["memory_bytes"]["cpu_ram_peak_estimate"] / gib
            hint = f"the model-free path needs ~{needs:.1f} GiB (--path model-free)"
        elif self.path == "model-free" and self.workers > 1:
            hint = "fewer --workers need less"
        return (
            f"quantize {self.ref.name} × {self.recipe.name} ({self.path}) needs ~{need / gib:.1f}"
            f" GiB of CPU RAM by the plan; {given} {limit / gib:.1f} GiB; {hint}"
        )

    def host_fit(self, max_memory: int | None) -> str | None:
        """The Artifact's question (the chain's): this stage's memory verdict."""
        return self.memory_verdict(max_memory)

    def check_memory(self, max_memory: int | None) -> None:
        """Refuse (exit 4) before loading anything a run whose plan does not fit."""
        if why := self.memory_verdict(max_memory):
            raise NotOnThisHost(why)

    def plan(self) -> dict:
        cal = self.calibration
        calibration = {
            "dataset": cal.dataset,
            "split": cal.split,
            "samples": cal.num_samples,
            "max_seq_length": cal.max_seq_length,
        }
        if self.texts is not None and self.texts.texts:  # what it holds, not what was asked
            samples = self.texts.description["samples"]
            calibration["samples"] = samples
            if not self.texts.description.get("packed"):  # packed: samples × max_seq_length
                calibration["max_seq_length"] = -(-self._calibration_tokens() // samples)
        model = {"name": self.ref.name, "id": self.ref.hub_id or self.ref.load_id}
        gpus, route = environment.gpus(), self._route()
        # built once for what it reads: the dry run, the host's fit, the chain's plan and the
        # check before loading all ask; the calibration text held, once loaded, changes it
        key = sha256_json([calibration, model, gpus, route, self.nproc])
        if self._planned is not None and self._planned[0] == key:
            return self._planned[1]
        built = plan.build(self.recipe, self.geometry, model, calibration, gpus, route)
        if self.nproc > 1 and "online" not in built:
            built = _per_process(built, self.nproc, bool(gpus)) | {"processes": self.nproc}
        if self.decided.processes:
            built = built | {"processes_why": self.decided.processes}
        self._planned = (key, built)
        return built

    def describe_plan(self) -> tuple[dict, str]:
        """What `quantize --dry-run` prints (--json, text): the plan and whether this host
        holds it."""
        fit = self.host_fit(self.max_memory) or "fits"
        if self.recipe.online:  # said, not "fits": nothing was asked of this host
            fit = f"not checked: {ONLINE}"
        found = self.plan() | {"host_fit": fit}
        return found, plan.render(found)

    def verdict(self, entry: StageEntry) -> None:
        return None  # no gates: the eval after it has them

    def stage_plan(self) -> "ArtifactPlan":
        """The chain's view of this stage: where it runs, memory, files, time."""
        return stage_plan.plan(self)

    def _route(self) -> dict:
        """How the planner should size this run: path, workers, and the shards it reads."""

        folder = self.model_path or self.ref.path
        shards = shard_bytes(folder) if folder else None
        return {"path": self.path, "workers": self.workers, "shards": shards}

    def load_inputs(self) -> None:
        """Materialize the model (build / download); no run dir yet. The calibration text
        loads when it is needed (load_texts)."""
        if self.model_path is not None:
            return
        self.model_path, self.model_identity = aliases.materialize(self.ref)
        if self.ref.from_hub:  # a cut-short download: a partial snapshot
            integrity.check_weights(self.model_path)

    def load_texts(self) -> None:
        """The calibration text (through `datasets`; a tokenizer when packing or chatting)."""
        self.load_inputs()
        if self.texts is not None or self.calibration.num_samples == 0:
            return
        tokenizer = None
        if self.calibration.chat_template or self.calibration.pack:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.texts = load_texts(self.calibration, tokenizer)

    def _calibration_tokens(self) -> int:
        """The loaded calibration texts' tokens, each cut at max_seq_length: what llm-compressor
        caches at every layer boundary (a sample at a time, unpadded). A local corpus's
        documents are far shorter than 2,048 tokens (python-docs: 136 documents, ~400 each)."""
        if self.calibration_tokens is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            assert self.texts is not None  # plan() counts them once loaded
            texts = self.texts.texts
            texts = [t if isinstance(t, str) else tokenizer.apply_chat_template(t, tokenize=False)
                     for t in texts]  # fmt: skip
            limit = self.calibration.max_seq_length
            found = tokenizer(texts, add_special_tokens=False)["input_ids"]
            self.calibration_tokens = sum(min(len(ids), limit) for ids in found)
        return self.calibration_tokens

    def _calibration_data(self) -> dict | None:
        """The calibration text's description and hash: remembered per source (the settings,
        the data's own hash, the tokenizer where it decides the count), so that a cached run
        does not import `datasets` to find it has nothing to do."""
        cal = self.calibration
        if cal.num_samples == 0:
            return None
        column = "messages" if cal.chat_template else cal.text_column
        tokenized = self.model_identity if cal.chat_template or cal.pack else None
        data_sha = source_sha(cal.dataset, cal.config_name, cal.split, column)
        source = [cal.model_dump(), data_sha, tokenized]
        found = memo.recall("calibration-texts", source)
        if found is None:
            self.load_texts()
            assert self.texts is not None  # num_samples > 0: load_texts loaded them
            found = {**self.texts.description, "sha256": self.texts.fingerprint}
            memo.remember("calibration-texts", source, found)
        return {**found, "max_seq_length": cal.max_seq_length}

    def inputs(self) -> dict:
        self.load_inputs()
        data = self._calibration_data()
        found = {
            "model": self.model_identity,
            "recipe_sha256": self.recipe.section_sha256("quantization", "calibration"),
            "data": data,
            "libraries": environment.library_versions(LIBRARIES),
            "path": self.path,
        }
        return found | ({"capped": self.capped} if self.capped else {})

    def before_work(self) -> None:
        # llm-compressor's own validation of the modifiers (~10 s of imports), only when the
        # artifact is to be made: a cached run never imports it
        if not self.recipe.online:
            devices.check_torch()  # GPUs listed that torch cannot use: exit 4, not a CPU run
            self.check_memory(self.max_memory)  # before any weight is loaded
            recipe.check_modifiers(self.recipe)

    def outputs(self, folder: str) -> dict[str, str]:
        return {"artifact": folder}

    def work(self, out: Path, checkpoints: Checkpoints | None = None) -> dict:
        if self.recipe.online:
            return _online(self, out)
        kept = resume.start(self, checkpoints)  # says what an earlier attempt left, or why not
        self.load_texts()
        if self.texts and (
            short := calibration_record.shortfall(self.texts.description, self.calibration.dataset)
        ):
            print(short, file=quiet.terminal(), flush=True)
        return _quantize(self, out, kept)

    def entry(self) -> StageEntry:
        """The finished quantize entry later stages build on."""
        return record.finished_entry(self)

    def load_results(self, entry: StageEntry) -> dict:
        return record.results(entry)


def _online(job: QuantizeStage, out: Path) -> dict:
    """An online recipe makes no artifact: vLLM quantizes the original as it loads it. The
    entry records that (later stages build on it like on an artifact)."""
    import json

    (out / "online.json").write_text(
        json.dumps({"model": str(job.model_path), "engine_args": job.recipe.engine_args()}) + "\n"
    )
    return {
        "online": job.recipe.online,
        "engine_args": job.recipe.engine_args(),
        "tensor_bytes": tensor_bytes(job.model_folder),  # what is stored and loaded: the original
        "reload": {
            "transformers": False,
            "reason": f"{ENGINE} quantizes it as it loads (online {job.recipe.online}); "
            "transformers would run the 16-bit original",
        },
    }


def _quantize(job: QuantizeStage, out: Path, kept: Checkpoints | None) -> dict:
    import time

    t0 = time.monotonic()
    desc = f"quantize {job.ref.name} × {job.recipe.name}"
    # the pipeline's bars first: libraries' output (and their bars) go to the log below
    if job.path == "model-free":
        bars = [progress.bar(total=1, desc=f"{desc} (model-free)", unit="shard")]
    else:
        bars = [progress.bar(total=3, desc=desc, unit="step")]
        if job.texts is not None and job.nproc == 1:  # calibrating: layer by layer
            bars.append(progress.bar(total=1, desc="  layers", unit="layer"))
    with quiet.to_log(job.log, llmcompressor=True), quiet.library_output(job.log):
        if job.path == "model-free":
            ignore = model_free.derived_ignore(job.model_folder, job.recipe)
            done = model_free.run(
                job.model_folder, out, job.recipe, ignore, job.workers, bars[0], kept
            )
            _copy_tokenizer(job.model_folder, out)
            # as oneshot writes it: the recipe that reproduces this artifact
            (out / "recipe.yaml").write_text(job.recipe.quantization_yaml(job.capped))
            routed, extra = None, {**done, "ignore": ignore}
        else:
            routed = _oneshot(job, out, bars[0], bars[1] if len(bars) > 1 else None, kept)
            bars[0].update()
            extra = {}
        for bar in reversed(bars):
            bar.close()
        seconds = time.monotonic() - t0
        metrics = size_metrics(out, job.model_folder, job.recipe.scheme())
        if len(job.recipe.schemes()) > 1:  # mixed precision: each Linear at its own bits
            theoretical = artifact_bytes(job.recipe, job.geometry, scales=False)
            metrics["theoretical_bytes"] = theoretical
            metrics["ratio_to_theoretical"] = round(metrics["tensor_bytes"] / theoretical, 4)
        if metrics["ratio_to_theoretical"] < 1:  # smaller than its own ideal: a miscount
            raise ArtifactCheckError(
                f"artifact check: {metrics['tensor_bytes']:,} bytes is below the scheme's ideal "
                f"{metrics['theoretical_bytes']:,}: quantized parameters miscounted"
            )
        # the scheme's ideal with its scales, zero points and global scales (the planner's
        # geometry): what is left above it is packing
        ideal = artifact_bytes(job.recipe, job.geometry)
        metrics["ideal_bytes"] = ideal
        metrics["ratio_to_ideal"] = round(metrics["tensor_bytes"] / ideal, 4)
        # where vLLM 0.32 loads it (TP 1–8, expert parallel for MoE): the card's table
        metrics["layouts"] = deployment.layouts(job.geometry, job.recipe)
        if job.path == "model-free":  # it sees tensors: check it quantized what oneshot would
            verify.quantized_as_planned(out, job.recipe, job.geometry)
        scheme = job.recipe.scheme()
        bits = scheme.weight_bits if scheme else 16
        metrics["reload"] = verify.check(out, job.model_folder, metrics["total_params"], bits)
    metrics |= extra
    metrics["path"] = job.path
    metrics["peak_rss_bytes"] = environment.peak_rss_bytes()
    planned = job.plan()["memory_bytes"]["cpu_ram_peak_estimate"]
    metrics["planned_peak_rss_bytes"] = planned
    metrics["peak_rss_ratio_to_plan"] = round(metrics["peak_rss_bytes"] / planned, 3)
    metrics["quantize_seconds"] = round(seconds, 2)
    metrics["params_per_second"] = round(metrics["total_params"] / seconds)
    metrics["bytes_per_second"] = round(metrics["bf16_bytes"] / seconds)
    metrics["calibration_samples"] = job.texts.description["samples"] if job.texts else 0
    metrics["modifiers"] = [name for name, _ in job.recipe.modifiers()]  # the time plan's match
    metrics["calibration"] = calibration_record.record(job)
    metrics["routing"] = routed
    metrics["processes"] = job.nproc
    metrics["resumed"] = resume.record(kept)
    return metrics


def _copy_tokenizer(model: Path, out: Path) -> None:
    """model_free_ptq copies every non-weight file of the checkpoint (configs, tokenizer):
    nothing to do unless it missed one a tokenizer needs."""
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (model / name).is_file() and not (out / name).is_file():
            shutil.copy(model / name, out / name)


def job_spec(job: QuantizeStage) -> oneshot.Job:
    """What oneshot is given: the model, the modifiers (caps and routers applied), the texts."""
    return oneshot.Job(
        model_path=str(job.model_path),
        recipe_yaml=job.recipe.quantization_yaml(_with_routers_ignored(job)),
        calibration=job.calibration.model_dump(),
        texts=job.texts.texts if job.texts else None,
        samples=job.texts.description["samples"] if job.texts else 0,
        saved_dtype=job.geometry.dtype,
    )


def _oneshot(job: QuantizeStage, out: Path, steps, layers, kept) -> dict | None:
    spec = job_spec(job)
    if job.nproc == 1:
        return oneshot.run(spec, out, steps, layers=layers, checkpoints=kept)
    steps.set_postfix_str(f"{job.nproc} processes (torchrun)", refresh=False)
    oneshot.run_distributed(spec, out, job.nproc, job.log, kept)
    steps.update(2)
    return None  # routing is tracked in one process only


def _with_routers_ignored(job: QuantizeStage) -> dict:
    """Modifier overrides: tiny-llama's caps, and every MoE router in `ignore`. llm-compressor
    ignores Qwen3-MoE's `mlp.gate` itself but quantizes Qwen2-MoE's `shared_expert_gate` (a
    Linear of one output), which vLLM builds unquantized: kept 16-bit like every router, as
    the planner and the model-free path keep them."""

    found = {name: dict(args) for name, args in job.capped.items()}
    routers = sorted(
        {
            f"re:.*{lin.name}$"
            for lin in job.geometry.checkpoint_linears
            if architecture.is_router(lin)
        }
    )
    if not routers:
        return found
    for name, args in job.recipe.modifiers():
        if {"scheme", "config_groups", "ignore"} & set(args):  # the modifiers that quantize
            ignore = (
                [args["ignore"]]
                if isinstance(args.get("ignore"), str)
                else list(args.get("ignore") or [])
            )
            found[name] = {
                **found.get(name, {}),
                "ignore": ignore + [r for r in routers if r not in ignore],
            }
    return found


def _per_process(built: dict, nproc: int, on_gpus: bool) -> dict:
    """--nproc N on a CPU host: each gloo process holds its own copy of the model (oneshot.py),
    so the CPU RAM peak is N times one process's; on GPUs rank 0 loads it into
    compressed-tensors' shared CPU offload, one copy for all."""
    if on_gpus:
        return built
    memory = dict(built["memory_bytes"])
    one = memory["cpu_ram_peak_estimate"]
    memory["cpu_ram_peak_estimate"] = one * nproc
    memory["cpu_ram_terms"] = {**memory["cpu_ram_terms"], f"× {nproc} processes": one * (nproc - 1)}
    return built | {"memory_bytes": memory}
