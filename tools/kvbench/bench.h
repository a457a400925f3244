/*
 * bench.h — kvbench's suites and the helpers they share.
 */
#ifndef KVA_TOOLS_BENCH_H
#define KVA_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

typedef struct bench_opts {
  int workers;                /* runtime.workers for kvact and the CAF anchor */
  int reps;                   /* repetitions; figures are medians */
  uint64_t pingpong;          /* round trips */
  uint64_t fanin;             /* messages, all senders together */
  uint64_t ring_hops;         /* token-ring hops */
  uint64_t ring_msgs;         /* raw ck_ring anchor messages */
  const char *anchors;        /* folder holding caf_bench and ring_anchor */
  uint64_t cycle_bytes;       /* l1: bytes through the write+read cycle per size */
  uint64_t cp_cycles;         /* l1: 64-key control-plane cycles per thread */
  uint64_t rtt_samples;       /* l1: single-key prefetch round trips */
  const char *disk_file;      /* disk: the tier's file (NULL: kvbench-disk.tmp in the
                                 directory bazel run was called from) */
  unsigned disk_chunks;       /* disk: 8 MiB objects per pass */
  const char *redis_addr;     /* redis: HOST:PORT, NULL = start a redis-server */
  unsigned redis_objects;     /* redis: objects per pass and size */
  unsigned redis_connections; /* redis: the tier's connections (0: its default) */
  unsigned redis_pipeline;    /* redis: the tier's pipeline (0: its default) */
  int redis_no_cluster;       /* redis: skip the three-master cluster pass (and failover) */
  int redis_no_failover;      /* redis: skip the failover pass */
  int redis_only_failover;    /* redis: the failover pass alone */
  unsigned redis_failover_s;  /* redis: seconds of the failover pass's workload */
  uint64_t mp_iters;          /* mp: timed single-key round trips per rep */
} bench_opts;

int suite_runtime(const bench_opts *o);
int suite_l1(const bench_opts *o);
int suite_l2_mock(const bench_opts *o);
int suite_disk(const bench_opts *o);
int suite_redis(const bench_opts *o);
int suite_gpu(const bench_opts *o);
int suite_mp(const bench_opts *o);

double bench_median(double *v, int n);
/* Allocations per operation, mallocs / n (0 for n = 0), from two
 * malloc_count() readings; NaN when the process counts none (kvbench
 * without the interposer: MALLOC_COUNT_NONE), which bench_target takes
 * as a miss. */
double bench_mallocs_per(uint64_t mallocs, uint64_t n);
/* Prints " <field>=<per, with decimals>", or " <field>=unavailable". */
void bench_print_mallocs(const char *field, double per, int decimals);

/* Targets (bench_target.c): prints " target=<op><target> ok=yes|no" for
 * value (op ">=" or "<="; NaN = not measured, a miss), or with a label
 * " <label>_target=... <label>_ok=...", and remembers a miss under
 * `measure`; bench_no_target prints " target=none";
 * bench_missed records a miss without printing (a measure that failed).
 * bench_suite_end prints "suite=NAME below_target=m1,m2" (or "none") and
 * forgets the misses. */
bool bench_target(const char *measure, const char *label, double value, const char *op,
                  double target);
void bench_no_target(void);
void bench_missed(const char *measure);
void bench_suite_end(const char *suite);
/* A runtime with `workers` workers and an L1 of l1_bytes (0 = no storage);
 * exits on failure. */
kva_runtime *bench_start(int workers, uint64_t l1_bytes);
/* Key i of a benchmark's own model name. */
kva_key bench_key(const char *model, uint64_t i);
/* Exactly `bytes` per object: one u8 tensor (kva_layout_bytes adds no
 * padding to it). */
kva_layout bench_layout_bytes(uint64_t bytes);
/* The same with more settings: path, value, path, value, ..., NULL (as
 * kva_config_set takes them); settings may be NULL. */
kva_runtime *bench_start_with(int workers, uint64_t l1_bytes, const char *const *settings);
/* The same without exiting: KVA_OK and *out, or the error with what the
 * config parser or the runtime said in err (may be empty). */
int bench_try_start_with(int workers, uint64_t l1_bytes, const char *const *settings,
                         kva_runtime **out, char *err, size_t errlen);
uint64_t bench_now_ns(void);
/* Runs cmd and keeps its stdout; -1 if it could not run or failed. */
int bench_capture(const char *cmd, char *out, size_t cap);
/* The msgs_per_s of the line holding "measure=<measure> ", or -1. */
double bench_parse(const char *out, const char *measure);
/* A counter of the kernel tracepoint group:name (e.g. "io_uring",
 * "io_uring_submit_req") over this process and every thread it creates
 * from now on (open it before kva_runtime_start); -1 if tracefs or
 * perf_event_open is not available (not root, perf_event_paranoid). */
int bench_tracepoint_open(const char *group, const char *name);
/* Its count so far, all threads together; 0 for fd -1. */
uint64_t bench_tracepoint_read(int fd);

#endif
