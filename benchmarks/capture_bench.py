"""Capture benchmark (issue 2); the same as `jaxattn bench`.

    .venv/bin/python benchmarks/capture_bench.py [--conllu FILE] [-n 512] [--repeats 3]

Figures are recorded in BENCHMARKS.md with the machine and date.
"""

import sys

from jaxattn.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
