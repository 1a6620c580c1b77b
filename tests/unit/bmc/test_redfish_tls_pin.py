"""Certificate pinning (bmc.tls_fingerprint) holds for every TLS connection, not only the first.

A Redfish service that closes the connection after each response (HTTP/1.0, as the DMTF mockup
server and many BMCs do) makes http.client reconnect by itself for the next request. Here a
loopback TLS proxy shows the pinned certificate on its first connection and another self-signed
one on every later one, in front of an HTTP/1.0 close-per-response Redfish service: the session
login (the password) must never go over the second, unpinned connection.
"""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import threading

import pytest

from slurmadm.bmc.creds import Credentials, Secret
from slurmadm.bmc.model import Target
from slurmadm.bmc.redfish import RedfishClient, TlsPolicy
from slurmadm.devcluster.redfish_emulator import make_certificate
from slurmadm.errors import UnreachableError
from tests.unit.bmc.tlsloop import TlsLoopback

pytestmark = pytest.mark.unit

PASSWORD = "pin-test-secret-4711"


class _Redfish10(http.server.BaseHTTPRequestHandler):
    """A minimal Redfish service, HTTP/1.0: one response per connection, then close."""

    protocol_version = "HTTP/1.0"
    seen: list[tuple[str, str, bytes]] = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, doc: dict, headers: dict | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        type(self).seen.append(("GET", self.path, b""))
        docs = {
            "/redfish/v1": {"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}},
            "/redfish/v1/Systems": {"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]},
            "/redfish/v1/Systems/1": {"Manufacturer": "Pin", "Model": "P1", "SerialNumber": "S1",
                                      "PowerState": "On"},
            "/redfish/v1/Managers": {"Members": [{"@odata.id": "/redfish/v1/Managers/1"}]},
            "/redfish/v1/Managers/1": {"FirmwareVersion": "1.0"},
        }
        if self.path in docs:
            self._send(200, docs[self.path])
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append(("POST", self.path, body))
        self._send(201, {"@odata.id": "/redfish/v1/SessionService/Sessions/1"},
                   {"X-Auth-Token": "tok", "Location": "/redfish/v1/SessionService/Sessions/1"})

    def do_DELETE(self):
        type(self).seen.append(("DELETE", self.path, b""))
        self._send(204, {})


class SwitchingProxy(TlsLoopback):
    """TLS on the front (certificate `first` on connection 1, `later` on every other one),
    plain TCP to the backend. Records what each client connection sent."""

    def __init__(self, backend_port: int, first: ssl.SSLContext, later: ssl.SSLContext):
        self.backend_port = backend_port
        self.contexts = (first, later)
        self.received: list[bytearray] = []  # per client connection, in order
        self.lock = threading.Lock()
        super().__init__()

    def connected(self) -> int:
        with self.lock:
            self.received.append(bytearray())
            return len(self.received) - 1

    def context(self, n: int) -> ssl.SSLContext:
        return self.contexts[0 if n == 0 else 1]

    def serve(self, tls, n: int) -> None:
        """One request per connection (the backend closes after each response), relayed in one
        thread: an SSL socket must not be read and written from two threads at once."""
        buf = self.received[n]
        request = bytearray()
        while b"\r\n\r\n" not in request:
            data = tls.recv(65536)
            if not data:
                break
            request.extend(data)
        head, _, body = bytes(request).partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            data = tls.recv(65536)
            if not data:
                break
            request.extend(data)
            body += data
        with self.lock:
            buf.extend(request)
        if not request:
            return
        with socket.create_connection(("127.0.0.1", self.backend_port), timeout=10) as back:
            back.sendall(request)
            while data := back.recv(65536):
                tls.sendall(data)


def _server_ctx(tmp_path, name: str) -> tuple[ssl.SSLContext, str]:
    cert, key, ca = tmp_path / f"{name}.pem", tmp_path / f"{name}.key", tmp_path / f"{name}-ca.pem"
    fingerprint = make_certificate(cert, key, ca)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx, fingerprint


@pytest.fixture()
def bed(tmp_path):
    _Redfish10.seen = []
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redfish10)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    pinned, fingerprint = _server_ctx(tmp_path, "pinned")
    other, _ = _server_ctx(tmp_path, "other")
    proxies = []

    def proxy(*, switch: bool) -> SwitchingProxy:
        p = SwitchingProxy(backend.server_address[1], pinned, other if switch else pinned)
        proxies.append(p)
        return p

    yield proxy, fingerprint
    for p in proxies:
        p.close()
    backend.shutdown()
    backend.server_close()


def _client(port: int, fingerprint: str) -> RedfishClient:
    tls = TlsPolicy(ca_file=None, fingerprint=fingerprint, insecure=False)
    return RedfishClient(Target("b200-001", "127.0.0.1", 0, port), Credentials("admin", Secret(PASSWORD)), tls,
                         timeout=5.0)


def test_reconnect_to_another_certificate_is_refused_before_the_login(bed):
    proxy, fingerprint = bed
    p = proxy(switch=True)
    with pytest.raises(UnreachableError, match="certificate fingerprint does not match bmc.tls_fingerprint"):
        _client(p.port, fingerprint)
    # connection 1 (pinned) carried the unauthenticated GET of the service root only
    assert len(p.received) >= 2, "the HTTP/1.0 service should have made the client reconnect"
    assert bytes(p.received[0]).startswith(b"GET /redfish/v1 ")
    for later in p.received[1:]:
        assert bytes(later) == b"", "nothing may be sent over a connection whose certificate is not pinned"
    assert all(PASSWORD.encode() not in body for _, _, body in _Redfish10.seen)
    assert [m for m, _, _ in _Redfish10.seen] == ["GET"]


def test_pinned_certificate_on_every_reconnect_works(bed):
    proxy, fingerprint = bed
    p = proxy(switch=False)
    c = _client(p.port, fingerprint)
    try:
        inv = c.inventory()
    finally:
        c.close()
    assert inv["model"] == "P1" and inv["bmc_firmware"] == "1.0"
    assert len(p.received) >= 4  # one TLS connection per request, each one checked
    assert c._conn is None or c._conn.connects >= 1
    assert ("POST", "/redfish/v1/SessionService/Sessions") in [(m, path) for m, path, _ in _Redfish10.seen]


def test_wrong_certificate_on_the_first_connection_is_refused(bed, tmp_path):
    proxy, _ = bed
    p = proxy(switch=True)
    _, unrelated = _server_ctx(tmp_path, "unrelated")
    with pytest.raises(UnreachableError, match="fingerprint does not match"):
        _client(p.port, unrelated)
    assert all(bytes(b) == b"" for b in p.received)
