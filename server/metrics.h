/*
 * metrics.h — kvactd's Prometheus endpoint (server.metrics_addr): GET
 * /metrics answers the daemon's storage counters, its L2 tiers, the
 * clients connected now and the prefetch latency histogram in the text
 * exposition format 0.0.4.
 *
 * The page is served from libmicrohttpd's own thread: a scrape never runs
 * on a scheduler thread, and what it asks (kva_storage_get_stats,
 * kva_l2_get_tier_stats, the clients callback) it asks from that thread.
 */
#ifndef KVA_SERVER_METRICS_H
#define KVA_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define LATENCY_BUCKETS 12u /* 11 finite upper bounds (metrics.c) and +Inf */

/* Prefetch latency as the sessions observe it; lock-free (relaxed atomic
 * adds), so any thread may observe while the endpoint reads. bucket[i]
 * counts the observations above bound i - 1 and at most bound i (50us,
 * 100us, 250us, 500us, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms, +Inf);
 * the page sums them into Prometheus' cumulative buckets. Zero it to
 * start. */
typedef struct latency_hist {
  uint64_t bucket[LATENCY_BUCKETS];
  uint64_t count, sum_ns;
} latency_hist;
void latency_observe(latency_hist *h, uint64_t ns);

/* One connected client as the listener knows it. */
typedef struct metrics_client {
  uint32_t pid, uid;
  uint64_t requests;                      /* since it connected */
  uint64_t write_locks, read_locks, pins; /* held now */
} metrics_client;

/* What a page is made of. Everything it points to outlives the endpoint
 * (metrics_stop before kva_runtime_shutdown). */
typedef struct metrics_source {
  kva_storage *s; /* the counters and the L2 tiers */
  /* The clients connected now: fills up to cap of them into out and
   * returns how many there are (cap 0: only counts). Called from the
   * endpoint's thread, so it must be thread-safe; NULL = no clients. */
  size_t (*clients)(void *arg, metrics_client *out, size_t cap);
  void *arg;
  const latency_hist *prefetch; /* may be NULL: no histogram */
} metrics_source;

/* What one scraper may hold (server.metrics_max_connections,
 * server.metrics_max_connections_per_ip, server.metrics_timeout_ms): any
 * peer that can reach the port can hold connections, so none may hold
 * them all for long. */
typedef struct metrics_limits {
  uint32_t connections; /* at once; more wait in the listen backlog (> 0) */
  uint32_t per_ip;      /* from one address at once, more closed at once; 0 = no limit */
  uint32_t timeout_ms;  /* a request received and answered within this of the
                           connection's accept or its previous answer, else it is
                           closed (> 0) */
} metrics_limits;

typedef struct metrics metrics;

/* Serves GET /metrics at addr "host:port" (host an IPv4 literal or
 * "localhost", bound to that address only; port 0 = any free port, see
 * metrics_port) within lim. NULL and a message in err on failure (a bad
 * address or limit, a port taken, no memory). */
metrics *metrics_start(const char *addr, const metrics_source *src, const metrics_limits *lim,
                       char *err, size_t errlen);
int metrics_port(const metrics *m);
/* Stops serving (a scrape in progress finishes first) and frees m. */
void metrics_stop(metrics *m);

/* The page into buf (NUL-terminated when cap > 0); returns the length it
 * needs without the NUL, as snprintf does. A part whose source cannot
 * answer (storage shut down, a tier's adapter failing) is left out. */
size_t metrics_render(const metrics_source *src, char *buf, size_t cap);

#endif
