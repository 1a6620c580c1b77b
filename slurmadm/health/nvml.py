"""NVML through nvidia-ml-py (`pynvml`), as the checks use it.

Every call here may hang (a GPU that fell off the bus, a wedged driver): the runner only ever
calls into this module from worker threads with a deadline (ctypes releases the GIL, so the
main thread keeps its clock). Nothing here waits on its own.
"""

from __future__ import annotations

from dataclasses import field

from ..record import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any


class NvmlUnavailable(Exception):
    """NVML cannot be used at all (library missing, driver not loaded, init failed)."""


@record
class Gpu:
    """One GPU as NVML enumerated it."""

    index: int
    handle: Any = None
    error: str = ""  # why this GPU has no handle (lost, unknown error)
    bus_id: str = ""


@record
class Nvml:
    """An initialised NVML session with a handle per GPU."""

    mod: Any = None
    gpus: list[Gpu] = field(default_factory=list)
    driver_version: str = ""

    @classmethod
    def open(cls) -> "Nvml":
        try:
            pynvml = import_pynvml()
        except ImportError as exc:  # nvidia-ml-py is a dependency; a broken install still must not crash
            raise NvmlUnavailable(f"pynvml not importable ({exc})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"nvmlInit failed: {exc}") from None
        self = cls(pynvml)
        self.driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        for i in range(pynvml.nvmlDeviceGetCount()):
            gpu = Gpu(i)
            try:
                gpu.handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                gpu.bus_id = _text(pynvml.nvmlDeviceGetPciInfo(gpu.handle).busId)
            except pynvml.NVMLError as exc:
                gpu.error = str(exc)
            self.gpus.append(gpu)
        return self

    @property
    def usable(self) -> list[Gpu]:
        return [g for g in self.gpus if g.handle is not None]

    def get(self, fn_name: str, *args: Any) -> Any:
        """Call `pynvml.<fn_name>(*args)`; None when the GPU or driver does not support it."""
        fn = getattr(self.mod, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.mod.NVMLError_NotSupported:
            return None
        except self.mod.NVMLError_FunctionNotFound:
            return None


def import_pynvml():
    """`import pynvml`, without the ~10 ms of imports its `from ctypes.util import find_library`
    drags in (subprocess, shutil, tempfile, bz2, lzma, ...): pynvml calls find_library nowhere on
    Linux (it loads libnvidia-ml.so.1 by name), so a stand-in module serves the import and is
    removed again at once; a caller that does call it gets the real function."""
    import sys

    if "pynvml" in sys.modules or "ctypes.util" in sys.modules or not sys.platform.startswith("linux"):
        import pynvml

        return pynvml
    import types

    stub = types.ModuleType("ctypes.util")

    def find_library(name):
        if sys.modules.get("ctypes.util") is stub:
            del sys.modules["ctypes.util"]
        import ctypes.util

        return ctypes.util.find_library(name)

    stub.find_library = find_library
    sys.modules["ctypes.util"] = stub
    try:
        import pynvml
    finally:
        if sys.modules.get("ctypes.util") is stub:
            del sys.modules["ctypes.util"]
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
