"""Publish stage: the artifact, its recipe, its results and a generated model card, to the hub
or a local hub-like folder.

    python -m pipeline publish --recipe fp8 --repo acme/tiny-llama-fp8 [--dry-run]

It publishes what the run directory holds and runs nothing: quantize, eval and serve must be
done for this artifact and the eval gates must pass, unless --force (recorded in the card).
What is sent:
    <the artifact's files>            config.json, *.safetensors, tokenizer, recipe.yaml, …
    README.md                         the model card (pipeline/model_card.py)
    quant_pipeline/recipe.yaml        the pipeline recipe, verbatim
    quant_pipeline/results.json       quantize / eval / serve results (no host names or paths)
    quant_pipeline/publish.json       what was published, by which pipeline commit
--dry-run writes README.md and files.txt to runs/<model>/<recipe>/publish/dry-run/ instead.
"""

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import environment, hub_target, hub_upload, model_card
from pipeline.errors import UserError
from pipeline.fsutil import staging_dir, write_json_atomic
from pipeline.rundir import now
from pipeline.runner import run_in_rundir
from pipeline.stages import eval as eval_stage
from pipeline.stages import quantize, serve

STAGE = "publish"
FOLDER = "publish"
# Known licenses of the aliases' base models (their hub cards), so cards work offline.
ALIAS_LICENSES = {
    "llama3-8b": "llama3",
    "llama3-70b": "llama3",
    "llama3.1-8b": "llama3.1",
    "mistral-7b": "apache-2.0",
    "qwen2.5-7b": "apache-2.0",
}
PRIVATE_KEYS = {"hostname", "model_dir", "path"}  # local details that do not belong on a hub


@dataclass
class PublishJob:
    quantize: quantize.Job
    target: hub_target.Target
    private: bool = False
    branch: str | None = None
    create_pr: bool = False
    force: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.quantize.rundir.path / FOLDER


def prepare(qjob: quantize.Job, repo: str | None, dry_run: bool = False, **options) -> PublishJob:
    """Every refusal happens here, before anything is written or sent."""
    job = PublishJob(quantize=qjob, target=hub_target.parse(repo), **options)
    if job.target.kind == "file" and (job.private or job.branch or job.create_pr):
        raise UserError("--private, --branch and --create-pr apply to hub targets, not file://")
    job.problems = readiness(qjob)
    if job.problems and not job.force:
        raise UserError(
            f"refusing to publish {qjob.ref.name} × {qjob.recipe.name}: "
            + "; ".join(job.problems)
            + " (--force publishes anyway and says so in the card)"
        )
    if job.target.kind == "file":
        hub_upload.check_folder(job.target, job.force)
    elif not dry_run:
        hub_upload.check_online()
        hub_upload.token()
    return job


def readiness(qjob: quantize.Job) -> list[str]:
    """Why this run should not be published (empty: it may)."""
    stages = qjob.rundir.manifest()["stages"]
    made = f"MODEL={qjob.ref.name} RECIPE={qjob.recipe.name}"
    q = stages.get(quantize.STAGE)
    if not q or q["status"] != "done":
        # with nothing to publish, --force cannot help
        raise UserError(
            f"no finished artifact for {qjob.ref.name} × {qjob.recipe.name}: make run {made}"
        )
    problems = []
    if q["inputs"]["recipe_sha256"] != qjob.recipe.section_sha256("quantization", "calibration"):
        problems.append(f"the recipe changed since the artifact was made (make run {made})")
    for name, command in ((eval_stage.STAGE, "make eval"), (serve.STAGE, "make serve")):
        entry = stages.get(name)
        if not entry:
            problems.append(f"{name} stage missing ({command} {made})")
        elif entry["status"] != "done":
            problems.append(f"{name} stage {entry['status']}: {entry.get('error', '?')}")
        elif entry["inputs"]["quantize_fingerprint"] != q["fingerprint"]:
            problems.append(f"{name} results are for an older artifact ({command} {made})")
    results = _eval_results(qjob)
    if results and not results["gates"]["passed"]:
        failed = [c["gate"] for c in results["gates"]["checks"] if not c["passed"]]
        problems.append(f"eval gate failed: {', '.join(failed)}")
    return problems


def _eval_results(qjob: quantize.Job) -> dict | None:
    entry = qjob.rundir.stage(eval_stage.STAGE)
    path = qjob.rundir.path / eval_stage.FOLDER / "results.json"
    if not entry or entry["status"] != "done" or not path.is_file():
        return None
    results = json.loads(path.read_text())
    settings = qjob.recipe.spec.eval  # gates as the recipe says now, as `make eval` checks them
    results["gates"] = eval_stage.check_gates(
        settings, results["splits"]["heldout"], results.get("tasks", [])
    )
    results["settings"] = entry["inputs"]["settings"]
    results["libraries"] = entry["inputs"]["libraries"]
    return results


def _serve_results(qjob: quantize.Job) -> tuple[dict | None, dict | None]:
    entry = qjob.rundir.stage(serve.STAGE)
    path = qjob.rundir.path / serve.FOLDER / "results.json"
    if not entry or entry["status"] != "done" or not path.is_file():
        return None, None
    env = {**entry["environment"], "vllm": entry["inputs"]["host"].get("vllm")}
    return json.loads(path.read_text()), env


def card_inputs(job: PublishJob) -> model_card.CardInputs:
    q = job.quantize
    served, hardware = _serve_results(q)
    rf = q.recipe
    return model_card.CardInputs(
        repo_id=job.target.card_name,
        model={"name": q.ref.name, "hub_id": q.ref.hub_id, "license": base_license(q)},
        recipe={
            "name": rf.name,
            "description": rf.spec.description,
            "text": rf.text,
            "scheme": rf.scheme().name if rf.scheme() else None,
            "kv_cache_scheme": rf.kv_cache_scheme(),
            "ignore": rf.ignored(),
        },
        quantize=q.rundir.stage(quantize.STAGE),
        eval=_eval_results(q),
        serve=served,
        serve_environment=hardware,
        pipeline=environment.git_commit(),
        forced=list(job.problems),
    )


def base_license(qjob: quantize.Job) -> str | None:
    """The base model's license: known for the aliases, else its card's metadata (a local
    folder's README.md, or the hub card of a hub model), else unknown (left out)."""
    from huggingface_hub import ModelCard

    if qjob.ref.name in ALIAS_LICENSES:
        return ALIAS_LICENSES[qjob.ref.name]
    try:
        if qjob.ref.source == "local" and (qjob.ref.path / "README.md").is_file():
            return ModelCard.load(qjob.ref.path / "README.md").data.get("license")
        if qjob.ref.source == "hub":
            return ModelCard.load(qjob.ref.hub_id).data.get("license")
    except Exception:  # offline or no card: the card then names no license
        return None
    return None


def build(job: PublishJob, out: Path) -> list[tuple[str, int]]:
    """Lay out everything that is sent in `out`; [(path, bytes)] sorted."""
    q = job.quantize
    artifact = q.rundir.path / quantize.ARTIFACT
    for src in sorted(artifact.rglob("*")):
        if src.is_file():
            dst = out / src.relative_to(artifact)
            dst.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(src, dst)
    inputs = card_inputs(job)
    (out / "README.md").write_text(model_card.render(inputs))
    meta = out / "quant_pipeline"
    meta.mkdir(exist_ok=True)
    (meta / "recipe.yaml").write_text(q.recipe.text)
    results = {
        "quantize": inputs.quantize,
        "eval": inputs.eval,
        "serve": inputs.serve,
        "serve_environment": inputs.serve_environment,
    }
    write_json_atomic(meta / "results.json", _public(results))
    marker = {
        "tool": "quant-pipeline",
        "model": q.ref.name,
        "base_model": q.ref.hub_id,
        "recipe": q.recipe.name,
        "artifact_fingerprint": inputs.quantize["fingerprint"],
        "pipeline": inputs.pipeline,
        "forced": inputs.forced,
        "published": now(),
    }
    write_json_atomic(out / hub_upload.MARKER, marker)
    return sorted(
        (str(p.relative_to(out)), p.stat().st_size) for p in out.rglob("*") if p.is_file()
    )


def dry_run(job: PublishJob) -> Path:
    with staging_dir(job.folder / "dry-run") as tmp:
        files = _assemble(job, tmp / ".upload")
        shutil.move(tmp / ".upload" / "README.md", tmp / "README.md")
        shutil.rmtree(tmp / ".upload")
        listing = "\n".join(f"{size:>14,}  {path}" for path, size in files)
        (tmp / "files.txt").write_text(
            f"# would be sent to {job.target.display} ({len(files)} files, "
            f"{sum(s for _, s in files):,} bytes)\n{listing}\n"
        )
    return job.folder / "dry-run"


def run(job: PublishJob) -> tuple[dict, bool]:
    q = job.quantize
    inputs = {
        "target": job.target.display,
        "revision": job.branch or "main",
        "private": job.private,
        "create_pr": job.create_pr,
        "artifact_fingerprint": q.rundir.stage(quantize.STAGE)["fingerprint"],
        "forced": job.problems,
    }
    outputs = {"card": f"{FOLDER}/README.md"}
    # an action, not a cached computation: every call publishes (force=True)
    return run_in_rundir(q, STAGE, inputs, outputs, lambda: _publish(job), force=True)


def _publish(job: PublishJob) -> dict:
    q = job.quantize
    upload = job.folder / f".upload-{os.getpid()}"
    try:
        files = _assemble(job, upload)
        if job.target.kind == "file":
            sent = hub_upload.to_folder(job.target, upload, job.force)
        else:
            message = (
                f"quant-pipeline: {q.ref.name} × {q.recipe.name} "
                f"(artifact {q.rundir.stage(quantize.STAGE)['fingerprint'][:12]})"
            )
            sent = hub_upload.to_hub(
                job.target, upload, message, job.private, job.branch, job.create_pr, job.force
            )
            sent["commit_message"] = message
        shutil.copyfile(upload / "README.md", job.folder / "README.md")
    finally:
        shutil.rmtree(upload, ignore_errors=True)
    return {**sent, "files": len(files), "bytes": sum(s for _, s in files)}


def _assemble(job: PublishJob, out: Path) -> list[tuple[str, int]]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return build(job, out)


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
