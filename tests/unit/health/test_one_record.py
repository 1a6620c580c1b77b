"""A health run's path is one way: observations -> verdicts -> plan -> act -> one record (issue 34).

The run writes nothing while it acts; after acting, one store transaction and one JSON-lines
append hold its results, its events and its state. A run cut at its hard limit still leaves what
it had: the watchdog's salvage (its own thread, its own connection) writes it with the limit's
alert, and a run stuck holding the GIL hands it to the hook's supervisor before calling Slurm."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from slurmadm.health import engine, hook
from slurmadm.health import record as rec_mod
from slurmadm.health.runner import Result
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store
from tests.unit.health.test_runner import cfg
from tests.unit.health.test_time_limit import BLOCK_S, world  # noqa: F401  (the fixture)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NODE = "b200-001"
FAULT = Result("ecc-uncorrected", "fail", "critical", "drain", "GPU5 1 uncorrected ECC error", 1.0, 1.0)
RESULTS = [Result("gpu-count", "pass", "critical", "none", "8 GPUs", 8.0, 1.0), FAULT]


def rows(path: str, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


class Backend:
    """Slurm for one partition of 20 idle nodes; `hold` makes drain() wait (a hung scontrol)."""

    def __init__(self, store_path: str, hold: threading.Event | None = None):
        self.store_path = store_path
        self.hold = hold
        self.entered = threading.Event()
        self.written_before_acting: list[tuple] | None = None
        self.state = {f"b200-{i:03d}": NodeInfo(f"b200-{i:03d}", "IDLE", partitions=("gpu",)) for i in range(1, 21)}

    def nodes(self) -> list[NodeInfo]:
        return list(self.state.values())

    def drain(self, names, reason) -> None:
        self.written_before_acting = rows(self.store_path, "SELECT (SELECT count(*) FROM check_results),"
                                                           " (SELECT count(*) FROM events)")
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(30)
        for n in names:
            self.state[n] = NodeInfo(n, "IDLE", flags=frozenset({"DRAIN"}), reason=reason, partitions=("gpu",))

    def resume(self, names) -> None:
        for n in names:
            self.state[n] = NodeInfo(n, "IDLE", partitions=("gpu",))


@pytest.fixture()
def run(monkeypatch, tmp_path):
    """engine.execute over the fixed RESULTS, counting the store's write transactions and the
    results log's appends."""
    store_path, log = str(tmp_path / "s.db"), str(tmp_path / "health.jsonl")
    Store(store_path).close()  # migrated: its own transaction is not the run's
    monkeypatch.setattr(engine, "select", lambda *a, **k: [])
    monkeypatch.setattr(engine, "run_checks", lambda *a, **k: list(RESULTS))
    counts = {"begin": 0, "appends": 0}
    real_open_store, real_open = rec_mod.open_store, os.open

    def open_store(*a, **k):
        store, why = real_open_store(*a, **k)
        if store is not None:
            store.db.set_trace_callback(
                lambda sql: counts.__setitem__("begin", counts["begin"] + sql.startswith("BEGIN")))
        return store, why

    def counting_open(path, flags, *a, **k):
        if os.fspath(path) == log and flags & os.O_APPEND:
            counts["appends"] += 1
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(engine, "open_store", open_store)
    monkeypatch.setattr(rec_mod, "open_store", open_store)
    monkeypatch.setattr(os, "open", counting_open)
    c = cfg(store_path=store_path, results_log=log, timeouts={"prolog": 20, "epilog": 20, "periodic": 20, "run": 20})
    return c, counts


def test_a_draining_prolog_writes_one_transaction_and_one_append_after_acting(run):
    c, counts = run
    backend = Backend(c.store_path)
    report = engine.execute(c, "prolog", backend=backend, use_syslog=False)
    assert report.plan.action == "drain" and report.applied and report.exit_code == 1, report
    assert not report.problems
    # nothing was written while the run acted: the record follows the act
    assert backend.written_before_acting == [(0, 0)]
    assert counts == {"begin": 1, "appends": 1}
    # ...and it holds everything: results, the drain event (check_id in its detail), the state
    assert rows(c.store_path, "SELECT check_id, status FROM check_results ORDER BY id") == \
        [("gpu-count", "pass"), ("ecc-uncorrected", "fail")]
    [(action, reason, detail)] = rows(c.store_path, "SELECT action, reason, detail FROM events")
    assert action == "node.drain" and reason.startswith("slurmadm: ecc-uncorrected: ")
    assert json.loads(detail) == {"check_id": "ecc-uncorrected", "context": "prolog", "run_id": report.run_id}
    assert dict(rows(c.store_path, "SELECT key, value FROM node_state"))["health.drain-reason"] == reason
    lines = [json.loads(x) for x in Path(c.results_log).read_text().splitlines()]
    assert [x.get("event") or x["check_id"] for x in lines] == ["gpu-count", "ecc-uncorrected", "drain"]
    assert {x["run_id"] for x in lines} == {report.run_id}


def test_a_healthy_prolog_is_one_transaction_and_one_append_too(run, monkeypatch):
    c, counts = run
    monkeypatch.setattr(engine, "run_checks", lambda *a, **k: [RESULTS[0]])
    # no backend: a healthy prolog never calls Slurm; the job's GPUs go with its one record
    report = engine.execute(c, "prolog", use_syslog=False, job=("42", [0, 1]))
    assert report.exit_code == 0 and report.plan.action == "none" and not report.problems
    assert counts == {"begin": 1, "appends": 1}
    assert rows(c.store_path, "SELECT node, job_id, gpus FROM job_gpus") == [(NODE, "42", "[0, 1]")]


def test_a_prolog_that_refuses_the_job_keeps_no_gpus_for_it(run):
    c, counts = run
    report = engine.execute(c, "prolog", backend=Backend(c.store_path), use_syslog=False, job=("43", [0]))
    assert report.exit_code == 1 and counts == {"begin": 1, "appends": 1}
    assert rows(c.store_path, "SELECT job_id FROM job_gpus") == []


def test_a_dry_run_records_its_results_but_no_state(run):
    c, counts = run
    report = engine.execute(c, "prolog", act=False, backend=Backend(c.store_path), use_syslog=False)
    assert report.plan.action == "drain" and not report.applied
    assert counts == {"begin": 1, "appends": 1}
    assert rows(c.store_path, "SELECT count(*) FROM check_results") == [(2,)]
    assert rows(c.store_path, "SELECT count(*) FROM events") == [(0,)]
    assert rows(c.store_path, "SELECT count(*) FROM node_state") == [(0,)]


def test_the_watchdog_salvages_the_collected_record_from_its_own_thread(run):
    """A run hung in Slurm: the watchdog (another thread: the run's SQLite connection is not
    its to use) writes the run's results and the limit's alert as the run's one record; what the
    run does after that is never written a second time."""
    c, counts = run
    hold = threading.Event()
    backend = Backend(c.store_path, hold=hold)
    watch = engine.Watch()
    box = {}
    t = threading.Thread(target=lambda: box.update(report=engine.execute(c, "prolog", backend=backend,
                                                                        use_syslog=False, watch=watch)))
    t.start()
    try:
        assert backend.entered.wait(20)
        assert watch.salvage("slurmadm health prolog b200-001: gave up at the run's limit of 20 s")
        assert not watch.salvage("again")  # one record only
    finally:
        hold.set()
        t.join(20)
    assert rows(c.store_path, "SELECT check_id FROM check_results ORDER BY id") == \
        [("gpu-count",), ("ecc-uncorrected",)]
    events = rows(c.store_path, "SELECT action, reason FROM events ORDER BY id")
    assert events == [("health.alert", "slurmadm health prolog b200-001: gave up at the run's limit of 20 s")]
    lines = [json.loads(x) for x in Path(c.results_log).read_text().splitlines()]
    assert [x.get("event") or x["check_id"] for x in lines] == ["gpu-count", "ecc-uncorrected", "alert"]
    assert {x["run_id"] for x in lines} == {box["report"].run_id}
    # the salvage's transaction (on its own connection) and append; the run's own commit, after
    # the hold, found its record written: no second transaction, no second append
    assert counts == {"begin": 1, "appends": 1}


SALVAGE_PROBE = '''
import sys, time, threading
from slurmadm.health import engine
from slurmadm.health.runner import Result
from slurmadm.slurm.model import NodeInfo
from tests.unit.health.test_runner import cfg
from tests.unit.health.test_time_limit import BLOCK_S, world  # noqa: F401  (the fixture)
store_path, log = sys.argv[1], sys.argv[2]

class Hangs:
    def nodes(self):
        return [NodeInfo(f"b200-{i:03d}", "IDLE", partitions=("gpu",)) for i in range(1, 21)]
    def drain(self, names, reason):
        time.sleep(60)  # scontrol that never answers (the GIL released: the watchdog runs)

engine.select = lambda *a, **k: []
engine.run_checks = lambda *a, **k: [Result("ecc-uncorrected", "fail", "critical", "drain", "GPU5 x", 1.0, 1.0)]
c = cfg(store_path=store_path, results_log=log, timeouts={"prolog": 1.5, "epilog": 5, "periodic": 5, "run": 5})
watch = engine.Watch()
engine.start_watchdog(1.5, lambda: watch.salvage("gave up at the run's limit"), exit_code=86)
engine.execute(c, "prolog", backend=Hangs(), use_syslog=False, watch=watch)
sys.exit(0)
'''


def test_the_watchdogs_hard_exit_leaves_what_the_run_had(tmp_path):
    store_path, log = str(tmp_path / "s.db"), str(tmp_path / "health.jsonl")
    p = subprocess.run([sys.executable, "-c", SALVAGE_PROBE, store_path, log], check=False, capture_output=True,
                       text=True, timeout=50, cwd=REPO)
    assert p.returncode == 86, p.stderr
    assert rows(store_path, "SELECT check_id, status FROM check_results") == [("ecc-uncorrected", "fail")]
    assert rows(store_path, "SELECT action, reason FROM events") == [("health.alert", "gave up at the run's limit")]
    lines = [json.loads(x) for x in Path(log).read_text().splitlines()]
    assert [x.get("event") or x["check_id"] for x in lines] == ["ecc-uncorrected", "alert"]


def test_the_supervisor_writes_what_a_killed_run_handed_it(tmp_path):
    """A run stuck holding the GIL (pyslurm) cannot salvage: what it journalled before calling
    Slurm is written by the supervisor, with the alert, as that run's one record."""
    r, w = os.pipe()
    store_path, log = str(tmp_path / "s.db"), str(tmp_path / "health.jsonl")
    store = Store(store_path)
    try:
        rec = rec_mod.Recorder(node=NODE, context="prolog", run_id="abc", results_log=log, store=store,
                               use_syslog=False, journal_fd=w)
        rec.results(RESULTS)
        rec.journal()  # about to call Slurm
        rec.event("drain", "slurmadm: ecc-uncorrected: GPU5 [prolog]", check_id="ecc-uncorrected")
        os.close(w)
        handed = os.read(r, 1 << 16)
    finally:
        store.close()
        os.close(r)
    assert rows(store_path, "SELECT count(*) FROM check_results") == [(0,)]  # the run never wrote
    hook._record_alert(cfg(store_path=store_path, results_log=log), "prolog", "gave up", handed + b'{"torn')
    assert rows(store_path, "SELECT run_id, check_id FROM check_results ORDER BY id") == \
        [("abc", "gpu-count"), ("abc", "ecc-uncorrected")]
    assert [a for a, in rows(store_path, "SELECT action FROM events ORDER BY id")] == ["node.drain", "health.alert"]
    # a run that wrote its own record leaves the supervisor only the alert
    assert rec_mod.replay_journal(handed + b'{"committed": true}\n') is None


def test_hookerror_records_in_one_transaction(tmp_path, monkeypatch):
    from slurmadm.health import hookerror

    store_path, log = str(tmp_path / "s.db"), str(tmp_path / "health.jsonl")
    Store(store_path).close()
    monkeypatch.setattr(hookerror, "last_good_paths", lambda node: (log, store_path, None))
    begins = []
    real = rec_mod.open_store

    def open_store(*a, **k):
        store, why = real(*a, **k)
        store.db.set_trace_callback(lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None)
        return store, why

    monkeypatch.setattr(rec_mod, "open_store", open_store)
    for _ in range(2):
        assert hookerror.record(NODE, "prolog", "site-invalid", "cannot load the site: x") == []
    assert len(begins) == 2
    state = dict(rows(store_path, "SELECT key, value FROM node_state"))
    assert state["health.hook-errors.site-invalid"] == "2" and json.loads(state["health.hook-error"])["error"]
    assert rows(store_path, "SELECT action FROM events") == [("health.hook_error",)] * 2


def test_a_prolog_stuck_holding_the_gil_leaves_its_results_through_the_supervisor(world):  # noqa: F811
    """End to end, the hook as Slurm runs it, with a pyslurm that blocks holding the GIL (the
    stand-in of test_time_limit.py): the run's own watchdog cannot run, the supervisor kills it
    at the limit and writes what the run handed over before calling Slurm, with its alert."""
    tmp, env = world
    p = subprocess.run([sys.executable, "-m", "slurmadm.health", "prolog"], check=False,
                       env={**env, "SLURMADM_SLURM_BACKEND": "pyslurm"}, capture_output=True, text=True,
                       timeout=BLOCK_S - 10, cwd=tmp)
    assert p.returncode == 86, p.stderr
    lines = [json.loads(x) for x in (tmp / "health.jsonl").read_text().splitlines()]
    fault = [x for x in lines if x.get("check_id") == "ecc-uncorrected" and "event" not in x]
    alert = [x for x in lines if x.get("event") == "alert" and "limit" in x.get("reason", "")]
    assert fault and fault[0]["status"] == "fail" and alert, lines
    assert {x["run_id"] for x in [*fault, *alert]} == {fault[0]["run_id"]}  # one run, one record
    store = str(tmp / "slurmadm.db")
    assert ("ecc-uncorrected", "fail") in rows(store, "SELECT check_id, status FROM check_results")
    assert [a for a, in rows(store, "SELECT action FROM events")] == ["health.alert"]


def test_an_admins_resume_after_a_drain_in_the_xid_lines_own_second_sticks(tmp_path, monkeypatch):
    """The real xid check over a kernel log whose reset-class line carries a whole-second stamp
    not yet over when the run drains (here 30 s ahead: a node clock a little fast): an admin's
    resume acknowledges it and the following runs leave the node in service. Before, the
    acknowledgement stopped at the drain's own time, short of the line's second, and every later
    run drained the node again for a line the admin had dealt with."""
    import datetime as dt
    import time

    from slurmadm.health import checks

    monkeypatch.setattr(checks.xidmod, "boot_time", lambda: 0.0)
    stamp = dt.datetime.fromtimestamp(int(time.time()) + 30).isoformat(timespec="seconds")
    log = tmp_path / "kern.log"
    log.write_text(f"{stamp} {NODE} kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=python, "
                   "GPU has fallen off the bus.\n")
    store_path = str(tmp_path / "s.db")
    c = cfg(node=NODE, store_path=store_path, xid_source=str(log),
            timeouts={"prolog": 20, "epilog": 20, "periodic": 20, "run": 20})
    backend = Backend(store_path)

    def periodic():
        return engine.execute(c, "periodic", only=["xid"], backend=backend, use_syslog=False)

    first = periodic()
    assert first.plan.action == "drain" and backend.state[NODE].drained, first
    backend.resume([NODE])  # the admin, after a reboot the log does not show
    second = periodic()
    assert not backend.state[NODE].drained, second.plan
    [(reason,)] = rows(store_path, "SELECT reason FROM events WHERE action='health.alert'")
    assert reason.startswith(f"an admin resumed {NODE}: xid faults logged so far are acknowledged")
    for _ in range(2):  # it sticks: the acknowledgement was kept with the run's record
        later = periodic()
        assert not backend.state[NODE].drained and later.plan.action != "drain", later.plan


def test_a_resume_the_first_run_finds_clean_still_acknowledges_the_lines(tmp_path, monkeypatch):
    """The run after the admin's resume finds the XID cleared by something it reads each run (here
    the boot time; on a node NVML's recovery action reading "none"): the lines are acknowledged all
    the same, so a later run that cannot read that (NVML slow or broken) does not drain the node
    for them."""
    import datetime as dt
    import time

    from slurmadm.health import checks

    now = time.time()
    booted = {"at": 0.0}
    monkeypatch.setattr(checks.xidmod, "boot_time", lambda: booted["at"])
    stamp = dt.datetime.fromtimestamp(now - 120).isoformat(timespec="microseconds")
    log = tmp_path / "kern.log"
    log.write_text(f"{stamp} {NODE} kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=python, "
                   "GPU has fallen off the bus.\n")
    store_path = str(tmp_path / "s.db")
    c = cfg(node=NODE, store_path=store_path, xid_source=str(log),
            timeouts={"prolog": 20, "epilog": 20, "periodic": 20, "run": 20})
    backend = Backend(store_path)

    def periodic():
        return engine.execute(c, "periodic", only=["xid"], backend=backend, use_syslog=False)

    assert periodic().plan.action == "drain"
    backend.resume([NODE])
    booted["at"] = now - 60  # the run after the resume sees the line cleared
    assert not backend.state[NODE].drained and periodic().plan.action != "drain"
    booted["at"] = 0.0  # ...and a later run does not
    later = periodic()
    assert not backend.state[NODE].drained and later.plan.action != "drain", later.plan


def test_the_run_after_a_resume_records_the_judgement_it_acted_on(tmp_path, monkeypatch):
    """Resumed over an XID on one GPU, the node's next run finds a new XID on another: it drains
    for the new one only, and its recorded xid result (what repair's ingest opens incidents from)
    names only the new one; the acknowledged one is in the run's alert."""
    import datetime as dt
    import time

    from slurmadm.health import checks

    monkeypatch.setattr(checks.xidmod, "boot_time", lambda: 0.0)

    def xid_line(bus: str, ago: float) -> str:
        stamp = dt.datetime.fromtimestamp(time.time() - ago).isoformat(timespec="microseconds")
        return f"{stamp} {NODE} kernel: NVRM: Xid (PCI:0000:{bus}:00): 46, pid=1, name=python, Ch 00000008\n"

    log = tmp_path / "kern.log"
    log.write_text(xid_line("1b", 120))
    store_path = str(tmp_path / "s.db")
    c = cfg(node=NODE, store_path=store_path, xid_source=str(log),
            timeouts={"prolog": 20, "epilog": 20, "periodic": 20, "run": 20})
    backend = Backend(store_path)

    def periodic():
        return engine.execute(c, "periodic", only=["xid"], backend=backend, use_syslog=False)

    assert periodic().plan.action == "drain"
    backend.resume([NODE])
    with open(log, "a") as fh:
        fh.write(xid_line("9a", 0.0))
    second = periodic()
    assert second.plan.action == "drain" and "9a" in backend.state[NODE].reason, second.plan
    assert "1b" not in backend.state[NODE].reason
    [(status, detail)] = rows(store_path, f"SELECT status, detail FROM check_results WHERE run_id='{second.run_id}'")
    assert status == "fail" and "0000:9a:00" in detail and "0000:1b:00" not in detail, detail
    [(alert,)] = rows(store_path, "SELECT reason FROM events WHERE action='health.alert'")
    assert "0000:1b:00" in alert and "acknowledged" in alert
