"""Slurm through pyslurm's object API. Chosen automatically when pyslurm imports and its release
(first two numbers) matches the running Slurm; pyslurm only works against its own release.

Written to pyslurm >= 22.5's object API:
  pyslurm.Node.load(name).modify(pyslurm.Node(state="DRAIN", reason=...))
  pyslurm.Nodes.load() -> mapping name -> Node (state "IDLE+DRAIN", reason, reason_user, ...)

Reservations are read with `scontrol show reservation -o` (the same reader as the cli backend:
scontrol is there wherever pyslurm is, and pyslurm's reservation API changed between releases),
so nodes of an active maintenance reservation count as MAINTENANCE at once with either backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UnreachableError
from .model import NodeInfo, Reservation, with_maintenance
from .parse import parse_version, split_state


def pyslurm_release(module: Any) -> tuple[int, int] | None:
    version = getattr(module, "__version__", None) or getattr(module, "version", lambda: "")()
    try:
        major, minor, _ = parse_version(str(version) + ".0.0")
    except UnreachableError:
        return None
    return major, minor


def pyslurm_built_for(module: Any) -> str | None:
    """The Slurm release the installed pyslurm was compiled against: `slurm_api_version()` (the
    SLURM_VERSION_NUMBER of the slurm.h it was built with) where pyslurm has it, else its own
    version's first two numbers (pyslurm is versioned after the Slurm release it builds for:
    24.11.x for 24.11)."""
    api = getattr(module, "slurm_api_version", None)
    if callable(api):
        try:
            got = api()
            if isinstance(got, (tuple, list)) and len(got) >= 2:
                return f"{int(got[0])}.{int(got[1]):02d}" + (f".{int(got[2])}" if len(got) > 2 else "")
        except Exception:  # a pyslurm that cannot answer: fall back to its version
            pass
    have = pyslurm_release(module)
    return None if have is None else f"{have[0]}.{have[1]:02d} (from pyslurm's version)"


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, module: Any, slurm_version: tuple[int, int, int],
                 reservations: Callable[[], list[Reservation]] = list):
        self.pyslurm = module
        self._version = slurm_version
        self.reservations = reservations

    def version(self) -> tuple[int, int, int]:
        return self._version

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except self.pyslurm.RPCError as exc:
            raise UnreachableError(f"pyslurm {what}: {exc}") from None

    @staticmethod
    def _info(node: Any) -> NodeInfo:
        base, flags = split_state(getattr(node, "state", "") or "")
        gres = getattr(node, "configured_gres", None) or {}
        gres_text = ",".join(f"{k}:{v}" for k, v in gres.items()) if isinstance(gres, dict) else str(gres)
        return NodeInfo(
            name=node.name,
            state=base,
            flags=flags,
            reason=getattr(node, "reason", None) or "",
            reason_user=getattr(node, "reason_user", None) or "",
            reason_time=float(getattr(node, "reason_time", None) or 0),
            gres=gres_text,
            partitions=tuple(getattr(node, "partitions", None) or ()),
            features=tuple(getattr(node, "available_features", None) or ()),
            cpus=int(getattr(node, "total_cpus", 0) or 0),
            real_memory=int(getattr(node, "real_memory", 0) or 0),
        )

    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]:
        if names:
            found = [self._info(self._call("load node", self.pyslurm.Node.load, n)) for n in names]
        else:
            found = [self._info(n) for n in self._call("load nodes", self.pyslurm.Nodes.load).values()]
        return with_maintenance(found, self.reservations())

    def _modify(self, nodes: list[str], **changes: str) -> None:
        for name in nodes:
            node = self._call("load node", self.pyslurm.Node.load, name)
            self._call("modify node", node.modify, self.pyslurm.Node(**changes))

    def drain(self, nodes: list[str], reason: str) -> None:
        self._modify(nodes, state="DRAIN", reason=reason)

    def resume(self, nodes: list[str]) -> None:
        self._modify(nodes, state="RESUME")

    def set_reason(self, nodes: list[str], reason: str) -> None:
        self._modify(nodes, reason=reason)
