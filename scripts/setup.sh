#!/usr/bin/env bash
# Set up slurmadm from a checkout: system packages (as root), then a virtualenv in .venv with
# slurmadm installed in editable mode. Usage: scripts/setup.sh [extra ...]   (e.g. test)
set -euo pipefail
cd "$(dirname "$0")/.."

"$(pwd)/scripts/install-system-deps.sh"

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
extras=${1:-}
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/pip install --quiet -e "$spec"
echo "slurmadm installed: $(.venv/bin/slurmadm --version)"
