"""Which GPUs a failed qualification blames (issue 45: "two failed qualifications of the same
part make it a lemon"), read from its tests as the qualification job reports them:

- the known-answer test names its disagreeing devices (`data.bad`: `cuda:5` on a real node,
  `standin:<node>:gpu5` in the dev cluster, kat.py);
- every other test (stress, single-node all-reduce, the health suite) names a GPU in its detail
  the way health and burn-in write them (`GPU5 HW thermal slowdown ...`, `xid: GPU5 XID 79 ...`).

A failing test that names no GPU blames the node, not a part. The GPU index is NVML's, as the
job saw it; `parts` turns it into the part (serial, UUID, bus id) through the node's GPU
inventory (node_state `health.gpus`, kept by health's gpu-count check)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

DEVICE_RE = re.compile(r"(?:\bgpu|^cuda:)(\d+)$")
GPU_RE = re.compile(r"\bGPU ?(\d+)\b")
FAILED = ("fail", "error")


def gpus(tests: Iterable[dict[str, Any]]) -> list[int]:
    """NVML indices of the GPUs the failing tests name, in order, each once."""
    out: dict[int, None] = {}
    for t in tests:
        if not isinstance(t, dict) or t.get("status") not in FAILED:
            continue
        data = t.get("data") if isinstance(t.get("data"), dict) else {}
        if t.get("test") == "kat" and isinstance(data.get("bad"), list):
            for name in data["bad"]:
                m = DEVICE_RE.search(str(name))
                if m:
                    out[int(m.group(1))] = None
            continue
        for m in GPU_RE.finditer(str(t.get("detail") or "")):
            out[int(m.group(1))] = None
    return list(out)


def parts(tests: Iterable[dict[str, Any]], inventory: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The blamed GPUs as parts: {"slot", "serial", "uuid", "bus_id"} ('' where the inventory
    does not know the index)."""
    by_index = {str(g.get("index")): g for g in inventory if isinstance(g, dict) and g.get("present", True)}
    out = []
    for i in gpus(tests):
        g = by_index.get(str(i), {})
        out.append({"slot": str(i), **{k: str(g.get(k) or "") for k in ("serial", "uuid", "bus_id")}})
    return out


def describe(blamed: list[dict[str, str]]) -> str:
    """`GPU5 (serial 1652325100005)`, joined; '' for none."""
    return ", ".join(f"GPU{b['slot']}" + (f" (serial {b['serial']})" if b.get("serial") else "") for b in blamed)
