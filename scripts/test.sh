#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra args go to pytest.
# Two worker processes (pytest-xdist), each test file on one worker (its module
# fixtures built once): JAXATTN_TEST_WORKERS=0 runs in this process (-n 0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n "${JAXATTN_TEST_WORKERS:-2}" --dist loadfile "$@"
