"""`slurmadm dev-cluster`: a real Slurm (munge, MariaDB, slurmdbd, slurmctld, N x `slurmd -N`) of
fake B200 nodes on 127.0.0.1, everything under one state directory.

Layout of the state directory:
  cluster.json      what `up` built (nodes, ports, Slurm release, source site)
  site.toml         the dev site (an ordinary site file; SLURMADM_SITE points here)
  etc/              slurm.conf, gres.conf, cgroup.conf, topology.conf, slurmdbd.conf (0600)
  munge/ mysql/     munged's key and socket; MariaDB's datadir and socket
  spool/ log/ run/  Slurm state, logs, our pid files (`<pid> <start-time>`)
  dev/nvidia0..7    placeholder GPU character devices (c 195 N), shared by the nodes
  lib/ gpus/        the stand-in libnvidia-ml.so.1 and each node's stand-in GPU state (faults)
  prolog_epilog/    links to slurmadm's hook scripts (slurm.conf's Prolog/Epilog/HealthCheckProgram)
                    and slurmadm.env, what they read (site, python, stand-in NVML); see hook-env.sh
  slurmadm.db       the dev site's store, shared by every fake node's health runs
  stores/           with a central store (`up --central-store`): one store per node and the
                    head's, shipping to MariaDB's `slurmadm` database (etc/store.password, 0600)
  bin/reboot        slurm.conf's RebootProgram: restarts the node's slurmd (and sshd) as a reboot
  nodes/ ssh/       with --ssh: each fake node's files and sshd (fakenode.py); the admin key and
                    known_hosts that the dev site's [fleet] section names
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import config
from ..errors import UnreachableError, UsageError
from ..files import write_atomic
from ..proc import run
from ..resources import example_site, prolog_epilog_dir
from ..site import Site, load_site
from ..slurm.parse import parse_version
from . import bmcs, devsite, fakenode, gpus, slurmconf
from .daemons import Daemon, session_members, start_time, wait_for, with_descendants

DEFAULT_STATE_DIR = "/var/lib/slurmadm/dev-cluster"
DEFAULT_PORT_BASE = 17000
ENV_STATE_DIR = "SLURMADM_DEV_STATE_DIR"

REQUIRED = ["munged", "mungekey", "munge", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
            "sacctmgr", "sinfo", "scontrol", "squeue", "scancel"]


def default_state_dir() -> Path:
    return Path(os.environ.get(ENV_STATE_DIR) or DEFAULT_STATE_DIR)


def missing_binaries() -> list[str]:
    return [b for b in REQUIRED if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _mariadbd() -> str:
    for name in ("mariadbd", "mysqld"):
        path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
        if path:
            return path
    raise UsageError("mariadbd: not installed (run scripts/install-system-deps.sh)")


def claims_dir() -> Path:
    """Where running dev clusters record their port spans (one host, every state dir)."""
    return Path(os.environ.get("SLURMADM_DEV_CLAIMS_DIR") or "/run/slurmadm-dev-clusters")


def _reboot_path() -> str:
    """PATH for the RebootProgram and what it starts (slurmd, sshd, nsenter): this process's
    PATH, then the usual system directories."""
    dirs = [*os.environ.get("PATH", "").split(os.pathsep), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
            "/usr/bin", "/sbin", "/bin"]
    return os.pathsep.join(d for d in dict.fromkeys(dirs) if d)


@dataclass
class DevCluster:
    state_dir: Path

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()

    # ------------------------------------------------------------------ paths and records
    def p(self, *parts: str) -> Path:
        return self.state_dir.joinpath(*parts)

    @property
    def record_path(self) -> Path:
        return self.p("cluster.json")

    @property
    def site_path(self) -> Path:
        return self.p("site.toml")

    @property
    def slurm_conf(self) -> Path:
        return self.p("etc", "slurm.conf")

    def record(self) -> dict | None:
        try:
            return json.loads(self.record_path.read_text())
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{self.record_path}: corrupt ({exc.msg}); run `down` and `up` again") from None

    def site(self) -> Site:
        return load_site(self.site_path)

    def nodes(self) -> list[str]:
        rec = self.record()
        return list(rec["node_names"]) if rec else []

    def daemon(self, name: str) -> Daemon:
        return Daemon(name, self.p("run", f"{name}.dev.pid"), self.p("log", f"{name}.out"))

    def daemons(self) -> list[Daemon]:
        """In start order."""
        fixed = [self.daemon(n) for n in ("munged", "mariadbd", "slurmdbd", "slurmctld")]
        sshds = [self.daemon(f"sshd-{n}") for n in self.nodes()] if self.has_ssh() else []
        # the BMC emulator last: `down` stops it first, so it powers nothing back on
        bmc = [self.daemon(bmcs.EMULATOR)] if (self.record() or {}).get("bmc") else []
        return fixed + sshds + [self.daemon(f"slurmd-{n}") for n in self.nodes()] + bmc

    def has_ssh(self) -> bool:
        rec = self.record()
        return bool(rec and rec.get("ssh"))

    def extra_daemons(self) -> list[Daemon]:
        """Processes capabilities started beside the cluster under its run/ directory (e.g. the
        monitoring stack's `monitor-*`), stopped first by `down` so none outlives a purge."""
        known = {d.pidfile.name for d in self.daemons()}
        return [self.daemon(p.name[: -len(".dev.pid")]) for p in sorted(self.p("run").glob("*.dev.pid"))
                if p.name not in known]

    def env(self) -> dict[str, str]:
        """What a shell (or a prolog) needs to use this dev cluster, its stand-in GPUs included."""
        return {
            "SLURM_CONF": str(self.slurm_conf),
            "SLURMADM_SITE": str(self.site_path),
            "SLURMADM_DEV_STATE_DIR": str(self.state_dir),
            "SLURMADM_CACHE_DIR": str(self.p("cache")),
            **gpus.env_for(self.p("gpus"), self.p("lib")),
        }

    def exports(self) -> str:
        """env() as shell `export` lines (what `slurmadm dev-cluster env` prints, and <state>/env)."""
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env().items())

    @property
    def munge_socket(self) -> Path:
        """munged's socket: <state>/run/munge (0755, like /run/munge); its key stays in <state>/munge (0700)."""
        return self.p("run", "munge", "munge.socket")

    def _slurm_env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.slurm_conf)}

    # ------------------------------------------------------------------ bring-up
    def up(self, *, nodes: int | None = None, site_file: str | None = None, port_base: int | None = None,
           progress: Callable[[str], None] = lambda msg: None, timeout: float = 180.0,
           central_store: bool | None = None, bmc: bool | None = None, ssh: bool | None = None,
           wide_ports: bool | None = None, enforce_memory: bool | None = None) -> dict:
        if os.geteuid() != 0:
            raise UsageError("dev-cluster up must run as root (it starts munged, MariaDB and Slurm daemons)")
        missing = missing_binaries()
        if missing:
            raise UsageError(
                f"missing programs: {', '.join(missing)} (install them with scripts/install-system-deps.sh)"
            )
        old = self.record() or {}
        nodes = nodes or old.get("nodes") or 4
        port_base = port_base or old.get("port_base") or DEFAULT_PORT_BASE
        source = str(Path(site_file).resolve()) if site_file else old.get("source_site") or str(example_site())
        ssh = bool(old.get("ssh")) if ssh is None else ssh
        if wide_ports is None and old.get("port_plan") == "wide" and old.get("nodes") == nodes:
            wide_ports = True
        ports = devsite.Ports.plan(port_base, nodes, wide=wide_ports or None)
        if ports.span(nodes)[1] > 65535:
            raise UsageError(f"--port-base: {port_base} leaves no room for the {ports.name} port plan "
                             f"(base..base+{ports.span(nodes)[1] - port_base})")
        if ssh and nodes > ports.max_nodes:
            raise UsageError(f"--ssh: at most {ports.max_nodes} nodes get an sshd in the {ports.name} port plan, "
                             f"not {nodes}")
        enforce_memory = bool(old.get("enforce_memory")) if enforce_memory is None else enforce_memory
        if enforce_memory and (why := devsite.memory_cgroup_problem()):
            raise UsageError(f"--enforce-memory: {why}")
        src_site = load_site(source)
        release = parse_version(run(["slurmd", "-V"]).stdout)
        hw = devsite.Hardware.parse(run(["slurmd", "-C"], timeout=30).stdout)
        hostname = socket.gethostname().split(".")[0]

        for sub in ("etc", "munge", "mysql", "spool/ctld", "spool/d", "log", "run", "run/munge", "dev", "gpus"):
            self.p(sub).mkdir(parents=True, exist_ok=True)
        # as on a real host: the key root-only (/etc/munge), the socket reachable by every user
        # (/run/munge), so people can submit jobs as their own users
        os.chmod(self.p("munge"), 0o700)
        for reachable in (self.state_dir, self.p("run"), self.p("run", "munge")):
            os.chmod(reachable, os.stat(reachable).st_mode & 0o7777 | 0o755)
        central_store = bool(old.get("central_store")) if central_store is None else central_store
        data = devsite.derive(src_site, nodes=nodes, state_dir=self.state_dir, ports=ports,
                              hostname=hostname, hw=hw, prolog_dir=self.p("prolog_epilog"), release=release[:2],
                              central_store=central_store, ssh=ssh, enforce_memory=enforce_memory)
        bmc = bool(old.get("bmc")) if bmc is None else bmc
        if bmc:
            if nodes > ports.max_nodes:
                raise UsageError(f"--bmc: at most {ports.max_nodes} nodes get emulated BMCs in the {ports.name} "
                                 f"port plan, not {nodes}")
            data["bmc"].update(devsite.bmc_settings(ports, self.state_dir))
            # a frozen node is marked DOWN in ~20 s rather than Slurm's default 300 s, so dead-node
            # recovery through the BMCs can be shown and tested
            data["slurm"].setdefault("extra", {}).setdefault("SlurmdTimeout", "20")
            data["bmc"]["recover"] = {**data["bmc"].get("recover", {}), "grace_s": 5.0, "boot_timeout_s": 120.0}
        site = devsite.write(data, self.site_path, source=source)
        node_names = site.node_names

        # Another dev cluster's span must not overlap ours (its ports are not all busy all the
        # time: the monitoring, BMC and burn-in ones come and go), nor anything hold our ports now.
        self._claim_ports(ports, len(node_names))
        if not any(d.alive() for d in self.daemons()):
            taken = [p for p in ports.job_ports() if _port_busy(p)]
            if taken:
                progress(f"warning: port(s) {_ranges(taken)} of the burn-in rendezvous range are in use now; "
                         "an all-reduce there may fail (pick another --port-base if it persists)")
            busy = [p for p in ports.daemon_ports(len(node_names), bmc=bmc, ssh=ssh) if _port_busy(p)]
            if busy:
                raise UsageError(f"--port-base {port_base}: port(s) {_ranges(busy)} already in use (another dev "
                                 f"cluster?); pick another base (--port-base, or PORT_BASE=... scripts/demo.sh)")

        changed = self._write_configs(site, release)
        if old and (old.get("node_names") != node_names or old.get("port_base") != port_base
                    or bool(old.get("ssh")) != ssh or old.get("port_plan", "small") != ports.name):
            changed = True
        if changed:
            # configuration changed under running Slurm daemons: restart them
            for d in reversed(self.daemons()):
                if d.name.startswith("slurm"):
                    d.stop()

        rec = {
            "nodes": nodes, "node_names": node_names, "port_base": port_base, "port_plan": ports.name,
            "source_site": source,
            "hostname": hostname, "slurm_release": f"{release[0]}.{release[1]:02d}.{release[2]}",
            "cluster_name": site.cluster.name, "started": old.get("started") or time.time(),
            "central_store": central_store,
            "bmc": bmc,
            "ssh": ssh,
            "enforce_memory": enforce_memory,
        }
        self.record_path.write_text(json.dumps(rec, indent=2) + "\n")

        self._make_gpu_devices(site)
        self._stand_in_gpus(site, progress)
        started = time.monotonic()
        fresh = not any(d.alive() for d in self.daemons() + self.extra_daemons())
        try:
            self._start(site, ports, node_names, central_store=central_store, ssh=ssh, bmc=bmc,
                        port_base=port_base, timeout=timeout, progress=progress)
        except BaseException:
            if fresh:  # nothing ran before this up: leave nothing running (the state stays, with its logs)
                progress("bring-up failed: stopping what it started")
                self.down()
            raise
        self._write_env_file()
        progress(f"dev cluster {site.cluster.name} up in {time.monotonic() - started:.1f} s")
        return self.status()

    def _start(self, site: Site, ports, node_names: list[str], *, central_store: bool, ssh: bool, bmc: bool,
               port_base: int, timeout: float, progress) -> None:
        self._munge(progress)
        self._mariadb(site, ports, progress)
        self._slurmdbd(site, progress)
        if central_store:
            self._central_store(site, progress)
        self._jwt_key(site, progress)
        self._slurmctld(progress)
        self._jwt_token(site, progress)
        powered_off = [n for n in node_names if not self.daemon(f"slurmd-{n}").alive()]
        self._write_reboot_program()
        if ssh:
            self._sshds(site, ports, progress)
        self._slurmds(node_names, progress)
        if bmc:  # restarted when slurmds were (re)started: its power state follows them
            bmcs.start(self, node_names, ports, progress, restart=bool(powered_off))
        progress(f"waiting for {len(node_names)} nodes to be idle")
        self.wait_ready(timeout=timeout)

    def _write_configs(self, site: Site, release: tuple[int, int, int]) -> bool:
        files = config.render(site, release[:2], source=str(self.site_path))
        password = _secret_file(Path(site.database.storage_password_file))
        files["slurmdbd.conf"] = slurmconf.slurmdbd_conf(site, password, self.state_dir)
        changed = False
        for name, text in files.items():
            path = self.p("etc", name)
            if path.exists() and path.read_text() == text:
                continue
            changed = True
            write_atomic(path, text, mode=0o600 if name == "slurmdbd.conf" else 0o644)
        return changed

    def _make_gpu_devices(self, site: Site) -> None:
        files = sorted({f for g in site.nodes for f in site.profile(g.profile).gpus.files()})
        for index, name in enumerate(files):
            path = Path(name)
            if path.exists():
                continue
            try:  # a character device like /dev/nvidiaN: jobs then get CUDA_VISIBLE_DEVICES
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, index))
            except PermissionError:
                path.touch()  # no CAP_MKNOD: slurmd still counts regular files

    def _stand_in_gpus(self, site: Site, progress) -> None:
        """Build the stand-in NVML into lib/, give every node 8 healthy GPUs in gpus/ (a node that
        already has state keeps it, faults included), and link the hook scripts into
        prolog_epilog/ next to the slurmadm.env they read (HealthCheckProgram gets no SLURM_CONF
        to find it by, so it lives next to the scripts)."""
        gpus.build_library(self.p("lib"))
        fresh = [n for n in site.node_names if not self.p("gpus", f"{n}.json").exists()]
        if fresh:
            progress(f"stand-in GPUs for {len(fresh)} node(s)")
        for node in fresh:
            gpus.write_healthy(self.p("gpus"), node, site.node_profile(node),
                               driver_version=site.software.driver_version,
                               cuda_version=site.software.cuda_version)
            from . import ibsysfs  # stand-in InfiniBand sysfs (health.sysfs_root points here)

            ibsysfs.write_healthy(self.p("gpus"), node, site.node_profile(node))
        env = {**self.env(), "SLURMADM_PYTHON": sys.executable}
        text = "# written by `slurmadm dev-cluster up`; read by hook-env.sh\n" + "".join(
            f"{k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
        hooks = self.p("prolog_epilog")
        hooks.mkdir(exist_ok=True)
        (hooks / "slurmadm.env").write_text(text)
        for script in prolog_epilog_dir().glob("*.sh"):
            link = hooks / script.name
            if not (link.is_symlink() and link.resolve() == script.resolve()):
                link.unlink(missing_ok=True)
                link.symlink_to(script)

    def _munge(self, progress) -> None:
        d = self.daemon("munged")
        key = self.p("munge", "munge.key")
        sock = self.munge_socket
        if d.alive():
            return
        if not key.exists():
            run(["mungekey", "--create", "--keyfile", str(key), "--bits", "1024"], timeout=30)
            os.chmod(key, 0o400)
        progress("starting munged")
        sock.unlink(missing_ok=True)
        d.start(["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                 f"--pid-file={self.p('munge', 'munged.pid')}", f"--log-file={self.p('log', 'munged.log')}",
                 f"--seed-file={self.p('munge', 'munged.seed')}"])
        self._await(d, lambda: run(["munge", "-n", "-S", str(sock)], check=False, timeout=5).returncode == 0,
                    "munged answers on its socket", 20)

    def _mariadb(self, site: Site, ports: devsite.Ports, progress) -> None:
        d = self.daemon("mariadbd")
        datadir = self.p("mysql", "data")
        sock = self.p("mysql", "mysqld.sock")
        if not d.alive():
            if not (datadir / "mysql").exists():
                progress("initialising MariaDB")
                run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                     "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=120)
            progress("starting MariaDB")
            sock.unlink(missing_ok=True)
            d.start([_mariadbd(), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
                     f"--port={ports.mysql}", "--bind-address=127.0.0.1", "--user=root",
                     f"--pid-file={self.p('mysql', 'mysqld.pid')}", f"--log-error={self.p('log', 'mariadb.log')}",
                     "--skip-name-resolve", "--innodb-buffer-pool-size=64M"])
        client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
        self._await(d, lambda: run([client, "--no-defaults", "-S", str(sock), "-u", "root", "-e", "SELECT 1"],
                                   check=False, timeout=5).returncode == 0, "MariaDB accepts connections", 60)
        db = site.database
        password = Path(db.storage_password_file).read_text().strip().replace("'", "''")
        # Create the database and user before slurmdbd's first start (Debian 13's client library
        # fails on a reused handle when the database does not exist yet). SQL on stdin: the
        # password never appears in a process argument.
        sql = (
            f"CREATE DATABASE IF NOT EXISTS `{db.storage_name}`;\n"
            f"CREATE USER IF NOT EXISTS '{db.storage_user}'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            f"ALTER USER '{db.storage_user}'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            f"GRANT ALL ON `{db.storage_name}`.* TO '{db.storage_user}'@'127.0.0.1';\n"
        )
        run([client, "--no-defaults", "-S", str(sock), "-u", "root"], input=sql, timeout=30)

    # ------------------------------------------------------------------ the central store
    def _central_store(self, site: Site, progress) -> None:
        """slurmadm's own database and user in the dev cluster's MariaDB (never slurmdbd's),
        its password in a root-only file, the schema migrated."""
        from ..store import central

        password = _secret_file(Path(site.store.password_file)).replace("'", "''")
        name = devsite.CENTRAL_DB
        client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
        sql = (  # on stdin: the password never appears in a process argument
            f"CREATE DATABASE IF NOT EXISTS `{name}`;\n"
            f"CREATE USER IF NOT EXISTS '{name}'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            f"ALTER USER '{name}'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            # the head's account: owns the database and creates the nodes' accounts (store grants)
            f"GRANT ALL ON `{name}`.* TO '{name}'@'127.0.0.1' WITH GRANT OPTION;\n"
            f"GRANT CREATE USER ON *.* TO '{name}'@'127.0.0.1';\n"
        )
        run([client, "--no-defaults", "-S", str(self.p("mysql", "mysqld.sock")), "-u", "root"], input=sql, timeout=30)
        from ..store import grants

        with central.connected(site.store) as c:
            found, steps = central.migrate(c)
            grants.apply(site, c, grants.plan(site))
        if steps:
            progress(f"central store: schema version {found} -> {central.schema.SCHEMA_VERSION}")

    def start_database(self, progress: Callable[[str], None] = lambda msg: None) -> None:
        """Start MariaDB (and slurmdbd, should it have died without it) after someone stopped it:
        the central store's failure drill. Nothing else is touched."""
        rec = self.record()
        if rec is None:
            raise UsageError(f"no dev cluster in {self.state_dir} (run `slurmadm dev-cluster up`)")
        site = self.site()
        self._mariadb(site, devsite.Ports.of_record(rec), progress)
        self._slurmdbd(site, progress)

    def set_central_store(self, on: bool, progress: Callable[[str], None] = lambda msg: None) -> Site:
        """Switch the running dev cluster's store between one shared SQLite file and per-node
        stores shipping to MariaDB, without restarting Slurm (only the dev site's [store] changes;
        the hooks see the new site on their next run)."""
        import tomllib

        rec = self.record()
        if rec is None:
            raise UsageError(f"no dev cluster in {self.state_dir} (run `slurmadm dev-cluster up`)")
        data = tomllib.loads(self.site_path.read_text())
        data["store"] = devsite.store_section(self.state_dir, devsite.Ports.of_record(rec), central=on)
        site = devsite.write(data, self.site_path, source=rec["source_site"])
        if on:
            if not self.daemon("mariadbd").alive():
                raise UnreachableError("MariaDB of the dev cluster is not running (run `slurmadm dev-cluster up`)")
            self._central_store(site, progress)
        self.record_path.write_text(json.dumps({**rec, "central_store": on}, indent=2) + "\n")
        return site

    def _slurmdbd(self, site: Site, progress) -> None:
        d = self.daemon("slurmdbd")
        if not d.alive():
            progress("starting slurmdbd")
            d.start(["slurmdbd", "-D"], env=self._slurm_env())
        env = self._slurm_env()
        self._await(d, lambda: run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], env=env,
                                   check=False, timeout=10).returncode == 0, "slurmdbd answers sacctmgr", 60)
        name = site.cluster.name
        clusters = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], env=env).stdout.split()
        if name not in clusters:
            progress(f"registering cluster {name} in slurmdbd")
            run(["sacctmgr", "-i", "add", "cluster", name], env=env, timeout=30)
        # slurmctld refuses to start when a partition's QOS is unknown to slurmdbd: create the
        # site's QOS by name (`slurmadm accounts apply` sets their limits).
        have = run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], env=env, timeout=30).stdout.split()
        missing = [q.name for q in site.qos if q.name not in have]
        if missing:
            progress(f"creating QOS {', '.join(missing)} in slurmdbd")
            run(["sacctmgr", "-i", "add", "qos", ",".join(missing)], env=env, timeout=30)

    def _slurmctld(self, progress) -> None:
        d = self.daemon("slurmctld")
        env = self._slurm_env()
        if not d.alive():
            progress("starting slurmctld")
            d.start(["slurmctld", "-D", "-i"], env=env)
        self._await(d, lambda: "UP" in run(["scontrol", "ping"], env=env, check=False, timeout=10).stdout,
                    "slurmctld answers scontrol ping", 60)

    def _jwt_key(self, site: Site, progress) -> None:
        """slurmctld's HS256 key for authenticated metrics (monitor.slurm_metrics_users, 26.05),
        before slurmctld starts: it dies without one. 0600, SlurmUser's (root here)."""
        key = site.monitor.slurm_metrics_jwt_key_file
        if key and "\nMetricsAuthUsers=" in self.slurm_conf.read_text():
            from ..slurm import jwt

            if jwt.make_key(key, owner=site.slurm_user):
                progress(f"made slurmctld's JWT key {key}")

    def _jwt_token(self, site: Site, progress) -> None:
        """Prometheus's JWT (monitor.slurm_metrics_token_file), fresh at every `up`, as long as
        `monitor slurm-token` makes one (doctor warns in its last week)."""
        m = site.monitor
        if m.slurm_metrics_token_file and "\nMetricsAuthUsers=" in self.slurm_conf.read_text():
            from ..slurm import jwt

            jwt.write_token(m.slurm_metrics_token_file,
                            jwt.fetch_token(m.slurm_metrics_users[0], env=self._slurm_env()))
            progress(f"wrote the metrics JWT of {m.slurm_metrics_users[0]} to {m.slurm_metrics_token_file}")

    def _slurmds(self, names: list[str], progress) -> None:
        env = self._slurm_env()
        todo = [n for n in names if not self.daemon(f"slurmd-{n}").alive()]
        if todo:
            progress(f"starting {len(todo)} slurmd")
        for node in todo:
            self._start_slurmd(node, env)

    def _start_slurmd(self, node: str, env: dict[str, str], *, rebooted: bool = False) -> None:
        """The node's slurmd; with --ssh inside its sshd's namespaces (it sees the node's files).
        SLURMADM_DEV_NODE tells the RebootProgram (run by this slurmd) which node it is on."""
        self.p("spool", "d", node).mkdir(parents=True, exist_ok=True)
        argv = ["slurmd", "-D", "-N", node] + (["-b"] if rebooted else [])
        if self.has_ssh():
            pid = self.daemon(f"sshd-{node}").pid()
            if pid is None:
                raise UnreachableError(f"sshd of {node} is not running; its slurmd joins that namespace")
            # --root/--wd: the sshd's own root and directory (joining a mount namespace resets
            # both to the namespace's root, which is not / when the dev cluster runs in a chroot)
            argv = ["nsenter", f"--target={pid}", "--mount", "--uts", "--root", "--wd", "--", *argv]
        self.daemon(f"slurmd-{node}").start(argv, env={**env, "SLURMADM_DEV_NODE": node})

    # ------------------------------------------------------------------ fake nodes over SSH
    def fake_node(self, node: str) -> fakenode.FakeNode:
        if node not in self.nodes():
            raise UsageError(f"NODE: {node!r} is not a node of this dev cluster ({', '.join(self.nodes())})")
        return fakenode.FakeNode(self.state_dir, node)

    def _sshds(self, site: Site, ports: devsite.Ports, progress) -> None:
        """Per node: files, host key, sshd in its own namespaces; the known_hosts file."""
        fakenode.write_client_key(self.p("ssh"))
        defaults = fakenode.defaults(site.software)
        lines, todo = [], []
        for i, node in enumerate(site.node_names):
            fn = fakenode.FakeNode(self.state_dir, node)
            fn.create(defaults)
            port = ports.ssh(i)
            lines.append(fakenode.known_hosts_line(port, fn.ensure_host_key()))
            if not self.daemon(f"sshd-{node}").alive():
                todo.append((node, fn, port))
        write_atomic(self.p("ssh", "known_hosts"), "\n".join(lines) + "\n")
        if todo:
            progress(f"starting {len(todo)} sshd (one namespace per node)")
        for node, fn, port in todo:
            self._start_sshd(node, fn, port)
        # all of them at once, one deadline (128 sshd on a loaded 2-core machine take ~20 s); an
        # sshd whose port a passing outgoing connection held (our ports lie in the ephemeral
        # range) is started again, a few times
        first_busy: dict[str, float] = {}
        last_try: dict[str, float] = {}
        waiting = {node: (fn, port) for node, fn, port in todo}

        def listening() -> bool:
            for node, (fn, port) in list(waiting.items()):
                d = self.daemon(f"sshd-{node}")
                if not d.alive():
                    now = time.monotonic()  # TIME_WAIT lasts 60 s: try for 90 s, once a second
                    if "in use" in d.tail(5) and now - first_busy.setdefault(node, now) < 90:
                        if now - last_try.get(node, 0.0) >= 1.0:
                            last_try[node] = now
                            self._start_sshd(node, fn, port)
                        continue
                    raise UnreachableError(f"sshd of {node} died: {d.tail()}")
                if _port_busy(port):
                    del waiting[node]
            return not waiting

        limit = 90 + 0.5 * len(todo)
        if not wait_for(listening, limit, interval=0.2):
            raise UnreachableError(f"timed out after {limit:g} s waiting for the sshd of "
                                   f"{', '.join(sorted(waiting)[:5])}{' ...' if len(waiting) > 5 else ''} to listen")

    def _start_sshd(self, node: str, fn: fakenode.FakeNode, port: int) -> None:
        config = fn.sshd_config(port, self.p("ssh", "authorized_keys"))
        self.daemon(f"sshd-{node}").start(fn.boot_script(config))

    def _ssh_port(self, node: str) -> int:
        rec = self.record() or {}
        return devsite.Ports.of_record(rec).ssh(self.nodes().index(node))

    def set_software(self, node: str, values: dict[str, str], *, at_boot: bool = False) -> dict:
        """Change a fake node's stack (now, or boot facts at its next reboot); NVML follows the
        running driver."""
        if not self.has_ssh():
            raise UsageError("this dev cluster has no fake-node sshd (run `slurmadm dev-cluster up --ssh`)")
        state = self.fake_node(node).set(values, at_boot=at_boot)
        running = state["running"]
        gpus.set_versions(self.p("gpus"), node, driver_version=running["driver"], cuda_version=running["cuda"])
        return state

    def regenerate_host_key(self, node: str) -> None:
        """A node whose host key changed (reinstalled): its sshd restarts with a new key; the
        known_hosts file keeps the old one, so slurmadm must refuse the node."""
        fn = self.fake_node(node)
        fn.ensure_host_key(regenerate=True)
        self.daemon(f"sshd-{node}").stop()
        self._restart_sshd(node, fn)

    def _restart_sshd(self, node: str, fn: fakenode.FakeNode) -> None:
        port = self._ssh_port(node)
        self._start_sshd(node, fn, port)
        d = self.daemon(f"sshd-{node}")
        self._await(d, lambda: _port_busy(port), f"sshd of {node} listens on {port}", 30)

    def reboot_node(self, node: str) -> None:
        """What the RebootProgram does: the node goes away (slurmd, sshd), boots the staged
        stack, and comes back (sshd in a fresh namespace, slurmd reporting a reboot)."""
        self.daemon(f"slurmd-{node}").stop()
        if self.has_ssh():
            self.daemon(f"sshd-{node}").stop()
        self.boot_node(node)

    def boot_node(self, node: str) -> None:
        """A stopped fake node boots (BMC power on/cycle, or the RebootProgram's second half):
        its staged stack, sshd in a fresh namespace, slurmd reporting a reboot. Its stand-in GPUs
        come up as a reboot leaves them (gpus.reboot: volatile faults, XIDs and recovery actions gone)."""
        if self.p("gpus", f"{node}.json").exists():
            gpus.reboot(self.p("gpus"), node)
        if self.has_ssh():
            # a node whose slurmd alone was stopped still has its sshd: a second one would find
            # the port taken and the first would outlive `down` (its pid record overwritten)
            self.daemon(f"sshd-{node}").stop()
            fn = self.fake_node(node)
            fn.boot()
            running = fn.software()["running"]
            gpus.set_versions(self.p("gpus"), node, driver_version=running["driver"], cuda_version=running["cuda"])
            self._restart_sshd(node, fn)
        self._start_slurmd(node, self._slurm_env(), rebooted=True)

    def _write_reboot_program(self) -> None:
        """bin/reboot, self-sufficient: Slurm 26.05 runs RebootProgram through its PowerAction code
        with an environment of only SLURM_NODE_NAME (22.05-25.11: slurmd's own, which carries
        SLURMADM_DEV_NODE and PATH). So it names every program by absolute path and finds the
        state directory, Python and PATH in bin/reboot.env next to itself."""
        setsid = shutil.which("setsid") or "/usr/bin/setsid"
        path = _reboot_path()
        env = (f"SLURMADM_STATE_DIR={shlex.quote(str(self.state_dir))}\n"
               f"SLURMADM_PYTHON={shlex.quote(sys.executable)}\n"
               f"SLURMADM_SETSID={shlex.quote(setsid)}\n"
               f"SLURMADM_PATH={shlex.quote(path)}\n")
        text = (
            "#!/bin/sh\n# RebootProgram of the dev cluster (slurm.conf): \"reboots\" the fake node whose slurmd\n"
            "# runs it. The worker detaches (its own session) and restarts that slurmd (and sshd).\n"
            "# Needs nothing from its environment but the node's name (SLURMADM_DEV_NODE, set for\n"
            "# slurmd, or SLURM_NODE_NAME, all Slurm 26.05 gives it): the rest is in reboot.env here.\n"
            'case "$0" in */*) here="${0%/*}" ;; *) here=. ;; esac\n'
            '. "$here/reboot.env" || exit 2\n'
            'PATH="$SLURMADM_PATH"; export PATH\n'
            'node="${SLURMADM_DEV_NODE:-${SLURM_NODE_NAME:-}}"\n'
            'if [ -z "$node" ]; then\n'
            '    echo "RebootProgram: neither SLURMADM_DEV_NODE nor SLURM_NODE_NAME is set" >&2\n'
            "    exit 2\n"
            "fi\n"
            "# The worker stops the slurmd that ran this; 26.05's slurmd signals its power action's\n"
            "# processes as it stops, so the worker ignores SIGHUP/SIGTERM (inherited through exec).\n"
            '(trap "" HUP TERM; exec "$SLURMADM_SETSID" "$SLURMADM_PYTHON" -m slurmadm.devcluster.fakenode '
            '--state-dir "$SLURMADM_STATE_DIR" --node "$node" reboot '
            '>>"$SLURMADM_STATE_DIR/log/reboot-$node.log" 2>&1 </dev/null) &\n'
            "exit 0\n")
        self.p("bin").mkdir(exist_ok=True)
        self.p("log").mkdir(exist_ok=True)
        write_atomic(self.p("bin", "reboot.env"), env, mode=0o644)
        write_atomic(self.p("bin", "reboot"), text, mode=0o755)

    def _await(self, d: Daemon, cond: Callable[[], bool], what: str, timeout: float) -> None:
        def ok() -> bool:
            if not d.alive():
                raise UnreachableError(f"{d.name} died: {d.tail()}")
            return cond()

        if not wait_for(ok, timeout, interval=0.2):
            raise UnreachableError(f"timed out after {timeout:g} s waiting until {what} (log: {d.logfile})")

    def node_states(self) -> dict[str, str]:
        out = run(["sinfo", "-N", "-h", "-o", "%N|%T|%G"], env=self._slurm_env(), check=False, timeout=10)
        states = {}
        for line in out.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 2:
                states[parts[0]] = parts[1]
        return states

    def wait_ready(self, *, timeout: float = 120.0) -> None:
        """Until every node has registered and is usable (idle, mixed or allocated) or drained
        by someone on purpose; a dead slurmd or an INVAL/down node is reported at once."""
        names = self.nodes()
        first_busy: dict[str, float] = {}
        last_try: dict[str, float] = {}
        env = self._slurm_env()

        def ready() -> bool:
            for n in names:
                d = self.daemon(f"slurmd-{n}")
                if not d.alive():
                    # its port (in the ephemeral range) held by a closed outgoing connection in
                    # TIME_WAIT (up to 60 s): start it again, for up to 90 s
                    now = time.monotonic()
                    if "Address already in use" in d.tail(5) and now - first_busy.setdefault(n, now) < 90:
                        if now - last_try.get(n, 0.0) >= 1.0:
                            last_try[n] = now
                            self._start_slurmd(n, env)
                        continue
                    raise UnreachableError(f"slurmd for {n} died: {d.tail()}")
            states = self.node_states()
            return all(states.get(n, "").rstrip("*").split("+")[0] in
                       ("idle", "mixed", "allocated", "drained", "draining", "completing") for n in names)

        if not wait_for(ready, timeout, interval=0.25):
            states = self.node_states()
            bad = {n: states.get(n, "missing") for n in names
                   if states.get(n, "missing").split("+")[0] not in ("idle", "mixed", "allocated")}
            raise UnreachableError(f"nodes not ready after {timeout:g} s: {bad} (see {self.p('log')})")

    def _write_env_file(self) -> None:
        self.p("env").write_text(self.exports())

    # ------------------------------------------------------------------ status and teardown
    def status(self) -> dict:
        rec = self.record()
        daemons = [{"name": d.name, "pid": d.pid(), "alive": d.alive()} for d in self.daemons()]
        nodes = {}
        readyz = None
        if rec and self.daemon("slurmctld").alive():
            nodes = self.node_states()
            readyz = self.readyz(rec)
        return {
            "state_dir": str(self.state_dir),
            "exists": rec is not None,
            "record": rec,
            "daemons": daemons,
            "nodes": nodes,
            "readyz": readyz,
            "env": self.env() if rec else {},
        }

    def readyz(self, rec: dict) -> dict | None:
        """slurmctld's /readyz (Slurm 25.11+; slurm/probes.py); None on older releases."""
        from ..config.release import PROBES_FROM
        from ..slurm import probes

        try:
            major, minor = (int(x) for x in str(rec.get("slurm_release", "")).split(".")[:2])
        except ValueError:
            return None
        if (major, minor) < PROBES_FROM:
            return None
        got = probes.get("127.0.0.1", self.site().slurm.slurmctld_port, "/readyz", timeout=3.0)
        return {"url": got.url, "ok": got.ok, "answer": got.detail}

    def _claim_ports(self, ports: devsite.Ports, nodes: int) -> None:
        """Record this dev cluster's port span in claims_dir(); refuse a span that overlaps the
        span of another dev cluster whose daemons still run (a stale claim is dropped)."""
        first, last = ports.span(nodes)
        directory = claims_dir()
        directory.mkdir(parents=True, exist_ok=True)
        for claim in directory.glob("*.json"):
            try:
                other = json.loads(claim.read_text())
                o_dir, o_first, o_last = Path(other["state_dir"]), int(other["first"]), int(other["last"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if o_dir == self.state_dir:
                continue
            if not any(d.alive() for d in DevCluster(o_dir).daemons()):
                claim.unlink(missing_ok=True)  # that cluster is down
                continue
            if first <= o_last and o_first <= last:
                raise UsageError(
                    f"--port-base {ports.base}: ports {first}-{last} overlap those of the dev cluster in {o_dir} "
                    f"({o_first}-{o_last}); this dev cluster spans base..base+{last - first} "
                    f"({ports.name} port plan): pick a base {last - first + 1} or more away (e.g. --port-base {o_last + 1}), or bring that one down")
        write_atomic(self._claim_path(), json.dumps({"state_dir": str(self.state_dir), "first": first,
                                                     "last": last}) + "\n")

    def _claim_path(self) -> Path:
        import hashlib

        return claims_dir() / (hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:16] + ".json")

    def down(self, *, progress: Callable[[str], None] = lambda msg: None, purge: bool = False,
             kill_after: float = 15.0) -> list[str]:
        """Stop every process this dev cluster started (and only those), and return what stopped
        only once all of them have exited: the daemons, and whatever runs in their sessions or
        below our slurmstepds (a slurmd forks for job steps and health checks even while it shuts
        down). SIGTERM, then SIGKILL after `kill_after` s; --purge deletes the state only after
        that (UnreachableError, nothing deleted, if something still lives)."""
        daemons = self.daemons() + self.extra_daemons()
        env = self._slurm_env()
        if self.daemon("slurmctld").alive():
            jobs = run(["squeue", "-h", "-o", "%i"], env=env, check=False, timeout=10).stdout.split()
            if jobs:
                progress(f"cancelling {len(jobs)} job(s)")
                run(["scancel", *jobs], env=env, check=False, timeout=20)
                wait_for(lambda: not run(["squeue", "-h", "-o", "%i"], env=env, check=False,
                                         timeout=10).stdout.split(), 20)
        sids = {pid for d in daemons if (pid := d.pid()) is not None}
        stray_roots = self._our_stepds() | set(session_members(sids))
        stopped = []
        # in reverse start order; a run of daemons of one kind (128 slurmd, 128 sshd, the
        # monitor's exporters) stops at once: SIGTERM to all of them, then one wait each
        for _kind, group in itertools.groupby(reversed(daemons), key=lambda d: d.name.split("-")[0]):
            group = list(group)
            if len(group) == 1:
                done = [group[0].stop(timeout=kill_after)]
            else:
                with ThreadPoolExecutor(max_workers=min(32, len(group))) as pool:
                    done = list(pool.map(lambda d: d.stop(timeout=kill_after), group))
            for d, was in zip(group, done):
                if was:
                    stopped.append(d.name)
                    progress(f"stopped {d.name}")
        # slurmstepd, job processes and forks that outlived their slurmd: looked for again until
        # none is left (a session id outlives its leader), each by pid and start time
        seen: dict[int, str] = {}
        deadline = time.monotonic() + kill_after + 10.0
        while True:
            found = {p: st for p in with_descendants(stray_roots | self._our_stepds() | set(session_members(sids)))
                     if p not in sids and p != os.getpid() and (st := start_time(p)) is not None}
            if not found:
                break
            for pid, st in found.items():
                if pid not in seen:
                    seen[pid] = st
                    stopped.append(f"pid {pid}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() >= deadline:
                raise UnreachableError(f"dev cluster {self.state_dir}: pid(s) {sorted(found)} still running after "
                                       "SIGKILL" + ("; state directory kept" if purge else ""))
            time.sleep(0.05)
        left = [d.name for d in daemons if d.alive()]
        if left:
            raise UnreachableError(f"dev cluster {self.state_dir}: {', '.join(left)} still running"
                                   + ("; state directory kept" if purge else ""))
        self._claim_path().unlink(missing_ok=True)  # its ports are free again
        if purge:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return stopped

    def _our_stepds(self) -> set[int]:
        """slurmstepd processes that belong to this dev cluster (by their SLURM_CONF)."""
        needle = f"SLURM_CONF={self.slurm_conf}".encode()
        out = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if not (entry / "cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    out.add(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        return out


def _secret_file(path: Path) -> str:
    """A database password in a root-only file, made (random) when missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()
def _ranges(ports: list[int]) -> str:
    """[17000, 17011, 17012, 17013] -> '17000, 17011-17013'."""
    out: list[str] = []
    for p in sorted(ports):
        if out and out[-1].split("-")[-1] == str(p - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ", ".join(out)


def _port_busy(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
