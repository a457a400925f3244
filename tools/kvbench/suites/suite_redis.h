/*
 * suite_redis.h — what the redis suite's two halves share: suite_redis.c
 * (the bandwidth passes, one server then a cluster) and redis_failover.c
 * (the failover pass). Read by those two files only.
 */
#ifndef KVA_TOOLS_KVBENCH_SUITE_REDIS_H
#define KVA_TOOLS_KVBENCH_SUITE_REDIS_H

#include <stddef.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/redis_servers.h"

#define REDIS_TIER "redis0" /* the tier's name in every pass's config */

/* The tier's JSON (a one-element l2 array): nodes[0..n) as seeds, cluster
 * or not, timeout_ms per command; connections and pipeline only when
 * asked for (else the tier's defaults). */
void redis_tier_json(const bench_opts *o, const rb_server *nodes, int n, int cluster,
                     int timeout_ms, char *out, size_t len);
/* `redis-server --version`'s line, or "unknown". */
void redis_version(char *out, size_t len);
/* The failover pass (redis_failover.c): 0, or 1 when it could not run or
 * read a wrong byte. */
int redis_failover(const bench_opts *o);

#endif
