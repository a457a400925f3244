/*
 * mp_kvact.h — kvact's side of kvbench --suite mp: a daemon (a runtime
 * serving server.socket, as kvactd does) in a child process, and clients
 * in child processes of their own, each starting its runtime with
 * client.socket after the fork. The parent holds no runtime, so it may
 * fork at any time.
 *
 * Every client waits until kva_storage_get_stats answers (it connects
 * asynchronously) before its clock starts.
 */
#ifndef KVA_TOOLS_MP_KVACT_H
#define KVA_TOOLS_MP_KVACT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tools/kvbench/suites/mp_proc.h"

typedef struct mp_daemon {
  pid_t pid;
  char path[64]; /* /tmp/kvbench-mp-<parent's pid>.sock */
} mp_daemon;

/* Forks the daemon (1 GiB L1, no L2, 2 workers) and waits until its
 * runtime serves the socket: 0, or -1 (a message on stderr). It stops on
 * SIGTERM, also when this process dies first (PR_SET_PDEATHSIG). */
int mp_daemon_start(mp_daemon *d);
/* SIGTERM, reaped, the socket file removed: 0 when it shut down cleanly. */
int mp_daemon_stop(mp_daemon *d);

/* One resident key, `iters` times (after MP_WARMUP) kva_submit_prefetch +
 * kva_wait_prefetch timed in *trip, then kva_finish_read_prefetched timed
 * apart in *release (a second round trip). 0 or -1. */
/* *mallocs: heap allocations per round trip (prefetch and release) in the
 * client process, its threads included. */
int kvact_rtt(const mp_daemon *d, size_t iters, rtt_result *trip, rtt_result *release,
              double *mallocs);

/* `clients` client processes at once, each `iters` calls on its own 64
 * resident keys: kva_lookup (pin 0) or, with touch, kva_touch; key-ops per
 * second in total. 0 or -1. */
int kvact_batch(const mp_daemon *d, int clients, size_t iters, int touch, double *keyops_per_s);

/* The write+read cycle of one chunk of `bytes` (reserve_write of a new
 * key, memset, finish_write, prefetch, read, memcpy out, release, delete)
 * until `total` bytes went through, in a client of d, or with d NULL in a
 * runtime of its own (the same L1 settings, no socket): bytes per second.
 * 0 or -1. */
int kvact_cycle(const mp_daemon *d, size_t bytes, uint64_t total, double *bytes_per_s);

#endif
