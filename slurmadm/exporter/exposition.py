"""The Prometheus text format (0.0.4) for the exporters' registries, byte for byte what
prometheus_client's `generate_latest` writes, at a fraction of its cost per series.

`generate_latest` validates and escapes every label name of every sample (a regex each); the
head exporter has one `slurmadm_node_state` series per node, so on a 10,000-node cluster that was
a large part of a scrape. Here a family's label names are ordered once and only label values are
escaped. Families this module does not write (histograms, summaries, info, timestamps,
`_created` samples: none of slurmadm's collectors makes them) go through `generate_latest`.
tests/unit/monitor/test_exposition.py compares both on the real collectors' output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from ..slurm.parse import gc_paused

_TYPES = {"gauge": "gauge", "counter": "counter", "unknown": "untyped"}
_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LEGACY_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class _Collected:
    """Already collected metrics, as a registry for generate_latest."""

    def __init__(self, metrics: list[Metric]):
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def _plain(metric: Metric) -> bool:
    if metric.type not in _TYPES or not _LEGACY_NAME.match(metric.name):
        return False
    suffix = "_total" if metric.type == "counter" else ""
    for s in metric.samples:
        if s.timestamp is not None or s.exemplar is not None or s.name != metric.name + suffix:
            return False
    return True


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def render(registry) -> bytes:
    """What generate_latest(registry) returns, in the text format Prometheus scrapes. The cyclic
    GC waits meanwhile (a head scrape of a large cluster makes hundreds of thousands of objects
    and no cycles: slurm.parse.gc_paused)."""
    with gc_paused():
        return _render(registry)


def _render(registry) -> bytes:
    metrics = list(registry.collect())
    if not all(_plain(m) for m in metrics):
        return generate_latest(_Collected(metrics))  # type: ignore[arg-type]
    out: list[str] = []
    append = out.append
    go = floatToGoString
    for metric in metrics:
        mname = metric.name + ("_total" if metric.type == "counter" else "")
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        append(f"# HELP {mname} {doc}\n# TYPE {mname} {_TYPES[metric.type]}\n")
        order: list[str] = []
        keys = None  # the label names `order` was sorted from (a dict view: compared as a set)
        for s in metric.samples:
            labels = s.labels
            if not labels:
                append(f"{mname} {go(s.value)}\n")
                continue
            if keys is None or labels.keys() != keys:
                keys, order = labels.keys(), sorted(labels)
                if not all(_LEGACY_LABEL.match(k) for k in order):
                    return generate_latest(_Collected(metrics))  # type: ignore[arg-type]
            body = ",".join([f'{k}="{_escape(labels[k])}"' for k in order])
            append(f"{mname}{{{body}}} {go(s.value)}\n")
    return "".join(out).encode("utf-8")
