#!/usr/bin/env bash
# The demo on a fresh Debian 12/13 machine, as root: installs slurmadm, brings up a 4-node dev
# cluster of fake B200 nodes (real Slurm, slurmdbd and stand-in GPUs), and shows slurmadm doing
# its job on it: configs from the site, accounts and GPU quotas, a GPU fault caught by the
# prolog (node drained, job requeued elsewhere, node resumed once healthy), a burn-in sweep,
# software drift found over SSH and a canary rollout through Slurm's reboots, BMCs.
#
#   scripts/demo.sh [--port-base N] [--state-dir DIR]
#   PORT_BASE=N STATE_DIR=DIR scripts/demo.sh
#
# The set-up prints one line per stage (`installing system packages ... done, 1m40s`); the whole
# output goes to $DEMO_LOG (default <state dir>-demo.log), named when a stage fails.
#
# The dev cluster listens on 127.0.0.1 ports from the port base (default 17000: slurmctld, +1
# slurmdbd, +2 MariaDB, +11.. one slurmd per node, +400..+499 burn-in rendezvous); pick another
# base when another dev cluster already uses those.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT_BASE=${PORT_BASE:-17000}
STATE_DIR=${STATE_DIR:-${SLURMADM_DEV_STATE_DIR:-/var/lib/slurmadm/dev-cluster}}
while [ $# -gt 0 ]; do
  case "$1" in
    --port-base) PORT_BASE=${2:?--port-base needs a number}; shift 2 ;;
    --port-base=*) PORT_BASE=${1#*=}; shift ;;
    --state-dir) STATE_DIR=${2:?--state-dir needs a directory}; shift 2 ;;
    --state-dir=*) STATE_DIR=${1#*=}; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$PORT_BASE" in
  ''|*[!0-9]*) echo "demo.sh: --port-base: '$PORT_BASE' is not a number" >&2; exit 2 ;;
esac
# set-up: one line per stage, the whole output in a log file (named when a stage fails)
STAGE_LOG=${DEMO_LOG:-$STATE_DIR-demo.log}
. scripts/stages.sh
stage "installing system packages" scripts/install-system-deps.sh
stage "installing slurmadm into .venv" scripts/setup.sh
stage "installing torch (CPU) for burn-in" scripts/install-torch-cpu.sh .venv/bin/python   # all-reduce with gloo
echo "(set-up log: $STAGE_LOG)"
export PATH="$(pwd)/.venv/bin:$PATH"
STATE=$STATE_DIR
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
# a fresh one: an earlier demo's cluster (left up to explore) keeps its drains, jobs and faults
slurmadm dev-cluster down --purge --state-dir "$STATE" >/dev/null 2>&1 || true
slurmadm dev-cluster up --nodes 4 --bmc --ssh --state-dir "$STATE" --port-base "$PORT_BASE"   # an IPMI + Redfish BMC and an sshd per node
eval "$(slurmadm dev-cluster env --state-dir "$STATE")"
sinfo -N -p gpu -o "%N %T %G %c %m %f"
slurmadm config diff --against "$STATE/etc"   # the dev cluster runs `config render` output

step "slurmadm doctor: what slurmadm uses here, and whether it works"
slurmadm doctor || echo "(doctor: exit $?)"
slurmadm doctor --node b200-001 --check nvml || true   # NVML as a compute node sees it (the stand-in library)

step "accounts: GPU quotas, budgets, fairshare and QOS from the site, reconciled into slurmdbd"
slurmadm accounts plan
slurmadm accounts apply --reason "demo"
slurmadm accounts plan --check && echo "second plan: empty"
slurmadm accounts report

step "a GPU job gets its GPUs like on a real node"
sbatch --wait --gres=gpu:8 -o "$STATE/demo-job.out" \
  --wrap 'echo "$SLURMD_NODENAME: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' >/dev/null
cat "$STATE/demo-job.out"

step "GPU-site settings: billed in GPUs, memory per CPU, partition limits checked at submit"
grep -E '^(SchedulerParameters|EnforcePartLimits|PriorityFlags)=|TRESBillingWeights' "$STATE-reference/slurm.conf" | cut -c1-160
jid=$(sbatch --parsable --wait --gres=gpu:8 -o /dev/null --wrap true)
sacct -X -n -j "$jid" -o JobID,AllocTRES%70   # billing=8: the job's 8 GPUs, not its 1 CPU
jid=$(sbatch --parsable --wait -n1 -o /dev/null --wrap true)
sacct -X -n -j "$jid" -o JobID,AllocTRES%70   # a CPU-only job: DefMemPerCPU, not the node's memory
sbatch -p debug -o /dev/null --wrap true || echo "(refused at submit: debug takes only QOS debug)"

step "health: GPU5 of b200-003 reports an uncorrected ECC error; a job lands there"
slurmadm dev-cluster gpu-fault b200-003 --gpu 5 --kind ecc-uncorrected
for n in b200-001 b200-002 b200-004; do   # keep the others busy so Slurm picks b200-003
  sbatch -w "$n" --exclusive --gres=gpu:8 -J busy -o /dev/null --wrap 'sleep 20' >/dev/null
done
job=$(sbatch --parsable --gres=gpu:8 -J victim -o /dev/null --wrap 'hostname')
wait_until 60 "the prolog's drain" sh -c "sinfo -h -R -n b200-003 | grep -q slurmadm"
sinfo -R -o "%70E %9u %19H %N"   # the whole reason (plain `sinfo -R` cuts it at 20 characters)
slurmadm health status --nodes b200-003 | tail -n 4 || true   # whole reasons, from Slurm
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

step "tried on the fleet first: pcie-link in observe mode (recorded, drains nothing); a new threshold replayed"
cp "$SLURMADM_SITE" "$STATE/site.before-observe.toml"
python3 - "$SLURMADM_SITE" <<'PY'   # [health.checks.pcie-link] on_fail = "observe", as an admin would set it
import sys, tomllib, tomli_w
d = tomllib.loads(open(sys.argv[1]).read())
d["health"].setdefault("checks", {})["pcie-link"] = {"on_fail": "observe"}
open(sys.argv[1], "w").write(tomli_w.dumps(d))
PY
slurmadm dev-cluster gpu-fault b200-004 --gpu 3 --kind pcie-degraded --value 3x8 >/dev/null
slurmadm health run --node b200-004 --checks pcie-link || true   # not a dry run: observe drains nothing
sinfo -h -p gpu -n b200-004 -o "%N %T"                           # still in service
slurmadm health observe --since 1h                               # what it would have drained
slurmadm health observe --since 1h --what-if max_gpu_temp_c=40   # a stricter limit, replayed on the stored runs
slurmadm dev-cluster gpu-fault b200-004 --clear >/dev/null
cp "$STATE/site.before-observe.toml" "$SLURMADM_SITE"            # back to its default, on_fail = "drain"

step "nightly burn-in: NVLinks down on b200-002, b200-001's GPU5 computes wrong answers; a sweep of the 4 nodes"
slurmadm dev-cluster gpu-fault b200-002 --gpu 1 --kind nvlink-down --value 2
# silent data corruption: no counter, no log line, every check passes; only a known answer shows it
slurmadm dev-cluster gpu-fault b200-001 --gpu 5 --kind corrupt --value 1 >/dev/null
slurmadm burnin run || echo "(exit $?: a node failed burn-in; see the report)"
if [ -n "${DISPLAY:-}" ] && command -v xdg-open >/dev/null; then
  xdg-open "$STATE/burnin/latest/report.html"   # (no display: the path above opens in any browser)
fi
sinfo -h -R -n b200-001,b200-002 -o "%100E %N"      # the known-answer test names the GPU that disagrees
slurmadm repair status || true                      # an SDC incident on that GPU's serial
slurmadm dev-cluster gpu-fault b200-002 --clear
slurmadm dev-cluster gpu-fault b200-001 --clear
# an admin swapped the GPU: the incident closes; the next sweep re-qualifies and resumes the node
slurmadm repair clear b200-001 --reason "demo: GPU5 swapped" || true
slurmadm burnin status
slurmadm burnin known-issues   # DCGM defects per GPU model burn-in works around (B200: a diag that hangs)

step "stragglers: b200-003 passes every check but runs 70% slower than its fleet"
# fleet-relative verdicts, on for this step (the dev site leaves them off), on the stand-in GPUs'
# matmul rate (stress-tflops: 1,000 less a GPU's slow fault; the machine's load does not move it),
# with the site model's default thresholds
python3 - "$SLURMADM_SITE" "$STATE/site-straggler.toml" <<'PY'
import sys, tomllib, tomli_w
d = tomllib.loads(open(sys.argv[1]).read())
d["burnin"]["straggler"] = {"enabled": True, "min_nodes": 4, "metrics": ["stress-tflops"], "drain_after": 2}
open(sys.argv[2], "w").write(tomli_w.dumps(d))
PY
slurmadm dev-cluster gpu-fault b200-003 --gpu 0 --kind slow --value 70
slurmadm burnin run --site "$STATE/site-straggler.toml" || echo "(exit $?: see the report)"
slurmadm burnin status --site "$STATE/site-straggler.toml" --limit 2   # the straggler, found slow once
slurmadm burnin history b200-003 --site "$STATE/site-straggler.toml" --limit 2
# found slow once: held out of service (no repair incident) until the next sweep re-tests it,
# which drains it burnin-straggler if it is slow again, or resumes it (Slurm's drain reason)
slurmadm burnin held
slurmadm burnin run --site "$STATE/site-straggler.toml" --dry-run
slurmadm dev-cluster gpu-fault b200-003 --clear --kind slow
# its GPU fixed: the re-test finds it at speed and resumes it
slurmadm burnin run --site "$STATE/site-straggler.toml" --nodes b200-003 || echo "(exit $?: see the report)"
sinfo -h -n b200-003 -o "%N %T"

step "fleet: every node's software stack over SSH (and its BMC's firmware, fw:*); b200-004 has an older NCCL than the baseline"
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
# the rollout's target is the new baseline (else every upgraded node drifts from the old one)
sed -i 's/^nccl_version = "2.25.1"/nccl_version = "2.26.2"/' "$STATE/site.toml"
grep '^nccl_version' "$STATE/site.toml"

step "out-of-band: the BMCs (IPMI for power/sensors/SEL, Redfish for firmware)"
slurmadm bmc power status b200-[001-004]
slurmadm bmc sensors b200-001 --type temperature
slurmadm bmc firmware status b200-[001-004]

step "a dead node recovered through its BMC: b200-004's OS hangs (slurmd frozen)"
slurmadm bmc recover install-trigger --path "$STATE/bmc/recover-trigger.sh" --log "$STATE/log/bmc-recover.log"
slurmadm bmc recover install-sweep --interval 5m --dest "$STATE/systemd"   # the sweep for what a trigger misses (a real head: /etc/systemd/system)
kill -STOP "$(cut -d' ' -f1 "$STATE/run/slurmd-b200-004.dev.pid")"
wait_until 90 "Slurm to mark b200-004 DOWN" sh -c "sinfo -h -n b200-004 -o %T | grep -qE 'down|\\*'"
sinfo -h -n b200-004 -p gpu -o "%N %T %E"
echo "Slurm's trigger runs slurmadm bmc recover: SEL, drain, power-cycle, slurmd back, health, resume"
wait_until 240 "the recovery" sh -c "slurmadm audit log --action bmc.recover.resume --target b200-004 --json | grep -q b200-004" || true
slurmadm audit log --action 'bmc.*' --target b200-004 --limit 6
sinfo -h -n b200-004 -p gpu -o "%N %T %E"

step "monitoring: exporters, real Prometheus + Alertmanager, the webhook isolates a faulty node"
slurmadm monitor dev-stack up --state-dir "$STATE"
PROM=$(sed -n 's/^prometheus_url = "\(.*\)"/\1/p' "$STATE/site.toml")
slurmadm monitor rules --out "$STATE/monitor/rules-demo.yml"   # what Prometheus evaluates (promtool-checked)
slurmadm monitor dashboard --out "$STATE/monitor/grafana-dashboard.json"
echo "PCIe replays rising on b200-004 GPU3 (no health check drains for it: this is the alert path):"
slurmadm dev-cluster gpu-fault b200-004 --gpu 3 --kind pcie-replay --value 1000
isolated=
wait_until 90 "the alert's drain" sh -c "sinfo -h -R -n b200-004 | grep -q alert-" && isolated=1 && sinfo -R -o "%12N %E"
python3 -c 'import json, sys, urllib.request
for a in json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/alerts"))["data"]["alerts"]:
    print("  Prometheus alert:", a["labels"]["alertname"], a["labels"].get("node", ""), a["state"])' "$PROM"
echo "slurmadm top (a live view, refreshing; q quits) - one frame of it, with the isolated node:"
slurmadm top --once
echo "clearing the fault: the alert resolves; the webhook resumes b200-004 after clean health runs:"
slurmadm dev-cluster gpu-fault b200-004 --clear
if [ -n "$isolated" ]; then
  wait_until 180 "the resolved alert's resume" sh -c "! sinfo -h -R -n b200-004 | grep -q alert-" \
    && slurmadm audit log --action node.resume --target b200-004 --limit 1
else
  echo "(b200-004 was not isolated: see 'slurmadm audit log --action monitor.alert' for the webhook's reason)"
fi
echo "a job holding 8 GPUs and using none:"
idle=$(sbatch --parsable --gres=gpu:8 -J idle-gpus -o /dev/null --wrap 'sleep 300')
wait_until 90 "the idle report" sh -c "slurmadm jobs idle --json | grep -q '\"job_id\": \"$idle\"'"
slurmadm jobs idle || true
scancel "$idle"

# --- issue 23: the same stack with NVIDIA dcgm-exporter as the GPU source (a real capture per node)
step "monitoring with dcgm-exporter as the GPU source (monitor.gpu_source = \"dcgm\")"
slurmadm monitor dev-stack down --state-dir "$STATE" >/dev/null 2>&1
slurmadm monitor dev-stack up --state-dir "$STATE" --gpu-source dcgm
job=$(sbatch --parsable -w b200-002 --gres=gpu:8 -J dcgm-demo -o /dev/null --wrap 'sleep 120')
wait_until 60 "the prolog's hpc-job files" sh -c "ls $STATE/run/dcgm-jobs/b200-002/ 2>/dev/null | grep -q 7"
echo "dcgm-exporter --hpc-job-mapping-dir files (one per GPU index, the job ids on it):"
head "$STATE"/run/dcgm-jobs/b200-002/[0-7]
wait_until 30 "hpc_job on the GPUs" python3 -c 'import json, sys, urllib.parse, urllib.request
q = urllib.parse.urlencode({"query": "DCGM_FI_DEV_GPU_UTIL{hpc_job=\"%s\"}" % sys.argv[2]})
r = json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/query?" + q))["data"]["result"]
[print("  ", x["metric"]["Hostname"], "GPU" + x["metric"]["gpu"], x["metric"]["modelName"], "hpc_job=" + x["metric"]["hpc_job"]) for x in r[:3]]
sys.exit(0 if r else 1)' "$PROM" "$job"
scancel "$job"
slurmadm monitor dev-stack down --state-dir "$STATE" >/dev/null 2>&1
slurmadm monitor dev-stack up --state-dir "$STATE" >/dev/null 2>&1   # back to slurmadm's own GPU source

step "the audit trail: who changed what, and why"
slurmadm audit log --limit 8

step "the head sees the whole fleet: every node ships its records to a central store (MariaDB)"
slurmadm dev-cluster central-store on --state-dir "$STATE"   # per-node stores + a slurmadm database
slurmadm dev-cluster gpu-fault b200-001 --gpu 3 --kind ecc-uncorrected
job=$(sbatch --parsable -w b200-001 --gres=gpu:8 -J victim -o /dev/null --wrap 'hostname')
# the job's prolog (or slurmd's HealthCheckProgram, whichever runs first) drains b200-001 there;
# the monitoring stack is still up, so its GpuEccUncorrected alert may drain it first
wait_until 90 "b200-001's drain" sh -c \
  "scontrol show node b200-001 | grep -Eq 'Reason=slurmadm: (ecc-uncorrected|alert-GpuEccUncorrected)'"
wait_until 120 "b200-001's failed check to reach the head (shipped by its next periodic run)" \
  sh -c "slurmadm health status --nodes b200-001 --json 2>/dev/null | grep -q 'GPU3 volatile uncorrected ECC'"
slurmadm audit log --host b200-001 --limit 3
slurmadm health status --nodes b200-001 || true   # exit 1: a failing check
slurmadm store status || true
scancel "$job"
slurmadm dev-cluster gpu-fault b200-001 --clear
scontrol update nodename=b200-001 state=resume
slurmadm dev-cluster central-store off --state-dir "$STATE"

# ---- repair (issue 34): a reset-class XID from signal to GPU reset, qualification and resume; a lemon
demo_repair() {
  step "repair: GPU2 of b200-003 logs a reset-class XID; reset over SSH, qualification job, back in service"
  slurmadm dev-cluster gpu-fault b200-003 --gpu 2 --kind xid --value 46 >/dev/null   # Xid 46: RESET_GPU
  slurmadm health run --node b200-003 --checks xid >/dev/null || true                  # the signal: drained
  sinfo -h -R -n b200-003 -o "%100E %N"
  slurmadm repair status                              # the incident, by the GPU's serial, and its next step
  slurmadm repair run --dry-run                       # the plan first: reset (the ladder's first rung)
  slurmadm repair run                                 # nvidia-smi --gpu-reset, then the qualification job
  sinfo -h -p gpu -n b200-003 -o "%N %T"              # resumed: the gate passed
  slurmadm repair history b200-003 | head -12         # the incident's story: signal, reset, qualification
  step "repair qualify: an admin reseated b200-001's GPU tray and wants the gate passed before it takes jobs"
  # a node answers slurmctld's ping before it is asked for (NOT_RESPONDING is someone else's state)
  wait_until 60 "b200-001 to answer slurmctld" sh -c '! sinfo -h -n b200-001 -o %T | grep -q "[*]"' || true
  slurmadm repair qualify b200-001 --dry-run          # in service: drained first, resumed on a pass
  slurmadm repair qualify b200-001 || true            # stress, all-reduce, known-answer test, health suite
  sinfo -h -p gpu -n b200-001 -o "%N %T"
  step "repair: b200-004 computes a wrong answer (silent corruption): two failed qualifications make a lemon"
  slurmadm dev-cluster gpu-fault b200-004 --gpu 2 --kind xid --value 46 >/dev/null
  slurmadm dev-cluster gpu-fault b200-004 --gpu 2 --kind corrupt --value 1 >/dev/null
  slurmadm health run --node b200-004 --checks xid >/dev/null || true
  slurmadm repair run || true                         # reset works; the known-answer test fails
  # one step a run: the next rung (scontrol reboot), its qualification fails again: a lemon
  wait_until 300 "b200-004 to become a lemon" sh -c \
    "slurmadm repair run >/dev/null 2>&1; slurmadm repair lemons --json | grep -q b200-004" || true
  slurmadm repair lemons
  slurmadm repair clear b200-004 --resume --reason "reseated GPU2" --dry-run || true  # an admin's word (shown only)
  slurmadm dev-cluster gpu-fault b200-004 --clear >/dev/null
}
if [ -n "${DEMO_REPAIR:-1}" ]; then demo_repair; fi

# ---- parts and RMAs (issue 35), what faults cost (issue 36)
demo_rma_cost() {
  step "RMA: the lemon's GPU goes back to the vendor with its evidence bundle; the replacement is qualified"
  slurmadm repair rma open b200-004 --gpu 2 --ticket NV-DEMO-1 --reason "demo: lemon GPU" || true
  slurmadm repair rma ship NV-DEMO-1 --reason "demo: shipped" >/dev/null || true
  slurmadm dev-cluster gpu-fault b200-004 --gpu 2 --kind replace >/dev/null   # the new GPU is in the slot
  slurmadm health run --node b200-004 >/dev/null || true                       # the swap is seen
  slurmadm repair run || true                                                  # qualification of the new part
  wait_until 180 "the case to close" sh -c \
    "slurmadm repair run >/dev/null 2>&1; slurmadm repair rma list --json | grep -q '\"state\": \"closed\"'" || true
  slurmadm repair rma list || true
  slurmadm repair parts b200-004 || true
  step "what faults cost: which failed runs were the hardware's, and the reliability report"
  slurmadm jobs failures --since 3h || true
  slurmadm report reliability --since 1d --html "$STATE/reliability.html" >/dev/null || true
  slurmadm report reliability --since 1d | head -30 || true
  echo "the page: $STATE/reliability.html"
}
if [ -n "${DEMO_REPAIR:-1}" ]; then demo_rma_cost; fi

# ---- a link that keeps flapping (issue 37): the ladder's reboot does not mend a cable; the
# qualification's link watch sees it go down again and holds the node for a person
demo_link_flap() {
  step "repair: b200-002's cable keeps flapping; reboot, the qualification's link watch fails it; cable replaced"
  slurmadm dev-cluster ib-fault b200-002 --hca mlx5_3 --kind flap --every 2 >/dev/null
  slurmadm health run --node b200-002 --checks infiniband >/dev/null || true   # the signal: drained
  sinfo -h -R -n b200-002 -o "%100E %N"
  slurmadm repair run || true                         # the HCA ladder's first rung: a reboot
  wait_until 300 "b200-002's qualification to fail on its links" sh -c \
    "slurmadm repair run >/dev/null 2>&1; sinfo -h -R -n b200-002 -o %E | grep -Eq 'repair: (qualify: HCA: failed|rma)'" || true
  sinfo -h -R -n b200-002 -o "%100E %N"              # failed: links: mlx5_3 went down while watched
  slurmadm repair history b200-002 | head -12
  slurmadm dev-cluster ib-fault b200-002 --clear      # the cable replaced: the flapping stops
  slurmadm repair clear b200-002 --reason "cable replaced" || true
  wait_until 60 "b200-002 to answer slurmctld" sh -c '! sinfo -h -n b200-002 -o %T | grep -q "[*]"' || true
  slurmadm repair qualify b200-002 || true            # the link watch passes: back in service
  sinfo -h -p gpu -n b200-002 -o "%N %T"
}
if [ -n "${DEMO_REPAIR:-1}" ]; then demo_link_flap; fi

# ---- slurmadm deploy (issue 26): slurmadm itself onto the fake nodes, each into its own /opt
demo_deploy() {
  step "deploy: slurmadm onto every node from one wheelhouse (no index on the nodes), atomic switch, doctor"
  local dsite="$STATE/deploy-site.toml"
  # the dev site, its hooks in the nodes' own /opt/slurmadm (each fake node has its own /opt)
  python3 - "$SLURMADM_SITE" "$dsite" "$STATE" <<'PY'
import os, subprocess, sys, tomllib, tomli_w
src, dst, state = sys.argv[1:]
d = tomllib.loads(open(src).read())
d["slurm"]["prolog_dir"] = "/opt/slurmadm/prolog_epilog"
# slurmadm.env on the nodes: what the dev cluster's own hooks get (stand-in NVML, SLURM_CONF)
env = dict(line.split(" ", 1)[1].split("=", 1) for line in subprocess.run(
    ["slurmadm", "dev-cluster", "env", "--state-dir", state], capture_output=True, text=True).stdout.splitlines()
    if line.startswith("export "))
env = {k: v.strip("'") for k, v in env.items() if k != "SLURMADM_SITE"}
d["deploy"] = {"wheelhouse_dir": f"{state}/wheelhouse", "unit_dir": "/opt/slurmadm/systemd", "env": env}
open(dst, "w").write(tomli_w.dumps(d))
PY
  slurmadm deploy manifest --site "$dsite" > "$STATE/deploy-manifest.txt"   # for an image build or a playbook
  head -24 "$STATE/deploy-manifest.txt"
  slurmadm deploy plan 'b200-[001-004]' --site "$dsite" || true      # exit 1: everything to do
  slurmadm deploy apply 'b200-[001-004]' --site "$dsite" --reason "demo" || true
  slurmadm deploy plan 'b200-[001-004]' --site "$dsite" --wheelhouse "$(ls -d "$STATE"/wheelhouse/*/ | head -1)"
  slurmadm fleet run 'b200-[001-004]' -- readlink /opt/slurmadm/current
  slurmadm fleet run 'b200-[001-004]' -- rm -rf /opt/slurmadm   # the dev cluster keeps its own hooks
}
if [ -n "${DEMO_DEPLOY:-1}" ]; then demo_deploy; fi

step "done: the dev cluster keeps running"
echo "use it:   eval \"\$(slurmadm dev-cluster env --state-dir $STATE)\""
echo "live view: slurmadm top     Prometheus: $PROM"
echo "stop it:  slurmadm dev-cluster down --state-dir $STATE"
