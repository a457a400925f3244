/*
 * suite_disk.c — kvbench --suite disk: store and load bandwidth of 8 MiB
 * objects through kvact's disk tier (io_uring, O_DIRECT, queue depth 16),
 * against what the same file does without kvact, in the same run:
 *
 *  - store: N chunks (--disk-chunks, 64) are reserved and filled, then timed
 *    from just before finish_write to kva_flush returning (the store
 *    controller read-locks them, the disk adapter writes every slot);
 *  - load: with L1 cleared, kva_submit_prefetch of the N keys
 *    (prefetch_writeback off: temporary objects) timed to kva_wait_prefetch
 *    returning; every chunk is then checked and released;
 *  - anchor=uring: tools/bench/uring_anchor.c, a raw io_uring loop on the
 *    same file, O_DIRECT, 8 MiB per I/O, 16 in flight (URING_ANCHOR_PURE);
 *  - anchor_slot=uring-slot: the same loop moving kvact's slot format, a
 *    4 KiB header block per object besides the payload (URING_ANCHOR_SLOT:
 *    payload write + linked header write; one readv per slot);
 *  - anchor_fio=fio: fio --rw=write/read --bs=8m --iodepth=16
 *    --ioengine=io_uring --direct=1 on the same file, its JSON bw_bytes;
 *    left out (fio:unavailable) when fio is not on PATH. fio's buffers are
 *    ordinary 4 KiB pages (mem=malloc) where the loop's and L1's are huge
 *    pages; on a virtio disk (254 segments per request) an 8 MiB I/O then
 *    needs 8 requests instead of 2 and pins 2048 pages instead of 4, so
 *    fio can land well below the loop: the loop is the bar, fio a cross-check
 *    of the device's order of magnitude.
 *
 * The tier holds [0, capacity) of the file; the anchors use the region
 * after it, so they run while the runtime is up and the reps interleave
 * (uring, uring-slot, kvact, fio) and share any drift of the device.
 * ratio = kvact / anchor; the target is 0.9 against the pure loop. One
 * warm-up pass converts the preallocated (unwritten) extents, then --reps
 * repetitions, medians reported. When the process may count tracepoints
 * (root), sqes and enters are io_uring SQEs and io_uring_enter calls per
 * object in the timed window, all threads (and fio's processes) together.
 *
 * Without a disk tier in this build (the runtime warns "not implemented"
 * and starts without it) or when it fails, the kvact figures read
 * "unavailable" and a "# kvact side unavailable: ..." line says why; the
 * anchors are still measured.
 */
#include <jansson.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvact.h"
#include "tools/bench/uring_anchor.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/tier_side.h"

#define MiB (1024ull * 1024ull)
#define CHUNK_BYTES (8 * MiB)
#define HEADER_BYTES 4096ull /* a slot's header block (l2/disk_format.h) */
#define DEPTH 16
#define TARGET 0.9
#define GB 1e9
#define TIER "disk0"
#define MAX_REPS 64

enum { KV_STORE, KV_LOAD, RAW_W, RAW_R, SLOT_W, SLOT_R, FIO_W, FIO_R, NMEASURES };

typedef struct disk_bench {
  const bench_opts *o;
  char path[4096];
  unsigned n;                    /* chunks per pass */
  uint64_t capacity, anchor_off; /* the tier's bytes; where the anchors start */
  tier_side kv;
  uring_anchor *raw;
  int fio; /* 1 when fio runs */
  char fio_version[64];
  int sqe_fd, enter_fd; /* tracepoint counters, -1 if not allowed */
  int reps;             /* reps recorded so far */
  double gbps[NMEASURES][MAX_REPS];
  double sqes[NMEASURES][MAX_REPS], enters[NMEASURES][MAX_REPS];
} disk_bench;

/* The file: --disk-file or kvbench-disk.tmp, relative to the directory
 * `bazel run` was called from (BUILD_WORKING_DIRECTORY), not to the
 * runfiles tree it runs in. */
static void disk_path(const bench_opts *o, char *out, size_t len) {
  const char *f = o->disk_file ? o->disk_file : "kvbench-disk.tmp";
  const char *wd = getenv("BUILD_WORKING_DIRECTORY");
  if (f[0] == '/' || !wd || !wd[0])
    snprintf(out, len, "%s", f);
  else
    snprintf(out, len, "%s/%s", wd, f);
}

/* ---- the kvact side --------------------------------------------------------- */

/* The runtime with the one disk tier on [0, capacity) of the file. */
static void kv_start(disk_bench *b) {
  char tier[4400];
  snprintf(tier, sizeof(tier),
           "[{\"type\":\"disk\",\"name\":\"" TIER "\",\"path\":\"%s\",\"capacity_bytes\":%llu,"
           "\"queue_depth\":%d,\"o_direct\":true,\"persist\":false}]",
           b->path, (unsigned long long)b->capacity, DEPTH);
  tier_side_start(&b->kv, b->o->workers, "kvbench-disk", b->n, CHUNK_BYTES, TIER, tier);
}

/* ---- fio -------------------------------------------------------------------- */

/* Whether fio is on PATH and can be given this path (fio splits file
 * names at ':'; the shell command quotes with '). */
static int fio_init(disk_bench *b) {
  char out[256];
  if (strpbrk(b->path, ":'\\")) return 0;
  if (bench_capture("fio --version 2>/dev/null", out, sizeof(out)) != 0) return 0;
  size_t len = strcspn(out, "\n");
  if (len >= sizeof(b->fio_version)) len = sizeof(b->fio_version) - 1;
  memcpy(b->fio_version, out, len);
  b->fio_version[len] = 0;
  return 1;
}

/* jobs[0].write.bw_bytes (or read's) of fio's JSON, which may follow
 * notes fio prints first; -1 if absent. */
static double fio_bw(const char *out, int write) {
  const char *j = strchr(out, '{');
  json_t *root = j ? json_loads(j, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
  json_t *job = json_array_get(json_object_get(root, "jobs"), 0);
  json_t *bw = json_object_get(json_object_get(job, write ? "write" : "read"), "bw_bytes");
  double v = json_is_number(bw) ? json_number_value(bw) : -1;
  json_decref(root);
  return v > 0 ? v : -1;
}

/* One fio job over the anchor region; bytes per second, or -1. */
static double fio_pass(disk_bench *b, int write) {
  static char out[1 << 16];
  char cmd[4600];
  snprintf(cmd, sizeof(cmd),
           "fio --name=%c --filename='%s' --rw=%s --bs=8m --iodepth=%d --ioengine=io_uring "
           "--direct=1 --offset=%llu --size=%llu --output-format=json 2>&1",
           write ? 'w' : 'r', b->path, write ? "write" : "read", DEPTH,
           (unsigned long long)b->anchor_off, (unsigned long long)b->n * CHUNK_BYTES);
  int rc = bench_capture(cmd, out, sizeof(out));
  double bw = fio_bw(out, write);
  if (rc != 0 || bw < 0) {
    out[strcspn(out, "\n")] = 0;
    fprintf(stderr, "kvbench: fio failed (%s): %s\n", cmd, out);
    return -1;
  }
  return bw;
}

/* ---- one rep ------------------------------------------------------------------ */

typedef struct window {
  uint64_t sqes, enters;
} window;

static window window_open(disk_bench *b) {
  return (window){bench_tracepoint_read(b->sqe_fd), bench_tracepoint_read(b->enter_fd)};
}

/* Records measure m of rep r: bytes/s from secs (or bw directly when secs
 * is 0), and the SQEs and enters per object since w. */
static void record(disk_bench *b, int m, int r, double secs, double bw, window w) {
  window now = window_open(b);
  b->gbps[m][r] = (secs > 0 ? (double)b->n * CHUNK_BYTES / secs : bw) / GB;
  b->sqes[m][r] = (double)(now.sqes - w.sqes) / b->n;
  b->enters[m][r] = (double)(now.enters - w.enters) / b->n;
}

static void raw_pass(disk_bench *b, int m, int r, uring_anchor_shape shape, int write) {
  double secs = 0;
  window w = window_open(b);
  int rc = uring_anchor_run(b->raw, shape, write, &secs);
  if (rc < 0) {
    fprintf(stderr, "kvbench: the io_uring anchor failed on %s: %s\n", b->path, strerror(-rc));
    exit(1);
  }
  record(b, m, r, secs, 0, w);
}

static void kv_pass(disk_bench *b, int m, int r, int fill) {
  double secs = 0;
  window w = window_open(b);
  int rc =
      m == KV_STORE ? tier_side_store(&b->kv, fill, &secs) : tier_side_load(&b->kv, fill, &secs);
  if (rc == 0) record(b, m, r, secs, 0, w);
}

static void fio_one(disk_bench *b, int m, int r, int write) {
  window w = window_open(b);
  double bw = fio_pass(b, write);
  if (bw < 0) b->fio = 0;
  if (bw > 0) record(b, m, r, 0, bw, w);
}

/* Rep r (-1 = the warm-up, not recorded: it goes to slot 0, overwritten).
 * The warm-up stores twice, so both generations of slots the tier may
 * alternate between have been written once. */
static void one_rep(disk_bench *b, int r) {
  int slot = r < 0 ? 0 : r, fill = 3 + 7 * (r + 1);
  raw_pass(b, RAW_W, slot, URING_ANCHOR_PURE, 1);
  raw_pass(b, RAW_R, slot, URING_ANCHOR_PURE, 0);
  raw_pass(b, SLOT_W, slot, URING_ANCHOR_SLOT, 1);
  raw_pass(b, SLOT_R, slot, URING_ANCHOR_SLOT, 0);
  for (int pass = 0; pass < (r < 0 ? 2 : 1); pass++) {
    if (b->kv.ok) kv_pass(b, KV_STORE, slot, fill + pass);
    if (b->kv.ok) kv_pass(b, KV_LOAD, slot, fill + pass);
  }
  if (b->fio) fio_one(b, FIO_W, slot, 1);
  if (b->fio) fio_one(b, FIO_R, slot, 0);
  if (r >= 0) b->reps = r + 1;
}

/* ---- the report --------------------------------------------------------------- */

static double med(disk_bench *b, double v[NMEASURES][MAX_REPS], int m) {
  double tmp[MAX_REPS];
  memcpy(tmp, v[m], sizeof(double) * (size_t)b->reps);
  return bench_median(tmp, b->reps);
}

/* " anchor=name:figure ratio=kvact/figure" with the given key suffix. */
static void anchor_field(disk_bench *b, const char *suffix, const char *name, int m, int have,
                         double kv) {
  if (!have) {
    printf(" anchor%s=%s:unavailable ratio%s=n/a", suffix, name, suffix);
    return;
  }
  double a = med(b, b->gbps, m);
  printf(" anchor%s=%s:%.3g", suffix, name, a);
  if (kv > 0)
    printf(" ratio%s=%.2f", suffix, kv / a);
  else
    printf(" ratio%s=n/a", suffix);
}

static void report(disk_bench *b, const char *measure, int kvm, int raw, int slot, int fio) {
  double kv = b->kv.ok ? med(b, b->gbps, kvm) : -1;
  printf("measure=%s", measure);
  if (kv > 0)
    printf(" kvact=%.3g", kv);
  else
    printf(" kvact=unavailable");
  anchor_field(b, "", "uring", raw, 1, kv);
  bench_target(measure, NULL, kv > 0 ? kv / med(b, b->gbps, raw) : NAN, ">=", TARGET);
  anchor_field(b, "_slot", "uring-slot", slot, 1, kv);
  anchor_field(b, "_fio", "fio", fio, b->fio, kv);
  if (kv > 0) printf(" ms=%.1f", (double)b->n * CHUNK_BYTES / (kv * GB) * 1e3);
  if (b->sqe_fd >= 0) {
    printf(" sqes=");
    if (kv > 0) printf("%.3g/", med(b, b->sqes, kvm));
    printf("%.3g/%.3g", med(b, b->sqes, raw), med(b, b->sqes, slot));
    printf(" enters=");
    if (kv > 0) printf("%.3g/", med(b, b->enters, kvm));
    printf("%.3g/%.3g", med(b, b->enters, raw), med(b, b->enters, slot));
  }
  printf(" unit=GB/s\n");
}

static void print_reports(disk_bench *b) {
  char name[64];
  snprintf(name, sizeof(name), "store-%ux8MiB", b->n);
  report(b, name, KV_STORE, RAW_W, SLOT_W, FIO_W);
  snprintf(name, sizeof(name), "load-%ux8MiB", b->n);
  report(b, name, KV_LOAD, RAW_R, SLOT_R, FIO_R);
  if (!b->kv.ok) printf("# kvact side unavailable: %s\n", b->kv.why);
  fflush(stdout);
}

/* ---- the suite ---------------------------------------------------------------- */

static void disk_bench_init(disk_bench *b, const bench_opts *o) {
  b->o = o;
  b->n = o->disk_chunks;
  b->sqe_fd = b->enter_fd = -1;
  disk_path(o, b->path, sizeof(b->path));
  /* Room for two generations of every slot (an adapter may write a
   * replaced key to a new slot first), plus the superblock and index. */
  b->capacity = 2ull * b->n * (CHUNK_BYTES + HEADER_BYTES) + 16 * MiB;
  b->anchor_off = (b->capacity + MiB - 1) / MiB * MiB;
  b->fio = fio_init(b);
}

static void print_header(disk_bench *b, int reps) {
  printf("suite=disk workers=%d reps=%d (medians) file=%s tier=disk capacity=%lluMiB "
         "chunks=%ux%lluMiB queue_depth=%d o_direct=1 fio=%s",
         b->o->workers, reps, b->path, (unsigned long long)(b->capacity / MiB), b->n,
         (unsigned long long)(CHUNK_BYTES / MiB), DEPTH, b->fio ? b->fio_version : "unavailable");
  if (b->sqe_fd >= 0) printf(" sqes,enters=per-object:kvact/uring/uring-slot");
  printf("\n");
  fflush(stdout);
}

int suite_disk(const bench_opts *o) {
  int reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
  disk_bench *b = calloc(1, sizeof(*b));
  if (!b) return 1;
  disk_bench_init(b, o);
  unlink(b->path); /* a file left by a killed run would be read as a tier */
  /* Opened before the runtime starts, so its threads count too. */
  b->sqe_fd = bench_tracepoint_open("io_uring", "io_uring_submit_req");
  b->enter_fd = b->sqe_fd < 0 ? -1 : bench_tracepoint_open("syscalls", "sys_enter_io_uring_enter");
  if (b->enter_fd < 0 && b->sqe_fd >= 0) {
    close(b->sqe_fd);
    b->sqe_fd = -1;
  }
  print_header(b, reps);
  kv_start(b);
  int rc = uring_anchor_open(&b->raw, b->path, b->anchor_off, CHUNK_BYTES, b->n, DEPTH);
  if (rc < 0) {
    fprintf(stderr, "kvbench: cannot open %s for the io_uring anchor: %s\n", b->path,
            strerror(-rc));
    bench_missed("disk");
    bench_suite_end("disk");
    tier_side_stop(&b->kv);
    unlink(b->path);
    free(b);
    return 1;
  }
  one_rep(b, -1);
  for (int r = 0; r < reps; r++) one_rep(b, r);
  print_reports(b);
  bench_suite_end("disk");
  uring_anchor_close(b->raw);
  tier_side_stop(&b->kv);
  unlink(b->path);
  if (b->sqe_fd >= 0) close(b->sqe_fd);
  if (b->enter_fd >= 0) close(b->enter_fd);
  free(b);
  return 0;
}
