"""The Alertmanager webhook: auth, size bound, hostile payloads (400, nothing changed), and the
isolation rules (drain under ownership + breaker, resume only its own drains when health is clean),
over HTTP on 127.0.0.1 with a Slurm stand-in behind the adapter Protocol and a real store."""

from __future__ import annotations

import json
import threading
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from slurmadm.monitor.webhook import BadPayload, Isolator, make_server, parse_payload, read_token
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
TOKEN = "t0ken-for-the-webhook-test-0123456789"


class FakeSlurm:
    """Slurm's node view as the adapter returns it; drain/resume change it like scontrol would."""

    def __init__(self, names: list[str]):
        self.view = {n: NodeInfo(n, "IDLE", partitions=("gpu",), gres="gpu:b200:8") for n in names}
        self.calls: list[tuple[str, str, str]] = []

    def nodes(self, names=None):
        return list(self.view.values())

    def drain(self, nodes, reason):
        for n in nodes:
            self.calls.append(("drain", n, reason))
            self.view[n] = replace(self.view[n], flags=self.view[n].flags | {"DRAIN"}, reason=reason)

    def resume(self, nodes):
        for n in nodes:
            self.calls.append(("resume", n, ""))
            self.view[n] = replace(self.view[n], flags=self.view[n].flags - {"DRAIN"}, reason="")


@pytest.fixture()
def hook(tmp_path):
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    slurm = FakeSlurm(site.node_names[:20])
    store_path = tmp_path / "s.db"
    Store(store_path).close()
    iso = Isolator(site=site, backend=slurm, store_factory=lambda: Store(store_path))
    server = make_server("127.0.0.1:0", token=TOKEN, max_bytes=4096, isolator=iso)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = server.server_address[1]

    def post(payload, *, token=TOKEN, raw: bytes | None = None):
        body = raw if raw is not None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(f"http://127.0.0.1:{port}/alerts", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    post.slurm = slurm
    post.store_path = store_path
    post.iso = iso
    yield post
    server.shutdown()
    server.server_close()


def alert(name="GpuEccUncorrected", node="b200-003", status="firing", summary="b200-003 GPU5: 2 uncorrected ECC"):
    return {"version": "4", "status": status, "receiver": "slurmadm", "groupLabels": {}, "commonLabels": {},
            "alerts": [{"status": status, "labels": {"alertname": name, "node": node, "severity": "critical"},
                        "annotations": {"summary": summary}, "startsAt": "2026-12-01T08:00:00Z",
                        "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "abc123"}]}


def periodic_runs(store_path, node, *statuses: str) -> None:
    """Periodic health runs on the node, now, one run per status (what slurmd's HealthCheckProgram records)."""
    import time
    import uuid

    with Store(store_path) as store, store.transaction() as db:
        for status in statuses:
            run = uuid.uuid4().hex[:8]
            for check in ("ecc-uncorrected", "xid"):
                db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                           " value, duration_ms) VALUES (?, ?, ?, 'periodic', ?, ?, 'critical', '', NULL, 1)",
                           (time.time(), run, node, check, status if check == "xid" else "pass"))


def test_firing_drains_with_an_alert_reason_and_resolved_resumes_after_clean_health_runs(hook):
    code, out = hook(alert())
    assert code == 200 and out["results"][0]["action"] == "drain"
    node = hook.slurm.view["b200-003"]
    assert node.drained and node.reason == "slurmadm: alert-GpuEccUncorrected: b200-003 GPU5: 2 uncorrected ECC [alert]"
    assert hook(alert())[1]["results"][0]["action"] == "none"  # Alertmanager repeats: idempotent
    code, out = hook(alert(status="resolved"))
    assert out["results"][0]["action"] == "pending-resume" and "0 of 3" in out["results"][0]["why"]
    assert hook.slurm.view["b200-003"].drained
    periodic_runs(hook.store_path, "b200-003", "pass", "pass")
    assert hook.iso.sweep()[0]["why"].endswith("2 of 3") and hook.slurm.view["b200-003"].drained
    periodic_runs(hook.store_path, "b200-003", "pass")
    assert hook.iso.sweep() == [{"node": "b200-003", "why": "resumed"}]
    assert not hook.slurm.view["b200-003"].drained
    assert hook.iso.sweep() == []  # nothing pending any more
    with Store(hook.store_path) as store:
        actions = [(e.action, e.target) for e in store.events()]
    assert ("node.drain", "b200-003") in actions and ("node.resume", "b200-003") in actions


def test_unmapped_alerts_and_unknown_nodes_change_nothing(hook):
    assert hook(alert(name="GpuOverTemperature"))[1]["results"][0]["action"] == "none"
    assert hook(alert(node="not-a-node"))[1]["results"][0]["why"].startswith("node label")
    assert hook.slurm.calls == []


def test_an_admin_drain_is_never_touched(hook):
    hook.slurm.view["b200-003"] = replace(hook.slurm.view["b200-003"], flags=frozenset({"DRAIN"}),
                                          reason="swap DIMM", reason_user="alice")
    assert hook(alert())[1]["results"][0]["action"] == "none"
    assert hook(alert(status="resolved"))[1]["results"][0]["action"] == "none"
    assert hook.slurm.calls == [] and hook.slurm.view["b200-003"].reason == "swap DIMM"


def test_resolved_resumes_only_a_drain_for_the_same_alert(hook):
    hook(alert(name="GpuXidFatal"))
    assert hook(alert(status="resolved"))[1]["results"][0]["action"] == "none"  # ECC did not drain it
    assert hook.slurm.view["b200-003"].drained


def test_a_failing_health_run_restarts_the_count_and_firing_again_cancels(hook):
    hook(alert())
    hook(alert(status="resolved"))
    periodic_runs(hook.store_path, "b200-003", "pass", "pass", "fail", "pass")
    assert hook.iso.sweep()[0]["why"].endswith("1 of 3")
    hook(alert())  # the fault is back before the resume: no resume pending any more
    periodic_runs(hook.store_path, "b200-003", "pass", "pass", "pass")
    assert hook.iso.sweep() == [] and hook.slurm.view["b200-003"].drained


def test_a_pending_resume_is_dropped_when_an_admin_takes_the_node(hook):
    hook(alert())
    hook(alert(status="resolved"))
    hook.slurm.view["b200-003"] = replace(hook.slurm.view["b200-003"], reason="RMA ticket 42", reason_user="bob")
    periodic_runs(hook.store_path, "b200-003", "pass", "pass", "pass")
    assert "no longer drained by slurmadm" in hook.iso.sweep()[0]["why"]
    assert hook.slurm.view["b200-003"].drained and hook.slurm.calls[-1][0] == "drain"


def test_the_breaker_holds_back_drains_past_the_cap(hook):
    # 20 nodes in the partition, cap 10 % = 2 drains
    for n in ("b200-001", "b200-002"):
        assert hook(alert(node=n))[1]["results"][0]["action"] == "drain"
    out = hook(alert(node="b200-004"))[1]["results"][0]
    assert out["action"] == "alert" and "breaker" in out["why"]
    assert not hook.slurm.view["b200-004"].drained


@pytest.mark.parametrize("token", [None, "wrong-token-wrong-token", TOKEN + "x"])
def test_a_missing_or_wrong_token_is_401(hook, token):
    code, _ = hook(alert(), token=token)
    assert code == 401 and hook.slurm.calls == []


def test_an_oversized_request_is_413_and_not_read(hook):
    code, out = hook(None, raw=b"{" + b" " * 5000 + b"}")
    assert code == 413 and "4096" in out["error"]


@pytest.mark.parametrize("raw, why", [
    (b"\xff\xfe not utf-8", "not JSON"),
    (b"[1, 2]", "not an object"),
    (b'{"alerts": "x"}', "'alerts'"),
    (b'{"alerts": [{"status": "firing", "labels": {"alertname": 5}}]}', "labels"),
    (b'{"alerts": [{"status": "maybe", "labels": {"alertname": "A"}}]}', "status"),
    (b'{"alerts": [{"status": "firing", "labels": {"alertname": "A; rm -rf /"}}]}', "alertname"),
])
def test_bad_payloads_are_400_naming_the_problem(hook, raw, why):
    code, out = hook(None, raw=raw)
    assert code == 400 and why in out["error"] and hook.slurm.calls == []


FIXTURES = REPO / "tests" / "fixtures" / "alertmanager"


def test_parse_payload_reads_real_alertmanager_payloads():
    (a,) = parse_payload((FIXTURES / "webhook-firing.json").read_bytes())
    assert (a.name, a.node, a.status) == ("GpuXidFatal", "b200-007", "firing")
    assert a.summary == "b200-007 GPU3: an XID NVIDIA's catalog says to drain for" and a.fingerprint
    (r,) = parse_payload((FIXTURES / "webhook-resolved.json").read_bytes())
    assert (r.status, r.fingerprint) == ("resolved", a.fingerprint)
    with pytest.raises(BadPayload):
        parse_payload(b"")


def test_real_payloads_over_http_drain_then_hold_the_resume(hook):
    code, out = hook(None, raw=(FIXTURES / "webhook-firing.json").read_bytes())
    assert code == 200 and out["results"][0]["action"] == "drain"
    assert hook.slurm.view["b200-007"].reason.startswith("slurmadm: alert-GpuXidFatal: b200-007 GPU3")
    code, out = hook(None, raw=(FIXTURES / "webhook-resolved.json").read_bytes())
    assert code == 200 and out["results"][0]["action"] == "pending-resume"


def test_token_file_must_be_private_and_long(tmp_path):
    from slurmadm.errors import UsageError

    f = tmp_path / "tok"
    f.write_text(TOKEN)
    f.chmod(0o644)
    with pytest.raises(UsageError, match="readable by others"):
        read_token(str(f))
    f.chmod(0o600)
    assert read_token(str(f)) == TOKEN
    f.write_text("short")
    with pytest.raises(UsageError, match="shorter"):
        read_token(str(f))
