/*
 * metrics.c — the Prometheus endpoint (metrics.h): the page, rendered from
 * the facade's stats calls into one caller-sized buffer (its writer and
 * the L2 tiers' families: metrics_page.h, metrics_l2.c), and the HTTP
 * server (libmicrohttpd) that answers it.
 *
 * Families are written whole, one after the other (the format wants every
 * sample of a family together, after its # HELP and # TYPE): per-tier and
 * per-client families loop over the tiers or clients inside the family.
 * Every source is read before the first family is written (the histogram,
 * one family, as it is written), so a page is consistent with itself even
 * when a scrape whose buffer was too small renders it a second time.
 *
 * Threads: libmicrohttpd runs one internal polling thread (no pool), so
 * every request of one endpoint is answered by that thread alone and
 * m->size_hint needs no lock. One more thread of ours enforces the
 * request deadline (metrics_deadline.c).
 *
 * Connections (metrics_limits): at most `connections` at once (more wait
 * in the listen backlog), `per_ip` from one address (more are closed at
 * once), each request received and answered within `timeout_ms` of the
 * connection's accept or its previous answer. A peer that connects and
 * trickles its request a byte at a time holds a connection that long at
 * most: libmicrohttpd's own timeout (also set, in whole seconds) counts
 * only inactivity, which a trickle never reaches.
 */
#include "server/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/metrics_deadline.h"
#include "server/metrics_page.h"

/* ---- latency histogram ---------------------------------------------------- */

static const uint64_t bound_ns[LATENCY_BUCKETS - 1] = {50000,    100000,   250000,   500000,
                                                       1000000,  2500000,  5000000,  10000000,
                                                       25000000, 50000000, 100000000};

void latency_observe(latency_hist *h, uint64_t ns) {
  uint32_t i = 0;
  while (i < LATENCY_BUCKETS - 1 && ns > bound_ns[i]) i++;
  /* Relaxed, all three: each counter is independent, and the page takes
   * _count from the buckets' sum, so an observation a scrape sees in one
   * counter and not yet in another cannot break +Inf == _count. */
  __atomic_fetch_add(&h->bucket[i], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
}

/* ---- the page writer (metrics_page.h) -------------------------------------- */

void page_put(page *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = p->len < p->cap ? p->cap - p->len : 0;
  int n = vsnprintf(room ? p->buf + p->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) p->len += (size_t)n;
}

/* A label value with \, " and newline escaped, as the format requires. */
void page_label_value(page *p, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      page_put(p, "\\%c", *v);
    else if (*v == '\n')
      page_put(p, "\\n");
    else
      page_put(p, "%c", *v);
  }
}

void page_family(page *p, const char *name, const char *type, const char *help) {
  page_put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- storage counters ------------------------------------------------------- */

typedef struct field {
  const char *name, *type, *help;
  size_t off; /* of a uint64_t */
} field;

#define STAT(n, t, f, h)                                                                           \
  { "kvact_" n, t, h, offsetof(kva_storage_stats, f) }
static const field l1_fields[] = {
    STAT("l1_capacity_bytes", "gauge", l1_capacity_bytes, "Bytes of the L1 pool."),
    STAT("l1_used_bytes", "gauge", l1_used_bytes, "Bytes of the L1 pool in use."),
    STAT("l1_objects", "gauge", l1_objects, "Objects in L1."),
    STAT("l1_write_locked_objects", "gauge", l1_write_locked, "L1 objects reserved for writing."),
    STAT("l1_read_locked_objects", "gauge", l1_read_locked, "L1 objects held by readers."),
    STAT("l1_hits_total", "counter", hits, "Keys prefetched that L1 held."),
    STAT("l1_misses_total", "counter", misses, "Keys prefetched that L1 did not hold."),
    STAT("l1_out_of_memory_total", "counter", out_of_memory,
         "Keys refused a reservation for want of room."),
};
static const field l2_fields[] = {
    STAT("l2_store_tasks_total", "counter", l2_store_tasks,
         "L1 to L2 store tasks run (one per batch, layout and tier)."),
    STAT("l2_stored_keys_total", "counter", l2_stored_keys, "Keys stored to L2."),
    STAT("l2_store_failures_total", "counter", l2_store_failures, "L2 store tasks that failed."),
    STAT("l2_store_skipped_keys_total", "counter", l2_store_skipped,
         "Keys not stored to L2 (gone from L1 first, frozen, shutdown)."),
    STAT("l2_prefetches_total", "counter", l2_prefetches, "Prefetches handed to L2."),
    STAT("l2_loaded_keys_total", "counter", l2_loaded_keys, "Keys loaded from L2."),
    STAT("l2_load_failures_total", "counter", l2_load_failures, "Keys whose L2 load failed."),
    STAT("l2_skipped_slow_keys_total", "counter", l2_skipped_slow_keys,
         "Keys found in L2 but left to the engine to recompute, as slower to load "
         "(prefetch_policy load_or_recompute)."),
};

/* The L1 manager counts watermark rounds in `evicted` and demand
 * evictions inside a reservation in `evicted_on_demand` (l1_admin.c's
 * l1_evict, l1_write.c's l1_demand_candidates): two disjoint counts. */
static void put_evictions(page *p, const kva_storage_stats *st) {
  const char *name = "kvact_l1_evictions_total";
  page_family(p, name, "counter", "Objects evicted from L1, by what asked for the room.");
  page_put(p, "%s{reason=\"watermark\"} %lu\n", name, (unsigned long)st->evicted);
  page_put(p, "%s{reason=\"demand\"} %lu\n", name, (unsigned long)st->evicted_on_demand);
}

static void put_fields(page *p, const kva_storage_stats *st, const field *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    page_family(p, f[i].name, f[i].type, f[i].help);
    page_put(p, "%s %lu\n", f[i].name, (unsigned long)page_u64_at(st, f[i].off));
  }
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void put_storage(page *p, const kva_storage_stats *st) {
  put_fields(p, st, l1_fields, COUNT(l1_fields));
  put_evictions(p, st);
  put_fields(p, st, l2_fields, COUNT(l2_fields));
}

/* ---- clients ------------------------------------------------------------------- */

static void put_client_labels(page *p, const char *name, const metrics_client *c) {
  page_put(p, "%s{pid=\"%u\",uid=\"%u\"", name, c->pid, c->uid);
}

static void put_clients(page *p, size_t connected, const metrics_client *c, size_t n) {
  page_family(p, "kvact_clients_connected", "gauge", "Client processes connected now.");
  page_put(p, "kvact_clients_connected %zu\n", connected);
  const char *req = "kvact_client_requests_total", *locks = "kvact_client_locks";
  page_family(p, req, "counter", "Requests of a client since it connected.");
  for (size_t i = 0; i < n; i++) {
    put_client_labels(p, req, &c[i]);
    page_put(p, "} %lu\n", (unsigned long)c[i].requests);
  }
  page_family(p, locks, "gauge", "Locks a client holds now, by kind.");
  static const char *const kinds[] = {"write", "read", "pin"};
  for (size_t i = 0; i < n; i++) {
    const uint64_t held[] = {c[i].write_locks, c[i].read_locks, c[i].pins};
    for (size_t k = 0; k < 3; k++) {
      put_client_labels(p, locks, &c[i]);
      page_put(p, ",kind=\"%s\"} %lu\n", kinds[k], (unsigned long)held[k]);
    }
  }
}

/* The callback's clients into a buffer sized by its own count; *list is
 * NULL (and the result the count alone) when there are none or no memory. */
static size_t read_clients(const metrics_source *src, metrics_client **list, size_t *n) {
  *list = NULL;
  *n = 0;
  if (!src->clients) return 0;
  size_t connected = src->clients(src->arg, NULL, 0);
  if (connected == 0 || !(*list = malloc(connected * sizeof(**list)))) return connected;
  size_t cap = connected;
  connected = src->clients(src->arg, *list, cap);
  *n = connected < cap ? connected : cap; /* some may have connected in between */
  return connected;
}

/* ---- prefetch latency ------------------------------------------------------------- */

static void put_histogram(page *p, const latency_hist *h) {
  const char *name = "kvact_prefetch_latency_seconds";
  page_family(p, name, "histogram", "Time from a prefetch's submission to its answer.");
  uint64_t cum = 0;
  for (uint32_t i = 0; i < LATENCY_BUCKETS; i++) {
    cum += __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED); /* relaxed: see latency_observe */
    if (i < LATENCY_BUCKETS - 1)
      page_put(p, "%s_bucket{le=\"%g\"} %lu\n", name, (double)bound_ns[i] / 1e9,
               (unsigned long)cum);
    else
      page_put(p, "%s_bucket{le=\"+Inf\"} %lu\n", name, (unsigned long)cum);
  }
  uint64_t sum = __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
  page_put(p, "%s_sum %.9f\n%s_count %lu\n", name, (double)sum / 1e9, name, (unsigned long)cum);
}

/* ---- the page ------------------------------------------------------------------------ */

size_t metrics_render(const metrics_source *src, char *buf, size_t cap) {
  page p = {.buf = buf, .cap = cap};
  if (cap) buf[0] = '\0';
  kva_storage_stats st;
  bool have_stats = kva_storage_get_stats(src->s, &st) == KVA_OK;
  metrics_l2 *l2 = metrics_l2_read(src->s);
  metrics_client *list;
  size_t nlist, connected = read_clients(src, &list, &nlist);
  if (have_stats) put_storage(&p, &st);
  if (l2) metrics_l2_put(&p, l2);
  put_clients(&p, connected, list, nlist);
  free(list);
  metrics_l2_free(l2);
  if (src->prefetch) put_histogram(&p, src->prefetch);
  return p.len;
}

/* ---- the HTTP server ---------------------------------------------------------------- */

struct metrics {
  struct MHD_Daemon *d;
  metrics_deadline *deadline;
  metrics_source src;
  int port;
  size_t size_hint;         /* the last page's length: the next buffer's size */
  time_t log_second;        /* mhd_log's rate limit: the second it counts, */
  uint32_t logged, dropped; /* the messages it let through and left out */
};

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Renders into a buffer of the last page's size plus slack, grown to the
 * length asked for when the page outgrew it (clients connected, say), at
 * most twice; NULL on ENOMEM. */
static char *render_page(metrics *m, size_t *len) {
  size_t cap = m->size_hint + m->size_hint / 4 + 4096;
  for (int tries = 0; tries < 3; tries++) {
    char *buf = malloc(cap);
    if (!buf) return NULL;
    *len = metrics_render(&m->src, buf, cap);
    if (*len < cap) {
      m->size_hint = *len;
      return buf;
    }
    free(buf);
    cap = *len + *len / 4 + 1;
  }
  return NULL;
}

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, void *body, size_t len,
                               enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (!r) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result rc = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *text) {
  return respond(c, status, (void *)text, strlen(text), MHD_RESPMEM_PERSISTENT);
}

/* GET (or HEAD) /metrics: the page; anything else: 404 or 405. */
static enum MHD_Result serve(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload,
                             size_t *upload_len, void **state) {
  metrics *m = cls;
  if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
    return respond_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
  if (strcmp(url, "/metrics")) return respond_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
  size_t len;
  char *body = render_page(m, &len);
  if (!body) return respond_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
  return respond(c, MHD_HTTP_OK, body, len, MHD_RESPMEM_MUST_FREE);
}

#define LOG_PER_SECOND 5u

/* libmicrohttpd's own messages go through the runtime's logger, at most
 * LOG_PER_SECOND a second: it writes one for each connection refused or
 * cut short, so a peer opening connections must not write the log at its
 * own rate. Called from libmicrohttpd's thread (and, before that thread
 * exists, from MHD_start_daemon's caller): the counters need no lock. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
  metrics *m = cls;
  time_t now = time(NULL);
  if (now != m->log_second) {
    if (m->dropped)
      kva_log(KVA_LOG_WARN, "metrics: %u more messages of libmicrohttpd left out", m->dropped);
    m->log_second = now;
    m->logged = m->dropped = 0;
  }
  if (m->logged == LOG_PER_SECOND) {
    m->dropped++;
    return;
  }
  m->logged++;
  char msg[256];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  msg[strcspn(msg, "\n")] = '\0';
  kva_log(KVA_LOG_WARN, "metrics: %s", msg);
}

/* "host:port" into sa; host "localhost" or an IPv4 literal. */
static int parse_addr(const char *addr, struct sockaddr_in *sa, char *err, size_t errlen) {
  const char *colon = strrchr(addr, ':');
  char host[64], *end;
  if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host)) {
    snprintf(err, errlen, "metrics address \"%s\": expected host:port", addr);
    return KVA_EINVAL;
  }
  snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
  errno = 0;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (colon[1] < '0' || colon[1] > '9' || *end || errno || port > 65535) {
    snprintf(err, errlen, "metrics address \"%s\": the port is not 0..65535", addr);
    return KVA_EINVAL;
  }
  *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  const char *ip = strcmp(host, "localhost") ? host : "127.0.0.1";
  if (inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
    snprintf(err, errlen, "metrics address \"%s\": the host is not an IPv4 address or localhost",
             addr);
    return KVA_EINVAL;
  }
  return KVA_OK;
}

/* A listening socket bound to sa alone (our own, so a taken port is told
 * as such); its port into *port. -1 with err set on failure. */
static int listen_on(const struct sockaddr_in *sa, const char *addr, int *port, char *err,
                     size_t errlen) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  struct sockaddr_in bound;
  socklen_t blen = sizeof(bound);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
      bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) || listen(fd, 64) ||
      getsockname(fd, (struct sockaddr *)&bound, &blen)) {
    snprintf(err, errlen, "metrics on %s: %s", addr, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(bound.sin_port);
  return fd;
}

/* libmicrohttpd on fd, from its own thread, within the limits (see the
 * top of this file); the inactivity timeout is timeout_ms rounded up to
 * whole seconds, the unit libmicrohttpd takes. */
static struct MHD_Daemon *serve_on(metrics *m, int fd, const metrics_limits *lim) {
  unsigned idle_s = (lim->timeout_ms + 999u) / 1000u; /* >= 1: limits_valid */
  return MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0, NULL, NULL, serve, m,
      MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)lim->connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)lim->per_ip, MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_NOTIFY_CONNECTION,
      metrics_deadline_notify, m->deadline, MHD_OPTION_NOTIFY_COMPLETED, metrics_deadline_answered,
      m->deadline, MHD_OPTION_END);
}

static bool limits_valid(const metrics_limits *lim, char *err, size_t errlen) {
  if (lim && lim->connections && lim->timeout_ms) return true;
  snprintf(err, errlen, "metrics: no limits, or a limit of 0 connections or 0 ms");
  return false;
}

static void metrics_free(metrics *m) {
  if (m->deadline) metrics_deadline_stop(m->deadline);
  if (m->d) MHD_stop_daemon(m->d); /* its closes still reach m->deadline */
  metrics_deadline_free(m->deadline);
  free(m);
}

metrics *metrics_start(const char *addr, const metrics_source *src, const metrics_limits *lim,
                       char *err, size_t errlen) {
  struct sockaddr_in sa;
  if (!addr || !src || !src->s) {
    snprintf(err, errlen, "metrics: no address or no storage");
    return NULL;
  }
  if (!limits_valid(lim, err, errlen) || parse_addr(addr, &sa, err, errlen) != KVA_OK) return NULL;
  metrics *m = calloc(1, sizeof(*m));
  if (!m || !(m->deadline = metrics_deadline_start(lim->connections, lim->timeout_ms))) {
    snprintf(err, errlen, "metrics: out of memory");
    free(m);
    return NULL;
  }
  m->src = *src;
  int fd = listen_on(&sa, addr, &m->port, err, errlen);
  if (fd >= 0 && !(m->d = serve_on(m, fd, lim))) {
    snprintf(err, errlen, "metrics on %s: the HTTP server did not start", addr);
    close(fd);
  }
  if (!m->d) {
    metrics_free(m);
    return NULL;
  }
  return m;
}

int metrics_port(const metrics *m) {
  return m->port;
}

/* MHD_stop_daemon joins its thread and closes the listening socket. */
void metrics_stop(metrics *m) {
  if (m) metrics_free(m);
}
