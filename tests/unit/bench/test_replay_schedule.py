"""The replay's schedules: drawn from the sourced fault mix with a seed, written and read back
exactly, and bad files refused with one line naming the file, line and column."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.replay import schedule as s

pytestmark = pytest.mark.unit

NODES = [f"b200-{i:03d}" for i in range(1, 129)]


def test_the_mix_names_a_source_for_every_rate_and_its_splits_add_up():
    mix = s.load_mix()
    assert {r.cls for r in mix} >= {"faulty-gpu", "gpu-hbm", "network", "psu", "fan", "host", "sdc", "thermal"}
    assert all(r.source for r in mix)
    # Llama 3's 419 interruptions over 110,592 node-days, less the 42 the header leaves out
    # (host maintenance 32, NCCL watchdog 7, SSD 3): 377 / 110.592 per 1,000 node-days
    per_class = {r.cls: r.rate for r in mix}
    llama = sum(v for k, v in per_class.items() if k not in ("fan", "straggler"))
    assert llama == pytest.approx(377 / 110.592, abs=0.01)


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    mix = s.load_mix()
    a = s.fault_schedule(mix, NODES, days=30, seed=7, compression=2000)
    b = s.fault_schedule(mix, NODES, days=30, seed=7, compression=2000)
    c = s.fault_schedule(mix, NODES, days=30, seed=8, compression=2000)
    assert a == b and a != c
    # 128 nodes x 30 days at ~4 per 1,000 node-days: about 15 faults, Poisson
    assert 3 <= len(a) <= 40
    assert all(0 <= f.t_s < 30 * 86400 / 2000 for f in a)


def test_repeat_offenders_hold_about_a_quarter_of_the_faults():
    mix = s.load_mix()
    faults = s.fault_schedule(mix, NODES, days=3000, seed=1, compression=2000)
    per_node = Counter(f.node for f in faults)
    top = sum(n for _, n in per_node.most_common(len(NODES) // 20))
    assert 0.15 <= top / len(faults) <= 0.40   # StepFun: the top 5% hold 24.5%


def test_gpu_faults_name_a_gpu_and_ib_faults_an_hca():
    mix = s.load_mix()
    faults = s.fault_schedule(mix, NODES, days=3000, seed=3, compression=2000, hcas=["mlx5_0", "mlx5_1"])
    assert {f.part for f in faults if f.injector == "gpu"} <= {str(i) for i in range(8)}
    assert {f.part for f in faults if f.injector == "ib"} == {"mlx5_0", "mlx5_1"}
    assert all(f.part == "" for f in faults if f.injector in ("bmc", "node", "user"))


def test_a_schedule_written_and_read_back_is_the_same():
    mix = s.load_mix()
    faults = s.fault_schedule(mix, NODES, days=60, seed=5, compression=2000)
    assert s.read_faults(s.write_faults(faults), "f.csv", set(NODES)) == faults
    jobs = s.job_schedule(128, days=2, seed=5, compression=2000)
    assert s.read_jobs(s.write_jobs(jobs), "j.csv", 128) == jobs


def test_the_job_stream_fills_the_asked_load_mostly_with_small_jobs():
    jobs = s.job_schedule(32, days=10, seed=2, compression=1000)
    node_hours = sum(j.nodes * j.duration_s * 1000 / 3600 for j in jobs)
    assert node_hours >= 32 * 10 * 24 * s.JOB_LOAD
    assert max(j.nodes for j in jobs) <= 32
    assert sum(j.nodes == 1 for j in jobs) > len(jobs) / 3


@pytest.mark.parametrize(("text", "error"), [
    ("t_s,node,kind,injector,part,value,duration_s,cls\n1,b200-999,xid,gpu,0,79,10,faulty-gpu\n",
     "f.csv:2: node: 'b200-999' is not a node of the site"),
    ("t_s,node,kind,injector,part,value,duration_s,cls\nsoon,b200-001,xid,gpu,0,79,10,faulty-gpu\n",
     "f.csv:2: t_s: not a number: 'soon'"),
    ("t_s,node,kind,injector,part,value,duration_s,cls\n1,b200-001,xid,gpu,0,79;reboot,10,faulty-gpu\n",
     "f.csv:2: value: '79;reboot' has characters a fault never has"),
    ("t_s,node,kind,injector,part,value,duration_s,cls\n1,b200-001,xid,laser,0,79,10,faulty-gpu\n",
     "f.csv:2: injector: 'laser' is not one of gpu, ib, bmc, node, user"),
    ("time,node\n1,b200-001\n", "f.csv: columns are time,node; expected t_s,node,kind,injector,part,value,duration_s,cls"),
    ("t_s,node,kind,injector,part,value,duration_s,cls\n1,b200-001,xid\n", "f.csv:2: expected 8 columns"),
    ("", "f.csv: empty"),
])
def test_a_bad_fault_file_is_one_line_naming_where(text, error):
    with pytest.raises(s.ScheduleError) as e:
        s.read_faults(text, "f.csv", set(NODES))
    assert str(e.value) == error


def test_a_mix_whose_splits_do_not_add_up_is_refused(tmp_path):
    bad = tmp_path / "mix.csv"
    bad.write_text("cls,injector,kind,value,rate,split,repair_h,signal,source\n"
                   "faulty-gpu,gpu,xid,79,1.3,0.5,20,node,Llama 3\n")
    with pytest.raises(s.ScheduleError, match="class faulty-gpu: splits add up to 0.5, not 1"):
        s.load_mix(bad)
