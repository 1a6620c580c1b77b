"""CLI surfaces of monitoring and the pure parts behind them: exporter install (plan, write,
idempotent, audited), usage errors as one line, dashboard queries parse, the idle-GPU policy
(report / mail / cancel after warning, exemptions), and top's frame."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner
from rich.console import Console

from slurmadm.cli import cli
from slurmadm.exporter.head import Job, Snapshot
from slurmadm.jobs import Findings, IdleJob, find, plan
from slurmadm.monitor import dashboard
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store
from slurmadm.top import Frame, build_frame

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def site_file(tmp_path):
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp_path / "s.db")}
    p = tmp_path / "site.toml"
    p.write_text(tomli_w.dumps(data))
    return p


def site_with(**monitor):
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"].update(monitor)
    return parse_site(tomli_w.dumps(data), source="t.toml")


def test_exporter_install_plans_writes_once_and_audits(site_file, tmp_path):
    r = CliRunner()
    dest = tmp_path / "systemd"
    out = r.invoke(cli, ["exporter", "install", "--mode", "node", "--site", str(site_file), "--dest", str(dest),
                         "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "new" in out.output and "ExecStart=" in out.output and not dest.exists()
    out = r.invoke(cli, ["exporter", "install", "--mode", "node", "--site", str(site_file), "--dest", str(dest)])
    assert out.exit_code == 0, out.output
    unit = (dest / "slurmadm-exporter-node.service").read_text()
    assert "exporter --mode node --site " + str(site_file) in unit and "Restart=always" in unit
    out = r.invoke(cli, ["exporter", "install", "--mode", "node", "--site", str(site_file), "--dest", str(dest)])
    assert "unchanged" in out.output
    with Store(tmp_path / "s.db") as store:
        assert [e.action for e in store.events()] == ["exporter.install"]  # the second run changed nothing
    if shutil.which("systemd-analyze"):
        p = subprocess.run(["systemd-analyze", "verify", str(dest / "slurmadm-exporter-node.service")],
                           capture_output=True, text=True)
        assert "Unknown key" not in p.stderr and "Invalid" not in p.stderr, p.stderr


@pytest.mark.parametrize("args, message", [
    (["exporter"], "--mode node|head is required"),
    (["exporter", "--mode", "node", "--node", "nope"], "'nope' is not one of the site's nodes"),
    (["exporter", "--mode", "head", "--listen", "localhost"], "is not ADDR:PORT"),
])
def test_exporter_usage_errors_are_one_line(site_file, args, message):
    out = CliRunner().invoke(cli, [*args, "--site", str(site_file)])
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_monitor_rules_and_dashboard_cli(site_file, tmp_path):
    r = CliRunner()
    out = r.invoke(cli, ["monitor", "rules", "--site", str(site_file)])
    assert out.exit_code == 0 and "alert: GpuXidFatal" in out.output
    out = r.invoke(cli, ["monitor", "dashboard", "--site", str(site_file), "--out", str(tmp_path / "d.json")])
    assert out.exit_code == 0
    dash = json.loads((tmp_path / "d.json").read_text())
    rows = dashboard._panels(site_with())
    assert len(dash["panels"]) == len(rows) + sum(len(panels) for _r, panels in rows)
    assert all(t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"])


def test_every_dashboard_query_parses_in_promtool(tmp_path):
    """The panels' PromQL as recording rules: promtool parses every expression (the integration
    test runs them against a live Prometheus)."""
    import yaml

    site = site_with()
    rules = [{"record": f"slurmadm:panel_{i}", "expr": expr} for i, (_t, expr) in enumerate(dashboard.panel_queries(site))]
    f = tmp_path / "panels.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    p = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


class Metrics:
    def __init__(self, idle: dict[tuple[str, str], float], util: dict[str, float], unalloc=()):
        self.idle, self.util, self.unalloc = idle, util, unalloc

    def query(self, expr):
        if expr.startswith("min by"):
            return [{"metric": {"jobid": j, "node": n, "user": "alice", "account": "ml-llm"}, "value": [0, str(s)]}
                    for (j, n), s in self.idle.items()]
        if expr.startswith("count by"):
            return [{"metric": {"jobid": j, "node": n}, "value": [0, "8"]} for (j, n) in self.idle]
        if expr.startswith("avg by"):
            return [{"metric": {"jobid": j}, "value": [0, str(u)]} for j, u in self.util.items()]
        return [{"metric": {"node": n, "gpu": g}, "value": [0, "1"]} for n, g in self.unalloc]


class Facts:
    def __init__(self, facts):
        self.f = facts

    def facts(self, ids):
        return {i: self.f[i] for i in ids if i in self.f}


def test_idle_jobs_are_found_across_nodes_and_exemptions_apply():
    site = site_with(idle_minutes=60, idle_exempt_partitions=["debug"])
    m = Metrics({("1", "b200-001"): 7200, ("1", "b200-002"): 4000, ("2", "b200-003"): 600,
                 ("3", "b200-004"): 9000, ("4", "b200-005"): 9000, ("5", "b200-006"): 9000},
                {"1": 0.0, "3": 0.0}, unalloc=[("b200-009", "3")])
    f = find(site, m, Facts({"1": (True, "gpu", "RUNNING"), "3": (False, "gpu", "RUNNING"),
                             "4": (True, "debug", "RUNNING"), "5": (True, "gpu", "COMPLETING"),
                             "2": (True, "gpu", "RUNNING")}))
    by = {j.job_id: j for j in f.jobs}
    assert set(by) == {"1", "3", "4"}  # 2 is under the threshold, 5 has ended
    assert by["1"].gpus == 16 and by["1"].nodes == ["b200-001", "b200-002"]
    assert by["1"].idle_minutes == pytest.approx(4000 / 60)  # as idle as its least idle node
    assert by["3"].exempt == "interactive job" and by["4"].exempt == "partition debug is exempt"
    assert [(u.node, u.gpu) for u in f.unallocated] == [("b200-009", "3")]


def _job(jid="7", minutes=200.0):
    return IdleJob(jid, "alice", "ml-llm", ["b200-001"], 8, minutes, 0.0)


def test_policy_report_mail_then_cancel_after_the_warning():
    now = 10_000.0
    site = site_with(idle_action="report")
    f = Findings([_job()])
    plan(site, f, lambda j: None, now)
    assert f.jobs[0].action == "report"
    site = site_with(idle_action="cancel", idle_minutes=60, idle_cancel_after_minutes=30)
    f = Findings([_job(minutes=70)])
    plan(site, f, lambda j: None, now)
    assert f.jobs[0].action == "mail"  # first: a warning, never a cancel
    f = Findings([_job(minutes=80)])
    plan(site, f, lambda j: now - 600, now)
    assert f.jobs[0].action == "none"  # warned 10 min ago: not yet
    f = Findings([_job(minutes=95)])
    plan(site, f, lambda j: now - 1900, now)
    assert f.jobs[0].action == "cancel"
    f = Findings([_job(minutes=95)])
    f.jobs[0].exempt = "interactive job"
    plan(site, f, lambda j: now - 1900, now)
    assert f.jobs[0].action == "none"


def test_top_frame_shows_nodes_drains_queue_and_projects():
    site = site_with()
    nodes = [NodeInfo("b200-001", "IDLE", frozenset({"DRAIN"}), "slurmadm: xid: GPU2 XID 79 [prolog]",
                      partitions=("gpu",), gres="gpu:b200:8"),
             NodeInfo("b200-002", "ALLOCATED", partitions=("gpu",), gres="gpu:b200:8"),
             NodeInfo("b200-003", "IDLE", frozenset({"DRAIN"}), "[alice] cable [x]", partitions=("gpu",),
                      gres="gpu:b200:8")]
    quota = next(p for p in site.projects if p.gpu_quota)
    jobs = [Job("1", "RUNNING", "None", "bob", quota.name, "gpu", True, quota.gpu_quota, "b200-002", "train"),
            Job("2", "PENDING", "QOSGrpGRES", "bob", quota.name, "gpu", True, 8, "", "more")]
    frame = Frame(Snapshot(nodes, jobs, {}), {"b200-002": 97.0}, "", 0)
    console = Console(width=160, record=True, color_system=None)
    console.print(build_frame(site, frame, width=160))
    text = console.export_text()
    for needle in ("b200-001", "b200-002", "b200-003", "slurmadm: xid: GPU2 XID 79", "[alice] cable [x]",
                   "QOSGrpGRES", quota.name, "100%", "97%"):
        assert needle in text, needle


def test_prometheus_and_alertmanager_configs_pass_their_own_checkers(site_file, tmp_path):
    r = CliRunner()
    rules = tmp_path / "rules.yml"
    assert r.invoke(cli, ["monitor", "rules", "--site", str(site_file), "--out", str(rules)]).exit_code == 0
    prom = tmp_path / "prometheus.yml"
    out = r.invoke(cli, ["monitor", "prometheus-config", "--site", str(site_file), "--rules-file", str(rules),
                         "--out", str(prom)])
    assert out.exit_code == 0, out.output
    p = subprocess.run(["promtool", "check", "config", str(prom)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    import yaml

    cfg = yaml.safe_load(prom.read_text())
    nodes = cfg["scrape_configs"][0]["static_configs"]
    assert len(nodes) == 128 and nodes[2] == {"targets": ["b200-003:9410"], "labels": {"cluster": "b200", "node": "b200-003"}}
    am = tmp_path / "alertmanager.yml"
    assert r.invoke(cli, ["monitor", "alertmanager-config", "--site", str(site_file), "--out", str(am)]).exit_code == 0
    assert "credentials_file: /etc/slurmadm/webhook.token" in am.read_text()
    amtool = shutil.which("amtool")
    if amtool:  # Debian's prometheus-alertmanager ships it
        p = subprocess.run([amtool, "check-config", str(am)], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr


def test_prometheus_config_scrapes_over_tls_with_basic_auth_when_the_site_says_so(tmp_path):
    """Issue 24: exporters behind an exporter-toolkit web config; promtool checks the result."""
    import yaml

    from slurmadm.monitor import promconfig

    (tmp_path / "ca.pem").write_text("")
    (tmp_path / "pw").write_text("x\n")
    site = site_with(scrape_ca_file=str(tmp_path / "ca.pem"), scrape_username="prometheus",
                     scrape_password_file=str(tmp_path / "pw"))
    cfg = promconfig.prometheus_config(site, rules_file=str(tmp_path / "rules.yml"), alertmanager="127.0.0.1:9093")
    ours = [j for j in cfg["scrape_configs"] if j["job_name"] in (site.monitor.node_job, site.monitor.head_job)]
    assert len(ours) == 2  # slurmadm's own exporters; node_exporter's and dcgm-exporter's jobs are the site's
    for job in ours:
        assert job["scheme"] == "https" and job["tls_config"] == {"ca_file": str(tmp_path / "ca.pem")}
        assert job["basic_auth"] == {"username": "prometheus", "password_file": str(tmp_path / "pw")}
    (tmp_path / "rules.yml").write_text("groups: []\n")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run(["promtool", "check", "config", "--syntax-only", str(tmp_path / "prometheus.yml")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    with pytest.raises(Exception, match="go together"):
        site_with(scrape_username="prometheus")
