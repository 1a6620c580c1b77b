"""A node's software facts: one POSIX sh script per node (one SSH command), parsed here.

The script only reads: files (/etc/os-release, /proc/...), library names, and `--version` style
outputs of tools that exist on the node. It prints `@@<section>` then the raw text; the parsers
below turn each section into facts, so they are tested on real outputs (tests/fixtures/fleet/).
Site input reaches the script only as validated paths (software.hash_files, checked against a
strict pattern by the site model) and package names (checked here).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import UsageError

# Facts compared against [software] (site key -> fact name).
BASELINE_KEYS = {
    "driver_version": "driver",
    "cuda_version": "cuda",
    "nccl_version": "nccl",
    "ofed_version": "ofed",
    "kernel": "kernel",
    "os_image": "os_image",
}
# Facts the collector knows (software.extra may name these; any other extra key is a package).
KNOWN_FACTS = ("os_image", "os", "kernel", "cmdline", "driver", "cuda", "vbios", "nccl", "cudnn", "ofed",
               "mpi", "docker", "podman", "enroot", "pyxis", "nvidia-fabricmanager", "slurmadm")
# Not compared across the fleet (they differ on purpose).
NOT_COMPARED = frozenset({"hostname", "gpus"})  # gpus: each GPU's identity (serials differ by nature)
_PKG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._\-]{0,127}$")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/lib",
            "/usr/local/cuda/lib64", "/usr/local/nccl/lib")
PYXIS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so", "/usr/lib64/slurm/spank_pyxis.so",
         "/usr/local/lib/slurm/spank_pyxis.so", "/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so")


def packages_of(extra: dict[str, str]) -> list[str]:
    """software.extra keys that are package names rather than collector facts."""
    names = [k for k in extra if k not in KNOWN_FACTS]
    bad = [n for n in names if not _PKG_RE.match(n)]
    if bad:
        raise UsageError(f"software.extra: {bad[0]!r} is neither a fact ({', '.join(KNOWN_FACTS)}) nor a package name")
    return sorted(names)


def script(hash_files: Iterable[str] = (), packages: Iterable[str] = (), slurmadm_prefix: str | None = None) -> str:
    """The collector. `hash_files` are site-validated absolute paths/globs (no quotes or spaces);
    `packages` validated names; `slurmadm_prefix` (deploy.prefix): fact `slurmadm`, the release
    <prefix>/current points at (`slurmadm deploy`)."""
    files = " ".join(hash_files)
    for p in packages:
        if not _PKG_RE.match(p):
            raise UsageError(f"package name {p!r} is not allowed")
    pkgs = " ".join(packages)
    if files and not re.fullmatch(r"[A-Za-z0-9_./*?\- ]+", files):
        raise UsageError(f"software.hash_files: {files!r} has characters that are not allowed")
    has = "command -v {0} >/dev/null 2>&1 &&"
    libs = " ".join(f"{d}/libnccl.so.* {d}/libcudnn.so.*" for d in LIB_DIRS)
    # Few processes per node (128 nodes at once): files in one grep, library names and pyxis by
    # shell globbing (builtins), tools only where they exist.
    lines = [
        "exec 2>/dev/null",
        "export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "s() { echo \"@@$1\"; }",
        "s read; grep -H '' " + " ".join(READ_FILES),
        f"s nvidia-smi; {has.format('nvidia-smi')} timeout 30 nvidia-smi -q | "
        "grep -E '^(Driver|KMD|CUDA|CUDA UMD) Version|VBIOS Version|^GPU [0-9A-Fa-f]+:|^    (Product Name|"
        "Serial Number|GPU UUID|Board Part Number) +:'",
        f"s libs; for f in {libs}; do [ -e \"$f\" ] && echo \"${{f##*/}}\"; done",
        f"s ofed; {has.format('ofed_info')} timeout 20 ofed_info -s",
        f"s mpi; {has.format('mpirun')} mpirun --version",
        f"s docker; {has.format('docker')} docker --version",
        f"s podman; {has.format('podman')} podman --version",
        f"s enroot; {has.format('enroot')} enroot version",
        f"s pyxis; for f in {' '.join(PYXIS)}; do [ -e \"$f\" ] && echo \"$f\"; done",
        f"s nvidia-fabricmanager; {has.format('nv-fabricmanager')} nv-fabricmanager --version",
    ]
    if slurmadm_prefix:
        if not re.fullmatch(r"/[A-Za-z0-9_.@+,:=/\-]*", slurmadm_prefix):
            raise UsageError(f"deploy.prefix: {slurmadm_prefix!r} has characters that are not allowed")
        lines.append(f"s slurmadm; readlink {slurmadm_prefix}/current")
    if files:
        lines.append(f"s files; sha256sum {files}")
    if pkgs:
        lines.append(f"s packages; if {has.format('dpkg-query')} true; then dpkg-query -W -f '${{Package}} "
                     f"${{Version}}\\n' {pkgs}; else rpm -q --qf '%{{NAME}} %{{VERSION}}-%{{RELEASE}}\\n' {pkgs}; fi")
    lines.append("s end")
    return "\n".join(lines) + "\n"


# Read in one `grep -H '' FILE...` (each line comes back as FILE:LINE); section name per file.
READ_FILES = ("/etc/os-release", "/proc/sys/kernel/osrelease", "/proc/sys/kernel/hostname", "/proc/cmdline",
              "/proc/driver/nvidia/version")
_READ_SECTION = dict(zip(READ_FILES, ("os-release", "kernel", "hostname", "cmdline", "nvrm")))


def sections(text: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    if "read" in out:  # split the one grep back into its files
        for line in out.pop("read"):
            for path, name in _READ_SECTION.items():
                if line.startswith(path + ":"):
                    out.setdefault(name, []).append(line[len(path) + 1:])
                    break
    return {k: "\n".join(v).strip() for k, v in out.items()}


def _os_release(text: str) -> dict[str, str]:
    vals = {}
    for line in text.splitlines():
        key, sep, val = line.partition("=")
        if sep:
            vals[key.strip()] = val.strip().strip('"').strip("'")
    return vals


def parse_nvrm(text: str) -> str | None:
    """The loaded kernel module's version from /proc/driver/nvidia/version (proprietary:
    `... Kernel Module  580.173.02  Tue Jun ...`; open: `... Open Kernel Module for x86_64  565.57.01  Release Build ...`)."""
    m = re.search(r"^NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s", text + " ", re.M)
    return m.group(1) if m else None


def parse_smi(text: str) -> dict[str, str]:
    """`nvidia-smi -q` header lines: driver, CUDA (or its newer `CUDA UMD Version` label), VBIOS per GPU."""
    out: dict[str, str] = {}
    vbios = []
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        key, val = key.strip(), val.strip()
        if key in ("CUDA Version", "CUDA UMD Version") and re.match(r"^\d+\.\d+", val):
            out.setdefault("cuda", val)
        elif key in ("Driver Version", "KMD Version") and re.match(r"^\d+\.\d+", val):
            out.setdefault("smi_driver", val)
        elif key == "VBIOS Version" and val and val != "N/A":
            vbios.append(val)
    if vbios:
        distinct = sorted(set(vbios))
        out["vbios"] = distinct[0] if len(distinct) == 1 else "mixed:" + ",".join(distinct)
    return out


_SMI_GPU_KEYS = {"Product Name": "name", "Serial Number": "serial", "GPU UUID": "uuid",
                 "Board Part Number": "board_part", "VBIOS Version": "vbios"}


def parse_smi_gpus(text: str) -> list[dict[str, str | int]]:
    """Each GPU's identity from `nvidia-smi -q` (whole, or the collector's grep of it): a
    `GPU <bus id>` header per GPU, in NVML index order (PCI bus order), then its Product Name,
    Serial Number, GPU UUID, Board Part Number and VBIOS Version (N/A left out)."""
    gpus: list[dict[str, str | int]] = []
    for line in text.splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", line)
        if m:
            gpus.append({"index": len(gpus), "bus_id": m.group(1)})
            continue
        if not gpus or not line.startswith("    ") or line.startswith("        "):
            continue  # only the GPU's own top-level lines (not its sections' nested ones)
        key, sep, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if sep and key in _SMI_GPU_KEYS and val and val != "N/A":
            gpus[-1].setdefault(_SMI_GPU_KEYS[key], val)
    return gpus


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.\-]", v))


def parse_libs(text: str) -> dict[str, str]:
    """`libnccl.so.2.25.1` -> nccl 2.25.1 (the highest full version of each library)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^lib(nccl|cudnn)\.so\.(\d+(?:\.\d+)+)$", line.strip())
        if m:
            found.setdefault(m.group(1), []).append(m.group(2))
    return {lib: max(vs, key=_version_key) for lib, vs in found.items()}


def parse_ofed(text: str) -> str | None:
    """`ofed_info -s`: `MLNX_OFED_LINUX-24.10-1.1.4.0:` or DOCA's `OFED-internal-25.01-0.6.0:`."""
    m = re.search(r"-(\d+\.\d+[0-9.\-]*?):?\s*$", text.strip().splitlines()[0] if text.strip() else "")
    return m.group(1) if m else None


def _first_version(text: str) -> str | None:
    m = re.search(r"(\d+\.\d+(?:\.\d+)*(?:[-+~][A-Za-z0-9.]+)?)", text)
    return m.group(1) if m else None


def parse(text: str) -> dict[str, str]:
    """The collector's output -> facts (absent facts are left out)."""
    sec = sections(text)
    if "end" not in sec:
        raise ValueError("collector output incomplete (no end marker)")
    facts: dict[str, str] = {}
    osr = _os_release(sec.get("os-release", ""))
    if osr:
        base = f"{osr.get('ID', 'unknown')}-{osr.get('VERSION_ID', '')}".rstrip("-")
        facts["os"] = base
        facts["os_image"] = osr.get("IMAGE_ID") or base
        if osr.get("IMAGE_VERSION"):
            facts["os_image_version"] = osr["IMAGE_VERSION"]
    for key in ("kernel", "hostname", "cmdline"):
        if sec.get(key):
            facts[key] = sec[key].splitlines()[0].strip()
    smi = parse_smi(sec.get("nvidia-smi", ""))
    driver = parse_nvrm(sec.get("nvrm", "")) or smi.get("smi_driver")
    if driver:
        facts["driver"] = driver
    for key in ("cuda", "vbios"):
        if key in smi:
            facts[key] = smi[key]
    gpus = parse_smi_gpus(sec.get("nvidia-smi", ""))
    if gpus:
        import json

        facts["gpus"] = json.dumps(gpus, sort_keys=True, separators=(",", ":"))
    facts.update(parse_libs(sec.get("libs", "")))
    ofed = parse_ofed(sec.get("ofed", ""))
    if ofed:
        facts["ofed"] = ofed
    for key in ("mpi", "docker", "podman", "enroot", "nvidia-fabricmanager"):
        v = _first_version(sec.get(key, ""))
        if v:
            facts[key] = v
    if sec.get("pyxis"):
        facts["pyxis"] = "installed"
    release = sec.get("slurmadm", "").strip().rstrip("/").rsplit("/", 1)[-1]
    if release:
        facts["slurmadm"] = release
    for line in sec.get("files", "").splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            facts[f"file:{parts[1].lstrip('*')}"] = parts[0]
    for line in sec.get("packages", "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            facts[f"pkg:{parts[0]}"] = parts[1]
    return facts


def baseline(software) -> dict[str, str]:
    """The site's wanted value per fact ([software] and software.extra)."""
    want = {fact: getattr(software, key) for key, fact in BASELINE_KEYS.items()}
    for key, value in software.extra.items():
        want[key if key in KNOWN_FACTS else f"pkg:{key}"] = value
    return want


# Facts cheap enough for the periodic health check on the node itself (file reads only).
CHEAP_FACTS = ("os_image", "kernel", "driver", "nccl")


def local_facts(root: str = "/") -> dict[str, str]:
    """The cheap facts of the machine this runs on, read the way the collector reads them."""
    import os
    from pathlib import Path

    base = Path(root)

    def read(rel: str) -> str:
        try:
            return (base / rel.lstrip("/")).read_text(errors="replace")
        except OSError:
            return ""

    listing = []
    for d in LIB_DIRS:
        try:
            listing += os.listdir(base / d.lstrip("/"))
        except OSError:
            continue
    text = "\n".join([
        "@@os-release", read("/etc/os-release"), "@@kernel", read("/proc/sys/kernel/osrelease"),
        "@@nvrm", read("/proc/driver/nvidia/version"), "@@libs",
        "\n".join(n for n in listing if n.startswith(("libnccl.so.", "libcudnn.so."))), "@@end", ""])
    got = parse(text)
    return {k: v for k, v in got.items() if k in CHEAP_FACTS}
