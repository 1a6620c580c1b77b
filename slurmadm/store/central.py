"""The central store: where every host's records meet (MariaDB/MySQL through PyMySQL, or a
shared SQLite file), behind one small `Central` protocol.

SQL is written once with `?` placeholders; the MySQL adapter turns them into PyMySQL's `%s`.
The password comes from $SLURMADM_STORE_PASSWORD or store.password_file (root-only); it never
travels in a URL, an argument, a log line, `--json` or an exception message.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from .. import __version__
from ..errors import UnreachableError, UsageError
from ..site.store import CentralUrl
from . import schema

ENV_PASSWORD = "SLURMADM_STORE_PASSWORD"
INFO_TABLE = "schema_info"  # name -> value: version, slurmadm, migrated_at


class Central(Protocol):
    url: CentralUrl
    dialect: str

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]: ...
    def execute(self, sql: str, args: Sequence[Any] = ()) -> None: ...
    def executemany(self, sql: str, rows: list[Sequence[Any]]) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


class SqliteCentral:
    """A central store in one SQLite file (a small site on a shared file system, and tests)."""

    dialect = "sqlite"

    def __init__(self, url: CentralUrl, timeout_s: float):
        self.url = url
        try:
            Path(url.path).parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(url.path, timeout=max(timeout_s, 5.0))
        except (OSError, sqlite3.Error) as exc:
            raise UnreachableError(f"central store {url}: cannot open ({exc})") from None
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode = WAL")

    def query(self, sql, args=()):
        return [dict(r) for r in self.db.execute(sql, tuple(args))]

    def execute(self, sql, args=()):
        self.db.execute(sql, tuple(args))

    def executemany(self, sql, rows):
        self.db.executemany(sql, rows)

    def commit(self):
        self.db.commit()

    def rollback(self):
        self.db.rollback()

    def close(self):
        self.db.close()


class MysqlCentral:
    """MariaDB (or MySQL) through PyMySQL, imported only here: the hooks never load it."""

    dialect = "mysql"

    def __init__(self, url: CentralUrl, password: str, timeout_s: float):
        import pymysql

        self.url = url
        self._errors = (pymysql.err.Error,)
        try:
            self.db = pymysql.connect(
                host=url.host, port=url.port, user=url.user, password=password, database=url.database,
                unix_socket=url.unix_socket, connect_timeout=timeout_s, read_timeout=timeout_s,
                write_timeout=max(30.0, timeout_s), charset="utf8mb4", autocommit=False,
                cursorclass=pymysql.cursors.DictCursor)
            # connect_timeout bounds only the TCP connect: the server's greeting is read with
            # read_timeout, so a port that accepts and never speaks costs timeout_s here; a query
            # then gets longer (PyMySQL has no public setter for it)
            self.db._read_timeout = max(30.0, timeout_s)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            msg = _clean(exc.args[1] if len(exc.args) > 1 else str(exc), password)
            if code in (1044, 1045, 1049):  # access denied / unknown database: the site's or admin's to fix
                raise UsageError(f"central store {url}: {msg}") from None
            raise UnreachableError(f"central store {url}: {msg}") from None
        except pymysql.err.Error as exc:
            raise UnreachableError(f"central store {url}: {_clean(str(exc), password)}") from None
        finally:
            password = ""

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _run(self, fn, sql, args):
        try:
            with self.db.cursor() as cur:
                fn(cur, self._sql(sql), args)
                return cur.fetchall() if cur.description else []
        except self._errors as exc:
            raise UnreachableError(f"central store {self.url}: {exc.args[-1] if exc.args else exc}") from None

    def query(self, sql, args=()):
        return list(self._run(lambda c, s, a: c.execute(s, tuple(a)), sql, args))

    def execute(self, sql, args=()):
        self._run(lambda c, s, a: c.execute(s, tuple(a)), sql, args)

    def executemany(self, sql, rows):
        self._run(lambda c, s, a: c.executemany(s, a), sql, rows)

    def commit(self):
        try:
            self.db.commit()
        except self._errors as exc:
            raise UnreachableError(f"central store {self.url}: commit failed ({exc.args[-1] if exc.args else exc})") \
                from None

    def rollback(self):
        try:
            self.db.rollback()
        except self._errors:
            pass

    def close(self):
        try:
            self.db.close()
        except self._errors:
            pass


def _clean(text: str, secret: str) -> str:
    text = " ".join(str(text).split())
    return text.replace(secret, "***") if secret else text


def password(section) -> str:
    """$SLURMADM_STORE_PASSWORD, else store.password_file, which must be root-only."""
    env = os.environ.get(ENV_PASSWORD)
    if env:
        return env
    return secret_file(section.password_file, "store.password_file", f"or set ${ENV_PASSWORD}")


def node_password(section, node: str) -> str:
    """The password of node `node`'s own account (store.node_password_file, root-only)."""
    return secret_file(section.node_password_path(node), "store.node_password_file",
                       "`slurmadm store grants --apply` writes one per node on the head")


def secret_file(name: str, what: str, hint: str = "") -> str:
    """A secret from a root-only regular file: refused, in one line, when group or others may read it."""
    path = Path(name)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(f"{what} {path}: missing (write the secret there, mode 0600{', ' + hint if hint else ''})") \
            from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {path}: not a regular file")
    if st.st_mode & 0o077:
        raise UsageError(f"{what} {path}: readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                         "chmod 600 it")
    if st.st_uid not in (0, os.geteuid()):
        raise UsageError(f"{what} {path}: owned by uid {st.st_uid}, not root")
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None
    if not text:
        raise UsageError(f"{what} {path}: empty")
    return text


def connect(section, *, node: str | None = None) -> Central:
    """Open the central store named by a site's `[store]`; UsageError when none is set.
    `node`: connect as that compute node's own account (store.node_user), which may only add
    its own rows; else as the url's user (the head's account)."""
    url = section.central()
    if url is None:
        raise UsageError("store.url: not set in the site (every host keeps only its own store)")
    if url.dialect == "sqlite":
        return SqliteCentral(url, section.connect_timeout_s)
    if node is not None and section.node_user is not None:
        return MysqlCentral(replace(url, user=section.node_account(node)), node_password(section, node),
                            section.connect_timeout_s)
    return MysqlCentral(url, password(section), section.connect_timeout_s)


@contextmanager
def connected(section, *, node: str | None = None) -> Iterator[Central]:
    c = connect(section, node=node)
    try:
        yield c
    finally:
        c.close()


# ---------------------------------------------------------------------------- schema versions

def has_table(c: Central, name: str) -> bool:
    sql = ("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?" if c.dialect == "sqlite" else
           "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() "
           "AND table_name = ?")
    return bool(c.query(sql, (name,)))


def version(c: Central) -> int:
    """The central schema version; 0 when slurmadm never migrated it."""
    if not has_table(c, INFO_TABLE):
        return 0
    rows = c.query(f"SELECT value FROM {INFO_TABLE} WHERE name = 'version'")
    return int(rows[0]["value"]) if rows else 0


def info(c: Central) -> dict[str, str]:
    if not has_table(c, INFO_TABLE):
        return {}
    return {r["name"]: r["value"] for r in c.query(f"SELECT name, value FROM {INFO_TABLE}")}


def require_current(c: Central) -> None:
    """Refuse a central store this slurmadm cannot write correctly."""
    found = version(c)
    if found > schema.SCHEMA_VERSION:
        raise UsageError(schema.newer_error(f"central store {c.url}", found))
    if found < schema.SCHEMA_VERSION:
        raise UsageError(f"central store {c.url}: schema version {found}, this slurmadm needs "
                         f"{schema.SCHEMA_VERSION}: run `slurmadm store migrate` on the head node")


def plan(c: Central) -> tuple[int, list[str]]:
    """(version found, statements that bring it to SCHEMA_VERSION)."""
    found = version(c)
    if found > schema.SCHEMA_VERSION:
        raise UsageError(schema.newer_error(f"central store {c.url}", found))
    if found == schema.SCHEMA_VERSION:
        return found, []
    info_ddl = (f"CREATE TABLE IF NOT EXISTS {INFO_TABLE} (name VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)"
                + (" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if c.dialect == "mysql" else ""))
    return found, [info_ddl, *schema.central_steps(found, c.dialect)]


def migrate(c: Central) -> tuple[int, list[str]]:
    """Apply plan(c). Every statement is IF NOT EXISTS (MariaDB commits DDL at once, so a
    migration cut short is finished by the next run); the version is written last. Two at once
    queue on a named lock (MariaDB) or the write lock (SQLite)."""
    if c.dialect == "mysql":
        got = c.query("SELECT GET_LOCK('slurmadm.migrate', 60) AS ok")
        if not got or got[0]["ok"] != 1:
            raise UnreachableError(f"central store {c.url}: another migration holds the lock")
    else:
        c.execute("BEGIN IMMEDIATE")
    try:
        found, steps = plan(c)
        for sql in steps:
            try:
                c.execute(sql)
            except sqlite3.OperationalError as exc:  # a central SQLite file that has the column already
                if not schema.is_duplicate_column(sql, exc):
                    raise
        if steps:
            upsert = ("INSERT INTO {t} (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)"
                      if c.dialect == "mysql" else
                      "INSERT INTO {t} (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value")
            for name, value in (("version", str(schema.SCHEMA_VERSION)), ("slurmadm", __version__),
                                ("migrated_at", f"{time.time():.3f}")):
                c.execute(upsert.format(t=INFO_TABLE), (name, value))
        c.commit()
    except BaseException:
        c.rollback()
        raise
    finally:
        if c.dialect == "mysql":
            try:
                c.query("SELECT RELEASE_LOCK('slurmadm.migrate') AS ok")
            except UnreachableError:
                pass
    return found, steps
