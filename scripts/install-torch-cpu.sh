#!/usr/bin/env bash
# Install a CPU-only torch (the `burnin` extra) into a Python environment, without pulling the
# multi-gigabyte CUDA build that a plain `pip install torch` brings on Linux.
#
#   scripts/install-torch-cpu.sh [PYTHON]     (default: $PYTHON, then python3)
#
# Tried in order, first success wins (no index host is named here: they come from the machine's
# own configuration):
#   1. a CPU wheel index the admin names in $TORCH_CPU_INDEX_URL (e.g. PyTorch's own CPU index or
#      a local mirror of it), with a short timeout;
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

# 1. A CPU wheel index the admin configured, with pip's configuration files and extra indexes
# switched off for this attempt (an extra index or find-links could offer a newer CUDA build).
if [ -n "${TORCH_CPU_INDEX_URL:-}" ]; then
    say "trying \$TORCH_CPU_INDEX_URL"
    if PIP_CONFIG_FILE=/dev/null PIP_EXTRA_INDEX_URL= PIP_FIND_LINKS= PIP_CONSTRAINT= \
            "${PIP[@]}" install --timeout 10 --retries 0 \
            --index-url "$TORCH_CPU_INDEX_URL" torch >/dev/null 2>&1; then
        say "installed from \$TORCH_CPU_INDEX_URL"
        exit 0
    fi
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
