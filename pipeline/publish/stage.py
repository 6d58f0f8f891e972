"""Publish stage: the artifact, its recipe, its results and a generated model card, to the hub
or a local hub-like folder.

    python -m pipeline publish --recipe fp8 --repo acme/tiny-llama-fp8 [--dry-run]

It publishes what the run directory holds and runs nothing: quantize, eval and serve must be
done for this artifact and the eval gates must pass, unless --ignore-gates (said in the card).
What is sent:
    <the artifact's files>            config.json, *.safetensors, tokenizer, recipe.yaml, …
    README.md                         the model card (pipeline/publish/card.py)
    quant_pipeline/recipe.yaml        the pipeline recipe, verbatim
    quant_pipeline/results.json       quantize / eval / serve results (no host names or paths)
    quant_pipeline/publish.json       what was published, from which results (publish/results.py)
--dry-run writes README.md and files.txt to runs/<model>/<recipe>/publish/dry-run/ instead.
"""

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.advise import rank as advise
from pipeline.artifact import AfterQuantize, Artifact
from pipeline.config.engine_name import ENGINE, PACKAGE
from pipeline.core import environment
from pipeline.core.errors import UserError
from pipeline.core.files import staging_dir, write_json_atomic
from pipeline.core.paths import REPO, cache_root
from pipeline.core.rundir import StageEntry
from pipeline.eval import results as eval_results
from pipeline.models import packaged
from pipeline.models.packaged import PACKAGED
from pipeline.perf import prices
from pipeline.planning import gpus
from pipeline.publish import card, target, upload
from pipeline.publish.request import PublishRequest
from pipeline.publish.results import PublishRecord, UsedResult
from pipeline.serve import results as serve_results

# Known licenses of the aliases' base models (their hub cards), so cards work offline.
ALIAS_LICENSES = {
    "llama3-8b": "llama3",
    "llama3-70b": "llama3",
    "llama3.1-8b": "llama3.1",
    "mistral-7b": "apache-2.0",
    "qwen2.5-7b": "apache-2.0",
    "qwen3-8b": "apache-2.0",
    "mixtral-8x7b": "apache-2.0",
    "qwen3-30b-a3b": "apache-2.0",
    "qwen1.5-moe-a2.7b": "other",  # tongyi-qianwen
    "deepseek-v2-lite": "other",  # deepseek
}
PRIVATE_KEYS = {"hostname", "model_dir", "path"}  # local details that do not belong on a hub


@dataclass
class PublishStage(AfterQuantize):
    quantize: Artifact
    request: PublishRequest
    problems: list[str] = field(default_factory=list)  # what --ignore-gates publishes despite
    name: ClassVar[str] = "publish"
    folder: ClassVar[str] = "publish"

    @property
    def target(self) -> target.Target:
        return self.request.target

    @property
    def path(self) -> Path:
        return self.rundir.path / self.folder

    @classmethod
    def prepare(cls, q: Artifact, req: PublishRequest) -> "PublishStage":
        """Every refusal happens here, before anything is written or sent."""
        if q.recipe.online:
            raise UserError(
                f"recipe {q.recipe.name} is {ENGINE}'s online {q.recipe.online}: there is no "
                "artifact "
                f"to publish (users serve the original with {' '.join(q.recipe.engine_args())}); "
                "publish an artifact recipe such as fp8"
            )
        stage = cls(q, req)
        if stage.target.kind == "file" and (req.private or req.branch or req.create_pr):
            raise UserError("--private, --branch and --create-pr apply to hub targets, not file://")
        if stage.target.kind == "file":
            target.check_apart(stage.target.local_folder, _own_folders(q))
        stage.problems = readiness(q, req.without_serve)
        if stage.problems and not req.ignore_gates:
            raise UserError(
                f"refusing to publish {q.ref.name} × {q.recipe.name}: "
                + "; ".join(stage.problems)
                + _ways_past(stage.problems, req.without_serve)
            )
        if stage.target.kind == "file":
            upload.check_folder(stage.target, req.take_over)
        elif not req.dry_run:
            upload.check_online()
            upload.token()
        return stage

    def inputs(self) -> dict:
        return {
            "target": self.target.display,
            "revision": self.request.branch or "main",
            "private": self.request.private,
            "create_pr": self.request.create_pr,
            "used": self.record().used.model_dump(),
            "forced": self.problems,
            "without_serve": self.request.without_serve,
        }

    def before_work(self) -> None:
        pass

    def outputs(self, folder: str) -> dict[str, str]:
        return {"card": f"{folder}/README.md"}

    def staging(self, final: Path):
        """Publishing is an action: its folder keeps the dry run beside the last card sent."""
        final.mkdir(parents=True, exist_ok=True)
        return _as_is(final)

    def work(self, out: Path) -> dict:
        return _publish(self, out)

    def load_results(self, entry: StageEntry) -> dict:
        return entry.metrics

    def record(self) -> PublishRecord:
        """What is published, and from which results (the card and publish.json say so)."""
        q = self.quantize
        stages = self.rundir.manifest().stages
        return PublishRecord(
            model=q.ref.name,
            base_model=q.ref.hub_id,
            recipe=q.recipe.name,
            artifact_fingerprint=stages["quantize"].fingerprint,
            used=UsedResult.of(stages, self.request.without_serve),
            pipeline=environment.git_commit(),
            forced=list(self.problems),
        )


def _own_folders(q: Artifact) -> dict[str, Path]:
    """What a file target may never be, hold or sit in: publishing reads from these."""
    own = {"the run root": q.rundir.runs.local, "the project": REPO, "the cache": cache_root()}
    if q.ref.path:
        own["the source model folder"] = q.ref.path
    return own


def _ways_past(problems: list[str], without_serve: bool) -> str:
    """The flags that publish anyway, the one for a run not served named first."""
    ways = ["--ignore-gates publishes anyway and says so in the card"]
    if not without_serve and any(p.startswith("serve stage") for p in problems):
        ways.insert(0, "--without-serve publishes a run not served, its card saying so")
    return f" ({'; '.join(ways)})"


def readiness(q: Artifact, without_serve: bool = False) -> list[str]:
    """Why this run should not be published (empty: it may); `without_serve`: its serve stage,
    whatever it holds, is not asked for (nor used)."""
    stages = q.rundir.manifest().stages
    made = f"MODEL={q.ref.name} RECIPE={q.recipe.name}"
    qe = stages.get("quantize")
    if not qe or qe.status != "done":
        # with nothing to publish, --ignore-gates cannot help
        raise UserError(f"no finished artifact for {q.ref.name} × {q.recipe.name}: make run {made}")
    problems = []
    if qe.inputs["recipe_sha256"] != q.recipe.section_sha256("quantization", "calibration"):
        problems.append(f"the recipe changed since the artifact was made (make run {made})")
    asked = (("eval", "make eval"),) + ((("serve", "make serve"),) if not without_serve else ())
    for name, command in asked:
        entry = stages.get(name)
        if not entry:
            problems.append(f"{name} stage missing ({command} {made})")
        elif entry.status != "done":
            problems.append(f"{name} stage {entry.status}: {entry.error or '?'}")
        elif entry.inputs["quantize_fingerprint"] != qe.fingerprint:
            problems.append(f"{name} results are for an older artifact ({command} {made})")
    results = _eval_results(q)
    if results and not results.gates.passed:
        failed = [c.gate for c in results.gates.failed()]
        problems.append(f"eval gate failed: {', '.join(failed)}")
    return problems


def _eval_results(q: Artifact):
    entry = q.rundir.stage("eval")
    if not entry or entry.status != "done":
        return None
    # gates as the recipe says now, as `make eval` checks them
    return eval_results.load(q.rundir.path / entry.outputs["results"], q.recipe.spec.eval)


def _serve_results(q: Artifact) -> tuple:
    entry = q.rundir.stage("serve")
    if not entry or entry.status != "done":
        return None, None
    env = {**entry.environment, PACKAGE: entry.inputs["host"].get(PACKAGE)}
    return serve_results.load(q.rundir.path / entry.outputs["results"]), env


def loader_note(stage: PublishStage) -> str | None:
    """Where plain transformers does not load the artifact: why, and the loader the card names."""
    reload = stage.quantize.entry().metrics.get("reload") or {}
    if reload.get("transformers") is not False:
        return None
    return (
        f"AutoModelForCausalLM.from_pretrained does not load this artifact ({reload['reason']}): "
        f"the card names {ENGINE} as its loader"
    )


def card_inputs(stage: PublishStage) -> card.CardInputs:
    q = stage.quantize
    served, hardware = (None, None) if stage.request.without_serve else _serve_results(q)
    rf = q.recipe
    scheme = rf.scheme()
    record = stage.record()
    return card.CardInputs(
        repo_id=stage.target.card_name,
        model={
            "name": q.ref.name,
            "hub_id": q.ref.hub_id,
            "license": base_license(q),
            "built_from": _built_from(q),
        },  # fmt: skip
        recipe={
            "name": rf.name,
            "description": rf.spec.description,
            "text": rf.text,
            "scheme": scheme.name if scheme else None,
            "kv_cache_scheme": rf.kv_cache_scheme(),
            "ignore": rf.ignored(),
        },
        quantize=q.entry(),  # prepare's readiness refused a run without a finished one
        eval=_eval_results(q),
        serve=served,
        serve_environment=hardware,
        used=record.used,
        pipeline=record.pipeline,
        deployment=_deployment(q, rf),
        forced=list(stage.problems),
        without_serve=stage.request.without_serve,
    )


def _built_from(q: Artifact) -> dict | None:
    """A packaged model's provenance (its ref has the path it is built at); None otherwise."""
    if q.ref.source != "package":
        return None
    if q.ref.path is None:
        raise ValueError(f"packaged model {q.ref.name} has no path")
    return packaged.provenance(q.ref.path)


def _deployment(q: Artifact, rf) -> list[dict]:
    """The original and this recipe as `make advise` bounds them on the reference GPU."""

    hw = gpus.SPECS[advise.REFERENCE_GPU]
    ask = advise.Ask(advise.REFERENCE_USERS, advise.REFERENCE_CONTEXT)
    rows = advise.advise(None, q.geometry, [rf], hw, prices.gpu(hw.name), ask)
    return [{**r.describe(), "hardware": hw.name, "ask": ask.__dict__} for r in rows]


def base_license(qjob: Artifact) -> str | None:
    """The base model's license: known for the aliases, else its card's metadata (a local
    folder's README.md, or the hub card of a hub model), else unknown (left out)."""
    from huggingface_hub import ModelCard

    if qjob.ref.name in ALIAS_LICENSES:
        return ALIAS_LICENSES[qjob.ref.name]
    if qjob.ref.name in PACKAGED:  # the license its package ships it under
        return PACKAGED[qjob.ref.name].license
    ref = qjob.ref
    try:
        if ref.source == "local" and ref.path and (ref.path / "README.md").is_file():
            return ModelCard.load(ref.path / "README.md").data.get("license")
        if ref.source == "hub" and ref.hub_id:
            return ModelCard.load(ref.hub_id).data.get("license")
    except Exception:  # offline or no card: the card then names no license
        return None
    return None


def build(stage: PublishStage, out: Path) -> list[tuple[str, int]]:
    """Lay out everything that is sent in `out`; [(path, bytes)] sorted."""
    q = stage.quantize
    for src in sorted(q.artifact.rglob("*")):
        if src.is_file():
            dst = out / src.relative_to(q.artifact)
            dst.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(src, dst)
    inputs = card_inputs(stage)
    (out / "README.md").write_text(card.render(inputs))
    meta = out / "quant_pipeline"
    meta.mkdir(exist_ok=True)
    (meta / "recipe.yaml").write_text(q.recipe.text)
    results = {
        "quantize": inputs.quantize.model_dump(mode="json"),
        "eval": inputs.eval.model_dump(mode="json") if inputs.eval else None,
        "serve": inputs.serve.model_dump(mode="json") if inputs.serve else None,
        "serve_environment": inputs.serve_environment,
    }
    write_json_atomic(meta / "results.json", _public(results))
    write_json_atomic(out / upload.MARKER, stage.record().model_dump(mode="json"))
    return sorted(
        (str(p.relative_to(out)), p.stat().st_size) for p in out.rglob("*") if p.is_file()
    )


def dry_run(stage: PublishStage) -> Path:
    with staging_dir(stage.path / "dry-run") as tmp:
        files = _assemble(stage, tmp / ".upload")
        shutil.move(tmp / ".upload" / "README.md", tmp / "README.md")
        shutil.rmtree(tmp / ".upload")
        listing = "\n".join(f"{size:>14,}  {path}" for path, size in files)
        (tmp / "files.txt").write_text(
            f"# would be sent to {stage.target.display} ({len(files)} files, "
            f"{sum(s for _, s in files):,} bytes)\n{listing}\n"
        )
    return stage.path / "dry-run"


def _publish(stage: PublishStage, out: Path) -> dict:
    q = stage.quantize
    sending = out / f".upload-{os.getpid()}"
    try:
        files = _assemble(stage, sending)
        if stage.target.kind == "file":
            sent = upload.to_folder(stage.target, sending, stage.request.take_over)
        else:
            fingerprint = q.entry().fingerprint
            message = (
                f"quant-pipeline: {q.ref.name} × {q.recipe.name} (artifact {fingerprint[:12]})"
            )
            sent = upload.to_hub(
                stage.target,
                sending,
                message,
                stage.request.private,
                stage.request.branch,
                stage.request.create_pr,
                stage.request.take_over,
            )
            sent["commit_message"] = message
        os.replace(sending / "README.md", out / "README.md")
    finally:
        shutil.rmtree(sending, ignore_errors=True)
    return {**sent, "files": len(files), "bytes": sum(s for _, s in files)}


def _assemble(stage: PublishStage, out: Path) -> list[tuple[str, int]]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return build(stage, out)


@contextlib.contextmanager
def _as_is(folder: Path):
    yield folder


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard links: a 70B artifact is not copied just to be uploaded."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _public(value):
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items() if k not in PRIVATE_KEYS}
    if isinstance(value, list):
        return [_public(v) for v in value]
    return value
