"""`make gpu-bundle`: one folder that checks the pipeline on an offline GPU host in minutes.

    python -m pipeline.gpu_host.bundle OUT [--target-packages FILE] [--python 3.12]

Made on a machine with the package registry, carried to a GPU host that reaches none and brings
its own python3 and CUDA torch (an air-gapped cluster's image). OUT holds:

    check.sh      the one command there: `bash OUT/check.sh` (installs, then gpu-check's table)
    project/      this checkout's files (git ls-files: tracked and not ignored)
    wheels/       what the GPU paths import and the target lacks, for the target's Python
    tiny-llama/   the trained model (no CPU training there)
    bundle.json   what was carried and why, the target list it was made against, the sizes

What to carry is computed, not listed by hand: the dependency closure of ROOTS as installed in
this env (the pins of requirements/main.txt), less every package the target's list names (its
image keeps its own versions; the check's first row proves the two agree) and less HOST_OWNED
(torch and its CUDA stack are the host's). At most 64 MiB: the device machines' carry limit.
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from pipeline.core.errors import UserError
from pipeline.core.files import staging_dir
from pipeline.core.paths import REPO

# what the quantize and hf-eval paths import beyond the standard library (the CLI's own needs too)
ROOTS = ("llmcompressor", "compressed-tensors", "lm_eval", "auto-round", "pydantic", "pyyaml",
         "tqdm", "psutil", "filelock", "tabulate", "prometheus_client", "loguru", "datasets",
         "huggingface-hub", "safetensors", "transformers", "accelerate")  # fmt: skip
HOST_OWNED = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)$")
LIMIT_BYTES = 64 * 2**20
DEFAULT_TARGET = REPO / "requirements" / "gpu-targets" / "h200-image.txt"
CHECK = REPO / "pipeline" / "gpu_host" / "bundle_check.sh"
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def target_packages(path: Path) -> dict[str, str | None]:
    """The target's packages: name → version (None where the list gives a name only)."""
    found: dict[str, str | None] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:(?:==|\s)\s*(\S+))?", line)
        if not m:
            raise UserError(f"{path}:{n}: not a package: {line!r} (name or name==version)")
        found[norm(m.group(1))] = m.group(2)
    return found


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """name → version of every installed distribution the roots need (no extras)."""
    from packaging.requirements import Requirement

    seen: dict[str, str] = {}
    stack = [Requirement(r) for r in roots]
    while stack:
        req = stack.pop()
        if norm(req.name) in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            why = f"gpu-bundle: {req.name} is not installed in this env: make setup"
            raise UserError(why) from None
        seen[norm(req.name)] = dist.version
        stack.extend(Requirement(q) for q in dist.requires or [])
    return seen


def carried(target: dict[str, str | None]) -> dict[str, str]:
    return {n: v for n, v in sorted(closure(ROOTS).items())
            if n not in target and not HOST_OWNED.match(n)}  # fmt: skip


def _pure(name: str) -> bool:
    wheel = metadata.distribution(name).read_text("WHEEL") or ""
    return "Root-Is-Purelib: true" in wheel


def fetch_wheels(packages: dict[str, str], python: str, into: Path) -> None:
    """Binary wheels for the target's Python and platform; pure-Python ones as wheels (built
    from the sdist where the registry has no wheel: rouge_score, sqlitedict, word2number)."""
    pins = [f"{n}=={v}" for n, v in packages.items()]
    binary = [p for p in pins if not _pure(p.split("==")[0])]
    pure = [p for p in pins if p not in binary]
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    if binary:
        platforms = [a for p in PLATFORMS for a in ("--platform", p)]
        subprocess.run([*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version",
                        python, "--implementation", "cp", *platforms, "-d", str(into), *binary],
                       check=True)  # fmt: skip
    if pure:
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(into), *pure], check=True)


def project_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def tiny_llama() -> Path:
    """The trained tiny-llama (built here first if the cache lacks it), in a process of its own
    (core imports no models package)."""
    code = "from pipeline.models.tiny.build import ensure; print(ensure())"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return Path(done.stdout.strip().splitlines()[-1])


def build(out: Path, target_file: Path, python: str) -> dict:
    target = target_packages(target_file)
    packages = carried(target)
    with staging_dir(out) as tmp:
        for f in project_files():
            (tmp / "project" / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, tmp / "project" / f)
        fetch_wheels(packages, python, tmp / "wheels")
        shutil.copytree(tiny_llama(), tmp / "tiny-llama")
        shutil.copy2(CHECK, tmp / "check.sh")
        (tmp / "check.sh").chmod(0o755)
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
        if size > LIMIT_BYTES:
            raise UserError(f"gpu-bundle: {size / 2**20:.1f} MiB, over the {LIMIT_BYTES >> 20} "
                            "MiB a device machine takes: carry less")  # fmt: skip
        record = {
            "python": python,
            "target_packages": str(
                target_file.relative_to(REPO) if target_file.is_relative_to(REPO) else target_file
            ),
            "carried": packages,
            "kept_from_target": sorted(n for n in closure(ROOTS) if n in target),
            "bytes": size,
            "wheels_bytes": sum(p.stat().st_size for p in (tmp / "wheels").iterdir()),
        }
        (tmp / "bundle.json").write_text(json.dumps(record, indent=1))
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-bundle", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--target-packages", type=Path, default=DEFAULT_TARGET,
                        help="the target's packages (pip freeze, or a name a line)")  # fmt: skip
    parser.add_argument("--python", default="3.12", help="the target's Python (major.minor)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        print(f"error: gpu-bundle: --python {args.python!r}: give major.minor, e.g. 3.12",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        record = build(args.out.resolve(), args.target_packages.resolve(), args.python)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {record['bytes'] / 2**20:.1f} MiB — {len(record['carried'])} wheels "
          f"({record['wheels_bytes'] / 2**20:.1f} MiB) for Python {args.python}, the project, "
          f"tiny-llama; on the GPU host: bash {args.out}/check.sh")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
