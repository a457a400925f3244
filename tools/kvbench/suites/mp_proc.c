/*
 * mp_proc.c — process plumbing of kvbench --suite mp (mp_proc.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/mp_proc.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void mp_rtt_finish(uint64_t *lat, size_t n, uint64_t total_ns, rtt_result *out) {
  qsort(lat, n, sizeof(*lat), cmp_u64);
  out->p50_us = (double)lat[n / 2] / 1e3;
  out->p99_us = (double)lat[n * 99 / 100] / 1e3;
  out->rate_per_s = (double)n / ((double)total_ns / 1e9);
}

int mp_reap(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int mp_read_pipe(int fd, void *b, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)b + got, n - got);
    if (r > 0)
      got += (size_t)r;
    else if (r == 0 || errno != EINTR)
      return -1;
  }
  return 0;
}

int mp_client_ready(int ready_w, int go_r, int ok) {
  char go;
  if (write(ready_w, ok ? "r" : "x", 1) != 1) return 0;
  return ok && read(go_r, &go, 1) == 1;
}

/* 8 bytes, one write: atomic on a pipe. */
int mp_client_done(int ready_w, int ok) {
  uint64_t end = bench_now_ns();
  return ok && write(ready_w, &end, sizeof(end)) == (ssize_t)sizeof(end);
}

/* Forks the clients; how many started. */
static int race_fork(int n, const int ready[2], const int go[2], mp_client_body body, void *arg,
                     pid_t *pids) {
  fflush(NULL);
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] < 0) {
      fprintf(stderr, "kvbench: mp: fork: %s\n", strerror(errno));
      return i;
    }
    if (pids[i] == 0) {
      close(ready[0]);
      close(go[1]);
      _exit(body(i, arg, ready[1], go[0]));
    }
  }
  return n;
}

/* When all are ready, the clock, then one go byte each; the latest end
 * they report, or 0 when one failed. */
static uint64_t race_run(int clients, int ready_r, int go_w, uint64_t *t0) {
  static const char go_bytes[MP_MAX_CLIENTS];
  char said[MP_MAX_CLIENTS];
  uint64_t ends[MP_MAX_CLIENTS], last = 0;
  if (mp_read_pipe(ready_r, said, (size_t)clients) != 0) return 0;
  if (memchr(said, 'x', (size_t)clients)) return 0;
  *t0 = bench_now_ns();
  if (write(go_w, go_bytes, (size_t)clients) != clients) return 0;
  if (mp_read_pipe(ready_r, ends, (size_t)clients * sizeof(ends[0])) != 0) return 0;
  for (int i = 0; i < clients; i++) last = ends[i] > last ? ends[i] : last;
  return last;
}

int mp_race(int clients, mp_client_body body, void *arg, uint64_t *ns) {
  int ready[2], go[2];
  pid_t pids[MP_MAX_CLIENTS];
  if (clients < 1 || clients > MP_MAX_CLIENTS) {
    fprintf(stderr, "kvbench: mp: a race of %d clients\n", clients);
    return -1;
  }
  if (pipe(ready) != 0) return -1;
  if (pipe(go) != 0) {
    close(ready[0]);
    close(ready[1]);
    return -1;
  }
  int started = race_fork(clients, ready, go, body, arg, pids);
  close(ready[1]);
  close(go[0]);
  uint64_t t0 = 0, end = started == clients ? race_run(clients, ready[0], go[1], &t0) : 0;
  close(go[1]); /* without their go bytes, clients still waiting give up */
  close(ready[0]);
  int ok = end > t0;
  for (int i = 0; i < started; i++) ok &= mp_reap(pids[i]) == 0;
  if (!ok) {
    fprintf(stderr, "kvbench: mp: a racing client failed\n");
    return -1;
  }
  *ns = end - t0;
  return 0;
}
