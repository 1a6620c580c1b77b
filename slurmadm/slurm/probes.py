"""slurmctld's HTTP probes (Slurm 25.11+): GET /livez, /readyz and /healthz on its own port
(SlurmctldPort), answered `204 NO CONTENT` when fine (seen on 26.05.5:
tests/fixtures/slurm/26.05/COMMANDS.txt). Beside `scontrol ping` (an RPC through munge), /readyz
says whether slurmctld accepts work; neither needs credentials. The metrics pages do on 26.05
with MetricsAuthUsers (slurm/jwt.py)."""

from __future__ import annotations

import http.client
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    url: str
    ok: bool
    detail: str  # "204 NO CONTENT", or why there was no answer


def get(host: str, port: int, path: str = "/readyz", *, timeout: float = 3.0, token: str | None = None) -> Probe:
    """`token`: a JWT sent as `Authorization: Bearer` (26.05's authenticated metrics); never in `detail`."""
    url = f"http://{host}:{port}{path}"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        resp.read(4096)
        return Probe(url, 200 <= resp.status < 300, f"{resp.status} {resp.reason}".strip())
    except (OSError, http.client.HTTPException) as exc:
        return Probe(url, False, f"no answer ({type(exc).__name__}: {exc})")
    finally:
        conn.close()


def controller(config: dict[str, str]) -> tuple[str, int] | None:
    """(host, port) of the primary slurmctld from `scontrol show config` keys (SlurmctldHost[0]
    "name" or "name(addr)", SlurmctldAddr, SlurmctldPort "6817" or a range "6817-6818"), else
    from slurm.conf keys (SlurmctldHost, SlurmctldPort)."""
    host = config.get("SlurmctldHost[0]") or config.get("SlurmctldHost") or ""
    m = re.match(r"^\s*([^\s(]+)(?:\(([^)]+)\))?", host)
    if not m:
        return None
    addr = config.get("SlurmctldAddr") or ""
    name = addr if addr and addr != "(null)" else (m.group(2) or m.group(1))
    port_text = config.get("SlurmctldPort") or "6817"
    pm = re.match(r"^\s*(\d+)", port_text)
    return (name, int(pm.group(1))) if pm else None
