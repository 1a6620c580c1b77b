"""Slurm's own instruments (issue 38): metrics, HealthCheckTimeout, probes. The Slurm series are
checked against real pages of slurmctld 26.05.5 (tests/fixtures/slurm/26.05/metrics-*.txt,
COMMANDS.txt); 22.05 and 24.11 keep every output as it was."""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import threading
import tomllib
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from slurmadm.config import golden, render
from slurmadm.config.release import HEALTH_CHECK_TIMEOUT_MARGIN_S, health_check_timeout
from slurmadm.errors import SiteError
from slurmadm.exporter import slurmseries
from slurmadm.exporter.head import HeadCollector, Snapshot
from slurmadm.monitor import dashboard, promconfig, rules
from slurmadm.site import parse_site
from slurmadm.slurm import probes

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
PAGES = REPO / "tests" / "fixtures" / "slurm" / "26.05"
OLD = [(22, 5), (24, 11)]
NEW = (26, 5)


def _site(**changes):
    import tomli_w

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    for path, value in changes.items():
        section, key = path.split("__")
        data.setdefault(section, {})[key] = value
    return parse_site(tomli_w.dumps(data), source="t.toml")


def slurm_series() -> set[str]:
    """Every series name slurmctld 26.05.5 served on its five endpoints."""
    names = set()
    for page in PAGES.glob("metrics-*.txt"):
        if page.name == "metrics-index.txt":
            continue
        for fam in text_string_to_metric_families(page.read_text()):
            names.update(s.name for s in fam.samples)
    return names


def slurm_names_in(expr: str) -> set[str]:
    return set(re.findall(r"\b(slurm_[a-z_]+)", expr))


# ------------------------------------------------------------------ the captured pages


def test_the_captured_pages_are_slurms_own_and_parse():
    index = (PAGES / "metrics-index.txt").read_text()
    for endpoint in slurmseries.ENDPOINTS:
        assert f"'{endpoint}'" in index, endpoint
    names = slurm_series()
    assert {"slurm_partition_jobs_gpus_alloc", "slurm_partition_gpus", "slurm_node_gpus", "slurm_node_gpus_alloc",
            "slurm_partition_nodes_drain", "slurm_jobs_running", "slurm_partition_jobs_running"} <= names
    values = {s.name + str(sorted(s.labels.items())): s.value
              for fam in text_string_to_metric_families((PAGES / "metrics-partitions.txt").read_text())
              for s in fam.samples}
    # the capture: b200-004 drained, one 2-GPU job running, 4 nodes of 8 GPUs in partition gpu
    assert values["slurm_partition_nodes_drain[('partition', 'gpu')]"] == 1
    assert values["slurm_partition_jobs_gpus_alloc[('partition', 'gpu')]"] == 2
    assert values["slurm_partition_gpus[('partition', 'gpu')]"] == 32


def test_every_replacement_names_series_slurm_serves():
    names = slurm_series()
    for r in slurmseries.REPLACED:
        first = re.match(r"(slurm_[a-z_]+)", r.slurm).group(1)
        if "{idle,alloc" in r.slurm:  # the family of per-state counts
            assert {f"{first}idle", f"{first}alloc", f"{first}drain"} <= names
        else:
            assert slurm_names_in(r.slurm) <= names, r
        assert r.endpoint in slurmseries.ENDPOINTS and r.since >= (25, 11)


@pytest.mark.parametrize("release", [(25, 11), NEW])
def test_rules_and_panels_read_only_series_slurm_serves(release):
    site = _site()
    exprs = [r.expr for r in rules.build(site, release)] + [e for _t, e in dashboard.panel_queries(site, release)]
    used = set().union(*(slurm_names_in(e) for e in exprs))
    assert used and used <= slurm_series()


# ------------------------------------------------------------------ slurm.conf


@pytest.mark.parametrize("release", OLD)
def test_nothing_changes_before_25_11(release):
    text = render(_site(), release)["slurm.conf"]
    assert "Metrics" not in text and "HealthCheckTimeout" not in text
    def body(files):  # without the site digest line (the sites differ in that key)
        return {k: re.sub(r"# Site sha256 \w+\n", "", v) for k, v in files.items()}

    assert body(render(_site(monitor__slurm_metrics=False), release)) == body(render(_site(), release))


def test_25_11_turns_metrics_on_without_the_26_05_keys():
    text = render(_site(), (25, 11))["slurm.conf"]
    assert "\nMetricsType=metrics/openmetrics\n" in text
    assert "MetricsAuthUsers" not in text and "HealthCheckTimeout" not in text


def test_26_05_metrics_and_health_check_timeout_from_the_site():
    site = _site(health__periodic_timeout_s=40.5)
    text = render(site, NEW)["slurm.conf"]
    assert "\nMetricsType=metrics/openmetrics\n" in text
    assert f"\nHealthCheckTimeout={41 + HEALTH_CHECK_TIMEOUT_MARGIN_S}\n" in text
    assert health_check_timeout(50) == 50 + HEALTH_CHECK_TIMEOUT_MARGIN_S
    assert "MetricsType" not in render(_site(monitor__slurm_metrics=False), NEW)["slurm.conf"]
    auth = _site(monitor__slurm_metrics_users=["prometheus"], monitor__slurm_metrics_token_file="/etc/slurmadm/jwt",
                 monitor__slurm_metrics_jwt_key_file="/etc/slurm/jwt_hs256.key")
    text = render(auth, NEW)["slurm.conf"]
    assert "\nMetricsAuthUsers=prometheus\n" in text and "MetricsParameters" not in text


def test_26_05_authenticated_metrics_write_what_slurmctld_needs_and_no_secret():
    """The four keys 26.05.5 needed (tests/fixtures/slurm/26.05/jwt-metrics-auth.txt): without
    SlurmctldHttpAuthParameters every token got 401. Only paths, never a key or a token."""
    auth = _site(monitor__slurm_metrics_users=["prometheus", "grafana"],
                 monitor__slurm_metrics_token_file="/etc/prometheus/slurm.jwt", monitor__slurm_metrics_jwt_key_file="/etc/slurm/jwt_hs256.key")
    files = render(auth, NEW)
    text = files["slurm.conf"]
    for line in ("MetricsAuthUsers=prometheus,grafana", "AuthAltTypes=auth/jwt",
                 "AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key,disable_token_creation",
                 "SlurmctldHttpAuthParameters=jwt_key=/etc/slurm/jwt_hs256.key"):
        assert f"\n{line}\n" in text, line
    assert "slurm.jwt" not in "".join(files.values())  # Prometheus's token file is not Slurm's business
    for rel in ((25, 11), (24, 11)):  # no authentication keys before 26.05
        assert "AuthAlt" not in render(_site(slurm__release="24.11"), rel)["slurm.conf"]
    fixture = (Path(__file__).resolve().parents[2] / "fixtures/slurm/26.05/jwt-metrics-auth.txt").read_text()
    assert "HTTP/1.1 200 OK" in fixture and "HTTP/1.1 401 UNAUTHORIZED" in fixture
    assert "SlurmctldHttpAuthParameters=jwt_key=" in fixture


def test_an_incomplete_authenticated_metrics_setting_is_one_line():
    for given in ({"monitor__slurm_metrics_users": ["prom"]},
                  {"monitor__slurm_metrics_users": ["prom"], "monitor__slurm_metrics_token_file": "/etc/jwt"},
                  {"monitor__slurm_metrics_jwt_key_file": "/etc/slurm/jwt_hs256.key"}):
        text = _problems(given)
        lines = [ln for ln in text.splitlines() if "slurm_metrics" in ln]
        assert len(lines) == 1 and "missing:" in lines[0], text
    text = _problems({"monitor__slurm_metrics_users": ["prom"], "monitor__slurm_metrics_token_file": "/etc/k",
                      "monitor__slurm_metrics_jwt_key_file": "/etc/k"})
    assert "must be different files" in text
    both = {"slurm__release": "26.05", "monitor__slurm_metrics_users": ["prom"],
            "monitor__slurm_metrics_token_file": "/etc/jwt", "monitor__slurm_metrics_jwt_key_file": "/etc/k"}
    text = _problems({**both, "slurm__extra": {"AuthAltTypes": "auth/jwt"}})
    assert "slurm.extra.AuthAltTypes: slurmadm writes" in text
    text = _problems({**both, "monitor__slurm_metrics_ignore_private_data": True})
    assert "ignores MetricsParameters=ignore_private_data while MetricsAuthUsers is set" in text


def test_the_26_05_golden_files_pin_the_rendering():
    files = golden.reference(NEW)
    where = golden.golden_dir(NEW)
    assert sorted(files) == sorted(p.name for p in where.glob("*.conf"))
    for name, text in files.items():
        assert text == (where / name).read_text(), f"{name}: python -m slurmadm.config.golden --update if intended"
    assert "MetricsType=metrics/openmetrics" in files["slurm.conf"]


def _problems(site_text_changes: dict) -> str:
    with pytest.raises(SiteError) as exc:
        _site(**site_text_changes)
    return str(exc.value)


@pytest.mark.parametrize("release", ["22.05", "24.11", "25.11"])
def test_a_periodic_timeout_the_fixed_60_s_kill_would_cut_is_one_site_error(release):
    text = _problems({"slurm__release": release, "health__periodic_timeout_s": 58.0})
    assert "health.periodic_timeout_s" in text and "60 s" in text and "HealthCheckTimeout" in text
    assert len([ln for ln in text.splitlines() if "periodic_timeout_s" in ln]) == 1
    _site(slurm__release=release, health__periodic_timeout_s=55.0)  # within 60 s with the margin


def test_26_05_takes_a_longer_periodic_timeout_but_not_past_the_interval():
    site = _site(slurm__release="26.05", health__periodic_timeout_s=120.0)
    assert "\nHealthCheckTimeout=125\n" in render(site, NEW)["slurm.conf"]
    text = _problems({"slurm__release": "26.05", "health__periodic_timeout_s": 296.0})
    assert "slurm.health_check_interval" in text


def test_private_data_and_the_metrics():
    text = _problems({"slurm__release": "25.11", "slurm__extra": {"PrivateData": "jobs"}})
    assert "turns its metrics off" in text and "monitor.slurm_metrics = false" in text
    _site(slurm__release="25.11", slurm__extra={"PrivateData": "jobs"}, monitor__slurm_metrics=False)
    text = _problems({"slurm__release": "26.05", "slurm__extra": {"PrivateData": "jobs"}})
    assert "only to SlurmUser and root" in text
    site = _site(slurm__release="26.05", slurm__extra={"PrivateData": "jobs"},
                 monitor__slurm_metrics_ignore_private_data=True)
    assert "\nMetricsParameters=ignore_private_data\n" in render(site, NEW)["slurm.conf"]
    _site(slurm__release="24.11", monitor__slurm_metrics_users=["prom"], monitor__slurm_metrics_token_file="/etc/jwt",
          monitor__slurm_metrics_jwt_key_file="/etc/slurm/jwt_hs256.key")  # metrics there are none: nothing to authenticate
    text = _problems({"slurm__release": "25.11", "monitor__slurm_metrics_users": ["prom"],
                      "monitor__slurm_metrics_token_file": "/etc/jwt",
                      "monitor__slurm_metrics_jwt_key_file": "/etc/slurm/jwt_hs256.key"})
    assert "MetricsAuthUsers exists from Slurm 26.05" in text
    text = _problems({"monitor__slurm_metrics_users": ["prom"]})
    assert "together" in text and "missing: slurm_metrics_token_file" in text


# ------------------------------------------------------------------ the head exporter


class _Fixed:
    def __init__(self, snap):
        self.snap = snap

    def read(self):
        return self.snap


def _collect(release, tmp_path) -> dict[str, list]:
    from slurmadm.slurm.model import NodeInfo

    nodes = [NodeInfo(name=f"b200-00{i}", state="IDLE", flags=frozenset({"DRAIN"}) if i == 4 else frozenset(), reason="admin: x" if i == 4
                      else "", gres="gpu:b200:8", partitions=("gpu",)) for i in range(1, 5)]
    c = HeadCollector(site=_site(), source=_Fixed(Snapshot(nodes, [], {})), cache_s=0, deadline_s=5,
                      store_path=str(tmp_path / "s.db"), replaced=slurmseries.replaced(release))
    out: dict[str, list] = {}
    for fam in c.collect():
        out[fam.name] = [(s.labels, s.value) for s in fam.samples]
    return out


def test_the_head_exporter_leaves_out_what_slurm_exports(tmp_path):
    old = _collect(None, tmp_path)
    new = _collect(NEW, tmp_path)
    for name in ("slurmadm_nodes", "slurmadm_jobs_running"):
        assert name in old and name not in new
    assert {lab["status"] for lab, _ in old["slurmadm_partition_gpus"]} == {"allocated", "idle", "drained", "down"}
    assert {lab["status"] for lab, _ in new["slurmadm_partition_gpus"]} == {"drained", "down"}
    kept = ("slurmadm_node_state", "slurmadm_nodes_drained", "slurmadm_node_partition_info",
            "slurmadm_jobs_pending", "slurmadm_project_gpus_in_use", "slurmadm_project_gpu_quota")
    for name in kept:
        assert name in new, name
    drained = {lab["node"]: (lab["owner"], lab["reason"]) for lab, _ in new["slurmadm_node_state"]}
    assert drained["b200-004"] == ("admin", "admin: x")
    assert _collect((25, 11), tmp_path)["slurmadm_partition_gpus"] == old["slurmadm_partition_gpus"]
    assert slurmseries.replaced(NEW, enabled=False) == () and slurmseries.replaced((24, 11)) == ()


def test_no_count_is_read_twice_where_slurm_has_it():
    """On 26.05 neither the rules nor the dashboard read a series the head exporter left out."""
    site = _site()
    gone = slurmseries.replaced(NEW)
    exprs = [r.expr for r in rules.build(site, NEW)] + [e for _t, e in dashboard.panel_queries(site, NEW)]
    for r in gone:
        for e in exprs:
            if r.status:
                assert not re.search(rf'{r.series}\{{[^}}]*status="{r.status}"', e), (r.key, e)
                assert not re.search(rf"{r.series}(\{{cluster=~\"\$cluster\"\}})?\)", e), (r.key, e)
            else:
                assert not re.search(rf"\b{r.series}\b(?!_)", e), (r.key, e)


# ------------------------------------------------------------------ Prometheus, rules, dashboard


@pytest.mark.parametrize("release", [None, *OLD])
def test_prometheus_config_is_unchanged_before_25_11(release):
    site = _site()
    cfg = promconfig.prometheus_config(site, rules_file="/r.yml", alertmanager="am:9093", release=release)
    assert cfg == promconfig.prometheus_config(site, rules_file="/r.yml", alertmanager="am:9093")
    assert "slurm" not in {j["job_name"] for j in cfg["scrape_configs"]}
    assert rules.render(site, release) == rules.render(site)
    assert dashboard.to_dict(site, release) == dashboard.to_dict(site)


def test_prometheus_scrapes_every_slurmctld_endpoint():
    site = _site()
    cfg = promconfig.prometheus_config(site, rules_file="/r.yml", alertmanager="am:9093", release=NEW)
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == site.monitor.slurm_job)
    paths = [s["labels"]["__metrics_path__"] for s in job["static_configs"]]
    assert paths == list(slurmseries.ENDPOINTS)
    assert {t for s in job["static_configs"] for t in s["targets"]} == {
        f"{site.cluster.controllers[0]}:{site.slurm.slurmctld_port}"}
    assert "authorization" not in job
    auth = _site(monitor__slurm_metrics_users=["prom"], monitor__slurm_metrics_token_file="/etc/slurmadm/jwt",
                 monitor__slurm_metrics_jwt_key_file="/etc/slurm/jwt_hs256.key")
    job = promconfig.slurm_scrape_config(auth, NEW)[0]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/slurmadm/jwt"}
    assert promconfig.slurm_scrape_config(_site(monitor__slurm_metrics=False), NEW) == []


def test_promtool_checks_the_26_05_config_and_rules(tmp_path):
    assert shutil.which("promtool"), "promtool is missing: run scripts/install-system-deps.sh"
    site = _site()
    (tmp_path / "rules.yml").write_text(rules.render(site, NEW))
    cfg = promconfig.prometheus_config(site, rules_file=str(tmp_path / "rules.yml"), alertmanager="127.0.0.1:9093",
                                       release=NEW)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    for argv in (["promtool", "check", "rules", str(tmp_path / "rules.yml")],
                 ["promtool", "check", "config", str(tmp_path / "prometheus.yml")]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    for page in PAGES.glob("metrics-*.txt"):
        if page.name != "metrics-index.txt":
            p = subprocess.run(["promtool", "check", "metrics"], input=page.read_text(), capture_output=True,
                               text=True, timeout=60)
            assert "error" not in (p.stdout + p.stderr).lower() or p.returncode == 0, page.name


def _promtool_test(tmp_path, name: str, series: dict, at: str, labels: dict, quiet: str) -> None:
    site = _site()
    (tmp_path / "rules.yml").write_text(rules.render(site, NEW))
    rule = next(r for r in rules.build(site, NEW) if r.name == name)
    annotations = rule.to_dict({}, runbook_base=site.monitor.runbook_base_url)["annotations"]
    test = {"rule_files": [str(tmp_path / "rules.yml")], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [
            {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": {
                **labels, "source": "slurmadm", "cluster": site.cluster.name},
                "exp_annotations": {k: v.replace("{{ $labels.endpoint }}", labels.get("endpoint", ""))
                                    .replace("{{ $labels.partition }}", labels.get("partition", ""))
                                    for k, v in annotations.items()}}]},
            {"eval_time": quiet, "alertname": name, "exp_alerts": []}]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    p = subprocess.run(["promtool", "test", "rules", str(tmp_path / "t.yml")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_partition_drained_gpus_fires_on_slurms_gpu_count(tmp_path):
    """One drained node of four: 8 of Slurm's 32 GPUs (slurm_partition_gpus) out of service."""
    _promtool_test(tmp_path, "PartitionDrainedGpusHigh", {
        'slurm_partition_gpus{partition="gpu",job="slurm",endpoint="partitions"}': "32x6",
        'slurmadm_partition_gpus{partition="gpu",status="drained"}': "0 8 8 8 8 8",
        'slurmadm_partition_gpus{partition="gpu",status="down"}': "0x6",
    }, "4m", {"partition": "gpu", "severity": "critical"}, "2m")


def test_slurm_metrics_down_fires_when_slurmctld_does_not_answer(tmp_path):
    _promtool_test(tmp_path, "SlurmMetricsDown", {
        'up{job="slurm",endpoint="nodes",instance="head:6817"}': "0x10",
        'up{job="slurm",endpoint="jobs",instance="head:6817"}': "1x10",
    }, "6m", {"job": "slurm", "endpoint": "nodes", "instance": "head:6817", "severity": "warning"}, "4m")


def test_every_panel_and_slurm_reading_alert_names_its_source():
    site = _site()
    for rel in (None, NEW):
        for p in dashboard.to_dict(site, rel)["panels"]:
            if p.get("type") != "row":
                assert "Source: " in p.get("description", ""), p.get("title")
    doc = yaml.safe_load(rules.render(site, NEW))
    by = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    assert by["PartitionDrainedGpusHigh"]["annotations"]["series"].startswith("Slurm (slurmctld /metrics: "
                                                                              "slurm_partition_gpus)")
    assert "slurmadm (slurmadm_partition_gpus)" in by["PartitionDrainedGpusHigh"]["annotations"]["series"]
    assert slurmseries.sources('up{job="slurm"} == 0') == "Prometheus (up)"
    assert slurmseries.sources("DCGM_FI_DEV_GPU_TEMP + node_load1") == "dcgm-exporter; node_exporter"


# ------------------------------------------------------------------ probes


def test_the_controller_comes_from_scontrol_show_config():
    assert probes.controller({"SlurmctldHost[0]": "vm", "SlurmctldPort": "26000", "SlurmctldAddr": "(null)"}) == \
        ("vm", 26000)
    assert probes.controller({"SlurmctldHost[0]": "head1(10.0.0.1)", "SlurmctldPort": "6817-6818"}) == \
        ("10.0.0.1", 6817)
    assert probes.controller({"SlurmctldHost": "h", "SlurmctldAddr": "ctl"}) == ("ctl", 6817)
    assert probes.controller({}) is None


def test_readyz_probe_reads_204_and_says_why_not():
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(204 if self.path == "/readyz" else 503)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = srv.server_address[1]
        got = probes.get("127.0.0.1", port, "/readyz", timeout=5)
        assert got.ok and got.detail.startswith("204")
        bad = probes.get("127.0.0.1", port, "/livez", timeout=5)
        assert not bad.ok and bad.detail.startswith("503")
    finally:
        srv.shutdown()
    gone = probes.get("127.0.0.1", port, "/readyz", timeout=2)
    assert not gone.ok and gone.detail.startswith("no answer")
