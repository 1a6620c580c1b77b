#!/usr/bin/env python3
"""`config render` time for 128, 1,024 and 10,000 B200 nodes (issue 3), against a peer in the
same run.

Sites: site.example.toml with N nodes (b200-[00001-N]), cut into scalable units of 32 (the last
one partial when N is not a multiple), every node in partition gpu.

Measured per N (median of --repeat runs):
  load      parse + validate the site (pydantic model, cross-reference and config checks)
  render    slurmadm.config.render: hostlist-compressed NodeName/gres/switch lines
  peer      the plain jinja2 way: one NodeName line and one gres line per node, switch node
            lists written out, same settings (what a template fed the node list produces)

Checks: render of 10,000 nodes under 2 s, and linear growth (the per-node render time at
10,000 nodes is at most twice the one at 1,024). Exit 1 when a check fails.

Usage: .venv/bin/python bench/config_render.py [--sizes 128,1024,10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tomllib

import jinja2
import tomli_w

from slurmadm.config import render
from slurmadm.config.build import gpu_cores, real_memory, slurm_settings
from slurmadm.resources import example_site
from slurmadm.site import Site, parse_site

RELEASE = (22, 5)

PEER_TEMPLATE = jinja2.Template(
    """{% for section in sections %}{% for k, v in section.pairs %}{{ k }}={{ v }}
{% endfor %}{% endfor %}{% for n in nodes %}NodeName={{ n.name }} Sockets={{ n.p.sockets }} \
CoresPerSocket={{ n.p.cores_per_socket }} ThreadsPerCore={{ n.p.threads_per_core }} CPUs={{ n.p.cpus }} \
RealMemory={{ n.mem }} Gres=gpu:{{ n.p.gpus.model }}:{{ n.p.gpus.count }} Features={{ n.features }} State=UNKNOWN
{% endfor %}PartitionName=gpu Nodes={{ nodes | map(attribute="name") | join(",") }} Default=YES State=UP
=== gres.conf
{% for n in nodes %}{% for f, c in n.gpus %}NodeName={{ n.name }} Name=gpu Type={{ n.p.gpus.model }} File={{ f }} Cores={{ c }}
{% endfor %}{% endfor %}=== topology.conf
{% for name, members in units %}SwitchName={{ name }} Nodes={{ members | join(",") }}
{% endfor %}SwitchName=spine Switches={{ units | map(attribute=0) | join(",") }}
"""
)


def make_site_text(n: int) -> str:
    data = tomllib.loads(example_site().read_text())
    data["nodes"][0]["names"] = f"b200-[00001-{n:05d}]"
    del data["topology"]["units"]  # su_size chunks of 32
    data["partitions"][1]["nodes"] = "b200-[00001-00004]"
    data["burnin"]["max_nodes"] = min(data["burnin"]["max_nodes"], n)
    return tomli_w.dumps(data)


def peer(site: Site) -> dict[str, str]:
    unit_of = {node: unit for unit, members in site.scalable_units for node in members}
    nodes = []
    for name in site.node_names:
        prof = site.node_profile(name)
        group = site.node_group_of[name]
        nodes.append({
            "name": name, "p": prof, "mem": real_memory(site, prof),
            "features": ",".join([*group.features, unit_of[name]]),
            "gpus": list(zip(prof.gpus.files(), gpu_cores(prof))),
        })
    text = PEER_TEMPLATE.render(sections=slurm_settings(site), nodes=nodes, units=site.scalable_units)
    slurm, rest = text.split("=== gres.conf\n")
    gres, topo = rest.split("=== topology.conf\n")
    return {"slurm.conf": slurm, "gres.conf": gres, "topology.conf": topo}


def median_time(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="128,1024,10000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    rows = []
    print(f"{'nodes':>6} {'load':>8} {'render':>8} {'us/node':>8} {'lines':>6} {'KiB':>6} "
          f"{'peer':>8} {'peer lines':>10} {'peer KiB':>8}")
    for n in sizes:
        text = make_site_text(n)
        t_load, site = median_time(lambda text=text: parse_site(text), args.repeat)
        t_render, files = median_time(lambda site=site: render(site, RELEASE), args.repeat)
        t_peer, peer_files = median_time(lambda site=site: peer(site), args.repeat)
        lines = sum(t.count("\n") for t in files.values())
        size = sum(len(t) for t in files.values()) / 1024
        peer_lines = sum(t.count("\n") for t in peer_files.values())
        peer_size = sum(len(t) for t in peer_files.values()) / 1024
        rows.append((n, t_render))
        print(f"{n:>6} {t_load:>7.3f}s {t_render:>7.3f}s {t_render / n * 1e6:>8.1f} {lines:>6} {size:>6.0f} "
              f"{t_peer:>7.3f}s {peer_lines:>10} {peer_size:>8.0f}")

    ok = True
    by_size = dict(rows)
    if 10000 in by_size:
        verdict = by_size[10000] < 2.0
        ok &= verdict
        print(f"render 10,000 nodes under 2 s: {'PASS' if verdict else 'FAIL'} ({by_size[10000]:.3f} s)")
    if 1024 in by_size and 10000 in by_size:
        ratio = (by_size[10000] / 10000) / (by_size[1024] / 1024)
        verdict = ratio <= 2.0
        ok &= verdict
        print(f"linear growth (per-node time 10,000 vs 1,024 = {ratio:.2f}, limit 2.0): "
              f"{'PASS' if verdict else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
