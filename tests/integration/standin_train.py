"""A stand-in training job for the dev cluster (tests/integration/test_job_failures.py): it "trains"
on the GPUs Slurm gave it and dies the way a real job does when one of them faults (an NCCL
timeout, a CUDA error): it watches the stand-in GPUs' fault records and exits 1 naming the GPU.

    python standin_train.py STATE_DIR [SECONDS]
"""

from __future__ import annotations

import os
import sys
import time

from slurmadm.devcluster import gpus
from slurmadm.jobmap import parse_gpu_list

FATAL = {"xid", "missing-gpu", "ecc-uncorrected", "hang", "fabric"}


def main() -> int:
    state_dir, limit = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 600.0
    node = os.environ["SLURMD_NODENAME"]
    mine = set(parse_gpu_list(os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES") or "")
               ) or set(range(8))
    print(f"training on {node} GPUs {sorted(mine)}", flush=True)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for f in gpus.list_faults(state_dir, node):
            if f["gpu"] in mine and f["kind"] in FATAL:
                print(f"NCCL watchdog: collective timed out; CUDA error on GPU{f['gpu']} ({f['kind']} {f['value']})",
                      file=sys.stderr, flush=True)
                return 1
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
