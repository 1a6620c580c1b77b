"""`slurmadm bmc recover install-trigger`: a permanent Slurm trigger (strigger --set --node
--down --flags=PERM) whose program starts `slurmadm bmc recover --trigger` detached for the
nodes that went DOWN. Idempotent: the script is rewritten only when it differs, the trigger
set only when strigger does not list it."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UnreachableError
from ..proc import run
from ..sitefile import site_file as _site_file
from ..store import Store


@dataclass
class TriggerPlan:
    script: str
    text: str
    write: bool  # the script is missing or differs
    register: bool  # strigger does not list the script
    steps: list[str] = field(default_factory=list)


def script_text(site_path: str, log_file: str, env: dict[str, str], python: str = sys.executable) -> str:
    return ("#!/bin/sh\n# written by `slurmadm bmc recover install-trigger`; Slurm's strigger runs it with the\n"
            "# nodes that went DOWN. It starts the recovery detached and returns at once.\n"
            f"export SLURMADM_SITE={shlex.quote(site_path)}\n"
            + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
            + 'nodes=$(echo "$*" | tr " " ",")\n'
            f"setsid {shlex.quote(python)} -m slurmadm bmc recover --trigger --nodes \"$nodes\" "
            f"--reason 'strigger: node down' >> {shlex.quote(os.path.abspath(log_file))} 2>&1 < /dev/null &\n"
            "exit 0\n")


def plan(site_file: str | None, script: str, log_file: str) -> TriggerPlan:
    script = os.path.abspath(script)
    env = {k: os.environ[k] for k in ("SLURM_CONF",) if os.environ.get(k)}
    text = script_text(os.path.abspath(_site_file(site_file)), log_file, env)
    existing = run(["strigger", "--get", "--node", "--down"], check=False, timeout=20)
    if existing.returncode != 0:
        raise UnreachableError(f"strigger --get failed: {existing.stderr.strip() or existing.stdout.strip()}")
    have = script in existing.stdout.split()
    same = Path(script).exists() and Path(script).read_text() == text
    out = TriggerPlan(script, text, write=not same, register=not have)
    if out.write:
        out.steps.append(f"write {script}")
    if out.register:
        out.steps.append(f"strigger --set --node --down --flags=PERM --program={script}")
    return out


def install(p: TriggerPlan, store: Store, reason: str) -> None:
    from ..files import write_atomic

    if p.write:
        write_atomic(Path(p.script), p.text, mode=0o755)
    if p.register:
        run(["strigger", "--set", "--node", "--down", "--flags=PERM", f"--program={p.script}"], timeout=20)
    store.audit("bmc.recover.install-trigger", p.script, reason, steps=p.steps)
