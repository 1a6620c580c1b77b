#!/usr/bin/env bash
# The demo on a fresh Debian 12/13 machine, as root: installs slurmadm, brings up a 4-node dev
# cluster of fake B200 nodes (real Slurm, slurmdbd and stand-in GPUs), and shows slurmadm doing
# its job on it: configs from the site, accounts and GPU quotas, a GPU fault caught by the
# prolog (node drained, job requeued elsewhere, node resumed once healthy), a burn-in sweep,
# software drift found over SSH and a canary rollout through Slurm's reboots.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/install-torch-cpu.sh .venv/bin/python >/dev/null   # burn-in all-reduce (gloo on the CPU)
export PATH="$(pwd)/.venv/bin:$PATH"
STATE=${SLURMADM_DEV_STATE_DIR:-/var/lib/slurmadm/dev-cluster}
export COLUMNS=${COLUMNS:-150}   # rich tables: wide enough for the reasons

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
wait_until() {  # wait_until SECONDS WHAT COMMAND...: poll a condition, never a blind sleep
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 "$limit"); do "$@" && return 0; sleep 1; done
  echo "(still waiting for $what after ${limit} s)"; return 1
}

step "the reference site: 128 x 8 B200 in 4 scalable units"
slurmadm site validate --site site.example.toml
slurmadm config render --site site.example.toml --release 22.05 --out "$STATE-reference" 2>/dev/null
grep -E '^(NodeName|PartitionName)' "$STATE-reference/slurm.conf"
grep -E '^NodeName' "$STATE-reference/gres.conf"
grep -E '^SwitchName' "$STATE-reference/topology.conf"

step "a 4-node dev cluster: munge, MariaDB, slurmdbd, slurmctld, 4 x slurmd, stand-in GPUs"
slurmadm dev-cluster up --nodes 4 --ssh --state-dir "$STATE"   # --ssh: an sshd per node (fleet)
eval "$(slurmadm dev-cluster env --state-dir "$STATE")"
sinfo -N -p gpu -o "%N %T %G %c %m %f"
slurmadm config diff --against "$STATE/etc"   # the dev cluster runs `config render` output

step "accounts: GPU quotas, budgets, fairshare and QOS from the site, reconciled into slurmdbd"
slurmadm accounts plan
slurmadm accounts apply --reason "demo"
slurmadm accounts plan --check && echo "second plan: empty"
slurmadm accounts report

step "a GPU job gets its GPUs like on a real node"
sbatch --wait --gres=gpu:8 -o "$STATE/demo-job.out" \
  --wrap 'echo "$SLURMD_NODENAME: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' >/dev/null
cat "$STATE/demo-job.out"

step "health: GPU5 of b200-003 reports an uncorrected ECC error; a job lands there"
slurmadm dev-cluster gpu-fault b200-003 --gpu 5 --kind ecc-uncorrected
for n in b200-001 b200-002 b200-004; do   # keep the others busy so Slurm picks b200-003
  sbatch -w "$n" --exclusive --gres=gpu:8 -J busy -o /dev/null --wrap 'sleep 20' >/dev/null
done
job=$(sbatch --parsable --gres=gpu:8 -J victim -o /dev/null --wrap 'hostname')
wait_until 60 "the prolog's drain" sh -c "sinfo -h -R -n b200-003 | grep -q slurmadm"
sinfo -R
squeue -j "$job" -o "%i %j %T %r"   # requeued (not held): it runs on a healthy node later
echo "cleared the fault; slurmd's HealthCheckProgram resumes the node after clean runs:"
slurmadm dev-cluster gpu-fault b200-003 --clear
wait_until 150 "the resume" sh -c "! sinfo -h -R -n b200-003 | grep -q slurmadm" && echo "b200-003 resumed"
wait_until 240 "the requeued job" sh -c "sacct -n -X -j $job -o State | grep -q COMPLETED" \
  && sacct -X -j "$job" -o JobID,JobName,State,NodeList,Restarts%8 2>/dev/null \
  || sacct -X -j "$job" -o JobID,JobName,State,NodeList

step "health on an HGX B200: NVIDIA's Xid catalog, NVSwitch fabric, InfiniBand (slurmadm health checks lists all)"
# a non-fatal NVLink5 sub-code (catalog: IGNORE) leaves the node in service; a fatal one drains
slurmadm dev-cluster gpu-fault b200-004 --gpu 2 --kind xid --value 144:SAW_MVB:0x8
slurmadm health run --node b200-004 --checks xid --dry-run || true
slurmadm dev-cluster gpu-fault b200-004 --gpu 2 --kind fabric --value not-started
slurmadm dev-cluster ib-fault b200-004 --hca mlx5_3 --kind down
slurmadm health run --node b200-004 --checks fabric,infiniband --dry-run || echo "(exit $?: faults found; dry run, nothing drained)"
slurmadm dev-cluster gpu-fault b200-004 --clear
slurmadm dev-cluster ib-fault b200-004 --clear

step "nightly burn-in: NVLinks down on b200-002, then a sweep of the 4 nodes"
slurmadm dev-cluster gpu-fault b200-002 --gpu 1 --kind nvlink-down --value 2
slurmadm burnin run || echo "(exit $?: a node failed burn-in; see the report)"
if [ -n "${DISPLAY:-}" ] && command -v xdg-open >/dev/null; then
  xdg-open "$STATE/burnin/latest/report.html"   # (no display: the path above opens in any browser)
fi
slurmadm dev-cluster gpu-fault b200-002 --clear
slurmadm burnin status

step "fleet: every node's software stack over SSH; b200-004 has an older NCCL than the baseline"
slurmadm dev-cluster set-software b200-004 nccl=2.21.5 >/dev/null   # its own namespace, its own stack
slurmadm fleet facts
slurmadm fleet drift --drain --reason "demo" || echo "(exit $?: drift found, b200-004 drained)"
sinfo -R -n b200-004
slurmadm fleet run 'b200-[001-004]' -- 'ls /usr/local/lib | grep nccl'   # outputs folded, as clush -b

step "fleet rollout: NCCL 2.26.2, canary first, then waves, through Slurm's own reboots"
cat > "$STATE/nccl-2.26.toml" <<'PLAN'
name = "nccl-2.26.2"
description = "NCCL 2.26.2 on every node"
canary_nodes = 1
wave_fraction = 0.5
# the dev cluster has no GPUs to all-reduce on: the health suite without the NCCL check
health_command = "slurmadm health run --dry-run --json --checks gpu-count,ecc-uncorrected,xid,nvlink,driver-version"
[[steps]]
run = "dev-software install nccl=2.26.2"   # a real site: packages = ["libnccl2=2.26.2-1+cuda12.8"]
[expect]
nccl = "2.26.2"
PLAN
slurmadm fleet rollout "$STATE/nccl-2.26.toml" --dry-run
slurmadm fleet rollout "$STATE/nccl-2.26.toml" --reason "demo" \
  || echo "(exit $?: a node failed or was held by another owner, e.g. a burn-in drain; see the status)"
slurmadm fleet rollout status nccl-2.26.2
sinfo -N -p gpu -o "%N %T"

step "the audit trail: who changed what, and why"
slurmadm audit log --limit 8

step "done: the dev cluster keeps running"
echo "use it:   eval \"\$(slurmadm dev-cluster env --state-dir $STATE)\""
echo "stop it:  slurmadm dev-cluster down --state-dir $STATE"
