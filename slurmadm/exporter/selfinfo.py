"""What every exporter says about itself, as Prometheus users expect of any exporter:
`slurmadm_build_info` (value 1, the version in labels; the `<name>_build_info` convention of
prometheus/common's version collector), prometheus_client's `process_*` (CPU, memory, open
files, start time from /proc) and `python_info`."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric


class BuildInfo:
    def __init__(self, mode: str = ""):
        self.mode = mode

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        from .. import __version__

        f = GaugeMetricFamily("slurmadm_build_info", "slurmadm's version and Python, value 1",
                              labels=["version", "pythonversion", "mode"])
        f.add_metric([__version__, platform.python_version(), self.mode], 1)
        yield f


def register_self(registry, mode: str = "") -> None:
    """Add build info, process_* and python_info to an exporter's registry."""
    registry.register(BuildInfo(mode))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
