"""BMC credentials: the user from the site, the password from $SLURMADM_BMC_PASSWORD or a
root-only file. The password lives in a `Secret` that never prints itself; `scrub()` takes it
out of any text (an exception from a library) before that text goes anywhere."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

ENV_PASSWORD = "SLURMADM_BMC_PASSWORD"


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self):  # never pickled into a file or across a process
        raise TypeError("a Secret cannot be pickled")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: Secret

    def scrub(self, text: str) -> str:
        pw = self.password.reveal()
        return text.replace(pw, "***") if pw else text


def load_credentials(username: str, password_file: str, *, env: dict[str, str] | None = None) -> Credentials:
    env = os.environ if env is None else env
    if env.get(ENV_PASSWORD):
        return Credentials(username, Secret(env[ENV_PASSWORD]))
    path = Path(password_file)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(f"bmc.password_file: {path} does not exist (or set ${ENV_PASSWORD})") from None
    except PermissionError:
        raise UsageError(f"bmc.password_file: {path}: permission denied (run as root)") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"bmc.password_file: {path} is not a regular file")
    if st.st_mode & 0o077:
        raise UsageError(f"bmc.password_file: {path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                         f"chmod 600 it")
    if st.st_uid not in (0, os.geteuid()):
        raise UsageError(f"bmc.password_file: {path} is owned by uid {st.st_uid}, not root")
    try:
        password = path.read_text().strip("\r\n")
    except PermissionError:
        raise UsageError(f"bmc.password_file: {path}: permission denied (run as root)") from None
    if not password:
        raise UsageError(f"bmc.password_file: {path} is empty")
    return Credentials(username, Secret(password))
