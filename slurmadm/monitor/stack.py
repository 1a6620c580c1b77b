"""A monitoring stack on the dev cluster (`slurmadm monitor dev-stack up|down`): one node exporter
per fake node, the head exporter, the webhook, and Debian's real Prometheus and Alertmanager,
every port derived from the dev cluster's port base (devsite.Ports), every process recorded by
pid and start time under <state>/run (stopped by `down`, never by name).

Intervals are short (1 s scrape and evaluation, 1 s group_wait) so a fault becomes an alert and
an isolated node in seconds; the demo and the integration tests use it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from ..devcluster.cluster import DevCluster
from ..devcluster.daemons import Daemon, wait_for
from ..devcluster.devsite import Ports
from ..errors import UnreachableError, UsageError
from ..files import write_atomic
from . import promconfig, rules

PROMETHEUS = "prometheus"
PORT_RETRY_S = 90.0  # how long a daemon whose port is in use is started again
ALERTMANAGER_NAMES = ("prometheus-alertmanager", "alertmanager")


def _binary(names: tuple[str, ...]) -> str:
    for n in names:
        path = shutil.which(n) or (f"/usr/bin/{n}" if Path(f"/usr/bin/{n}").exists() else None)
        if path:
            return path
    raise UsageError(f"{names[0]}: not installed (run scripts/install-system-deps.sh)")


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback URLs we built
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


class MonitorStack:
    def __init__(self, dc: DevCluster, gpu_source: str | None = None):
        """gpu_source: "slurmadm" or "dcgm" (default: the dev site's monitor.gpu_source). With
        "dcgm" a stand-in dcgm-exporter per node (devcluster/dcgmfake: a real capture) is scraped,
        and the stack's rules, exporters and webhook read a copy of the dev site that says so."""
        self.dc = dc
        rec = dc.record()
        if rec is None:
            raise UsageError(f"no dev cluster in {dc.state_dir} (run `slurmadm dev-cluster up` first)")
        self.ports = Ports.of_record(rec)
        self.nodes = list(rec["node_names"])
        self.dir = dc.p("monitor")
        if gpu_source not in (None, "slurmadm", "dcgm"):
            raise UsageError(f"--gpu-source: {gpu_source!r} is not slurmadm or dcgm")
        self.gpu_source = gpu_source or dc.site().monitor.gpu_source

    @property
    def scrape_s(self) -> int:
        """Prometheus's scrape interval: 1 s for a handful of nodes (a fault becomes an alert in
        seconds); a node exporter's scrape costs ~30 ms of CPU, so 128 of them every second would
        take both cores of the dev machine: one second per 8 nodes (128 nodes: 16 s)."""
        return max(1, -(-len(self.nodes) // 8))

    @property
    def site_path(self) -> Path:
        """The dev site, or (another GPU source than it says) a copy under monitor/ that differs
        in monitor.gpu_source only."""
        if self.gpu_source == self.dc.site().monitor.gpu_source:
            return Path(self.dc.site_path)
        return self.dir / f"site-{self.gpu_source}.toml"

    def site(self):
        from ..site import parse_site

        return parse_site(self.site_path.read_text(), source=str(self.site_path)) if self.site_path.exists() \
            else self.dc.site()

    def _write_site(self) -> None:
        if self.site_path == Path(self.dc.site_path):
            return
        import tomllib

        import tomli_w

        data = tomllib.loads(Path(self.dc.site_path).read_text())
        data.setdefault("monitor", {})["gpu_source"] = self.gpu_source
        write_atomic(self.site_path, f"# the dev site with monitor.gpu_source = {self.gpu_source!r} "
                                     "(slurmadm monitor dev-stack)\n" + tomli_w.dumps(data))

    # ---------------------------------------------------------------- files
    @property
    def token_file(self) -> Path:
        return self.dir / "webhook.token"

    def daemons(self) -> list[Daemon]:
        names = [f"exporter-{n}" for n in self.nodes] + ["exporter-head", "webhook", "prometheus", "alertmanager",
                                                         "ib-traffic", "dcgm-exporter"]
        return [self.dc.daemon(f"monitor-{n}") for n in names]

    def urls(self) -> dict[str, str]:
        return {"prometheus": f"http://127.0.0.1:{self.ports.monitor_prometheus}",
                "alertmanager": f"http://127.0.0.1:{self.ports.monitor_alertmanager}",
                "webhook": f"http://127.0.0.1:{self.ports.monitor_webhook}/alerts",
                "head_exporter": f"http://127.0.0.1:{self.ports.monitor_head_exporter}/metrics",
                **{f"exporter_{n}": f"http://127.0.0.1:{self.ports.monitor_node_exporter(i)}/metrics"
                   for i, n in enumerate(self.nodes)},
                **({f"dcgm_{n}": f"http://127.0.0.1:{self.ports.monitor_dcgm_exporter(i)}/metrics"
                    for i, n in enumerate(self.nodes)} if self.gpu_source == "dcgm" else {})}

    def prometheus_config(self, site) -> dict:
        cfg = promconfig.prometheus_config(
            site, rules_file=str(self.dir / "rules.yml"), alertmanager=f"127.0.0.1:{self.ports.monitor_alertmanager}",
            node_target=lambda i, _n: f"127.0.0.1:{self.ports.monitor_node_exporter(i)}",
            head_target=f"127.0.0.1:{self.ports.monitor_head_exporter}", interval=f"{self.scrape_s}s",
            dcgm_target=lambda i, _n: f"127.0.0.1:{self.ports.monitor_dcgm_exporter(i)}",
            release=self.release(site), slurm_target=f"127.0.0.1:{site.slurm.slurmctld_port}")
        cfg["global"]["scrape_timeout"] = f"{min(self.scrape_s, 5)}s"
        return cfg

    def release(self, site):
        """The dev cluster's Slurm (its site names it) when monitor.slurm_metrics is on."""
        from ..exporter.slurmseries import site_release

        return site_release(site, detect=False)

    def alertmanager_config(self) -> dict:
        return promconfig.alertmanager_config(self.site(), webhook_url=self.urls()["webhook"],
                                              token_file=str(self.token_file), group_wait="1s", group_interval="1s")

    def write_files(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_site()
        site = self.site()
        if not self.token_file.exists():
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
        write_atomic(self.dir / "rules.yml", rules.render(site, self.release(site)))
        write_atomic(self.dir / "prometheus.yml", yaml.safe_dump(self.prometheus_config(site), sort_keys=False))
        write_atomic(self.dir / "alertmanager.yml", yaml.safe_dump(self.alertmanager_config(), sort_keys=False))

    # ---------------------------------------------------------------- up / down
    def up(self, *, progress=lambda msg: None, timeout: float = 90.0) -> dict:
        try:
            return self._up(progress, timeout)
        except BaseException:
            self.down()  # nothing half-started is left behind
            raise

    def _up(self, progress, timeout: float) -> dict:
        self.write_files()
        env = {**self.dc.env()}
        me = [sys.executable, "-m", "slurmadm"]
        site = str(self.site_path)
        starts: list[tuple[str, list[str], dict[str, str]]] = [
            (f"monitor-exporter-{n}", [*me, "exporter", "--mode", "node", "--node", n, "--site", site,
                                       "--listen", f"127.0.0.1:{self.ports.monitor_node_exporter(i)}"],
             {**env, "SLURMD_NODENAME": n})
            for i, n in enumerate(self.nodes)
        ]
        starts += [
            ("monitor-exporter-head", [*me, "exporter", "--mode", "head", "--site", site], env),
            ("monitor-webhook", [*me, "monitor", "webhook", "--site", site], env),
            # the stand-in InfiniBand ports' data, packet and wait counters move (devcluster/ibsysfs)
            ("monitor-ib-traffic", [sys.executable, "-m", "slurmadm.devcluster.ibsysfs", str(self.dc.p("gpus")),
                                    *self.nodes], env),
            ("monitor-alertmanager", [_binary(ALERTMANAGER_NAMES), f"--config.file={self.dir / 'alertmanager.yml'}",
                                      f"--storage.path={self.dir / 'alertmanager-data'}",
                                      f"--web.listen-address=127.0.0.1:{self.ports.monitor_alertmanager}",
                                      "--cluster.listen-address=", "--log.level=warn"], env),
            ("monitor-prometheus", [_binary((PROMETHEUS,)), f"--config.file={self.dir / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={self.dir / 'prometheus-data'}",
                                    f"--web.listen-address=127.0.0.1:{self.ports.monitor_prometheus}",
                                    "--web.enable-lifecycle", "--log.level=warn"], env),
        ]
        if self.gpu_source == "dcgm":
            m = self.site().monitor
            starts.append(("monitor-dcgm-exporter", [
                sys.executable, "-m", "slurmadm.devcluster.dcgmfake", m.dcgm_job_map_dir,
                *[f"127.0.0.1:{self.ports.monitor_dcgm_exporter(i)}={n}" for i, n in enumerate(self.nodes)]], env))
        progress(f"starting {len(self.nodes)} node exporters, the head exporter, the webhook, "
                 "Alertmanager and Prometheus")
        for name, argv, e in starts:
            d = self.dc.daemon(name)
            if not d.alive():
                d.start(argv, env=e)
        retries: dict[str, float] = {}  # name: when its port was first found in use
        last_try: dict[str, float] = {}
        urls = self.urls()
        checks = [urls["prometheus"] + "/-/ready", urls["alertmanager"] + "/-/ready", urls["head_exporter"],
                  *[urls[f"exporter_{n}"] for n in self.nodes],
                  *[urls[f"dcgm_{n}"] for n in self.nodes if f"dcgm_{n}" in urls]]

        def ready() -> bool:
            for name, argv, e in starts:
                d = self.dc.daemon(name)
                if d.alive():
                    continue
                # Our fixed ports lie in Linux's ephemeral range (32768-60999): a busy machine's
                # outgoing connection may hold one for a moment. Try again, a few times.
                # A port a closed outgoing connection held stays in TIME_WAIT for 60 s: retry for
                # PORT_RETRY_S, at most once a second.
                now = time.monotonic()
                first = retries.setdefault(name, now)
                if "in use" in d.tail(5) and now - first < PORT_RETRY_S:
                    if now - last_try.get(name, 0.0) >= 1.0:
                        last_try[name] = now
                        d.start(argv, env=e)
                    continue
                raise UnreachableError(f"{d.name} died: {d.tail()}")
            # every endpoint at once (128 node exporters answer in ~1 s, one by one in ~10 s)
            with ThreadPoolExecutor(max_workers=16) as pool:
                return all(code == 200 for code, _ in pool.map(lambda u: http_get(u, timeout=3), checks))

        if not wait_for(ready, timeout, interval=0.3):
            raise UnreachableError(f"monitoring stack not ready after {timeout:g} s (logs: {self.dc.p('log')})")
        # Prometheus reloads nothing by itself: a re-run with changed rules takes effect now
        http_post(urls["prometheus"] + "/-/reload")
        # Up means watching: every exporter scraped once. A counter's first sample is its baseline,
        # so a fault injected before that scrape would never show as an increase (no alert).
        site = self.site()
        jobs = {site.monitor.node_job: len(self.nodes), site.monitor.head_job: 1}
        if self.gpu_source == "dcgm":
            jobs[site.monitor.dcgm_job] = len(self.nodes)

        def scraped() -> bool:
            return all(len(prom_query(urls["prometheus"], f'up{{job="{job}"}} == 1')) == want
                       for job, want in jobs.items())

        if not wait_for(scraped, timeout, interval=0.3):
            raise UnreachableError(f"Prometheus has not scraped every exporter within {timeout:g} s "
                                   f"(targets: {urls['prometheus']}/targets)")
        progress(f"Prometheus {urls['prometheus']}  Alertmanager {urls['alertmanager']}  "
                 f"({len(self.nodes) + 1} exporters scraped; GPU source {self.gpu_source})")
        return self.status()

    def down(self) -> list[str]:
        return [d.name for d in reversed(self.daemons()) if d.stop()]

    def status(self) -> dict:
        return {"gpu_source": self.gpu_source, "urls": self.urls(), "daemons": [{"name": d.name, "pid": d.pid(), "alive": d.alive()}
                                                 for d in self.daemons()]}


def http_post(url: str, data: bytes = b"", headers: dict[str, str] | None = None,
              timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def prom_query(base: str, expr: str, timeout: float = 5.0) -> list[dict]:
    """An instant query; UnreachableError naming the query when Prometheus refuses it."""
    import urllib.parse

    code, body = http_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=timeout)
    if code == 0:
        raise UnreachableError(f"Prometheus {base}: no answer")
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        raise UnreachableError(f"Prometheus {base}: answered {code} with no JSON") from None
    if data.get("status") != "success":
        raise UnreachableError(f"Prometheus {base}: query {expr!r}: {data.get('error', code)}")
    return data["data"]["result"]
