"""A BMC that ends TLS without close_notify. Many BMC web servers (and sushy-static, the DMTF
mockup server of the integration tests) answer HTTP/1.0 without Content-Length and then just close
the TCP connection: the body ends at the close, with no TLS close_notify. curl 8 (Debian forky)
refuses such a body ("unexpected eof while reading"), as it could have been cut short on the way;
slurmadm must read it, as an admin's BMC answers that way, and must still notice a body that was
cut: a declared length not reached, or JSON that does not end."""

from __future__ import annotations

import json
import socket
import ssl

import pytest

from slurmadm.bmc.creds import Credentials, Secret
from slurmadm.bmc.model import Target
from slurmadm.bmc.redfish import RedfishClient, TlsPolicy
from slurmadm.devcluster.redfish_emulator import make_certificate
from slurmadm.errors import UnreachableError
from tests.unit.bmc.tlsloop import TlsLoopback

pytestmark = pytest.mark.unit

ROOT = {"@odata.id": "/redfish/v1", "Systems": {"@odata.id": "/redfish/v1/Systems"}}  # no SessionService
SYSTEMS = {"Members": [{"@odata.id": "/redfish/v1/Systems/1"}], "Name": "x" * 3000}  # several TLS records


class RaggedBmc(TlsLoopback):
    """One answer per connection, HTTP/1.0, then a TCP close with no close_notify. `mode`:
    "whole" (no Content-Length, the whole body), "short" (Content-Length beyond what is sent),
    "cut" (no Content-Length, the body cut in the middle)."""

    def __init__(self, ctx: ssl.SSLContext, mode: str):
        self.ctx, self.mode = ctx, mode
        self.paths: list[str] = []
        super().__init__()

    def context(self, n: int) -> ssl.SSLContext:
        return self.ctx

    def serve(self, tls, n: int) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = tls.recv(65536)
            if not data:
                return
            request += data
        path = request.split(b" ", 2)[1].decode()
        self.paths.append(path)
        body = json.dumps(ROOT if path == "/redfish/v1" else SYSTEMS).encode()
        head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
        if path != "/redfish/v1" and self.mode == "short":
            head += f"Content-Length: {len(body) + 100}\r\n".encode()
        if path != "/redfish/v1" and self.mode == "cut":
            body = body[: len(body) // 2]
        tls.sendall(head + b"\r\n" + body)
        # what socketserver does: SSLSocket.shutdown() drops TLS state and shuts TCP down,
        # no close_notify is sent
        tls.shutdown(socket.SHUT_RDWR)


@pytest.fixture()
def bmc(tmp_path):
    fingerprint = make_certificate(tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    servers = []

    def start(mode: str) -> tuple[RaggedBmc, RedfishClient]:
        s = RaggedBmc(ctx, mode)
        servers.append(s)
        tls = TlsPolicy(ca_file=None, fingerprint=fingerprint, insecure=False)
        return s, RedfishClient(Target("b200-001", "127.0.0.1", 0, s.port), Credentials("admin", Secret("pw")),
                                tls, timeout=5.0)

    yield start, tmp_path / "ca.pem"
    for s in servers:
        s.close()


def test_the_server_really_ends_without_close_notify(bmc):
    start, ca = bmc
    server, client = start("whole")
    client.close()
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, suppress_ragged_eofs=False) as tls:
            tls.sendall(b"GET /redfish/v1/Systems HTTP/1.0\r\n\r\n")
            got = b""
            with pytest.raises(ssl.SSLEOFError):  # what curl 8 reports as "unexpected eof"
                while data := tls.recv(65536):
                    got += data
    assert got.startswith(b"HTTP/1.0 200 OK") and got.endswith(b"}")


def test_a_whole_answer_without_close_notify_is_read(bmc):
    start, _ = bmc
    server, client = start("whole")
    try:
        assert client.get("/redfish/v1/Systems") == SYSTEMS
    finally:
        client.close()
    assert server.paths == ["/redfish/v1", "/redfish/v1/Systems"]


@pytest.mark.parametrize("mode, why", [("short", "IncompleteRead"), ("cut", "not JSON")])
def test_an_answer_cut_short_is_one_clear_error(bmc, mode, why):
    start, _ = bmc
    _server, client = start(mode)
    try:
        with pytest.raises(UnreachableError) as err:
            client.get("/redfish/v1/Systems")
    finally:
        client.close()
    msg = str(err.value)
    assert msg.startswith("b200-001: BMC 127.0.0.1:") and why in msg and "\n" not in msg and "pw" not in msg.split()
