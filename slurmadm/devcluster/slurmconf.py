"""Slurm configuration files for the dev cluster.

Interim: a minimal writer until `slurmadm config render` (slurmadm/config/) renders the dev
site like any other site. slurmdbd.conf is the dev cluster's own (it holds the DB password).
"""

from __future__ import annotations

from pathlib import Path

from ..hostlist import compress
from ..site import Site


def slurm_files(site: Site, release: tuple[int, int, int]) -> dict[str, str]:
    s = site.slurm
    host = site.cluster.controllers[0]
    lines = [
        f"ClusterName={site.cluster.name}",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={s.slurmctld_port}",
        f"SlurmUser={site.slurm_user}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={s.munge_socket}",
        f"StateSaveLocation={s.state_save_location}",
        f"SlurmdSpoolDir={s.slurmd_spool_dir}",
        f"SlurmctldPidFile={s.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={s.run_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={s.log_dir}/slurmctld.log",
        f"SlurmdLogFile={s.log_dir}/slurmd-%n.log",
        f"ProctrackType=proctrack/{s.proctrack}",
        f"TaskPlugin={','.join(s.task_plugins)}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={site.database.host}",
        f"AccountingStoragePort={site.database.port}",
        # the munge socket for slurmdbd connections (sacctmgr, slurmctld -> slurmdbd)
        f"AccountingStoragePass={s.munge_socket}",
        "AccountingStorageTRES=gres/gpu",
        "AccountingStorageEnforce=associations,limits,qos,safe",
        "JobAcctGatherType=jobacct_gather/linux",
        "PriorityType=priority/multifactor",
        "PreemptType=preempt/qos",
        f"PreemptMode={s.preempt_mode}",
        "SchedulerParameters=nohold_on_prolog_fail",
        f"ReturnToService={s.return_to_service}",
        "MpiDefault=none",
    ]
    gres_lines = []
    for group in site.nodes:
        prof = site.profile(group.profile)
        from ..hostlist import expand

        names = expand(group.names)
        ports = f"[{group.port}-{group.port + len(names) - 1}]" if len(names) > 1 else str(group.port)
        real_mem = int(prof.memory_mib * s.real_memory_fraction)
        lines.append(
            f"NodeName={group.names} NodeHostname={group.hostname} NodeAddr={group.addr} Port={ports} "
            f"Sockets={prof.sockets} CoresPerSocket={prof.cores_per_socket} "
            f"ThreadsPerCore={prof.threads_per_core} RealMemory={real_mem} "
            f"Gres=gpu:{prof.gpus.model}:{prof.gpus.count} State=UNKNOWN"
        )
        gres_lines.append(
            f"NodeName={group.names} Name=gpu Type={prof.gpus.model} File={prof.gpus.device_files}"
        )
    for p in site.partitions:
        nodes = "ALL" if p.nodes == "ALL" else compress(site.partition_nodes(p))
        lines.append(
            f"PartitionName={p.name} Nodes={nodes} Default={'YES' if p is site.default_partition else 'NO'} "
            f"MaxTime={p.max_time} State={p.state}"
        )
    files = {
        "slurm.conf": "\n".join(lines) + "\n",
        "gres.conf": "\n".join(gres_lines) + "\n",
    }
    if release >= (23, 2, 0):
        files["cgroup.conf"] = f"CgroupPlugin={s.cgroup_plugin}\n"
    return files


def slurmdbd_conf(site: Site, password: str, state_dir: Path) -> str:
    db = site.database
    s = site.slurm
    return "\n".join([
        "AuthType=auth/munge",
        f"AuthInfo=socket={s.munge_socket}",
        f"DbdHost={db.host}",
        "DbdAddr=127.0.0.1",
        f"DbdPort={db.port}",
        "SlurmUser=root",
        f"LogFile={s.log_dir}/slurmdbd.log",
        f"PidFile={s.run_dir}/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        f"StorageHost={db.storage_host}",
        f"StoragePort={db.storage_port}",
        f"StorageUser={db.storage_user}",
        f"StoragePass={password}",
        f"StorageLoc={db.storage_name}",
        "",
    ])
