"""Slurm 26.05's authenticated metrics (monitor.slurm_metrics_users): slurmctld's HS256 key and
the JWT Prometheus sends (`Authorization: Bearer`, from monitor.slurm_metrics_token_file).

The token comes from Slurm itself (`scontrol token username=<user> lifespan=<s>`, which only
root and SlurmUser may run with AuthAltParameters=disable_token_creation) and goes from
scontrol's stdout straight into its file: never into argv, a log line or an error message.
What 26.05.5 answers to each kind of token: tests/fixtures/slurm/26.05/jwt-metrics-auth.txt."""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
import subprocess
from pathlib import Path

from ..errors import SlurmadmError, UsageError
from ..files import write_atomic

KEY_BYTES = 32  # HS256: SchedMD's jwt.shtml makes the key with `dd if=/dev/random bs=32 count=1`
TOKEN_LIFESPAN_S = 30 * 86400  # `slurmadm monitor slurm-token`'s default: renew it monthly


def make_key(path: str | Path, *, owner: str = "root") -> bool:
    """Create slurmctld's HS256 key when missing: random bytes, mode 0600, owned by `owner`
    (SlurmUser or root). False when it existed (it is never replaced: every token signed with it
    would stop working)."""
    path = Path(path)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
    finally:
        os.close(fd)
    try:
        pw = pwd.getpwnam(owner)
    except KeyError:
        raise UsageError(f"{path}: made, but its owner {owner!r} is not a user here (chown it to SlurmUser)") from None
    if os.geteuid() == 0:
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return True


def check_key(path: str | Path) -> str | None:
    """Why slurmctld would refuse or mistrust the key file (missing, readable by others), else None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if st.st_mode & 0o077:
        return f"{path} has mode {st.st_mode & 0o777:04o}: the JWT key must be readable by its owner only (chmod 600)"
    if st.st_size < KEY_BYTES:
        return f"{path}: {st.st_size} bytes; an HS256 key needs at least {KEY_BYTES}"
    return None


def fetch_token(user: str, *, lifespan_s: int = TOKEN_LIFESPAN_S, env: dict[str, str] | None = None,
                timeout: float = 30.0) -> str:
    """A JWT for `user` from slurmctld (`scontrol token`). Errors carry scontrol's stderr only."""
    argv = ["scontrol", "token", f"username={user}", f"lifespan={int(lifespan_s)}"]
    try:
        p = subprocess.run(argv, env={**os.environ, **env} if env else None, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmadmError(f"{' '.join(argv)}: {exc}") from None
    token = next((ln.split("=", 1)[1].strip() for ln in p.stdout.splitlines() if ln.startswith("SLURM_JWT=")), "")
    if p.returncode != 0 or not token:
        why = " ".join(p.stderr.split())[:300] or f"exit {p.returncode}, no SLURM_JWT= line"
        raise SlurmadmError(f"{' '.join(argv)}: {why} (it needs AuthAltTypes=auth/jwt on slurmctld: "
                            f"`slurmadm config apply` with monitor.slurm_metrics_users, then restart slurmctld)")
    return token


def write_token(path: str | Path, token: str, *, group: str | None = None) -> None:
    """Write the token file atomically: mode 0600, or 0640 with `group` (Prometheus's) as its group."""
    mode = 0o640 if group else 0o600
    gid = -1
    if group:
        import grp

        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise UsageError(f"--group {group}: no such group here") from None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), token + "\n", mode=mode)
    os.chmod(path, mode)  # an existing file would keep its own mode
    if gid != -1 and os.geteuid() == 0:
        os.chown(path, -1, gid)


def claims(token: str) -> dict:
    """The token's claims (its payload), unverified: for its expiry and user, never for trust."""
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}


def read_token(path: str | Path) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise UsageError(f"monitor.slurm_metrics_token_file: {path}: {exc.strerror or exc}") from None
