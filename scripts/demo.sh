#!/usr/bin/env bash
# The demo on a fresh Debian 12/13 machine, as root: installs slurmadm, brings up a 4-node dev
# cluster of fake B200 nodes (real Slurm), and shows slurmadm working on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$(pwd)/.venv/bin:$PATH"
STATE=${SLURMADM_DEV_STATE_DIR:-/var/lib/slurmadm/dev-cluster}

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "validate the reference site (128 x 8 B200)"
slurmadm site validate --site site.example.toml

step "bring up a 4-node dev cluster (munge, MariaDB, slurmdbd, slurmctld, 4 x slurmd)"
slurmadm dev-cluster up --nodes 4 --state-dir "$STATE"
eval "$(slurmadm dev-cluster env --state-dir "$STATE")"

step "Slurm sees 4 idle B200 nodes with 8 GPUs each"
sinfo -N -o "%N %T %G %c %m"
sacctmgr -n show cluster format=cluster,controlhost,controlport

step "a GPU job gets its GPUs like on a real node"
sbatch --wait --gres=gpu:8 -o "$STATE/demo-job.out" --wrap 'echo "$(hostname -s)/$SLURMD_NODENAME: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' >/dev/null
cat "$STATE/demo-job.out"

step "nightly burn-in: a short sweep of the 4 nodes (real jobs in QOS burnin, gloo all-reduce through srun)"
scripts/install-torch-cpu.sh .venv/bin/python
if ! slurmadm accounts apply --reason "demo" >/dev/null 2>&1; then
  # until `slurmadm accounts apply` creates them from the site: the burnin QOS and project
  sacctmgr -i add qos burnin >/dev/null || true
  sacctmgr -i add account ops parent=root >/dev/null || true
  sacctmgr -i add account ops-burnin parent=ops >/dev/null || true
  sacctmgr -i add user root account=ops-burnin qos=normal,burnin >/dev/null || true
fi
slurmadm burnin run || echo "(exit $?: a node failed burn-in; see the report)"
report="$STATE/burnin/latest/report.html"
if [ -n "${DISPLAY:-}" ] && command -v xdg-open >/dev/null; then
  xdg-open "$report"
else
  echo "report: file://$(readlink -f "$report")   (no display here: open it in a browser)"
fi
slurmadm burnin status

step "done: the dev cluster keeps running"
echo "use it:   eval \"\$(slurmadm dev-cluster env --state-dir $STATE)\""
echo "stop it:  slurmadm dev-cluster down --state-dir $STATE"
