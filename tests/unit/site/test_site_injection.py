"""Issue 15 item 4: no site value can add lines or keys to a Slurm config, numbers stay within what
Slurm stores, and a hostlist too large to expand is refused at once, naming the key.

Each bad site must give one line naming the key (exit 2 from the CLI) and never reach a rendered
file; the injections are the ones found by the adversarial run (`SlurmUser=slurm` + a newline +
`AuthType=auth/none`, a NodeAddr followed by ` State=DOWN`, RealMemory beyond uint64)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import slurmadm.hostlist as hostlist_mod
from slurmadm.cli import cli
from slurmadm.config import render
from slurmadm.errors import SiteError
from slurmadm.site import parse_site
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit

INJECT = "slurm\nAuthType=auth/none"

BAD = [
    ("slurm-user-newline", put("cluster.slurm_user", INJECT), "cluster.slurm_user:"),
    ("slurm-user-space", put("cluster.slurm_user", "slurm State=DOWN"), "cluster.slurm_user:"),
    ("log-dir-newline", put("slurm.log_dir", "/var/log/slurm\nAuthType=auth/none"), "slurm.log_dir:"),
    ("prolog-dir-newline", put("slurm.prolog_dir", "/opt/x\nAuthType=auth/none"), "slurm.prolog_dir:"),
    ("state-save-space", put("slurm.state_save_location", "/var/spool/x y"), "slurm.state_save_location:"),
    ("munge-socket-cr", put("slurm.munge_socket", "/run/munge/sock\rAuthType=auth/none"), "slurm.munge_socket:"),
    ("munge-socket-hash", put("slurm.munge_socket", "/run/munge#x"), "slurm.munge_socket:"),
    ("spool-quote", put("slurm.slurmd_spool_dir", '/var/spool/"d'), "slurm.slurmd_spool_dir:"),
    ("reboot-newline", put("slurm.reboot_program", "/usr/sbin/reboot\nAuthType=auth/none"), "slurm.reboot_program:"),
    ("reboot-relative", put("slurm.reboot_program", "reboot -f"), "slurm.reboot_program:"),
    ("reboot-tab", put("slurm.reboot_program", "/usr/sbin/reboot\t-f"), "slurm.reboot_program:"),
    ("node-addr-space", put("nodes.0.addr", "10.0.0.1 State=DOWN"), "nodes[0].addr:"),
    ("node-hostname-newline", put("nodes.0.hostname", "head\nAuthType=auth/none"), "nodes[0].hostname:"),
    ("node-names-space", put("nodes.0.names", "b200-[001-128] State=DOWN"), "nodes[0].names:"),
    ("partition-nodes-newline", put("partitions.1.nodes", "b200-[001-004]\nAuthType=auth/none"),
     "partitions[1].nodes:"),
    ("extra-newline", put("slurm.extra", {"MailDomain": "example.org\nAuthType=auth/none"}), "slurm.extra.MailDomain:"),
    ("extra-hash", put("slurm.extra", {"MailDomain": "example.org #"}), "slurm.extra.MailDomain:"),
    ("extra-quote", put("slurm.extra", {"MailDomain": 'a" AuthType=auth/none "'}), "slurm.extra.MailDomain:"),
    ("device-files-newline", put("profiles.hgx-b200.gpus.device_files", "/dev/nvidia[0-7]\nAuthType=auth/none"),
     "profiles.hgx-b200.gpus.device_files:"),
    ("gpu-cores-newline", put("profiles.hgx-b200.gpus.cores", ["0-55\nAuthType=auth/none"] * 8),
     "profiles.hgx-b200.gpus.cores[0]:"),
    ("storage-user-space", put("database.storage_user", "slurm x"), "database.storage_user:"),
    ("store-path-newline", put("store.path", "/var/lib/x.db\nfoo"), "store.path:"),
    ("memory-beyond-uint64", put("profiles.hgx-b200.memory_gib", 2**63 - 1), "profiles.hgx-b200.memory_gib:"),
    ("cpus-beyond-uint16", lambda d: d["profiles"]["hgx-b200"].update(cpus=70000, sockets=2, cores_per_socket=35000,
                                                                      threads_per_core=1),
     "profiles.hgx-b200.cpus:"),
    ("weight-beyond-uint32", put("slurm.priority.weight_fairshare", 2**32), "slurm.priority.weight_fairshare:"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_injection_is_refused_naming_the_key(case):
    _, edit, key = case
    with pytest.raises(SiteError) as err:
        parse_site(edited(edit))
    lines = err.value.lines()
    assert any(key in line for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_cli_gives_one_line_and_exit_2(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(edited(put("cluster.slurm_user", INJECT)))
    result = CliRunner().invoke(cli, ["site", "validate", "--site", str(path)])
    assert result.exit_code == 2
    assert "cluster.slurm_user:" in result.output and "Traceback" not in result.output


def test_allowed_values_are_quoted_where_slurm_allows_quotes():
    site = parse_site(edited(put("slurm.reboot_program", "/usr/sbin/shutdown -r now"),
                             put("slurm.extra", {"MailDomain": "mail example"})))
    conf = render(site, (22, 5))["slurm.conf"]
    assert 'RebootProgram="/usr/sbin/shutdown -r now"\n' in conf
    assert 'MailDomain="mail example"\n' in conf


def test_every_rendered_line_is_one_setting():
    """The rendered example: each non-comment line is `Key=value` pairs with no stray text."""
    import re

    for name, text in render(parse_site(edited()), (22, 5)).items():
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            assert re.fullmatch(r'([A-Za-z]+=("[^"#]*"|[^\s"#]+))( [A-Za-z]+=("[^"#]*"|[^\s"#]+))*', line), (name, line)


def test_huge_hostlist_is_refused_without_expanding_it(monkeypatch):
    """`b200-[0000001-2000000]` took minutes; it must be refused before ClusterShell builds it."""
    real = hostlist_mod.NodeSet

    def guarded(pattern=None, *args, **kwargs):
        assert not (isinstance(pattern, str) and "2000000" in pattern), "the huge hostlist was expanded"
        return real(pattern, *args, **kwargs)

    monkeypatch.setattr(hostlist_mod, "NodeSet", guarded)
    with pytest.raises(SiteError) as err:
        parse_site(edited(put("nodes.0.names", "b200-[0000001-2000000]")))
    lines = err.value.problems
    assert len(lines) == 1 and lines[0].startswith("nodes[0].names:") and "2,000,000 nodes" in lines[0], lines


def test_many_groups_cannot_add_up_to_a_huge_site():
    groups = [{"names": f"g{i}-[00001-60000]"} for i in range(3)]
    with pytest.raises(SiteError) as err:
        parse_site(edited(put("nodes", groups)))
    assert any(line.startswith("nodes[1].names:") and "120,000 nodes" in line for line in err.value.problems), \
        err.value.problems


def test_hostlist_size_counts_without_expanding():
    assert hostlist_mod.hostlist_size("b200-[001-128]") == 128
    assert hostlist_mod.hostlist_size("a[1-3]b[1-2],c,d[1-10/2]") == 12
    assert hostlist_mod.hostlist_size("x[0000001-2000000]") == 2_000_000


@pytest.mark.parametrize("edit, key", [
    (put("organizations.1.fairshare", 2**40), "organizations[1].fairshare"),
    (put("qos.0.priority", 2**32), "qos[0].priority"),
    (put("projects.1.gpu_hours", 2**62), "projects[1].gpu_hours"),
    (put("partitions.0.max_time", "99999999999-00:00:00"), "partitions[0].max_time"),
], ids=["fairshare-uint32", "qos-priority-uint32", "gpu-hours-uint64-minutes", "max-time-uint32-minutes"])
def test_numbers_beyond_what_slurm_stores_are_refused(edit, key):
    import slurmadm.config  # noqa: F401  (registers the config rules with site validation)

    with pytest.raises(SiteError) as err:
        parse_site(edited(edit))
    assert any(line.startswith(f"{key}:") for line in err.value.problems), err.value.problems
