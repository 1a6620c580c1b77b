"""The SSH adapter: commands on many nodes at once, behind a Protocol.

`ParamikoRemote` is the real one: key-based only (no password, no agent), host keys checked
against the site's known_hosts file (an unknown or changed key is a per-node error, never
accepted), a bounded number of nodes at a time (`fleet.fanout`), connect and command time limits,
and one connection per node kept for every command of one `Remote` (close() ends them). A node
that cannot be reached is one `Reply` with `error` set; the others go on.

stdout and stderr come back merged, in order, as `clush`/`pdsh` show them.

Large fan-outs on a head node with CPUs to spare are split over worker processes, each with its
own threads and connections: paramiko's handshakes and packet handling are Python under one GIL
(~12 ms of CPU per node), so one process caps at one core while OpenSSH-based tools (clush) use
them all. A worker costs a forkserver start and paramiko's import (a few hundred ms of CPU), so
it pays only from PROCESS_MIN_NODES nodes at once per worker and with CPUs left for the rest:
on 2 CPUs (the bench, 64 sshd on the same machine) one process beat two. The workers come from a
forkserver (never a fork of this possibly threaded process) and live for that one call; nodes with
a connection already open here stay here.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import UsageError

MAX_OUTPUT = 4 * 1024 * 1024  # bytes kept per node and command; more is cut (and said so)
PROCESS_MIN_NODES = 64  # nodes at once per worker process below which threads here are cheaper


@dataclass
class Reply:
    node: str
    exit: int | None = None  # None: the command did not finish (see error)
    output: str = ""
    error: str = ""  # one line: why the node gave no exit code
    kind: str = ""  # "" | "unreachable" | "hostkey" | "auth" | "timeout"
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit == 0

    @property
    def unreachable(self) -> bool:
        return self.kind in ("unreachable", "hostkey", "auth")

    def as_dict(self) -> dict:
        return {"node": self.node, "exit": self.exit, "output": self.output, "error": self.error,
                "kind": self.kind, "duration_s": round(self.duration_s, 3)}


@runtime_checkable
class Remote(Protocol):
    """What the fleet capability asks of the nodes."""

    def run(self, nodes: Sequence[str], command: str, *, timeout: float, stdin: str | None = None,
            on_reply: Callable[[Reply], None] | None = None) -> list[Reply]: ...

    def close(self) -> None: ...


@dataclass
class Target:
    host: str
    port: int


def targets(fleet, nodes: Sequence[str]) -> dict[str, Target]:
    """Each node's SSH address from the site's [fleet] section."""
    return {n: Target(fleet.host_pattern.replace("{node}", n), fleet.ports.get(n, fleet.port)) for n in nodes}


@dataclass
class ParamikoRemote:
    fleet: object  # slurmadm.site.fleet.FleetSection
    _clients: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _key: object = None
    processes: int | None = None  # worker processes for a large fan-out (None: by CPUs and nodes)

    def __post_init__(self) -> None:
        import paramiko  # noqa: F401  (imported here: `slurmadm site validate` does not pay for it)

        self._host_keys = self._load_host_keys()
        self._key = self._load_key()

    # ---- credentials: named in errors, never shown
    def _load_host_keys(self):
        import paramiko

        path = Path(self.fleet.known_hosts)
        if not path.is_file():
            raise UsageError(f"fleet.known_hosts: {path} does not exist (slurmadm never accepts unknown host keys)")
        keys = paramiko.HostKeys()
        try:
            keys.load(str(path))
        except (OSError, paramiko.SSHException) as exc:
            raise UsageError(f"fleet.known_hosts: {path}: unreadable ({type(exc).__name__})") from None
        return keys

    def _load_key(self):
        import paramiko

        path = Path(self.fleet.key_file)
        if not path.is_file():
            raise UsageError(f"fleet.key_file: {path} does not exist")
        mode = path.stat().st_mode
        if mode & 0o077:  # as ssh itself refuses it
            raise UsageError(f"fleet.key_file: {path} is readable by others (mode {mode & 0o7777:04o}); chmod 600 it")
        try:
            return paramiko.PKey.from_path(str(path))
        except paramiko.PasswordRequiredException:
            raise UsageError(f"fleet.key_file: {path} is passphrase-protected; slurmadm needs a root-only "
                             "key without one") from None
        except (OSError, ValueError, paramiko.SSHException) as exc:
            raise UsageError(f"fleet.key_file: {path}: not a private key slurmadm can read "
                             f"({type(exc).__name__})") from None

    # ---- connections
    def _connect(self, node: str, target: Target):
        """An authenticated paramiko Transport to the node (kept for the next command). Built
        here rather than through SSHClient so that the known_hosts file parsed once serves every
        node (SSHClient re-reads it per connection: 128 nodes x 128 lines) and nothing is tried
        but the one key: no agent, no ~/.ssh keys, no password."""
        import paramiko

        with self._lock:
            tr = self._clients.get(node)
        if tr is not None and tr.is_active():
            return tr
        t = self.fleet.connect_timeout_s
        name = target.host if target.port == 22 else f"[{target.host}]:{target.port}"
        known = self._host_keys.lookup(name)
        if not known:
            raise paramiko.SSHException(f"Server {name!r} not found in known_hosts")
        sock = socket.create_connection((target.host, target.port), timeout=t)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tr = paramiko.Transport(sock)
        except BaseException:
            sock.close()
            raise
        try:
            tr.banner_timeout = tr.auth_timeout = t
            # ask for the host key type known_hosts has (as SSHClient and OpenSSH do)
            opts = tr.get_security_options()
            want = known.keys()[0]
            if want == "ssh-rsa":
                want = next((k for k in ("rsa-sha2-512", "rsa-sha2-256") if k in opts.key_types), want)
            opts.key_types = [want] + [k for k in opts.key_types if k != want]
            tr.start_client(timeout=t)
            got = tr.get_remote_server_key()
            expected = known.get(got.get_name())
            if expected is None or expected != got:
                raise paramiko.BadHostKeyException(name, got, expected or known[known.keys()[0]])
            tr.auth_publickey(self.fleet.user, self._key)
        except BaseException:
            tr.close()
            raise
        with self._lock:
            self._clients[node] = tr
        return tr

    def _one(self, node: str, target: Target, command: str, timeout: float, stdin: str | None) -> Reply:
        import paramiko

        started = time.monotonic()
        reply = Reply(node)
        where = f"{target.host}:{target.port}"
        transport = self._open(node, target, reply)
        if reply.kind:
            reply.duration_s = time.monotonic() - started
            return reply
        try:
            reply.exit, reply.output, timed_out = _exec(transport, command, timeout, stdin)
            if timed_out:
                reply.kind, reply.error = "timeout", f"command ran past its {timeout:g} s limit"
        except (paramiko.SSHException, OSError, EOFError) as exc:
            reply.kind, reply.error = "unreachable", f"{where}: connection lost ({_one_line(exc)})"
            self._forget(node)
        reply.duration_s = time.monotonic() - started
        return reply

    def _open(self, node: str, target: Target, reply: Reply):
        """The node's connection, or None with reply.kind and reply.error saying why not."""
        import paramiko

        where = f"{target.host}:{target.port}"
        transport = None
        try:
            transport = self._connect(node, target)
        except paramiko.BadHostKeyException:
            reply.kind, reply.error = "hostkey", (f"host key of {where} CHANGED (not the one in "
                                                  f"{self.fleet.known_hosts}); refusing to connect")
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                reply.kind, reply.error = "hostkey", f"host key of {where} unknown (not in {self.fleet.known_hosts})"
            elif isinstance(exc, paramiko.AuthenticationException):
                reply.kind, reply.error = "auth", f"{where}: key not accepted for user {self.fleet.user}"
            else:
                reply.kind, reply.error = "unreachable", f"{where}: ssh: {_one_line(exc)}"
        except (socket.timeout, TimeoutError):
            reply.kind, reply.error = "unreachable", f"{where}: no answer within {self.fleet.connect_timeout_s:g} s"
        except OSError as exc:
            why = ("connection refused (sshd down?)" if exc.errno == errno.ECONNREFUSED
                   else exc.strerror or _one_line(exc))
            reply.kind, reply.error = "unreachable", f"{where}: {why}"
        return transport

    def put(self, nodes: Sequence[str], files: Sequence["Upload"], *, timeout: float,
            on_reply: Callable[[Reply], None] | None = None) -> list[Reply]:
        """Copy `files` to every node over SFTP on the node's connection: each written to a
        temporary name in its directory (which must exist), given its mode before any byte of
        it is written, then renamed over the path (posix-rename: a reader sees the old file or
        the new one). The content never reaches a command line. exit 0: all written."""
        import paramiko

        where = targets(self.fleet, nodes)

        def one(node: str) -> Reply:
            started = time.monotonic()
            reply = Reply(node)
            transport = self._open(node, where[node], reply)
            if not reply.kind:
                try:
                    _sftp_put(transport, files, timeout)
                    reply.exit = 0
                    reply.output = "".join(f"wrote {f.path}\n" for f in files)
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    reply.exit, reply.error = 1, f"sftp: {_one_line(exc)}"
                    reply.output = reply.error + "\n"
            reply.duration_s = time.monotonic() - started
            if on_reply is not None:
                on_reply(reply)
            return reply

        if not nodes:
            return []
        with ThreadPoolExecutor(max_workers=min(self.fleet.fanout, len(nodes))) as pool:
            return list(pool.map(one, nodes))

    def _forget(self, node: str) -> None:
        with self._lock:
            transport = self._clients.pop(node, None)
        if transport is not None:
            transport.close()

    def run(self, nodes: Sequence[str], command: str, *, timeout: float, stdin: str | None = None,
            on_reply: Callable[[Reply], None] | None = None) -> list[Reply]:
        where = targets(self.fleet, nodes)

        def one(node: str) -> Reply:
            reply = self._one(node, where[node], command, timeout, stdin)
            if on_reply is not None:
                on_reply(reply)
            return reply

        if not nodes:
            return []
        procs = self.processes if self.processes is not None else worker_processes(len(nodes), self.fleet.fanout)
        with self._lock:
            open_here = any(n in self._clients for n in nodes)
        if procs > 1 and not open_here:
            return self._run_processes(list(nodes), command, timeout, stdin, on_reply, procs)
        with ThreadPoolExecutor(max_workers=min(self.fleet.fanout, len(nodes))) as pool:
            return list(pool.map(one, nodes))

    def _run_processes(self, nodes: list[str], command: str, timeout: float, stdin: str | None,
                       on_reply: Callable[[Reply], None] | None, procs: int) -> list[Reply]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["paramiko", __name__])
        chunks = [nodes[i::procs] for i in range(procs)]
        per = max(1, -(-self.fleet.fanout // procs))  # the fan-out limit holds across the workers
        got: dict[str, Reply] = {}
        with ProcessPoolExecutor(max_workers=procs, mp_context=ctx) as pool:
            futures = {pool.submit(_worker_run, self.fleet, chunk, command, timeout, stdin, per): chunk
                       for chunk in chunks}
            for fut in as_completed(futures):
                try:
                    replies = fut.result()
                except Exception as exc:  # a worker that died: its nodes are one row each
                    replies = [Reply(n, error=f"slurmadm worker process failed: {_one_line(exc)}",
                                     kind="unreachable") for n in futures[fut]]
                for r in replies:
                    got[r.node] = r
                    if on_reply is not None:
                        on_reply(r)
        return [got[n] for n in nodes]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()

    def __enter__(self) -> "ParamikoRemote":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Upload:
    """A file for `ParamikoRemote.put`: its path on the node, its bytes (or a local file to read
    them from), its mode."""

    path: str
    data: bytes | None = None
    source: str | None = None
    mode: int = 0o644


def _sftp_put(transport, files: Sequence[Upload], timeout: float) -> None:
    import paramiko

    sftp = paramiko.SFTPClient.from_transport(transport)
    try:
        sftp.get_channel().settimeout(timeout)
        for f in files:
            d, _, name = f.path.rpartition("/")
            tmp = f"{d}/.{name}.slurmadm-{os.getpid()}-{threading.get_ident()}"
            with sftp.open(tmp, "wb") as out:
                sftp.chmod(tmp, f.mode)  # before the content: a secret is never readable by others
                out.set_pipelined(True)
                if f.data is not None:
                    out.write(f.data)
                else:
                    with open(f.source, "rb") as src:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
            sftp.posix_rename(tmp, f.path)
    finally:
        sftp.close()


def worker_processes(nodes: int, fanout: int) -> int:
    """How many processes a fan-out to `nodes` nodes uses: at most half the usable CPUs and one
    per PROCESS_MIN_NODES nodes that run at once (1: threads in this process)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus // 2, min(nodes, fanout) // PROCESS_MIN_NODES))


def _worker_run(fleet, nodes: list[str], command: str, timeout: float, stdin: str | None,
                fanout: int) -> list[Reply]:
    """In a worker process: the threads-and-connections fan-out over its share of the nodes."""
    with ParamikoRemote(fleet.model_copy(update={"fanout": fanout}), processes=1) as remote:
        return remote.run(nodes, command, timeout=timeout, stdin=stdin)


def _exec(transport, command: str, timeout: float, stdin: str | None) -> tuple[int | None, str, bool]:
    """Run one command on an open connection: (exit code or None, merged output, timed out)."""
    deadline = time.monotonic() + timeout
    chan = transport.open_session(timeout=min(timeout, 30.0))
    try:
        chan.set_combine_stderr(True)
        chan.exec_command(command)
        if stdin is not None:
            chan.sendall(stdin.encode())
        chan.shutdown_write()
        chunks: list[bytes] = []
        size = 0
        cut = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, _decode(chunks, cut), True
            chan.settimeout(left)
            try:
                data = chan.recv(65536)
            except socket.timeout:
                return None, _decode(chunks, cut), True
            if not data:
                break
            if size < MAX_OUTPUT:
                chunks.append(data[: MAX_OUTPUT - size])
                size += len(data)
                cut = cut or size > MAX_OUTPUT
            else:
                cut = True
        if not chan.status_event.wait(max(deadline - time.monotonic(), 0.01)):
            return None, _decode(chunks, cut), True
        return chan.recv_exit_status(), _decode(chunks, cut), False
    finally:
        chan.close()


def _decode(chunks: list[bytes], cut: bool) -> str:
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return text + ("\n[slurmadm: output cut at 4 MiB]\n" if cut else "")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
