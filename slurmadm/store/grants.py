"""Least privilege in the central store (MariaDB): one account per compute node that may only
add what it ships, and the head's account (store.url's user) that reads and prunes.

A node's account (store.node_user, e.g. `slurmadm-{node}`) gets, and only gets:
  SELECT on schema_info (the schema version check) and hosts (its heartbeat adds to its count),
  INSERT on every shipped table; SELECT and UPDATE on the few whose rows a node changes (an
  upsert on its natural key: node_state, burn-in and fleet rows); never UPDATE on events or
  check results, never DELETE, never DDL. It is listed in store_accounts,
  so the central store's triggers (schema.guard_triggers) set the origin of every row it
  inserts to its node, whatever the client sent, and refuse its UPDATE of another origin's row.

`plan` gives the exact statements; the printed form names each password's file instead of the
password, which only `apply` sends (to the server, never in argv or output).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from . import schema

PW_MARK = "\x00pw:"  # stands for a node's password in a planned statement until it is sent


@dataclass
class Statement:
    sql: str            # with PW_MARK<node>\x00 where the node's password goes
    node: str | None = None

    def shown(self, section) -> str:
        return _PW.sub(lambda m: f"'<the password in {section.node_password_path(m.group(1))}>'", self.sql)

    def real(self, passwords: dict[str, str]) -> tuple[str, list[str]]:
        """(SQL with a `?` where each password goes, the passwords): the driver quotes them."""
        args = [passwords[m] for m in _PW.findall(self.sql)]
        return _PW.sub("?", self.sql), args


_PW = re.compile(re.escape(PW_MARK) + r"([^\x00]+)\x00")


def node_privileges() -> dict[str, list[str]]:
    """table -> the privileges a node's account needs on it."""
    out = {"schema_info": ["SELECT"], "hosts": ["SELECT", "INSERT", "UPDATE"]}
    for t in schema.shipped_tables():
        # an upsert's `col = VALUES(col)` needs SELECT on what it updates (MariaDB checks it)
        out[t.name] = ["INSERT"] if t.insert_only else ["SELECT", "INSERT", "UPDATE"]
    return out


def plan(site, nodes: Iterable[str] | None = None) -> list[Statement]:
    sec = site.store
    url = sec.central()
    if url is None or url.dialect != "mysql":
        raise UsageError("store grants: needs a MariaDB/MySQL store.url (a central SQLite file has no accounts)")
    if sec.node_user is None:
        raise UsageError("store.node_user: not set (e.g. node_user = \"slurmadm-{node}\"): without it every node "
                         "ships as the head's account")
    db = url.database
    host = sec.node_account_host
    out: list[Statement] = []
    for node in sorted(nodes if nodes is not None else site.node_names):
        acct = f"'{sec.node_account(node)}'@'{host}'"
        pw = f"{PW_MARK}{node}\x00"
        out += [Statement(f"CREATE USER IF NOT EXISTS {acct} IDENTIFIED BY {pw}", node),
                Statement(f"ALTER USER {acct} IDENTIFIED BY {pw}", node),
                Statement(f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {acct}", node)]
        for table, privs in node_privileges().items():
            out.append(Statement(f"GRANT {', '.join(privs)} ON `{db}`.`{table}` TO {acct}", node))
        out.append(Statement(f"INSERT INTO store_accounts (account, origin) VALUES ('{sec.node_account(node)}', "
                             f"'{node}') ON DUPLICATE KEY UPDATE origin = VALUES(origin)", node))
    return out


def ensure_passwords(site, nodes: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Each node's password from its file on this host, a new random one written (0600) where
    there is none. Returns (passwords, files written)."""
    from .central import node_password

    sec = site.store
    out: dict[str, str] = {}
    made: list[str] = []
    for node in nodes:
        path = sec.node_password_path(node)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24) + "\n")
            made.append(path)
        out[node] = node_password(sec, node)
    return out, made


def apply(site, c, statements: list[Statement]) -> dict[str, Any]:
    """Send the statements through `c` (the head's account: it needs CREATE USER and GRANT
    OPTION on the database). Idempotent: a re-run changes nothing but the passwords' hash salt."""
    nodes = sorted({s.node for s in statements if s.node})
    passwords, made = ensure_passwords(site, nodes)
    try:
        for s in statements:
            c.execute(*s.real(passwords))
        c.commit()
    except BaseException:
        c.rollback()
        raise
    return {"nodes": nodes, "statements": len(statements), "password_files_written": made}


# ---------------------------------------------------------------------------- doctor's check

EXPECTED = {(t, p) for t, ps in node_privileges().items() for p in ps}


def excess(grants: list[str], database: str) -> list[str]:
    """What `SHOW GRANTS` lines give an account beyond what a node needs (one line each)."""
    out = []
    for line in grants:
        m = re.match(r"GRANT (.+?) ON (\S+)\.(\S+) TO ", line)
        if not m:
            continue
        privs, db, table = m.group(1), m.group(2).strip("`"), m.group(3).strip("`")
        privs_list = [p.strip() for p in privs.split(",")]
        if privs_list == ["USAGE"]:
            continue
        if db == "*" or table == "*":
            out.append(f"{privs} on {db}.{table}")
            continue
        if db != database:
            out.append(f"{privs} on {db}.{table}")
            continue
        extra = [p for p in privs_list if (table, p) not in EXPECTED]
        if extra:
            out.append(f"{', '.join(extra)} on {db}.{table}")
    if any("WITH GRANT OPTION" in g for g in grants):
        out.append("GRANT OPTION")
    return out
