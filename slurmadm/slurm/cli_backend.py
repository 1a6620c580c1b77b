"""The default Slurm backend: scontrol / sinfo (argv lists, time limits, every release)."""

from __future__ import annotations

import re
from functools import cached_property

from ..errors import CommandFailed, UnreachableError
from ..hostlist import compress
from ..proc import run
from .model import NodeInfo, Reservation, with_maintenance
from .parse import (
    SlurmErrors,
    nodes_from_json,
    nodes_from_scontrol_text,
    parse_reservations,
    parse_version,
)

NO_CONTROLLER = re.compile(r"Unable to contact slurm controller[^\"\n]*", re.IGNORECASE)
PING_TIMEOUT_S = 5.0  # `scontrol ping` tries each controller once: it answers at once when none listens


def no_controller(exc: CommandFailed | UnreachableError) -> str | None:
    """Slurm's words when a failed query says slurmctld could not be reached (its text form on
    stderr, its JSON form in "errors"), else None."""
    found = NO_CONTROLLER.search(exc.output if isinstance(exc, CommandFailed) else str(exc))
    return found.group(0).strip() if found else None


class CliBackend:
    name = "cli"

    def __init__(self, *, timeout: float = 20.0, env: dict[str, str] | None = None):
        self.timeout = timeout
        self.env = env  # e.g. {"SLURM_CONF": ...}; None: inherit

    def _run(self, argv: list[str], *, timeout: float | None = None, check: bool = True):
        return run(argv, timeout=timeout or self.timeout, env=self.env, check=check)

    @cached_property
    def _version(self) -> tuple[int, int, int]:
        return parse_version(self._run(["sinfo", "--version"]).stdout)

    def version(self) -> tuple[int, int, int]:
        return self._version

    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]:
        if self.version() >= (23, 11, 0):
            argv = ["scontrol", "--json", "show", "node"]
            if names:
                argv.append(compress(names))
        else:
            argv = ["sinfo", "--json"]
        try:
            proc = self._run(argv)
            found = nodes_from_json(proc.stdout, " ".join(argv[:3]))
        except (CommandFailed, UnreachableError) as exc:
            # No slurmctld: say so after one query (each query waits Slurm's MessageTimeout for
            # it), not after the text form's as well.
            if "no answer" in str(exc):
                raise
            if why := no_controller(exc):
                raise UnreachableError(f"{argv[0]}: {why}") from None
            if isinstance(exc, SlurmErrors) and (down := self._controllers_down()):
                raise UnreachableError(f"{exc}; scontrol ping: {down}") from None
            # JSON plugin missing or odd: fall back to the one-line text form.
            argv = ["scontrol", "show", "node", "-o"]
            if names:
                argv.append(compress(names))
            found = nodes_from_scontrol_text(self._run(argv).stdout)
        if names:
            wanted = set(names)
            found = [n for n in found if n.name in wanted]
            missing = wanted - {n.name for n in found}
            if missing:
                raise UnreachableError(f"Slurm does not know node(s) {compress(missing)}")
        return with_maintenance(found, self.reservations())

    def _controllers_down(self) -> str | None:
        """`scontrol ping`'s verdict when no slurmctld is up (22.05's `sinfo --json` does not say
        why it has no nodes): "Slurmctld(primary) at head is DOWN", else None."""
        try:
            proc = self._run(["scontrol", "ping"], timeout=min(PING_TIMEOUT_S, self.timeout), check=False)
        except UnreachableError as exc:
            return str(exc)
        said = [line.strip() for line in proc.stdout.splitlines() if line.startswith("Slurmctld(")]
        if proc.returncode == 0 or not said:
            return None
        return "; ".join(said)

    def reservations(self) -> list[Reservation]:
        return parse_reservations(self._run(["scontrol", "show", "reservation", "-o"]).stdout)

    def _update(self, nodes: list[str], *fields: str) -> None:
        if not nodes:
            return
        self._run(["scontrol", "update", f"NodeName={compress(nodes)}", *fields])

    def drain(self, nodes: list[str], reason: str) -> None:
        self._update(nodes, "State=DRAIN", f"Reason={reason}")

    def resume(self, nodes: list[str]) -> None:
        self._update(nodes, "State=RESUME")

    def set_reason(self, nodes: list[str], reason: str) -> None:
        self._update(nodes, f"Reason={reason}")
