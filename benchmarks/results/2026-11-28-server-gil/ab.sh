#!/bin/bash
# ab.sh ROUNDS THREADS [e2e args]: base (main) and this branch alternating
rounds=$1; th=$2; shift 2
for r in $(seq $rounds); do
  for tree in /work/main /work/wt-servergil; do
    echo -n "$(basename $tree) threads=$th: "
    SG_THREADS=$th PYTHONPATH=$tree nice -n 10 /work/main/.venv/bin/python /tmp/sg/e2e.py --texts 48 --repeats 3 --threads 4 "$@" 2>&1 | tail -1
  done
done
