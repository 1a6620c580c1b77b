#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12/13 machine, as root: installs what it needs, then
# runs the linter, the unit tests (the docs site too) and the integration tests (they start a real
# dev cluster). The set-up prints one line per stage; its whole output goes to a log file
# ($SLURMADM_TEST_LOG, default test-setup.log here), named when a stage fails. pytest's own
# output is shown as it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE_LOG=${SLURMADM_TEST_LOG:-$(pwd)/test-setup.log}
. scripts/stages.sh
stage "installing system packages" scripts/install-system-deps.sh
stage "installing slurmadm with its test and docs tools into .venv" scripts/setup.sh test,docs
stage "installing torch (CPU) for the burn-in tests" scripts/install-torch-cpu.sh .venv/bin/python  # a real all-reduce (gloo)
stage "linting (ruff)" .venv/bin/python -m ruff check --no-cache slurmadm tests bench scripts
export SLURMADM_REQUIRE_DOCS=1   # tests/unit/docs: mkdocs and chromium must be there, not skipped
.venv/bin/python -m pytest -m unit -q
.venv/bin/python -m pytest -m integration -q --durations=25 "$@"
