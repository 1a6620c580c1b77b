"""Talk to many BMCs at once: bounded concurrency (`bmc.fanout`), one session per BMC for the
whole command (opened on first use, always logged out at the end), a retry policy for the
login (`bmc.retries`), and per-BMC deadlines: a dead BMC becomes one row with its error after
its deadline and never holds up the others (its thread is abandoned, not waited for).

The deadlines follow progress, not the clock alone: a BMC not logged in after its login deadline
did not answer; a logged-in BMC is given up on when no call to it has returned for the
operation's deadline (by default login + 10 x `bmc.timeout_s`), or at a hard cap of six of those
whatever it does. A busy head (a loaded CPU, 128 BMCs at once) makes every operation slower, but
a BMC that keeps answering is waited for; one that stops answering costs one deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import SlurmadmError, UnreachableError
from ..site import Site
from .creds import Credentials, load_credentials
from .model import BmcClient, FirmwareClient, Target


@dataclass
class Row:
    node: str
    ok: bool
    value: Any = None
    error: str = ""
    seconds: float = 0.0


class Progress(Protocol):
    """What a fleet pass reports to (cli.common.ProgressBar: a bar for people, else nothing)."""

    def begin(self, total: int) -> None: ...

    def advance(self, row: Row | None = None) -> None: ...


def targets(site: Site, nodes: Iterable[str]) -> list[Target]:
    """Each node's BMC address: host_pattern with {node}, or (dev cluster) shared_address with
    node i of the site on port + i."""
    b = site.bmc
    index = {n: i for i, n in enumerate(site.node_names)}
    out = []
    for node in nodes:
        if b.shared_address:
            i = index[node]
            out.append(Target(node, b.shared_address, b.port + i, b.redfish_port + i))
        else:
            out.append(Target(node, b.host_pattern.replace("{node}", node), b.port, b.redfish_port))
    return out


class _Watched:
    """A BMC client whose every method call that returns counts as the BMC answering."""

    def __init__(self, client: Any, answered: Callable[[], None]):
        self._client = client
        self._answered = answered

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attr(*args, **kwargs)
            except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
                # an answer the adapter did not expect: one line naming the node and the BMC
                raise UnreachableError(_unexpected(self._client, name, exc)) from None
            self._answered()
            return result

        return call


def _unexpected(client: Any, call: str, exc: BaseException) -> str:
    where = client._where() if hasattr(client, "_where") else getattr(getattr(client, "target", None), "host", "?")
    what = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else "a shape it cannot read"
    return f"{getattr(client, 'node', '?')}: BMC {where}: {call}: answered with {what}"


class Conn:
    """The sessions of one node's BMC for one command: `bmc` speaks the site's protocol,
    `redfish` is for inventory and firmware. Both opened lazily, with the login retried."""

    def __init__(self, target: Target, creds: Credentials, site: Site, tls, on_login=lambda: None,
                 on_answer=lambda: None):
        self.target = target
        self._on_login = on_login
        self._on_answer = on_answer
        self.node = target.node
        self._creds = creds
        self._site = site
        self._tls = tls
        self._bmc: BmcClient | None = None
        self._redfish = None

    def _login(self, make: Callable[[], Any]) -> Any:
        retries = self._site.bmc.retries
        for attempt in range(retries + 1):
            try:
                client = make()
                self._on_login()
                return _Watched(client, self._on_answer)
            except UnreachableError:
                if attempt == retries:
                    raise
        raise AssertionError("unreachable")

    @property
    def bmc(self) -> BmcClient:
        if self._bmc is None:
            if self._site.bmc.protocol == "redfish":
                self._bmc = self.redfish
            else:
                from .ipmi import IpmiClient

                self._bmc = self._login(lambda: IpmiClient(self.target, self._creds))
        return self._bmc

    @property
    def redfish(self) -> FirmwareClient:
        if self._redfish is None:
            if not self._site.bmc.redfish:
                raise UnreachableError(f"{self.node}: the site says the BMCs do not speak Redfish (bmc.redfish)")
            from .redfish import RedfishClient

            self._redfish = self._login(lambda: RedfishClient(self.target, self._creds, self._tls,
                                                              timeout=self._site.bmc.timeout_s))
        return self._redfish

    def close(self) -> None:
        for client in {id(c): c for c in (self._bmc, self._redfish) if c is not None}.values():
            try:
                client.close()
            except Exception:
                pass


class Fleet:
    """The BMCs of a site, with its credentials and connection policy."""

    def __init__(self, site: Site, creds: Credentials | None = None):
        from .redfish import TlsPolicy

        self.site = site
        self.creds = creds or load_credentials(site.bmc.username, site.bmc.password_file)
        b = site.bmc
        self.tls = TlsPolicy(ca_file=b.tls_ca_file, fingerprint=b.tls_fingerprint, insecure=b.tls_insecure)
        self.bar: Progress | None = None  # every run() reports its rows here as they finish

    @property
    def login_deadline(self) -> float:
        """What a BMC that does not answer costs a command: its timeout for each login try
        (bmc.retries + 1). A dead BMC is given up on after this."""
        b = self.site.bmc
        return b.timeout_s * (b.retries + 1)

    @property
    def default_deadline(self) -> float:
        """How long a logged-in BMC may go without answering a call (one call may be many
        round trips: a sensor sweep, an SEL read) before the operation gives up on it."""
        return self.login_deadline + 10 * self.site.bmc.timeout_s

    def run(self, nodes: list[str], fn: Callable[[Conn], Any], *, deadline_s: float | None = None,
            progress: Callable[[Row], None] | None = None) -> list[Row]:
        """fn(conn) on every node's BMC, at most bmc.fanout at once; rows in `nodes` order. A BMC
        not logged in after login_deadline, or logged in but with no call answered for deadline_s
        (or busy past CAP x deadline_s), becomes an error row."""
        deadline_s = self.default_deadline if deadline_s is None else deadline_s
        login_s = min(self.login_deadline, deadline_s)
        cap_s = CAP * deadline_s
        pending = list(targets(self.site, nodes))
        rows: dict[str, Row] = {}
        running: dict[str, float] = {}
        logged_in: dict[str, float] = {}  # node -> when its login succeeded
        answered: dict[str, float] = {}  # node -> when it last answered a call after its login
        cond = threading.Condition()
        shown: set[str] = set()
        fanout = self.site.bmc.fanout
        bar = self.bar
        if bar is not None:
            bar.begin(len(nodes))

        def work(target: Target) -> None:
            def mark() -> None:
                with cond:
                    logged_in[target.node] = time.monotonic()

            def answer() -> None:
                answered[target.node] = time.monotonic()  # one writer per key; read under cond

            conn = Conn(target, self.creds, self.site, self.tls, on_login=mark, on_answer=answer)
            start = time.monotonic()
            try:
                row = Row(target.node, True, fn(conn))
            except SlurmadmError as exc:
                row = Row(target.node, False, error=self.creds.scrub(str(exc)))
            except Exception as exc:  # a library's surprise: one row, never a traceback
                row = Row(target.node, False, error=self.creds.scrub(f"{type(exc).__name__}: {exc}"))
            finally:
                conn.close()
            row.seconds = round(time.monotonic() - start, 3)
            with cond:
                if target.node in running:  # not already given up on
                    del running[target.node]
                    rows[target.node] = row
                    cond.notify_all()

        def report() -> None:
            if progress is not None or bar is not None:
                for node in [n for n in rows if n not in shown]:
                    shown.add(node)
                    if progress is not None:
                        progress(rows[node])
                    if bar is not None:
                        bar.advance(rows[node])

        with cond:
            while pending or running:
                while pending and len(running) < fanout:
                    target = pending.pop(0)
                    running[target.node] = time.monotonic()
                    threading.Thread(target=work, args=(target,), daemon=True, name=f"bmc-{target.node}").start()
                now = time.monotonic()
                for node, started in list(running.items()):
                    last = answered.get(node, logged_in.get(node, started))
                    why = _given_up(node, now - started, now - last, node in logged_in, node in answered,
                                    login_s, deadline_s, cap_s)
                    if why:
                        del running[node]
                        rows[node] = Row(node, False, error=why, seconds=round(now - started, 3))
                report()
                if not running and not pending:
                    break
                cond.wait(timeout=0.05 if running else 0.005)
            report()  # the rows that came in after the last report, before the loop saw none running
        return [rows[n] for n in nodes if n in rows]


CAP = 6  # a logged-in BMC that keeps answering is still given up on after CAP x its deadline


def _given_up(node: str, elapsed: float, idle: float, logged_in: bool, called: bool, login_s: float,
              deadline_s: float, cap_s: float) -> str:
    """Why the fan-out gives up on a running BMC now ('' to keep waiting). `idle`: since its login
    or its last answered call; `called`: a call after the login was answered."""
    if not logged_in:
        return f"{node}: BMC did not answer within {login_s:g} s" if elapsed >= login_s else ""
    if idle >= deadline_s:
        if not called:
            return f"{node}: BMC did not finish within {deadline_s:g} s"
        return f"{node}: BMC stopped answering: no answer for {deadline_s:g} s (after {elapsed:.0f} s)"
    if elapsed >= cap_s:
        return f"{node}: BMC did not finish within {cap_s:g} s (answering, but too slow)"
    return ""
