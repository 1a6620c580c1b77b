"""Slurm 26.05's authenticated metrics, end to end (issue 38), on a dev cluster of this module's own
whose site asks for them (monitor.slurm_metrics_users; ports TEST_PORT_BASE+8000 on).

`slurmadm config` writes MetricsAuthUsers, AuthAltTypes=auth/jwt, AuthAltParameters=jwt_key=...
and SlurmctldHttpAuthParameters=jwt_key=... (without the last, 26.05.5 answers 401 to every
token: tests/fixtures/slurm/26.05/jwt-metrics-auth.txt); `dev-cluster up` makes the key (0600,
SlurmUser's) and Prometheus's JWT (`scontrol token`). Then: a scrape with the token gets 200 and
the metrics, none or a wrong one 401; Prometheus with the generated configuration (its
credentials_file) scrapes all five endpoints; `promtool check config` passes; `doctor` reads
them with the token; `monitor slurm-token` renews it; and neither key nor token is in any
generated file, log or process argument. Skipped where the installed Slurm is older than 26.05
(run it in the forky chroot: TRIXIE_SUITE=forky scripts/trixie-chroot.sh run ...)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import pwd
import stat
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.config.release import METRICS_AUTH_FROM, detect_release, fmt
from slurmadm.devcluster.cluster import DevCluster
from slurmadm.devcluster.daemons import wait_for
from slurmadm.exporter import slurmseries
from slurmadm.resources import example_site
from slurmadm.slurm import jwt
from tests.integration.conftest import TEST_PORT_BASE
from tests.integration.helpers import monitor_stack, prom, run_slurmadm

pytestmark = pytest.mark.integration

# a real user other than root and SlurmUser: Debian's prometheus package makes one; daemon is everywhere
USER = "prometheus" if any(p.pw_name == "prometheus" for p in pwd.getpwall()) else "daemon"


@pytest.fixture(scope="module")
def dc():
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (they start munged, MariaDB and Slurm)")
    rel = detect_release()
    if rel < METRICS_AUTH_FROM:
        pytest.skip(f"Slurm {fmt(rel)} here: authenticated metrics need Slurm {fmt(METRICS_AUTH_FROM)} or later "
                    f"(run it in the forky chroot: TRIXIE_SUITE=forky scripts/trixie-chroot.sh run ...)")
    state = Path(os.environ.get("SLURMADM_TEST_STATE_DIR") or f"/tmp/slurmadm-test-{TEST_PORT_BASE}")
    cluster = DevCluster(state.with_name(state.name + "-jwt"))
    cluster.down(purge=True)
    src = tomllib.loads(example_site().read_text())
    # the dev site puts the token and the key into the state directory (devsite.monitor_settings)
    src["monitor"].update(slurm_metrics_users=[USER], slurm_metrics_token_file="/etc/prometheus/slurm.jwt",
                          slurm_metrics_jwt_key_file="/etc/slurm/jwt_hs256.key")
    cluster.state_dir.mkdir(parents=True, exist_ok=True)
    site_file = cluster.state_dir.with_name(cluster.state_dir.name + "-site.toml")
    site_file.write_text(tomli_w.dumps(src))
    cluster.up(nodes=4, port_base=TEST_PORT_BASE + 8000, timeout=180, bmc=False, ssh=False, site_file=str(site_file))
    yield cluster
    cluster.down(purge=True)
    site_file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def stack(dc):
    yield from monitor_stack(dc)


def env_of(dc) -> dict[str, str]:
    return {**os.environ, **dc.env()}


def get(dc, path: str, token: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", dc.site().slurm.slurmctld_port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def token_of(dc) -> str:
    return Path(dc.site().monitor.slurm_metrics_token_file).read_text().strip()


def forged(claims: dict, key: bytes) -> str:
    """An HS256 JWT signed with `key` (not slurmctld's)."""
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64(json.dumps(claims).encode())
    return head + "." + b64(hmac.new(key, head.encode(), hashlib.sha256).digest())


def test_config_writes_what_slurmctld_needs_and_up_makes_key_and_token(dc):
    m = dc.site().monitor
    assert m.slurm_metrics_users == [USER]
    conf = dc.slurm_conf.read_text()
    key = m.slurm_metrics_jwt_key_file
    for line in (f"MetricsAuthUsers={USER}", "AuthAltTypes=auth/jwt",
                 f"AuthAltParameters=jwt_key={key},disable_token_creation", f"SlurmctldHttpAuthParameters=jwt_key={key}"):
        assert f"\n{line}\n" in conf, line
    assert key.startswith(str(dc.state_dir) + "/")
    st = os.stat(key)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size >= jwt.KEY_BYTES
    assert st.st_uid == pwd.getpwnam(dc.site().slurm_user).pw_uid
    tst = os.stat(m.slurm_metrics_token_file)
    assert stat.S_IMODE(tst.st_mode) == 0o600
    claims = jwt.claims(token_of(dc))
    assert claims.get("sun") == USER and claims["exp"] > time.time() + 3600, sorted(claims)


@pytest.mark.parametrize("endpoint", slurmseries.ENDPOINTS)
def test_a_scrape_with_the_token_gets_the_metrics(dc, endpoint):
    code, text = get(dc, endpoint, token_of(dc))
    assert code == 200, (code, text[:200])
    assert "# TYPE slurm_" in text or (endpoint == "/metrics/jobs-users-accts" and not text.strip()), text[:200]
    if endpoint == "/metrics/nodes":
        for node in dc.nodes():
            assert f'slurm_node_cpus{{node="{node}"}}' in text


def test_no_token_or_a_wrong_one_gets_401(dc):
    good = token_of(dc)
    claims = jwt.claims(good)
    tampered = good.rsplit(".", 1)[0] + "." + "A" * 43
    other_key = forged(claims, os.urandom(32))
    expired = forged({**claims, "iat": int(time.time()) - 7200, "exp": int(time.time()) - 3600},
                     Path(dc.site().monitor.slurm_metrics_jwt_key_file).read_bytes())
    for what, token in (("no token", None), ("a tampered signature", tampered), ("another key's token", other_key),
                        ("garbage", "not-a-jwt"), ("an expired token", expired)):
        code, text = get(dc, "/metrics/nodes", token)
        assert code == 401, (what, code, text[:200])
        assert "slurm_node" not in text
    assert "credential expired" in get(dc, "/metrics/nodes", expired)[1]
    # a valid token of a user not in MetricsAuthUsers: authenticated, not allowed
    code, text = get(dc, "/metrics/nodes", jwt.fetch_token("daemon" if USER != "daemon" else "bin", lifespan_s=300,
                                                           env=dc.env()))
    assert code == 403 and "slurm_node" not in text, (code, text[:200])


def test_prometheus_scrapes_slurmctld_with_the_token_file(stack, dc):
    cfg_path = stack.dir / "prometheus.yml"
    p = subprocess.run(["promtool", "check", "config", str(cfg_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    import yaml

    cfg = yaml.safe_load(cfg_path.read_text())
    m = dc.site().monitor
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == m.slurm_job)
    assert job["authorization"] == {"type": "Bearer", "credentials_file": m.slurm_metrics_token_file}
    assert token_of(dc) not in cfg_path.read_text()
    assert wait_for(lambda: len(prom(stack, f'up{{job="{m.slurm_job}"}} == 1')) == len(slurmseries.ENDPOINTS), 60,
                    interval=0.5), prom(stack, f'up{{job="{m.slurm_job}"}}')
    assert wait_for(lambda: prom(stack, 'slurm_partition_nodes{partition="gpu"}'), 30, interval=0.5)
    nodes = prom(stack, 'slurm_partition_nodes{partition="gpu"}')[0]
    assert float(nodes["value"][1]) == len(dc.nodes())


def test_doctor_reads_slurms_metrics_with_the_token(dc):
    out = run_slurmadm(env_of(dc), "doctor", "--check", "slurmctld", "--check", "slurm-metrics", "--json")
    found = {f["check"]: f for f in json.loads(out.stdout)["findings"]}
    m = found["slurm-metrics"]
    assert m["status"] == "ok", m
    assert m["data"]["probe"]["authenticated"] and m["data"]["probe"]["answer"].startswith("200"), m["data"]
    assert m["data"]["token_expires"] > time.time()
    assert token_of(dc) not in out.stdout + out.stderr


def test_monitor_slurm_token_renews_the_token_without_showing_it(dc):
    old = token_of(dc)
    time.sleep(1.1)  # a token's iat and exp are whole seconds: a new one differs
    out = run_slurmadm(env_of(dc), "monitor", "slurm-token", "--lifespan-days", "2", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    new = token_of(dc)
    assert new != old and new not in out.stdout + out.stderr
    assert 2 * 86400 - 120 < jwt.claims(new)["exp"] - time.time() <= 2 * 86400
    assert json.loads(out.stdout) == {"key_made": False, "token_file": dc.site().monitor.slurm_metrics_token_file,
                                      "user": USER}
    code, _ = get(dc, "/metrics/partitions", new)
    assert code == 200
    # a user who is neither root nor SlurmUser cannot mint one (AuthAltParameters=disable_token_creation)
    p = subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "scontrol", "token"],
                       env=env_of(dc), capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "SLURM_JWT=" not in p.stdout, p.stdout + p.stderr


def test_no_key_or_token_in_any_generated_file_log_or_argv(dc, stack):
    """Last: every file the dev cluster, its Slurm and the monitoring stack wrote by now (configs,
    the dev site, prometheus.yml, every log) and every process's argv name the files only."""
    m = dc.site().monitor
    token, key = token_of(dc).encode(), Path(m.slurm_metrics_jwt_key_file).read_bytes()
    keep = {Path(m.slurm_metrics_token_file), Path(m.slurm_metrics_jwt_key_file)}
    seen = 0
    for path in dc.state_dir.rglob("*"):
        if path in keep or not path.is_file() or path.is_symlink() or "mysql" in path.parts \
                or path.stat().st_size > 64 * 1024 * 1024:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        seen += 1
        assert token not in data and key not in data, path
        assert base64.b64encode(key) not in data and key.hex().encode() not in data, path
    assert seen > 20
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            assert token not in argv and key not in argv, argv[:200]
