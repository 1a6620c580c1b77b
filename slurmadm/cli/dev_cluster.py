"""`slurmadm dev-cluster ...`: a real local Slurm of fake B200 nodes (slurmadm/devcluster/)."""

from __future__ import annotations

import shlex
import signal
import threading

import click

from ..devcluster.cluster import DEFAULT_PORT_BASE, DevCluster, default_state_dir
from ..devcluster.ibsysfs import IB_FAULTS
from ..errors import UsageError
from ..hostlist import compress
from .common import Group, console, json_option, print_json, progress, say, styled, table


def state_dir_option(fn):
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Where the dev cluster lives (default: $SLURMADM_DEV_STATE_DIR, then /var/lib/slurmadm/dev-cluster).",
    )(fn)


def _cluster(state_dir: str | None) -> DevCluster:
    return DevCluster(state_dir or default_state_dir())


def _recorded_cluster(state_dir: str | None) -> DevCluster:
    """The dev cluster in the state directory; UsageError when `up` never ran there."""
    dc = _cluster(state_dir)
    if dc.record() is None:
        raise UsageError(f"no dev cluster in {dc.state_dir} (run `slurmadm dev-cluster up`)")
    return dc


@click.group("dev-cluster", cls=Group)
def dev_cluster() -> None:
    """A local Slurm of fake B200 nodes, for trying and testing.

    A real local Slurm (munge, MariaDB, slurmdbd, slurmctld, N slurmd) of fake B200 nodes."""


@dev_cluster.command()
@click.option("--nodes", type=click.IntRange(1, 512), default=None, help="Number of nodes (default 4).")
@click.option("--site", "site_file", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Site to derive the dev cluster from (default: the shipped site.example.toml).")
@state_dir_option
@click.option("--port-base", type=click.IntRange(1024, 65535 - 703), default=None,
              help=f"First of the ports used (default {DEFAULT_PORT_BASE}); the dev cluster uses base..base+703 "
                   "(more with over 4 nodes: base+699+N), so two dev clusters' bases must be 704 or more apart; "
                   "over 50 nodes (or --wide-ports) base..base+2199.")
@click.option("--timeout", type=click.FloatRange(10, 3600), default=180.0, show_default=True,
              help="Seconds to wait for every node to be idle.")
@click.option("--foreground", is_flag=True, help="Stay in the foreground; SIGTERM/SIGINT brings it down.")
@click.option("--central-store/--local-store", "central_store", default=None,
              help="Per-node stores shipping to a central store in the cluster's MariaDB, or one shared "
                   "SQLite file (default: as the last `up`; first time: local).")
@click.option("--bmc/--no-bmc", default=None,
              help="Emulated BMCs (IPMI + Redfish) per node, wired to the nodes' power (default: as last time).")
@click.option("--ssh/--no-ssh", default=None,
              help="One OpenSSH sshd per fake node (own mount+UTS namespace and software stack) "
                   "for `slurmadm fleet` (default: as last time).")
@click.option("--wide-ports", is_flag=True, default=None,
              help="The wide port plan (base..base+2199, up to 200 nodes with BMCs and sshd), used anyway "
                   "above 50 nodes.")
@click.option("--enforce-memory/--no-enforce-memory", "enforce_memory", default=None,
              help="task/cgroup with ConstrainRAMSpace, as at a site: a step over its --mem is OOM-killed "
                   "(OUT_OF_MEMORY). Needs a writable cgroup v1 memory controller (default: as last time; "
                   "first time: off).")
@json_option
def up(nodes, site_file, state_dir, port_base, timeout, foreground, central_store, bmc, ssh, wide_ports,
       enforce_memory, as_json) -> None:
    """Start the dev cluster (idempotent) and wait until every node is idle."""
    dc = _cluster(state_dir)
    stop = threading.Event()
    if foreground:  # before bring-up, so a SIGTERM during it still ends in a clean down
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    status = dc.up(nodes=nodes, site_file=site_file, port_base=port_base, timeout=timeout,
                   progress=progress, central_store=central_store, bmc=bmc, ssh=ssh,
                   wide_ports=wide_ports, enforce_memory=enforce_memory)
    if as_json:
        print_json(status)
    else:
        _show(status)
        console.print("\nUse it:  eval \"$(slurmadm dev-cluster env"
                      + (f" --state-dir {shlex.quote(str(dc.state_dir))}" if state_dir else "") + ')"')
    if foreground:
        stop.wait()
        dc.down(progress=progress)


@dev_cluster.command()
@state_dir_option
@json_option
def status(state_dir, as_json) -> None:
    """Daemons and node states of the dev cluster. Exit 1 if any daemon is down."""
    st = _cluster(state_dir).status()
    if as_json:
        print_json(st)
    else:
        _show(st)
    if not st["exists"] or not all(d["alive"] for d in st["daemons"]):
        raise SystemExit(1)


@dev_cluster.command()
@state_dir_option
def env(state_dir) -> None:
    """Print `export SLURM_CONF=...` and friends for eval."""
    click.echo(_recorded_cluster(state_dir).exports(), nl=False)


@dev_cluster.command()
@state_dir_option
@click.option("--purge", is_flag=True, help="Also delete the state directory.")
@json_option
def down(state_dir, purge, as_json) -> None:
    """Stop every process of this dev cluster (and only those)."""
    dc = _cluster(state_dir)
    stopped = dc.down(purge=purge, progress=progress)
    if as_json:
        print_json({"stopped": stopped, "state_dir": str(dc.state_dir), "purged": purge})
    else:
        # folded as a hostlist: 128 nodes' daemons read `slurmd-b200-[001-128]`, not 128 names
        console.print(f"stopped {len(stopped)} process(es)" + (f": {compress(stopped)}" if stopped else ""))


def _show(st: dict) -> None:
    rec = st.get("record") or {}
    if not st["exists"]:
        console.print(f"no dev cluster in {st['state_dir']}")
        return
    say("dev cluster ", (str(rec.get("cluster_name")), "bold"), f" in {st['state_dir']} "
        f"(Slurm {rec.get('slurm_release')}, ports from {rec.get('port_base')})")
    console.print(table(None, ["daemon", "pid", "state"],
                        [(d["name"], d["pid"] or "", styled("up", "green") if d["alive"] else styled("down", "red"))
                         for d in st["daemons"]]))
    ready = st.get("readyz")
    if ready is not None:
        say("slurmctld ", ready["url"], ": ", (ready["answer"], "green" if ready["ok"] else "red"))
    if st["nodes"]:
        console.print(table(None, ["node", "state"], sorted(st["nodes"].items())))


@dev_cluster.command("ib-fault")
@click.argument("node")
@click.option("--hca", default=None, help="The HCA (e.g. mlx5_3).")
@click.option("--kind", type=click.Choice(list(IB_FAULTS)), default=None,
              help="down, rate (200 Gb/s), errors (symbol_error +5000, link_downed +3), missing, flap (2 x Link down; "
                   "see --every), flap-once (Link down and up, link_downed +1).")
@click.option("--every", type=click.FloatRange(0.5, 86400), default=None, metavar="SECONDS",
              help="With --kind flap: the link keeps flapping, once every SECONDS (across reboots), until --clear.")
@click.option("--clear", is_flag=True, help="Every stand-in HCA of NODE healthy again, its flapping stopped "
              "(kernel-log lines stay).")
@state_dir_option
@json_option
def ib_fault(node, hca, kind, every, clear, state_dir, as_json) -> None:
    """Inject a fault into NODE's stand-in InfiniBand sysfs (what health.sysfs_root points at), or
    --clear. Every change is an audit event."""
    from ..devcluster import gpus, ibsysfs
    from ..store import Store

    dc = _recorded_cluster(state_dir)
    if node not in dc.nodes():
        raise UsageError(f"NODE: {node!r} is not a node of this dev cluster ({', '.join(dc.nodes())})")
    if every is not None and (clear or kind != "flap"):
        raise UsageError("--every: only with --kind flap (how often the link goes on flapping)")
    site = dc.site()
    if clear:
        stopped = ibsysfs.stop_flapping(dc.extra_daemons(), node)
        ibsysfs.write_healthy(dc.p("gpus"), node, site.node_profile(node))
        out = {"node": node, "cleared": True, **({"stopped_flapping": stopped} if stopped else {})}
        what = "cleared stand-in InfiniBand faults" + (f" (stopped flapping: {', '.join(stopped)})" if stopped else "")
    else:
        if not hca or not kind:
            raise UsageError("--hca and --kind: which HCA gets which fault (or --clear)")
        port = site.node_profile(node).nics.port
        kmsg = gpus.kmsg_path(dc.p("gpus"), node)
        ibsysfs.ib_fault(dc.p("gpus"), node, hca, kind, port=port, kmsg=kmsg)
        out = {"node": node, "hca": hca, "kind": kind}
        what = f"stand-in {hca}: {kind}"
        if every is not None:
            d = dc.daemon(ibsysfs.flap_daemon_name(node, hca))
            if not d.alive():
                d.start(ibsysfs.flapper_argv(dc.p("gpus"), node, hca, port, kmsg, every))
            out["every_s"] = every
            what += f", every {every:g} s until cleared"
    with Store.for_site(site) as store:
        store.audit("dev-cluster.ib-fault", node, what, **{k: v for k, v in out.items() if k != "node"})
    if as_json:
        print_json(out)
    else:
        console.print(f"{node}: {what}")


@dev_cluster.command("gpu-fault")
@click.argument("node", required=False)
@click.option("--gpu", type=int, default=None, help="Physical GPU slot (0-7).")
@click.option("--kind", default=None, help="Fault kind (see --help-kinds).")
@click.option("--value", default=None, help="The fault's value (an XID number, error count, GENxWIDTH, ...).")
@click.option("--clear", is_flag=True, help="Remove faults: all of NODE's, or those of --gpu and/or --kind "
              "(a replaced part stays replaced).")
@click.option("--help-kinds", is_flag=True, help="List the fault kinds and exit.")
@click.option("--minutes-ago", type=click.IntRange(0, 60 * 24 * 30), default=0, show_default=True,
              help="Date the fault (an xid's kernel-log line) this many minutes in the past.")
@state_dir_option
@json_option
def gpu_fault(node, gpu, kind, value, clear, help_kinds, minutes_ago, state_dir, as_json) -> None:
    """Inject a fault into a stand-in GPU of NODE, or --clear faults; without --kind or --clear,
    list NODE's faults. Every change is an audit event."""
    from ..devcluster import gpus
    from ..store import Store

    if help_kinds:
        rows = [(k.name, k.value or "-", k.help) for k in gpus.FAULT_KINDS.values()]
        console.print(table(None, ["kind", "value", "what"], rows))
        return
    if node is None:
        raise UsageError("NODE: which node's stand-in GPUs?")
    dc = _recorded_cluster(state_dir)
    if node not in dc.nodes():
        raise UsageError(f"NODE: {node!r} is not a node of this dev cluster ({', '.join(dc.nodes())})")
    gdir = dc.p("gpus")
    if clear and value is not None:
        raise UsageError("--value: only with --kind when injecting, not with --clear")
    if clear:
        removed = gpus.clear(gdir, node, gpu=gpu, kind=kind)
        with Store.for_site(dc.site()) as store:
            store.audit("dev-cluster.gpu-fault.clear", node, "cleared stand-in GPU faults", gpu=gpu, kind=kind,
                        removed=removed)
        out = {"node": node, "cleared": removed}
    elif kind is not None:
        if gpu is None:
            raise UsageError("--gpu: which GPU (0-7) gets the fault?")
        import datetime as _dt

        when = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=minutes_ago)
        record = gpus.inject(gdir, node, gpu, kind, value, now=when)
        with Store.for_site(dc.site()) as store:
            what = (f"stand-in GPU{gpu}: replaced part {record['old_serial']} -> {record['value']}"
                    if kind == "replace" else f"stand-in GPU{gpu}: {kind}")
            store.audit("dev-cluster.gpu-fault.inject", node, what, **record)
        out = {"node": node, "injected": record}
    else:
        if gpu is not None or value is not None:
            raise UsageError("--gpu/--value: give --kind to inject, or --clear")
        out = {"node": node, "faults": gpus.list_faults(gdir, node)}
    _show_faults(out, as_json, where=lambda r: f"GPU{r['gpu']}", what="fault(s)",
                 headers=["gpu", "kind", "value", "since"],
                 rows=lambda faults: [(f["gpu"], f["kind"], f["value"], f["since"]) for f in faults])


@dev_cluster.command("central-store")
@click.argument("mode", type=click.Choice(["on", "off"]))
@state_dir_option
def central_store_cmd(mode, state_dir) -> None:
    """Switch the running dev cluster to per-node stores shipping to its MariaDB (on), or back
    to one shared SQLite file (off). Slurm keeps running; the next hook run follows."""
    dc = _recorded_cluster(state_dir)
    site = dc.set_central_store(mode == "on", progress=progress)
    console.print(f"store: {site.store.url or site.store.path}"
                  + (f" (local: {site.store.path})" if site.store.url else ""))


@dev_cluster.command("bmc-fault")
@click.argument("node", required=False)
@click.option("--kind", default=None, help="Fault kind (see --help-kinds).")
@click.option("--value", default=None, help="The fault's value (seconds for slow, a PSU number, degrees C, ...).")
@click.option("--clear", is_flag=True, help="Remove NODE's BMC faults (all, or --kind).")
@click.option("--help-kinds", is_flag=True, help="List the fault kinds and exit.")
@state_dir_option
@json_option
def bmc_fault(node, kind, value, clear, help_kinds, state_dir, as_json) -> None:
    """Inject a fault into NODE's emulated BMC (dev-cluster up --bmc), or --clear it; without
    --kind or --clear, list NODE's BMC faults. Every change is an audit event."""
    from ..devcluster import bmcs
    from ..devcluster.bmc_state import FAULT_KINDS, read_faults
    from ..store import Store

    if help_kinds:
        console.print(table(None, ["kind", "value", "what"], [(k, v, h) for k, (v, h) in FAULT_KINDS.items()]))
        return
    if node is None:
        raise UsageError("NODE: which node's BMC?")
    dc = _recorded_cluster(state_dir)
    if not (dc.record() or {}).get("bmc"):
        raise UsageError(f"the dev cluster in {dc.state_dir} has no BMC emulators (run `dev-cluster up --bmc`)")
    if node not in dc.nodes():
        raise UsageError(f"NODE: {node!r} is not a node of this dev cluster ({', '.join(dc.nodes())})")
    if clear and value is not None:
        raise UsageError("--value: only with --kind when injecting, not with --clear")
    if clear:
        removed = bmcs.clear_faults(dc, node, kind)
        with Store.for_site(dc.site()) as store:
            store.audit("dev-cluster.bmc-fault.clear", node, "cleared emulated BMC faults", kind=kind, removed=removed)
        out = {"node": node, "cleared": removed}
    elif kind is not None:
        record = bmcs.set_fault(dc, node, kind, value)
        with Store.for_site(dc.site()) as store:
            store.audit("dev-cluster.bmc-fault.inject", node, f"emulated BMC: {kind}", **record)
        out = {"node": node, "injected": record}
    else:
        if value is not None:
            raise UsageError("--value: give --kind to inject, or --clear")
        out = {"node": node, "faults": read_faults(bmcs.bmc_dir(dc), node)}
    _show_faults(out, as_json, where=lambda r: "BMC", what="BMC fault(s)", headers=["kind", "value"],
                 rows=lambda faults: sorted(faults.items()))


def _show_faults(out: dict, as_json: bool, *, where, what: str, headers: list[str], rows) -> None:
    """What a fault command did (gpu-fault, bmc-fault): injected, cleared, or the faults listed."""
    node = out["node"]
    if as_json:
        print_json(out)
    elif "injected" in out:
        r = out["injected"]
        console.print(f"{node} {where(r)}: {r['kind']}" + (f" = {r['value']}" if r["value"] is not None else ""))
    elif "cleared" in out:
        console.print(f"{node}: cleared {len(out['cleared'])} {what}")
    else:
        console.print(table(None, headers, rows(out["faults"])))


@dev_cluster.command("set-software")
@click.argument("node")
@click.argument("facts", nargs=-1, required=True)
@click.option("--at-reboot", is_flag=True,
              help="Install now, but driver, CUDA, kernel, VBIOS and OS image run only after the next reboot.")
@click.option("--regenerate-host-key", is_flag=True, help="Also give the node a new SSH host key (a reinstalled node).")
@state_dir_option
@json_option
def set_software(node, facts, at_reboot, regenerate_host_key, state_dir, as_json) -> None:
    """Change a fake node's software stack: FACT=VERSION ... (os_image, kernel, driver, cuda, nccl,
    cudnn, ofed, mpi, enroot, nvidia-fabricmanager, vbios, cmdline_extra). Audited."""
    from ..devcluster.fakenode import parse_assignments
    from ..store import Store

    dc = _recorded_cluster(state_dir)
    values = parse_assignments(list(facts))
    state = dc.set_software(node, values, at_boot=at_reboot)
    if regenerate_host_key:
        dc.regenerate_host_key(node)
    with Store.for_site(dc.site()) as store:
        store.audit("dev-cluster.set-software", node, "fake node software changed", values=values,
                    at_reboot=at_reboot, new_host_key=regenerate_host_key)
    if as_json:
        print_json({"node": node, **state})
    else:
        console.print(table(None, ["fact", "installed", "running"],
                            [(k, v, state["running"].get(k, "")) for k, v in sorted(state["installed"].items())]))
