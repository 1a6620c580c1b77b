"""A fix to pyghmi's shared UDP I/O, for its client and its server alike.

pyghmi runs one I/O thread per process that reads every socket, while callers send on the same
sockets from their own threads. `_io_sendto` switched a socket to blocking mode before each send
and `_io_recvfrom` switched it back before each read: when a send from another thread landed
between the I/O thread's switch and its read, the read blocked for good and every BMC of the
process hung (seen with 128 BMCs in one process). Reads here never block (MSG_DONTWAIT) and
sends leave the socket's mode alone.
"""

from __future__ import annotations

import socket

import pyghmi.ipmi.private.session as _session

_applied = False


def _recvfrom(mysocket, size):
    sock = getattr(mysocket, "fd", mysocket)
    try:
        return sock.recvfrom(size, socket.MSG_DONTWAIT)
    except OSError:
        return None


def _sendto(mysocket, packet, sockaddr):
    sock = getattr(mysocket, "fd", mysocket)
    try:
        sock.sendto(packet, sockaddr)
    except OSError:
        pass


def apply() -> None:
    global _applied
    if not _applied:
        _session._io_recvfrom = _recvfrom
        _session._io_sendto = _sendto
        _applied = True


def forget_stale(host: str, userid: str, password: str, port: int) -> None:
    """pyghmi keeps a half-made session per (bmc, user, password, port) in
    Session.initting_sessions and hands it to the next Session() for the same BMC; after a
    logout that object is dead (its next command fails on `logoutexpiry` None). slurmadm opens
    at most one session per BMC at a time, so a leftover entry is always stale: drop it."""
    _session.Session.initting_sessions.pop((host, userid.encode() if isinstance(userid, str) else userid,
                                            password.encode() if isinstance(password, str) else password,
                                            port, None), None)
    _session.Session.initting_sessions.pop((host, userid, password, port, None), None)
