/*
 * mp_proc.h — the process plumbing kvbench --suite mp shares between its
 * anchors (mp_anchor.c) and kvact's side (mp_kvact.c): reaping children,
 * reading pipes, racing client processes that start together, and the
 * figures of timed round trips.
 *
 * Children leave with _exit: the parent's stdio buffers are flushed before
 * each fork and must not be flushed twice.
 */
#ifndef KVA_TOOLS_MP_PROC_H
#define KVA_TOOLS_MP_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MP_MAX_CLIENTS 64

typedef struct rtt_result {
  double rate_per_s; /* round trips per second, one at a time */
  double p50_us, p99_us;
} rtt_result;

/* Percentiles of lat[0..n) (sorted here) and the rate, n over total_ns. */
void mp_rtt_finish(uint64_t *lat, size_t n, uint64_t total_ns, rtt_result *out);

/* 0 when the child exited with status 0. */
int mp_reap(pid_t pid);

/* Exactly n bytes from a pipe; -1 when every writer is gone first. */
int mp_read_pipe(int fd, void *b, size_t n);

/* A racing client process's body: rank 0..clients-1, then its warm-up,
 * mp_client_ready, the timed work, mp_client_done; returns the exit status
 * (0 = it all worked). */
typedef int (*mp_client_body)(int rank, void *arg, int ready_w, int go_r);

/* Says 'r' (ok) or 'x' on ready_w and waits for the go byte: whether to
 * go on (0 when not ok, or the race was abandoned). */
int mp_client_ready(int ready_w, int go_r, int ok);
/* Reports the clock when the timed work ended (CLOCK_MONOTONIC is the
 * same in every process), when ok: whether that worked. */
int mp_client_done(int ready_w, int ok);

/* `clients` processes running body at once: forked, all ready, then the
 * clock and the go bytes; the nanoseconds from go to the last one's end
 * in *ns. 0, or -1 when a fork or a client failed (a message on stderr). */
int mp_race(int clients, mp_client_body body, void *arg, uint64_t *ns);

#endif
