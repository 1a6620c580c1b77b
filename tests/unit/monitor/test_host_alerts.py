"""The host alerts against Debian's prometheus-node-exporter (not ours): the names and labels the
rules read are the ones it exports on this machine, and HostRequiredMountMissing, fed this
machine's real node_filesystem_* series (as Prometheus would store them, with the scrape job's
job/node labels), fires for a required mount that is missing and not for one that is there."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tomllib
import urllib.request
from pathlib import Path

import pytest
import tomli_w
import yaml
from prometheus_client.parser import text_string_to_metric_families

from slurmadm.devcluster.daemons import wait_for
from slurmadm.monitor import rules
from slurmadm.site import parse_site

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
NODE_EXPORTER = "prometheus-node-exporter"


@pytest.fixture(scope="module")
def real_output():
    exe = shutil.which(NODE_EXPORTER) or shutil.which("node_exporter")
    assert exe, f"{NODE_EXPORTER} is missing: run scripts/install-system-deps.sh"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.filesystem", "--collector.vmstat", "--collector.edac"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    got: dict[str, str] = {}

    def scraped() -> bool:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                got["text"] = r.read().decode()
            return "node_filesystem_size_bytes" in got["text"]
        except OSError:
            return False
    try:
        assert wait_for(scraped, 30, interval=0.2)
    finally:
        proc.terminate()
        proc.wait(10)
    return got["text"]


def test_the_names_the_host_rules_read_are_node_exporters(real_output):
    names = {s.name for f in text_string_to_metric_families(real_output) for s in f.samples}
    for name in ("node_filesystem_avail_bytes", "node_filesystem_size_bytes", "node_vmstat_oom_kill"):
        assert name in names, name
    if Path("/sys/devices/system/edac/mc/mc0").exists():  # a VM often has no memory controller in EDAC
        assert "node_edac_uncorrectable_errors_total" in names
    text = rules.render(parse_site((REPO / "site.example.toml").read_text(), source="x"))
    for name in ("node_filesystem_avail_bytes", "node_filesystem_size_bytes", "node_vmstat_oom_kill",
                 "node_edac_uncorrectable_errors_total"):
        assert name in text, name


def test_required_mount_missing_fires_on_real_node_exporter_series(real_output, tmp_path):
    sizes = [s for f in text_string_to_metric_families(real_output) for s in f.samples
             if s.name == "node_filesystem_size_bytes"]
    present = sizes[0].labels["mountpoint"]
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["health"]["mounts"] = [{"path": present}, {"path": "/i23-never-mounted"}]
    site = parse_site(tomli_w.dumps(data), source="t.toml")
    rule = next(r for r in rules.build(site) if r.name == "HostRequiredMountMissing")
    (tmp_path / "rules.yml").write_text(rules.render(site))
    series = []

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')

    for s in sizes:
        labels = {**s.labels, "job": site.monitor.host_job, "node": "b200-001", "instance": "b200-001:9100"}
        body = ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))
        series.append({"series": f"node_filesystem_size_bytes{{{body}}}", "values": f"{s.value:g}x6"})
    exp = {"node": "b200-001", "mountpoint": "/i23-never-mounted", "severity": "critical", "source": "slurmadm",
           "cluster": site.cluster.name}
    ann = rule.to_dict({}, runbook_base=site.monitor.runbook_base_url)["annotations"]
    ann["summary"] = "b200-001: /i23-never-mounted is not mounted"
    test = {"rule_files": [str(tmp_path / "rules.yml")], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series,
                       "alert_rule_test": [{"eval_time": "4m", "alertname": "HostRequiredMountMissing",
                                            "exp_alerts": [{"exp_labels": exp, "exp_annotations": ann}]}]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    p = subprocess.run(["promtool", "test", "rules", str(tmp_path / "t.yml")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
