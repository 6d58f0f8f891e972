"""One module per stage. A stage validates its inputs before touching the run directory,
then hands its work to `pipeline.runner.run_stage`, which records it in manifest.json."""
