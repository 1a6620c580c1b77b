"""The generated alertmanager.yml: Debian's `amtool check-config` accepts it with and without a
receiver for people; `amtool config routes test` routes by severity (the webhook gets every alert,
people the site's severities); the inhibit rules; bad people settings are one-line errors that
never echo the chat URL (a secret)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w
import yaml

from slurmadm.errors import SiteError, UsageError
from slurmadm.monitor import promconfig
from slurmadm.site import parse_site

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
SECRET = "https://chat.example.org/hooks/T000/B000/s3cr3t-token"


def _site(**monitor):
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"].update(monitor)
    return parse_site(tomli_w.dumps(data), source="t.toml")


def _amtool(*args: str) -> subprocess.CompletedProcess:
    assert shutil.which("amtool"), "amtool is missing: run scripts/install-system-deps.sh"
    return subprocess.run(["amtool", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture()
def chat_file(tmp_path):
    f = tmp_path / "chat.url"
    f.write_text(SECRET + "\n")
    os.chmod(f, 0o600)
    return f


def _write(tmp_path, site) -> Path:
    cfg = promconfig.alertmanager_config(site, webhook_url="http://127.0.0.1:9412/alerts",
                                         token_file=str(tmp_path / "token"))
    (tmp_path / "token").write_text("t\n")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_amtool_accepts_the_webhook_only_config(tmp_path):
    p = _amtool("check-config", str(_write(tmp_path, _site())))
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr
    assert "2 inhibit rules" in p.stdout and "1 receivers" in p.stdout


def test_amtool_accepts_people_by_mail_and_chat_and_routes_by_severity(tmp_path, chat_file):
    site = _site(people_email_to=["oncall@example.org", "hpc-admins@example.org"], people_smarthost="smtp.example.org:587",
                 people_email_from="slurmadm@example.org", people_chat_url_file=str(chat_file))
    path = _write(tmp_path, site)
    p = _amtool("check-config", str(path))
    assert p.returncode == 0 and "2 receivers" in p.stdout, p.stdout + p.stderr
    assert SECRET not in path.read_text()  # the URL stays in its file
    for labels, want in ((["severity=critical", "alertname=GpuXidFatal", "node=b200-001"], "slurmadm,people"),
                         (["severity=warning", "alertname=GpuXidSeen"], "slurmadm,people"),
                         (["severity=info", "alertname=GpuXidApplication"], "slurmadm")):
        r = _amtool("config", "routes", "test", f"--config.file={path}", *labels)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip() == want, (labels, r.stdout)


def test_people_severities_come_from_the_site(tmp_path):
    path = _write(tmp_path, _site(people_email_to=["oncall@example.org"], people_severities=["critical"]))
    r = _amtool("config", "routes", "test", f"--config.file={path}", "severity=warning")
    assert r.stdout.strip() == "slurmadm"


def test_a_down_node_silences_its_gpu_and_fabric_alerts_only():
    cfg = promconfig.alertmanager_config(_site(), webhook_url="http://x/alerts")
    rule = next(r for r in cfg["inhibit_rules"] if r["source_matchers"] == ['alertname="SlurmNodeDown"'])
    assert rule["equal"] == ["cluster", "node"]
    import re

    targets = re.compile(rule["target_matchers"][0].split("=~", 1)[1].strip('"') + "$")
    for name in ("GpuXidFatal", "GpuOverTemperature", "InfinibandLinkDown", "HealthCheckFailing", "NodeExporterDown"):
        assert targets.match(name), name
    for name in ("SlurmNodeDown", "PartitionDrainedGpusHigh", "HeadExporterDown"):
        assert not targets.match(name), name


def test_bad_people_settings_are_one_line_errors(tmp_path):
    with pytest.raises(SiteError) as exc:
        _site(people_email_to=["not an address"], people_smarthost="smtp")
    lines = exc.value.lines()
    assert any("monitor.people_email_to" in ln for ln in lines) and any("people_smarthost" in ln for ln in lines)
    bad = tmp_path / "chat.url"
    bad.write_text("ftp://chat.example.org/x?token=s3cr3t\n")
    with pytest.raises(UsageError) as err:
        promconfig.alertmanager_config(_site(people_chat_url_file=str(bad)), webhook_url="http://x/alerts")
    assert str(bad) in str(err.value) and "s3cr3t" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UsageError):
        promconfig.alertmanager_config(_site(people_chat_url_file=str(tmp_path / "none")), webhook_url="http://x")
