/*
 * mp_support.h — what the multi-process suites share: kvactd exec'd from
 * //tools:kvactd on a socket of the test's own, client runtimes, client
 * processes forked from the test binary, raw sockets that speak the
 * protocol by hand, and chunks with checkable bytes.
 */
#ifndef KVA_TESTS_SERVER_MP_SUPPORT_H
#define KVA_TESTS_SERVER_MP_SUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvact.h"

#define TIMEOUT_MS 1000 /* client.timeout_ms of the clients here */

extern char sock_path[108]; /* set by setup(): one per test process */
extern char disk_path[256];

/* The checked fixture: paths of this test, SIGPIPE ignored; teardown
 * removes the files. */
void setup(void);
void teardown(void);
void sleep_ms(int ms);

/* kvactd on sock_path with a mock tier (latency_us, 0 = none) or, with
 * disk, a disk tier on disk_path, and one more "key=value" (extra, may be
 * NULL); its pid once it accepts. */
pid_t daemon_start_with(int latency_us, int disk, const char *extra);
/* The same with any number of "key=value" settings (NULL-terminated). */
pid_t daemon_start_opts(int latency_us, int disk, const char *const *extra);
pid_t daemon_start(void);
/* The same for a kvactd that must exit at start (its wait status); one
 * that accepts instead is killed and the test fails. */
int daemon_start_fails(const char *const *extra);
/* A loopback TCP port that was free a moment ago. */
int free_tcp_port(void);
/* daemon_start_with(0, 0, extra) plus its metrics on a loopback port
 * (*port), another port tried while one is taken before kvactd binds it. */
pid_t daemon_start_metrics(const char *extra, int *port);
/* Sends sig and reaps it: its wait status. */
int daemon_stop(pid_t pid, int sig);

/* A client runtime of sock_path (2 workers, TIMEOUT_MS), and the wait
 * until it reaches the daemon (10 s). */
kva_runtime *client_start(void);
kva_runtime *client_start_with(int timeout_ms, int workers);
void client_wait_up(kva_storage *s);
kva_runtime *client_up(void); /* both */

/* Key i's bytes are a pattern of seed i. */
void fill_pattern(uint8_t *p, size_t len, uint64_t seed);
int check_pattern(const uint8_t *p, size_t len, uint64_t seed);
/* Keys [first, first + n): one call each, or one batch (one store task). */
void write_keys(kva_storage *s, uint64_t first, size_t n, size_t bytes);
void write_batch(kva_storage *s, uint64_t first, size_t n, size_t bytes);
/* Prefetches, reads, checks and releases them: how many were there. */
size_t read_keys(kva_storage *s, uint64_t first, size_t n, size_t bytes);
/* submit + wait (layout l, may be NULL): the hits, read-locked. */
size_t prefetch_hits(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l);
/* Polls the daemon's memcheck until clean, 10 s at most. */
void memcheck_soon(kva_storage *s);

/* A client process running body with its runtime; it starts that runtime
 * once a byte arrives on gate_fd (-1: at once). Fork before this process
 * starts threads of its own (a fork of a threaded process may inherit a
 * held lock). child_status: its exit status, or 128 + the signal. */
pid_t fork_client_gated(int (*body)(kva_storage *s, int arg, int out_fd), int arg, int out_fd,
                        int gate_fd);
pid_t fork_client(int (*body)(kva_storage *s, int arg, int out_fd), int arg, int out_fd);
int child_status(pid_t pid);

/* A raw connection to sock_path, or -1. */
int raw_connect(void);
/* One frame: its reply type (P_REFUSED's message into text), or < 0. */
int read_frame(int fd, char *text, size_t cap);
/* Whether the peer closes within 5 s (reading and dropping until then). */
int eof_soon(int fd);
/* Until every thread of pid is stopped (a group stop is not immediate). */
void wait_stopped(pid_t pid);

#endif
