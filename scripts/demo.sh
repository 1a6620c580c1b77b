#!/usr/bin/env bash
# The demo on a fresh Debian 12/13 machine, as root: installs slurmadm, brings up a 4-node dev
# cluster of fake B200 nodes (real Slurm, slurmdbd and stand-in GPUs), and shows slurmadm doing
# its job on it: configs from the site, accounts and GPU quotas, a GPU fault caught by the
# prolog (node drained, job requeued elsewhere, node resumed once healthy), a burn-in sweep.
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
slurmadm dev-cluster up --nodes 4 --state-dir "$STATE"
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

step "monitoring: exporters, real Prometheus + Alertmanager, the webhook isolates a faulty node"
slurmadm monitor dev-stack up --state-dir "$STATE"
PROM=$(sed -n 's/^prometheus_url = "\(.*\)"/\1/p' "$STATE/site.toml")
slurmadm monitor rules --out "$STATE/monitor/rules-demo.yml"   # what Prometheus evaluates (promtool-checked)
slurmadm monitor dashboard --out "$STATE/monitor/grafana-dashboard.json"
echo "PCIe replays rising on b200-004 GPU3 (no health check drains for it: this is the alert path):"
slurmadm dev-cluster gpu-fault b200-004 --gpu 3 --kind pcie-replay --value 1000
wait_until 90 "the alert's drain" sh -c "sinfo -h -R -n b200-004 | grep -q alert-" && sinfo -R -o "%12N %E"
python3 -c 'import json, sys, urllib.request
for a in json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/alerts"))["data"]["alerts"]:
    print("  Prometheus alert:", a["labels"]["alertname"], a["labels"].get("node", ""), a["state"])' "$PROM"
echo "slurmadm top (a live view, refreshing; q quits) - one frame of it, with the isolated node:"
slurmadm top --once
echo "clearing the fault: the alert resolves; the webhook resumes b200-004 after clean health runs:"
slurmadm dev-cluster gpu-fault b200-004 --clear
wait_until 180 "the resolved alert's resume" sh -c "! sinfo -h -R -n b200-004 | grep -q alert-" \
  && echo "alert resolved: b200-004 resumed by the webhook"
echo "a job holding 8 GPUs and using none:"
idle=$(sbatch --parsable --gres=gpu:8 -J idle-gpus -o /dev/null --wrap 'sleep 300')
wait_until 90 "the idle report" sh -c "slurmadm jobs idle --json | grep -q '\"job_id\": \"$idle\"'"
slurmadm jobs idle || true
scancel "$idle"

step "the audit trail: who changed what, and why"
slurmadm audit log --limit 8

step "done: the dev cluster keeps running"
echo "use it:   eval \"\$(slurmadm dev-cluster env --state-dir $STATE)\""
echo "live view: slurmadm top     Prometheus: $PROM"
echo "stop it:  slurmadm dev-cluster down --state-dir $STATE"
