#!/bin/bash
# Memory of N processes that import torch at once (what N burn-in node jobs cost on one machine):
#   bench/torch_import_memory.sh N   (uses .venv/bin/python; prints used MiB before/after, sum of PSS and RSS)
N=${1:-}
case "$N" in ""|*[!0-9]*) echo "usage: $0 N (a number of processes)" >&2; exit 2;; esac
set -u
T=$(mktemp -d)
before=$(free -m | awk '/Mem:/{print $3}')
rm -f $T/tm.*
for i in $(seq $N); do "$(dirname "$0")/../.venv/bin/python" -W ignore -c "import torch, torch.distributed, time, os; open('$T/tm.%d' % os.getpid(),'w').close(); time.sleep(60)" & done
t0=$(date +%s)
while [ $(ls $T/tm.* 2>/dev/null | wc -l) -lt $N ]; do sleep 1; done
t1=$(date +%s)
after=$(free -m | awk '/Mem:/{print $3}')
pss=$(for p in $(pgrep -f "import torch, torch.distributed"); do awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup; done | awk '{s+=$1} END {print s/1024}')
rss=$(for p in $(pgrep -f "import torch, torch.distributed"); do awk '/^Rss:/{print $2}' /proc/$p/smaps_rollup; done | awk '{s+=$1} END {print s/1024}')
echo "N=$N import wall $((t1-t0)) s; used MiB before $before after $after (+$((after-before))); sum PSS $pss MiB; sum RSS $rss MiB"
pkill -f "import torch, torch.distributed"; wait 2>/dev/null
rm -rf "$T"
