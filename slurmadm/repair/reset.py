"""GPU reset without a reboot: `nvidia-smi --gpu-reset -i N` on a drained node with no job.

Run over the fleet's SSH (`slurmadm.fleet.ssh.Remote`), one round trip per node: read each
target GPU's persistence mode, turn it off where it is on, reset, turn it back on, and print
one `slurmadm-reset` line per GPU that the head parses. A reset that fails (non-zero exit, a GPU
left in persistence mode we could not turn off, an unreachable node) is the caller's cue to fall
back to a reboot.

NVIDIA's rules for a reset are kept as data (`RULES`, each with its source): which platforms may
reset a single GPU, what Fabric Manager needs, and what persistence mode needs. They come from
documentation, not from hardware: nothing here has run on an HGX B200.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import UnreachableError

RESET_TIMEOUT_S = 120.0  # nvidia-smi's reset takes seconds; NVSwitch retraining a little more
MARK = "slurmadm-reset"


@dataclass(frozen=True)
class ResetRule:
    """What NVIDIA documents for resetting one GPU on a kind of baseboard."""

    name: str
    models: tuple[str, ...]  # site gpus.model values this rule covers
    nvswitch: bool  # GPUs behind NVSwitches (HGX/DGX baseboards)
    single_gpu: bool  # may one GPU be reset alone (else the whole baseboard at once)
    fabric_manager: str  # "keep-running" | "required" | "none"
    persistence_mode: str  # "disable-and-restore": off for the reset, back on after
    after: str  # what must hold after the reset before the GPU is used again
    sources: tuple[str, ...] = field(default=())


SOURCES = {
    "nvidia-smi": "nvidia-smi(1), option -r/--gpu-reset (driver 550+): no application may use the GPU; "
                  "from the NVIDIA Ampere architecture on, NVLink-connected GPUs can be reset one at a time; "
                  "on Ampere NVSwitch systems Fabric Manager is required to facilitate the reset, on Hopper "
                  "and later NVSwitch systems that dependency is removed",
    "nvsentinel": "NVIDIA/NVSentinel gpu_reset.sh (Apache-2.0, 2025): read persistence_mode, `nvidia-smi -i <uuid> "
                  "-pm 0` where Enabled, `nvidia-smi --gpu-reset -i <uuids>`, restore `-pm 1`, then `nvidia-smi -q` "
                  "as the post-reset check",
    "fabric-manager": "NVIDIA Fabric Manager user guide r560/2.3, Bare Metal Mode (docs.nvidia.com/datacenter/tesla/"
                      "fabric-manager-user-guide): on NVSwitch baseboards (HGX A100/H100/B200) Fabric Manager trains "
                      "the GPU's NVLinks and registers it with the fabric; its fabric state must be Completed again "
                      "before CUDA work uses NVLink",
    "nvml": "NVML nvmlDeviceGpuRecoveryAction_t: GPU_RESET (1), NODE_REBOOT (2), DRAIN_P2P (3), DRAIN_AND_RESET (4)",
}

RULES: tuple[ResetRule, ...] = (
    # NVLink5 / 5th-generation NVSwitch (HGX B200/B300) and NVLink4 (HGX H100/H200): single-GPU
    # reset, Fabric Manager stays up (it re-registers the GPU), persistence mode off around it.
    ResetRule("hgx-nvswitch-hopper-and-later", ("b200", "b300", "gb200", "h100", "h200", "h800", "h20"),
              nvswitch=True, single_gpu=True, fabric_manager="keep-running",
              persistence_mode="disable-and-restore",
              after="fabric state Completed for the GPU (the `fabric` health check) before NVLink use",
              sources=("nvidia-smi", "nvsentinel", "fabric-manager", "nvml")),
    # Ampere NVSwitch (HGX A100): single-GPU reset only through a running Fabric Manager.
    ResetRule("hgx-nvswitch-ampere", ("a100", "a800"), nvswitch=True, single_gpu=True, fabric_manager="required",
              persistence_mode="disable-and-restore",
              after="fabric state Completed for the GPU (the `fabric` health check) before NVLink use",
              sources=("nvidia-smi", "nvsentinel", "fabric-manager")),
    # PCIe cards, no NVSwitch: a plain single-GPU reset.
    ResetRule("pcie", (), nvswitch=False, single_gpu=True, fabric_manager="none",
              persistence_mode="disable-and-restore", after="nothing beyond the health suite",
              sources=("nvidia-smi", "nvsentinel")),
)


def rule_for(model: str, nvswitches: int) -> ResetRule:
    """The rule for a site profile's GPUs (`gpus.model`, `gpus.nvswitches`)."""
    for rule in RULES:
        if model in rule.models:
            return rule
    if nvswitches:  # an NVSwitch model this table does not name: the strictest NVSwitch rule
        return next(r for r in RULES if r.fabric_manager == "required")
    return next(r for r in RULES if r.name == "pcie")


def script(slots: Sequence[int], rule: ResetRule) -> str:
    """The sh script run on the node: one `slurmadm-reset <idx> <pm> <rc> <detail>` line per GPU."""
    lines = ["rc_all=0"]
    if rule.fabric_manager == "required":
        # Ampere NVSwitch: without a running Fabric Manager the reset is refused; say so first
        lines.append("if ! pgrep -x nv-fabricmanager >/dev/null 2>&1; then "
                     f"echo '{MARK} - - 1 Fabric Manager is not running (required for a reset here)'; exit 1; fi")
    for idx in slots:
        i = shlex.quote(str(int(idx)))
        lines += [
            (f"pm=$(nvidia-smi -i {i} --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null "
             "| head -n 1 | tr -d ' \\r')"),
            # unreadable: taken as Enabled (the data-center default), so it is off for the reset
            "case \"$pm\" in Enabled|Disabled) ;; *) pm=unknown ;; esac",
            f"if [ \"$pm\" != Disabled ]; then nvidia-smi -i {i} -pm 0 >/dev/null 2>&1; fi",
            f"out=$(nvidia-smi --gpu-reset -i {i} 2>&1); rc=$?",
            f"if [ \"$pm\" != Disabled ]; then nvidia-smi -i {i} -pm 1 >/dev/null 2>&1; fi",
            "[ $rc -eq 0 ] || rc_all=$rc",
            f"echo \"{MARK} {int(idx)} $pm $rc $(printf '%s' \"$out\" | tr '\\n' ' ' | cut -c1-200)\"",
        ]
    lines.append("exit $rc_all")
    return "\n".join(lines) + "\n"


@dataclass
class GpuReset:
    slot: int
    ok: bool
    persistence_mode: str
    detail: str


@dataclass
class ResetResult:
    node: str
    ok: bool
    gpus: list[GpuReset]
    detail: str  # one line
    rule: str

    def to_json(self) -> dict:
        return {"node": self.node, "ok": self.ok, "detail": self.detail, "rule": self.rule,
                "gpus": [g.__dict__ for g in self.gpus]}


def parse(node: str, exit_code: int | None, output: str, slots: Sequence[int], rule: ResetRule) -> ResetResult:
    gpus: dict[int, GpuReset] = {}
    problems: list[str] = []
    for line in output.splitlines():
        if not line.startswith(MARK + " "):
            continue
        parts = line.split(" ", 4)
        if len(parts) < 4:
            continue
        detail = parts[4].strip() if len(parts) > 4 else ""
        if parts[1] == "-":
            problems.append(detail)
            continue
        try:
            slot, rc = int(parts[1]), int(parts[3])
        except ValueError:
            continue
        gpus[slot] = GpuReset(slot, rc == 0, parts[2], detail)
    missing = [s for s in slots if s not in gpus]
    bad = [g for g in gpus.values() if not g.ok]
    ok = exit_code == 0 and not missing and not bad and not problems
    if ok:
        detail = f"GPU {','.join(map(str, slots))} reset ({rule.name})"
    elif problems:
        detail = problems[0]
    elif bad:
        detail = f"GPU{bad[0].slot} reset failed: {bad[0].detail or 'nvidia-smi exited non-zero'}"
    else:
        tail = (output.strip().splitlines() or ["no output"])[-1][:200]
        detail = f"reset did not report GPU {','.join(map(str, missing)) or '?'} (exit {exit_code}): {tail}"
    return ResetResult(node, ok, [gpus[s] for s in sorted(gpus)], detail, rule.name)


def reset_gpus(remote, node: str, slots: Sequence[int], rule: ResetRule, *,
               timeout: float = RESET_TIMEOUT_S) -> ResetResult:
    """Reset `slots` on `node` through `remote` (a fleet.ssh.Remote). An unreachable node raises
    UnreachableError (nothing was done); a failed reset is a result with ok False."""
    reply = remote.run([node], script(slots, rule), timeout=timeout)[0]
    if reply.unreachable:
        raise UnreachableError(f"{node}: {reply.error}")
    if reply.exit is None:
        return ResetResult(node, False, [], f"reset did not finish: {reply.error or 'timeout'}", rule.name)
    return parse(node, reply.exit, reply.output, slots, rule)


def probe(remote, nodes: Sequence[str], *, timeout: float = 30.0) -> None:
    """Raise UnreachableError naming the first node SSH cannot reach (before anything changes)."""
    if not nodes:
        return
    for reply in remote.run(list(nodes), "true", timeout=timeout):
        if reply.exit is None:
            raise UnreachableError(f"{reply.node}: {reply.error or 'no answer over SSH'}")
