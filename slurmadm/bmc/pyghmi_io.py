"""A fix to pyghmi's shared UDP I/O, for its client and its server alike.

pyghmi runs one I/O thread per process that reads every socket, while callers send on the same
sockets from their own threads. `_io_sendto` switched a socket to blocking mode before each send
and `_io_recvfrom` switched it back before each read: when a send from another thread landed
between the I/O thread's switch and its read, the read blocked for good and every BMC of the
process hung (seen with 128 BMCs in one process). Reads here never block (MSG_DONTWAIT) and
sends leave the socket's mode alone.

And a lost wake-up in its event loop (where `bmc sel`'s 7-27 s under load went): a caller checks
that no packet is queued, then registers with the I/O thread to be woken by the next packet.
When the answer arrives in between, the I/O thread queues it and wakes nobody; the caller sleeps
until its retransmit deadline (0.5-1 s) although its answer is there, once per round trip that
loses the race - on a loaded head most of the SDR reads of a SEL decode, against ipmi_sim as
against our emulator. _io_wait here looks at the session's packet queue once more after
registering and before sleeping.

And a fix to its FRU read: pyghmi reads the FRU in 224-byte chunks and backs off only on
completion codes 0xC9/0xCA, where a BMC that limits the read size may answer 0xC8 ("request
data field length limit exceeded": OpenIPMI's ipmi_sim above 32 bytes). `ipmitool fru print`
backs off on it; so does fetch_fru here (0xC8, 0xC9, 0xCA), keeping the smaller size.

And a fix to its SDR name decoding: a name in 6-bit packed ASCII (IPMI 2.0 section 43.15, type
bits 10b; what OpenIPMI's sdrcomp writes for an all-upper-case name such as a FRU locator's
`PS1`) made pyghmi 1.6's SDREntry.tlv_decode loop for ever (it never consumes the bytes it
decodes), so a BMC with such a record hung every SDR read. tlv_decode here takes 3 bytes (4
characters) at a time, and the last 1-2 bytes as the characters they hold.

And a deadlock between its two session locks (what made a second BMC sweep in one process fail
one run in two, every BMC at once or half of them: bench/RESULTS.md): `wait_for_rsp` and
`awaitresponse` hold WAITING_SESSIONS while they call a timed-out session's `_timedout`, which
sends again (or gives up) and so takes KEEPALIVE_SESSIONS; every other send holds
KEEPALIVE_SESSIONS in `send_payload` and takes WAITING_SESSIONS in `_xmit_packet`. One login
retry (a dead BMC, a lost packet) while other sessions send, and both threads wait for ever, then
every thread of the process that sends. `_timedout` here runs with WAITING_SESSIONS let go (as a
Condition lets its lock go in wait) and takes it back after: both callers call it last in their
locked block, on a session already taken off the waiting table. (Making the two locks one also
ends the deadlock, but cost a 64-BMC sweep 30-70% of its time.)
"""

from __future__ import annotations

import socket
import threading

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


# completion codes on which a FRU read is retried with a smaller count (IPMI 2.0, table 5-2):
# C8h request data field length limit exceeded, C9h parameter out of range, CAh cannot return
# the number of requested data bytes
FRU_BACKOFF_CODES = (0xC8, 0xC9, 0xCA)
FRU_FIRST_CHUNK = 224  # what pyghmi asks first; most BMCs take it


def fetch_fru(self, fruid):
    """pyghmi.ipmi.fru.FRU.fetch_fru, backing off on FRU_BACKOFF_CODES."""
    from pyghmi import exceptions as iexc

    response = self.ipmicmd.raw_command(netfn=0xA, command=0x10, data=[fruid])
    if "error" in response:
        raise iexc.IpmiException(response["error"], code=response["code"])
    frusize = response["data"][0] | (response["data"][1] << 8)
    chunksize = min(FRU_FIRST_CHUNK, frusize)
    offset = 0
    self.rawfru = bytearray()
    while chunksize > 0 and offset < frusize:
        response = self.ipmicmd.raw_command(netfn=0xA, command=0x11,
                                            data=[fruid, offset & 0xFF, offset >> 8, chunksize])
        if response.get("code") in FRU_BACKOFF_CODES:
            if chunksize <= 1:
                raise iexc.IpmiException(response.get("error", "FRU read refused"), response.get("code"))
            chunksize = chunksize // 2 + 2 if chunksize > 8 else chunksize - 1
            continue
        if "error" in response:
            raise iexc.IpmiException(response["error"], response["code"])
        got = response["data"][0]
        if got == 0:
            break
        self.rawfru.extend(response["data"][1:1 + got])
        offset += got
        chunksize = min(chunksize, frusize - offset)


def _pending(myaddr) -> bool:
    return any(getattr(sess, "pktqueue", None) for sess in list((_session.Session.bmc_handlers.get(myaddr) or {}).values()))


def _io_wait(timeout, myaddr=None, evq=None):
    """pyghmi.ipmi.private.session._io_wait, without the lost wake-up: a caller awaiting its
    BMC (`myaddr`) looks at its session's packet queue after registering with the I/O thread
    and before sleeping. An answer the I/O thread queued before it saw the registration is
    found there; one it queues later wakes the registration. Same wake-ups as pyghmi's."""
    import threading

    if myaddr is not None and evq is None and _pending(myaddr):
        return
    evt = threading.Event()
    if evq is not None:
        evq.append(evt)
    deadline = timeout + _session._monotonic_time()
    _session.ioqueue.append((deadline, evt, myaddr))
    if deadline < _session.selectdeadline:
        intsock = _session.iosockets[0]
        if hasattr(intsock, "fd"):
            intsock = intsock.fd
        intsock.sendto(b"\x01", (_session.myself, _session.iosockets[0].getsockname()[1]))
    if myaddr is not None and evq is None and _pending(myaddr):
        return  # the registration is left to expire: the I/O thread sets it at its deadline
    evt.wait()


def six_bit_ascii(data) -> str:
    """6-bit packed ASCII (IPMI 2.0 section 43.15): 4 characters in each 3 bytes, least
    significant bits first, each + 0x20; trailing spaces of the padding dropped."""
    bits = int.from_bytes(bytes(data), "little")
    n = len(data) * 8 // 6
    return "".join(chr(((bits >> (6 * i)) & 0b111111) + 0x20) for i in range(n)).rstrip(" ")


def _tlv_decode(self, tlv, data):
    if (tlv & 0b11000000) >> 6 == 2 and len(data):
        return six_bit_ascii(data)
    return type(self)._slurmadm_tlv_decode_orig(self, tlv, data)


_apply_lock = threading.Lock()


def _timedout(self):
    """Session._timedout without WAITING_SESSIONS held (see the module's text)."""
    lock = _session.WAITING_SESSIONS
    saved = lock._release_save() if lock._is_owned() else None
    try:
        return _session.Session._slurmadm_timedout_orig(self)
    finally:
        if saved is not None:
            lock._acquire_restore(saved)


def apply() -> None:
    with _apply_lock:
        _apply()


def _apply() -> None:
    global _applied
    if not _applied:
        import pyghmi.ipmi.fru as _fru
        import pyghmi.ipmi.sdr as _sdr

        # kept on the class, and wrapped once only: two threads applying at once (the BMC
        # fan-out) must not wrap the wrapper (it would call itself)
        if not hasattr(_sdr.SDREntry, "_slurmadm_tlv_decode_orig"):
            _sdr.SDREntry._slurmadm_tlv_decode_orig = _sdr.SDREntry.tlv_decode
            _sdr.SDREntry.tlv_decode = _tlv_decode

        if not hasattr(_session.Session, "_slurmadm_timedout_orig"):
            _session.Session._slurmadm_timedout_orig = _session.Session._timedout
            _session.Session._timedout = _timedout
        _session._io_recvfrom = _recvfrom
        _session._io_sendto = _sendto
        _session._io_wait = _io_wait
        _fru.FRU.fetch_fru = fetch_fru
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
