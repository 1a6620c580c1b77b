"""Running outside commands: argv lists only (no shell), a time limit on every call, and
errors that name the command. Secrets go through stdin or files, never argv."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from .errors import CommandFailed, UnreachableError


def run(
    argv: Sequence[str],
    *,
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = [str(a) for a in argv]
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            cwd=cwd,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise UnreachableError(f"{argv[0]}: command not found (is it installed and on PATH?)") from None
    except subprocess.TimeoutExpired:
        raise UnreachableError(f"{argv[0]}: no answer within {timeout:g} s") from None
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, (proc.stderr or "") + (proc.stdout or ""))
    return proc
