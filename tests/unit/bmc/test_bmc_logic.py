"""slurmadm.bmc on plain data: credentials, recovery selection, safety, waves, health verdicts,
the fan-out's deadline and concurrency bound."""

from __future__ import annotations

import os
import threading
import time

import pytest

from slurmadm.bmc import firmware, health, ops, recover
from slurmadm.bmc.creds import ENV_PASSWORD, Credentials, Secret, load_credentials
from slurmadm.bmc.fanout import Fleet, targets
from slurmadm.bmc.model import Sensor, SelEvent
from slurmadm.errors import UsageError
from slurmadm.site import load_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.site import parse_site
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit


def site_with(values: dict):
    return parse_site(edited(*(put(k, v) for k, v in values.items())), source="site.toml")


def node(name, *, state="IDLE", flags=(), reason="", user="", parts=("gpu",)):
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, reason_user=user,
                    partitions=tuple(parts))


# ---------------------------------------------------------------------- credentials
def test_password_from_env_wins_and_never_prints():
    c = load_credentials("admin", "/nonexistent", env={ENV_PASSWORD: "hunter2-xyz"})
    assert c.password.reveal() == "hunter2-xyz"
    assert "hunter2" not in repr(c) and "hunter2" not in str(c.password)
    assert c.scrub("login failed for hunter2-xyz@bmc") == "login failed for ***@bmc"


def test_password_file_must_be_private(tmp_path):
    f = tmp_path / "pw"
    f.write_text("s3cret\n")
    os.chmod(f, 0o644)
    with pytest.raises(UsageError, match=r"readable by others \(mode 0644\); chmod 600"):
        load_credentials("admin", str(f), env={})
    os.chmod(f, 0o600)
    assert load_credentials("admin", str(f), env={}).password.reveal() == "s3cret"


@pytest.mark.parametrize("content,msg", [(None, "does not exist"), ("\n", "is empty")])
def test_password_file_problems_are_one_line(tmp_path, content, msg):
    f = tmp_path / "pw"
    if content is not None:
        f.write_text(content)
        os.chmod(f, 0o600)
    with pytest.raises(UsageError, match=msg):
        load_credentials("admin", str(f), env={})


def test_secret_cannot_be_pickled():
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(Secret("x"))


# ---------------------------------------------------------------------- addresses
def test_targets_from_pattern_and_shared_address(tmp_path):
    site = load_site("site.example.toml")
    t = targets(site, ["b200-007"])[0]
    assert (t.host, t.ipmi_port, t.redfish_port) == ("b200-007-bmc", 623, 443)
    dev = site_with({"bmc.shared_address": "127.0.0.1", "bmc.port": 20300, "bmc.redfish_port": 20350})
    t = targets(dev, ["b200-001", "b200-003"])
    assert [(x.host, x.ipmi_port, x.redfish_port) for x in t] == [("127.0.0.1", 20300, 20350),
                                                                  ("127.0.0.1", 20302, 20352)]


def test_bad_bmc_settings_are_refused(tmp_path):
    from slurmadm.errors import SiteError

    with pytest.raises(SiteError, match="host_pattern"):
        site_with({"bmc.host_pattern": "{node};rm -rf /"})
    with pytest.raises(SiteError, match="tls_insecure"):
        site_with({"bmc.tls_insecure": True, "bmc.tls_ca_file": "/etc/ca.pem"})


# ---------------------------------------------------------------------- fan-out
def _fleet(tmp_path, **bmc):
    site = site_with({f"bmc.{k}": v for k, v in bmc.items()})
    return Fleet(site, Credentials("admin", Secret("pw-123456")))


def test_dead_bmc_is_one_row_at_its_deadline_and_others_finish(tmp_path):
    fleet = _fleet(tmp_path, timeout_s=0.3, retries=0, fanout=4)
    release = threading.Event()

    def fn(conn):
        if conn.node == "b200-002":
            release.wait(30)  # a BMC that never answers
        return conn.node.upper()

    nodes = ["b200-001", "b200-002", "b200-003"]
    rows = fleet.run(nodes, fn)
    release.set()
    assert [r.node for r in rows] == nodes
    assert [r.ok for r in rows] == [True, False, True]
    assert rows[0].value == "B200-001"
    assert "did not answer within 0.3 s" in rows[1].error


class _FakeClient:
    """A logged-in BMC: `sensors()` answers after `gap` s, until `stall` is set (then it hangs)."""

    def __init__(self, gap: float):
        self.gap, self.stall, self.calls = gap, threading.Event(), 0

    def sensors(self):
        if self.stall.is_set():
            threading.Event().wait(30)  # answers nothing any more
        time.sleep(self.gap)
        self.calls += 1
        return self.calls


def test_a_bmc_that_keeps_answering_is_waited_for_past_its_deadline_and_one_that_stops_is_not(tmp_path):
    """The deadline follows progress: an operation of many answered calls may take longer than
    the deadline (a busy head); a BMC silent for the deadline after answering, or right after its
    login, is given up on; one that answers forever stops at the cap."""
    fleet = _fleet(tmp_path, timeout_s=0.2, retries=0, fanout=8)
    deadline = fleet.default_deadline  # 0.2 login + 10 x 0.2
    hangs = threading.Event()

    def fn(conn):
        client = conn._login(lambda: _FakeClient(gap=0.01))  # the real login path: a watched client
        start = time.monotonic()
        if conn.node == "b200-001":  # steady: keeps answering until well past the deadline
            while time.monotonic() - start < 1.5 * deadline:
                client.sensors()
            return "done"
        if conn.node == "b200-002":  # answers a few calls, then stops
            for _ in range(3):
                client.sensors()
            client._client.stall.set()
            return client.sensors()
        hangs.wait(30)  # b200-003: logged in, then never answers a call

    rows = fleet.run(["b200-001", "b200-002", "b200-003"], fn)
    hangs.set()
    assert rows[0].ok and rows[0].value == "done" and rows[0].seconds >= 1.5 * deadline, rows[0]
    assert not rows[1].ok and f"stopped answering: no answer for {deadline:g} s" in rows[1].error, rows[1]
    assert not rows[2].ok and rows[2].error == f"b200-003: BMC did not finish within {deadline:g} s", rows[2]

    def forever(conn):
        client = conn._login(lambda: _FakeClient(gap=0.01))
        while True:
            client.sensors()

    row = fleet.run(["b200-004"], forever, deadline_s=0.5)[0]
    assert not row.ok and "did not finish within 3 s (answering, but too slow)" in row.error, row
    assert row.seconds >= 3


def test_a_failing_call_is_no_answer(tmp_path):
    """Only calls that return count as answers (a timeout raised by the client does not)."""
    from slurmadm.bmc.fanout import _Watched

    seen = []
    client = _Watched(_FakeClient(gap=0.0), lambda: seen.append(1))
    assert client.sensors() == 1 and seen == [1]
    broken = _Watched(type("B", (), {"power": lambda self: 1 / 0, "name": "x"})(), lambda: seen.append(2))
    with pytest.raises(ZeroDivisionError):
        broken.power()
    assert seen == [1] and broken.name == "x"


def test_fanout_bounds_concurrency_and_scrubs_errors(tmp_path):
    fleet = _fleet(tmp_path, fanout=2, timeout_s=30.0)
    active, peak, lock = [0], [0], threading.Lock()

    def fn(conn):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        if conn.node == "b200-004":
            raise RuntimeError("auth failed with pw-123456")
        return 1

    rows = fleet.run([f"b200-{i:03d}" for i in range(1, 9)], fn)
    assert peak[0] <= 2
    bad = [r for r in rows if not r.ok]
    assert len(bad) == 1 and "pw-123456" not in bad[0].error and "***" in bad[0].error


# ---------------------------------------------------------------------- Slurm safety
def test_power_safety_rules():
    busy = node("b200-001", state="MIXED")
    idle = node("b200-002")
    admin = node("b200-003", flags=("DRAIN",), reason="bad DIMM", user="alice")
    assert ops.safety("b200-001", busy, disruptive=True, force=False, drain=False)[0] is False
    assert ops.safety("b200-001", busy, disruptive=True, force=True, drain=False) == (True, False, "--force")
    assert ops.safety("b200-001", busy, disruptive=True, force=False, drain=True) == (
        True, True, "drain, wait for jobs to end")
    assert ops.safety("b200-002", idle, disruptive=True, force=False, drain=False) == (True, False, "")
    ok, must_drain, why = ops.safety("b200-003", admin, disruptive=True, force=False, drain=True)
    assert ok and not must_drain and "already drained" in why  # their reason is kept
    assert ops.safety("b200-001", busy, disruptive=False, force=False, drain=False)[0] is True  # power on


# ---------------------------------------------------------------------- recovery selection
def _select(nodes, **kw):
    args = dict(now=1000.0, down_since={}, recovered_at={}, grace_s=60, window_s=3600, cycles_last_hour=0,
                max_per_hour=4, drain_cap_fraction=0.5)
    args.update(kw)
    return {c.node: c for c in recover.select(nodes, **args)}


def test_recover_selects_only_slurms_own_down_nodes_past_grace():
    nodes = [
        node("b200-001", state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding", user="slurm"),
        node("b200-002", state="DOWN", reason="replacing GPU", user="alice"),
        node("b200-003", state="IDLE", flags=("DRAIN", "NOT_RESPONDING"), reason="maintenance", user="bob"),
        node("b200-004", state="DOWN", flags=("REBOOT_ISSUED",), reason="Not responding"),
        node("b200-005", state="DOWN", reason="Not responding"),
        node("b200-006"),
        # a missed ping (Slurm has not set it DOWN): a node just resumed after a reboot reads idle*
        node("b200-007", state="IDLE", flags=("NOT_RESPONDING",)),
        # our own recovery, not answering yet
        node("b200-008", state="IDLE", flags=("DRAIN", "NOT_RESPONDING"),
             reason="slurmadm: bmc-recover: power-cycling through the BMC [bmc]"),
    ] + [node(f"b200-{i:03d}") for i in range(9, 13)]
    got = _select(nodes, down_since={"b200-001": 900.0, "b200-005": 990.0, "b200-007": 0.0, "b200-008": 0.0})
    assert got["b200-001"].action == "cycle"
    assert got["b200-002"].action == "skip" and "alice" in got["b200-002"].why
    assert "b200-003" not in got  # an admin's drain, not DOWN: not a dead node at all
    assert got["b200-004"].action == "skip" and "REBOOT_ISSUED" in got["b200-004"].why
    assert got["b200-005"].action == "wait"
    assert "b200-006" not in got and "b200-007" not in got
    assert got["b200-008"].action == "cycle"


def test_recover_second_failure_in_window_and_rate_limit():
    down = [node(f"b200-{i:03d}", state="DOWN", reason="Not responding") for i in range(1, 4)]
    up = [node(f"b200-{i:03d}") for i in range(4, 11)]
    got = _select(down + up, down_since={n.name: 0.0 for n in down}, recovered_at={"b200-001": 500.0},
                  cycles_last_hour=3, max_per_hour=4)
    assert got["b200-001"].action == "drain-again"
    assert [got["b200-002"].action, got["b200-003"].action] == ["cycle", "alert"]
    assert "rate limit" in got["b200-003"].why


def test_recover_breaker_caps_drains():
    down = [node("b200-001", state="DOWN", reason="Not responding")]
    ours = [node(f"b200-{i:03d}", flags=("DRAIN",), reason="slurmadm: xid: GPU1 XID 79 [prolog]") for i in (2, 3)]
    got = _select(down + ours + [node("b200-004")], down_since={"b200-001": 0.0}, drain_cap_fraction=0.5)
    assert got["b200-001"].action == "alert" and "breaker" in got["b200-001"].why


def test_recover_breaker_counts_the_whole_partition_not_only_the_asked_nodes():
    down = node("b200-001", state="DOWN", reason="Not responding")
    rest = [node(f"b200-{i:03d}") for i in range(2, 5)]
    got = recover.select([down], now=1000.0, down_since={"b200-001": 0.0}, recovered_at={}, grace_s=60,
                         window_s=3600, cycles_last_hour=0, max_per_hour=4, drain_cap_fraction=0.5,
                         everyone=[down, *rest])
    assert got[0].action == "cycle"


def test_sel_evidence_prefers_bad_events():
    ev = [SelEvent(1, 1.0, "ACPI State", "x", "Online", "info"),
          SelEvent(2, 2.0, "PSU2 Status", "Power Supply", "Failure detected", "critical")]
    assert recover.evidence(ev) == "PSU2 Status: Failure detected"
    assert "no warning/critical" in recover.evidence(ev[:1])


# ---------------------------------------------------------------------- firmware waves
def test_waves_and_budget():
    nodes = [f"n{i}" for i in range(10)]
    assert firmware.waves(nodes, 2, 0.25) == [["n0", "n1"], ["n2", "n3", "n4"], ["n5", "n6", "n7"], ["n8", "n9"]]
    assert firmware.waves([], 2, 0.5) == []
    assert firmware.budget(10, 0.05) == 0 and firmware.budget(40, 0.05) == 2


def test_firmware_only_on_drained_idle_nodes():
    assert "not drained" in firmware.eligibility(node("a"), force=False)
    assert "jobs" in firmware.eligibility(node("a", state="MIXED", flags=("DRAIN",)), force=False)
    assert firmware.eligibility(node("a", flags=("DRAIN",), reason="fw"), force=False) == ""
    assert firmware.eligibility(node("a", state="MIXED"), force=True) == ""


# ---------------------------------------------------------------------- BMC health verdicts
def test_health_judge():
    sensors = [
        Sensor("HGX BB Temp", "temperature", 92.0, "°C", "critical", {"uc": 85.0}),
        Sensor("CPU1 Temp", "temperature", 99.0, "°C", "critical", {"uc": 95.0}),  # not a configured sensor
        Sensor("PSU2 Status", "psu", None, "", "critical", {}, ("Failure detected",)),
        Sensor("FAN1", "fan", 8400.0, "RPM", "ok", {"lc": 500.0}),
    ]
    events = [SelEvent(1, 10.0, "HGX BB Temp", "t", "Upper Critical going high", "critical"),
              SelEvent(2, 20.0, "PSU2 Status", "p", "Failure detected", "critical")]
    got = {v.check_id: v for v in health.judge("n", sensors, events, temp_globs=["HGX BB Temp", "GPU* Temp"],
                                               sel_severity="critical", seen={health.event_key(events[0])})}
    assert got["bmc-temperature"].status == "fail" and "HGX BB Temp 92°C" in got["bmc-temperature"].detail
    assert "CPU1" not in got["bmc-temperature"].detail
    assert got["bmc-psu"].status == "fail"
    assert got["bmc-fan"].status == "pass"
    assert got["bmc-sel"].status == "fail" and got["bmc-sel"].detail.startswith("1 new")  # only after `seen`


# ---------------------------------------------------------------------- recovery's health verdict
def test_recovery_judges_the_health_run_by_the_sites_policy(tmp_path):
    """A power-cycled node whose first health run only warns (software-drift is on_fail = "warn":
    e.g. a rollout's new NCCL ahead of the baseline) is recovered; a check that drains fails it."""
    from slurmadm.store import Store

    site = site_with({})
    with Store(tmp_path / "s.db") as store:
        rec = recover.Recovery(site, fleet=None, backend=None, store=store)

        def run(run_id, ts, rows):
            with store.transaction() as db:
                for check_id, status in rows:
                    db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity,"
                               " detail, value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                               (ts, run_id, "b200-001", "periodic", check_id, status, "warning", f"{check_id} x",
                                None, 1.0))

        assert rec._health("b200-001", 0.0) is None  # no run yet
        run("r1", 10.0, [("gpu-count", "pass"), ("software-drift", "fail")])
        assert rec._health("b200-001", 5.0) == (True, "2 checks clean")
        run("r2", 20.0, [("software-drift", "fail"), ("ecc-uncorrected", "fail")])
        assert rec._health("b200-001", 15.0) == (False, "ecc-uncorrected: ecc-uncorrected x")


def test_a_ca_file_policy_is_not_x509_strict():
    """Python 3.13's default context is VERIFY_X509_STRICT, which refuses BMC certificates without
    an Authority Key Identifier (the emulator's, and many vendors'): the CA chain is what counts."""
    import ssl

    from slurmadm.bmc.redfish import TlsPolicy

    ctx = TlsPolicy(ca_file="/etc/ssl/certs/ca-certificates.crt", fingerprint=None, insecure=False).context
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert not ctx.verify_flags & ssl.VERIFY_X509_STRICT


def test_recover_plan_dates_a_first_seen_down_node_from_slurms_reason_time(tmp_path):
    """A node first seen DOWN by this `recover` has been down since Slurm set its reason, not
    since now (the reference-site bench read "down 0 s" for a node frozen 40 s before)."""
    import dataclasses

    from slurmadm.store import Store

    site = site_with({})
    down = dataclasses.replace(node("b200-001", state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding"),
                               reason_time=900.0)
    undated = node("b200-002", state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding")

    class Backend:
        def nodes(self):
            return [down, undated, node("b200-003")]

    with Store(tmp_path / "s.db") as store:
        rec = recover.Recovery(site, fleet=None, backend=Backend(), store=store)
        got = {c.node: c for c in rec.plan(now=1000.0)}
        assert got["b200-001"].down_for == 100.0 and "down 100 s" in got["b200-001"].why
        assert got["b200-002"].down_for == 0.0  # Slurm gave no time: from now on
        assert store.get_node_state("b200-001", recover.DOWN_SINCE) == "900.0"


def test_a_powered_off_hosts_fans_at_zero_are_no_fault():
    """Fans stop with the host: a BMC reading 0 RPM (under its lower critical) on a node whose
    chassis is off is no fan fault (the fleet replay's 128-node bring-up drained one as such); a
    PSU failure there still is one; a power state the BMC did not give is judged as on."""
    stopped = [Sensor(f"FAN{i}", "fan", 0.0, "RPM", "critical", {"lc": 500.0}) for i in (1, 2)]
    psu = Sensor("PSU2 Status", "psu", None, "", "critical", {}, ("Failure detected",))

    def verdicts(power):
        return {v.check_id: v for v in health.judge("n", [*stopped, psu], [], temp_globs=[], sel_severity="critical",
                                                     seen=set(), power=power)}

    off = verdicts("off")
    assert off["bmc-fan"].status == "pass" and "powered off" in off["bmc-fan"].detail
    assert off["bmc-psu"].status == "fail"
    for power in ("on", "unknown"):
        got = verdicts(power)["bmc-fan"]
        assert got.status == "fail" and got.detail.startswith("FAN1 0 RPM under critical 500"), got


def test_the_power_state_is_asked_and_a_bmc_that_cannot_say_is_judged_as_on():
    from slurmadm.errors import UnreachableError

    class Bmc:
        def __init__(self, answer):
            self.answer = answer

        def power_state(self):
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    assert health._power(Bmc("off")) == "off" and health._power(Bmc("on")) == "on"
    assert health._power(Bmc(UnreachableError("n: BMC: power status: timed out"))) == "unknown"
    assert health._power(Bmc("standby")) == "unknown"
