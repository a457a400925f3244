/*
 * bench_util.c — medians, allocation counts, clocks, anchor subprocesses,
 * runtimes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/malloc_count.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_mallocs_per(uint64_t mallocs, uint64_t n) {
  if (malloc_count() == MALLOC_COUNT_NONE) return NAN;
  return n ? (double)mallocs / (double)n : 0;
}

void bench_print_mallocs(const char *field, double per, int decimals) {
  if (isnan(per))
    printf(" %s=unavailable", field);
  else
    printf(" %s=%.*f", field, decimals, per);
}

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int bench_capture(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  size_t n = 0;
  out[0] = 0;
  while (n + 1 < cap) {
    size_t r = fread(out + n, 1, cap - 1 - n, f);
    if (r == 0) break;
    n += r;
  }
  out[n] = 0;
  return pclose(f) == 0 ? 0 : -1;
}

double bench_parse(const char *out, const char *measure) {
  char key[128];
  snprintf(key, sizeof(key), "measure=%s ", measure);
  const char *m = strstr(out, key);
  const char *eol = m ? strchr(m, '\n') : NULL;
  const char *x = m ? strstr(m, "msgs_per_s=") : NULL;
  if (!x || (eol && x > eol)) return -1;
  return strtod(x + strlen("msgs_per_s="), NULL);
}

/* L1 only: the embedded default's disk tier would take read locks (its
 * stores) in the middle of what the L1 suite measures. */
kva_runtime *bench_start(int workers, uint64_t l1_bytes) {
  static const char *const no_l2[] = {"l2", "[]", NULL};
  return bench_start_with(workers, l1_bytes, no_l2);
}

int bench_try_start_with(int workers, uint64_t l1_bytes, const char *const *settings,
                         kva_runtime **out, char *err, size_t errlen) {
  kva_config *c = kva_config_default();
  char num[32], size[32];
  snprintf(num, sizeof(num), "%d", workers);
  snprintf(size, sizeof(size), "%llu", (unsigned long long)l1_bytes);
  err[0] = 0;
  int rc = !c ? KVA_ENOMEM : kva_config_set_err(c, "runtime.workers", num, err, errlen);
  if (rc == KVA_OK) rc = kva_config_set_err(c, "l1.size_bytes", size, err, errlen);
  for (size_t i = 0; rc == KVA_OK && settings && settings[i]; i += 2)
    rc = kva_config_set_err(c, settings[i], settings[i + 1], err, errlen);
  *out = NULL;
  if (rc == KVA_OK) rc = kva_runtime_start(c, out);
  kva_config_free(c);
  return rc;
}

kva_runtime *bench_start_with(int workers, uint64_t l1_bytes, const char *const *settings) {
  char err[256];
  kva_runtime *rt;
  int rc = bench_try_start_with(workers, l1_bytes, settings, &rt, err, sizeof(err));
  if (rc != KVA_OK) {
    fprintf(stderr, "kvbench: cannot start a runtime (workers %d, L1 %llu bytes): %s%s%s\n",
            workers, (unsigned long long)l1_bytes, kva_strerror(rc), err[0] ? ": " : "", err);
    exit(1);
  }
  return rt;
}

/* The tracepoint's id from tracefs (either mount point), or -1. */
static long tracepoint_id(const char *group, const char *name) {
  static const char *const roots[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};
  for (int r = 0; r < 2; r++) {
    char path[256];
    snprintf(path, sizeof(path), "%s/events/%s/%s/id", roots[r], group, name);
    FILE *f = fopen(path, "r");
    long id = -1;
    if (!f) continue;
    if (fscanf(f, "%ld", &id) != 1) id = -1;
    fclose(f);
    if (id >= 0) return id;
  }
  return -1;
}

int bench_tracepoint_open(const char *group, const char *name) {
  long id = tracepoint_id(group, name);
  if (id < 0) return -1;
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = (uint64_t)id;
  attr.inherit = 1; /* threads created later count too; read() sums them */
  attr.exclude_hv = 1;
  long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  return fd < 0 ? -1 : (int)fd;
}

uint64_t bench_tracepoint_read(int fd) {
  uint64_t v = 0;
  if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v)) return 0;
  return v;
}

kva_key bench_key(const char *model, uint64_t i) {
  kva_key k;
  memset(&k, 0, sizeof(k));
  snprintf(k.model, sizeof(k.model), "%s", model);
  k.hash_len = 8;
  memcpy(k.hash, &i, 8);
  return k;
}

kva_layout bench_layout_bytes(uint64_t bytes) {
  kva_layout l;
  memset(&l, 0, sizeof(l));
  l.ntensors = 1;
  l.tensor[0].ndim = 1;
  l.tensor[0].shape[0] = bytes;
  l.tensor[0].dtype = KVA_DT_U8;
  return l;
}
