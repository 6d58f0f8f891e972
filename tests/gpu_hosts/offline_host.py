"""An offline GPU host's image, simulated on this CPU host for the bundle's test: a fresh venv
(python3 -m venv: pip from ensurepip, no index reachable) holding only the packages the target's
list names, linked from the main env, and a torch whose metadata says the image's version
(2.11.0, the lent H200's) though its files are this host's CPU build: vLLM's rule is read
from that version, and nothing here imports CUDA. The GPU itself cannot be simulated.

    python tests/gpu_hosts/offline_host.py DIR [TARGET_LIST]     # prints DIR/bin/python
"""

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

IMAGE_TORCH = "2.11.0"  # as its metadata says on the lent H200 (torch.__version__: 2.11.0+cu130)


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make(root: Path, target_list: Path) -> Path:
    wanted = {norm(re.split(r"[=\s]", x.split("#")[0].strip())[0])
              for x in target_list.read_text().splitlines() if x.split("#")[0].strip()}  # fmt: skip
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    python = root / "bin" / "python"
    where = [python, "-c", "import site; print(site.getsitepackages()[0])"]
    site = Path(subprocess.run(where, capture_output=True, text=True, check=True).stdout.strip())
    image = root / "image"
    image.mkdir()
    for dist in metadata.distributions():
        name = norm(dist.metadata["Name"])
        if name not in wanted or name == "pip":
            continue
        here = Path(dist._path)  # the .dist-info folder  # noqa: SLF001
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {here.name}:
            if not (image / top).exists() and (here.parent / top).exists():
                (image / top).symlink_to(here.parent / top)
        if name == "torch":  # the image's torch version, this host's files
            shutil.copytree(here, image / f"torch-{IMAGE_TORCH}.dist-info")
            meta = image / f"torch-{IMAGE_TORCH}.dist-info" / "METADATA"
            meta.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {IMAGE_TORCH}",
                                   meta.read_text()))  # fmt: skip
        else:
            (image / here.name).symlink_to(here)
    (site / "image.pth").write_text(f"{image}\n")
    return python


if __name__ == "__main__":
    print(make(Path(sys.argv[1]), Path(sys.argv[2])))
