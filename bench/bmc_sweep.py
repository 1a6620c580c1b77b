"""Sweep 128 emulated BMCs (one of them dead): slurmadm vs ipmitool, in the same run.

    .venv/bin/python bench/bmc_sweep.py [--bmcs 128] [--port-base 24700] [--json]

One emulator process serves the BMCs (slurmadm/devcluster/bmc_emulator.py, IPMI only) on
127.0.0.1:port-base..; the last BMC has the `unreachable` fault. Measured, wall clock:

1. power status of every BMC: slurmadm's library (Fleet.run, fan-out 128, one session per BMC,
   logged out), the `slurmadm bmc power status` command (process start included), ipmitool one
   after another, and `xargs -P 32 ipmitool`;
2. sensors + SEL of every BMC: slurmadm (readings, thresholds and the SEL in one session per
   BMC) vs `ipmitool sdr list` + `ipmitool sel list`, serial and with xargs -P 32.

ipmitool gets `-N 1 -R 1` (1 s per try, one retry) so its dead BMC costs ~2 s, not its default
~20 s; slurmadm runs with bmc.timeout_s = 2, retries 0. The goal (issue 11): 128 power states
in under 1 s, and the dead BMC costing no more than its timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmadm.bmc.creds import Credentials, Secret  # noqa: E402
from slurmadm.bmc.fanout import Fleet  # noqa: E402
from slurmadm.devcluster.bmc_state import write_faults  # noqa: E402
from slurmadm.devcluster.daemons import wait_for  # noqa: E402
from slurmadm.hostlist import compress  # noqa: E402
from slurmadm.site import parse_site  # noqa: E402


def site_for(names: list[str], port: int, pwfile: Path, store: Path, fanout: int) -> str:
    import tomllib

    import tomli_w

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["bmc"].update({"shared_address": "127.0.0.1", "port": port, "password_file": str(pwfile), "timeout_s": 2.0,
                        "retries": 0, "fanout": fanout, "redfish": False})
    data["store"] = {"path": str(store)}
    return tomli_w.dumps(data)


def timed(fn):
    t = time.monotonic()
    out = fn()
    return time.monotonic() - t, out


def ipmitool_argv(port: int, *cmd: str) -> list[str]:
    return ["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(port), "-U", "admin", "-E", "-N", "1", "-R", "1",
            *cmd]


def serial(ports: list[int], cmds: list[list[str]], env) -> tuple[float, int]:
    ok = 0
    t = time.monotonic()
    for p in ports:
        good = True
        for cmd in cmds:
            r = subprocess.run(ipmitool_argv(p, *cmd), env=env, capture_output=True, text=True)
            good &= r.returncode == 0
        ok += good
    return time.monotonic() - t, ok


def xargs(ports: list[int], cmds: list[list[str]], env, parallel: int) -> tuple[float, int]:
    script = " && ".join(shlex.join(ipmitool_argv(0, *c)).replace("-p 0", "-p \"$0\"") for c in cmds)
    t = time.monotonic()
    r = subprocess.run(["xargs", "-P", str(parallel), "-n", "1", "sh", "-c", f"{{ {script}; }} >/dev/null && echo OK"],
                       input="\n".join(map(str, ports)) + "\n", env=env, capture_output=True, text=True)
    return time.monotonic() - t, r.stdout.split().count("OK")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bmcs", type=int, default=128)
    ap.add_argument("--port-base", type=int, default=24700)
    ap.add_argument("--skip-serial-sensors", action="store_true", help="skip the slowest peer (serial sdr+sel)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    names = [f"b200-{i:03d}" for i in range(1, args.bmcs + 1)]
    ports = [args.port_base + i for i in range(args.bmcs)]
    dead = names[-1]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        password = secrets.token_urlsafe(12)
        (d / "password").write_text(password + "\n")
        os.chmod(d / "password", 0o600)
        write_faults(d, dead, {"unreachable": None})
        log = open(d / "emu.log", "w")
        emu = subprocess.Popen([sys.executable, "-m", "slurmadm.devcluster.bmc_emulator", "--bmc-dir", str(d),
                                "--nodes", compress(names), "--ipmi-port", str(args.port_base)],
                               stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            if not wait_for(lambda: "bmc emulator:" in (d / "emu.log").read_text(), 60):
                raise SystemExit("emulator did not start: " + (d / "emu.log").read_text())
            env = {**os.environ, "IPMI_PASSWORD": password}
            site_text = site_for(names, args.port_base, d / "password", d / "s.db", fanout=args.bmcs)
            (d / "site.toml").write_text(site_text)
            site = parse_site(site_text, source="bench")
            fleet = Fleet(site, Credentials("admin", Secret(password)))
            # warm-up: imports, the SDR cache of the (identical) BMC model, the emulator's first answers
            fleet.run(names[:2], lambda c: c.bmc.sensors())

            res: dict[str, dict] = {}
            t, rows = timed(lambda: fleet.run(names, lambda c: c.bmc.power_state()))
            res["power: slurmadm (library)"] = {"s": t, "ok": sum(r.ok for r in rows),
                                                "last_live_s": max(r.seconds for r in rows if r.ok),
                                                "dead_row_s": next(r.seconds for r in rows if r.node == dead)}
            t, proc = timed(lambda: subprocess.run(
                [sys.executable, "-m", "slurmadm", "bmc", "power", "status", compress(names), "--json",
                 "--site", str(d / "site.toml")], env={**os.environ, "SLURMADM_BMC_PASSWORD": password},
                capture_output=True, text=True, cwd=REPO))
            res["power: slurmadm bmc power status (command)"] = {
                "s": t, "ok": sum(1 for x in json.loads(proc.stdout) if x["power"]), "exit": proc.returncode}
            t, ok = serial(ports, [["power", "status"]], env)
            res["power: ipmitool serial"] = {"s": t, "ok": ok}
            t, ok = xargs(ports, [["power", "status"]], env, 32)
            res["power: xargs -P 32 ipmitool"] = {"s": t, "ok": ok}

            # sensors + SEL at the full fan-out, then at xargs' 32 (the same parallelism as the peer):
            # here the emulator serving all 128 BMCs shares the 2 CPUs with the client
            fleet32 = Fleet(parse_site(site_for(names, args.port_base, d / "password", d / "s.db", fanout=32),
                                       source="bench"), Credentials("admin", Secret(password)))
            for label, fl in ((f"fan-out {args.bmcs}", fleet), ("fan-out 32", fleet32)):
                t, rows = timed(lambda fl=fl: fl.run(names, lambda c: (c.bmc.sensors(), c.bmc.sel())))
                res[f"sensors+SEL: slurmadm (library), {label}"] = {
                    "s": t, "ok": sum(r.ok for r in rows),
                    "last_live_s": max((r.seconds for r in rows if r.ok), default=0),
                    "sensors": len(rows[0].value[0]) if rows[0].ok else 0,
                    "errors": sorted({r.error for r in rows if not r.ok})[:3]}
            if not args.skip_serial_sensors:
                t, ok = serial(ports, [["sdr", "list"], ["sel", "list"]], env)
                res["sensors+SEL: ipmitool serial"] = {"s": t, "ok": ok}
            t, ok = xargs(ports, [["sdr", "list"], ["sel", "list"]], env, 32)
            res["sensors+SEL: xargs -P 32 ipmitool"] = {"s": t, "ok": ok}
        finally:
            emu.terminate()
            emu.wait(10)
            log.close()
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{args.bmcs} emulated BMCs, 1 dead ({dead}); ok = BMCs answered")
        for k, v in res.items():
            extra = "".join(f", {x}={y:.2f}" if isinstance(y, float) else f", {x}={y}" for x, y in v.items()
                            if x not in ("s", "ok"))
            print(f"  {k:48s} {v['s']:7.2f} s   ok={v['ok']}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
