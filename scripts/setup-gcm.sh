#!/usr/bin/env bash
# Meta GCM (PyPI gpucm) in its own virtualenv, .venv-gcm: it pins click==8.0.4 and the old
# pynvml 11.4 package, which would shadow nvidia-ml-py in slurmadm's .venv. Safe to re-run.
# Prints the path of GCM's `health_checks` command.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-gcm
if ! "$venv/bin/health_checks" --help >/dev/null 2>&1; then   # missing, or built elsewhere
  "${PYTHON:-python3}" -m venv --clear "$venv"
  "$venv/bin/pip" install --quiet gpucm >&2
fi
echo "$(pwd)/$venv/bin/health_checks"
