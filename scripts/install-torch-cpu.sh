#!/usr/bin/env bash
# Install a CPU-only torch (the `burnin` extra) into a Python environment, without pulling the
# multi-gigabyte CUDA build that a plain `pip install torch` brings on Linux.
#
#   scripts/install-torch-cpu.sh [PYTHON]     (default: $PYTHON, then python3)
#
# Tried in order, first success wins:
#   1. PyTorch's CPU wheel index (short timeout: offline machines move on quickly);
#   2. a local `torch-*+cpu-*.whl` for this Python in one of pip's configured find-links
#      (`pip config list`, $PIP_FIND_LINKS), its dependencies from the configured index;
#   3. plain `pip install torch` (whatever the configured index has).
# A torch that already imports is left alone (exit 0). Real GPU nodes want the CUDA build:
# install it with pip as usual there; slurmadm picks NCCL when CUDA is available.
set -euo pipefail

PY="${1:-${PYTHON:-python3}}"
PIP=("$PY" -m pip --disable-pip-version-check)

if "$PY" -W ignore -c 'import torch' >/dev/null 2>&1; then
    echo "torch $("$PY" -W ignore -c 'import torch; print(torch.__version__)') already installed in $PY"
    exit 0
fi

say() { echo "install-torch-cpu: $*" >&2; }

# 1. PyTorch's own CPU index, with pip's configuration files and extra indexes switched off for
# this attempt (an extra index or find-links could otherwise offer a newer CUDA build).
say "trying https://download.pytorch.org/whl/cpu"
if PIP_CONFIG_FILE=/dev/null PIP_EXTRA_INDEX_URL= PIP_FIND_LINKS= PIP_CONSTRAINT= \
        "${PIP[@]}" install --timeout 10 --retries 0 \
        --index-url https://download.pytorch.org/whl/cpu torch >/dev/null 2>&1; then
    say "installed from download.pytorch.org/whl/cpu"
    exit 0
fi

# 2. A local +cpu wheel for this interpreter in pip's find-links.
tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
arch="$(uname -m)"
links="${PIP_FIND_LINKS:-}"
links+=" $("${PIP[@]}" config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr '\n' ' ')"
wheel=""
for link in $links; do
    dir="${link#file://}"
    [ -d "$dir" ] || continue
    # newest version first (sort -V), this Python's tag and this machine's architecture
    found="$(ls -1 "$dir"/torch-*+cpu-"$tag"-"$tag"-*"$arch"*.whl 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -n "$found" ]; then wheel="$found"; break; fi
done
if [ -n "$wheel" ]; then
    say "installing $wheel"
    "${PIP[@]}" install "$wheel"  # a file requirement: pip cannot swap it for another build
    exit 0
fi

# 3. Whatever the configured index offers.
say "no CPU wheel found; falling back to: pip install torch"
"${PIP[@]}" install torch
