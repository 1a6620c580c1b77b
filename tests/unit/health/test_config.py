"""Site keys of [health]: check ids validated, XID overrides validated; the per-node settings
cache keeps the prolog off the site model while the site file is unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.errors import SiteError
from slurmadm.health import config
from slurmadm.site import load_site

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "site.example.toml"


def site_with(tmp_path, mutate) -> Path:
    data = tomllib.loads(EXAMPLE.read_text())
    data["store"]["path"] = str(tmp_path / "slurmadm.db")
    data["health"]["results_log"] = str(tmp_path / "health.jsonl")
    mutate(data)
    path = tmp_path / "site.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize("mutate,expected", [
    (lambda d: d["health"]["checks"].update({"ecc-uncorected": {"on_fail": "warn"}}),
     "health.checks.ecc-uncorected: unknown check id (did you mean 'ecc-uncorrected'?)"),
    (lambda d: d["health"].update({"xid_actions": {"seventy-nine": "fail"}}),
     "health.xid_actions: XID 'seventy-nine' is not a number"),
    (lambda d: d["health"]["xid_actions"].update({"79": "drain"}), "health.xid_actions.79"),
    (lambda d: d["health"]["models"].update({"B200": {"max_gpu_temp_c": 80}}),
     "health.models.B200: no node profile has GPU model 'B200'"),
    (lambda d: d["health"]["checks"].update({"xid": {"contexts": ["prolog", "burnin"]}}), "health.checks.xid.contexts[1]"),
])
def test_bad_health_keys_are_refused(tmp_path, mutate, expected):
    path = site_with(tmp_path, mutate)
    with pytest.raises(SiteError) as err:
        load_site(path)
    assert any(expected in line for line in err.value.lines()), err.value.lines()
    result = CliRunner().invoke(cli, ["site", "validate", "--site", str(path)])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output


def test_settings_resolve_per_node_and_cache_skips_the_site_model(tmp_path, monkeypatch):
    path = site_with(tmp_path, lambda d: d["health"].update({"xid_source": "/var/log/{node}.kern"}))
    cache = tmp_path / "cache"
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(cache))
    cfg = config.load("b200-007", str(path))
    assert cfg.gpu.count == 8 and cfg.gpu.nvml_name == "NVIDIA B200" and cfg.gpu.nvlinks == 18
    assert cfg.xid_source == "/var/log/b200-007.kern"
    assert cfg.policies["persistence-mode"]["on_fail"] == "warn"
    assert len(list(cache.glob("health-b200-007-*.json"))) == 1

    probe = ("import sys, json; from slurmadm.health import config; c = config.load('b200-007', sys.argv[1]); "
             "print(json.dumps({'pydantic': 'pydantic' in sys.modules, 'temp': c.thresholds.max_gpu_temp_c}))")
    env = {"SLURMADM_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    out = json.loads(subprocess.run([sys.executable, "-c", probe, str(path)], env=env, capture_output=True,
                                    text=True, check=True).stdout)
    assert out == {"pydantic": False, "temp": 87}

    # an edited site file is a different key: re-resolved (through the site model) at once
    path.write_text(path.read_text().replace("max_gpu_temp_c = 87", "max_gpu_temp_c = 80"))
    out = json.loads(subprocess.run([sys.executable, "-c", probe, str(path)], env=env, capture_output=True,
                                    text=True, check=True).stdout)
    assert out == {"pydantic": True, "temp": 80}


def test_unknown_node_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(Exception, match="not one of the site's nodes"):
        config.load("gpu-999", str(site_with(tmp_path, lambda d: None)))
