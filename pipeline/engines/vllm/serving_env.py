"""The serving env (.venv-serve, vLLM): where it is, which vLLM it holds and what this host's
build can run. Imports neither torch nor vLLM: `serve`, `plan` and `publish` stay light."""

import json
import os
import subprocess
from pathlib import Path

from pipeline.core import devices, environment
from pipeline.core.errors import NotOnThisHost, UserError
from pipeline.core.files import sha256_text, write_json_atomic
from pipeline.core.paths import REPO, cache_root
from pipeline.engines.vllm import cuda_builds

# Scripts run by the serving env's python (vLLM cannot be imported in the main env).
VLLM_SCRIPTS = REPO / "pipeline" / "vllm_scripts"

ALIAS_INSTALLER = "quant-pipeline"
# requirements/serve-cuda.txt's vLLM and the torch its wheel requires (`Requires-Dist:
# torch==2.13.0`): a host whose torch is another cannot run it (a test reads both from the files)
VLLM_VERSION, VLLM_TORCH = cuda_builds.VLLM, cuda_builds.TORCH
SERVE_PYTHON = Path(os.environ.get("SERVE_PYTHON", REPO / ".venv-serve" / "bin" / "python"))


def available() -> bool:
    return SERVE_PYTHON.exists()


def require(doing: str) -> None:
    if not available():
        raise UserError(f"{doing} needs the serving env ({SERVE_PYTHON}): make setup")
    if why := wrong_build():
        raise NotOnThisHost(f"{doing}: {why}")


def build() -> str | None:
    """The vLLM build `make setup` installed ("cuda" | "cpu"), from its stamp (None: unknown,
    e.g. an env of one's own through SERVE_PYTHON)."""
    stamps = sorted(SERVE_PYTHON.parent.parent.glob(".installed-*"))
    return stamps[-1].name.removeprefix(".installed-") if stamps else None


def stamp() -> str | None:
    """The build stamp `make setup` wrote (its name and text), None without one: a rebuilt env
    stamps anew, so what is cached per env can tell the builds apart."""
    stamps = sorted(SERVE_PYTHON.parent.parent.glob(".installed-*"))
    if not stamps:
        return None
    return f"{stamps[-1].name}:{stamps[-1].read_text(errors='replace').strip()}"


def torch_version_file() -> Path | None:
    """The serving env's torch/version.py (read as text: it is another interpreter's torch)."""
    found = sorted(SERVE_PYTHON.parent.parent.glob("lib/python*/site-packages/torch/version.py"))
    return found[-1] if found else None


def wrong_build() -> str | None:
    """Why the installed vLLM build cannot serve on this host (None: it can, or unknown)."""

    installed, gpus = build(), len(environment.gpus())
    if installed == "cpu" and gpus:
        return (
            f"the serving env holds vLLM's CPU build but this process sees {gpus} GPU(s): "
            "make setup rebuilds it with the CUDA build"
        )
    if installed == "cuda" and not gpus:
        return (
            "the serving env holds vLLM's CUDA build but this process sees no GPU: make setup "
            "on this host installs the CPU build (or check CUDA_VISIBLE_DEVICES)"
        )
    return _driver_refusal(devices.seen()) if gpus else None


def _driver_refusal(seen: list[devices.Gpu]) -> str | None:
    """A CUDA build the GPUs' driver cannot run: vLLM would fall back to `device: cpu` in the
    probe and crash at start-up, after quantize and eval ran."""
    return devices.driver_refusal(seen, torch_version_file(), "the serving env", "torch and vLLM")


def driver_refusals() -> list[str]:
    """Where GPUs are visible: each env (main, serving) whose torch's CUDA build the driver
    cannot run, as one line each naming the driver, the build and the fix; checked from files,
    no import."""
    seen = devices.seen()
    if not seen:
        return []
    found = [devices.driver_refusal(seen, devices.main_torch_version_file(), "the main env")]
    if available():
        found.append(_driver_refusal(seen))
    return [why for why in found if why]


def offline_env() -> dict[str, str]:
    """Environment for a vLLM script (an in-process `LLM`, not `vllm serve`): a 1 GiB CPU KV
    pool unless VLLM_CPU_KVCACHE_SPACE says otherwise and, on CPU hosts, vLLM's engine inside
    the script's process instead of two more processes that each import vLLM again (prompt
    log-probs of 17 windows here: 36 s → 17 s, a third less per batch without the copy between
    processes). GPU hosts keep vLLM's default."""

    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if not environment.gpus():
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return env


def version() -> str | None:
    """The serving env's vLLM version, from its package metadata (no import: vLLM is slow)."""
    prefix = SERVE_PYTHON.parent.parent
    for meta in sorted(prefix.glob("lib/python*/site-packages/vllm*.dist-info/METADATA")):
        installer = meta.parent / "INSTALLER"
        if installer.is_file() and installer.read_text().strip() == ALIAS_INSTALLER:
            continue  # vllm_scripts/alias_metadata.py's alias: the real wheel is beside it
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return f"{meta.parent.name.split('-')[0]} {line.split(':', 1)[1].strip()}"
    return None


def capabilities() -> dict:
    """What this host's vLLM build runs (cached per serving env and build; the probe imports
    vLLM)."""
    probe = VLLM_SCRIPTS / "capabilities.py"
    # a new probe, or the env rebuilt (another vLLM, another build stamp): probed anew
    built = f"{version()}|{stamp()}"
    key = sha256_text(str(SERVE_PYTHON.resolve()) + built + probe.read_text())[:12]
    path = cache_root() / f"vllm-capabilities-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    out = subprocess.run([str(SERVE_PYTHON), str(probe)], capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:  # vLLM does not import there: one line, the env's last word and the fix
        said = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        raise UserError(
            f"the serving env's vLLM does not start ({SERVE_PYTHON}: {said}): rebuild it "
            f"(rm -rf {SERVE_PYTHON.parent.parent} && make setup)"
        )
    caps = json.loads(lines[-1])
    write_json_atomic(path, caps)
    return caps


# per capability the probe reports: where vLLM 0.32 serves that kind of Linear (CPU: what the
# probe finds on x86 builds), and why it cannot where it is missing
DENSE_KERNELS = {
    None: ("GPU, CPU", None),
    "w4a16": (
        "GPU, CPU with AVX-512",
        "its AVX2 CPU kernels have no W4A16 GEMM; needs AVX-512 or a GPU",
    ),
    "w8a16": (
        "GPU",
        "its CPU mixed-precision kernel takes INT4 weights only; a GPU runs INT8 ones",
    ),
    "fp8_block": (
        "GPU, CPU with AMX",
        "its CPU block-FP8 kernels need AMX, Sapphire Rapids or newer; a GPU runs them",
    ),
    "nvfp4": (
        "GPU",
        "vLLM has no CPU kernel for NVFP4; a GPU runs it (natively on Blackwell)",
    ),
    "mxfp4": (
        "GPU",
        "vLLM has no CPU kernel for MXFP4; a GPU runs it (natively on Blackwell)",
    ),
}


def serves_on(recipe) -> str:
    """Where `make serve` can run a recipe's artifact (quantized MoE models need more: AMX on
    CPUs, see moe_kernel)."""
    if recipe.online:
        return "GPU"  # the CPU wheel's online-FP8 kernel is a stub
    where = DENSE_KERNELS[dense_kernel(recipe.scheme())][0]
    if recipe.spec.serve.kv_cache_dtype.startswith("fp8") and dense_kernel(recipe.scheme()) is None:
        return "GPU, CPU with AVX-512"  # its CPU attention stores FP8 K/V with AVX-512 or AMX
    return where


def gpu_capability(scheme) -> str:
    """The NVIDIA compute capability vLLM 0.32 runs a scheme's Linears on: natively, and
    weight-only through Marlin (from 7.5) where the GPU lacks the format's tensor cores."""
    if not scheme:
        return "any"
    if scheme.fp4:
        return "10.0+ (7.5+ Marlin)"  # FP4 tensor cores: Blackwell
    if scheme.weight_type == "float":
        return "8.9+ (7.5+ Marlin)"  # FP8 tensor cores: Ada, Hopper
    return "7.5+"  # INT8 CUTLASS GEMMs; INT4/INT8 weights through Marlin


def dense_kernel(scheme) -> str | None:
    """The capability a quantized Linear of this scheme needs (None: every build has one)."""
    if not scheme:
        return None
    if scheme.block:
        return "fp8_block"
    if scheme.fp4:
        return scheme.fp4
    if scheme.weight_type == "int" and scheme.weight_bits == 4:
        return "w4a16"
    if scheme.weight_type == "int" and scheme.weight_bits == 8 and not scheme.activation_bits:
        return "w8a16"
    return None


def runs_scheme(scheme) -> bool:
    """False only where the probe found no kernel (None, a probe that failed, lets vLLM say)."""
    needed = dense_kernel(scheme)
    return needed is None or capabilities().get(needed) is not False


def require_scheme(scheme, doing: str, hint: str = "") -> None:
    """NotOnThisHost when this host's vLLM build has no kernel for the scheme (W4A16 on AVX2,
    W8A16 and FP4 on any CPU, FP8 blocks without AMX)."""
    if not runs_scheme(scheme):
        reason = DENSE_KERNELS[dense_kernel(scheme)][1]
        raise NotOnThisHost(f"this host's vLLM cannot {doing} {scheme.name} ({reason}){hint}")


def moe_kernel(scheme) -> str | None:
    """The capability a quantized MoE model of this scheme needs (None: 16-bit, no kernel)."""
    if not scheme:
        return None
    if scheme.weight_type == "float" and scheme.weight_bits == 8:
        return "fp8_moe"
    if scheme.weight_type == "int" and scheme.weight_bits == 4 and not scheme.activation_bits:
        return "w4a16_moe"
    if scheme.weight_type == "int" and scheme.weight_bits == 8 and scheme.activation_bits == 8:
        return "int8_moe"
    return None


def require_moe(scheme, g, doing: str, hint: str = "") -> None:
    """NotOnThisHost for a quantized mixture-of-experts model whose scheme has no MoE kernel on
    this host (vLLM 0.32's CPU MoE kernels for FP8, INT4 and INT8 all need AMX on x86).
    g: the model's planning.geometry.Geometry."""
    needed = moe_kernel(scheme)
    if needed and g.experts and capabilities().get(needed) is False:
        raise NotOnThisHost(
            f"this host's vLLM cannot {doing} this {scheme.label} mixture-of-experts model (no "
            f"{scheme.label} MoE kernel for this CPU: its CPU MoE kernels need AMX; a GPU is "
            f"fine){hint}"
        )


def require_online(recipe, doing: str) -> None:
    """NotOnThisHost when this host's vLLM cannot quantize online as the recipe asks."""
    if recipe.online and not capabilities().get(f"online_{recipe.online}"):
        raise NotOnThisHost(
            f"this host's vLLM cannot {doing} online {recipe.online} (`--quantization "
            f"{recipe.online}`: its CPU build's static_scaled_fp8_quant kernel is a stub; a GPU "
            "can)"
        )


def require_kv_cache(kv_cache_dtype: str, doing: str, hint: str = "") -> None:
    """NotOnThisHost when this host's vLLM build cannot store the KV cache in that dtype."""
    if kv_cache_dtype.startswith("fp8") and not capabilities()["fp8_kv_cache"]:
        raise NotOnThisHost(
            f"this host's vLLM cannot {doing} with kv_cache_dtype {kv_cache_dtype} (its CPU "
            f"attention keeps an FP8 KV cache only with AVX-512 or AMX; a GPU is fine){hint}"
        )
