#!/usr/bin/env bash
# The soak (issue 33; RELIABILITY.md, "Soak"): benchmarks/soak.py, 3 `jaxattn serve` replicas on
# loopback at 70 % of their measured capacity, restarted in turn (SIGTERM, SIGKILL), with clients
# that vanish; every answer checked, RSS, fds and threads sampled every second. Run niced.
#   scripts/soak.sh                              the recorded profile: 2 hours, a restart every 10 min
#   scripts/soak.sh --duration 600 --restart-every 2    any other (benchmarks/soak.py --help)
# The report: $WORKDIR/soak.md (and soak.json, soak.svg, samples.csv); exit 0 when it passes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
WORKDIR=${WORKDIR:-/tmp/jaxattn-soak}
if [ $# -eq 0 ]; then
  set -- --small-model --duration 7200 --restart-every 10
fi
exec nice -n "${NICE:-5}" "$PY" benchmarks/soak.py --workdir "$WORKDIR" "$@"
