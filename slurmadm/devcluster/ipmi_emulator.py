"""IPMI (RMCP+) BMC emulators: one `pyghmi.ipmi.bmc.Bmc` per fake node, all in one process, each
on its own 127.0.0.1 UDP port, answering `ipmitool -I lanplus` and pyghmi's client.

pyghmi's server answers only device id, chassis status/control and boot options; this adds
sensors (netfn 0x04: Get Sensor Reading 0x2D, Get Sensor Thresholds 0x27), the SDR repository
(netfn 0x0A: 0x20 info, 0x22 reserve, 0x23 get), the SEL (0x40 info, 0x42 reserve, 0x43 get,
0x47 clear, 0x48 time) and FRU (0x10 area info, 0x11 read), with the encodings of the IPMI 2.0
specification (full sensor records, table 43-1; SEL records, table 32-1; FRU common header and
board/product areas of the Platform Management FRU spec).

It also carries the three fixes pyghmi's server needs to serve many BMCs from one process
(see /work/shared/anchors/bmc-fleet-monitoring.md):
1. cipher suites: the server only speaks suite 3 (SHA-1) but accepted any proposal, so a client
   proposing suite 17 (SHA-256, pyghmi's first try) broke in RAKP2. Non-SHA-1 proposals now get
   RMCP+ status 0x11 and the client retries with SHA-1.
2. many ports in one process: sessions are keyed by (client address, server port); a client
   reusing a source port used to delete that client's sessions on every port, closed sessions
   were never freed and the session class had no `sessionless_data`. Sessions are now removed
   one port at a time, on Close Session and after 60 s idle, and counted per BMC (for the
   session-limit fault).
3. the I/O race: `_io_sendto` switched a socket to blocking from the caller's thread while the
   I/O thread read it, which could hang the process; reads use MSG_DONTWAIT (`pyghmi_io`).
"""

from __future__ import annotations

import heapq
import itertools
import struct
import time
import zlib
from collections.abc import Callable

import pyghmi.ipmi.bmc as pyghmi_bmc
import pyghmi.ipmi.private.constants as constants
import pyghmi.ipmi.private.serversession as serversession
import pyghmi.ipmi.private.session as ipmisession

from ..bmc import pyghmi_io
from .bmc_state import SEL_CAPACITY, SENSOR_BY_NUMBER, SENSORS, NodeBmc, Sensor

pyghmi_io.apply()

IDLE_SESSION_S = 60.0
SUPERMICRO_IANA = 10876
BOOT_CODES = {"default": 0x00, "pxe": 0x04, "disk": 0x08, "bios": 0x18, "cdrom": 0x14}
BOOT_NAMES = {v >> 2: k for k, v in BOOT_CODES.items()}

# responses waiting for a `slow` fault's delay: (due, seq, session, code, data, addressing)
_delayed: list = []
_seq = itertools.count()
# What pyghmi's server session takes from the request it answers (its last one): a delayed
# answer must go out with its own request's, or a client that sent another request meanwhile
# (a retransmission, the next command) gets this answer under that one's netfn/command/sequence
# (a Get Device ID answer read as Get Chassis Status: "power off").
_ADDRESSING = ("seqlun", "clientaddr", "clientnetfn", "rqlun", "clientcommand")


def _addressing(session) -> tuple:
    return tuple(getattr(session, a, None) for a in _ADDRESSING)


def _send_as(session, addressing: tuple, code: int, data) -> None:
    now = _addressing(session)
    for attr, value in zip(_ADDRESSING, addressing):
        setattr(session, attr, value)
    try:
        session.send_ipmi_response(data=data, code=code)
    finally:
        for attr, value in zip(_ADDRESSING, now):
            setattr(session, attr, value)


# ---------------------------------------------------------------------- encodings
def _id_string(name: str) -> bytes:
    raw = name.encode("ascii")[:16]
    return bytes([0xC0 | len(raw)]) + raw


def full_sensor_record(record_id: int, s: Sensor) -> bytes:
    """SDR type 01h (IPMI 2.0 table 43-1)."""
    threshold = s.threshold_based
    t = s.thresholds()
    readable = 0
    for bit, key in enumerate(("lnc", "lc", "lnr", "unc", "uc", "unr")):
        if t[key] is not None:
            readable |= 1 << bit
    m_ls, m_ms = s.m & 0xFF, (s.m >> 8) & 0x03
    r_exp = s.r_exp & 0x0F
    body = bytes([
        0x20, 0x00, s.number,  # owner id, owner lun, sensor number
        s.entity, 0x01,  # entity id, instance
        0x7F,  # initialization: scanning, events, thresholds, hysteresis, type
        0x68 if threshold else 0x40,  # capabilities: auto re-arm, hysteresis + thresholds readable/settable
        s.sensor_type, 0x01 if threshold else 0x6F,
        0x95 if threshold else 0xFF, 0x7A if threshold else 0x7F,  # assertion mask / lower reading mask
        0x95 if threshold else 0x00, 0x7A if threshold else 0x00,  # deassertion mask / upper reading mask
        readable, readable,  # readable, settable threshold masks
        0x00 if threshold else 0xC0,  # units 1: unsigned analog, or no reading
        s.unit, 0x00, 0x00,  # base unit, modifier unit, linearization (linear)
        m_ls, m_ms << 6, 0x00, 0x00, 0x00,  # M, tolerance, B, accuracy
        (r_exp << 4) | 0x00,  # R exponent, B exponent
        0x00,  # analog characteristic flags
        s.raw(s.nominal) if threshold else 0, 0x00, 0x00, 0xFF, 0x00,  # nominal, normal max/min, max, min
        *(s.raw(t[k]) if t[k] is not None else 0 for k in ("unr", "uc", "unc", "lnr", "lc", "lnc")),
        0x00, 0x00, 0x00, 0x00, 0x00,  # hysteresis +/-, reserved x2, OEM
    ]) + _id_string(s.name)
    return struct.pack("<HBBB", record_id, 0x51, 0x01, len(body)) + body


SDR_RECORDS = [full_sensor_record(i + 1, s) for i, s in enumerate(SENSORS)]


def _fru_field(text: str) -> bytes:
    raw = text.encode("ascii")[:63]
    return bytes([0xC0 | len(raw)]) + raw


def _fru_area(fields: bytes, head: bytes) -> bytes:
    body = head + fields + b"\xC1"
    length = -(-(len(body) + 2) // 8) * 8
    body = bytes([0x01, length // 8]) + body[0:]
    body += b"\x00" * (length - len(body) - 1)
    return body + bytes([(-sum(body)) & 0xFF])


def fru_data(node: str, index: int) -> bytes:
    """FRU 0: chassis, board and product areas of a Supermicro HGX B200 system."""
    serial = f"S{index + 1:03d}{zlib.crc32(node.encode()) % 100000:05d}B200"
    chassis = _fru_area(_fru_field("CSE-GP801TS-R000NP") + _fru_field(f"C8010MM{index + 1:06d}"), bytes([0x17]))
    mins = int((time.mktime((2025, 6, 2, 0, 0, 0, 0, 0, 0)) - time.mktime((1996, 1, 1, 0, 0, 0, 0, 0, 0))) // 60)
    board = _fru_area(
        _fru_field("Supermicro") + _fru_field("X14DBG-AP") + _fru_field(f"OM25AS{index + 1:06d}")
        + _fru_field("X14DBG-AP") + _fru_field(""),
        bytes([0x00]) + mins.to_bytes(3, "little"),
    )
    product = _fru_area(
        _fru_field("Supermicro") + _fru_field("SYS-A22GA-NBRT") + _fru_field("SYS-A22GA-NBRT")
        + _fru_field("0123456789") + _fru_field(serial) + _fru_field(node) + _fru_field(""),
        bytes([0x00]),
    )
    off_chassis = 1
    off_board = off_chassis + len(chassis) // 8
    off_product = off_board + len(board) // 8
    header = bytes([0x01, 0x00, off_chassis, off_board, off_product, 0x00, 0x00])
    header += bytes([(-sum(header)) & 0xFF])
    return header + chassis + board + product


# ---------------------------------------------------------------------- sessions
class EmuSession(serversession.ServerSession):
    """A server session that frees itself (close, idle, reused client port) and checks the
    cipher suite a client proposes."""

    def __init__(self, *args, **kwargs):
        self.last_active = time.monotonic()
        super().__init__(*args, **kwargs)
        self.bmc.sessions.add(self)

    def create_open_session_response(self, request):
        request = bytearray(request)
        if len(request) >= 32 and (request[12] != 1 or request[20] != 1):
            # not RAKP-HMAC-SHA1 / HMAC-SHA1-96: refuse it so the client falls back (fix 1)
            return bytearray([request[0], 0x11, 0, 0]) + request[4:8]
        return super().create_open_session_response(request)

    def process_pktqueue(self):
        if self.bmc.node.fault("unreachable"):
            self.pktqueue.clear()
            return
        self.last_active = time.monotonic()
        super().process_pktqueue()

    def sessionless_data(self, data, sockaddr):  # fix 2: the base class lacks it
        self.bmc.sessionless_data(data, sockaddr)

    def _handle_ipmi_packet(self, data, sockaddr=None, qent=None):
        if data[4] in (0, 2) and data[5:13] == b"\x00" * 8 and qent is not None:
            # a new client on a source port an old session used: drop only this port's session
            self.close_server_session()
            self.bmc.pktqueue.append(qent)
            self.bmc.process_pktqueue()
            return None
        return super()._handle_ipmi_packet(data, sockaddr=sockaddr, qent=qent)

    def close_server_session(self):
        handlers = ipmisession.Session.bmc_handlers.get(self.sockaddr)
        if handlers is not None and handlers.get(self.bmc.port) is self:
            del handlers[self.bmc.port]
            if not handlers:
                del ipmisession.Session.bmc_handlers[self.sockaddr]
        self.bmc.sessions.discard(self)


class EmulatedBmc(pyghmi_bmc.Bmc):
    def __init__(self, node: NodeBmc, username: str, password: str, port: int, address: str = "127.0.0.1"):
        self.node = node
        self.sessions: set[EmuSession] = set()
        super().__init__({username: password}, port=port, address=address)
        self.deviceid = 0x20
        self.revision = 0x01  # bit 7 clear: SDRs are in the SDR repository
        self.ipmiversion = 0x02
        self.additionaldevices = 0x8F  # chassis, FRU, SEL, SDR repository, sensor device
        self.mfgid = SUPERMICRO_IANA
        self.prodid = 0x1B5B

    # -------------------------------------------------------------- sessionless traffic
    def sessionless_data(self, data, sockaddr):
        node = self.node
        if node.fault("unreachable"):
            return
        if len(data) < 22:
            return
        data = bytearray(data)
        if not (data[0] == 6 and data[2:4] == b"\xff\x07"):
            return
        if data[4] == 6 and data[5] == 0x10:  # RMCP+ open session request
            request = data[16:]
            limit = node.session_limit()
            if limit is not None and len(self.sessions) >= limit:
                self._open_session_error(request, sockaddr, 0x01)  # insufficient resources
                return
            if len(request) >= 32 and (request[12] != 1 or request[20] != 1):
                self._open_session_error(request, sockaddr, 0x11)  # fix 1: offer SHA-1 only
                return
            old = ipmisession.Session.bmc_handlers.get(sockaddr, {}).get(self.port)
            if isinstance(old, EmuSession):
                old.close_server_session()
            EmuSession(self.authdata, self.kg, sockaddr, self.serversocket, request, self.uuid, bmc=self)
            return
        super().sessionless_data(data, sockaddr)

    def _open_session_error(self, request: bytearray, sockaddr, status: int) -> None:
        payload = bytearray([request[0], status, 0, 0]) + request[4:8]
        packet = bytearray(b"\x06\x00\xff\x07\x06") + bytes([constants.payload_types["rmcpplusopenresponse"]])
        packet += b"\x00" * 8 + struct.pack("<H", len(payload)) + payload
        ipmisession._io_sendto(self.serversocket, packet, sockaddr)

    def expire_sessions(self, now: float) -> None:
        for sess in list(self.sessions):
            if now - sess.last_active > IDLE_SESSION_S:
                sess.close_server_session()

    # -------------------------------------------------------------- requests
    def handle_raw_request(self, request, session):
        node = self.node
        if node.fault("unreachable"):
            return
        try:
            code, data = self.answer(request["netfn"], request["command"], bytearray(request["data"]))
        except Exception as exc:  # a bug here must not take the other BMCs down
            print(f"{node.node}: netfn {request['netfn']:#x} cmd {request['command']:#x}: {exc!r}", flush=True)
            code, data = 0xFF, []
        if node.fault("slow"):
            heapq.heappush(_delayed, (time.monotonic() + node.slow_delay(), next(_seq), session, code, data,
                                      _addressing(session)))
            return
        session.send_ipmi_response(data=data, code=code)

    def answer(self, netfn: int, cmd: int, data: bytearray) -> tuple[int, list[int] | bytes]:
        node = self.node
        if netfn == 0x06:
            if cmd == 0x01:  # Get Device ID
                major, minor = _fw_bcd(node.firmware["BMC"])
                return 0, [self.deviceid, self.revision, major, minor, self.ipmiversion, self.additionaldevices,
                           *struct.pack("<I", self.mfgid)[:3], *struct.pack("<H", self.prodid), 0, 0, 0, 0]
            if cmd == 0x02:  # cold reset
                return 0, []
            if cmd == 0x37:  # system GUID
                return 0, self.uuid.bytes_le
        elif netfn == 0x00:
            if cmd == 0x01:  # Get Chassis Status
                return 0, [0x01 if node.power == "on" else 0x00, 0x00, 0x00, 0x00]
            if cmd == 0x02:  # Chassis Control
                action = {0: "off", 1: "on", 2: "cycle", 3: "reset", 5: "shutdown"}.get(data[0] if data else -1)
                if action is None:
                    return 0xCC, []
                if action in ("cycle", "reset") and node.power != "on" and action == "reset":
                    return 0xD5, []  # reset of an off system: not supported in present state
                node.set_power(action)
                return 0, []
            if cmd == 0x08:  # Set System Boot Options
                if data and data[0] == 5 and len(data) >= 3:
                    name = BOOT_NAMES.get((data[2] >> 2) & 0x0F)
                    if name is None:
                        return 0xCC, []
                    node.set_bootdev(name, bool(data[1] & 0x40))
                return 0, []
            if cmd == 0x09:  # Get System Boot Options
                if data and data[0] == 5:
                    flags = 0x80 | (0x40 if node.boot_persistent else 0)
                    if node.bootdev == "default":
                        flags = 0x00
                    return 0, [0x01, 0x05, flags, BOOT_CODES[node.bootdev], 0, 0, 0]
                return 0x80, []
        elif netfn == 0x04:
            if cmd == 0x2D:  # Get Sensor Reading
                s = SENSOR_BY_NUMBER.get(data[0]) if data else None
                if s is None:
                    return 0xCB, []
                if s.name == node.no_reading():
                    return 0xCE, []  # command response could not be provided
                value, bits = node.reading(s)
                if s.threshold_based:
                    return 0, [s.raw(value or 0), 0xC0, bits & 0x3F]
                return 0, [0x00, 0xC0, bits & 0xFF, (bits >> 8) & 0x7F]
            if cmd == 0x27:  # Get Sensor Thresholds
                s = SENSOR_BY_NUMBER.get(data[0]) if data else None
                if s is None:
                    return 0xCB, []
                if not s.threshold_based:
                    return 0xCD, []  # not supported for this sensor type
                t = s.thresholds()
                mask = sum(1 << i for i, k in enumerate(("lnc", "lc", "lnr", "unc", "uc", "unr")) if t[k] is not None)
                return 0, [mask, *(s.raw(t[k]) if t[k] is not None else 0
                                   for k in ("lnc", "lc", "lnr", "unc", "uc", "unr"))]
        elif netfn == 0x0A:
            return self._storage(cmd, data)
        return 0xC1, []

    def _storage(self, cmd: int, data: bytearray) -> tuple[int, list[int] | bytes]:
        node = self.node
        if cmd == 0x10:  # Get FRU Inventory Area Info
            if not data or data[0] != 0:
                return 0xCB, []
            return 0, [*struct.pack("<H", len(self._fru())), 0x00]
        if cmd == 0x11:  # Read FRU Data
            if len(data) < 4 or data[0] != 0:
                return 0xCB, []
            offset = data[1] | (data[2] << 8)
            chunk = self._fru()[offset:offset + data[3]]
            return 0, bytes([len(chunk)]) + chunk
        if cmd == 0x20:  # Get SDR Repository Info
            return 0, [0x51, *struct.pack("<H", len(SDR_RECORDS)), 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x02]
        if cmd == 0x22:  # Reserve SDR Repository
            return 0, [0x01, 0x00]
        if cmd == 0x23:  # Get SDR
            if len(data) < 6:
                return 0xC7, []
            rec_id = data[2] | (data[3] << 8)
            offset, count = data[4], data[5]
            index = 0 if rec_id == 0 else rec_id - 1
            if index >= len(SDR_RECORDS):
                return 0xCB, []
            rec = SDR_RECORDS[index]
            nxt = 0xFFFF if index + 1 >= len(SDR_RECORDS) else index + 2
            chunk = rec[offset:] if count == 0xFF else rec[offset:offset + count]
            return 0, struct.pack("<H", nxt) + chunk
        if cmd == 0x40:  # Get SEL Info
            entries = len(node.sel)
            free = max(0, SEL_CAPACITY - entries) * 16
            full = entries >= SEL_CAPACITY
            return 0, [0x51, *struct.pack("<H", entries), *struct.pack("<H", free),
                       *struct.pack("<I", node.last_add), *struct.pack("<I", node.last_erase),
                       0x02 | (0x80 if full else 0)]
        if cmd == 0x41:  # Get SEL Allocation Info
            return 0, [*struct.pack("<H", SEL_CAPACITY), 16, 0, *struct.pack("<H", SEL_CAPACITY - len(node.sel)),
                       16, 0, 1]
        if cmd == 0x42:  # Reserve SEL
            return 0, list(struct.pack("<H", node.reserve_sel()))
        if cmd == 0x43:  # Get SEL Entry
            if len(data) < 6:
                return 0xC7, []
            rsv = data[0] | (data[1] << 8)
            rec_id = data[2] | (data[3] << 8)
            offset, count = data[4], data[5]
            if rsv and rsv != node.sel_reservation:
                return 0xC5, []
            sel = list(node.sel)
            if not sel:
                return 0xCB, []
            if rec_id == 0x0000:
                i = 0
            elif rec_id == 0xFFFF:
                i = len(sel) - 1
            else:
                i = next((k for k, e in enumerate(sel) if e.record_id == rec_id), None)
                if i is None:
                    return 0xCB, []
            nxt = 0xFFFF if i + 1 >= len(sel) else sel[i + 1].record_id
            rec = sel[i].pack()
            chunk = rec[offset:] if count == 0xFF else rec[offset:offset + count]
            return 0, struct.pack("<H", nxt) + chunk
        if cmd == 0x44:  # Add SEL Entry
            if len(data) < 16:
                return 0xC7, []
            if not node.add_event(SENSOR_BY_NUMBER.get(data[11], SENSORS[0]).name, data[12],
                                  (data[13], data[14], data[15])):
                return 0x80, []  # full
            return 0, list(struct.pack("<H", node.sel[-1].record_id))
        if cmd == 0x47:  # Clear SEL
            if len(data) < 6 or bytes(data[2:5]) != b"CLR":
                return 0xCC, []
            rsv = data[0] | (data[1] << 8)
            if data[5] == 0x00:  # get erasure status
                return 0, [0x01]
            if rsv != node.sel_reservation:
                return 0xC5, []  # reservation cancelled: something was logged since the read
            node.clear_sel()
            return 0, [0x01]
        if cmd == 0x48:  # Get SEL Time
            return 0, list(struct.pack("<I", int(time.time())))
        if cmd == 0x49:  # Set SEL Time
            return 0, []
        return 0xC1, []

    def _fru(self) -> bytes:
        cached = getattr(self, "_fru_cache", None)
        if cached is None:
            cached = self._fru_cache = fru_data(self.node.node, self.node.index)
        return cached


def _fw_bcd(version: str) -> tuple[int, int]:
    """'1.03.10' -> (1, 0x03): IPMI firmware revision, major binary, minor BCD."""
    parts = (version.split(".") + ["0"])[:2]
    try:
        major, minor = int(parts[0]) & 0x7F, int(parts[1][:2]) % 100
    except ValueError:
        return 1, 0
    return major, ((minor // 10) << 4) | (minor % 10)


def serve(bmcs: list[EmulatedBmc], stop: Callable[[], bool], tick: Callable[[], None] | None = None) -> None:
    """The event loop for every BMC of this process: packets, delayed answers, idle sessions."""
    last_sweep = time.monotonic()
    while not stop():
        timeout = 0.2
        if _delayed:
            timeout = max(0.0, min(timeout, _delayed[0][0] - time.monotonic()))
        ipmisession.Session.wait_for_rsp(timeout=timeout)
        now = time.monotonic()
        while _delayed and _delayed[0][0] <= now:
            _, _, session, code, data, addressing = heapq.heappop(_delayed)
            if not session.bmc.node.fault("unreachable"):
                _send_as(session, addressing, code, data)
        if now - last_sweep > 5:
            last_sweep = now
            for b in bmcs:
                b.expire_sessions(now)
        if tick is not None:
            tick()
