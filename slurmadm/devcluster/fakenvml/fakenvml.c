/*
 * Stand-in for libnvidia-ml.so.1 (NVML), for machines without NVIDIA GPUs.
 *
 * The real nvidia-ml-py (pynvml) loads this library unmodified: it finds it through
 * LD_LIBRARY_PATH and calls it with ctypes. Every symbol name, argument list and struct layout
 * below follows pynvml.py / nvml.h. What is not here is absent on purpose: pynvml then raises
 * NVMLError_FunctionNotFound, as with an older driver.
 *
 * State: $SLURMADM_FAKE_NVML_DIR/<node>.state, a flat key=value file written atomically
 * (rename) by slurmadm/devcluster/gpus.py. <node> is $SLURMADM_FAKE_NVML_NODE, else
 * $SLURMD_NODENAME (set by Slurm for prologs, epilogs and jobs), else the short hostname.
 * The file is read at nvmlInit* and re-read whenever it changes, so a long-running process sees
 * injected faults without re-initialising, like counters on a real GPU.
 *
 * Faults the state can express: any counter/temperature/clock/link value, a GPU that is not
 * present (dropped from enumeration; calls on an old handle return GPU_IS_LOST), and a hung
 * GPU (every call on its handle blocks, re-reading the state every 50 ms, until the hang is
 * cleared, or an hour has passed: then NVML_ERROR_GPU_IS_LOST). ctypes releases the GIL around
 * each call, so a Python caller can give up on a hung call with a thread and a time limit.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* the first driver release whose XIDs set NVML's recovery action (NVIDIA's Xid catalog, column
 * "Xid 154 linkage": R565); state `driver_version=560.35.03` plays an older driver */
#define LINKAGE_FIRST_RELEASE 565

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS */
#define NVLINK_COUNTERS 5 /* replay, recovery, crc flit, crc data, ecc data */
#define MAX_PROCS 32
#define CPU_WORDS 16 /* 1024 CPUs */
#define HANG_POLL_NS 50000000L
#define HANG_LIMIT_S 3600

struct proc {
    unsigned pid;
    unsigned long long used;
};

struct gpu {
    unsigned present, hang;
    char name[96], uuid[96], serial[32], pci_bus_id[32], vbios[32], board_part_number[32];
    unsigned minor, pci_device_id, pci_subsystem_id, arch, brand, cc_major, cc_minor;
    unsigned long long mem_total, mem_used, mem_reserved;
    unsigned temp_gpu, temp_mem, temp_shutdown, temp_slowdown, temp_mem_max, temp_gpu_max;
    unsigned power_mw, power_limit_mw, power_enforced_mw, power_default_mw, power_min_mw, power_max_mw;
    unsigned long long energy_mj, energy_epoch;
    unsigned clock_sm, clock_sm_max, clock_mem, clock_mem_max, clock_video, clock_video_max;
    unsigned clock_app_sm, clock_app_mem;
    unsigned long long clock_reasons, clock_reasons_supported;
    unsigned util_gpu, util_mem, pstate, persistence, ecc_mode;
    unsigned long long ecc_sbe_vol, ecc_dbe_vol, ecc_sbe_agg, ecc_dbe_agg;
    unsigned retired_sbe, retired_dbe, retired_pending;
    unsigned remap_cor, remap_unc, remap_pending, remap_failure;
    unsigned pcie_gen, pcie_gen_max, pcie_gen_gpu_max, pcie_width, pcie_width_max, pcie_replay;
    unsigned nvlink_count, nvlink_version;
    unsigned fabric_state, fabric_status, fabric_health, recovery_action;
    unsigned char nvlink_up[MAX_LINKS];
    unsigned long long nvlink_err[MAX_LINKS][NVLINK_COUNTERS];
    int numa_node;
    unsigned long long cpus[CPU_WORDS];
    unsigned nprocs, ngprocs;
    struct proc procs[MAX_PROCS], gprocs[MAX_PROCS];
};

struct state {
    char driver_version[80], nvml_version[80];
    int cuda_driver_version;
    unsigned ngpus;
    struct gpu gpus[MAX_GPUS];
};

/* The opaque nvmlDevice_t: one stable handle per physical GPU slot. */
struct nvmlDevice_st {
    unsigned slot;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct state g_state;
static struct nvmlDevice_st g_handles[MAX_GPUS];
static unsigned g_refcount;
static char g_path[4096];
static struct stat g_stat; /* of the file g_state was read from */
static unsigned long long g_energy_at[MAX_GPUS], g_energy_mj[MAX_GPUS];

/* ------------------------------------------------------------------ state file parsing */

enum ftype { F_U32, F_U64, F_I32, F_STR };
struct field {
    const char *name;
    enum ftype type;
    size_t off, size;
};
#define U32(n) {#n, F_U32, offsetof(struct gpu, n), 0}
#define U64(n) {#n, F_U64, offsetof(struct gpu, n), 0}
#define I32(n) {#n, F_I32, offsetof(struct gpu, n), 0}
#define STR(n) {#n, F_STR, offsetof(struct gpu, n), sizeof(((struct gpu *)0)->n)}

static const struct field GPU_FIELDS[] = {
    U32(present), U32(hang), STR(name), STR(uuid), STR(serial), STR(pci_bus_id), STR(vbios),
    STR(board_part_number),
    U32(minor), U32(pci_device_id), U32(pci_subsystem_id), U32(arch), U32(brand),
    U32(cc_major), U32(cc_minor), U64(mem_total), U64(mem_used), U64(mem_reserved),
    U32(temp_gpu), U32(temp_mem), U32(temp_shutdown), U32(temp_slowdown), U32(temp_mem_max),
    U32(temp_gpu_max), U32(power_mw), U32(power_limit_mw), U32(power_enforced_mw),
    U32(power_default_mw), U32(power_min_mw), U32(power_max_mw), U64(energy_mj),
    U64(energy_epoch), U32(clock_sm), U32(clock_sm_max), U32(clock_mem), U32(clock_mem_max),
    U32(clock_video), U32(clock_video_max), U32(clock_app_sm), U32(clock_app_mem),
    U64(clock_reasons), U64(clock_reasons_supported), U32(util_gpu), U32(util_mem),
    U32(pstate), U32(persistence), U32(ecc_mode), U64(ecc_sbe_vol), U64(ecc_dbe_vol),
    U64(ecc_sbe_agg), U64(ecc_dbe_agg), U32(retired_sbe), U32(retired_dbe),
    U32(retired_pending), U32(remap_cor), U32(remap_unc), U32(remap_pending),
    U32(remap_failure), U32(pcie_gen), U32(pcie_gen_max), U32(pcie_gen_gpu_max),
    U32(pcie_width), U32(pcie_width_max), U32(pcie_replay), U32(nvlink_count),
    U32(nvlink_version), I32(numa_node), U32(fabric_state), U32(fabric_status), U32(fabric_health),
    U32(recovery_action),
};

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

/* "0-55,112-167" -> bit mask in 64-bit words */
static void parse_cpulist(unsigned long long *words, const char *s) {
    memset(words, 0, CPU_WORDS * sizeof *words);
    while (*s) {
        char *end;
        unsigned long lo = strtoul(s, &end, 10), hi = lo;
        if (end == s) return;
        if (*end == '-') hi = strtoul(end + 1, &end, 10);
        for (unsigned long c = lo; c <= hi && c < CPU_WORDS * 64; c++) words[c / 64] |= 1ULL << (c % 64);
        s = *end == ',' ? end + 1 : end;
        if (*end != ',') return;
    }
}

/* "pid:bytes,pid:bytes" */
static unsigned parse_procs(struct proc *procs, const char *s) {
    unsigned n = 0;
    while (*s && n < MAX_PROCS) {
        char *end;
        procs[n].pid = (unsigned)strtoul(s, &end, 10);
        if (end == s || *end != ':') break;
        procs[n].used = strtoull(end + 1, &end, 10);
        n++;
        if (*end != ',') break;
        s = end + 1;
    }
    return n;
}

static void set_gpu_field(struct gpu *g, const char *key, const char *val) {
    if (strcmp(key, "nvlink_up") == 0) {
        memset(g->nvlink_up, 0, sizeof g->nvlink_up);
        for (unsigned l = 0; l < MAX_LINKS && val[l]; l++) g->nvlink_up[l] = val[l] == '1';
        return;
    }
    if (strncmp(key, "nvlink_err.", 11) == 0) {
        unsigned link = (unsigned)strtoul(key + 11, NULL, 10);
        if (link >= MAX_LINKS) return;
        const char *p = val;
        for (unsigned c = 0; c < NVLINK_COUNTERS && *p; c++) {
            char *end;
            g->nvlink_err[link][c] = strtoull(p, &end, 10);
            p = *end == ',' ? end + 1 : end;
        }
        return;
    }
    if (strcmp(key, "cpus") == 0) { parse_cpulist(g->cpus, val); return; }
    if (strcmp(key, "procs") == 0) { g->nprocs = parse_procs(g->procs, val); return; }
    if (strcmp(key, "graphics_procs") == 0) { g->ngprocs = parse_procs(g->gprocs, val); return; }
    for (size_t i = 0; i < sizeof GPU_FIELDS / sizeof GPU_FIELDS[0]; i++) {
        const struct field *f = &GPU_FIELDS[i];
        if (strcmp(key, f->name) != 0) continue;
        char *p = (char *)g + f->off;
        switch (f->type) {
        case F_U32: *(unsigned *)p = (unsigned)strtoul(val, NULL, 0); break;
        case F_U64: *(unsigned long long *)p = strtoull(val, NULL, 0); break;
        case F_I32: *(int *)p = (int)strtol(val, NULL, 0); break;
        case F_STR: copy_str(p, f->size, val); break;
        }
        return;
    }
    /* unknown keys are ignored: a newer writer may add some */
}

/* Parse the state file at `path` into *st. Returns 0 on success, -1 if missing or unreadable.
 * `gpu.N.loaded.KEY=V` lines are what GPU N shows while it is under load (a fault that only a
 * stress brings out): applied over the plain keys, in a second pass, only when `loaded`. */
static int load_state(const char *path, struct state *st, struct stat *sb, int loaded) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (fstat(fileno(f), sb) != 0) { fclose(f); return -1; }
    memset(st, 0, sizeof *st);
    char line[8192];
    for (int pass = 0; pass < (loaded ? 2 : 1); pass++) {
      rewind(f);
      while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (line[0] == '#' || !eq) continue;
        *eq = 0;
        const char *key = line, *val = eq + 1;
        if (strncmp(key, "gpu.", 4) == 0) {
            char *dot;
            unsigned long idx = strtoul(key + 4, &dot, 10);
            if (*dot != '.' || idx >= MAX_GPUS) continue;
            int under_load = strncmp(dot + 1, "loaded.", 7) == 0;
            if (under_load != pass) continue;
            if (idx + 1 > st->ngpus) st->ngpus = (unsigned)idx + 1;
            set_gpu_field(&st->gpus[idx], dot + 1 + (under_load ? 7 : 0), val);
        } else if (pass == 1) {
            continue;
        } else if (strcmp(key, "driver_version") == 0) {
            copy_str(st->driver_version, sizeof st->driver_version, val);
        } else if (strcmp(key, "nvml_version") == 0) {
            copy_str(st->nvml_version, sizeof st->nvml_version, val);
        } else if (strcmp(key, "cuda_driver_version") == 0) {
            st->cuda_driver_version = (int)strtol(val, NULL, 10);
        }
      }
    }
    fclose(f);
    return 0;
}

/* Whether the node's GPUs are under load: `<node>.load` beside the state file holds the epoch
 * second until which a stress runs (written by the burn-in's stress in the dev cluster), so a
 * stress killed half-way stops loading them at its deadline. */
static char g_load_path[4096];
static int g_loaded;

static int under_load(void) {
    FILE *f = fopen(g_load_path, "r");
    if (!f) return 0;
    double until = 0;
    int ok = fscanf(f, "%lf", &until) == 1;
    fclose(f);
    return ok && until > (double)time(NULL);
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Re-read the state file if it changed. Caller holds g_lock. A vanished file keeps the last state. */
static void refresh(void) {
    struct stat sb;
    int loaded = under_load();
    if (stat(g_path, &sb) != 0 || (same_file(&sb, &g_stat) && loaded == g_loaded)) return;
    struct state *fresh = malloc(sizeof *fresh);
    if (!fresh) return;
    if (load_state(g_path, fresh, &sb, loaded) == 0) {
        g_state = *fresh;
        g_stat = sb;
        g_loaded = loaded;
    }
    free(fresh);
}

static int node_name(char *buf, size_t size) {
    const char *n = getenv("SLURMADM_FAKE_NVML_NODE");
    if (!n || !*n) n = getenv("SLURMD_NODENAME");
    if (n && *n) { copy_str(buf, size, n); return 0; }
    if (gethostname(buf, size) != 0) return -1;
    buf[size - 1] = 0;
    buf[strcspn(buf, ".")] = 0;
    return 0;
}

/* ------------------------------------------------------------------ init / shutdown / errors */

static nvmlReturn_t do_init(void) {
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        const char *dir = getenv("SLURMADM_FAKE_NVML_DIR");
        char node[256];
        struct state *fresh = malloc(sizeof *fresh);
        struct stat sb;
        if (!fresh) {
            r = NVML_ERROR_UNKNOWN;
        } else if (!dir || !*dir || node_name(node, sizeof node) != 0) {
            r = NVML_ERROR_DRIVER_NOT_LOADED;
        } else {
            snprintf(g_path, sizeof g_path, "%s/%s.state", dir, node);
            snprintf(g_load_path, sizeof g_load_path, "%s/%s.load", dir, node);
            g_loaded = under_load();
            if (load_state(g_path, fresh, &sb, g_loaded) != 0) {
                r = NVML_ERROR_DRIVER_NOT_LOADED;
            } else {
                g_state = *fresh;
                g_stat = sb;
                for (unsigned i = 0; i < MAX_GPUS; i++) g_handles[i].slot = i;
                memset(g_energy_at, 0, sizeof g_energy_at);
            }
        }
        free(fresh);
    }
    if (r == NVML_SUCCESS) g_refcount++;
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) r = NVML_ERROR_UNINITIALIZED;
    else g_refcount--;
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Version Mismatch";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------ locking helpers */

/* Lock and refresh; fails (unlocked) when NVML is not initialised. */
static nvmlReturn_t enter_system(void) {
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    refresh();
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t r) {
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Block while GPU `slot` is hung (caller holds g_lock; it is released while sleeping). */
static nvmlReturn_t wait_while_hung(unsigned slot) {
    time_t deadline = time(NULL) + HANG_LIMIT_S;
    while (g_state.gpus[slot].hang) {
        if (time(NULL) >= deadline) return NVML_ERROR_GPU_IS_LOST;
        pthread_mutex_unlock(&g_lock);
        struct timespec ts = {0, HANG_POLL_NS};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_lock);
        refresh();
    }
    return NVML_SUCCESS;
}

/* Lock, refresh, wait out a hang, and resolve a handle. On success g_lock is held. */
static nvmlReturn_t enter(nvmlDevice_t dev, struct gpu **out) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    if (!dev || dev < g_handles || dev >= g_handles + MAX_GPUS) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned slot = dev->slot;
    if (slot >= g_state.ngpus) return leave(NVML_ERROR_GPU_IS_LOST);
    r = wait_while_hung(slot);
    if (r) return leave(r);
    if (!g_state.gpus[slot].present) return leave(NVML_ERROR_GPU_IS_LOST);
    *out = &g_state.gpus[slot];
    return NVML_SUCCESS;
}

static nvmlReturn_t put_str(char *buf, unsigned len, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, s);
    return NVML_SUCCESS;
}

/* A getter with one output pointer: `EXPR` reads struct gpu *g. */
#define GETTER(fn, T, EXPR)                                                                     \
    EXPORT nvmlReturn_t fn(nvmlDevice_t dev, T *out) {                                         \
        struct gpu *g;                                                                          \
        nvmlReturn_t r = enter(dev, &g);                                                        \
        if (r) return r;                                                                        \
        if (!out) return leave(NVML_ERROR_INVALID_ARGUMENT);                                    \
        *out = (T)(EXPR);                                                                       \
        return leave(NVML_SUCCESS);                                                             \
    }

#define STRING_GETTER(fn, FIELD)                                                                \
    EXPORT nvmlReturn_t fn(nvmlDevice_t dev, char *buf, unsigned int len) {                    \
        struct gpu *g;                                                                          \
        nvmlReturn_t r = enter(dev, &g);                                                        \
        if (r) return r;                                                                        \
        return leave(put_str(buf, len, g->FIELD));                                              \
    }

/* ------------------------------------------------------------------ system */

static nvmlReturn_t system_str(char *buf, unsigned len, const char *which) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    return leave(put_str(buf, len, which[0] == 'd' ? g_state.driver_version : g_state.nvml_version));
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    return system_str(buf, len, "driver");
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len) {
    return system_str(buf, len, "nvml");
}

static nvmlReturn_t cuda_version(int *v) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    if (!v) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *v = g_state.cuda_driver_version;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return cuda_version(v); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return cuda_version(v); }

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int len) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    char path[64], comm[256] = "";
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f) return leave(NVML_ERROR_NOT_FOUND);
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    return leave(put_str(name, len, comm));
}

/* ------------------------------------------------------------------ enumeration and handles */

static unsigned present_count(void) {
    unsigned n = 0;
    for (unsigned i = 0; i < g_state.ngpus; i++) n += g_state.gpus[i].present != 0;
    return n;
}

static nvmlReturn_t device_count(unsigned *count) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = present_count();
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { return device_count(count); }

/* Hand out the handle of `slot` (caller holds g_lock), waiting out a hang first. */
static nvmlReturn_t give_handle(int slot, nvmlDevice_t *dev) {
    if (slot < 0) return leave(NVML_ERROR_NOT_FOUND);
    nvmlReturn_t r = wait_while_hung((unsigned)slot);
    if (r) return leave(r);
    if (!g_state.gpus[slot].present) return leave(NVML_ERROR_GPU_IS_LOST);
    *dev = &g_handles[slot];
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t handle_by_index(unsigned index, nvmlDevice_t *dev) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    if (!dev || index >= present_count()) return leave(NVML_ERROR_INVALID_ARGUMENT);
    int slot = -1;
    for (unsigned i = 0, seen = 0; i < g_state.ngpus; i++) {
        if (!g_state.gpus[i].present) continue;
        if (seen++ == index) { slot = (int)i; break; }
    }
    return give_handle(slot, dev);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    return handle_by_index(index, dev);
}

static nvmlReturn_t handle_by_string(const char *want, size_t field_off, nvmlDevice_t *dev) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    if (!want || !dev) return leave(NVML_ERROR_INVALID_ARGUMENT);
    int slot = -1;
    for (unsigned i = 0; i < g_state.ngpus && slot < 0; i++) {
        const char *have = (const char *)&g_state.gpus[i] + field_off;
        if (g_state.gpus[i].present && strcasecmp(have, want) == 0) slot = (int)i;
    }
    return give_handle(slot, dev);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    return handle_by_string(uuid, offsetof(struct gpu, uuid), dev);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *dev) {
    return handle_by_string(serial, offsetof(struct gpu, serial), dev);
}

/* "00000000:1B:00.0", "0000:1b:00.0" or "1b:00.0" -> domain, bus, device, function */
static int parse_bus_id(const char *s, unsigned v[4]) {
    v[0] = v[3] = 0;
    if (sscanf(s, "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]) >= 3) return 0;
    v[0] = 0;
    return sscanf(s, "%x:%x.%x", &v[1], &v[2], &v[3]) >= 2 ? 0 : -1;
}

static nvmlReturn_t handle_by_bus_id(const char *bus_id, nvmlDevice_t *dev) {
    nvmlReturn_t r = enter_system();
    if (r) return r;
    unsigned want[4], have[4];
    if (!bus_id || !dev || parse_bus_id(bus_id, want) != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    int slot = -1;
    for (unsigned i = 0; i < g_state.ngpus && slot < 0; i++) {
        if (g_state.gpus[i].present && parse_bus_id(g_state.gpus[i].pci_bus_id, have) == 0 &&
            memcmp(want, have, sizeof want) == 0)
            slot = (int)i;
    }
    return give_handle(slot, dev);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *dev) {
    return handle_by_bus_id(id, dev);
}

/* NVML index: position among the GPUs present (a GPU that fell off the bus shifts later ones). */
static unsigned nvml_index(const struct gpu *g) {
    unsigned n = 0;
    for (const struct gpu *p = g_state.gpus; p < g; p++) n += p->present != 0;
    return n;
}

/* ------------------------------------------------------------------ identity */

STRING_GETTER(nvmlDeviceGetName, name)
STRING_GETTER(nvmlDeviceGetUUID, uuid)
STRING_GETTER(nvmlDeviceGetSerial, serial)
STRING_GETTER(nvmlDeviceGetVbiosVersion, vbios)
/* nvidia-smi -q "Board Part Number"; a swapped GPU (gpu-fault --kind replace) brings its own */
STRING_GETTER(nvmlDeviceGetBoardPartNumber, board_part_number)
GETTER(nvmlDeviceGetIndex, unsigned int, nvml_index(g))
GETTER(nvmlDeviceGetMinorNumber, unsigned int, g->minor)
GETTER(nvmlDeviceGetArchitecture, unsigned int, g->arch)
GETTER(nvmlDeviceGetBrand, unsigned int, g->brand)

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int *major, int *minor) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!major || !minor) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = (int)g->cc_major;
    *minor = (int)g->cc_minor;
    return leave(NVML_SUCCESS);
}

/* nvmlPciInfo_t (v3): busIdLegacy[16], domain, bus, device, pciDeviceId, pciSubSystemId, busId[32] */
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static void legacy_bus_id(char out[16], const unsigned v[4]) {
    snprintf(out, 16, "%04X:%02X:%02X.%X", v[0] & 0xffff, v[1], v[2], v[3]);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    unsigned v[4];
    if (!pci || parse_bus_id(g->pci_bus_id, v) != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    legacy_bus_id(pci->busIdLegacy, v);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", v[0], v[1], v[2], v[3]);
    pci->domain = v[0];
    pci->bus = v[1];
    pci->device = v[2];
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ memory */

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
#define NVML_MEMORY_V2 0x02000028u

static unsigned long long mem_used(const struct gpu *g) {
    unsigned long long used = g->mem_used;
    for (unsigned i = 0; i < g->nprocs; i++) used += g->procs[i].used;
    for (unsigned i = 0; i < g->ngprocs; i++) used += g->gprocs[i].used;
    return used < g->mem_total ? used : g->mem_total;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!m) return leave(NVML_ERROR_INVALID_ARGUMENT);
    m->total = g->mem_total;
    m->used = mem_used(g);
    m->free = m->total - m->used;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!m) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (m->version != NVML_MEMORY_V2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    m->total = g->mem_total;
    m->reserved = g->mem_reserved;
    m->used = mem_used(g);
    unsigned long long taken = m->used + m->reserved;
    m->free = taken < m->total ? m->total - taken : 0;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ temperature, power, clocks */

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, unsigned int sensor, unsigned int *temp) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!temp || sensor != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *temp = g->temp_gpu;
    return leave(NVML_SUCCESS);
}

typedef struct { unsigned version, sensorType; int temperature; } nvmlTemperature_v1_t;
#define NVML_TEMPERATURE_V1 0x0100000Cu

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *t) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!t) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (t->version != NVML_TEMPERATURE_V1) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (t->sensorType != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    t->temperature = (int)g->temp_gpu;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t dev, unsigned int which, unsigned int *temp) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!temp) return leave(NVML_ERROR_INVALID_ARGUMENT);
    switch (which) {
    case 0: *temp = g->temp_shutdown; break;
    case 1: *temp = g->temp_slowdown; break;
    case 2: *temp = g->temp_mem_max; break;
    case 3: *temp = g->temp_gpu_max; break;
    default: return leave(NVML_ERROR_NOT_SUPPORTED);
    }
    return leave(NVML_SUCCESS);
}

GETTER(nvmlDeviceGetPowerUsage, unsigned int, g->power_mw)
GETTER(nvmlDeviceGetPowerManagementLimit, unsigned int, g->power_limit_mw)
GETTER(nvmlDeviceGetEnforcedPowerLimit, unsigned int, g->power_enforced_mw)
GETTER(nvmlDeviceGetPowerManagementDefaultLimit, unsigned int, g->power_default_mw)
GETTER(nvmlDeviceGetPowerManagementMode, unsigned int, 1)
GETTER(nvmlDeviceGetPerformanceState, unsigned int, g->pstate)
GETTER(nvmlDeviceGetPersistenceMode, unsigned int, g->persistence)
GETTER(nvmlDeviceGetComputeMode, unsigned int, 0)

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t dev, unsigned int *lo, unsigned int *hi) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!lo || !hi) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *lo = g->power_min_mw;
    *hi = g->power_max_mw;
    return leave(NVML_SUCCESS);
}

/* Energy grows with the power draw since the state was written (monotonic within a process). */
static unsigned long long energy(struct gpu *g) {
    unsigned slot = (unsigned)(g - g_state.gpus);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long ms = (unsigned long long)now.tv_sec * 1000 + (unsigned long long)now.tv_nsec / 1000000;
    if (!g_energy_at[slot]) {
        unsigned long long since = g->energy_epoch * 1000;
        g_energy_at[slot] = since && since < ms ? since : ms;
        g_energy_mj[slot] = g->energy_mj;
    }
    g_energy_mj[slot] += (unsigned long long)g->power_mw * (ms - g_energy_at[slot]) / 1000;
    g_energy_at[slot] = ms;
    return g_energy_mj[slot];
}

GETTER(nvmlDeviceGetTotalEnergyConsumption, unsigned long long, energy(g))

/* clock type: 0 graphics, 1 SM, 2 MEM, 3 video */
static int clock_of(const struct gpu *g, unsigned type, unsigned kind, unsigned *out) {
    /* kind: 0 current, 1 max, 2 applications */
    switch (type) {
    case 0:
    case 1: *out = kind == 0 ? g->clock_sm : kind == 1 ? g->clock_sm_max : g->clock_app_sm; return 0;
    case 2: *out = kind == 0 ? g->clock_mem : kind == 1 ? g->clock_mem_max : g->clock_app_mem; return 0;
    case 3: *out = kind == 0 ? g->clock_video : g->clock_video_max; return 0;
    default: return -1;
    }
}

static nvmlReturn_t clock_query(nvmlDevice_t dev, unsigned type, unsigned kind, unsigned *out) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!out || clock_of(g, type, kind, out) != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, unsigned int t, unsigned int *c) {
    return clock_query(d, t, 0, c);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, unsigned int t, unsigned int *c) {
    return clock_query(d, t, 1, c);
}
EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t d, unsigned int t, unsigned int *c) {
    return clock_query(d, t, 2, c);
}
EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t d, unsigned int t, unsigned int *c) {
    return clock_query(d, t, 2, c);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t d, unsigned int t, unsigned int *c) {
    return clock_query(d, t, 1, c);
}

/* clock id: 0 current, 1 app target, 2 app default, 3 customer boost max */
EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t d, unsigned int type, unsigned int id, unsigned int *c) {
    static const unsigned kind[] = {0, 2, 2, 1};
    if (id > 3) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_query(d, type, kind[id], c);
}

GETTER(nvmlDeviceGetCurrentClocksThrottleReasons, unsigned long long, g->clock_reasons)
GETTER(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, g->clock_reasons)
GETTER(nvmlDeviceGetSupportedClocksThrottleReasons, unsigned long long, g->clock_reasons_supported)
GETTER(nvmlDeviceGetSupportedClocksEventReasons, unsigned long long, g->clock_reasons_supported)

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!u) return leave(NVML_ERROR_INVALID_ARGUMENT);
    u->gpu = g->util_gpu;
    u->memory = g->util_mem;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ ECC, retired pages, row remapping */

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!current || !pending) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = g->ecc_mode;
    return leave(NVML_SUCCESS);
}

GETTER(nvmlDeviceGetDefaultEccMode, unsigned int, 1)

/* error type: 0 corrected, 1 uncorrected; counter: 0 volatile, 1 aggregate */
static int ecc_total(const struct gpu *g, unsigned type, unsigned counter, unsigned long long *out) {
    if (type > 1 || counter > 1) return -1;
    *out = type == 0 ? (counter == 0 ? g->ecc_sbe_vol : g->ecc_sbe_agg)
                     : (counter == 0 ? g->ecc_dbe_vol : g->ecc_dbe_agg);
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, unsigned int type, unsigned int counter,
                                                unsigned long long *count) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!count || ecc_total(g, type, counter, count) != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->ecc_mode) return leave(NVML_ERROR_NOT_SUPPORTED);
    return leave(NVML_SUCCESS);
}

/* All errors are in device memory (DRAM, location 2); other locations count 0. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t dev, unsigned int type, unsigned int counter,
                                                    unsigned int location, unsigned long long *count) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!count || location > 7 || ecc_total(g, type, counter, count) != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->ecc_mode) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (location != 2) *count = 0;
    return leave(NVML_SUCCESS);
}

/* cause: 0 multiple single-bit, 1 double-bit. Count semantics as NVML: size query with NULL. */
static nvmlReturn_t retired_pages(nvmlDevice_t dev, unsigned cause, unsigned *count,
                                  unsigned long long *addresses, unsigned long long *times) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!count || cause > 1) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = cause == 0 ? g->retired_sbe : g->retired_dbe;
    if (!addresses || *count < n) {
        *count = n;
        return leave(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (unsigned i = 0; i < n; i++) {
        addresses[i] = 0x1000000ULL * (cause + 1) + 0x1000ULL * i;
        if (times) times[i] = g->energy_epoch + i;
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, unsigned int cause, unsigned int *count,
                                              unsigned long long *addresses) {
    return retired_pages(dev, cause, count, addresses, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t dev, unsigned int cause, unsigned int *count,
                                                 unsigned long long *addresses, unsigned long long *times) {
    return retired_pages(dev, cause, count, addresses, times);
}

GETTER(nvmlDeviceGetRetiredPagesPendingStatus, unsigned int, g->retired_pending)

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *cor, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!cor || !unc || !pending || !failure) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *cor = g->remap_cor;
    *unc = g->remap_unc;
    *pending = g->remap_pending;
    *failure = g->remap_failure;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ PCIe */

GETTER(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int, g->pcie_gen)
GETTER(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int, g->pcie_gen_max)
GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, unsigned int, g->pcie_gen_gpu_max)
GETTER(nvmlDeviceGetCurrPcieLinkWidth, unsigned int, g->pcie_width)
GETTER(nvmlDeviceGetMaxPcieLinkWidth, unsigned int, g->pcie_width_max)
GETTER(nvmlDeviceGetPcieReplayCounter, unsigned int, g->pcie_replay)

/* Per-lane transfer rate in Mbps by generation. */
static unsigned pcie_speed(unsigned gen) {
    static const unsigned mbps[] = {0, 2500, 5000, 8000, 16000, 32000, 64000, 128000};
    return gen < sizeof mbps / sizeof mbps[0] ? mbps[gen] : 0;
}

GETTER(nvmlDeviceGetPcieSpeed, unsigned int, pcie_speed(g->pcie_gen))

/* ------------------------------------------------------------------ NVLink */

/* Links beyond NVML_NVLINK_MAX_LINKS are invalid; links the GPU does not have are unsupported. */
static nvmlReturn_t check_link(const struct gpu *g, unsigned link) {
    if (link >= MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= g->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, unsigned int *active) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!active) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((r = check_link(g, link))) return leave(r);
    *active = g->nvlink_up[link];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t dev, unsigned int link, unsigned int *version) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!version) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((r = check_link(g, link))) return leave(r);
    *version = g->nvlink_version;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t dev, unsigned int link, unsigned int counter,
                                                    unsigned long long *value) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!value || counter >= NVLINK_COUNTERS) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((r = check_link(g, link))) return leave(r);
    *value = g->nvlink_err[link][counter];
    return leave(NVML_SUCCESS);
}

static unsigned long long nvlink_total(const struct gpu *g, unsigned counter) {
    unsigned long long sum = 0;
    for (unsigned l = 0; l < g->nvlink_count && l < MAX_LINKS; l++) sum += g->nvlink_err[l][counter];
    return sum;
}

/* ------------------------------------------------------------------ processes */

/* nvmlProcessInfo_v2_t, used by the _v2 and _v3 symbols. */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;

static nvmlReturn_t processes(nvmlDevice_t dev, int graphics, unsigned *count, nvmlProcessInfo_t *infos) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = graphics ? g->ngprocs : g->nprocs;
    const struct proc *p = graphics ? g->gprocs : g->procs;
    if (!infos || *count < n) {
        *count = n;
        return leave(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (unsigned i = 0; i < n; i++) {
        infos[i].pid = p[i].pid;
        infos[i].usedGpuMemory = p[i].used;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu; /* no MIG */
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) {
    return processes(d, 0, c, i);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) {
    return processes(d, 0, c, i);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) {
    return processes(d, 1, c, i);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) {
    return processes(d, 1, c, i);
}

/* ------------------------------------------------------------------ topology */

static nvmlReturn_t cpu_mask(nvmlDevice_t dev, unsigned size, unsigned long long *set) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!set || size == 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < size; i++) set[i] = i < CPU_WORDS ? g->cpus[i] : 0;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int size, unsigned long long *set) {
    return cpu_mask(d, size, set);
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t d, unsigned int size, unsigned long long *set, unsigned int scope) {
    if (scope > 1) return NVML_ERROR_INVALID_ARGUMENT; /* 0 NUMA node, 1 socket: the same here */
    return cpu_mask(d, size, set);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t dev, unsigned int size, unsigned long long *set, unsigned int scope) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!set || size == 0 || scope > 1 || g->numa_node < 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(set, 0, size * sizeof *set);
    if ((unsigned)g->numa_node / 64 < size) set[g->numa_node / 64] = 1ULL << (g->numa_node % 64);
    return leave(NVML_SUCCESS);
}

/* The GPU is not itself a NUMA node on x86 HGX boards ("GPU NUMA ID: N/A" in nvidia-smi topo). */
EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t dev, unsigned int *node) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    (void)node;
    return leave(NVML_ERROR_NOT_SUPPORTED);
}

/* ------------------------------------------------------------------ field values */

typedef union {
    double dVal;
    unsigned uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

enum { VT_UINT = 1, VT_ULL = 3 };

/* One field; returns its NVML return code and fills type/value. */
static nvmlReturn_t field_value(const struct gpu *g, unsigned id, unsigned scope, unsigned *type, nvmlValue_t *v) {
    unsigned long long x;
    *type = VT_ULL;
    switch (id) {
    case 3: x = g->ecc_sbe_vol; break;   /* NVML_FI_DEV_ECC_SBE_VOL_TOTAL */
    case 4: x = g->ecc_dbe_vol; break;   /* NVML_FI_DEV_ECC_DBE_VOL_TOTAL */
    case 5: x = g->ecc_sbe_agg; break;   /* NVML_FI_DEV_ECC_SBE_AGG_TOTAL */
    case 6: x = g->ecc_dbe_agg; break;   /* NVML_FI_DEV_ECC_DBE_AGG_TOTAL */
    case 29: x = g->retired_sbe; break;  /* NVML_FI_DEV_RETIRED_SBE */
    case 30: x = g->retired_dbe; break;  /* NVML_FI_DEV_RETIRED_DBE */
    case 31: x = g->retired_pending; break; /* NVML_FI_DEV_RETIRED_PENDING */
    case 38: x = nvlink_total(g, 2); break; /* NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL */
    case 45: x = nvlink_total(g, 3); break; /* NVLINK_CRC_DATA_ERROR_COUNT_TOTAL */
    case 52: x = nvlink_total(g, 0); break; /* NVLINK_REPLAY_ERROR_COUNT_TOTAL */
    case 59: x = nvlink_total(g, 1); break; /* NVLINK_RECOVERY_ERROR_COUNT_TOTAL */
    case 82: *type = VT_UINT; x = g->temp_mem; break; /* NVML_FI_DEV_MEMORY_TEMP */
    case 91: *type = VT_UINT; x = g->nvlink_count; break; /* NVML_FI_DEV_NVLINK_LINK_COUNT */
    case 92: x = 0; break;                              /* RETIRED_PENDING_SBE */
    case 93: x = g->retired_pending; break;             /* RETIRED_PENDING_DBE */
    case 94: x = g->pcie_replay; break;                 /* PCIE_REPLAY_COUNTER */
    case 142: *type = VT_UINT; x = g->remap_cor; break;     /* REMAPPED_COR */
    case 143: *type = VT_UINT; x = g->remap_unc; break;     /* REMAPPED_UNC */
    case 144: *type = VT_UINT; x = g->remap_pending; break; /* REMAPPED_PENDING */
    case 145: *type = VT_UINT; x = g->remap_failure; break; /* REMAPPED_FAILURE */
    case 230: /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: a driver before R565 (the catalog's first
               * "Xid 154 linkage" release) never sets it: it reads 0 whatever happened */
        *type = VT_UINT;
        x = atoi(g_state.driver_version) >= LINKAGE_FIRST_RELEASE ? g->recovery_action : 0;
        break;
    case 161: case 162: case 163: case 165: { /* per link (scopeId): DL replay, recovery, CRC, state */
        nvmlReturn_t r = check_link(g, scope);
        if (r) return r;
        const unsigned long long *err = g->nvlink_err[scope];
        if (id == 165) { *type = VT_UINT; x = g->nvlink_up[scope]; }
        else x = id == 163 ? err[2] + err[3] : err[id - 161];
        break;
    }
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    if (*type == VT_UINT) v->uiVal = (unsigned)x;
    else v->ullVal = x;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, nvmlFieldValue_t *values) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (count < 0 || (count > 0 && !values)) return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *f = &values[i];
        memset(&f->value, 0, sizeof f->value);
        f->timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
        f->latencyUsec = 0;
        f->nvmlReturn = field_value(g, f->fieldId, f->scopeId, &f->valueType, &f->value);
    }
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ NVSwitch fabric */

/* nvmlGpuFabricInfo_t (v1): clusterUuid[16], status, cliqueId, state. */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned cliqueId, state;
} nvmlGpuFabricInfo_t;

/* nvmlGpuFabricInfo_v2_t / _v3_t: version first, then the v1 fields, healthMask (v3: healthSummary). */
typedef struct {
    unsigned version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned cliqueId, state, healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
#define NVML_GPU_FABRIC_INFO_V2 0x02000024u
#define NVML_GPU_FABRIC_INFO_V3 0x03000028u

static void fabric_uuid(const struct gpu *g, unsigned char out[16]) {
    /* one fabric cluster per node: derive it from the first GPU's UUID characters */
    (void)g;
    const char *u = g_state.gpus[0].uuid;
    for (int i = 0; i < 16; i++) out[i] = (unsigned char)(u[4 + i] ? u[4 + i] : 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t dev, nvmlGpuFabricInfo_t *info) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!info) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->fabric_state == 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    memset(info, 0, sizeof *info);
    fabric_uuid(g, info->clusterUuid);
    info->status = (nvmlReturn_t)g->fabric_status;
    info->cliqueId = 1;
    info->state = g->fabric_state;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, nvmlGpuFabricInfo_v3_t *info) {
    struct gpu *g;
    nvmlReturn_t r = enter(dev, &g);
    if (r) return r;
    if (!info) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned version = info->version;
    if (version != NVML_GPU_FABRIC_INFO_V2 && version != NVML_GPU_FABRIC_INFO_V3)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (g->fabric_state == 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    size_t size = version == NVML_GPU_FABRIC_INFO_V3 ? sizeof *info : offsetof(nvmlGpuFabricInfo_v3_t, healthSummary);
    memset(info, 0, size);
    info->version = version;
    fabric_uuid(g, info->clusterUuid);
    info->status = (nvmlReturn_t)g->fabric_status;
    info->cliqueId = 1;
    info->state = g->fabric_state;
    info->healthMask = g->fabric_health;
    if (version == NVML_GPU_FABRIC_INFO_V3) info->healthSummary = g->fabric_health & 0x1 ? 2 : 1;
    return leave(NVML_SUCCESS);
}
