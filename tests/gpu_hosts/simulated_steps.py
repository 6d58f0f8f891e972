#!/usr/bin/env python3
"""gpu-check's steps simulated, for a host without a GPU (tests/unit/core/test_gpu_check.py):
`GPU_CHECK_COMMAND="python tests/gpu_hosts/simulated_steps.py"` puts it where `python -m` would
be. It answers each step as a healthy GPU host's pipeline would — the `--json` outcome line of
pipeline/core/outcome.py, a random-weight model's eval failing its gates with finite drift —
without running anything. Nothing here was captured on a GPU.

SIMULATE_FAIL=<word>: a step whose arguments contain it exits 1 with an error line (`build`: the
8B-shape build fails; `resume`: the resumed run's bytes differ); SIMULATE_NAN=1: the 8B-shape
eval's KL is NaN.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from pipeline.core.outcome import Outcome, StageOutcome  # noqa: E402

DRIFT = {"kl_mean": 1.1e-4, "ppl_ratio": 1.0001, "same_top_pct": 99.2}
RANDOM_DRIFT = {"kl_mean": 0.41, "ppl_ratio": 1.9, "same_top_pct": 61.0}


def main() -> int:
    module, args = sys.argv[1], sys.argv[2:]
    fail = os.environ.get("SIMULATE_FAIL")
    if module == "pipeline.gpu_host.fork_guard_check":  # the guard caught the poisoned parent
        print("  (CUDA was initialised in this process before the fork …)", file=sys.stderr)
        print("result 1024")
        return 0
    if module == "pipeline.models.realshape":
        if fail == "build":
            print("torch.OutOfMemoryError: CUDA out of memory (simulated)", file=sys.stderr)
            return 1
        print(tempfile.mkdtemp(prefix="realshape-"))
        return 0
    if module == "pipeline.gpu_host.resume_check":  # killed after a layer, resumed, same bytes
        if fail == "resume":
            print('{"why": "resuming at layer 2 of 4 (1 done): 1 tensors differ: (simulated)", '
                  '"detail": ""}')  # fmt: skip
            return 1
        print('{"why": null, "detail": "resuming at layer 2 of 4 (1 done); every tensor\'s bytes '
              'as the uninterrupted run\'s (simulated)"}')  # fmt: skip
        return 0
    command = args[0]
    if fail and any(fail in a for a in args):
        print(f"error: {command} failed (simulated)", file=sys.stderr)
        return 1
    real = "--model" in args and "realshape" in args[args.index("--model") + 1]
    stage = StageOutcome(stage=command, status="done")
    outcome = Outcome.of(command, "ok", stages=[stage])
    if command == "eval":
        stage.metrics = dict(RANDOM_DRIFT if real else DRIFT)
        if real:
            if os.environ.get("SIMULATE_NAN"):
                stage.metrics["kl_mean"] = float("nan")
            stage.status, stage.reason = "gate_failed", "gate_failed"
            stage.message = "eval gate failed: max_mean_kl (0.41 vs 0.02)"
            outcome = Outcome.of(command, "gate_failed", stage.message, stages=[stage])
    print(outcome.model_dump_json())  # NaN is written as null, as the CLI writes it
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
