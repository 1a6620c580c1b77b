"""A stand-in training task of the replay's job stream (one per node, under srun).

It "trains" for its duration and dies the way a real one does: when one of its GPUs is lost
(NVML answers GPU_IS_LOST / not found, as CUDA fails) or when the node's kernel log gains a fatal
XID for one of its GPUs (a CUDA error or NCCL timeout follows in a real job). Usage:

    python job.py DURATION_S KMSG_FILE [USER_FAIL_DIR]

A file named for the node in USER_FAIL_DIR (the replay's `user` faults: a software bug, no node
signal) makes the task on that node fail with exit 1, as a job's own bug does. A GPU of its own
that silently computes wrong answers (the stand-in's `corrupt` fault: no counter, no log line)
makes it fail too, its loss gone NaN: Llama 3 counts 6 such interruptions in 419
(fault-taxonomy-2026-12.md 3.7).

A straggler among the job's nodes (the stand-in's `slow`: PCT percent slower, no check fails)
slows every task of the job, as synchronous data-parallel training waits for its slowest rank each
step (MegaScale, fault-taxonomy-2026-12.md): the task's DURATION_S is work, done at
1 - PCT/100 of the healthy rate while the slowest of its nodes is slow, so the run ends later.
"""

from __future__ import annotations

import os
import re
import sys
import time

# XIDs after which the CUDA context of a process on that GPU is gone (NVIDIA's Xid catalog: the
# ones whose resolution is a GPU reset or node reboot, plus the contained ECC error that kills the
# faulting process). Application-class XIDs (13, 31, 43, 45) are the job's own fault, raised by it.
FATAL = {8, 46, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 109, 110, 119, 120, 136, 140, 143, 144, 145, 149, 154}
SLOW_KEY = "burnin_slowdown_pct"  # the stand-in's straggler (slurmadm.burnin.node.STANDIN_SLOWDOWN_KEY)
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)[ )].*?(\d+),")


def bus_key(bus: str) -> str:
    """`1b:00` from NVML's `00000000:1B:00.0` and from the kernel's `0000:1b:00`."""
    parts = bus.split(".")[0].split(":")
    return ":".join(parts[-2:]).lower()


def corrupting(state_dir: str, node: str, visible: list[int]) -> list[int]:
    """The task's GPUs whose stand-in computes wrong answers (`gpu-fault --kind corrupt`)."""
    try:
        from slurmadm.devcluster import gpus

        effective = gpus.effective_gpus(gpus.read_state(state_dir, node))
    except Exception:  # noqa: BLE001 - no stand-in state readable: nothing to say about it
        return []
    return [i for i in visible if i < len(effective) and effective[i].get("kat_corrupt")]


def slowdown(state_dir: str, nodes: list[str]) -> float:
    """Percent slower the slowest of the job's nodes is (the stand-in's `slow` on any of its GPUs
    slows the whole node; 0: none, or no stand-in state), at most 95."""
    from slurmadm.devcluster import gpus

    pct = 0.0
    for node in nodes:
        try:  # a big job's tasks ask every 2 s: a node's state is read again only once it changed
            st = os.stat(os.path.join(state_dir, f"{node}.json"))
            stamp = (st.st_mtime_ns, st.st_ino, st.st_size)  # written atomically: a new file each time
            if _SEEN.get(node, (None,))[0] != stamp:
                _SEEN[node] = (stamp, max([0.0] + [float(g.get(SLOW_KEY) or 0)
                                                   for g in gpus.effective_gpus(gpus.read_state(state_dir, node))]))
            pct = max(pct, _SEEN[node][1])
        except Exception:  # noqa: BLE001 - no stand-in state readable for it: full speed
            continue
    return min(max(pct, 0.0), 95.0)


_SEEN: dict[str, tuple[tuple[int, int, int], float]] = {}  # node -> (its state file's stamp, its slowdown)


def job_nodes() -> list[str]:
    """The job's nodes (SLURM_JOB_NODELIST), or this node alone."""
    from slurmadm.hostlist import expand

    here = os.environ.get("SLURMD_NODENAME", "")
    try:
        return expand(os.environ["SLURM_JOB_NODELIST"]) or [here]
    except Exception:  # noqa: BLE001 - unset or unreadable: this node's own speed
        return [here]


def main() -> int:
    duration, kmsg = float(sys.argv[1]), sys.argv[2]
    user_fail = os.path.join(sys.argv[3], os.environ.get("SLURMD_NODENAME", "")) if len(sys.argv) > 3 else None
    import pynvml

    pynvml.nvmlInit()
    visible = [int(i) for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i.strip().isdigit()]
    buses = set()
    for i in visible:
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        bus = pynvml.nvmlDeviceGetPciInfo(h).busId
        buses.add(bus_key(bus.decode() if isinstance(bus, bytes) else bus))
    try:
        offset = os.path.getsize(kmsg)
    except OSError:
        offset = 0
    state_dir, nodes = os.path.dirname(kmsg), job_nodes()
    work, last = 0.0, time.monotonic()  # DURATION_S of work at the healthy rate
    rate = 1 - slowdown(state_dir, nodes) / 100
    while work < duration:
        time.sleep(min(2.0, max(0.0, (duration - work) / rate)))
        now = time.monotonic()
        work, last = work + (now - last) * rate, now
        rate = 1 - slowdown(state_dir, nodes) / 100
        if user_fail and os.path.exists(user_fail):
            os.unlink(user_fail)
            print("RuntimeError: shape mismatch in the user's model code", file=sys.stderr)
            return 1
        wrong = corrupting(os.path.dirname(kmsg), os.environ.get("SLURMD_NODENAME", ""), visible)
        if wrong:
            print(f"RuntimeError: loss is NaN (GPU {wrong[0]} computes wrong answers: no error was raised)",
                  file=sys.stderr)
            return 1
        for i in visible:
            try:
                pynvml.nvmlDeviceGetTemperature(pynvml.nvmlDeviceGetHandleByIndex(i), 0)
            except pynvml.NVMLError as e:
                print(f"CUDA error: unspecified launch failure (GPU {i}: {e})", file=sys.stderr)
                return 1
        try:
            with open(kmsg, "rb") as f:
                f.seek(offset if os.path.getsize(kmsg) >= offset else 0)
                new = f.read().decode("utf-8", "replace")
                offset = f.tell()
        except OSError:
            new = ""
        for bus, xid in XID.findall(new):
            if int(xid) in FATAL and bus_key(bus) in buses:
                print(f"CUDA error: an illegal memory access was encountered (Xid {xid} on {bus})",
                      file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
