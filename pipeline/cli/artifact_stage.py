"""From the command line's flags to the stage that makes the artifact: a recipe's quantize stage,
or with `--artifact` / `--import` the import of a checkpoint quantized elsewhere.

Deferred imports: both stages: they pull in the recipe, model and planning code
that `recipes`, `plan` and `--help` never need."""

import argparse

from pipeline.core.errors import UserError


def quantize_stage(args: argparse.Namespace, **calibration):
    """The prepared quantize (or import) stage; a recipe-only flag given with an import is a
    one-line user error."""
    from pipeline.quantize.stage import QuantizeStage

    nproc = getattr(args, "nproc", 1)
    path, workers = getattr(args, "path", None), getattr(args, "workers", 1)
    max_memory = getattr(args, "max_memory", None)
    if args.artifact is not None:
        from pipeline.external.stage import ImportStage

        given = {"--num-samples": calibration.get("num_samples"), "--nproc": nproc != 1}
        given |= {"--path": path, "--workers": workers != 1, "--max-memory": max_memory}
        given["--max-seq-length"] = calibration.get("max_seq_length")
        for flag in (f for f, v in given.items() if v):
            raise UserError(f"{flag} applies to quantizing with a recipe, not an imported artifact")
        return ImportStage.prepare_import(args.model, args.artifact, args.recipe, args.revision)
    return QuantizeStage.prepare(
        args.model,
        "fp8" if args.recipe is None else args.recipe,
        revision=args.revision,
        nproc=nproc,
        path=path,
        workers=workers,
        max_memory=max_memory,
        **calibration,
    )
