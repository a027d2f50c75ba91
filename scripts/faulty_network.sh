#!/usr/bin/env bash
# The load test across a network that misbehaves (issue 33; RELIABILITY.md, "Under a
# faulty network"): benchmarks/faulty_network.py in two network namespaces of its own.
# Needs root, iproute2 and nftables (scripts/setup.sh installs nftables when run as root).
#   scripts/faulty_network.sh        the target profile: 3 replicas, 100,000 requests from
#                                    256 clients (about 45-60 minutes on 2 shared cores)
#   scripts/faulty_network.sh --replicas 3 --requests 2000 --clients 128 ...   any other
#                                    (every option is passed on; see --help)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if [ "$(id -u)" != 0 ]; then
  echo "faulty_network: needs root (ip netns add); nothing was run" >&2
  exit 2
fi
for tool in ip tc nft; do
  if ! command -v "$tool" >/dev/null; then
    echo "faulty_network: '$tool' is missing (apt-get install iproute2 nftables); nothing was run" >&2
    exit 2
  fi
done
if [ $# -eq 0 ]; then
  set -- --small-model --replicas 3 --requests 100000 --clients 256 --loss 1 --rate 400mbit \
    --delay-ms 20 --jitter-ms 10 --reset-after 80000000:240000000 \
    --stall-after 20000000:80000000 --stall-s 2 --partition-s 5 --partition-after-s 30
fi
exec "$PY" benchmarks/faulty_network.py "$@"
