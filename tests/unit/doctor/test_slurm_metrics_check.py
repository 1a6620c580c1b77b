"""`slurmadm doctor`'s slurm-metrics check (issue 38): which Slurm exports its own metrics, whether
slurmctld is set to, whether its /metrics answers (a real HTTP server on loopback standing in
for slurmctld's listener), and whether the JWT Prometheus sends is still good."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time

import pytest

from slurmadm import doctor
from slurmadm.doctor import checks
from tests.unit.doctor.test_doctor import _fake_scontrol
from tests.unit.siteedit import put, site_file

pytestmark = pytest.mark.unit


class Slurmctld(http.server.BaseHTTPRequestHandler):
    status = 200
    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        body = b"# TYPE slurm_nodes gauge\nslurm_nodes 4\n" if self.status == 200 else b"Unauthorized"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def slurmctld():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slurmctld)
    Slurmctld.seen, Slurmctld.status = [], 200
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _finding(tmp_path, monkeypatch, *edits, config=""):
    site = site_file(tmp_path, monkeypatch, *edits)
    _fake_scontrol(tmp_path, monkeypatch, config)
    ctx = doctor.Context(site_file=str(site))
    doctor.run(ctx, ["site"])
    return checks.slurm_metrics(ctx)


def _token(exp: float) -> str:
    def part(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sun': 'prometheus', 'exp': int(exp)})}.c2ln"


def test_a_release_without_metrics_or_metrics_off_keep_every_series_here(tmp_path, monkeypatch):
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "22.05"))
    assert f.status == "ok" and "Slurm 22.05 has no metrics of its own" in f.summary
    assert f.data["replaced"] == {} and f.data["kept"]
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "26.05"), put("monitor.slurm_metrics", False))
    assert f.status == "ok" and "off" in f.summary and f.data["replaced"] == {}


def test_26_05_without_metrics_type_names_the_fix(tmp_path, monkeypatch):
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "26.05"), config="MetricsType = (null)\n")
    assert f.status == "warn" and "MetricsType=(null)" in f.summary and "config apply" in f.fix
    assert f.data["replaced"]  # what the head exporter leaves to slurmctld is listed


def test_26_05_with_metrics_probes_slurmctld(tmp_path, monkeypatch, slurmctld):
    conf = f"MetricsType = metrics/openmetrics\nSlurmctldHost[0] = head(127.0.0.1)\nSlurmctldPort = {slurmctld}\n"
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "26.05"), config=conf)
    assert f.status == "ok", f.summary
    assert f.data["probe"]["ok"] and Slurmctld.seen == [("/metrics/nodes", None)]
    Slurmctld.status = 401
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "26.05"), config=conf)
    assert f.status == "warn" and "401" in f.summary and "SlurmMetricsDown" in f.fix


@pytest.mark.parametrize("exp_in_s, status, words", [
    (-3600, "warn", "expired"),
    (2 * 86400, "warn", "expires in 2.0 days"),
    (30 * 86400, "ok", ""),
])
def test_the_jwt_prometheus_sends_is_read_and_never_shown(tmp_path, monkeypatch, slurmctld, exp_in_s, status, words):
    token = _token(time.time() + exp_in_s)
    (tmp_path / "token").write_text(token + "\n")
    conf = f"MetricsType = metrics/openmetrics\nSlurmctldHost[0] = head(127.0.0.1)\nSlurmctldPort = {slurmctld}\n"
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "26.05"),
                 put("monitor.slurm_metrics_users", ["prometheus"]),
                 put("monitor.slurm_metrics_token_file", str(tmp_path / "token")),
                 put("monitor.slurm_metrics_jwt_key_file", str(tmp_path / "jwt.key")), config=conf)
    assert f.status == status and words in f.summary, f.summary
    if status == "ok" or "expires" in words:
        assert Slurmctld.seen[-1] == ("/metrics/nodes", f"Bearer {token}")  # sent, as Prometheus will
    assert token not in json.dumps(f.data) + f.summary + (f.fix or "")


def test_a_token_file_it_cannot_read_is_one_warning(tmp_path, monkeypatch):
    f = _finding(tmp_path, monkeypatch, put("slurm.release", "26.05"),
                 put("monitor.slurm_metrics_users", ["prometheus"]),
                 put("monitor.slurm_metrics_token_file", str(tmp_path / "none")),
                 put("monitor.slurm_metrics_jwt_key_file", str(tmp_path / "jwt.key")),
                 config="MetricsType = metrics/openmetrics\n")
    assert f.status == "warn" and "no JWT to send" in f.summary and "slurm-token" in f.fix
