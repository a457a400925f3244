/*
 * mp_kvact.c — kvact's side of kvbench --suite mp (mp_kvact.h): the daemon
 * child, and the clients, each a child that starts its runtime after the
 * fork, does its work and sends its figures back through a pipe.
 *
 * The daemon and the in-process runtime of the cycle's anchor share their
 * L1 settings (no hugepages, no prefault, no page-locking, no L2: the
 * embedded default's disk tier would store chunks in the middle of the
 * cycle), so the cycle's ratio is the socket's cost alone.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>

#include "kvact.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/malloc_count.h"
#include "tools/kvbench/suites/mp_anchor.h"
#include "tools/kvbench/suites/mp_kvact.h"

#define MiB (1024ull * 1024ull)
#define DAEMON_L1 (1024 * MiB)
#define WORKERS 2
#define OBJ_BYTES 4096u   /* the rtt's and the batch's objects */
#define BATCH_WARMUP 100u /* calls before a batch client is ready */
#define CYCLE_WARMUP 8u   /* cycles before the clock starts (pool faults) */
#define UP_WAIT_MS 10000  /* the longest a client waits for the daemon */

/* The L1 settings of the daemon and of the cycle's in-process runtime. */
#define L1_SETTINGS                                                                                \
  "l2", "[]", "l1.hugepages", "false", "l1.prefault", "false", "l1.pinned", "false"

/* rc == want, or a message: whether it was. */
static int is(int rc, int want, const char *what) {
  if (rc == want) return 1;
  fprintf(stderr, "kvbench: mp: %s returned %d (%s), expected %d\n", what, rc, kva_strerror(rc),
          want);
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- the daemon ------------------------------------------------------------ */

/* The daemon child: SIGTERM blocked before the runtime starts (its threads
 * inherit the mask) and waited for here; 'r' or 'x' on ready_w. */
static _Noreturn void daemon_main(const char *path, pid_t parent, int ready_w) {
  const char *const settings[] = {L1_SETTINGS, "server.socket", path, NULL};
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, NULL);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  char err[256];
  kva_runtime *rt = NULL;
  int rc = getppid() != parent
               ? KVA_ESHUTDOWN
               : bench_try_start_with(WORKERS, DAEMON_L1, settings, &rt, err, sizeof(err));
  if (rc != KVA_OK)
    fprintf(stderr, "kvbench: mp: the daemon did not start: %s %s\n", kva_strerror(rc), err);
  if (write(ready_w, rc == KVA_OK ? "r" : "x", 1) != 1 || rc != KVA_OK) _exit(1);
  int sig = 0;
  sigwait(&term, &sig);
  kva_runtime_shutdown(rt);
  _exit(0);
}

int mp_daemon_start(mp_daemon *d) {
  int p[2];
  pid_t parent = getpid();
  snprintf(d->path, sizeof(d->path), "/tmp/kvbench-mp-%d.sock", (int)parent);
  d->pid = -1;
  if (pipe(p) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    daemon_main(d->path, parent, p[1]);
  }
  close(p[1]);
  char c = 0;
  int up = pid >= 0 && read(p[0], &c, 1) == 1 && c == 'r';
  close(p[0]);
  if (pid >= 0) d->pid = pid;
  if (!up) {
    fprintf(stderr, "kvbench: mp: no daemon (%s)\n", pid < 0 ? strerror(errno) : "it failed");
    mp_daemon_stop(d);
    return -1;
  }
  return 0;
}

int mp_daemon_stop(mp_daemon *d) {
  int rc = 0;
  if (d->pid > 0) {
    kill(d->pid, SIGTERM);
    rc = mp_reap(d->pid);
    d->pid = -1;
  }
  unlink(d->path); /* after a clean shutdown it is gone already */
  return rc;
}

/* ---- clients ---------------------------------------------------------------- */

/* A client runtime on path, once its storage answers: 0, or -1. */
static int client_up(const char *path, kva_runtime **rt) {
  const char *const settings[] = {"client.socket", path, NULL};
  char err[256];
  int rc = bench_try_start_with(WORKERS, 64 * MiB, settings, rt, err, sizeof(err));
  if (rc != KVA_OK) {
    fprintf(stderr, "kvbench: mp: no client runtime: %s %s\n", kva_strerror(rc), err);
    return -1;
  }
  kva_storage_stats st;
  for (int ms = 0; ms < UP_WAIT_MS; ms++) {
    if (kva_storage_get_stats(kva_storage_of(*rt), &st) == KVA_OK) return 0;
    sleep_ms(1);
  }
  fprintf(stderr, "kvbench: mp: the client did not reach the daemon\n");
  kva_runtime_shutdown(*rt);
  *rt = NULL;
  return -1;
}

/* Runs body in a forked child; the len bytes it leaves in out come back
 * through a pipe. 0 when the child succeeded. */
static int in_child(int (*body)(const void *arg, void *out), const void *arg, void *out,
                    size_t len) {
  int p[2];
  if (pipe(p) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    int ok = body(arg, out) == 0 && write(p[1], out, len) == (ssize_t)len;
    _exit(ok ? 0 : 1);
  }
  close(p[1]);
  int rc = pid < 0 ? -1 : mp_read_pipe(p[0], out, len);
  close(p[0]);
  if (pid >= 0 && mp_reap(pid) != 0) rc = -1;
  return rc;
}

/* n new keys written and finished (n <= MP_BATCH_KEYS). */
static int put_keys(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l) {
  kva_buf b[MP_BATCH_KEYS];
  int st[MP_BATCH_KEYS];
  return is(kva_reserve_write(s, k, n, l, KVA_WRITE_NEW, b, st), (int)n, "reserve_write") &&
         is(kva_finish_write(s, k, n, st), (int)n, "finish_write");
}

static int drop_keys(kva_storage *s, const kva_key *k, size_t n) {
  int st[MP_BATCH_KEYS];
  return is(kva_delete(s, k, n, 0, st), (int)n, "delete");
}

/* ---- single-key round trips ------------------------------------------------- */

typedef struct rtt_arg {
  const char *path;
  size_t iters;
} rtt_arg;

typedef struct rtt_out {
  rtt_result trip, release;
  double mallocs;
} rtt_out;

/* n prefetch + release pairs of k; with trip, each one's nanoseconds. */
static int rtt_loop(kva_storage *s, const kva_key *k, const kva_layout *l, size_t n, uint64_t *trip,
                    uint64_t *release) {
  for (size_t i = 0; i < n; i++) {
    kva_prefetch *h;
    size_t hits = 0;
    uint64_t t0 = bench_now_ns();
    if (!is(kva_submit_prefetch(s, k, 1, l, 0, &h), KVA_OK, "submit_prefetch") ||
        !is(kva_wait_prefetch(s, h, -1, &hits), KVA_OK, "wait_prefetch") ||
        !is((int)hits, 1, "the prefetch's hits"))
      return -1;
    uint64_t t1 = bench_now_ns();
    if (!is(kva_finish_read_prefetched(s, k, 1, 0), 1, "finish_read_prefetched")) return -1;
    if (trip) {
      trip[i] = t1 - t0;
      release[i] = bench_now_ns() - t1;
    }
  }
  return 0;
}

static uint64_t sum(const uint64_t *v, size_t n) {
  uint64_t t = 0;
  for (size_t i = 0; i < n; i++) t += v[i];
  return t;
}

/* The layout travels with each prefetch, as in the anchors' frames. */
static int rtt_body(const void *arg, void *out) {
  const rtt_arg *a = arg;
  rtt_out *o = out;
  kva_layout l = bench_layout_bytes(OBJ_BYTES);
  kva_key k = bench_key("kvbench-mp-rtt", (uint64_t)getpid());
  uint64_t *trip = malloc(a->iters * sizeof(*trip)), *release = malloc(a->iters * sizeof(*release));
  kva_runtime *rt = NULL;
  int rc = trip && release ? client_up(a->path, &rt) : -1;
  kva_storage *s = rt ? kva_storage_of(rt) : NULL;
  if (rc == 0 && !put_keys(s, &k, 1, &l)) rc = -1;
  if (rc == 0) rc = rtt_loop(s, &k, &l, MP_WARMUP, NULL, NULL);
  uint64_t m0 = malloc_count();
  if (rc == 0) rc = rtt_loop(s, &k, &l, a->iters, trip, release);
  o->mallocs = bench_mallocs_per(malloc_count() - m0, a->iters);
  if (rc == 0 && !drop_keys(s, &k, 1)) rc = -1;
  if (rc == 0) {
    mp_rtt_finish(trip, a->iters, sum(trip, a->iters), &o->trip);
    mp_rtt_finish(release, a->iters, sum(release, a->iters), &o->release);
  }
  if (rt) kva_runtime_shutdown(rt);
  free(trip);
  free(release);
  return rc;
}

int kvact_rtt(const mp_daemon *d, size_t iters, rtt_result *trip, rtt_result *release,
              double *mallocs) {
  rtt_arg a = {d->path, iters};
  rtt_out o;
  if (!iters || in_child(rtt_body, &a, &o, sizeof(o)) != 0) {
    fprintf(stderr, "kvbench: mp: kvact's round trips failed\n");
    return -1;
  }
  *trip = o.trip;
  *release = o.release;
  *mallocs = o.mallocs;
  return 0;
}

/* ---- batched calls from several clients ------------------------------------- */

typedef struct batch_arg {
  const char *path;
  size_t iters;
  int touch;
} batch_arg;

/* n calls on the 64 keys; a lookup must find them all in L1. */
static int batch_calls(kva_storage *s, const kva_key *k, int touch, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kva_tier_hits h;
    int rc = touch ? kva_touch(s, k, MP_BATCH_KEYS) : kva_lookup(s, k, MP_BATCH_KEYS, 0, &h);
    if (rc < 0) return is(rc, KVA_OK, touch ? "touch" : "lookup");
    if (!touch && !is((int)h.tier[0].hits, MP_BATCH_KEYS, "lookup's L1 hits")) return 0;
  }
  return 1;
}

/* A racing client (mp_race): its own 64 keys, a warm-up, the calls. */
static int batch_client(int rank, void *arg, int ready_w, int go_r) {
  const batch_arg *a = arg;
  kva_layout l = bench_layout_bytes(OBJ_BYTES);
  kva_key k[MP_BATCH_KEYS];
  (void)rank; /* the pid keeps clients' keys apart, also across races */
  for (uint64_t i = 0; i < MP_BATCH_KEYS; i++)
    k[i] = bench_key("kvbench-mp-batch", (uint64_t)getpid() * MP_BATCH_KEYS + i);
  kva_runtime *rt = NULL;
  int ok = client_up(a->path, &rt) == 0;
  kva_storage *s = ok ? kva_storage_of(rt) : NULL;
  ok = ok && put_keys(s, k, MP_BATCH_KEYS, &l) && batch_calls(s, k, a->touch, BATCH_WARMUP);
  ok = mp_client_ready(ready_w, go_r, ok) && batch_calls(s, k, a->touch, a->iters);
  ok = mp_client_done(ready_w, ok) && drop_keys(s, k, MP_BATCH_KEYS);
  if (rt) kva_runtime_shutdown(rt);
  return ok ? 0 : 1;
}

int kvact_batch(const mp_daemon *d, int clients, size_t iters, int touch, double *keyops_per_s) {
  batch_arg a = {d->path, iters, touch};
  uint64_t ns;
  if (!iters || mp_race(clients, batch_client, &a, &ns) != 0) {
    fprintf(stderr, "kvbench: mp: kvact's batch of %d clients failed\n", clients);
    return -1;
  }
  *keyops_per_s = (double)clients * (double)iters * MP_BATCH_KEYS / ((double)ns / 1e9);
  return 0;
}

/* ---- the write+read cycle ---------------------------------------------------- */

typedef struct cycle_arg {
  const char *path; /* NULL: in-process */
  size_t bytes;
  uint64_t total;
} cycle_arg;

/* One chunk in and out again; dst gets its bytes. */
static int one_cycle(kva_storage *s, uint64_t i, const kva_layout *l, char *dst, size_t bytes) {
  kva_key k = bench_key("kvbench-mp-cycle", i);
  kva_buf b;
  kva_prefetch *h;
  size_t hits = 0;
  int st;
  if (!is(kva_reserve_write(s, &k, 1, l, KVA_WRITE_NEW, &b, &st), 1, "reserve_write")) return 0;
  memset(b.ptr, (int)(i & 0xff), bytes);
  if (!is(kva_finish_write(s, &k, 1, &st), 1, "finish_write") ||
      !is(kva_submit_prefetch(s, &k, 1, l, 0, &h), KVA_OK, "submit_prefetch") ||
      !is(kva_wait_prefetch(s, h, -1, &hits), KVA_OK, "wait_prefetch") ||
      !is(kva_read_prefetched(s, &k, 1, &b), KVA_OK, "read_prefetched"))
    return 0;
  memcpy(dst, b.ptr, bytes);
  return is(kva_finish_read_prefetched(s, &k, 1, 0), 1, "finish_read_prefetched") &&
         drop_keys(s, &k, 1) && is(dst[bytes - 1], (char)(i & 0xff), "the copied byte");
}

static int cycle_runtime(const cycle_arg *a, kva_runtime **rt) {
  static const char *const own[] = {L1_SETTINGS, NULL};
  char err[256];
  if (a->path) return client_up(a->path, rt);
  int rc = bench_try_start_with(WORKERS, DAEMON_L1, own, rt, err, sizeof(err));
  if (rc != KVA_OK) fprintf(stderr, "kvbench: mp: no runtime: %s %s\n", kva_strerror(rc), err);
  return rc == KVA_OK ? 0 : -1;
}

static int cycle_body(const void *arg, void *out) {
  const cycle_arg *a = arg;
  kva_layout l = bench_layout_bytes(a->bytes);
  uint64_t n = a->total / a->bytes ? a->total / a->bytes : 1;
  char *dst = malloc(a->bytes);
  kva_runtime *rt = NULL;
  int ok = dst && cycle_runtime(a, &rt) == 0;
  if (dst) memset(dst, 0, a->bytes);
  for (uint64_t i = 0; ok && i < CYCLE_WARMUP; i++)
    ok = one_cycle(kva_storage_of(rt), i, &l, dst, a->bytes);
  uint64_t t0 = bench_now_ns();
  for (uint64_t i = 0; ok && i < n; i++) ok = one_cycle(kva_storage_of(rt), i, &l, dst, a->bytes);
  *(double *)out = (double)(n * a->bytes) / ((double)(bench_now_ns() - t0) / 1e9);
  if (rt) kva_runtime_shutdown(rt);
  free(dst);
  return ok ? 0 : -1;
}

int kvact_cycle(const mp_daemon *d, size_t bytes, uint64_t total, double *bytes_per_s) {
  cycle_arg a = {d ? d->path : NULL, bytes, total};
  if (!bytes || in_child(cycle_body, &a, bytes_per_s, sizeof(*bytes_per_s)) != 0) {
    fprintf(stderr, "kvbench: mp: the %zu-byte cycle failed (%s)\n", bytes,
            d ? "client" : "in-process");
    return -1;
  }
  return 0;
}
