/*
 * A fake libnvidia-ml.so.1 for testing the GPU poller without a GPU.
 *
 * It exports the NVML entry points the poller reaches through nvidia-ml-py (ctypes), with the
 * real ABI (return codes, handle and struct layouts, buffer sizes). Its state comes from a plain
 * text file named by $FAKE_NVML_CONFIG, re-read whenever the file changes, so a test can flip a
 * fault while the poller runs. One setting a line, `key value`; `#` starts a comment:
 *
 *   device_count 2                 init_error 9 (NVML_ERROR_DRIVER_NOT_LOADED; 0 = success)
 *   driver_version 550.54.15       nvml_version 12.550.54.15       cuda_driver_version 12040
 *   gpu.0.name NVIDIA H100 80GB HBM3          gpu.0.uuid GPU-...
 *   gpu.0.util_gpu 87   gpu.0.util_memory 41  gpu.0.memory_total 85899345920 gpu.0.memory_used ...
 *   gpu.0.temperature 65  gpu.0.power_mw 350000  gpu.0.power_limit_mw 700000
 *   gpu.0.clock_sm_mhz 1980  gpu.0.clock_mem_mhz 2619  gpu.0.clocks_event_reasons 0x44
 *   gpu.0.ecc_corrected 3  gpu.0.ecc_uncorrected 0  gpu.0.supported_events 0x8f
 *   gpu.0.energy_mj 5000000        total energy at load (mJ); nvmlDeviceGetTotalEnergyConsumption
 *                                  adds what power_mw drew since the library was first asked
 *   gpu.0.lost 1                   every call on GPU 0 answers NVML_ERROR_GPU_IS_LOST
 *   gpu.0.error.<field> CODE       one field answers CODE (3 = NOT_SUPPORTED); fields: name uuid
 *                                  utilization memory temperature power power_limit clock_sm
 *                                  clock_mem clocks_event_reasons ecc_corrected ecc_uncorrected
 *                                  supported_events register_events energy
 *   gpu.0.delay_us 200000          nvmlDeviceGetUtilizationRates on GPU 0 sleeps this long
 *   xid SEQ GPU CODE               an XID event, delivered once by nvmlEventSetWait_v2 (in SEQ
 *                                  order; append lines with growing SEQ to raise more)
 *   wait_error CODE                nvmlEventSetWait_v2 answers CODE
 *
 * GPU Performance Monitoring (GPM, Hopper and newer): nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc,
 * nvmlGpmSampleFree, nvmlGpmSampleGet and nvmlGpmMetricsGet, with the ABI of nvml.h. Each GPU
 * integrates its configured rates over real (monotonic) time into counters that wrap at 2^bits; a
 * sample copies the counters and a timestamp, and nvmlGpmMetricsGet divides the counter
 * differences by the time between the two samples (naively, like hardware counters read without
 * care: a counter that wrapped or was reset between the samples gives a negative figure).
 *   gpu.0.gpm_supported 1          nvmlGpmQueryDeviceSupport's isSupportedDevice (default 1)
 *   gpu.0.gpm.<metric> VALUE       the metric's rate: sm_util sm_occupancy any_tensor_util
 *                                  dram_bw_util (percent) pcie_tx pcie_rx nvlink_rx nvlink_tx (MiB/s)
 *   gpu.0.gpm_error.<metric> CODE  nvmlGpmMetricsGet answers CODE in that metric's nvmlReturn
 *   gpu.0.gpm_counter_bits 32      counters wrap at 2^bits (default 64)
 *   gpu.0.gpm_counter_start N      counters start at N (near 2^bits: the next interval wraps)
 *   gpu.0.gpm_reset K              a new K puts the counters back to their start (a GPU reset)
 *   gpu.0.error.gpm_support / gpm_sample CODE   nvmlGpmQueryDeviceSupport / nvmlGpmSampleGet fail
 * MIG (Multi-Instance GPU): a GPU in MIG mode holds up to mig_max MIG devices, each in a slot
 * (nvmlDeviceGetMigDeviceHandleByIndex answers NOT_FOUND for an empty slot). A MIG device answers its
 * name (the parent's name, " MIG ", its profile), UUID, memory, GPU instance id, attributes and GPM
 * (nvmlGpmMigSampleGet on the parent with its GPU instance id); every other field answers
 * NOT_SUPPORTED, as the device-level readings of a real MIG device do. Rewriting the slots is a
 * reconfiguration (instances destroyed and created); a handle whose slot emptied answers
 * INVALID_ARGUMENT.
 *   gpu.0.mig_mode 1               nvmlDeviceGetMigMode's current mode (default 0)
 *   gpu.0.mig_max 7                nvmlDeviceGetMaxMigDeviceCount (default 7 in MIG mode, else 0)
 *   gpu.0.mig.1.uuid MIG-...       slot 1 holds a MIG device (a slot without uuid is empty)
 *   gpu.0.mig.1.profile 1g.10gb    gpu.0.mig.1.gpu_instance_id 9    gpu.0.mig.1.compute_slices 1
 *   gpu.0.mig.1.gpu_slices 1       gpu.0.mig.1.sm_count 16
 *   gpu.0.mig.1.memory_total N     gpu.0.mig.1.memory_used N        gpu.0.mig.1.gpm.<metric> VALUE
 *   gpu.0.mig.1.error.<field> CODE (memory, name, uuid, attributes, gpm_sample)
 *   gpu.0.error.mig_mode CODE      nvmlDeviceGetMigMode fails
 * $FAKE_NVML_GPM_LIVE names a file that always holds the number of GPM samples allocated and not
 * freed (a leak shows as a growing number).
 * $FAKE_NVML_RELOAD_MS (default 0) throttles the check for a changed file; $FAKE_NVML_TRACE names
 * a file that gets one line per nvmlDeviceGetUtilizationRates call: `util GPU ENTER_NS EXIT_NS`.
 * Build with -DOMIT_<function> to leave an entry point out (an older driver: FunctionNotFound).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_MIG 8
#define MAX_XIDS 4096
#define MAX_SETS 64
#define TEXT 96

enum field {
    F_NAME, F_UUID, F_UTILIZATION, F_MEMORY, F_TEMPERATURE, F_POWER, F_POWER_LIMIT, F_CLOCK_SM,
    F_CLOCK_MEM, F_CLOCKS_EVENT_REASONS, F_ECC_CORRECTED, F_ECC_UNCORRECTED, F_SUPPORTED_EVENTS,
    F_REGISTER_EVENTS, F_ENERGY, F_GPM_SUPPORT, F_GPM_SAMPLE, F_MIG_MODE, F_ATTRIBUTES, F_COUNT
};
static const char *const field_names[F_COUNT] = {
    "name", "uuid", "utilization", "memory", "temperature", "power", "power_limit", "clock_sm",
    "clock_mem", "clocks_event_reasons", "ecc_corrected", "ecc_uncorrected", "supported_events",
    "register_events", "energy", "gpm_support", "gpm_sample", "mig_mode", "attributes",
};

/* The GPM metrics the fake computes: NVML_GPM_METRIC_* ids, config names, percent or MiB/s. */
#define GPM_KINDS 8
static const struct gpm_kind { unsigned id; const char *name; int percent; const char *unit; } gpm_kinds[GPM_KINDS] = {
    {2, "sm_util", 1, "%"},         {3, "sm_occupancy", 1, "%"}, {5, "any_tensor_util", 1, "%"},
    {10, "dram_bw_util", 1, "%"},   {20, "pcie_tx", 0, "MiB/s"}, {21, "pcie_rx", 0, "MiB/s"},
    {60, "nvlink_rx", 0, "MiB/s"},  {61, "nvlink_tx", 0, "MiB/s"},
};

struct gpu {
    char name[TEXT];
    char uuid[TEXT];
    unsigned util_gpu, util_memory, temperature, power_mw, power_limit_mw, clock_sm_mhz, clock_mem_mhz;
    unsigned long long memory_total, memory_used, clocks_event_reasons, ecc_corrected, ecc_uncorrected;
    unsigned long long supported_events, energy_mj;
    int lost;
    long delay_us;
    nvmlReturn_t error[F_COUNT];
    int gpm_supported;
    double gpm_rate[GPM_KINDS];
    nvmlReturn_t gpm_error[GPM_KINDS];
    unsigned gpm_counter_bits;
    unsigned long long gpm_counter_start;
    long gpm_reset;
    /* MIG: on a parent, its mode and slot count; on a MIG device (a slot), its identity */
    int mig_mode;
    int mig_max;  /* -1: the default */
    char profile[TEXT];
    unsigned gpu_instance_id, compute_slices, gpu_slices, sm_count;
};

struct xid { long seq; unsigned gpu; unsigned long long code; };

struct config {
    unsigned device_count;
    nvmlReturn_t init_error, wait_error;
    char driver_version[TEXT], nvml_version[TEXT];
    int cuda_driver_version;
    struct gpu gpus[MAX_GPUS];
    struct gpu migs[MAX_GPUS][MAX_MIG];
    struct xid xids[MAX_XIDS];
    unsigned xid_count;
};

/* The handle nvidia-ml-py passes around is a pointer to one of these (mig: the slot, -1 for a GPU). */
struct nvmlDevice_st { unsigned index; int mig; };
typedef struct nvmlDevice_st *nvmlDevice_t;

struct nvmlEventSet_st { int used; unsigned long long mask[MAX_GPUS]; };
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total; unsigned long long free; unsigned long long used; } nvmlMemory_t;

#define EVENT_XID 0x8ULL

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct config cfg;
static struct nvmlDevice_st devices[MAX_GPUS];
static struct nvmlDevice_st mig_devices[MAX_GPUS][MAX_MIG];
__attribute__((unused)) static struct nvmlEventSet_st sets[MAX_SETS];
static int init_count;
static long delivered_seq;
static struct timespec loaded_mtime;
static ino_t loaded_ino;
static off_t loaded_size = -1;
static long long last_check_ns = -1;

static long long now_ns(int clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void set_defaults(struct config *c) {
    memset(c, 0, sizeof(*c));
    c->device_count = 1;
    snprintf(c->driver_version, TEXT, "%s", "550.54.15");
    snprintf(c->nvml_version, TEXT, "%s", "12.550.54.15");
    c->cuda_driver_version = 12040;
    for (unsigned i = 0; i < MAX_GPUS; i++) {
        struct gpu *g = &c->gpus[i];
        snprintf(g->name, TEXT, "%s", "NVIDIA H100 80GB HBM3");
        snprintf(g->uuid, TEXT, "GPU-00000000-0000-0000-0000-%012u", i);
        g->util_gpu = 50;
        g->util_memory = 20;
        g->memory_total = 85899345920ULL;
        g->memory_used = 1073741824ULL;
        g->temperature = 40;
        g->power_mw = 100000;
        g->power_limit_mw = 700000;
        g->clock_sm_mhz = 1980;
        g->clock_mem_mhz = 2619;
        g->supported_events = 0x8fULL;
        g->energy_mj = 5000000ULL;
        g->gpm_supported = 1;
        g->gpm_counter_bits = 64;
        g->mig_max = -1;
        for (unsigned m = 0; m < MAX_MIG; m++) {
            struct gpu *d = &c->migs[i][m];
            memset(d, 0, sizeof *d);
            d->memory_total = 10737418240ULL;
            d->gpm_counter_bits = 64;
            d->gpm_supported = 1;
            d->compute_slices = 1;
            d->gpu_slices = 1;
            d->sm_count = 16;
            d->gpu_instance_id = m + 1;
            snprintf(d->profile, TEXT, "%s", "1g.10gb");
        }
    }
}

static int field_index(const char *name) {
    for (int f = 0; f < F_COUNT; f++)
        if (strcmp(field_names[f], name) == 0) return f;
    return -1;
}

static int gpm_kind_index(const char *name) {
    for (int k = 0; k < GPM_KINDS; k++)
        if (strcmp(gpm_kinds[k].name, name) == 0) return k;
    return -1;
}

static void set_gpu_value(struct gpu *g, const char *key, const char *value) {
    unsigned long long n = strtoull(value, NULL, 0);
    if (strcmp(key, "name") == 0) snprintf(g->name, TEXT, "%s", value);
    else if (strcmp(key, "uuid") == 0) snprintf(g->uuid, TEXT, "%s", value);
    else if (strcmp(key, "util_gpu") == 0) g->util_gpu = (unsigned)n;
    else if (strcmp(key, "util_memory") == 0) g->util_memory = (unsigned)n;
    else if (strcmp(key, "memory_total") == 0) g->memory_total = n;
    else if (strcmp(key, "memory_used") == 0) g->memory_used = n;
    else if (strcmp(key, "temperature") == 0) g->temperature = (unsigned)n;
    else if (strcmp(key, "power_mw") == 0) g->power_mw = (unsigned)n;
    else if (strcmp(key, "power_limit_mw") == 0) g->power_limit_mw = (unsigned)n;
    else if (strcmp(key, "clock_sm_mhz") == 0) g->clock_sm_mhz = (unsigned)n;
    else if (strcmp(key, "clock_mem_mhz") == 0) g->clock_mem_mhz = (unsigned)n;
    else if (strcmp(key, "clocks_event_reasons") == 0) g->clocks_event_reasons = n;
    else if (strcmp(key, "ecc_corrected") == 0) g->ecc_corrected = n;
    else if (strcmp(key, "ecc_uncorrected") == 0) g->ecc_uncorrected = n;
    else if (strcmp(key, "supported_events") == 0) g->supported_events = n;
    else if (strcmp(key, "energy_mj") == 0) g->energy_mj = n;
    else if (strcmp(key, "lost") == 0) g->lost = (int)n;
    else if (strcmp(key, "delay_us") == 0) g->delay_us = (long)n;
    else if (strcmp(key, "gpm_supported") == 0) g->gpm_supported = (int)n;
    else if (strcmp(key, "gpm_counter_bits") == 0) g->gpm_counter_bits = n >= 1 && n <= 64 ? (unsigned)n : 64;
    else if (strcmp(key, "gpm_counter_start") == 0) g->gpm_counter_start = n;
    else if (strcmp(key, "gpm_reset") == 0) g->gpm_reset = (long)n;
    else if (strcmp(key, "mig_mode") == 0) g->mig_mode = (int)n;
    else if (strcmp(key, "mig_max") == 0) g->mig_max = n <= MAX_MIG ? (int)n : MAX_MIG;
    else if (strcmp(key, "profile") == 0) snprintf(g->profile, TEXT, "%s", value);
    else if (strcmp(key, "gpu_instance_id") == 0) g->gpu_instance_id = (unsigned)n;
    else if (strcmp(key, "compute_slices") == 0) g->compute_slices = (unsigned)n;
    else if (strcmp(key, "gpu_slices") == 0) g->gpu_slices = (unsigned)n;
    else if (strcmp(key, "sm_count") == 0) g->sm_count = (unsigned)n;
    else if (strncmp(key, "gpm.", 4) == 0 || strncmp(key, "gpm_error.", 10) == 0) {
        int is_error = key[3] == '_';
        const char *metric = key + (is_error ? 10 : 4);
        int k = gpm_kind_index(metric);
        if (k < 0) fprintf(stderr, "fake_nvml: unknown GPM metric in %s\n", key);
        else if (is_error) g->gpm_error[k] = (nvmlReturn_t)n;
        else g->gpm_rate[k] = strtod(value, NULL);
    }
    else if (strncmp(key, "error.", 6) == 0) {
        int f = field_index(key + 6);
        if (f >= 0) g->error[f] = (nvmlReturn_t)n;
        else fprintf(stderr, "fake_nvml: unknown field in %s\n", key);
    } else fprintf(stderr, "fake_nvml: unknown gpu key %s\n", key);
}

static void parse_line(struct config *c, char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == ' ' || line[len - 1] == '\r')) line[--len] = '\0';
    while (*line == ' ') line++;
    if (*line == '\0') return;
    char *value = strchr(line, ' ');
    if (!value) return;
    *value++ = '\0';
    while (*value == ' ') value++;

    if (strcmp(line, "device_count") == 0) c->device_count = (unsigned)strtoul(value, NULL, 0);
    else if (strcmp(line, "init_error") == 0) c->init_error = (nvmlReturn_t)strtol(value, NULL, 0);
    else if (strcmp(line, "wait_error") == 0) c->wait_error = (nvmlReturn_t)strtol(value, NULL, 0);
    else if (strcmp(line, "driver_version") == 0) snprintf(c->driver_version, TEXT, "%s", value);
    else if (strcmp(line, "nvml_version") == 0) snprintf(c->nvml_version, TEXT, "%s", value);
    else if (strcmp(line, "cuda_driver_version") == 0) c->cuda_driver_version = (int)strtol(value, NULL, 0);
    else if (strcmp(line, "xid") == 0) {
        struct xid x;
        if (c->xid_count < MAX_XIDS && sscanf(value, "%ld %u %llu", &x.seq, &x.gpu, &x.code) == 3)
            c->xids[c->xid_count++] = x;
    } else if (strncmp(line, "gpu.", 4) == 0) {
        char *end;
        unsigned long index = strtoul(line + 4, &end, 10);
        if (*end == '.' && index < MAX_GPUS) {
            if (strncmp(end + 1, "mig.", 4) == 0) {
                char *rest;
                unsigned long slot = strtoul(end + 5, &rest, 10);
                if (*rest == '.' && slot < MAX_MIG) set_gpu_value(&c->migs[index][slot], rest + 1, value);
                else fprintf(stderr, "fake_nvml: bad MIG key %s\n", line);
            } else set_gpu_value(&c->gpus[index], end + 1, value);
        }
    } else fprintf(stderr, "fake_nvml: unknown key %s\n", line);
}

/* Re-read the config file when it changed (or was replaced); call with the lock held. */
static void reload_locked(void) {
    static int reload_ms = -1;
    if (reload_ms < 0) {
        const char *env = getenv("FAKE_NVML_RELOAD_MS");
        reload_ms = env ? atoi(env) : 0;
        set_defaults(&cfg);
    }
    long long now = now_ns(CLOCK_MONOTONIC);
    if (last_check_ns >= 0 && now - last_check_ns < (long long)reload_ms * 1000000LL) return;
    last_check_ns = now;

    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (st.st_ino == loaded_ino && st.st_size == loaded_size && st.st_mtim.tv_sec == loaded_mtime.tv_sec &&
        st.st_mtim.tv_nsec == loaded_mtime.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    static struct config next;
    set_defaults(&next);
    char line[512];
    while (fgets(line, sizeof line, f)) parse_line(&next, line);
    fclose(f);
    if (next.device_count > MAX_GPUS) next.device_count = MAX_GPUS;
    cfg = next;
    loaded_ino = st.st_ino;
    loaded_size = st.st_size;
    loaded_mtime = st.st_mtim;
}

static void reload(void) {
    pthread_mutex_lock(&lock);
    reload_locked();
    pthread_mutex_unlock(&lock);
}

/* Validate a device handle and field; on success *out points at the GPU's settings. */
static int mig_max_of(const struct gpu *g) {
    if (!g->mig_mode) return 0;
    return g->mig_max < 0 ? 7 : g->mig_max;
}

static int is_mig_handle(nvmlDevice_t device) {
    return device && (struct nvmlDevice_st *)device >= &mig_devices[0][0] &&
           (struct nvmlDevice_st *)device < &mig_devices[0][0] + MAX_GPUS * MAX_MIG;
}

/* A MIG device's settings: its parent must answer, be in MIG mode and still hold the slot. */
static nvmlReturn_t mig_for(nvmlDevice_t device, enum field f, struct gpu **out) {
    unsigned index = device->index;
    int slot = device->mig;
    if (index >= cfg.device_count || slot < 0 || slot >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    struct gpu *parent = &cfg.gpus[index];
    if (parent->lost) return NVML_ERROR_GPU_IS_LOST;
    struct gpu *m = &cfg.migs[index][slot];
    if (slot >= mig_max_of(parent) || m->uuid[0] == '\0') return NVML_ERROR_INVALID_ARGUMENT;
    if ((int)f >= 0 && m->error[f] != NVML_SUCCESS) return m->error[f];
    if ((int)f >= 0 && f != F_NAME && f != F_UUID && f != F_MEMORY && f != F_ATTRIBUTES && f != F_GPM_SAMPLE)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = m;
    return NVML_SUCCESS;
}

static nvmlReturn_t gpu_for(nvmlDevice_t device, enum field f, struct gpu **out) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (is_mig_handle(device)) return mig_for(device, f, out);
    if (!device || device < devices || device >= devices + MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned index = device->index;
    if (index >= cfg.device_count) return NVML_ERROR_INVALID_ARGUMENT;
    struct gpu *g = &cfg.gpus[index];
    if (g->lost) return NVML_ERROR_GPU_IS_LOST;
    if ((int)f >= 0 && g->error[f] != NVML_SUCCESS) return g->error[f];
    *out = g;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_text(char *dst, unsigned int length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    reload_locked();
    nvmlReturn_t rc = cfg.init_error;
    if (rc == NVML_SUCCESS) init_count++;
    pthread_mutex_unlock(&lock);
    return rc;
}

#ifndef OMIT_nvmlInit_v2
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
#endif

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) init_count--;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

#ifndef OMIT_nvmlSystemGetDriverVersion
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    return copy_text(version, length, cfg.driver_version);
}
#endif

#ifndef OMIT_nvmlSystemGetNVMLVersion
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    reload();
    return copy_text(version, length, cfg.nvml_version);
}
#endif

#ifndef OMIT_nvmlSystemGetCudaDriverVersion
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    reload();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = cfg.cuda_driver_version;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }
#endif

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = cfg.device_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= cfg.device_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.gpus[index].lost) return NVML_ERROR_GPU_IS_LOST;
    devices[index].index = index;
    devices[index].mig = -1;
    *device = &devices[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, (enum field)-1, &g);
    if (rc == NVML_SUCCESS) *index = device->index;
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_NAME, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (is_mig_handle(device)) {
        char text[2 * TEXT + 8];
        snprintf(text, sizeof text, "%s MIG %s", cfg.gpus[device->index].name, g->profile);
        return copy_text(name, length, text);
    }
    return copy_text(name, length, g->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_UUID, &g);
    return rc != NVML_SUCCESS ? rc : copy_text(uuid, length, g->uuid);
}

static void trace_utilization(unsigned index, long long enter, long long leave) {
    const char *path = getenv("FAKE_NVML_TRACE");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    char line[128];
    int n = snprintf(line, sizeof line, "util %u %lld %lld\n", index, enter, leave);
    ssize_t written = write(fd, line, (size_t)n);
    (void)written;
    close(fd);
}

#ifndef OMIT_nvmlDeviceGetUtilizationRates
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    long long enter = now_ns(CLOCK_REALTIME);
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_UTILIZATION, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (g->delay_us > 0) usleep((useconds_t)g->delay_us);
    utilization->gpu = g->util_gpu;
    utilization->memory = g->util_memory;
    trace_utilization(device->index, enter, now_ns(CLOCK_REALTIME));
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetMemoryInfo
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_MEMORY, &g);
    if (rc != NVML_SUCCESS) return rc;
    memory->total = g->memory_total;
    memory->used = g->memory_used;
    memory->free = g->memory_total > g->memory_used ? g->memory_total - g->memory_used : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetTemperature
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_TEMPERATURE, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU */
    *temp = g->temperature;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetPowerUsage
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_POWER, &g);
    if (rc == NVML_SUCCESS) *power = g->power_mw;
    return rc;
}
#endif

#ifndef OMIT_nvmlDeviceGetEnforcedPowerLimit
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_POWER_LIMIT, &g);
    if (rc == NVML_SUCCESS) *limit = g->power_limit_mw;
    return rc;
}
#endif

#ifndef OMIT_nvmlDeviceGetClockInfo
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    struct gpu *g;
    enum field f = type == 1 ? F_CLOCK_SM : type == 2 ? F_CLOCK_MEM : (enum field)-1;
    if ((int)f < 0) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = gpu_for(device, f, &g);
    if (rc == NVML_SUCCESS) *clock = f == F_CLOCK_SM ? g->clock_sm_mhz : g->clock_mem_mhz;
    return rc;
}
#endif

#ifndef OMIT_nvmlDeviceGetTotalEnergyConsumption
/* Energy drawn since the first call, per GPU index: power_mw integrated over monotonic time
 * (kept across config reloads, so the total only grows). */
static long long energy_last_ns[MAX_GPUS];
static double energy_drawn_mj[MAX_GPUS];

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_ENERGY, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    unsigned index = device->index;
    long long now = now_ns(CLOCK_MONOTONIC);
    if (energy_last_ns[index] > 0) energy_drawn_mj[index] += (double)g->power_mw * (double)(now - energy_last_ns[index]) / 1e9;
    energy_last_ns[index] = now;
    *energy = g->energy_mj + (unsigned long long)energy_drawn_mj[index];
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

__attribute__((unused)) static nvmlReturn_t clocks_event_reasons(nvmlDevice_t device, unsigned long long *reasons) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_CLOCKS_EVENT_REASONS, &g);
    if (rc == NVML_SUCCESS) *reasons = g->clocks_event_reasons;
    return rc;
}

#ifndef OMIT_nvmlDeviceGetCurrentClocksEventReasons
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return clocks_event_reasons(device, reasons);
}
#endif

#ifndef OMIT_nvmlDeviceGetCurrentClocksThrottleReasons
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return clocks_event_reasons(device, reasons);
}
#endif

#ifndef OMIT_nvmlDeviceGetTotalEccErrors
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                                unsigned long long *count) {
    struct gpu *g;
    if (error_type != 0 && error_type != 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (counter_type != 0 && counter_type != 1) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = gpu_for(device, error_type == 0 ? F_ECC_CORRECTED : F_ECC_UNCORRECTED, &g);
    if (rc == NVML_SUCCESS) *count = error_type == 0 ? g->ecc_corrected : g->ecc_uncorrected;
    return rc;
}
#endif

#ifndef OMIT_nvmlEventSetCreate
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_SETS; i++) {
        if (!sets[i].used) {
            memset(&sets[i], 0, sizeof sets[i]);
            sets[i].used = 1;
            *set = &sets[i];
            pthread_mutex_unlock(&lock);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return NVML_ERROR_UNKNOWN;
}
#endif

#ifndef OMIT_nvmlDeviceGetSupportedEventTypes
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_SUPPORTED_EVENTS, &g);
    if (rc == NVML_SUCCESS) *types = g->supported_events;
    return rc;
}
#endif

#ifndef OMIT_nvmlDeviceRegisterEvents
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_REGISTER_EVENTS, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!set || !set->used) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~g->supported_events) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    set->mask[device->index] |= types;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

/* The next undelivered XID event (lowest SEQ above the last one delivered), or NULL. */
static const struct xid *next_xid_locked(void) {
    const struct xid *best = NULL;
    for (unsigned i = 0; i < cfg.xid_count; i++) {
        const struct xid *x = &cfg.xids[i];
        if (x->seq > delivered_seq && (!best || x->seq < best->seq)) best = x;
    }
    return best;
}

#ifndef OMIT_nvmlEventSetWait_v2
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    long long deadline = now_ns(CLOCK_MONOTONIC) + (long long)timeoutms * 1000000LL;
    for (;;) {
        pthread_mutex_lock(&lock);
        reload_locked();
        if (init_count == 0) {
            pthread_mutex_unlock(&lock);
            return NVML_ERROR_UNINITIALIZED;
        }
        if (!set || !set->used) {
            pthread_mutex_unlock(&lock);
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if (cfg.wait_error != NVML_SUCCESS) {
            nvmlReturn_t rc = cfg.wait_error;
            pthread_mutex_unlock(&lock);
            return rc;
        }
        const struct xid *x;
        while ((x = next_xid_locked()) != NULL) {
            delivered_seq = x->seq;
            if (x->gpu < cfg.device_count && (set->mask[x->gpu] & EVENT_XID)) {
                memset(data, 0, sizeof *data);
                devices[x->gpu].index = x->gpu;
                devices[x->gpu].mig = -1;
                data->device = &devices[x->gpu];
                data->eventType = EVENT_XID;
                data->eventData = x->code;
                pthread_mutex_unlock(&lock);
                return NVML_SUCCESS;
            }
        }
        pthread_mutex_unlock(&lock);
        if (now_ns(CLOCK_MONOTONIC) >= deadline) return NVML_ERROR_TIMEOUT;
        usleep(10000);
    }
}
#endif

#ifndef OMIT_nvmlEventSetFree
EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    set->used = 0;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

/* ---- MIG (Multi-Instance GPU) -------------------------------------------------------------- */

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

#ifndef OMIT_nvmlDeviceGetMigMode
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    struct gpu *g;
    if (is_mig_handle(device)) return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = gpu_for(device, F_MIG_MODE, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = g->mig_mode ? 1 : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetMaxMigDeviceCount
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    struct gpu *g;
    if (is_mig_handle(device)) return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = gpu_for(device, (enum field)-1, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)mig_max_of(g);
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetMigDeviceHandleByIndex
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    struct gpu *g;
    if (is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = gpu_for(device, (enum field)-1, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!mig || (int)index >= mig_max_of(g)) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.migs[device->index][index].uuid[0] == '\0') return NVML_ERROR_NOT_FOUND;
    mig_devices[device->index][index].index = device->index;
    mig_devices[device->index][index].mig = (int)index;
    *mig = &mig_devices[device->index][index];
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetDeviceHandleFromMigDeviceHandle
EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    struct gpu *g;
    if (!is_mig_handle(mig)) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = gpu_for(mig, (enum field)-1, &g);
    if (rc != NVML_SUCCESS) return rc;
    devices[mig->index].index = mig->index;
    devices[mig->index].mig = -1;
    *device = &devices[mig->index];
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceIsMigDeviceHandle
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = is_mig_handle(device) ? 1 : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetGpuInstanceId
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    struct gpu *g;
    if (!is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = gpu_for(device, (enum field)-1, &g);
    if (rc == NVML_SUCCESS) *id = g->gpu_instance_id;
    return rc;
}
#endif

#ifndef OMIT_nvmlDeviceGetComputeInstanceId
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    struct gpu *g;
    if (!is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = gpu_for(device, (enum field)-1, &g);
    if (rc == NVML_SUCCESS) *id = 0;
    return rc;
}
#endif

#ifndef OMIT_nvmlDeviceGetAttributes_v2
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    struct gpu *g;
    if (!is_mig_handle(device)) return NVML_ERROR_NOT_SUPPORTED; /* "only supports MIG device handles" */
    nvmlReturn_t rc = gpu_for(device, F_ATTRIBUTES, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!attributes) return NVML_ERROR_INVALID_ARGUMENT;
    memset(attributes, 0, sizeof *attributes);
    attributes->multiprocessorCount = g->sm_count;
    attributes->gpuInstanceSliceCount = g->gpu_slices;
    attributes->computeInstanceSliceCount = g->compute_slices;
    attributes->memorySizeMB = g->memory_total / 1048576ULL;
    return NVML_SUCCESS;
}
#endif

/* ---- GPU Performance Monitoring (GPM) ------------------------------------------------------ */

typedef struct { unsigned int version; unsigned int isSupportedDevice; } nvmlGpmSupport_t;
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_METRIC_MAX 477

struct nvmlGpmSample_st {
    unsigned magic;
    unsigned device;
    int mig;  /* the MIG slot a nvmlGpmMigSampleGet sample is of; -1 for the whole GPU */
    int filled;
    long long time_ns;
    double counter[GPM_KINDS];
};
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;
#define GPM_SAMPLE_MAGIC 0x67706d73u

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName; char *longName; char *unit; } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

/* What a GPU's counters have integrated so far (kept across config reloads and NVML sessions,
 * like hardware counters). Percent metrics count percent x microseconds, throughputs bytes. */
__attribute__((unused)) static struct gpm_runtime {
    int started;
    long long last_ns;
    long reset_seen;
    double total[GPM_KINDS];
} gpm_runtime[MAX_GPUS], mig_gpm_runtime[MAX_GPUS][MAX_MIG];
__attribute__((unused)) static long gpm_samples_live;

__attribute__((unused)) static void gpm_write_live_locked(void) {
    const char *path = getenv("FAKE_NVML_GPM_LIVE");
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%ld\n", gpm_samples_live);
    fclose(f);
}

#ifndef OMIT_nvmlGpmQueryDeviceSupport
EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    struct gpu *g;
    nvmlReturn_t rc = gpu_for(device, F_GPM_SUPPORT, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = g->gpm_supported ? 1 : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlGpmSampleAlloc
EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    s->magic = GPM_SAMPLE_MAGIC;
    *sample = s;
    pthread_mutex_lock(&lock);
    gpm_samples_live++;
    gpm_write_live_locked();
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlGpmSampleFree
EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!sample || sample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    sample->magic = 0;
    free(sample);
    pthread_mutex_lock(&lock);
    gpm_samples_live--;
    gpm_write_live_locked();
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

/* Integrate the GPU's (or MIG device's) rates into its counters and copy them into the sample. */
__attribute__((unused)) static void gpm_fill_locked(const struct gpu *g, struct gpm_runtime *r, unsigned device,
                                                    int mig, nvmlGpmSample_t sample) {
    long long now = now_ns(CLOCK_MONOTONIC);
    if (!r->started) {
        memset(r, 0, sizeof *r);
        r->started = 1;
        r->reset_seen = g->gpm_reset;
    } else if (r->reset_seen != g->gpm_reset) {
        memset(r->total, 0, sizeof r->total);
        r->reset_seen = g->gpm_reset;
    } else {
        double seconds = (double)(now - r->last_ns) / 1e9;
        for (int k = 0; k < GPM_KINDS; k++)
            r->total[k] += g->gpm_rate[k] * seconds * (gpm_kinds[k].percent ? 1e6 : 1048576.0);
    }
    r->last_ns = now;
    double modulus = ldexp(1.0, (int)g->gpm_counter_bits);
    sample->device = device;
    sample->mig = mig;
    sample->time_ns = now;
    for (int k = 0; k < GPM_KINDS; k++) sample->counter[k] = fmod((double)g->gpm_counter_start + r->total[k], modulus);
    sample->filled = 1;
}

#ifndef OMIT_nvmlGpmSampleGet
EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    struct gpu *g;
    if (is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT; /* a MIG device's GPM: nvmlGpmMigSampleGet */
    nvmlReturn_t rc = gpu_for(device, F_GPM_SAMPLE, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!sample || sample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->gpm_supported) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    gpm_fill_locked(g, &gpm_runtime[device->index], device->index, -1, sample);
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

/* The slot of the parent's MIG device with this GPU instance id, or -1. */
__attribute__((unused)) static int mig_slot_of(unsigned index, unsigned gpu_instance_id) {
    const struct gpu *parent = &cfg.gpus[index];
    for (int m = 0; m < mig_max_of(parent); m++)
        if (cfg.migs[index][m].uuid[0] != '\0' && cfg.migs[index][m].gpu_instance_id == gpu_instance_id) return m;
    return -1;
}

#ifndef OMIT_nvmlGpmMigSampleGet
EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t sample) {
    struct gpu *g;
    if (is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT; /* the parent's handle, as in nvml.h */
    nvmlReturn_t rc = gpu_for(device, F_GPM_SAMPLE, &g);
    if (rc != NVML_SUCCESS) return rc;
    if (!sample || sample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->gpm_supported) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    int slot = mig_slot_of(device->index, gpuInstanceId);
    if (slot < 0) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_NOT_FOUND;
    }
    const struct gpu *m = &cfg.migs[device->index][slot];
    if (m->error[F_GPM_SAMPLE] != NVML_SUCCESS) {
        nvmlReturn_t code = m->error[F_GPM_SAMPLE];
        pthread_mutex_unlock(&lock);
        return code;
    }
    gpm_fill_locked(m, &mig_gpm_runtime[device->index][slot], device->index, slot, sample);
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlGpmMetricsGet
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    reload();
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!request) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t a = request->sample1, b = request->sample2;
    if (!a || !b || a->magic != GPM_SAMPLE_MAGIC || b->magic != GPM_SAMPLE_MAGIC || !a->filled || !b->filled ||
        a->device != b->device || a->mig != b->mig || request->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (b->time_ns <= a->time_ns) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    if (a->device >= cfg.device_count || cfg.gpus[a->device].lost) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_GPU_IS_LOST;
    }
    const struct gpu *g = a->mig < 0 ? &cfg.gpus[a->device] : &cfg.migs[a->device][a->mig];
    double seconds = (double)(b->time_ns - a->time_ns) / 1e9;
    for (unsigned i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *m = &request->metrics[i];
        int k = -1;
        for (int j = 0; j < GPM_KINDS; j++)
            if (gpm_kinds[j].id == m->metricId) k = j;
        memset(&m->metricInfo, 0, sizeof m->metricInfo);
        m->value = 0;
        if (k < 0) {
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        m->nvmlReturn = g->gpm_error[k];
        if (m->nvmlReturn != NVML_SUCCESS) continue;
        /* Naive difference: a counter that wrapped or was reset gives a negative figure. */
        double delta = b->counter[k] - a->counter[k];
        m->value = gpm_kinds[k].percent ? delta / (seconds * 1e6) : delta / (seconds * 1048576.0);
        m->metricInfo.shortName = (char *)gpm_kinds[k].name;
        m->metricInfo.longName = (char *)gpm_kinds[k].name;
        m->metricInfo.unit = (char *)gpm_kinds[k].unit;
    }
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif
