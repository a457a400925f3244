/*
 * l2_redis_test.h — helpers of the redis tier suites (l2_redis_test.c,
 * l2_redis_cluster_test.c, l2_redis_failure_test.c): runtimes with redis
 * tiers pointed at the suites' own servers (tests/support/redis_server.h).
 * Requests straight to tier 0 reuse the disk suites' dt_* helpers, which
 * speak only the L2 protocol (tests/l2/l2_disk_test.h).
 */
#ifndef KVA_TESTS_L2_REDIS_TEST_H
#define KVA_TESTS_L2_REDIS_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"
#include "tests/l2/l2_disk_test.h"
#include "tests/support/redis_server.h"

#define RT_L1 (160u << 20) /* L1 bytes: room for a few 32 MiB objects */

/* The JSON members of a redis tier on port (addrs), then `extra` members
 * (may be ""), in a static buffer. */
const char *rt_members(int port, const char *extra);
/* A runtime (RT_L1 of L1) whose l2 is the JSON array `tiers`; asserts it
 * starts. */
kva_runtime *rt_start(int workers, const char *tiers);
/* One redis tier on port with extra members. */
kva_runtime *rt_start_one(int workers, int port, const char *extra);
/* A fresh redis-server (no extra arguments) and a runtime with one redis
 * tier on it (extra JSON members); rt_close finishes the runtime
 * (l2_finish: no lock left, memcheck clean) and stops the server. */
kva_storage *rt_open(rs_server *srv, int workers, const char *extra);
void rt_close(kva_storage *s, rs_server *srv);
/* kva_runtime_start's result for one redis tier (a runtime that starts
 * is shut down at once: l2_try_start). */
int rt_try(int port, const char *extra);
/* The Redis key kvact writes for fixture_key(id) in namespace ns. */
const char *rt_key(const char *ns, uint64_t id, char *buf, size_t cap);
/* Whether tier 0 is bypassed automatically right now. */
int rt_bypassed(kva_storage *s);
/* Polls (5 s) until tier 0's bypass flag equals `on`; returns whether it did. */
int rt_wait_bypass(kva_storage *s, int on, int timeout_ms);

#endif
