"""What the eval's generation drift costs on this host: `eval` timed with the recipe as shipped
(generation on) and with `eval.generation.enabled: false`, each in a fresh run root of its own,
alternately, for a model's first eval (the original's reference, floors and answers built) and
for a later recipe's (all of the original's cached); then a cached eval's wall time.

    .venv/bin/python benchmarks/generation_cost.py [FIRST_RECIPE] [LATER_RECIPE]
                                                    (default fp8, w4a16-rtn)

Quantizing is done first in both roots and not timed. docs/guide/eval.md's figures come from
here.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from pipeline.core.paths import RECIPES_DIR, REPO


def run(args: list[str], runs: str) -> float:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env={**os.environ, "RUNS_DIR": runs},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode not in (0, 3):  # 3: a gate failed; the eval still ran
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return time.monotonic() - start


def without_generation(name: str, folder: Path) -> str:
    """The shipped recipe with generation off, under the same name (same run folder names)."""
    spec = yaml.safe_load((RECIPES_DIR / f"{name}.yaml").read_text())
    spec.setdefault("eval", {}).setdefault("generation", {})["enabled"] = False
    spec["eval"]["generation"].pop("max_length_ratio", None)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def main() -> None:
    first = sys.argv[1] if len(sys.argv) > 1 else "fp8"
    later = sys.argv[2] if len(sys.argv) > 2 else "w4a16-rtn"
    with tempfile.TemporaryDirectory() as tmp:
        on_root, off_root, recipes = f"{tmp}/on", f"{tmp}/off", Path(tmp)
        off = {name: without_generation(name, recipes) for name in (first, later)}
        for name in (first, later):
            for root, recipe in ((on_root, name), (off_root, off[name])):
                run(["quantize", "--recipe", recipe], root)
        print("eval wall time, generation on vs off (fresh run roots, alternately):")
        for label, name, order in (
            ("first eval", first, "on-off"),
            ("later eval", later, "off-on"),
        ):
            sides = [("on", on_root, name), ("off", off_root, off[name])]
            sides = sides if order == "on-off" else sides[::-1]
            timed = {
                side: run(["eval", "--recipe", recipe, "--backend", "hf"], root)
                for side, root, recipe in sides
            }
            print(
                f"  {label} ({name}): on {timed['on']:.1f} s, off {timed['off']:.1f} s, "
                f"+{100 * (timed['on'] / timed['off'] - 1):.1f}%"
            )
        cached = sorted(
            run(["eval", "--recipe", first, "--backend", "hf"], on_root) for _ in range(3)
        )
        print(f"cached eval ({first}, generation on): median {cached[1]:.2f} s of 3")


if __name__ == "__main__":
    main()
