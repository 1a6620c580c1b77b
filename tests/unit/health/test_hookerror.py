"""Issue 25.5: a hook that cannot load the site leaves a trace where admins look: the node
exporter (`slurmadm_hook_errors_total{reason}`, `slurmadm_health_enforcement_off`), `health
status` and `doctor` name the node and the error. (The hook run itself against a broken site
file, and what it writes, are in test_checks_standin.py; the alert rule's promtool test in
tests/unit/monitor/test_rules.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurmadm.cli import cli
from slurmadm.health import hookerror
from slurmadm.store import Store
from tests.unit.siteedit import put, site_file

pytestmark = pytest.mark.unit

NODE = "b200-007"


@pytest.fixture()
def site(tmp_path, monkeypatch) -> Path:
    path = site_file(tmp_path, monkeypatch, put("health.results_log", str(tmp_path / "health.jsonl")), slurm_conf=True)
    # the node's last good settings cache: where its store and results log are
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"health-{NODE}-0.1.0-abc.json").write_text(json.dumps(
        {"results_log": str(tmp_path / "health.jsonl"), "store_path": str(tmp_path / "slurmadm.db"), "audit_log": None}))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(cache))
    return path


def metrics(store_path: str) -> dict[str, list]:
    from slurmadm.exporter.node import NodeCollector
    from slurmadm.exporter.sources import StoreHealth

    class Nothing:
        def read(self):
            return None

    col = NodeCollector(node=NODE, gpus=Nothing(), ib=Nothing(), host=Nothing(), health=StoreHealth(store_path, NODE),
                        xids=Nothing(), job_map_dir="/nonexistent", cache_s=0.0, deadline_s=5.0, idle_util_percent=5)
    reg = CollectorRegistry()
    reg.register(col)
    text = generate_latest(reg).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_exporter_counts_hook_errors_by_reason_and_says_enforcement_is_off(site, tmp_path):
    store = str(tmp_path / "slurmadm.db")
    assert hookerror.record(NODE, "prolog", "site-invalid", "cannot load the site: not UTF-8") == []
    assert hookerror.record(NODE, "periodic", "site-invalid", "cannot load the site: not UTF-8") == []
    assert hookerror.record(NODE, "prolog", "site-untrusted", "cannot load the site: owned by uid 1000") == []
    m = metrics(store)
    errors = {s.labels["reason"]: s.value for s in m["slurmadm_hook_errors"] if s.name.endswith("_total")}
    assert errors == {"site-invalid": 2, "site-untrusted": 1}
    assert [s.value for s in m["slurmadm_health_enforcement_off"]] == [1]
    # a good run afterwards (a check result newer than the error): enforcement is back, the count stays
    with Store(store) as s, s.transaction() as db:
        db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value,"
                   " duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (time.time() + 1, "r", NODE, "prolog", "xid", "pass", "critical", "", None, 1.0))
    m = metrics(store)
    assert [s.value for s in m["slurmadm_health_enforcement_off"]] == [0]
    assert sum(s.value for s in m["slurmadm_hook_errors"] if s.name.endswith("_total")) == 3


def test_health_status_and_doctor_name_the_node_and_the_error(site, tmp_path, monkeypatch):
    from slurmadm.cli import health as health_cli
    from slurmadm.errors import SlurmadmError

    def no_slurm():
        raise SlurmadmError("no slurmctld here")

    monkeypatch.setattr(health_cli, "slurm_nodes", no_slurm)  # the drain-reason part: Slurm does not answer
    hookerror.record(NODE, "prolog", "site-invalid",
                     "cannot load the site: site.toml: not UTF-8: byte 0xff at line 412")
    r = CliRunner().invoke(cli, ["health", "status", "--json"])
    assert r.exit_code == 1, r.output  # a node runs jobs unchecked: that is failing
    rows = json.loads(r.stdout)
    [row] = [x for x in rows if x["check_id"] == "hook"]
    assert row["node"] == NODE and row["status"] == "error" and row["context"] == "prolog"
    assert "health enforcement off" in row["detail"] and "byte 0xff" in row["detail"]
    table = CliRunner().invoke(cli, ["health", "status"])
    assert NODE in table.output and "health enforcement off" in table.output

    d = CliRunner().invoke(cli, ["doctor", "--json", "--check", "hook-errors"])
    by = {f["check"]: f for f in json.loads(d.stdout)["findings"]}
    f = by["hook-errors"]
    assert f["status"] == "fail" and NODE in f["summary"] and "byte 0xff" in f["summary"], f
    assert f["data"]["nodes"] == [NODE]


def test_doctor_is_quiet_when_every_hook_loads_the_site(site, tmp_path):
    with Store(tmp_path / "slurmadm.db"):
        pass
    d = CliRunner().invoke(cli, ["doctor", "--json", "--check", "hook-errors"])
    by = {f["check"]: f for f in json.loads(d.stdout)["findings"]}
    assert by["hook-errors"]["status"] == "ok"


def test_reason_labels():
    from slurmadm.errors import SiteError, UsageError

    assert hookerror.reason_of(SiteError("s.toml", ["TOML syntax error: x"])) == "site-invalid"
    assert hookerror.reason_of(UsageError("site file s.toml is owned by uid 7, not root: refusing it as root")) \
        == "site-untrusted"
    assert hookerror.reason_of(UsageError("--node: 'x' is not one of the site's nodes [..]")) == "node-not-in-site"
    assert hookerror.reason_of(UsageError("no site file at /etc/slurmadm/site.toml")) == "site-unreadable"
    assert hookerror.reason_of(KeyError("x")) == "unexpected"
