#!/usr/bin/env python3
"""`slurmadm fleet facts` from 128 nodes vs `clush -b` (Debian's clustershell) running the same
collector, in the same run (issue 12).

128 OpenSSH sshd on 127.0.0.1 (ports BASE..BASE+127), all in ONE mount+UTS namespace made with
`unshare` that shows a fake B200 node's stack (slurmadm.devcluster.fakenode: os-release, NVRM
version, nvidia-smi, ofed_info, NCCL library, ...); the first sshd creates it, the others join it
with nsenter. Each sshd is its own process with its own port.

slurmadm: `slurmadm.fleet.facts(site, nodes)`, the API behind `slurmadm fleet facts` (paramiko,
fresh connections each run, known_hosts checked, facts parsed and written to the store).
peer:     `clush -b -f FANOUT -w b200-[001-128] '/bin/sh -s' < collector` with an ssh_config that
          maps each node to its port (OpenSSH client, StrictHostKeyChecking=yes).
Runs interleaved; the median of --runs each. Goal: slurmadm no slower than clush, under 3 s.

Usage (root): .venv/bin/python bench/fleet_facts.py [--nodes 128] [--port-base 34600] [--runs 5]
              (the first free ports from --port-base up)
              [--fanout 64] [--processes N] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmadm import fleet  # noqa: E402
from slurmadm.devcluster import fakenode  # noqa: E402
from slurmadm.devcluster.daemons import Daemon, wait_for  # noqa: E402
from slurmadm.fleet import collector  # noqa: E402
from slurmadm.fleet.ssh import ParamikoRemote, worker_processes  # noqa: E402
from slurmadm.hostlist import compress  # noqa: E402
from slurmadm.resources import example_site  # noqa: E402
from slurmadm.site import parse_site  # noqa: E402


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--port-base", type=int, default=34600)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fanout", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--processes", type=int, default=None,
                    help="slurmadm's worker processes (default: its own choice, one per CPU from 32 nodes a CPU)")
    ap.add_argument("--profile", action="store_true",
                    help="after the runs, one more slurmadm run under cProfile: where its time goes")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/fleet_facts.py must run as root (unshare, sshd)")
    if not shutil.which("clush"):
        sys.exit("clush not installed (apt-get install clustershell)")
    tmp = Path(tempfile.mkdtemp(prefix="slurmadm-bench-fleet-"))
    daemons: list[Daemon] = []
    try:
        src = tomllib.loads(example_site().read_text())
        names = parse_site(example_site().read_text()).node_names[: args.nodes]
        # free ports from --port-base up (the range is inside the kernel's ephemeral ports, so
        # outgoing connections may hold a few of them: those are skipped)
        free = (p for p in range(args.port_base, args.port_base + 400) if port_free(p))
        ports = {n: next(free) for n in names}
        # one fake node's files, one host key, the admin key
        node = fakenode.FakeNode(tmp, "bench-node")
        site0 = parse_site(example_site().read_text())
        node.create(fakenode.defaults(site0.software))
        host_pub = node.ensure_host_key()
        key = fakenode.write_client_key(tmp / "ssh")
        (tmp / "ssh" / "known_hosts").write_text(
            "".join(fakenode.known_hosts_line(p, host_pub) + "\n" for p in ports.values()))
        # 128 sshd: the first makes the namespace, the others join it
        for i, (n, port) in enumerate(ports.items()):
            cfg = node.sshd_config(port, tmp / "ssh" / "authorized_keys")
            cfg_i = cfg.with_name(f"sshd_config.{port}")
            cfg.rename(cfg_i)
            d = Daemon(f"sshd-{n}", tmp / "run" / f"sshd-{n}.pid", tmp / "log" / f"sshd-{n}.log")
            if i == 0:
                d.start(node.boot_script(cfg_i))
                assert wait_for(lambda port=port: port_open(port), 30), d.tail()
                first = d.pid()
            else:
                d.start(["nsenter", f"--target={first}", "--mount", "--uts", "--root", "--wd", "--",
                         "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg_i)])
            daemons.append(d)
        if not wait_for(lambda: all(port_open(p) for p in ports.values()), 120, interval=0.5):
            dead = [(d.name, d.tail()) for d, p in zip(daemons, ports.values()) if not port_open(p)]
            sys.exit(f"{len(dead)} sshd do not listen: {dead[:3]}")

        # the site slurmadm reads: the example, with these nodes' ports, keys and a scratch store
        src["fleet"] = {"host_pattern": "127.0.0.1", "ports": ports, "key_file": str(key),
                        "known_hosts": str(tmp / "ssh" / "known_hosts"), "fanout": args.fanout,
                        "connect_timeout_s": 60.0, "command_timeout_s": 300.0}
        src["store"] = {"path": str(tmp / "slurmadm.db")}
        site = parse_site(tomli_w.dumps(src))
        script = collector.script(site.software.hash_files, collector.packages_of(site.software.extra))

        # the peer: OpenSSH through clush, same nodes, ports, keys, fan-out and script
        ssh_cfg = tmp / "ssh" / "config"
        ssh_cfg.write_text("".join(
            f"Host {n}\n  HostName 127.0.0.1\n  Port {p}\n  User root\n  IdentityFile {key}\n"
            f"  IdentitiesOnly yes\n  UserKnownHostsFile {tmp / 'ssh' / 'known_hosts'}\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 60\n" for n, p in ports.items()))
        hostlist = compress(names)
        clush = ["clush", "-b", "-f", str(args.fanout), "-o", f"-F {ssh_cfg}", "-w", hostlist, "/bin/sh -s"]

        sshd_pids = [d.pid() for d in daemons]
        tick = os.sysconf("SC_CLK_TCK")

        def children(pid: int) -> bool:
            return any(Path(t, "children").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir())

        def server_cpu() -> float:
            """CPU seconds the 128 sshd spent on finished connections: each listener's reaped
            children (the connection's sshd, the shell, the collector's processes), once every
            connection's sshd has exited and been reaped (they outlive the client's close)."""
            wait_for(lambda: not any(children(pid) for pid in sshd_pids), 60, interval=0.05)
            total = 0
            for pid in sshd_pids:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[13]) + int(fields[14])  # cutime, cstime
            return total / tick

        cpu: dict[str, list[tuple[float, float]]] = {"slurmadm": [], "clush": []}  # (client, server) s

        def run_slurmadm() -> float:
            s0, c0 = server_cpu(), time.process_time()
            t = time.perf_counter()
            with ParamikoRemote(site.fleet, processes=args.processes) as remote:  # fresh connections
                got = fleet.facts(site, names, bmc=False, remote=remote)  # SSH fan-out only, as clush does
            dt = time.perf_counter() - t
            cpu["slurmadm"].append((time.process_time() - c0, server_cpu() - s0))
            bad = [n for n, nf in got.items() if nf.error or nf.facts.get("nccl") != site.software.nccl_version]
            assert not bad, f"slurmadm: {bad[:3]} {[got[b].error for b in bad[:3]]}"
            return dt

        def run_clush() -> float:
            import resource

            s0 = server_cpu()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            p = subprocess.run(clush, input=script, capture_output=True, text=True, timeout=300)
            dt = time.perf_counter() - t
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu["clush"].append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, server_cpu() - s0))
            assert p.returncode == 0 and f"libnccl.so.{site.software.nccl_version}" in p.stdout, p.stderr[-500:]
            return dt

        run_slurmadm(), run_clush()  # warm both (page cache, sshd first forks)
        for rows in cpu.values():
            rows.clear()
        ours, peer = [], []
        for _ in range(args.runs):
            ours.append(run_slurmadm())
            peer.append(run_clush())
        if args.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            cpu = time.process_time()
            prof.enable()
            wall = run_slurmadm()
            prof.disable()
            print(f"profiled run: {wall:.2f} s wall, {time.process_time() - cpu:.2f} s CPU (all threads)",
                  file=sys.stderr)
            pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        result = {"nodes": len(names), "fanout": args.fanout, "runs": args.runs,
                  "processes": args.processes or worker_processes(len(names), args.fanout),
                  "slurmadm_median_s": round(statistics.median(ours), 3),
                  "clush_median_s": round(statistics.median(peer), 3),
                  "slurmadm_s": [round(x, 3) for x in ours], "clush_s": [round(x, 3) for x in peer],
                  "load_avg": os.getloadavg()[0]}
        for tool, rows in cpu.items():  # medians of the measured runs: the head's CPU, the nodes' CPU
            rows = rows[: args.runs]  # (not the profiled run)
            result[f"{tool}_client_cpu_s"] = round(statistics.median(c for c, _ in rows), 3)
            result[f"{tool}_server_cpu_s"] = round(statistics.median(s for _, s in rows), 3)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"{'nodes':>6} {'fanout':>6} {'slurmadm':>9} {'clush -b':>9} {'ratio':>6}")
            print(f"{len(names):>6} {args.fanout:>6} {result['slurmadm_median_s']:>8.2f}s "
                  f"{result['clush_median_s']:>8.2f}s {result['slurmadm_median_s'] / result['clush_median_s']:>6.2f}")
            for tool in ("slurmadm", "clush"):
                print(f"{tool}: CPU on the head {result[f'{tool}_client_cpu_s']:.2f} s, on the nodes' sshd "
                      f"{result[f'{tool}_server_cpu_s']:.2f} s ({result[f'{tool}_server_cpu_s'] / len(names) * 1000:.1f} "
                      "ms a node)")
            print(f"slurmadm runs: {result['slurmadm_s']}  clush runs: {result['clush_s']}  "
                  f"load average {result['load_avg']:.2f}  slurmadm worker processes {result['processes']}")
            ok1 = result["slurmadm_median_s"] <= result["clush_median_s"]
            ok2 = result["slurmadm_median_s"] < 3.0
            print(f"no slower than clush -b: {'PASS' if ok1 else 'FAIL'}; under 3 s: {'PASS' if ok2 else 'FAIL'}")
        return 0
    finally:
        for d in reversed(daemons):
            d.stop(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
