"""A TLS server on loopback for the Redfish client's tests: one thread per client connection,
each handed the TLS socket (or None when the handshake failed) and the connection's number."""

from __future__ import annotations

import socket
import ssl
import threading


class TlsLoopback:
    """Subclasses give `context(n)` (the server context of connection n, from 0) and
    `serve(tls, n)`; the socket is closed after serve returns."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def context(self, n: int) -> ssl.SSLContext:
        raise NotImplementedError

    def serve(self, tls: ssl.SSLSocket, n: int) -> None:
        raise NotImplementedError

    def connected(self) -> int:
        """Called in the accept thread, in order, for each connection: its number."""
        self._n = getattr(self, "_n", -1) + 1
        return self._n

    def _accept(self):
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            n = self.connected()
            threading.Thread(target=self._handshake, args=(raw, n), daemon=True).start()

    def _handshake(self, raw, n: int):
        raw.settimeout(10)
        try:
            tls = self.context(n).wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        try:
            self.serve(tls, n)
        except OSError:
            pass
        finally:
            tls.close()

    def close(self):
        self.sock.close()
