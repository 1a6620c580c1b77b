"""`slurmadm deploy`'s node scripts, run for real by /bin/sh against a directory per node (a fake
`python` stands in for venv and pip, a fake `slurmadm doctor` for the doctor; the real installs
run in tests/integration/test_deploy.py): fresh deploy, idempotence, upgrade and the switch back
after a failing doctor, interruption, prune, rollback, the manifest, drift facts."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
import tomli_w

from slurmadm import deploy as dep
from slurmadm.deploy import node as nodemod
from slurmadm.deploy.wheelhouse import Release, load
from slurmadm.fleet import collector
from slurmadm.fleet.ssh import Reply
from slurmadm.resources import example_site
from slurmadm.site import parse_site
from slurmadm.store import Store

pytestmark = pytest.mark.unit
NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]

FAKE_PYTHON = r"""#!/bin/sh
# stands in for python3: `-m venv DIR`, `-m pip install ...`, `-I -c ...` (the hooks' directory)
here=$(cd "$(dirname "$0")/.." && pwd)
case "$1 $2" in
"-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && printf '%s\n' '#!/bin/sh' \
  'here=$(cd "$(dirname "$0")/.." && pwd)' \
  'if [ -e "$here/../../FAIL-DOCTOR" ]; then echo "{\"ok\": false, \"findings\": [{\"check\": \"nvml\", \"status\": \"fail\", \"summary\": \"NVML broken\", \"fix\": \"\"}]}"; exit 1; fi' \
  'echo "{\"ok\": true, \"findings\": [{\"check\": \"site\", \"status\": \"ok\", \"summary\": \"site fine\", \"fix\": \"\"}]}"' \
  > "$3/bin/slurmadm" && chmod 755 "$3/bin/slurmadm" ;;
"-m pip") [ -e "$here/../../FAIL-INSTALL" ] && { echo "ERROR: no matching distribution"; exit 1; }
  ls "$here/../../wheelhouse/"*/ > "$here/installed-from" ;;
"-I -c") mkdir -p "$here/lib/hooks" && for h in prolog.sh epilog.sh healthcheck.sh hook-env.sh; do
    echo "# $h of $(basename "$here")" > "$here/lib/hooks/$h"; done && echo "$here/lib/hooks" ;;
esac
"""


class DirNodes:
    """The Remote protocol over one directory per node: `<tmp>/ROOT` in a command or path is the
    node's own `<tmp>/<node>` (as each fake node of the dev cluster has its own mount namespace)."""

    def __init__(self, tmp: Path):
        self.tmp, self.root = tmp, str(tmp / "ROOT")
        self.down: set[str] = set()
        self.log: list[tuple[str, str]] = []

    def _mine(self, node: str, text: str) -> str:
        return text.replace(self.root, str(self.tmp / node))

    def run(self, nodes, command, *, timeout, stdin=None, on_reply=None):
        out = []
        for n in nodes:
            if n in self.down:
                out.append(Reply(n, None, error="127.0.0.1:1: connection refused", kind="unreachable"))
                continue
            p = subprocess.run(["/bin/sh", "-c", self._mine(n, command)], input=self._mine(n, stdin or ""),
                               capture_output=True, text=True, timeout=timeout)
            self.log.append((n, (stdin or command).strip().splitlines()[0] if (stdin or command).strip() else ""))
            out.append(Reply(n, p.returncode, (p.stdout + p.stderr).replace(str(self.tmp / n), self.root)))
        return out

    def put(self, nodes, files, *, timeout, on_reply=None):
        out = []
        for n in nodes:
            for f in files:
                path = Path(self._mine(n, f.path))
                tmp = path.with_name("." + path.name + ".new")
                tmp.write_bytes(f.data if f.data is not None else Path(f.source).read_bytes())
                os.chmod(tmp, f.mode)
                os.replace(tmp, path)
            self.log.append((n, "put " + " ".join(f.path.rsplit("/", 1)[-1] for f in files)))
            out.append(Reply(n, 0, ""))
        return out

    def close(self):
        pass

    def node_path(self, node: str, rel: str) -> Path:
        return self.tmp / node / rel


def make_site(tmp: Path, **deploy):
    data = tomllib.loads(example_site().read_text())
    python = tmp / "fake-python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    secret = tmp / "store.password"
    if not secret.exists():
        secret.write_text("s3cret-value\n")
    root = tmp / "ROOT"
    data["slurm"]["prolog_dir"] = f"{root}/hooks"
    data["deploy"] = {"prefix": f"{root}/opt/slurmadm", "python": str(python), "copy_site": False, "unit_dir": f"{root}/systemd", "keep_releases": 1,
                      "env": {"SLURMADM_CACHE_DIR": "/var/cache/slurmadm"}, **deploy}
    return parse_site(tomli_w.dumps(data))


def wheelhouse(tmp: Path, version: str, extra: str = "") -> Release:
    d = tmp / f"wh-{version}{extra}"
    d.mkdir()
    for name, body in ((f"slurmadm-{version}-py3-none-any.whl", version + extra), ("click-8.1.0-py3-none-any.whl", "c")):
        with zipfile.ZipFile(d / name, "w") as z:
            z.writestr(f"{name.split('-')[0]}.dist-info/RECORD", body)
    return load(d)


@pytest.fixture()
def world(tmp_path):
    for n in NODES:
        (tmp_path / n).mkdir()
    secret = tmp_path / "store.password"
    secret.write_text("s3cret-value\n")
    return DirNodes(tmp_path)


def deploy_all(site, rel, remote, store, nodes=NODES):
    d = dep.Deployer(site, rel, remote, reason="test")
    r = dep.DeployRollout(site, d, nodes, store=store).run()
    return d, r


def test_release_name_follows_the_wheels_content(tmp_path):
    a, b, c = wheelhouse(tmp_path, "0.1.0"), wheelhouse(tmp_path, "0.1.0", "x"), wheelhouse(tmp_path, "0.2.0")
    assert a.name.startswith("0.1.0-") and len(a.name) == len("0.1.0-") + 12
    assert a.name != b.name and c.version == "0.2.0"
    assert load(a.dir).name == a.name  # the same wheels: the same release


def test_fresh_deploy_then_a_second_apply_changes_nothing(tmp_path, world):
    site = make_site(tmp_path)
    rel = wheelhouse(tmp_path, "0.1.0")
    with Store(tmp_path / "store.db") as store:
        d, result = deploy_all(site, rel, world, store)
        assert result.state == "done", result.detail
        for n in NODES:
            base = tmp_path / n
            assert os.readlink(base / "opt/slurmadm/current") == f"releases/{rel.name}"
            assert (base / f"opt/slurmadm/releases/{rel.name}/.slurmadm-release").read_text().strip() == rel.name
            assert not (base / f"opt/slurmadm/wheelhouse/{rel.name}").exists()  # removed once installed
            # the hooks run through current: the release's own scripts
            assert (base / "hooks/prolog.sh").read_text() == f"# prolog.sh of {rel.name}\n"
            env = (base / "hooks/slurmadm.env").read_text()
            assert f"SLURMADM_PYTHON={tmp_path}/{n}/opt/slurmadm/current/bin/python" not in env  # the site's path
            assert f"SLURMADM_PYTHON={tmp_path}/ROOT/opt/slurmadm/current/bin/python" in env
        rows = dep.fold_findings(d.results)
        assert rows == [{"nodes": "b200-[001-004]", "count": 4, "check": "site", "status": "ok",
                         "summary": "site fine", "fix": ""}]
        assert store.events(action="deploy.node")
        # the same again: a plan with nothing in it, nothing written
        d2 = dep.Deployer(site, rel, world)
        assert d2.plan(NODES) == {n: [] for n in NODES}
        # a changed file alone: written, and no install leftovers (no empty wheelhouse directory)
        (tmp_path / "b200-001/hooks/slurmadm.env").write_text("SLURMADM_PYTHON=/usr/bin/python3\n")
        assert [c.action for c in d2.plan(["b200-001"])["b200-001"]] == ["write"]
        d2.apply_node("b200-001")
        assert not list((tmp_path / "b200-001/opt/slurmadm/wheelhouse").iterdir())
        # a finished deploy applied again reads every node again: one broken since is repaired
        (tmp_path / "b200-002/hooks/prolog.sh").unlink()
        d3, again = deploy_all(site, rel, world, store)
        assert again.state == "done" and (tmp_path / "b200-002/hooks/prolog.sh").is_symlink()
        assert [c.action for c in d3.results["b200-002"].changes] == ["link"]
        assert not d3.results["b200-001"].changes
        world.log.clear()
        _, again = deploy_all(site, rel, world, store)
        assert again.state == "done"
        assert not [x for x in world.log if x[1].startswith(("put", "set -e"))]


def test_secrets_are_written_0600_and_never_in_a_command(tmp_path, world):
    secret_path = f"{tmp_path}/ROOT/etc/slurmadm/store.password"
    head = tmp_path / "head-secret"
    head.write_text("s3cret-value\n")
    site = make_site(tmp_path, secrets=[str(head)])
    want = nodemod.desired(site, "0.1.0-aaaaaaaaaaaa", "0.1.0")
    spec = [f for f in want.files if f.secret][0]
    assert spec.mode == 0o600 and spec.path == str(head)
    rel = wheelhouse(tmp_path, "0.1.0")
    # the secret goes to the node at the head's path: give the fake its own copy of that path
    site = make_site(tmp_path, secrets=[secret_path])
    (tmp_path / "ROOT/etc/slurmadm").mkdir(parents=True)
    Path(secret_path).write_text("s3cret-value\n")
    with Store(tmp_path / "store.db") as store:
        d, result = deploy_all(site, rel, world, store, ["b200-001"])
    assert result.state == "done", result.detail
    got = tmp_path / "b200-001/etc/slurmadm/store.password"
    assert got.read_text() == "s3cret-value\n" and got.stat().st_mode & 0o777 == 0o600
    everything = json.dumps(world.log) + json.dumps([r.as_dict() for r in d.results.values()])
    assert "s3cret" not in everything
    with Store(tmp_path / "store.db") as store:
        assert "s3cret" not in json.dumps([e for e in store.events()], default=str)
    line = [c for c in d.results["b200-001"].changes if c.path == secret_path][0].line()
    assert "content not shown" in line


def test_upgrade_a_failing_doctor_goes_back_and_stops_the_rollout(tmp_path, world):
    site = make_site(tmp_path, keep_releases=0)
    old, new = wheelhouse(tmp_path, "0.1.0"), wheelhouse(tmp_path, "0.2.0")
    with Store(tmp_path / "store.db") as store:
        assert deploy_all(site, old, world, store)[1].state == "done"
        # the canary (b200-001, b200-002) passes; b200-003 (wave 1) fails its doctor on the new release
        (tmp_path / "b200-003/opt/slurmadm/FAIL-DOCTOR").touch()
        d, result = deploy_all(site, new, world, store)
    assert result.waves == [["b200-001", "b200-002"], ["b200-003"], ["b200-004"]]
    assert result.state == "stopped", result.detail
    cur = {n: os.readlink(tmp_path / n / "opt/slurmadm/current") for n in NODES}
    assert cur["b200-001"] == cur["b200-002"] == f"releases/{new.name}"
    assert cur["b200-003"] == f"releases/{old.name}"  # back on the old release
    assert d.results["b200-003"].reverted and "NVML broken" in d.results["b200-003"].error
    assert (tmp_path / "b200-003/hooks/prolog.sh").read_text() == f"# prolog.sh of {old.name}\n"
    # the failure budget (0 of 4) stopped the rollout: b200-004 was not touched
    assert cur["b200-004"] == f"releases/{old.name}" and "b200-004" not in d.results
    assert result.nodes["b200-003"].phase == "failed" and result.nodes["b200-004"].phase == "pending"
    with Store(tmp_path / "store.db") as store:
        assert store.events(action="deploy.revert", target="b200-003")
        from slurmadm.fleet.rollout import status

        assert status(store, result.name)[0].state == "stopped"


def test_canary_failure_leaves_the_other_nodes_untouched(tmp_path, world):
    site = make_site(tmp_path)
    (tmp_path / "b200-001/opt/slurmadm").mkdir(parents=True)
    (tmp_path / "b200-001/opt/slurmadm/FAIL-INSTALL").touch()
    rel = wheelhouse(tmp_path, "0.1.0")
    with Store(tmp_path / "store.db") as store:
        d, result = deploy_all(site, rel, world, store)
    assert result.state == "stopped" and "canary" in result.detail
    assert "install" in result.nodes["b200-001"].detail
    assert result.waves[0][0] == "b200-001"
    for wave in result.waves[1:]:
        for n in wave:
            assert not (tmp_path / n / "opt").exists() and not (tmp_path / n / "hooks").exists()


def test_an_interrupted_install_is_redone(tmp_path, world):
    site = make_site(tmp_path)
    rel = wheelhouse(tmp_path, "0.1.0")
    half = tmp_path / f"b200-001/opt/slurmadm/releases/{rel.name}"
    half.mkdir(parents=True)
    (half / "junk").write_text("half-written")
    plans = dep.Deployer(site, rel, world).plan(["b200-001"])
    assert plans["b200-001"][0].action == "install" and "interrupted" in plans["b200-001"][0].detail
    with Store(tmp_path / "store.db") as store:
        assert deploy_all(site, rel, world, store, ["b200-001"])[1].state == "done"
    assert not (half / "junk").exists() and (half / ".slurmadm-release").exists()


def test_prune_and_rollback(tmp_path, world):
    site = make_site(tmp_path, keep_releases=0)
    rels = [wheelhouse(tmp_path, v) for v in ("0.1.0", "0.2.0", "0.3.0")]
    with Store(tmp_path / "store.db") as store:
        for rel in rels:
            assert deploy_all(site, rel, world, store, ["b200-001"])[1].state == "done"
        have = sorted(p.name for p in (tmp_path / "b200-001/opt/slurmadm/releases").iterdir())
        assert have == sorted([rels[1].name, rels[2].name])  # current and previous; 0.1.0 pruned
        d = dep.Deployer(site, rels[2], world, store=store, reason="test")
        r = d.rollback("b200-001")
        assert r.ok and r.release == rels[1].name
        assert os.readlink(tmp_path / "b200-001/opt/slurmadm/current") == f"releases/{rels[1].name}"
        assert os.readlink(tmp_path / "b200-001/opt/slurmadm/previous") == f"releases/{rels[2].name}"
        assert store.events(action="deploy.rollback", target="b200-001")


def test_unreachable_node_is_reported_not_fatal(tmp_path, world):
    site = make_site(tmp_path, keep_releases=0)
    rel = wheelhouse(tmp_path, "0.1.0")
    world.down.add("b200-003")
    plans = dep.Deployer(site, rel, world).plan(NODES)
    assert isinstance(plans["b200-003"], str) and "refused" in plans["b200-003"]
    folded = dep.fold_plans(plans)
    assert folded[0][0] == ["b200-001", "b200-002", "b200-004"]


def test_probe_parse_and_plan():
    site = parse_site(example_site().read_text())
    want = nodemod.desired(site, "0.2.0-bbbbbbbbbbbb", "0.2.0", site_file=str(example_site()))
    have = nodemod.parse_probe("current releases/0.1.0-aaaaaaaaaaaa\nprevious -\n"
                               "release 0.1.0-aaaaaaaaaaaa ok\nrelease 0.0.9-cccccccccccc ok\n"
                               "release 0.2.0-bbbbbbbbbbbb partial\n")
    got = [(c.action, c.path) for c in nodemod.plan(want, have)]
    assert got[0] == ("install", "/opt/slurmadm/releases/0.2.0-bbbbbbbbbbbb")
    assert got[1] == ("switch", "/opt/slurmadm/current")
    assert ("link", "/opt/slurmadm/prolog_epilog/prolog.sh") in got
    assert ("write", "/opt/slurmadm/prolog_epilog/slurmadm.env") in got
    assert not [c for c in got if c[0] == "prune"]  # keep_releases 2: 0.0.9 stays
    want.keep = 0
    assert nodemod.plan(want, have)[-1].line() == ("prune /opt/slurmadm/releases/0.0.9-cccccccccccc "
                                                   "(older than the releases kept)")
    with pytest.raises(ValueError):
        nodemod.parse_probe("bash: line 1: sh: not found\n")


def test_manifest_names_everything_and_no_secret(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("hunter2-secret")
    data = tomllib.loads(example_site().read_text())
    data["deploy"] = {"secrets": [str(secret)]}
    m = dep.manifest(parse_site(tomli_w.dumps(data)))
    paths = {f["path"]: f for f in m["files"]}
    assert paths[str(secret)]["mode"] == "0600" and "content" not in paths[str(secret)]
    assert "hunter2" not in json.dumps(m)
    assert paths["/opt/slurmadm/prolog_epilog/slurmadm.env"]["content"].count("SLURMADM_PYTHON=/opt/slurmadm/current/bin/python")
    assert {ln["path"] for ln in m["links"]} >= {"/opt/slurmadm/prolog_epilog/prolog.sh", "/opt/slurmadm/current"}
    assert any("--no-index --find-links" in c for c in m["commands"])
    assert m["slurm_conf"]["Prolog"] == "/opt/slurmadm/prolog_epilog/prolog.sh"


def test_release_and_hook_hashes_are_fleet_facts():
    from slurmadm.fleet import _collector, compare

    site = parse_site(example_site().read_text())
    text = _collector(site)
    assert "readlink /opt/slurmadm/current" in text
    assert "/opt/slurmadm/prolog_epilog/prolog.sh" in text and "/opt/slurmadm/prolog_epilog/hook-env.sh" in text
    sha_a, sha_b = "a" * 64, "b" * 64

    def out(release, sha):
        return (f"@@slurmadm\nreleases/{release}\n@@files\n{sha}  /opt/slurmadm/prolog_epilog/prolog.sh\n@@end\n")

    facts = {n: collector.parse(out("0.2.0-bbbbbbbbbbbb", sha_b)) for n in NODES[:3]}
    facts["b200-004"] = collector.parse(out("0.1.0-aaaaaaaaaaaa", sha_a))  # left behind
    assert facts["b200-001"]["slurmadm"] == "0.2.0-bbbbbbbbbbbb"
    diffs = {(d.fact, tuple(d.nodes)) for d in compare(facts, {})}
    assert diffs == {("slurmadm", ("b200-004",)), ("file:/opt/slurmadm/prolog_epilog/prolog.sh", ("b200-004",))}
    # a node without a deploy has no such fact (no `current`): nothing to compare
    assert "slurmadm" not in collector.parse("@@slurmadm\n@@end\n")


def test_the_head_deploys_itself_without_ssh_and_names_stale_hook_paths(tmp_path):
    from slurmadm.deploy import head

    site = make_site(tmp_path)  # ROOT is a plain directory here: the head's own
    rel = wheelhouse(tmp_path, "0.1.0")
    d = dep.Deployer(site, rel, head.LocalRemote(), reason="test")
    assert d.plan(["head-01"])["head-01"][0].action == "install"
    res = d.apply_node("head-01")
    assert res.ok and os.readlink(tmp_path / "ROOT/opt/slurmadm/current") == f"releases/{rel.name}"
    assert (tmp_path / "ROOT/hooks/slurmadm.env").stat().st_mode & 0o777 == 0o644
    assert d.plan(["head-01"]) == {"head-01": []}
    etc = Path(site.slurm.config_dir) / "slurm.conf"
    stale = head.stale_hooks(site)
    if not etc.exists():
        assert set(stale) == {"Prolog", "Epilog", "HealthCheckProgram"}
        assert stale["Prolog"][1] == f"{tmp_path}/ROOT/hooks/prolog.sh"


def test_a_hook_starting_during_the_switch_finds_the_old_or_the_new_release(tmp_path):
    """current is replaced by rename(2): a reader never sees it missing or half made."""
    import threading

    site = make_site(tmp_path)
    want = nodemod.desired(site, "0.2.0-bbbbbbbbbbbb", "0.2.0")
    prefix = Path(want.prefix)
    for rel in ("0.1.0-aaaaaaaaaaaa", "0.2.0-bbbbbbbbbbbb"):
        (prefix / "releases" / rel / "bin").mkdir(parents=True)
        (prefix / "releases" / rel / "bin" / "python").write_text(rel)
    subprocess.run(["/bin/sh", "-c", nodemod.switch_script(want, nodemod.Actual(), "0.1.0-aaaaaaaaaaaa")], check=True)
    seen, stop = set(), threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.add((prefix / "current" / "bin" / "python").read_text())
            except OSError as exc:
                seen.add(f"missing: {exc}")

    t = threading.Thread(target=reader)
    t.start()
    try:
        cur = "0.1.0-aaaaaaaaaaaa"
        for _ in range(30):
            nxt = "0.2.0-bbbbbbbbbbbb" if cur.startswith("0.1") else "0.1.0-aaaaaaaaaaaa"
            subprocess.run(["/bin/sh", "-c", nodemod.switch_script(want, nodemod.Actual(current=cur), nxt)],
                           check=True)
            cur = nxt
    finally:
        stop.set()
        t.join()
    assert seen <= {"0.1.0-aaaaaaaaaaaa", "0.2.0-bbbbbbbbbbbb"}, seen
    assert os.readlink(prefix / "previous") == "releases/0.2.0-bbbbbbbbbbbb"


def test_hooks_not_yet_in_slurm_conf_is_a_warning_other_hook_problems_fail():
    from slurmadm.deploy.engine import _hooks_not_configured_yet

    only_conf = {"check": "hooks", "status": "fail", "fix": "x", "summary": (
        "hooks: Prolog is /tmp/s/prolog_epilog/prolog.sh in scontrol show config, not /opt/slurmadm/prolog_epilog/prolog.sh; "
        "Epilog is (null) in scontrol show config, not /opt/slurmadm/prolog_epilog/epilog.sh")}
    _hooks_not_configured_yet(only_conf)
    assert only_conf["status"] == "warn" and "config apply" in only_conf["fix"]
    broken = {"check": "hooks", "status": "fail", "fix": "x", "summary": (
        "hooks: /opt/slurmadm/prolog_epilog/prolog.sh missing; Prolog is unset in /etc/slurm/slurm.conf, "
        "not /opt/slurmadm/prolog_epilog/prolog.sh")}
    _hooks_not_configured_yet(broken)
    assert broken["status"] == "fail"


def test_stale_hooks_reads_slurm_conf(tmp_path):
    from slurmadm.deploy import head

    data = tomllib.loads(example_site().read_text())
    data["slurm"]["config_dir"] = str(tmp_path)
    site = parse_site(tomli_w.dumps(data))
    (tmp_path / "slurm.conf").write_text("Prolog=/opt/slurmadm/prolog_epilog/prolog.sh  # ok\n"
                                          "Epilog=/old/epilog.sh\n")
    assert head.stale_hooks(site) == {"Epilog": ("/old/epilog.sh", "/opt/slurmadm/prolog_epilog/epilog.sh"),
                                      "HealthCheckProgram": ("", "/opt/slurmadm/prolog_epilog/healthcheck.sh")}
