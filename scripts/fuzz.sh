#!/usr/bin/env bash
# Coverage-guided fuzzing of one parser (atheris/libFuzzer): scripts/fuzz.sh TARGET [N] [libFuzzer options]
#   TARGET  one of tests/fuzz/fuzz_*.py without the prefix (capture_file, wire_receive, ...);
#           "all" runs each target in turn
#   N       inputs to run (default 1000000); the working corpus .fuzz/corpus/TARGET keeps
#           what a run found, so running again continues from there
# A crash (an undesigned exception or a hang over 10 s) stops the run and is written as
# .fuzz/crashes/TARGET-crash-<sha1>; fix the parser, and put the input in
# tests/fuzz/corpus/TARGET/ with a regression test (RELIABILITY.md, Fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?"usage: scripts/fuzz.sh TARGET [N] [libFuzzer options]"}
runs=${2:-1000000}
shift $(($# < 2 ? $# : 2))
py=${PYTHON:-.venv/bin/python}
if [ "$target" = all ]; then
  for t in tests/fuzz/fuzz_*.py; do
    t=${t##*/fuzz_}
    "$0" "${t%.py}" "$runs" "$@"
  done
  exit 0
fi
mkdir -p .fuzz/crashes
exec env PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" "$py" tests/fuzz/run.py "$target" \
  -runs="$runs" -max_len=8192 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix=".fuzz/crashes/$target-" "$@"
