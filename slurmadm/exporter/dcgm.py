"""dcgm-exporter as the GPU source (`monitor.gpu_source = "dcgm"`), as data.

DCGM_DEFAULT: what NVIDIA's dcgm-exporter exports with its default counters
(NVIDIA/dcgm-exporter `etc/default-counters.csv`: the uncommented fields) and the slurmadm node
exporter family of the same meaning. With dcgm as the source the slurmadm node exporter leaves
these out (the site has them from dcgm-exporter) and keeps what the default counters lack: ECC
(commented out there), NVLink error counters (commented out), clock event reasons and the
power limit (not listed), NVLink links up, row remaps pending, processes, health verdicts, XID
classes (dcgm-exporter has only the last XID's number), InfiniBand and the host.

Labels (dcgm-exporter's, see tests/fixtures/dcgm): `gpu` (index), `UUID`, `device`, `modelName`,
`Hostname` (the node), `DCGM_FI_DRIVER_VERSION`, and `hpc_job` when --hpc-job-mapping-dir has a
file for the GPU (transformation/hpc.go: one file per GPU index, one job id a line).
"""

from __future__ import annotations

# dcgm-exporter field -> the slurmadm family it stands for (None: no slurmadm family of that meaning)
DCGM_DEFAULT: dict[str, str | None] = {
    "DCGM_FI_DEV_SM_CLOCK": "slurmadm_gpu_sm_clock_hertz",  # MHz
    "DCGM_FI_DEV_MEM_CLOCK": "slurmadm_gpu_memory_clock_hertz",  # MHz
    "DCGM_FI_DEV_MEMORY_TEMP": "slurmadm_gpu_memory_temperature_celsius",
    "DCGM_FI_DEV_GPU_TEMP": "slurmadm_gpu_temperature_celsius",
    "DCGM_FI_DEV_POWER_USAGE": "slurmadm_gpu_power_watts",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "slurmadm_gpu_energy_joules",  # mJ
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": None,
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": None,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "slurmadm_gpu_pcie_replay",
    "DCGM_FI_DEV_GPU_UTIL": "slurmadm_gpu_utilization_percent",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "slurmadm_gpu_memory_utilization_percent",
    "DCGM_FI_DEV_ENC_UTIL": None,
    "DCGM_FI_DEV_DEC_UTIL": None,
    "DCGM_FI_DEV_XID_ERRORS": "slurmadm_gpu_last_xid",
    "DCGM_FI_DEV_FB_FREE": None,  # MiB; FB_FREE + FB_USED stands for slurmadm_gpu_memory_total_bytes
    "DCGM_FI_DEV_FB_USED": "slurmadm_gpu_memory_used_bytes",  # MiB
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": None,
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": None,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "slurmadm_gpu_remapped_rows",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "slurmadm_gpu_remapped_rows",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "slurmadm_gpu_row_remap_failure",
}

# slurmadm node-exporter families the dcgm mode leaves out: dcgm-exporter has them, plus the
# idle clock (the dcgm rules judge idleness on DCGM_FI_DEV_GPU_UTIL{hpc_job} themselves)
LEFT_OUT: frozenset[str] = frozenset(
    {v for v in DCGM_DEFAULT.values() if v} | {"slurmadm_gpu_memory_total_bytes", "slurmadm_gpu_job_idle_seconds"})

NODE_LABEL = "Hostname"
JOB_LABEL = "hpc_job"
