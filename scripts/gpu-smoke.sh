#!/usr/bin/env bash
# slurmadm on a real NVIDIA GPU machine, in one go (under ten minutes), with nothing but this
# repository: installs what it needs into .venv-gpu-smoke, describes this machine as a one-node
# site (smoke-001), runs every NVML health check through the hook's entry point
# (`python -I -m slurmadm.health run`, what prolog.sh execs) against the real driver, then a
# one-GPU torch/NCCL all-reduce (the nccl-allreduce check), and prints a pass/fail table.
# On a single PCIe GPU the fabric and NVLink checks say "not supported"/"no NVLinks" (skip).
#
#   scripts/gpu-smoke.sh            on the GPU machine (exit 0: all pass; 1: a check failed)
#   scripts/gpu-smoke.sh --dry-run  anywhere: the same steps against the stand-in NVML (a single
#                                   PCIe GPU), without installing anything or running torch
#
# Environment: GPU_SMOKE_DIR (work dir, default /tmp/slurmadm-gpu-smoke), PYTHON (python3),
# GPU_SMOKE_VENV (default .venv-gpu-smoke; the dry run uses .venv when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu-smoke.sh [--dry-run]" >&2; exit 2 ;;
esac
WORK=${GPU_SMOKE_DIR:-/tmp/slurmadm-gpu-smoke}
rm -rf "$WORK"; mkdir -p "$WORK/state"
say() { echo "gpu-smoke: $*" >&2; }
NVML_CHECKS=gpu-count,ecc-uncorrected,row-remap,xid,nvlink,pcie-link,thermal,clock-events,fabric,ecc-corrected,retired-pages,power,driver-version,persistence-mode

# 1. a Python environment with slurmadm (and, on the GPU machine, a CUDA build of torch)
if [ "$DRY" = 1 ] && [ -x .venv/bin/python ]; then
  VENV=.venv
  say "dry run: would create ${GPU_SMOKE_VENV:-.venv-gpu-smoke}, pip install -e . and torch (CUDA build); using .venv"
else
  VENV=${GPU_SMOKE_VENV:-.venv-gpu-smoke}
  [ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -e .
  if [ "$DRY" = 0 ] && ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    say "installing torch (CUDA build) for the all-reduce"
    timeout 420 "$VENV/bin/pip" install --quiet --disable-pip-version-check torch || say "torch install failed: the all-reduce will say so"
  fi
fi
PY="$REPO/$VENV/bin/python"
[ -x "$PY" ] || PY="$VENV/bin/python"

# 2. this machine's GPUs (NVML); the dry run stands a single PCIe GPU in with the stand-in library
if [ "$DRY" = 1 ]; then
  cat > "$WORK/facts.json" <<'JSON'
{"count": 1, "nvml_name": "NVIDIA H200 NVL", "nvlinks": 0, "nvswitches": 0, "pcie_gen": 5, "pcie_width": 16,
 "power_limit_w": 600, "memory_gib": 141, "driver": "570.133.20"}
JSON
  GPU_SMOKE_XID_SOURCE="$WORK/gpus/{node}.kmsg" "$PY" scripts/gpu_smoke.py site "$WORK/facts.json" "$WORK/site.toml" "$WORK/state"
  "$PY" - "$WORK" <<'PYCODE'
import sys
from slurmadm.devcluster import gpus
from slurmadm.site import load_site
work = sys.argv[1]
site = load_site(f"{work}/site.toml")
gpus.build_library(f"{work}/lib")
gpus.write_healthy(f"{work}/gpus", "smoke-001", site.node_profile("smoke-001"), driver_version=site.software.driver_version)
PYCODE
  export LD_LIBRARY_PATH="$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SLURMADM_FAKE_NVML_DIR="$WORK/gpus" SLURMADM_FAKE_NVML_NODE=smoke-001
  "$PY" scripts/gpu_smoke.py facts > "$WORK/facts-standin.json"   # the facts step, through the stand-in
  say "facts read through NVML: $(cat "$WORK/facts-standin.json")"
else
  command -v nvidia-smi >/dev/null && nvidia-smi -L >&2 || true
  "$PY" scripts/gpu_smoke.py facts > "$WORK/facts.json"
  say "facts: $(cat "$WORK/facts.json")"
  "$PY" scripts/gpu_smoke.py site "$WORK/facts.json" "$WORK/site.toml" "$WORK/state"
fi
export SLURMADM_SITE="$WORK/site.toml" SLURMADM_CACHE_DIR="$WORK/cache"

# 3. every NVML check through the hook's entry point (dry run: report only, no Slurm)
set +e
timeout 120 "$PY" -I -m slurmadm.health run --node smoke-001 --dry-run --json --checks "$NVML_CHECKS" > "$WORK/nvml.json"
rc=$?
set -e
[ -s "$WORK/nvml.json" ] || { say "the health run printed nothing (exit $rc)"; exit 1; }
REPORTS=("$WORK/nvml.json")

# 4. a one-GPU all-reduce (torch.distributed with NCCL, or all_reduce_perf when on PATH)
if [ "$DRY" = 1 ]; then
  say "dry run: would run the nccl-allreduce check (torch/NCCL, one rank per GPU)"
else
  set +e
  timeout 360 "$PY" -I -m slurmadm.health run --node smoke-001 --dry-run --json --checks nccl-allreduce > "$WORK/nccl.json"
  set -e
  [ -s "$WORK/nccl.json" ] && REPORTS+=("$WORK/nccl.json")
fi

# 5. the table
"$PY" scripts/gpu_smoke.py table "${REPORTS[@]}"
