"""Starting, watching and stopping the dev cluster's daemons.

Every daemon runs in the foreground of its own session (so `up` can exit and they live on) and
is recorded in a pid file as `<pid> <start-time>`: the start time (from /proc) guards against a
recycled pid, so `down` only ever signals processes this dev cluster started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnreachableError
from ..files import write_atomic


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in ticks); None if gone or a zombie."""
    fields = _stat_fields(Path(f"/proc/{pid}"))
    if fields is None or fields[0] == "Z":
        return None
    return fields[19]


@dataclass
class Daemon:
    name: str
    pidfile: Path
    logfile: Path

    def read(self) -> tuple[int, str] | None:
        try:
            pid_text, start = self.pidfile.read_text().split()
            return int(pid_text), start
        except (FileNotFoundError, ValueError):
            return None

    def pid(self) -> int | None:
        """The pid if the recorded process is still the one we started."""
        rec = self.read()
        if rec is None:
            return None
        pid, start = rec
        return pid if start_time(pid) == start else None

    def alive(self) -> bool:
        return self.pid() is not None

    def start(self, argv: Sequence[str], *, env: dict[str, str] | None = None,
              cwd: str | None = None) -> int:
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        with open(self.logfile, "ab") as log:
            try:
                proc = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                    close_fds=True,
                )
            except FileNotFoundError:
                raise UnreachableError(f"{argv[0]}: not installed (run scripts/install-system-deps.sh)") from None
        start = None
        deadline = time.monotonic() + 5
        while start is None and time.monotonic() < deadline:
            start = start_time(proc.pid)
            if start is None and proc.poll() is not None:
                break
        if start is None:
            raise UnreachableError(f"{self.name} exited at once: {self.tail()}")
        write_atomic(self.pidfile, f"{proc.pid} {start}\n")
        self._popen = proc  # keep the handle so the zombie is reaped while we live
        return proc.pid

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.logfile.read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self, *, timeout: float = 15.0) -> bool:
        """SIGTERM, wait, then SIGKILL. Returns True if a process was stopped."""
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return False
        _signal(pid, signal.SIGTERM)
        if not wait_for(lambda: not self.alive(), timeout, reap=getattr(self, "_popen", None)):
            _signal(pid, signal.SIGKILL)
            wait_for(lambda: not self.alive(), 5.0, reap=getattr(self, "_popen", None))
        self.pidfile.unlink(missing_ok=True)
        return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_for(cond: Callable[[], bool], timeout: float, *, interval: float = 0.1,
             reap: subprocess.Popen | None = None) -> bool:
    """Poll `cond` until it is true or `timeout` passes. Returns whether it became true."""
    deadline = time.monotonic() + timeout
    while True:
        if reap is not None:
            reap.poll()
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _stat_fields(pid_dir: Path) -> list[str] | None:
    """/proc/<pid>/stat fields after the command name (state, ppid, pgrp, session, ...)."""
    try:
        text = (pid_dir / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2 :].split()


def process_table() -> list[tuple[int, int, int]]:
    """(pid, ppid, session id) of every live (non-zombie) process."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry)) and fields[0] != "Z":
            out.append((int(entry.name), int(fields[1]), int(fields[3])))
    return out


def session_members(sids: set[int]) -> list[int]:
    """Pids of every process whose session id is one of `sids` (our daemons' descendants)."""
    return [pid for pid, _, sid in process_table() if sid in sids]


def with_descendants(roots: set[int]) -> list[int]:
    """`roots` and every process below them (never this process)."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _ in process_table():
        children.setdefault(ppid, []).append(pid)
    seen: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen or pid == os.getpid():
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return seen
