"""CliBackend's queries as Slurm answers them with slurmctld unreachable (captured answers):
one query that waits for slurmctld, not two (each waits Slurm's MessageTimeout, ~9 s)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmadm.errors import CommandFailed, UnreachableError
from slurmadm.slurm import cli_backend
from slurmadm.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def fixture(release: str, name: str) -> str:
    return (FIXTURES / release / name).read_text()


class FakeSlurm:
    """`run` as cli_backend calls it: answers by argv prefix, records every call."""

    def __init__(self, version: str, answers: dict[tuple[str, ...], tuple[int, str, str]]):
        self.answers = {("sinfo", "--version"): (0, f"slurm {version}\n", ""), **answers}
        self.calls: list[list[str]] = []

    def __call__(self, argv, *, timeout, env=None, check=True, **_):
        self.calls.append(list(argv))
        for prefix, (rc, out, err) in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                if check and rc:
                    raise CommandFailed(list(argv), rc, err + out)
                return subprocess.CompletedProcess(argv, rc, out, err)
        raise AssertionError(f"unexpected Slurm call {argv}")

    def queries(self) -> list[list[str]]:
        return [c for c in self.calls if c[:2] != ["sinfo", "--version"]]


def backend(monkeypatch, fake: FakeSlurm) -> CliBackend:
    monkeypatch.setattr(cli_backend, "run", fake)
    return CliBackend()


def test_22_05_no_slurmctld_is_one_query_and_a_ping_that_says_why(monkeypatch):
    """22.05's sinfo --json: exit 0, no nodes, "Unspecified error"; `scontrol ping` (one connect
    try, 10 ms) says the controller is down. The text form (another ~9 s) is not tried."""
    fake = FakeSlurm("22.05.8", {("sinfo", "--json"): (0, fixture("22.05", "sinfo-no-slurmctld.json"), ""),
                                 ("scontrol", "ping"): (1, fixture("22.05", "scontrol-ping-no-slurmctld.txt"), "")})
    with pytest.raises(UnreachableError) as err:
        backend(monkeypatch, fake).nodes(["b200-001"])
    assert fake.queries() == [["sinfo", "--json"], ["scontrol", "ping"]]
    assert str(err.value) == ("sinfo --json: no nodes, errors: Unspecified error (errno -1); "
                              "scontrol ping: Slurmctld(primary) at vm is DOWN")


def test_22_05_errors_with_slurmctld_up_still_fall_back_to_the_text_form(monkeypatch):
    """The errors list without nodes but slurmctld up (a JSON plugin at odds, an auth failure):
    the text form is tried and says what it says."""
    fake = FakeSlurm("22.05.8", {("sinfo", "--json"): (0, fixture("22.05", "sinfo-no-slurmctld.json"), ""),
                                 ("scontrol", "ping"): (0, "Slurmctld(primary) at vm is UP\n", ""),
                                 ("scontrol", "show", "node", "-o"): (0, fixture("22.05", "scontrol-show-node.txt"), ""),
                                 ("scontrol", "show", "reservation"): (0, "No reservations in the system\n", "")})
    got = backend(monkeypatch, fake).nodes(["b200-001"])
    assert [n.name for n in got] == ["b200-001"]
    assert [c[:3] for c in fake.queries()] == [["sinfo", "--json"], ["scontrol", "ping"], ["scontrol", "show", "node"],
                                              ["scontrol", "show", "reservation"]]


def test_24_11_no_slurmctld_is_one_query(monkeypatch):
    """24.11's `scontrol --json show node`: exit 1, `Unable to contact slurm controller` on
    stderr (captured): raised at once, in Slurm's words."""
    fake = FakeSlurm("24.11.5", {("scontrol", "--json"): (1, "", fixture("24.11", "scontrol-show-node-no-slurmctld.stderr"))})
    with pytest.raises(UnreachableError) as err:
        backend(monkeypatch, fake).nodes(["b200-001"])
    assert fake.queries() == [["scontrol", "--json", "show", "node", "b200-001"]]
    assert str(err.value) == "scontrol: Unable to contact slurm controller (connect failure)"


def test_no_answer_is_one_query(monkeypatch):
    def hung(argv, *, timeout, **kw):
        if argv[:2] == ["sinfo", "--version"]:
            return subprocess.CompletedProcess(argv, 0, "slurm 24.11.5\n", "")
        calls.append(argv)
        raise UnreachableError(f"{argv[0]}: no answer within {timeout:g} s")

    calls: list[list[str]] = []
    monkeypatch.setattr(cli_backend, "run", hung)
    with pytest.raises(UnreachableError, match="no answer within 20 s"):
        CliBackend().nodes(["b200-001"])
    assert len(calls) == 1
