"""Site strings and numbers that end up in Slurm's config files, checked against what Slurm reads.

slurm.conf (and gres.conf, topology.conf, slurmdbd.conf) is line based: a newline ends a setting,
`#` starts a comment, blanks separate `Key=value` pairs on NodeName/PartitionName lines, and only
double quotes group a value with blanks (there is no escape inside them). So a site value with a
newline would add its own lines (`SlurmUser=slurm` then `AuthType=auth/none`), a blank would split
one key into two (`NodeAddr=x State=DOWN`). Every string type here refuses control characters,
`#` and quotes, and states what else Slurm accepts at that place; the error names what is wrong.

Numbers are bounded to the C types Slurm keeps them in (RealMemory: uint64 MiB; CPUs: uint16;
priority weights: uint32 below NO_VAL). Hostlists are sized before anything expands them, so a
typo like `b200-[0000001-2000000]` is refused at once (Slurm's own hostlist code treats a range
above 64K hosts as an error: MAX_RANGE in src/common/hostlist.c).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from ..hostlist import MAX_HOSTLIST_NODES, hostlist_size

# Characters no Slurm config value may hold: controls (newline, tab, NUL, DEL, Unicode line
# separators), '#' (comment), quotes (Slurm's quoting has no escape) and backslash.
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029#\"'\\]")


def _forbidden(value: str) -> str | None:
    m = _FORBIDDEN.search(value)
    if m is None:
        return None
    ch = m.group(0)
    if ch == "#":
        return "'#' (slurm.conf reads the rest of the line as a comment)"
    if ch in "\"'\\":
        return f"{ch!r} (Slurm has no way to escape it)"
    return f"the control character {ch!r} (a newline would start a new slurm.conf line)"


def _plain(what: str, value: str) -> None:
    bad = _forbidden(value)
    if bad:
        raise ValueError(f"{what} {value!r} contains {bad}")


def _no_blank(what: str, value: str) -> None:
    if any(c.isspace() for c in value):
        raise ValueError(f"{what} {value!r} contains a blank (Slurm would split it into two settings)")


def check_path(value: str) -> str:
    _plain("path", value)
    _no_blank("path", value)
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (it must start with /)")
    return value


def check_program(value: str) -> str:
    """An absolute program path, optionally followed by arguments (RebootProgram allows them;
    the value is written in double quotes then)."""
    if value == "":
        return value
    _plain("program", value)
    if value != value.strip() or not value.split()[0].startswith("/"):
        raise ValueError(f"{value!r} must start with the program's absolute path (e.g. /usr/sbin/reboot)")
    if any(c.isspace() and c != " " for c in value):
        raise ValueError(f"program {value!r} may only separate its arguments with spaces")
    return value


def check_executable(value: str) -> str:
    """A program Slurm runs without arguments (MailProg): an absolute path, no blanks."""
    if value == "":
        return value
    return check_path(value)


def check_value(value: str) -> str:
    """A free slurm.conf value (slurm.extra): anything printable but '#', quotes and backslashes;
    written in double quotes when it has blanks."""
    _plain("value", value)
    if value != value.strip():
        raise ValueError(f"value {value!r} starts or ends with a blank")
    return value


def check_word(value: str) -> str:
    """A value with no blanks (user names, database names, addresses)."""
    _plain("value", value)
    _no_blank("value", value)
    if not value:
        raise ValueError("must not be empty")
    return value


def check_hostlist_size(pattern: str, *, what: str = "hostlist") -> None:
    size = hostlist_size(pattern)
    if size is not None and size > MAX_HOSTLIST_NODES:
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        raise ValueError(
            f"{what} {shown!r} names {size:,} nodes, more than the {MAX_HOSTLIST_NODES:,} one hostlist "
            f"may hold (Slurm treats a larger range as an error)"
        )


_HOSTLIST_CHARS = re.compile(r"^[A-Za-z0-9._\-\[\],/]+$")


def check_hostlist(value: str) -> str:
    if value == "ALL":
        return value
    if not _HOSTLIST_CHARS.match(value):
        bad = next((c for c in value if not re.match(r"[A-Za-z0-9._\-\[\],/]", c)), "?")
        raise ValueError(f"hostlist {value!r} contains {bad!r}; node names take letters, digits, '.', "
                         f"'-' and '_' (ranges in [ ])")
    check_hostlist_size(value)
    return value


SlurmPath = Annotated[str, AfterValidator(check_path)]
SlurmProgram = Annotated[str, AfterValidator(check_program)]
SlurmExecutable = Annotated[str, AfterValidator(check_executable)]
SlurmValue = Annotated[str, AfterValidator(check_value)]
SlurmWord = Annotated[str, AfterValidator(check_word)]
Hostlist = Annotated[str, AfterValidator(check_hostlist)]
# Unix user names as Slurm looks them up (SlurmUser, StorageUser).
UnixUser = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]{0,31}$")]
# A node's address or host name (NodeAddr, NodeHostname): a DNS name, IPv4 or IPv6 address.
NodeAddress = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:\-]{0,252}$")]

# C types Slurm stores these numbers in.
UINT16_MAX = 2**16 - 1
UINT32_NO_VAL = 2**32 - 2  # 0xfffffffe: Slurm's NO_VAL; INFINITE is 0xffffffff
UINT64_NO_VAL = 2**64 - 2
# RealMemory is uint64 MiB and slurmadm takes GiB: 2^40 GiB (2^50 MiB) is above any machine and
# keeps RealMemory far inside uint64.
MAX_NODE_MEMORY_GIB = 2**40
