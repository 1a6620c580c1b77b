"""Alerts a periodic run cannot act on (a fault on a node in maintenance, the breaker) come back
every HealthCheckInterval; each is recorded once per alert_repeat_minutes, or when it changes."""

from __future__ import annotations

import time

import pytest

from slurmadm.health import engine
from slurmadm.health.record import NodeState, Recorder
from slurmadm.store import Store
from tests.unit.health.test_runner import cfg

pytestmark = pytest.mark.unit

NODE = "b200-001"
MAINT = "not draining (slurmadm: nvlink: GPU1 2/18 NVLinks inactive (links 0,1)): node is MAINTENANCE+RESERVED"


def periodic_run(store, reason, minutes=60, context="periodic"):
    """What one run does about an alert: fresh NodeState, alert, one record (engine.execute's order)."""
    state = NodeState(store, NODE)
    rec = Recorder(node=NODE, context=context, run_id="r", results_log="", store=store, use_syslog=False)
    rec.state = state
    engine._alert(cfg(alert_repeat_minutes=minutes), rec, state, reason, check_id="nvlink")
    rec.commit()


def alerts(store):
    return [e.reason for e in store.events(action="health.alert")]


def test_same_alert_is_recorded_once_per_window_and_again_when_it_changes(tmp_path):
    with Store(str(tmp_path / "s.db")) as store:
        for _ in range(3):
            periodic_run(store, MAINT)
        assert alerts(store) == [MAINT]
        worse = MAINT.replace("2/18", "4/18").replace("0,1", "0,1,2,3")
        periodic_run(store, worse)
        assert alerts(store) == [worse, MAINT]  # newest first


def test_a_prolog_and_an_epilog_seeing_the_same_fault_are_one_alert(tmp_path):
    """A job in a maintenance reservation: its prolog and epilog both see the fault; the drain
    reason in the alert names the context, which does not make it a new alert."""
    held = "not draining (slurmadm: nvlink: GPU1 2/18 NVLinks inactive (links 0,1) [{}]): node is MAINTENANCE+RESERVED"
    with Store(str(tmp_path / "s.db")) as store:
        for context in ("prolog", "epilog", "prolog", "epilog"):
            periodic_run(store, held.format(context), context=context)
        assert alerts(store) == [held.format("prolog")]


def test_same_alert_is_recorded_again_after_the_window(tmp_path):
    with Store(str(tmp_path / "s.db")) as store:
        periodic_run(store, MAINT)
        stamp = float(store.get_node_state(NODE, "health." + engine.LAST_ALERT_KEY).split(" ", 1)[0])
        assert abs(stamp - time.time()) < 60
        # the last one was recorded 61 minutes ago
        store.set_node_state(NODE, "health." + engine.LAST_ALERT_KEY, f"{stamp - 61 * 60:.0f} {MAINT}")
        periodic_run(store, MAINT)
        assert alerts(store) == [MAINT, MAINT]


def test_zero_minutes_records_every_alert(tmp_path):
    with Store(str(tmp_path / "s.db")) as store:
        for _ in range(2):
            periodic_run(store, MAINT, minutes=0)
        assert alerts(store) == [MAINT, MAINT]
