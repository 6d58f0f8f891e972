"""Import stage: a checkpoint quantized elsewhere becomes the "quantize" stage of
runs/<model>/external-<name>/, so eval, serve, publish and nightly treat it like a recipe's
artifact.

    python -m pipeline quantize --model tiny-llama --import path/or/org/name@rev
    make run MODEL=tiny-llama ARTIFACT=path/or/org/name@rev      # quantize --import → eval → serve

    external/original/            the checkpoint's files as shipped: what vLLM serves and publish
                                  uploads
    external/compressed-tensors/  where the hf backend cannot run the format as shipped: the same
                                  weights converted (GPTQ, AWQ packing), what hf evaluates

It is an Artifact (pipeline/artifact/protocol.py) as a recipe's quantize stage is, with every member
its own: it shares with that stage only the header, the finished entry and the results
(pipeline/quantize/record.py), and checks no host memory (it quantizes nothing).

The stage's fingerprint is the artifact's content (and the base's): the same bytes under another
path reuse the import, changed bytes redo it. Eval and serve settings come from a shipped recipe
of the same scheme (`--recipe` picks another): its gates, tasks and serving sweep apply unchanged.
"""

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import yaml

from pipeline.config import recipe
from pipeline.config.recipe import Calibration
from pipeline.config.schemes import schemes_from_args
from pipeline.config.strict import validated
from pipeline.core import environment, progress, quiet
from pipeline.core.errors import UserError
from pipeline.core.files import staging_dir
from pipeline.core.rundir import RunDir, StageEntry
from pipeline.core.runs import Runs
from pipeline.external import formats, match, source, stage_plan
from pipeline.external.request import ImportRequest
from pipeline.models import aliases, checkpoint
from pipeline.planning import deployment, geometry
from pipeline.planning.geometry import Geometry
from pipeline.planning.weights import artifact_bytes
from pipeline.quantize import record, verify
from pipeline.quantize.artifact import size_metrics, tensor_bytes

# Deferred imports: the GPTQ converter imports torch; a dry run or a cached import needs none

if TYPE_CHECKING:
    from pipeline.core.stage_plan import ArtifactPlan

FOLDER = "external"
ORIGINAL = f"{FOLDER}/original"
CONVERTED = f"{FOLDER}/compressed-tensors"
LIBRARIES = ("compressed-tensors", "transformers", "torch")
CONVERTERS = ("gptq", "awq")  # formats.ExternalFormat.hf values that make a converted copy
HOST_FIT = (
    "not checked: an import quantizes nothing (checked: its format, and its architecture and "
    "tokenizer against the base's; eval / serve / run --dry-run check this host)"
)


@dataclass
class ImportStage:
    """An Artifact (pipeline/artifact/protocol.py) with every member its own: no quantize stage
    underneath, so nothing of quantizing (memory, calibration text) applies by accident."""

    request: ImportRequest  # its settings recipe always given once prepared
    geometry: Geometry  # the base's, which the artifact shares
    recipe: recipe.RecipeFile  # the artifact's format described as a recipe (_recipe)
    rundir: RunDir
    format: formats.ExternalFormat
    model_path: Path | None = field(default=None, init=False)  # the base's: eval's reference
    model_identity: dict = field(default_factory=dict, init=False)
    artifact_path: Path | None = field(default=None, init=False)  # the checkpoint's folder
    artifact_identity: dict = field(default_factory=dict, init=False)
    name: ClassVar[str] = "quantize"  # the key eval, serve and publish look up, as a recipe's
    folder: ClassVar[str] = FOLDER
    starts_engine: ClassVar[bool] = False  # an import starts nothing
    max_memory: ClassVar[None] = None  # --max-memory applies to quantizing (refused here)
    staging = staticmethod(staging_dir)  # not a field: where work writes, renamed when done

    @property
    def ref(self) -> aliases.ModelRef:
        """The base: its config and tokenizer checked the artifact's."""
        return self.request.ref

    @property
    def external(self) -> source.ExternalRef:
        return self.request.external

    @property
    def calibration(self) -> Calibration:  # in the class body, `recipe` names the field
        """The settings recipe's: eval's calibration split."""
        return self.recipe.spec.calibration

    @property
    def settings_from(self) -> str:
        """The shipped recipe whose eval / serve sections apply."""
        settings = self.request.settings
        if settings is None:  # prepare() always picks one
            raise ValueError("an import's settings recipe is picked by ImportStage.prepare")
        return settings.name

    @classmethod
    def prepare(cls, req: ImportRequest, runs: Runs) -> "ImportStage":
        """Everything decided from configs and tokenizers: no weights, no writes; its run
        folder pulled from object storage, as its stages read."""
        ref, ext = req.ref, req.external
        config = aliases.load_config(ref)  # the base's, to compare the artifact's with
        folder = source.config_folder(ext)
        fmt = formats.detect(folder, ext.given)
        differ = checkpoint.shape_differences(config, formats.model_config(folder))
        match.check_architecture(ref.name, ext.given, differ)
        match.check_tokenizer(ref.name, _tokenizer_source(ref), ref.revision, ext.given, folder)
        base = req.settings or recipe.load(_same_scheme(fmt))
        rf = _recipe(ext, fmt, base)
        runs.pull_run(ref.name, rf.name)
        rundir = RunDir(ref.name, rf.name, runs)
        rundir.check_writable()
        return cls(replace(req, settings=base), geometry.of(config), rf, rundir, fmt)

    @property
    def header(self) -> dict:
        return record.header(self)

    @property
    def artifact(self) -> Path:
        return self.rundir.path / ORIGINAL

    def artifact_for(self, backend: str) -> Path:
        converted = self.rundir.path / CONVERTED
        return converted if backend == "hf" and converted.is_dir() else self.artifact

    @property
    def hf_refusal(self) -> str | None:
        return None if self.format.hf else self.format.hf_refusal

    @property
    def log(self) -> Path:
        return self.rundir.path / "logs" / "import.log"

    def host_fit(self, max_memory: int | None) -> str | None:
        """None, with nothing checked: an import loads no model to quantize (its plan says
        so: HOST_FIT); eval and serve check this host for what they load."""
        return None

    def plan(self) -> dict:
        """What `quantize --import … --dry-run` prints: decided from configs alone."""
        scheme = self.recipe.scheme()
        # an import's recipe always has one: its format as a config group (formats.modifier)
        assert scheme is not None
        ideal = artifact_bytes(self.recipe, self.geometry)
        return {
            "import": self.external.given,
            "run_dir": str(self.rundir.path),
            "base": self.ref.name,
            "format": self.format.describe(),
            "scheme": scheme.name if scheme.name != "custom" else scheme.label,
            "ideal_bytes": ideal,
            "settings_from": self.settings_from,
            "host_fit": HOST_FIT,  # said, not "fits": this host's memory was never asked
        }

    def describe_plan(self) -> tuple[dict, str]:
        """What `quantize --import … --dry-run` prints (--json, text): its detected format and
        what was checked (HOST_FIT: not this host's memory)."""
        found = self.plan()
        return found, self.render_plan(found)

    def verdict(self, entry: StageEntry) -> None:
        return None  # no gates: the eval after it has them

    def stage_plan(self) -> "ArtifactPlan":
        """The chain's view of this stage: nothing to quantize, the files it brings."""
        return stage_plan.plan(self)

    @staticmethod
    def render_plan(p: dict) -> str:
        f = p["format"]
        return "\n".join(
            [
                f"import    {p['import']} → {p['run_dir']}",
                f"format    {f['quant_method']} ({f['packing']}) by {f['producer']}: {p['scheme']}",
                f"base      {p['base']}: same architecture and tokenizer (checked)",
                f"hf eval   {f['hf_path']}",
                f"size      {p['ideal_bytes'] / 2**20:.2f} MiB ideal with its scales",
                f"settings  eval and serve from recipe {p['settings_from']}",
                f"this host {p['host_fit']}",
            ]
        )

    def load_inputs(self) -> None:
        if self.model_path is not None:
            return
        self.model_path, self.model_identity = aliases.materialize(self.ref)
        self.artifact_path, self.artifact_identity = source.materialize(self.external)

    def inputs(self) -> dict:
        self.load_inputs()
        return {
            "model": self.model_identity,
            "artifact": self.artifact_identity,
            "format": self.format.describe(),
            "recipe_sha256": self.recipe.section_sha256("quantization", "calibration"),
            "libraries": environment.library_versions(LIBRARIES),
        }

    def before_work(self) -> None:
        quiet.import_llmcompressor()  # no modifiers to check; its logs are routed in work

    def outputs(self, folder: str) -> dict[str, str]:
        found = {"artifact": f"{folder}/original"}
        if self.format.hf in CONVERTERS:
            found["converted"] = f"{folder}/compressed-tensors"
        return found

    def work(self, out: Path) -> dict:
        fmt = self.format
        artifact_path, model_path = self.artifact_path, self.model_path
        if artifact_path is None or model_path is None:  # execute() asks inputs() first
            raise RuntimeError("import work before load_inputs: no artifact or base folder")
        steps = progress.bar(total=3, desc=f"import {self.external.name}", unit="step")
        original, converted = out / "original", out / "compressed-tensors"
        _copy(artifact_path, original)
        steps.update()
        # compressed-tensors' converter logs to stdout (loguru) and draws its own bars: both go
        # to the log with the rest; the stage's bar is the one shown
        with quiet.to_log(self.log, llmcompressor=True), quiet.library_output(self.log):
            if fmt.hf in CONVERTERS:
                steps.set_postfix_str(f"converting ({fmt.hf})", refresh=False)
                _convert(fmt, original, converted)
            elif fmt.hf == "native":
                converted = original
            steps.update()
            readable = converted if fmt.hf else original
            metrics = size_metrics(readable, model_path, self.recipe.scheme())
            served = tensor_bytes(original)  # what vLLM loads: the bytes as shipped
            metrics["converted_tensor_bytes"] = metrics["tensor_bytes"]
            metrics["tensor_bytes"] = served
            metrics["ratio_to_bf16"] = round(served / metrics["bf16_bytes"], 4)
            metrics["ratio_to_theoretical"] = round(served / metrics["theoretical_bytes"], 4)
            ideal = artifact_bytes(self.recipe, self.geometry)
            metrics["ideal_bytes"] = ideal
            metrics["ratio_to_ideal"] = round(served / ideal, 4)
            if fmt.hf:
                metrics["reload"] = verify.reload(converted, metrics["total_params"])
            else:
                metrics["reload"] = {"transformers": False, "reason": fmt.hf_refusal}
        steps.update()
        steps.close()
        metrics["external"] = {"artifact": self.external.given, **fmt.describe()}
        # where vLLM 0.32 loads it, from the scheme its format declares: the card's table
        metrics["layouts"] = deployment.layouts(self.geometry, self.recipe)
        metrics["peak_rss_bytes"] = environment.peak_rss_bytes()
        metrics["calibration_samples"] = 0
        return metrics

    def entry(self) -> StageEntry:
        """The finished import later stages build on."""
        return record.finished_entry(self)

    def load_results(self, entry: StageEntry) -> dict:
        return record.results(entry)


def _recipe(ext: source.ExternalRef, fmt: formats.ExternalFormat, base: recipe.RecipeFile):
    """The artifact described as a recipe: its format as a (never run) llm-compressor modifier,
    and the eval / serve sections of a shipped recipe."""
    data = {
        "description": f"{fmt.method} checkpoint by {fmt.producer}: {ext.given} "
        f"(settings from recipe {base.name})",
        "quantization": {
            "import_stage": {"import_modifiers": {"QuantizationModifier": fmt.modifier()}}
        },
        **base.spec.model_dump(mode="json", include={"calibration", "eval", "serve"}),
    }
    text = yaml.safe_dump(data, sort_keys=False)
    spec = validated(recipe.Recipe, data, f"the recipe describing {ext.given}")
    return recipe.RecipeFile(name=ext.run_name, path=Path(ext.given), text=text, spec=spec)


def describe(folder: Path) -> recipe.RecipeFile:
    """An imported checkpoint's format as a recipe (its eval / serve sections: gptq's)."""
    ext = source.resolve(str(folder))
    return _recipe(ext, formats.detect(folder, str(folder)), recipe.load("gptq"))


def _same_scheme(fmt: formats.ExternalFormat) -> str:
    """The shipped recipe of the artifact's method and scheme (AutoAWQ's W4A16_ASYM: awq), else
    the first of its scheme, else gptq."""

    scheme = schemes_from_args(fmt.modifier())[0][0]
    names = recipe.artifact_recipes()
    same = [n for n in names if (s := recipe.load(n).scheme()) and s.name == scheme.name]
    own = fmt.method.replace("-", "")  # auto-round → autoround
    return own if own in same else (same or ["gptq"])[0]


def _tokenizer_source(ref: aliases.ModelRef) -> Path | str:
    if ref.source in ("tiny", "package"):  # built here, once
        return aliases.materialize(ref)[0]
    found = ref.path or ref.hub_id
    if found is None:  # resolve() gives a local model its folder, any other its hub id
        raise ValueError(f"model {ref.name} ({ref.source}) has neither a folder nor a hub id")
    return found


def _copy(src: Path, dst: Path) -> None:
    """The checkpoint's files as shipped (hidden ones and hub cache links resolved)."""
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        if any(part.startswith(".") for part in rel.parts):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dst / rel)


def _convert(fmt: formats.ExternalFormat, original: Path, out: Path) -> None:
    from compressed_tensors.entrypoints.convert import convert_checkpoint

    if fmt.hf == "awq":
        from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter

        converter = AutoAWQConverter.from_autoawq_config(fmt.config)
    else:
        from pipeline.external.gptq_converter import GPTQConverter

        w = fmt.weights
        converter = GPTQConverter(
            bits=w["num_bits"],
            group_size=w["group_size"] or -1,
            sym=w["symmetric"],
            v1=fmt.packing != "gptq_v2",
            ignore=fmt.ignore,
        )
    try:
        convert_checkpoint(original, out, converter)
    except ValueError as e:
        raise UserError(f"converting {fmt.method} to compressed-tensors: {e}") from None
