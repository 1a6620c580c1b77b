"""The exporters' output passes `promtool check metrics` (Debian's promtool: Prometheus' own
naming lint, base units, `_total` counters), carries `slurmadm_build_info` and `process_*`, and
the scrape configuration does not make Prometheus rename the exporter's `node` label to
`exported_node`. Both exporters are served over HTTP by the real server (`make_server`): the
node exporter as a process over the stand-in NVML (test_exporter's fixture), the head exporter
over real Slurm output (tests/fixtures/slurm)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from slurmadm.exporter.head import HeadCollector, Snapshot, parse_squeue
from slurmadm.exporter.server import make_server
from slurmadm.monitor import promconfig
from slurmadm.site import parse_site
from slurmadm.slurm.parse import nodes_from_json

from .test_exporter import node_exporter  # noqa: F401 - the fixture

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures" / "slurm"


def _site():
    return parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")


def promtool_check_metrics(text: str) -> str:
    assert shutil.which("promtool"), "promtool is missing: run scripts/install-system-deps.sh"
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return (p.stdout + p.stderr).strip() if p.returncode or p.stdout.strip() or p.stderr.strip() else ""


@pytest.fixture(scope="module")
def head_text(tmp_path_factory):
    nodes = nodes_from_json((FIX / "24.11" / "scontrol-show-node.json").read_text(), "fixture")
    jobs = parse_squeue((FIX / "22.05" / "squeue-O-monitor.txt").read_text())

    class Fixed:
        def read(self):
            return Snapshot(nodes, jobs, {"ml-llm": 6000.0})

    tmp = tmp_path_factory.mktemp("head")
    collector = HeadCollector(site=_site(), source=Fixed(), cache_s=0, deadline_s=5, store_path=str(tmp / "s.db"))
    server = make_server(collector, "127.0.0.1:0")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=30) as r:
            yield r.read().decode()
    finally:
        server.shutdown()
        server.server_close()


def test_promtool_check_metrics_is_clean_on_the_head_exporter(head_text):
    assert "slurmadm_project_gpu_used_seconds" in head_text
    assert promtool_check_metrics(head_text) == ""


def test_promtool_check_metrics_is_clean_on_the_node_exporter(node_exporter):  # noqa: F811
    text = node_exporter()
    assert "slurmadm_gpu_utilization_percent" in text
    assert promtool_check_metrics(text) == ""


def test_gpu_time_is_in_seconds(head_text):
    from prometheus_client.parser import text_string_to_metric_families

    got = {(s.name, s.labels.get("project")): s.value for f in text_string_to_metric_families(head_text)
           for s in f.samples}
    assert got[("slurmadm_project_gpu_used_seconds", "ml-llm")] == 6000.0 * 60  # sshare's GPU-minutes
    budget = {p.name: p.gpu_hours for p in _site().projects if p.gpu_hours is not None}
    for proj, hours in budget.items():
        assert got[("slurmadm_project_gpu_budget_seconds", proj)] == hours * 3600
    assert not any("hours" in name for name, _ in got)


@pytest.mark.parametrize("which", ["head", "node"])
def test_both_exporters_carry_build_info_and_process_metrics(which, head_text, node_exporter):  # noqa: F811
    from slurmadm import __version__

    text = head_text if which == "head" else node_exporter()
    assert f'slurmadm_build_info{{mode="{which}",pythonversion=' in text and f'version="{__version__}"' in text
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
                 "process_open_fds", "python_info"):
        assert f"\n{name}" in text, name


def test_the_node_scrape_job_keeps_the_exporters_node_label():
    """The target label `node` (for `up`) and the exporter's own: honor_labels keeps one `node`
    (Prometheus would otherwise store the exporter's as `exported_node` on every series)."""
    site = _site()
    cfg = promconfig.prometheus_config(site, rules_file="r.yml", alertmanager="am:9093")
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == site.monitor.node_job)
    assert job["honor_labels"] is True
    assert all(sc["labels"]["node"] for sc in job["static_configs"])


def test_prometheus_config_with_dcgm_exporter_and_node_exporter_passes_promtool(tmp_path):
    import tomllib

    import tomli_w
    import yaml

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"].update(gpu_source="dcgm", host_port=9100)
    site = parse_site(tomli_w.dumps(data), source="t.toml")
    cfg = promconfig.prometheus_config(site, rules_file=str(tmp_path / "r.yml"), alertmanager="am:9093")
    (tmp_path / "r.yml").write_text("groups: []\n")
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert jobs[site.monitor.dcgm_job]["static_configs"][0] == {"targets": ["b200-001:9400"],
                                                                "labels": {"cluster": "b200", "node": "b200-001"}}
    assert jobs[site.monitor.host_job]["static_configs"][0]["targets"] == ["b200-001:9100"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
