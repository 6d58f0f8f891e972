"""Send a prepared folder to its target: the hub (huggingface_hub's create_repo + upload_folder,
one atomic commit) or a local folder (copied beside it, then renamed into place).

The token comes from HF_TOKEN or the standard login (huggingface_hub.get_token) and goes only
to huggingface_hub: every message that leaves this module is scrubbed of it.
"""

import contextlib
import os
import shutil
import time
from pathlib import Path

from pipeline.core.errors import HubError, UserError, first_line
from pipeline.core.files import staging_dir
from pipeline.publish.target import Target

MARKER = "quant_pipeline/publish.json"  # a repo holding it was published by this pipeline


def check_online() -> None:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise UserError("HF_HUB_OFFLINE is set: unset it to publish to the hub, or use file://")


def token() -> str:
    from huggingface_hub import get_token

    found = get_token()
    if not found:
        raise UserError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (write access)")
    return found


def to_hub(
    target: Target,
    folder: Path,
    message: str,
    private: bool,
    branch: str | None,
    create_pr: bool,
    force: bool,
) -> dict:
    from huggingface_hub import HfApi, constants

    secret = token()
    api = HfApi(token=secret)
    repo = target.hub_repo
    with _hub_errors(target, secret, constants.ENDPOINT):
        user = api.whoami()["name"]
        api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        existing = set(api.list_repo_files(repo))
        ours = MARKER in existing
        if existing - {".gitattributes"} and not ours and not force:
            names = sorted(existing)
            shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
            raise UserError(
                f"{repo} already holds other content ({shown}), not published by this "
                "pipeline; choose another REPO or --take-over to add to it"
            )
        if branch and branch != "main":
            api.create_branch(repo, branch=branch, exist_ok=True)
        head = api.repo_info(repo, revision=branch).sha
        info = api.upload_folder(
            repo_id=repo,
            folder_path=folder,
            commit_message=message,
            revision=branch,
            create_pr=create_pr,
            # a re-publish replaces the pipeline's own files; never someone else's
            delete_patterns=["*"] if ours else None,
        )
    # huggingface_hub makes no commit (and opens no PR) when every file is already there
    unchanged = info.pr_url is None if create_pr else info.oid == head
    return {
        "endpoint": constants.ENDPOINT,
        "repo_id": repo,
        "user": user,
        "revision": branch or "main",
        "commit": info.oid,
        "commit_url": info.commit_url,
        "pr_url": info.pr_url,
        "private": private,
        "unchanged": unchanged,
    }


@contextlib.contextmanager
def _hub_errors(target: Target, secret: str, endpoint: str):
    """huggingface_hub / network exceptions → one clear line, the token never in it."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    def clean(text: str) -> str:
        return text.replace(secret, "***")

    try:
        yield
    except UserError:
        raise
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        if status == 401:
            raise UserError(
                f"{endpoint} rejected the token (401 Unauthorized): check HF_TOKEN or "
                "`hf auth login`"
            ) from None
        if status == 403:
            raise UserError(
                f"the token may not write to {target.repo_id} (403 Forbidden): it needs write "
                f"access to the '{target.hub_repo.split('/')[0]}' namespace"
            ) from None
        raise HubError(clean(_retry_hint(target, f"HTTP {status}: {first_line(e)}"))) from None
    except (httpx.HTTPError, OSError, ValueError, RuntimeError) as e:
        # huggingface_hub wraps a failed large-file upload in RuntimeError: name the cause
        cause = e.__cause__ or e
        what = f"{type(cause).__name__}: {first_line(cause)}"
        raise HubError(clean(_retry_hint(target, what))) from None


def _retry_hint(target: Target, what: str) -> str:
    return (
        f"upload to {target.display} failed ({what}); a hub commit is atomic, so the repo holds "
        "all of this upload or none of it: run the same command again (files already "
        "uploaded are not sent twice)"
    )


def check_folder(target: Target, force: bool) -> bool:
    """True when the folder holds content this pipeline did not publish (refused unless force)."""
    dest = target.local_folder
    if dest.exists() and not dest.is_dir():
        raise UserError(f"file target {dest} exists and is not a folder")
    foreign = dest.exists() and any(dest.iterdir()) and not (dest / MARKER).is_file()
    if foreign and not force:
        raise UserError(
            f"{dest} already holds other content, not published by this pipeline; choose "
            "another folder or --take-over (the old folder is kept beside it)"
        )
    return foreign


def to_folder(target: Target, folder: Path, force: bool) -> dict:
    """Copy beside the destination, then rename into place: a reader never sees half a repo.
    A folder not published by this pipeline is refused, or with --take-over moved aside (kept)."""
    dest = target.local_folder
    if check_folder(target, force):
        os.replace(dest, _aside(dest))
    with staging_dir(dest) as tmp:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
    return {"path": str(dest), "files": sum(1 for p in dest.rglob("*") if p.is_file())}


def _aside(dest: Path) -> Path:
    """A name beside `dest` that nothing holds yet: a take-over keeps what it moves."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for n in range(1000):
        aside = dest.parent / (f"{dest.name}.replaced-{stamp}" + (f"-{n}" if n else ""))
        if not aside.exists():
            return aside
    raise UserError(f"{dest.parent} holds 1,000 folders named {dest.name}.replaced-{stamp}*")
