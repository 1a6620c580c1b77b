"""Site model: `[store]`, slurmadm's own records (local SQLite on every host, optionally a
central store every host ships to; see slurmadm/store/)."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import Field, field_validator

from .profiles import Strict
from .slurmtext import SlurmPath as AbsPath  # no blanks, quotes, "#" or control characters

_USER = re.compile(r"^[A-Za-z0-9_.\-]{1,80}$")
_DB = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,252}$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$")
NODE_MARK = "{node}"


@dataclass(frozen=True)
class CentralUrl:
    """A parsed, validated store.url (never holds a password: that comes from a file or the env)."""
    scheme: str                   # mysql | sqlite
    user: str = ""
    host: str = ""
    port: int = 3306
    database: str = ""
    unix_socket: str | None = None
    path: str = ""                # sqlite: the file

    @property
    def dialect(self) -> str:
        return "sqlite" if self.scheme == "sqlite" else "mysql"

    def __str__(self) -> str:
        if self.scheme == "sqlite":
            return f"sqlite://{self.path}"
        where = f"{self.host}:{self.port}" if not self.unix_socket else f"{self.host}?unix_socket={self.unix_socket}"
        return f"mysql://{self.user}@{where}/{self.database}"


def parse_url(text: str) -> CentralUrl:
    """`mysql://user@host[:port]/database[?unix_socket=/path]` (mariadb:// alike) or
    `sqlite:////absolute/path.db`. ValueError with what is wrong."""
    try:
        u = urlsplit(text)
        has_password = u.password is not None
    except ValueError:
        raise ValueError("not a URL (mysql://user@host[:port]/database or sqlite:////path.db)") from None
    if has_password:  # before any message that would repeat the URL
        raise ValueError("no password in the URL: put it in store.password_file (root-only) "
                         "or $SLURMADM_STORE_PASSWORD")
    try:
        port = u.port
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if u.scheme == "sqlite":
        path = unquote(u.path)
        if u.netloc or not path.startswith("/") or u.query:
            raise ValueError(f"{text!r}: a SQLite URL is sqlite:////absolute/path.db")
        return CentralUrl("sqlite", path=path)
    if u.scheme not in ("mysql", "mariadb"):
        raise ValueError(f"{text!r}: scheme must be mysql://, mariadb:// or sqlite://")
    user = unquote(u.username or "")
    if not _USER.match(user):
        raise ValueError(f"{text!r}: needs a user name (mysql://slurmadm@host/slurmadm) of letters, digits, _.-")
    host = u.hostname or ""
    if not _HOST.match(host):
        raise ValueError(f"{text!r}: {host!r} is not a host name")
    database = u.path.lstrip("/")
    if not _DB.match(database):
        raise ValueError(f"{text!r}: needs a database name of letters, digits and _ (mysql://user@host/slurmadm)")
    query = dict(parse_qsl(u.query, keep_blank_values=True))
    sock = query.pop("unix_socket", None)
    if query:
        raise ValueError(f"{text!r}: unknown URL parameter(s) {', '.join(sorted(query))} (known: unix_socket)")
    if sock is not None and not sock.startswith("/"):
        raise ValueError(f"{text!r}: unix_socket must be an absolute path")
    return CentralUrl("mysql", user=user, host=host, port=port or 3306, database=database, unix_socket=sock)


class StoreSection(Strict):
    # This host's SQLite store. A `{node}` in the file name stands for the Slurm node a hook
    # acts as (the host name elsewhere): hosts sharing one directory keep separate files.
    path: AbsPath = "/var/lib/slurmadm/slurmadm.db"
    audit_log: AbsPath | None = None  # optional JSON-lines copy of every audit event
    # The central store every host ships its records to (omit: each host keeps its own only).
    url: str | None = None
    # The central store's password: a root-only file (or $SLURMADM_STORE_PASSWORD); never in the URL.
    password_file: AbsPath = "/etc/slurmadm/store.password"
    # Connecting, up to the server's greeting (a port that accepts and never answers costs this).
    connect_timeout_s: Annotated[float, Field(gt=0, le=60)] = 5.0
    # A site node whose records have not arrived for longer than this is reported.
    stale_after_minutes: Annotated[int, Field(ge=1, le=10080)] = 15
    # Shipped records older than this are pruned from the local store (the central one keeps them).
    keep_days: Annotated[int, Field(ge=1, le=3650)] = 30
    ship_batch: Annotated[int, Field(ge=10, le=50000)] = 2000  # records per central transaction
    # At most this many unshipped records wait locally (the central store down for weeks); past
    # it the oldest are dropped from the queue and an audit event says how many.
    max_unshipped: Annotated[int, Field(ge=1000, le=100_000_000)] = 2_000_000
    # Least privilege (MariaDB): each compute node ships as its own account, named by this
    # template (e.g. "slurmadm-{node}"), which may only add its own rows; MariaDB records their
    # origin from the account (`slurmadm store grants`). The url's user is then the head's account.
    node_user: str | None = None
    # That account's password on each node (a root-only file; `store grants --apply` writes one
    # per node on the head, to copy to its node): `{node}` in the file name stands for the node.
    node_password_file: AbsPath = "/etc/slurmadm/store-{node}.password"
    # Where node accounts may connect from (MariaDB's host part: a subnet such as 10.1.%, or %).
    node_account_host: str = "%"

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            parse_url(value)
        return value

    @field_validator("path")
    @classmethod
    def _node_mark(cls, value: str) -> str:
        if value.count(NODE_MARK) > 1 or NODE_MARK in value.rsplit("/", 1)[0]:
            raise ValueError(f"{NODE_MARK} may appear once, in the file name only")
        return value

    @field_validator("node_user")
    @classmethod
    def _node_user(cls, value: str | None) -> str | None:
        if value is not None:
            if value.count(NODE_MARK) != 1:
                raise ValueError(f"must contain {NODE_MARK} once (one account per node), e.g. slurmadm-{NODE_MARK}")
            bare = value.replace(NODE_MARK, "")
            if not re.match(r"^[A-Za-z0-9_.\-]{1,15}$", bare):
                raise ValueError("besides {node}: 1 to 15 letters, digits or _.- (MariaDB names have at most 80)")
        return value

    @field_validator("node_password_file")
    @classmethod
    def _node_password_file(cls, value: str) -> str:
        if value.count(NODE_MARK) != 1 or NODE_MARK in value.rsplit("/", 1)[0]:
            raise ValueError(f"{NODE_MARK} must appear once, in the file name (one password per node)")
        return value

    @field_validator("node_account_host")
    @classmethod
    def _account_host(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9.%_:\-]{1,255}$", value):
            raise ValueError("a MariaDB host pattern: letters, digits and . % _ : - (e.g. 10.1.% or %)")
        return value

    def node_account(self, node: str) -> str:
        """The central store account node `node` ships as (node_user set)."""
        assert self.node_user is not None
        return self.node_user.replace(NODE_MARK, node)

    def node_password_path(self, node: str) -> str:
        return self.node_password_file.replace(NODE_MARK, node)

    def central(self) -> CentralUrl | None:
        return parse_url(self.url) if self.url else None

    def local_path(self, node: str | None = None) -> str:
        if NODE_MARK not in self.path:
            return self.path
        name = node or socket.gethostname().split(".")[0]
        if not _NODE.match(name):
            name = "localhost"
        return self.path.replace(NODE_MARK, name)
