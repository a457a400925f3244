/*
 * fuzz_redis_reply.c — libFuzzer target for what the redis tier reads in
 * a server's replies besides values (l2/redis_cluster.c): MOVED / ASK
 * redirects and the CLUSTER SLOTS map.
 *
 * Input: RESP bytes, parsed by hiredis's reader as the tier's connections
 * parse them, each as if node 10.0.0.1:7000 answered it. Every reply
 * parsed is given to redis_slots_apply (a fresh cluster map) and, when it
 * is an error reply, to redis_redirect_parse. Checked:
 *  - a redirect understood starts "MOVED " or "ASK " (ask says which),
 *    names a slot below 16384, a port in 1..65535 and a terminated host;
 *  - after a slots reply, applied or refused, every slot is unmapped or
 *    maps to a node, and every node has a host and a port in 1..65535.
 *
 * Inputs announcing an array or a string of more than 65536 elements or
 * bytes are skipped: hiredis allocates an array for the count a header
 * announces before any element arrives (a reservation of virtual memory
 * outside the fuzzer, where such a calloc is an untouched mmap, but over
 * libFuzzer's malloc limit), and that is hiredis's code, not kvact's.
 *
 * Without redis_conn.c (hiredis connections, the poller) the fuzzer uses
 * the stand-ins for redis_node_get, redis_node_connected and redis_now
 * below; the
 * corpus test links the real ones.
 *
 * Build: bazel build //tests/fuzz:fuzz_redis_reply; run: tests/fuzz/run_fuzz.sh.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "kvact.h"
#include "l2/adapters/redis/redis_internal.h"
#include "tests/fuzz/fuzz.h"

/* redis_conn.c's: the node of host:port, added when new. */
__attribute__((weak)) redis_node *redis_node_get(redis *r, const char *host, int port) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i]->addr.port == port && strcmp(r->nodes[i]->addr.host, host) == 0)
      return r->nodes[i];
  if (r->nnodes >= REDIS_MAX_NODES) return NULL;
  redis_node **nodes = realloc(r->nodes, (r->nnodes + 1u) * sizeof(*nodes));
  FUZZ_CHECK(nodes != NULL);
  r->nodes = nodes;
  redis_node *n = calloc(1, sizeof(*n));
  FUZZ_CHECK(n != NULL);
  n->r = r;
  n->id = r->nnodes;
  snprintf(n->addr.host, sizeof(n->addr.host), "%s", host);
  n->addr.port = port;
  r->nodes[r->nnodes++] = n;
  return n;
}

/* redis_health.c's clock: the fuzzer needs none. */
__attribute__((weak)) uint64_t redis_now(void) {
  return 0;
}

/* redis_conn.c's: a connected connection of n; the fuzzer has none. */
__attribute__((weak)) redis_conn *redis_node_connected(redis_node *n) {
  (void)n;
  return NULL;
}

static void quiet(int level, const char *msg, void *arg) {
  (void)level, (void)msg, (void)arg;
}

static bool addr_ok(const redis_addr *a) {
  return memchr(a->host, '\0', sizeof a->host) != NULL && a->host[0] != '\0' && a->port > 0 &&
         a->port <= 65535;
}

static void check_redirect(const redisReply *rep, const redis_addr *from) {
  bool ask = false;
  uint16_t slot = UINT16_MAX;
  redis_addr to;
  memset(&to, 'x', sizeof to);
  if (!redis_redirect_parse(rep->str, rep->len, from, &ask, &slot, &to)) return;
  FUZZ_CHECK(strncmp(rep->str, ask ? "ASK " : "MOVED ", ask ? 4 : 6) == 0);
  FUZZ_CHECK(slot < REDIS_SLOTS && addr_ok(&to));
}

static void check_slots(const redisReply *rep, const redis_addr *from) {
  redis *r = calloc(1, sizeof *r);
  FUZZ_CHECK(r != NULL);
  r->cfg.cluster = true;
  memset(r->slots, 0xff, sizeof r->slots); /* REDIS_NO_NODE */
  int rc = redis_slots_apply(r, rep, from);
  FUZZ_CHECK(rc == KVA_OK || rc == KVA_EIO);
  uint32_t held[REDIS_MAX_NODES] = {0};
  for (uint32_t s = 0; s < REDIS_SLOTS; s++) {
    FUZZ_CHECK(r->slots[s] == REDIS_NO_NODE || r->slots[s] < r->nnodes);
    if (r->slots[s] != REDIS_NO_NODE) held[r->slots[s]]++;
  }
  for (uint16_t i = 0; i < r->nnodes; i++) /* the counts follow the map, even a half-applied one */
    FUZZ_CHECK(r->nodes[i]->slots == held[i]);
  for (uint16_t i = 0; i < r->nnodes; i++) {
    FUZZ_CHECK(addr_ok(&r->nodes[i]->addr));
    free(r->nodes[i]);
  }
  free(r->nodes);
  free(r);
}

/* Whether a line of the input starts with '*' or '$' and a count above
 * 65536 (a header hiredis would allocate for at once). */
static bool announces_huge(const uint8_t *data, size_t size) {
  for (size_t i = 0; i < size; i++) {
    if ((i > 0 && data[i - 1] != '\n') || (data[i] != '*' && data[i] != '$')) continue;
    uint64_t n = 0;
    for (size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9' && n <= 65536; j++)
      n = n * 10 + (uint64_t)(data[j] - '0');
    if (n > 65536) return true;
  }
  return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const redis_addr from = {"10.0.0.1", 7000}; /* the node that answered */
  static bool init;
  if (!init) kva_log_set(quiet, NULL, KVA_LOG_DEBUG);
  init = true;
  if (announces_huge(data, size)) return 0;
  redisReader *rd = redisReaderCreate();
  FUZZ_CHECK(rd != NULL);
  void *reply = NULL;
  if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK)
    while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
      const redisReply *rep = reply;
      if (rep->type == REDIS_REPLY_ERROR) check_redirect(rep, &from);
      check_slots(rep, &from);
      freeReplyObject(reply);
      reply = NULL;
    }
  redisReaderFree(rd);
  return 0;
}
