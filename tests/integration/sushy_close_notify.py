"""sushy-static as installed, except that each TLS connection ends with a TLS close_notify.

sushy-static (Python's http.server) answers HTTP/1.0 without Content-Length, so a body ends where
the connection does, and socketserver closes a TLS connection without close_notify. Since curl
8.x (forky: 8.22 with OpenSSL 3.6) curl no longer has OpenSSL overlook that, and a body that ends
at the close with no close_notify is an error (56, "unexpected eof while reading"): the body could
have been cut short by anyone on the path. Debian 12's curl 7.88 took it. The curl cross-checks
of test_bmc_independent.py talk to this instance (independent_bmcs.py: base+723); slurmadm's own
client is tested against the unchanged sushy-static (base+721), as many BMCs close the same way.

    python sushy_close_notify.py <sushy-static arguments>
"""

from __future__ import annotations

import socketserver
import sys

from sushy_tools.static.main import main

_shutdown_request = socketserver.TCPServer.shutdown_request


def shutdown_request(self, request):
    if hasattr(request, "unwrap"):  # a TLS connection: close_notify, then the TCP close
        try:
            request.settimeout(5)  # the peer's close_notify back: not waited for longer
            request = request.unwrap()
        except (OSError, ValueError):
            pass
    _shutdown_request(self, request)


socketserver.TCPServer.shutdown_request = shutdown_request

if __name__ == "__main__":
    sys.exit(main())
