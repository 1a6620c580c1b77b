"""pyghmi's two session locks, taken in opposite orders by two paths, deadlocked a BMC sweep: a
session that timed out is resent by `wait_for_rsp`/`awaitresponse` while WAITING_SESSIONS is held
(then `send_payload` takes KEEPALIVE_SESSIONS), and every other send holds KEEPALIVE_SESSIONS in
`send_payload` and takes WAITING_SESSIONS in `_xmit_packet`. Seen as a second sweep of one
process failing one run in two (bench/bmc_sweep.py; the thread dump showed exactly these two
frames). slurmadm.bmc.pyghmi_io runs `_timedout` with WAITING_SESSIONS let go."""

from __future__ import annotations

import threading

import pyghmi.ipmi.private.session as session
import pytest
from pyghmi.ipmi.private import util

from slurmadm.bmc import pyghmi_io

pytestmark = pytest.mark.unit


def test_a_resend_after_a_timeout_and_a_send_at_once_do_not_deadlock(monkeypatch):
    """The two orders at once, each thread holding its first lock when the other takes its own:
    the timed-out session's resend (pyghmi's `_timedout`, here one that takes KEEPALIVE_SESSIONS
    as its resend does) is called the way `wait_for_rsp` calls it, under WAITING_SESSIONS. With
    the lock held through it both threads wait for ever (the join below fails)."""
    pyghmi_io.apply()
    first_held, second_held = threading.Event(), threading.Event()
    done: list[str] = []

    def resend(self):
        with util.protect(session.KEEPALIVE_SESSIONS):
            done.append("resend")

    monkeypatch.setattr(session.Session, "_slurmadm_timedout_orig", resend)
    timed_out = object.__new__(session.Session)

    def wait_for_rsp():
        with util.protect(session.WAITING_SESSIONS):
            first_held.set()
            assert second_held.wait(10)  # the sender holds KEEPALIVE_SESSIONS now
            timed_out._timedout()
            assert session.WAITING_SESSIONS._is_owned()  # taken back for the caller's block
            done.append("after")

    def send():  # send_payload -> _xmit_packet
        assert first_held.wait(10)
        with util.protect(session.KEEPALIVE_SESSIONS):
            second_held.set()
            with util.protect(session.WAITING_SESSIONS):
                done.append("send")

    threads = [threading.Thread(target=f, daemon=True) for f in (wait_for_rsp, send)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert done == ["send", "resend", "after"], "pyghmi's session locks deadlocked"


def test_timedout_lets_go_of_a_lock_held_twice_and_takes_it_back(monkeypatch):
    """WAITING_SESSIONS is an RLock a caller may hold more than once: it is let go entirely for
    the call and comes back as deep as it was; without it held, nothing is taken."""
    pyghmi_io.apply()
    seen: list[bool] = []
    monkeypatch.setattr(session.Session, "_slurmadm_timedout_orig",
                        lambda self: seen.append(session.WAITING_SESSIONS._is_owned()))
    s = object.__new__(session.Session)
    lock = session.WAITING_SESSIONS
    with util.protect(lock), util.protect(lock):
        s._timedout()
        lock.release()  # still held once more
        assert lock._is_owned()
        lock.acquire()
    s._timedout()
    assert seen == [False, False]
    assert not lock._is_owned()
    assert session.Session._timedout is pyghmi_io._timedout
