"""slurmdbd.conf for the dev cluster (it holds the DB password). slurm.conf, gres.conf,
topology.conf and cgroup.conf come from `slurmadm.config.render`, like for any other site."""

from __future__ import annotations

from pathlib import Path

from ..site import Site


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
