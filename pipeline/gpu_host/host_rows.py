"""gpu-check's rows about the host rather than a pipeline command: the carried wheels against
the host's own packages, the fork guard's negative control, and why vLLM cannot run here.
Nothing here imports torch in gpu-check's process (its steps fork stages that need CUDA)."""

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from pipeline.engines import serving_env

# what the GPU paths import from the carried wheels (an import error names the missing package)
IMPORTS = ("llmcompressor", "compressed_tensors", "lm_eval", "datasets", "pydantic", "loguru")


def carried_wheels(site: Path) -> tuple[bool, str]:
    """(holds, detail): the carried packages import on the host's torch, and each carried
    package's requirements are met by what is installed (host + carried)."""
    done = subprocess.run([sys.executable, "-c", f"import {', '.join(IMPORTS)}"],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        return False, _last(done.stderr)
    unmet = unmet_requirements(site)
    if unmet:
        return False, "unmet: " + "; ".join(unmet[:4]) + (" …" if len(unmet) > 4 else "")
    carried = len(list(site.glob("*.dist-info")))
    return True, f"{carried} packages carried; imports and requirements hold on torch {_torch()}"


def unmet_requirements(site: Path) -> list[str]:
    """Each carried package's requirement (no extras) that what is installed does not meet."""
    from packaging.requirements import Requirement

    unmet = []
    for dist in metadata.distributions(path=[str(site)]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                have = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                unmet.append(f"{dist.metadata['Name']} needs {req}: not installed")
                continue
            if not req.specifier.contains(have, prereleases=True):
                unmet.append(f"{dist.metadata['Name']} needs {req}: {have} installed")
    return unmet


def fork_guard(done: subprocess.CompletedProcess) -> tuple[bool, str]:
    """(holds, detail) of `python -m pipeline.gpu_host.fork_guard_check`'s run: CUDA poisoned in the
    parent, the stage's work still done, and the guard said so."""
    said = "CUDA was initialised in this process before the fork" in done.stderr
    if done.returncode == 0 and "result 1024" in done.stdout and said:
        return True, "a plain is_available() before the fork: caught, the work ran in the parent"
    return False, ("not caught: " if not said else "") + _last(done.stderr or done.stdout)


def vllm_blocker() -> str | None:
    """Why the vLLM rows cannot run on this host (None: a serving env is here)."""
    if serving_env.available():
        return serving_env.wrong_build()
    torch = _torch()
    if torch and torch.split("+")[0] != serving_env.VLLM_TORCH:
        return (f"vLLM {serving_env.VLLM_VERSION} needs torch {serving_env.VLLM_TORCH}; this "
                f"host has {torch}: its image cannot take vLLM without another torch (or "
                f"SERVE_PYTHON=<a python with vLLM {serving_env.VLLM_VERSION}>)")  # fmt: skip
    return (
        "no serving env (vLLM) here: make setup builds it, or SERVE_PYTHON=<a python with vLLM "
        "0.32> runs the rows with the host's own (the bundle does not carry vLLM)"
    )


def _torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _last(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return (lines[-1] if lines else "no output")[:200]
