"""What repair's GPU reset (or reboot) cleared reaches the node's own health: the head keeps the
time (`qualify.XID_ACK_KEY`), the qualification job's spec carries it, and the job writes it
into the node's store where the XID check reads its acknowledgement (`health.xid-ack` for a
reboot; `health.xid-reset-ack` for a GPU reset, which clears the reset-class lines only).

Before, the executor wrote `xid-ack` (no `health.` prefix) into the head's store: the node's
health never read it, and the qualification's health suite judged the lines the reset had
cleared as a fault whenever NVML's recovery action could not clear them."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from slurmadm.health import checks, engine
from slurmadm.health.record import NodeState
from slurmadm.repair import qualify
from slurmadm.site import parse_site
from slurmadm.store import Store
from tests.unit.health.test_runner import cfg
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit

NODE = "b200-001"


@pytest.fixture()
def site(tmp_path, monkeypatch):
    text = edited(put("store.path", str(tmp_path / "stores" / "{node}.db")),
                  put("store.audit_log", str(tmp_path / "audit.jsonl")))
    (tmp_path / "stores").mkdir()
    p = tmp_path / "site.toml"
    p.write_text(text)
    monkeypatch.setenv("SLURMADM_SITE", str(p))
    return parse_site(text, source=str(p))


def _xid_log(tmp_path, ago_s: float):
    stamp = dt.datetime.fromtimestamp(int(time.time() - ago_s)).isoformat(timespec="seconds")
    log = tmp_path / "kern.log"
    log.write_text(f"{stamp} {NODE} kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=python, "
                   "GPU has fallen off the bus.\n")
    return log


def _qualification_health(site, log):
    """The qualification's health suite: `health run --dry-run` (context run), XID check only,
    over the node's own store."""
    c = cfg(node=NODE, store_path=site.store.local_path(NODE), xid_source=str(log),
            timeouts={"prolog": 20, "epilog": 20, "periodic": 20, "run": 20})
    report = engine.execute(c, "run", only=["xid"], act=False, use_syslog=False)
    [xid] = [r for r in report.results if r.check_id == "xid"]
    return xid


def test_the_reset_acknowledgement_reaches_the_nodes_health(site, tmp_path, monkeypatch):
    monkeypatch.setattr(checks.xidmod, "boot_time", lambda: 0.0)
    log = _xid_log(tmp_path, ago_s=120)  # logged before the reset
    Store(site.store.local_path(NODE)).close()
    assert _qualification_health(site, log).status == "fail"  # the fault as health sees it unacknowledged

    reset_at = time.time() - 60
    out = qualify.acknowledge_xids(NODE, reset_at)
    assert out["ok"] is True and site.store.local_path(NODE) in out["detail"]
    with Store(site.store.local_path(NODE)) as node_store:
        state = NodeState(node_store, NODE)
        assert float(state.get(checks.XID_ACK_KEY)) == pytest.approx(reset_at, abs=0.01)
        assert state.get(engine.XID_HELD_KEY) == "0"
    assert _qualification_health(site, log).status != "fail"
    # the head's store (another file) is not where it went
    assert site.store.local_path("head") != site.store.local_path(NODE)


def test_a_reset_acknowledges_reset_class_lines_and_a_reboot_class_one_waits_for_the_reboot(
        site, tmp_path, monkeypatch):
    """The fleet replay's Xid 79 (issue 37): the ladder reset the GPU and its acknowledgement
    covered every line before it, the fallen-off GPU's too (NVIDIA's catalog: RESTART_BM, a node
    reboot). A reset's acknowledgement clears the reset-class lines only; the reboot's clears all."""
    monkeypatch.setattr(checks.xidmod, "boot_time", lambda: 0.0)
    stamp = dt.datetime.fromtimestamp(int(time.time() - 120)).isoformat(timespec="seconds")
    log = tmp_path / "kern.log"
    log.write_text(f"{stamp} {NODE} kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=python, "
                   "GPU has fallen off the bus.\n"
                   f"{stamp} {NODE} kernel: NVRM: Xid (PCI:0000:2b:00): 46, pid=1, name=python, "
                   "Ch 00000001\n")
    Store(site.store.local_path(NODE)).close()
    before = _qualification_health(site, log)
    assert "XID 79" in before.detail and "XID 46" in before.detail
    out = qualify.acknowledge_xids(NODE, 0.0, time.time() - 60)  # the ladder's GPU reset
    assert out["ok"] is True and out["detail"].startswith("reset-class XID lines up to ")
    after_reset = _qualification_health(site, log)
    assert after_reset.status == "fail" and "XID 79" in after_reset.detail and "XID 46" not in after_reset.detail
    qualify.acknowledge_xids(NODE, time.time() - 30)  # the ladder's reboot
    assert _qualification_health(site, log).status != "fail"


def test_the_acknowledgement_never_moves_back(site):
    Store(site.store.local_path(NODE)).close()
    qualify.acknowledge_xids(NODE, 2000.0)
    qualify.acknowledge_xids(NODE, 1000.0)  # an older reset's job run late
    with Store(site.store.local_path(NODE)) as node_store:
        assert NodeState(node_store, NODE).get(checks.XID_ACK_KEY) == "2000.000"


def test_a_store_it_cannot_write_is_said_and_not_raised(site, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMADM_SITE", str(tmp_path / "missing.toml"))
    out = qualify.acknowledge_xids(NODE, 1000.0)
    assert out["ok"] is False and out["event"] == "xid-ack" and "missing.toml" in out["detail"]


def test_the_spec_carries_the_heads_acknowledgement(site, monkeypatch):
    from slurmadm.burnin import sweep

    monkeypatch.setattr(sweep.Sweep, "node_spec", lambda self, node: {"node": node})
    head = Store(site.store.local_path("head"))
    q = qualify.Qualifier(site, backend=None, store=head)
    assert "xid_ack" not in q.spec(NODE)  # nothing reset: nothing to acknowledge
    head.set_node_state(NODE, qualify.XID_ACK_KEY, "1765000000.250")
    assert q.spec(NODE)["xid_ack"] == 1765000000.25
    assert "xid_reset_ack" not in q.spec(NODE)
    head.set_node_state(NODE, qualify.XID_RESET_ACK_KEY, "1765000100.500")
    assert q.spec(NODE)["xid_reset_ack"] == 1765000100.5
    argv = q.request(NODE).argv
    assert json.loads(argv[argv.index("--spec") + 1])["xid_ack"] == 1765000000.25


def test_the_job_writes_it_first_and_says_so_when_it_cannot(site, tmp_path, monkeypatch, capsys):
    from slurmadm.burnin import node as bnode
    from slurmadm.burnin import stress
    from slurmadm.burnin.model import TestResult
    from slurmadm.health import hook

    seen = []
    monkeypatch.setattr(hook, "local_node", lambda _n: NODE)
    monkeypatch.setattr(stress, "stress", lambda *a, **k: TestResult("stress", "pass", "ok"))
    monkeypatch.setattr(bnode, "single_node_allreduce", lambda spec: TestResult("allreduce-node", "pass", "ok"))
    monkeypatch.setattr(qualify, "kat_test", lambda: TestResult("kat", "pass", "ok"))

    def health(_timeout):
        with Store(site.store.local_path(NODE)) as s:
            seen.append(NodeState(s, NODE).get(checks.XID_ACK_KEY))
        return TestResult("health", "fail", "xid: GPU0 XID 79")

    monkeypatch.setattr(bnode, "health_suite", health)
    spec = {"stress_seconds": 1, "collective": "gloo", "step_timeout": 5, "xid_ack": 1500.0}
    assert qualify.main(["--spec", json.dumps(spec)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [x["event"] for x in lines][:2] == ["started", "xid-ack"] and lines[1]["ok"] is True
    assert seen == ["1500.000"]  # written before the health suite ran
    health_line = next(x for x in lines if x.get("event") == "test" and x.get("test") == "health")
    assert "acknowledgement" not in health_line["detail"]

    monkeypatch.setenv("SLURMADM_SITE", str(tmp_path / "gone.toml"))
    monkeypatch.setattr(bnode, "health_suite", lambda _t: TestResult("health", "fail", "xid: GPU0 XID 79"))
    assert qualify.main(["--spec", json.dumps(spec)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    health_line = next(x for x in lines if x.get("event") == "test" and x.get("test") == "health")
    assert "repair's XID acknowledgement was not written" in health_line["detail"]
    verdict = qualify.judge(NODE, "\n".join(json.dumps(x) for x in lines), "", 0)
    assert verdict.status == "fail" and verdict.failed_test == "health"
