"""The drift-and-size table of docs/recipes.md, per format, from the run folders that hold them.

    .venv/bin/python benchmarks/formats_table.py [RUNS_DIR] [MODEL]   # default runs tiny-llama

For each run folder with a quantize (or an import) and an eval result: the scheme, bits per
decoder weight (scales included, the planner's geometry), tensor bytes and their ratio to bf16
and to the scheme's ideal with its scales, and the held-out drift (mean KL ± SE, same-top %) of
its latest eval, with the eval's backend. Nothing is measured here: it reads what the stages
recorded.
"""

import json
import sys
from pathlib import Path

from pipeline.config import recipe
from pipeline.models import aliases
from pipeline.quantize import plan


def main(root: Path, model: str) -> None:
    config = aliases.load_config(aliases.resolve(model))
    columns = ["recipe", "scheme", "bits/weight", "tensors MiB", "× bf16", "× ideal"]
    columns += ["mean KL ± SE", "same top %", "backend"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    for run in sorted((root / model).iterdir()):
        path = run / "manifest.json"
        if not path.is_file():
            continue
        manifest = json.loads(path.read_text())
        stages = manifest.get("stages", {})
        q, e = stages.get("quantize"), stages.get("eval")
        if (
            not (q and e and q["status"] == e["status"] == "done")
            or "tensor_bytes" not in q["metrics"]
        ):
            continue
        rf = _recipe(run, manifest)
        schemes = "+".join(s.name for s, _ in rf.schemes()) or "-"
        m = q["metrics"]
        ideal = m.get("ratio_to_ideal")
        results = json.loads((run / e["outputs"]["results"]).read_text())
        held = results["splits"]["heldout"]
        print(
            f"| `{run.name}` | {schemes} | {plan.bits_per_weight(rf, config):.3f} | "
            f"{m['tensor_bytes'] / 2**20:.2f} | {m['ratio_to_bf16']:.3f} | "
            f"{f'{ideal:.4f}' if ideal else '-'} | "
            f"{held['kl_mean']:.2e} ± {held['kl_mean_se']:.1e} | "
            f"{held['same_top_pct']:.2f} | {results['backend']} |"
        )


def _recipe(run: Path, manifest: dict) -> recipe.RecipeFile:
    """The run's recipe; for a checkpoint quantized elsewhere, its format described as one."""
    if (run / "external" / "original").is_dir():
        from pipeline.external.stage import describe

        return describe(run / "external" / "original")
    return recipe.load(manifest["recipe"]["path"])


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0] if args else "runs"), args[1] if len(args) > 1 else "tiny-llama")
