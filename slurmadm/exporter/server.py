"""Serving a collector over HTTP (/metrics), and the systemd unit `slurmadm exporter install` writes."""

from __future__ import annotations

import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..errors import UsageError
from .exposition import render


def parse_listen(text: str, what: str = "--listen") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536 or not host:  # 0: any free port
        raise UsageError(f"{what}: {text!r} is not ADDR:PORT (e.g. 0.0.0.0:9410)")
    return host.strip("[]"), int(port)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    server_version = "slurmadm-exporter"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0] == "/metrics":
            try:
                body = render(self.registry)
            except Exception as exc:  # noqa: BLE001 - never a traceback on the wire
                self._send(500, f"collection failed: {type(exc).__name__}: {exc}\n".encode(), "text/plain")
                return
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif self.path in ("/", "/healthz"):
            self._send(200, b"slurmadm exporter: metrics at /metrics\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: Prometheus scrapes often
        pass


class _Guarded:
    """Before any do_*: the web config's basic_auth_users (401 otherwise); a client that opens
    a connection and sends nothing is dropped after `timeout` s (its own thread waits, no other)."""
    web = None
    basic_auth = True
    timeout = 30

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.web is not None and self.basic_auth and not self.web.authorized(self.headers.get("Authorization")):
            body = b"unauthorized\n"
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="slurmadm"')
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return False
        return True


def listen_http(handler: type[BaseHTTPRequestHandler], listen: str, what: str = "--listen", *,
                web=None, basic_auth: bool = True) -> ThreadingHTTPServer:
    """A threading HTTP server on ADDR:PORT, or a UsageError naming `what` (port taken, bad
    address). `web`: an exporter-toolkit web config (webconfig.load): TLS, and its
    basic_auth_users unless `basic_auth` is False (the webhook authenticates by bearer token)."""
    host, port = parse_listen(listen, what)
    ctx = web.context() if web is not None else None
    guarded = type(handler.__name__, (_Guarded, handler), {"web": web, "basic_auth": basic_auth})
    try:
        server = ThreadingHTTPServer((host, port), guarded)
    except OSError as exc:
        raise UsageError(f"{what} {listen}: cannot listen ({exc.strerror or exc})") from None
    if ctx is not None:
        # the handshake happens in the request's thread: a client that never finishes it holds no one else
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.daemon_threads = True
    return server


def make_server(collector, listen: str, web=None) -> ThreadingHTTPServer:
    from .selfinfo import register_self

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    register_self(registry, getattr(collector, "mode", ""))
    return listen_http(type("Handler", (_Handler,), {"registry": registry}), listen, web=web)


def serve_forever(server: ThreadingHTTPServer) -> None:
    """Until SIGTERM/SIGINT; a hung source thread does not keep the process alive."""
    stop = threading.Event()

    def on_signal(_sig, _frame) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.serve_forever(poll_interval=0.5)
    server.server_close()
    os._exit(0)  # daemon threads may sit in a hung NVML call: leave without waiting for them


SYSTEMD_DIR = "/etc/systemd/system"


def unit_text(mode: str, command: list[str], site_file: str, environment: dict[str, str]) -> str:
    import jinja2

    from ..resources import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("monitor/exporter.service.j2").render(
        mode=mode, command=command, site_file=site_file, environment=environment)


def unit_path(mode: str, dest: str | None) -> Path:
    return Path(dest or SYSTEMD_DIR) / f"slurmadm-exporter-{mode}.service"
