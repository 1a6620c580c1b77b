"""The built-in doctor checks, in the order they print. Each reads only, with a time limit."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import sqlite3
import sys
import time
from pathlib import Path

from ..errors import SiteError, SlurmadmError, UsageError
from ..proc import run
from . import Context, Finding, register

SLURM_TIMEOUT = 15.0
HOOKS = {"Prolog": "prolog.sh", "Epilog": "epilog.sh", "HealthCheckProgram": "healthcheck.sh"}


# ------------------------------------------------------------------------------ site


@register("site", "site file", needs_site=False)
def site_file(ctx: Context) -> Finding:
    from ..site import load_site, site_path
    from ..site.load import site_hash

    path = site_path(ctx.site_file)
    try:
        site = load_site(ctx.site_file)
    except SiteError as exc:
        lines = exc.lines()
        return Finding("site", "fail", f"site file {path}: {len(lines)} problem(s): {lines[0]}",
                       f"slurmadm site validate --site {path}", {"path": str(path), "problems": lines})
    except SlurmadmError as exc:
        return Finding("site", "fail", str(exc), "write one from site.example.toml, or pass --site / $SLURMADM_SITE",
                       {"path": str(path)})
    ctx.site = site
    sha = site_hash(path)
    return Finding("site", "ok", f"{path} (sha256 {sha[:12]}): cluster {site.cluster.name}, "
                   f"{len(site.node_names)} nodes, {site.total_gpus} GPUs",
                   data={"path": str(path), "sha256": sha, "digest": site.digest, "cluster": site.cluster.name,
                         "nodes": len(site.node_names)})


# ------------------------------------------------------------------------------ Slurm


def _slurm_version(ctx: Context) -> tuple[int, int, int] | None:
    from ..slurm import CliBackend

    def read():
        try:
            return CliBackend().version()
        except SlurmadmError:
            return None

    return ctx.remember("slurm_version", read)


@register("slurm", "Slurm release and backend", needs_site=False)
def slurm_backend(ctx: Context) -> Finding:
    from ..slurm import _import_pyslurm, choose_backend, pyslurm_release
    from ..slurm.pyslurm_backend import pyslurm_built_for

    version = _slurm_version(ctx)
    if version is None:
        return Finding("slurm", "fail", "Slurm: `scontrol --version` did not answer (Slurm not installed or not on "
                       "PATH)", "install Slurm's client commands (Debian: slurm-client) on this host")
    release = f"{version[0]}.{version[1]:02d}.{version[2]}"
    prefer = os.environ.get("SLURMADM_SLURM_BACKEND", "auto")
    module = _import_pyslurm()
    have = pyslurm_release(module) if module is not None else None
    data = {"release": release, "prefer": prefer,
            "pyslurm": None if have is None else f"{have[0]}.{have[1]:02d}",
            "pyslurm_built_for": pyslurm_built_for(module) if module is not None else None}
    try:
        backend = choose_backend(prefer, module, version)
    except SlurmadmError as exc:
        return Finding("slurm", "fail", f"Slurm {release}: {exc}", "unset SLURMADM_SLURM_BACKEND or install the "
                       "pyslurm of this Slurm release", data)
    data["backend"] = backend
    if backend == "pyslurm":
        why = f"pyslurm {data['pyslurm']} matches"
    elif module is None:
        why = "pyslurm is not installed"
    elif prefer == "cli":
        why = "SLURMADM_SLURM_BACKEND=cli"
    else:
        why = f"pyslurm {data['pyslurm']} does not match Slurm {version[0]}.{version[1]:02d}"
    if data["pyslurm_built_for"]:
        why += f"; the installed pyslurm was built for Slurm {data['pyslurm_built_for']}"
    name = "pyslurm" if backend == "pyslurm" else "cli (scontrol/sinfo/sacctmgr)"
    conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    data["slurm_conf"] = conf
    return Finding("slurm", "ok", f"Slurm {release}, backend {name} ({why}); SLURM_CONF {conf}", data=data)


@register("slurmctld", "slurmctld", needs_site=False)
def slurmctld(ctx: Context) -> Finding:
    try:
        proc = run(["scontrol", "ping"], timeout=SLURM_TIMEOUT, check=False)
    except SlurmadmError as exc:
        return Finding("slurmctld", "fail", f"slurmctld: {exc}", "is Slurm installed, and SLURM_CONF right?")
    text = " ".join((proc.stdout + proc.stderr).split())
    up = proc.returncode == 0 and " UP" in f" {text}"
    data: dict = {"ping": text}
    ready = _readyz(ctx)
    if ready is not None:
        data["readyz"] = {"url": ready.url, "ok": ready.ok, "answer": ready.detail}
    if up and (ready is None or ready.ok):
        return Finding("slurmctld", "ok", f"slurmctld: {text}" + (f"; /readyz {ready.detail}" if ready else ""),
                       data=data)
    if up:  # the RPC answers, the probe does not: a firewall in front of the port, or not ready yet
        return Finding("slurmctld", "warn", f"slurmctld: {text}; but {ready.url}: {ready.detail}",
                       "slurmctld answers scontrol but not its HTTP probe: is it still starting, or is the port "
                       "filtered for HTTP from this host?", data)
    return Finding("slurmctld", "fail", f"slurmctld: {text or f'scontrol ping exited {proc.returncode}'}"
                   + (f"; /readyz: {ready.detail}" if ready else ""),
                   "start slurmctld (systemctl start slurmctld) and check SlurmctldHost/SLURM_CONF", data)


def _readyz(ctx: Context):
    """slurmctld's /readyz where the installed release has it (25.11+), else None."""
    from ..config.release import PROBES_FROM
    from ..slurm import probes

    version = _slurm_version(ctx)
    if version is None or tuple(version[:2]) < PROBES_FROM:
        return None
    where = probes.controller(_slurm_config(ctx))
    if where is None:
        return None
    return probes.get(*where, "/readyz", timeout=PROBE_TIMEOUT)


PROBE_TIMEOUT = 3.0


@register("slurm-metrics", "Slurm's own metrics and the head exporter", after="slurmctld")
def slurm_metrics(ctx: Context) -> Finding:
    """Whether slurmctld exports its own metrics here (25.11+), and so which series the head
    exporter leaves to it (exporter/slurmseries.py) and which it keeps."""
    from ..config.release import METRICS_FROM, fmt, parse_release
    from ..exporter.slurmseries import KEPT, replaced
    from ..slurm import probes

    site = ctx.site
    m = site.monitor
    if site.slurm.release != "auto":
        release = parse_release(site.slurm.release, what="slurm.release")
    else:
        version = _slurm_version(ctx)
        release = tuple(version[:2]) if version else None
    gone = replaced(release if m.slurm_metrics else None)
    data: dict = {"release": fmt(release) if release else None, "enabled": m.slurm_metrics,
                  "replaced": {r.key: r.slurm for r in gone}, "kept": [k for k, _ in KEPT]}
    if not m.slurm_metrics:
        return Finding("slurm-metrics", "ok", "Slurm's own metrics are off (monitor.slurm_metrics = false): the head "
                       "exporter exports every series itself", data=data)
    if release is None or release < METRICS_FROM:
        what = f"Slurm {fmt(release)}" if release else "the installed Slurm (release unknown)"
        return Finding("slurm-metrics", "ok", f"{what} has no metrics of its own (from {fmt(METRICS_FROM)}): the "
                       "head exporter exports every series itself", data=data)
    moved = "; ".join(f"{r.key} -> {r.slurm}" for r in gone)
    summary = (f"Slurm {fmt(release)} exports its own metrics; the head exporter no longer exports: {moved}; it "
               f"keeps node states with drain owner and reason, health verdicts, GPUs per project vs quota, the "
               f"job<->GPU map")
    conf = _slurm_config(ctx)
    mtype = conf.get("MetricsType", "")
    data["metrics_type"] = mtype
    if mtype != "metrics/openmetrics":
        return Finding("slurm-metrics", "warn", f"{summary}; but slurmctld has MetricsType={mtype or '(unset)'} "
                       f"({conf.get('_source')})", "slurmadm config apply (it writes MetricsType=metrics/openmetrics), "
                       "then restart slurmctld", data)
    token, expiry = None, ""
    if m.slurm_metrics_users and m.slurm_metrics_token_file:
        from ..slurm import jwt

        renew = "slurmadm monitor slurm-token (as root on the controller)"
        try:
            token = jwt.read_token(m.slurm_metrics_token_file)
        except UsageError as exc:
            return Finding("slurm-metrics", "warn", f"{summary}; but Prometheus has no JWT to send: {exc}", renew, data)
        exp = jwt.claims(token).get("exp")
        if isinstance(exp, int):
            left = exp - time.time()
            data["token_expires"] = exp
            if left <= 0:
                return Finding("slurm-metrics", "warn", f"{summary}; but the JWT in {m.slurm_metrics_token_file} "
                               f"expired {_ago(-left)} ago: slurmctld answers Prometheus 401", renew, data)
            if left < 7 * 86400:
                expiry = f"the JWT in {m.slurm_metrics_token_file} expires in {_ago(left)}"
    where = probes.controller(conf)
    if where is not None:
        got = probes.get(*where, "/metrics/nodes", timeout=PROBE_TIMEOUT, token=token)
        data["probe"] = {"url": got.url, "ok": got.ok, "answer": got.detail, "authenticated": token is not None}
        if not got.ok:
            return Finding("slurm-metrics", "warn", f"{summary}; but {got.url}: {got.detail}",
                           "see docs/runbooks/SlurmMetricsDown.md (PrivateData, MetricsAuthUsers and the JWT)", data)
    if expiry:
        return Finding("slurm-metrics", "warn", f"{summary}; but {expiry}",
                       "slurmadm monitor slurm-token (as root on the controller)", data)
    return Finding("slurm-metrics", "ok", summary, data=data)


def _ago(seconds: float) -> str:
    return f"{seconds / 86400:.1f} days" if seconds >= 86400 else f"{seconds / 3600:.1f} h"


@register("slurmdbd", "slurmdbd")
def slurmdbd(ctx: Context) -> Finding:
    name = ctx.site.cluster.name
    try:
        proc = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=SLURM_TIMEOUT, check=False)
    except SlurmadmError as exc:
        return Finding("slurmdbd", "fail", f"slurmdbd: {exc}", "start slurmdbd and check AccountingStorageHost")
    if proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout).split())[:200]
        return Finding("slurmdbd", "fail", f"slurmdbd: sacctmgr exited {proc.returncode}: {err}",
                       "start slurmdbd (systemctl start slurmdbd) and check AccountingStorageHost in slurm.conf")
    clusters = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if name not in clusters:
        return Finding("slurmdbd", "warn", f"slurmdbd answers, but cluster {name!r} is not registered "
                       f"(has: {', '.join(clusters) or 'none'})",
                       f"sacctmgr add cluster {name} (slurmctld registers it at start)", {"clusters": clusters})
    return Finding("slurmdbd", "ok", f"slurmdbd answers; cluster {name} registered", data={"clusters": clusters})


# ------------------------------------------------------------------------------ NVML

NVML_PROBE = r"""
import json, sys
out = {}
try:
    import pynvml
except Exception as exc:
    print(json.dumps({"error": f"pynvml does not import: {exc}"})); sys.exit(0)
try:
    pynvml.nvmlInit()
except Exception as exc:
    print(json.dumps({"error": f"nvmlInit failed: {exc}"})); sys.exit(0)
def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)
out["driver"] = text(pynvml.nvmlSystemGetDriverVersion())
out["gpus"] = pynvml.nvmlDeviceGetCount()
try:
    out["name"] = text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))) if out["gpus"] else ""
except Exception:
    out["name"] = "?"
libs = set()
with open("/proc/self/maps") as fh:
    for line in fh:
        if "libnvidia-ml" in line:
            libs.add(line.split()[-1])
out["library"] = sorted(libs)
print(json.dumps(out))
"""


@register("nvml", "NVML library and driver")
def nvml(ctx: Context) -> Finding:
    from ..health.hook import local_node

    node = ctx.node or local_node(None)
    on_node = node in ctx.site.node_group_of
    env = {"SLURMD_NODENAME": node} if on_node else None
    try:
        proc = run([sys.executable, "-I", "-c", NVML_PROBE], timeout=20, check=False, env=env)
        res = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else \
            {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    except SlurmadmError as exc:
        res = {"error": str(exc)}
    except json.JSONDecodeError:
        res = {"error": f"unexpected output: {proc.stdout.strip()[:120]}"}
    res["node"] = node
    if "error" in res:
        if not on_node:
            return Finding("nvml", "skip", f"NVML: not a compute node of the site ({node}); {res['error']}",
                           "run `slurmadm doctor` on a node (or --node NAME) to check NVML there", res)
        return Finding("nvml", "fail", f"NVML on {node}: {res['error']}",
                       "install the NVIDIA driver (libnvidia-ml.so.1) and nvidia-ml-py on this node", res)
    want = ctx.site.node_profile(node).gpus.count if on_node else None
    lib = ", ".join(res["library"]) or "?"
    summary = (f"NVML on {node}: driver {res['driver']}, {res['gpus']} GPU(s) {res.get('name', '')}".rstrip()
               + f"; library {lib}")
    if want is not None and res["gpus"] != want:
        return Finding("nvml", "fail", summary + f" (profile says {want})",
                       "check the GPUs (nvidia-smi) or the node's profile in the site", res)
    return Finding("nvml", "ok", summary, data=res)


# ------------------------------------------------------------------------------ store


@register("store", "store")
def store(ctx: Context) -> Finding:
    from ..store import schema

    path = Path(ctx.site.store.local_path())
    want = [t.name for t in schema.TABLES if t.where != "central"]
    data = {"path": str(path), "backend": "sqlite", "expected_tables": want,
            "schema_version": schema.SCHEMA_VERSION}
    if not path.exists():
        parent_ok = os.access(path.parent if path.parent.exists() else path.parent.parent, os.W_OK)
        return Finding("store", "warn" if parent_ok else "fail",
                       f"store {path}: not created yet (the first command that records creates it)",
                       "" if parent_ok else f"make {path.parent} writable for slurmadm", data)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            have = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            mode = db.execute("PRAGMA journal_mode").fetchone()[0]
            events = db.execute("SELECT COUNT(*) FROM events").fetchone()[0] if "events" in have else 0
        finally:
            db.close()
    except sqlite3.Error as exc:
        return Finding("store", "fail", f"store {path}: cannot read ({exc})",
                       "check the file (sqlite3 PATH 'PRAGMA integrity_check') and its permissions", data)
    missing = [t for t in want if t not in have]
    data.update({"tables": have, "user_version": version, "journal_mode": mode, "events": events,
                 "missing": missing})
    writable = os.access(path, os.W_OK)
    summary = (f"store {path} (SQLite, {mode}, schema version {version}): {len(have)} tables, {events} audit events"
               + ("" if writable else "; read-only for this user"))
    if version > schema.SCHEMA_VERSION:
        return Finding("store", "fail", summary + f"; written by a newer slurmadm (this one knows {schema.SCHEMA_VERSION})",
                       "upgrade slurmadm on this host", data)
    if missing or version < schema.SCHEMA_VERSION:  # the next command that records migrates it
        return Finding("store", "warn", summary + f"; older schema (this slurmadm: {schema.SCHEMA_VERSION})",
                       "run `slurmadm store migrate` (or any command that records)", data)
    return Finding("store", "ok" if writable else "warn", summary,
                   "" if writable else "run slurmadm as root (or the store's owner) to record", data)


@register("store-privileges", "central store: what the nodes' account may do")
def store_privileges(ctx: Context) -> Finding:
    """A compute node's account may only add its own rows (issue 24): warn when the account
    this host's nodes ship as can do more (DELETE, UPDATE of events, DDL, another database)."""
    from ..store import central, grants
    from ..store.ship import host_name

    sec = ctx.site.store
    url = sec.central()
    fix = "set store.node_user and run `slurmadm store grants --apply` (docs/SECURITY.md)"
    if url is None:
        return Finding("store-privileges", "ok", "no central store (store.url not set): each host keeps its own records")
    if url.dialect != "mysql":
        return Finding("store-privileges", "warn", f"central store {url} is a shared SQLite file: any host that can "
                       "write it can rewrite every host's records", "use MariaDB with store.node_user for a fleet "
                       "(docs/SECURITY.md)", {"url": str(url)})
    host = host_name(ctx.node)
    as_node = sec.node_user is not None and host in ctx.site.node_names
    account = sec.node_account(host) if as_node else url.user
    data: dict = {"url": str(url), "account": account, "node_user": sec.node_user}
    try:
        with central.connected(sec, node=host if as_node else None) as c:
            lines = [next(iter(r.values())) for r in c.query("SHOW GRANTS")]
            listed = (c.query("SELECT account, origin FROM store_accounts")
                      if not as_node and sec.node_user is not None and central.has_table(c, "store_accounts") else [])
    except SlurmadmError as exc:
        return Finding("store-privileges", "warn", f"central store {url}: cannot read {account}'s privileges ({exc})",
                       "check store.url and the password file", data)
    more = grants.excess(lines, url.database) if as_node or sec.node_user is None else []
    data.update({"grants": lines, "excess": more})
    if sec.node_user is None:
        return Finding("store-privileges", "warn", f"every node ships as {url.user}, the head's account"
                       + (f", which can also do {'; '.join(more[:4])}" if more else "")
                       + ": root on one node could rewrite or delete any host's records", fix, data)
    if more:
        return Finding("store-privileges", "warn", f"node account {account} can do more than it needs: "
                       + "; ".join(more[:6]), "run `slurmadm store grants --apply` on the head", data)
    if as_node:
        return Finding("store-privileges", "ok", f"node account {account}: only adds its own rows", data=data)
    have = {r["account"] for r in listed}
    missing = [n for n in ctx.site.node_names if sec.node_account(n) not in have]
    data["missing"] = missing
    if missing:
        from ..hostlist import compress

        return Finding("store-privileges", "warn", f"{len(missing)} node(s) without their own account in the "
                       f"central store: {compress(missing)}", "run `slurmadm store grants --apply`", data)
    return Finding("store-privileges", "ok", f"{len(have)} node account(s) ({sec.node_user}) that only add their "
                   f"own rows; {url.user} reads and prunes", data=data)


@register("listeners", "exporters' and webhook's listen addresses")
def listeners(ctx: Context) -> Finding:
    """An exporter or the webhook on all interfaces without TLS (issue 24): anyone on the
    network may read it (exporters) or reach it in clear text (the webhook's bearer token)."""
    from ..exporter import webconfig

    m = ctx.site.monitor
    try:
        web = webconfig.load(m.web_config_file)
    except SlurmadmError as exc:
        return Finding("listeners", "fail", str(exc), "fix monitor.web_config_file", {"web_config_file":
                                                                                        m.web_config_file})
    tls = bool(web and web.tls)
    auth = bool(web and web.users)
    listens = {"monitor.node_listen": m.node_listen, "monitor.head_listen": m.head_listen,
               "monitor.webhook_listen": m.webhook_listen}
    wide = [k for k, v in listens.items() if v.rpartition(":")[0].strip("[]") in ("0.0.0.0", "::", "")]
    data = {"listen": listens, "all_interfaces": wide, "tls": tls, "basic_auth": auth,
            "web_config_file": m.web_config_file}
    if wide and not tls:
        return Finding("listeners", "warn", f"{', '.join(f'{k} = {listens[k]}' for k in wide)}: all interfaces "
                       "without TLS (anyone on the network reads the metrics" + (
                           ", and the webhook's token travels in clear text" if "monitor.webhook_listen" in wide
                           else "") + ")",
                       "set monitor.web_config_file (tls_server_config, basic_auth_users) or listen on a "
                       "management address", data)
    if auth and not tls:
        return Finding("listeners", "warn", "basic_auth_users without tls_server_config: passwords in clear text",
                       "add tls_server_config to monitor.web_config_file", data)
    return Finding("listeners", "ok", ("TLS" + (" and basic auth" if auth else "") + f" from {m.web_config_file}")
                   if tls else "no listener on all interfaces", data=data)


# ------------------------------------------------------------------------------ hooks


def _slurm_config(ctx: Context) -> dict[str, str]:
    """Prolog/Epilog/HealthCheckProgram as slurmctld runs them (`scontrol show config`), else as
    slurm.conf says."""
    def read() -> dict[str, str]:
        try:
            proc = run(["scontrol", "show", "config"], timeout=SLURM_TIMEOUT, check=False)
            if proc.returncode == 0:
                out = {}
                for line in proc.stdout.splitlines():
                    if "=" in line:
                        key, _, value = line.partition("=")
                        # 24.11 lists Prolog/Epilog (several allowed) as `Prolog[0] = ...`: the first
                        key = key.strip().removesuffix("[0]")
                        out[key] = value.strip()
                out["_source"] = "scontrol show config"
                return out
        except SlurmadmError:
            pass
        conf_dir = ctx.site.slurm.config_dir if ctx.site is not None else "/etc/slurm"
        conf = Path(os.environ.get("SLURM_CONF") or Path(conf_dir) / "slurm.conf")
        out = {"_source": str(conf)}
        try:
            for line in conf.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if "=" in line and " " not in line.split("=", 1)[0]:
                    key, _, value = line.partition("=")
                    out[key.strip()] = value.strip()
        except OSError:
            out["_missing"] = "yes"
        return out

    return ctx.remember("slurm_config", read)


@register("gpu-tres", "GPUs tracked as a TRES (AccountingStorageTRES)")
def gpu_tres(ctx: Context) -> Finding:
    from ..slurm.accounting import gpu_tres_tracked

    conf = _slurm_config(ctx)
    source = conf.get("_source", "")
    value = conf.get("AccountingStorageTRES")
    if conf.get("_missing"):
        return Finding("gpu-tres", "skip", f"AccountingStorageTRES: neither slurmctld nor {source} readable",
                       data={"config_source": source})
    if value is None:
        value = ""  # not set: Slurm's default, which has no gres/gpu
    data = {"config_source": source, "accounting_storage_tres": value, "tracked": gpu_tres_tracked(value)}
    if data["tracked"]:
        return Finding("gpu-tres", "ok", f"gres/gpu tracked (AccountingStorageTRES={value}, {source})", data=data)
    return Finding("gpu-tres", "warn",
                   f"gres/gpu is not in AccountingStorageTRES ({value or 'Slurm default'}, {source}): Slurm "
                   "records every GPU job as 0 GPUs (squeue/sacct/sshare TRES), GPU quotas and budgets are not "
                   "enforced, and slurmadm's accounts report and head exporter cannot count GPU use",
                   "add gres/gpu to AccountingStorageTRES in slurm.conf (slurmadm config render writes it) and "
                   "restart slurmctld", data)


@register("hooks", "prolog/epilog/HealthCheckProgram hooks")
def hooks(ctx: Context) -> Finding:
    hook_dir = Path(ctx.site.slurm.prolog_dir)
    conf = _slurm_config(ctx)
    problems, fixes = [], []
    data: dict = {"prolog_dir": str(hook_dir), "config_source": conf["_source"], "configured": {}}
    for key, script in HOOKS.items():
        path = hook_dir / script
        if not path.is_file():
            problems.append(f"{path} missing")
            fixes.append(f"copy prolog_epilog/ to {hook_dir}")
        elif not os.access(path, os.X_OK):
            problems.append(f"{path} not executable")
            fixes.append(f"chmod 755 {path}")
        value = conf.get(key, "")
        data["configured"][key] = value
        configured = [v.strip() for v in value.split(",") if v.strip() and v.strip() != "(null)"]
        if str(path) not in configured:
            problems.append(f"{key} is {value or 'unset'!s} in {conf['_source']}, not {path}")
            fixes.append("slurmadm config apply (writes them into slurm.conf)")
    env_file = next((p for p in (hook_dir / "slurmadm.env",
                                 Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).parent / "slurmadm.env")
                     if p.is_file()), None)
    data["env_file"] = str(env_file) if env_file else None
    if env_file is None:
        problems.append(f"no slurmadm.env next to the hooks ({hook_dir}) or slurm.conf")
        fixes.append(f"write {hook_dir}/slurmadm.env (see prolog_epilog/hook-env.sh)")
    else:
        values = dict(line.split("=", 1) for line in env_file.read_text().splitlines()
                      if "=" in line and not line.lstrip().startswith("#"))
        py = values.get("SLURMADM_PYTHON", "").strip()
        if py and not os.access(py, os.X_OK):
            problems.append(f"SLURMADM_PYTHON={py} in {env_file} is not executable")
            fixes.append(f"fix SLURMADM_PYTHON in {env_file}")
        site = values.get("SLURMADM_SITE", "").strip()
        if site and not Path(site).is_file():
            problems.append(f"SLURMADM_SITE={site} in {env_file} does not exist")
            fixes.append(f"fix SLURMADM_SITE in {env_file}")
    if problems:
        return Finding("hooks", "fail", "hooks: " + "; ".join(problems), "; ".join(dict.fromkeys(fixes)), data)
    return Finding("hooks", "ok", f"hooks in {hook_dir}, configured in {conf['_source']}"
                   + (f", env {env_file}" if env_file else ""), data=data)


@register("hook-errors", "health enforcement on the nodes")
def hook_errors(ctx: Context) -> Finding:
    """Nodes whose health hooks cannot load the site (every job runs unchecked there)."""
    from ..hostlist import compress
    from ..store import read

    if ctx.site.store.url is None and not Path(ctx.site.store.local_path()).exists():
        return Finding("hook-errors", "skip", "no store yet: no hook run recorded anything")
    try:
        with read.reader(ctx.site, warn=lambda _msg: None) as r:
            errors = read.hook_errors(r)
    except (SlurmadmError, sqlite3.Error) as exc:
        return Finding("hook-errors", "skip", f"store not readable: {exc}")
    data = {"nodes": [e["node"] for e in errors], "errors": errors}
    if not errors:
        return Finding("hook-errors", "ok", "no node's health hook failed to load the site since its last run", data=data)
    first = errors[0]
    return Finding("hook-errors", "fail",
                   f"health enforcement off on {len(errors)} node(s) {compress([e['node'] for e in errors])}: "
                   f"{first['node']} [{first['context']}] {first['error']}",
                   "fix the site file (slurmadm site validate), then the next hook run on each node clears this", data)


# ------------------------------------------------------------------------------ schedule


@register("schedule", "nightly burn-in schedule")
def burnin_schedule(ctx: Context) -> Finding:
    from ..burnin import schedule
    from ..site import site_path

    site_file = str(site_path(ctx.site_file))
    found = []
    for kind in ("cron", "systemd"):
        files = schedule.plan(ctx.site, site_file, kind=kind)
        states = {str(f.path): f.status() for f in files}
        if any(s != "new" for s in states.values()):
            found.append((kind, states))
    data = {"installed": {k: v for k, v in found}, "schedule": ctx.site.burnin.schedule}
    if not found:
        return Finding("schedule", "warn", f"burn-in schedule ({ctx.site.burnin.schedule}) not installed",
                       "slurmadm burnin install-schedule --cron (or --systemd)", data)
    kind, states = found[0]
    stale = [p for p, s in states.items() if s != "unchanged"]
    if stale:
        return Finding("schedule", "warn", f"burn-in schedule ({kind}) differs from the site: {', '.join(stale)}",
                       f"slurmadm burnin install-schedule --{kind}", data)
    return Finding("schedule", "ok", f"burn-in schedule {ctx.site.burnin.schedule} installed ({kind}: "
                   f"{', '.join(states)})", data=data)


# ------------------------------------------------------------------------------ BMC and SSH reachability


def ipmi_ping(host: str, port: int, timeout: float) -> str | None:
    """IPMI over LAN: send `Get Channel Authentication Capabilities` outside any session (what
    ipmitool sends first); None when a BMC answers, else why not."""
    body = bytes([0x81, 0x00, 0x38, 0x8E, 0x04])  # rqAddr, rqSeq, cmd, channel (current, v2 ext), admin
    msg = bytes([0x20, 0x18, (-(0x20 + 0x18)) & 0xFF]) + body + bytes([(-sum(body)) & 0xFF])
    packet = bytes([0x06, 0x00, 0xFF, 0x07, 0x00]) + bytes(8) + bytes([len(msg)]) + msg
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        return f"cannot resolve ({exc.strerror or exc})"
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(packet, addr)
            data, _ = s.recvfrom(512)
        except socket.timeout:
            return f"no IPMI answer within {timeout:g} s"
        except OSError as exc:
            return exc.strerror or str(exc)
    return None if data[:4] == bytes([0x06, 0x00, 0xFF, 0x07]) else "answer is not IPMI"


def tcp_ping(host: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.timeout:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def _reach(targets: dict[str, tuple[str, int]], probe, timeout: float, fanout: int) -> dict[str, str | None]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(fanout, len(targets)))) as pool:
        futs = {node: pool.submit(probe, host, port, timeout) for node, (host, port) in targets.items()}
        return {node: f.result() for node, f in futs.items()}


def _reach_finding(check: str, what: str, results: dict[str, str | None], targets, fix: str) -> Finding:
    from ..hostlist import compress

    bad = {n: why for n, why in results.items() if why}
    data = {"targets": {n: f"{h}:{p}" for n, (h, p) in targets.items()}, "unreachable": bad}
    if not bad:
        return Finding(check, "ok", f"{what}: all {len(results)} answer", data=data)
    example = next(iter(bad))
    host, port = targets[example]
    return Finding(check, "warn", f"{what}: {len(bad)} of {len(results)} do not answer: {compress(list(bad))} "
                   f"(e.g. {example} at {host}:{port}: {bad[example]})", fix, data)


@register("bmc", "BMC reachability")
def bmc(ctx: Context) -> list[Finding]:
    from ..bmc.fanout import targets as bmc_targets

    site = ctx.site
    if "bmc" not in site.model_fields_set:
        return [Finding("bmc", "skip", "BMCs: no [bmc] section in the site")]
    b = site.bmc
    found = bmc_targets(site, site.node_names)  # host_pattern, or the dev cluster's shared address
    timeout = min(b.timeout_s, 5.0)
    fix = "check the BMC network and [bmc] host_pattern/shared_address/port in the site"
    out = []
    if b.protocol == "ipmi":
        ipmi = {t.node: (t.host, t.ipmi_port) for t in found}
        out.append(_reach_finding("bmc", "BMCs (IPMI)", _reach(ipmi, ipmi_ping, timeout, b.fanout), ipmi, fix))
    if b.protocol == "redfish" or b.redfish:
        rf = {t.node: (t.host, t.redfish_port) for t in found}
        out.append(_reach_finding("bmc" if b.protocol == "redfish" else "bmc-redfish", "BMCs (Redfish, TCP)",
                                  _reach(rf, tcp_ping, timeout, b.fanout), rf, fix))
    return out


@register("ssh", "SSH reachability of the nodes")
def ssh(ctx: Context) -> Finding:
    from ..fleet.ssh import targets as ssh_targets

    site = ctx.site
    if "fleet" not in site.model_fields_set and "software" not in site.model_fields_set:
        return Finding("ssh", "skip", "SSH: no [fleet] section in the site")
    targets = {n: (t.host, t.port) for n, t in ssh_targets(site.fleet, site.node_names).items()}
    results = _reach(targets, tcp_ping, 3.0, 64)
    return _reach_finding("ssh", "node SSH (TCP)", results, targets,
                          "check sshd on the nodes and [fleet] host_pattern/port(s) in the site")
