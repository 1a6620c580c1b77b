"""The dev cluster's BMC emulator process: one IPMI BMC (UDP) and optionally one Redfish BMC
(HTTPS) per fake node, all on 127.0.0.1, sharing each node's state (bmc_state.NodeBmc).

    python -m slurmadm.devcluster.bmc_emulator --bmc-dir DIR --nodes b200-[001-004] \
        --ipmi-port 17600 [--redfish-port 17700 --cert C --key K] [--dev-cluster STATE_DIR]

Node i (in hostlist order) answers IPMI on ipmi-port+i and Redfish on redfish-port+i. The BMC
password is read from <bmc-dir>/password (never from argv). With --dev-cluster, powering a node
off stops its slurmd, powering it on starts it again, a cycle does both.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from ..hostlist import expand
from .bmc_state import NodeBmc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bmc_emulator")
    ap.add_argument("--bmc-dir", required=True)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--ipmi-port", type=int, required=True)
    ap.add_argument("--redfish-port", type=int, default=0)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--username", default="admin")
    ap.add_argument("--dev-cluster", default=None, help="state dir of the dev cluster whose slurmds power follows")
    args = ap.parse_args(argv)

    bmc_dir = Path(args.bmc_dir)
    password = (bmc_dir / "password").read_text().strip()
    nodes = expand(args.nodes)
    on_power = None
    dc = None
    if args.dev_cluster:
        from . import bmcs
        from .cluster import DevCluster

        dc = DevCluster(Path(args.dev_cluster))
        lock = threading.Lock()

        def on_power(node: str, what: str) -> None:
            # slurmd stops/starts in the background: the BMC answers at once, as a real one does
            def work() -> None:
                with lock:
                    try:
                        bmcs.node_power(dc, node, what)
                    except Exception as exc:  # logged; the emulator keeps serving
                        print(f"{node}: power {what}: {exc}", flush=True)

            threading.Thread(target=work, daemon=True).start()

    states = [NodeBmc.load(n, i, bmc_dir, on_power) for i, n in enumerate(nodes)]
    if dc is not None:  # a fake node is on exactly when its slurmd runs
        for st in states:
            st.power = "on" if dc.daemon(f"slurmd-{st.node}").alive() else "off"
    for st in states:
        st.save()

    from . import ipmi_emulator

    from .redfish_emulator import bind_retrying

    servers_ipmi = []
    for i, st in enumerate(states):
        try:
            servers_ipmi.append(bind_retrying(
                lambda i=i, st=st: ipmi_emulator.EmulatedBmc(st, args.username, password, args.ipmi_port + i),
                f"IPMI of {st.node}", args.ipmi_port + i, timeout=10))
        except OSError as exc:  # that one BMC does not answer (as a dead one); the others serve
            print(f"warning: {exc}; this IPMI BMC is left out", flush=True)
    servers = []
    if args.redfish_port:
        from . import redfish_emulator

        servers = redfish_emulator.start(states, args.username, password, args.redfish_port,
                                         cert=args.cert, key=args.key)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    print(f"bmc emulator: {len(nodes)} BMC(s), IPMI from port {args.ipmi_port}"
          + (f", Redfish from port {args.redfish_port}" if servers else ""), flush=True)
    try:
        ipmi_emulator.serve(servers_ipmi, stopping.is_set)
    finally:
        for srv in servers:
            srv.shutdown()
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
