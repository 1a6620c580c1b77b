"""dcgm-exporter on the dev cluster: a real dcgm-exporter capture (data/dcgm-exporter-a800.prom,
source in data/README.md) served on loopback, one port per fake node, as that node's
dcgm-exporter would answer: `Hostname` is the node, and `hpc_job` is added as dcgm-exporter's
--hpc-job-mapping-dir transformation adds it (internal/pkg/transformation/hpc.go: the file named by
the GPU index lists job ids, one a line; each id gets its own copy of the GPU's series). Nothing
else is changed. `python -m slurmadm.devcluster.dcgmfake MAP_DIR_TEMPLATE ADDR:PORT=NODE ...`."""

from __future__ import annotations

import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "data" / "dcgm-exporter-a800.prom"
CAPTURED_HOST = 'Hostname="msxf-hpc-64-35-ai"'
_GPU = re.compile(r'[{,]gpu="(\d+)"')


def jobs_of(map_dir: str) -> dict[str, list[str]]:
    """GPU index -> job ids, read as hpc.go reads the directory (numeric names, plain files)."""
    out: dict[str, list[str]] = {}
    try:
        names = os.listdir(map_dir)
    except OSError:
        return out
    for name in names:
        path = os.path.join(map_dir, name)
        if not name.isdigit() or not os.path.isfile(path):
            continue
        try:
            with open(path) as fh:
                out[name] = [ln.rstrip("\n") for ln in fh if ln.strip()]
        except OSError:
            continue
    return out


def render(text: str, node: str, map_dir: str) -> str:
    jobs = jobs_of(map_dir)
    out: list[str] = []
    for line in text.replace(CAPTURED_HOST, f'Hostname="{node}"').splitlines(keepends=True):
        m = None if line.startswith("#") else _GPU.search(line)
        held = jobs.get(m.group(1), []) if m else []
        if not held:
            out.append(line)
            continue
        head, sep, tail = line.rpartition("} ")
        out.extend(f'{head},hpc_job="{j}"{sep}{tail}' for j in held)
    return "".join(out)


def serve(map_template: str, targets: list[tuple[str, int, str]]) -> list[ThreadingHTTPServer]:
    text = FIXTURE.read_text()
    servers = []
    for host, port, node in targets:
        map_dir = map_template.replace("{node}", node)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self, node=node, map_dir=map_dir) -> None:  # noqa: N802
                if self.path.split("?")[0] != "/metrics":
                    self.send_response(404)
                    self.end_headers()
                    return
                body = render(text, node, map_dir).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        srv = ThreadingHTTPServer((host, port), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    return servers


def main(argv: list[str]) -> None:
    template, specs = argv[0], argv[1:]
    targets = []
    for spec in specs:
        addr, _, node = spec.partition("=")
        host, _, port = addr.rpartition(":")
        targets.append((host, int(port), node))
    serve(template, targets)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
