"""The head's listeners with an exporter-toolkit web config (issue 24): TLS and bcrypt basic
auth on an exporter, scraped by the real curl and the real Prometheus (Debian's), TLS plus the
bearer token on the webhook. Loopback only; no dev cluster needed (a few seconds)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request

import bcrypt
import pytest
import yaml
from prometheus_client.core import GaugeMetricFamily

from slurmadm.devcluster.redfish_emulator import make_certificate
from slurmadm.errors import UsageError
from slurmadm.exporter import webconfig
from slurmadm.exporter.server import make_server

pytestmark = pytest.mark.integration

PASSWORD = "scrape-me-please-7"


class One:
    def collect(self):
        g = GaugeMetricFamily("slurmadm_test_up", "a test gauge")
        g.add_metric([], 1.0)
        yield g


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("web")
    make_certificate(d / "cert.pem", d / "key.pem", d / "ca.pem")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=6)).decode()
    (d / "web.yml").write_text(yaml.safe_dump({"tls_server_config": {"cert_file": "cert.pem", "key_file": "key.pem"},
                                               "basic_auth_users": {"prometheus": hashed}}))
    (d / "pw").write_text(PASSWORD + "\n")
    return d


def serve(server):
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return server.server_address[1]


def curl(*args):
    return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", *args],
                          capture_output=True, text=True, timeout=30)


def test_an_exporter_with_tls_and_basic_auth_answers_only_its_user(tls):
    web = webconfig.load(str(tls / "web.yml"))
    server = make_server(One(), "127.0.0.1:0", web=web)
    port = serve(server)
    try:
        url = f"https://127.0.0.1:{port}/metrics"
        assert curl("--cacert", str(tls / "ca.pem"), "-u", f"prometheus:{PASSWORD}", url).stdout == "200"
        assert curl("--cacert", str(tls / "ca.pem"), "-u", "prometheus:wrong", url).stdout == "401"
        assert curl("--cacert", str(tls / "ca.pem"), url).stdout == "401"
        assert curl(f"http://127.0.0.1:{port}/metrics").stdout != "200"  # no clear-text answer
        # a client that connects and never speaks TLS holds up no one else
        idle = socket.create_connection(("127.0.0.1", port))
        try:
            assert curl("--cacert", str(tls / "ca.pem"), "-u", f"prometheus:{PASSWORD}", url).stdout == "200"
        finally:
            idle.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus is not installed")
def test_real_prometheus_scrapes_it_over_tls_with_basic_auth(tls, tmp_path):
    web = webconfig.load(str(tls / "web.yml"))
    server = make_server(One(), "127.0.0.1:0", web=web)
    port = serve(server)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        prom_port = s.getsockname()[1]
    conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "t", "scheme": "https",
                                "tls_config": {"ca_file": str(tls / "ca.pem")},
                                "basic_auth": {"username": "prometheus", "password_file": str(tls / "pw")},
                                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        value = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/query?query=slurmadm_test_up",
                                            timeout=5) as r:
                    res = json.load(r)["data"]["result"]
                if res:
                    value = res[0]["value"][1]
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert value == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()
        server.server_close()


def test_the_webhook_takes_tls_from_the_web_config_and_keeps_its_bearer_token(tls):
    from slurmadm.monitor.webhook import make_server as webhook_server

    class Quiet:
        def handle(self, alerts):
            return []

    token = "t" * 32
    server = webhook_server("127.0.0.1:0", token=token, max_bytes=65536, isolator=Quiet(),
                            web=webconfig.load(str(tls / "web.yml")))
    port = serve(server)
    try:
        url = f"https://127.0.0.1:{port}/alerts"
        body = json.dumps({"alerts": []})
        ok = curl("--cacert", str(tls / "ca.pem"), "-H", f"Authorization: Bearer {token}", "-d", body, url)
        basic = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        other = curl("--cacert", str(tls / "ca.pem"), "-H", f"Authorization: Basic {basic}", "-d", body, url)
        assert (ok.stdout, other.stdout) == ("200", "401")
    finally:
        server.shutdown()
        server.server_close()


def test_a_bad_web_config_is_one_line(tmp_path):
    for text, what in (("tls_server_config: {cert_file: a.pem}\n", "needs cert_file and key_file"),
                       ("basic_auth_users: {u: plain}\n", "not a bcrypt hash"),
                       ("listen: 1\n", "unknown key"), ("[1, 2\n", "not YAML")):
        (tmp_path / "w.yml").write_text(text)
        with pytest.raises(UsageError, match=what) as exc:
            webconfig.load(str(tmp_path / "w.yml"))
        assert "\n" not in str(exc.value)
    (tmp_path / "k.pem").write_text("x")
    os.chmod(tmp_path / "k.pem", 0o644)
    (tmp_path / "w.yml").write_text("tls_server_config: {cert_file: c.pem, key_file: k.pem}\n")
    with pytest.raises(UsageError, match="readable by others"):
        webconfig.load(str(tmp_path / "w.yml"))
