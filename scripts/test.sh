#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12/13 machine, as root: installs what it needs, then
# runs unit and integration tests (the integration tests start a real dev cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/install-torch-cpu.sh .venv/bin/python   # the burn-in tests run a real all-reduce (gloo, CPU)
.venv/bin/python -m pytest -m unit -q
.venv/bin/python -m pytest -m integration -q --durations=25 "$@"
