/*
 * redis_cluster.c — Redis Cluster routing for the redis adapter
 * (redis_internal.h): hash slots, the slot map and its refresh, and the
 * MOVED / ASK redirects.
 *
 * The map starts from CLUSTER SLOTS at start (redis_start.c). A MOVED
 * reply moves its slot at once (so the retry goes to the right node) and
 * asks for a fresh CLUSTER SLOTS, since a MOVED usually means a whole
 * range moved. An ASK changes nothing: only that one command goes to the
 * importing node, behind ASKING.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/redis/redis_internal.h"

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as the cluster
 * specification defines the key slot. Bitwise: keys are ~100 bytes. */
static uint16_t crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)((uint8_t)buf[i] << 8);
    for (int b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

/* Only the part between the first '{' and the next '}' is hashed, when
 * that part is not empty (the hash tag rule). */
static uint16_t redis_slot(const char *key, size_t len) {
  const char *open = memchr(key, '{', len);
  if (open) {
    size_t from = (size_t)(open - key) + 1;
    const char *close = memchr(open + 1, '}', len - from);
    if (close && close > open + 1) return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
  }
  return crc16(key, len) & 16383;
}

redis_node *redis_route(redis *r, const char *key, size_t len) {
  if (!r->cfg.cluster) return r->nodes[0];
  uint16_t id = r->slots[redis_slot(key, len)];
  return id == REDIS_NO_NODE ? r->nodes[0] : r->nodes[id];
}

static bool is_int(const redisReply *e) {
  return e && e->type == REDIS_REPLY_INTEGER && e->integer >= 0 && e->integer < REDIS_SLOTS;
}

/* One [start, end, [host, port, ...], replicas...] entry. A node no
 * server can be makes the entry malformed: a port out of range (checked
 * before it becomes an int, which would turn 6379 + 2^32 into 6379), a
 * host with a NUL byte (printed, it would be another host) or longer than
 * any host. */
static bool apply_range(redis *r, const redisReply *e, const redis_addr *from) {
  if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !is_int(e->element[0]) ||
      !is_int(e->element[1]))
    return false;
  const redisReply *m = e->element[2];
  if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
      m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
    return false;
  long long port = m->element[1]->integer;
  const redisReply *h = m->element[0];
  if (port < 1 || port > 65535 || h->len >= REDIS_HOST_MAX || memchr(h->str, '\0', h->len))
    return false;
  char host[REDIS_HOST_MAX];
  if (h->len == 0) /* "" = the node we asked */
    snprintf(host, sizeof(host), "%s", from->host);
  else
    snprintf(host, sizeof(host), "%.*s", (int)h->len, h->str);
  redis_node *n = redis_node_get(r, host, (int)port);
  if (!n) return false;
  for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
    redis_slot_set(r, (uint16_t)s, n->id);
  return true;
}

void redis_slot_set(redis *r, uint16_t s, uint16_t id) {
  uint16_t old = r->slots[s];
  if (old == id) return;
  if (old != REDIS_NO_NODE) r->nodes[old]->slots--;
  if (id != REDIS_NO_NODE) r->nodes[id]->slots++;
  r->slots[s] = id;
}

int redis_slots_apply(redis *r, const redisReply *reply, const redis_addr *from) {
  if (!reply || reply->type != REDIS_REPLY_ARRAY) return KVA_EIO;
  for (size_t i = 0; i < reply->elements; i++)
    if (!apply_range(r, reply->element[i], from)) return KVA_EIO;
  r->map_at = redis_now();
  return KVA_OK;
}

bool redis_redirect_parse(const char *s, size_t len, const redis_addr *from, bool *ask,
                          uint16_t *slot, redis_addr *to) {
  char buf[REDIS_HOST_MAX + 64], host[REDIS_HOST_MAX];
  unsigned sl;
  int port;
  if (len >= sizeof(buf)) return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  *ask = strncmp(buf, "ASK ", 4) == 0;
  if (!*ask && strncmp(buf, "MOVED ", 6) != 0) return false;
  char *sp = strchr(buf, ' '), *colon = strrchr(buf, ':');
  if (!sp || !colon || sscanf(sp + 1, "%u", &sl) != 1 || sl >= REDIS_SLOTS) return false;
  char *addr = strchr(sp + 1, ' ');
  if (!addr || addr > colon || (size_t)(colon - addr - 1) >= sizeof(host)) return false;
  memcpy(host, addr + 1, (size_t)(colon - addr - 1));
  host[colon - addr - 1] = 0;
  if (sscanf(colon + 1, "%d", &port) != 1 || port <= 0 || port > 65535) return false;
  *slot = (uint16_t)sl;
  snprintf(to->host, sizeof(to->host), "%s", host[0] ? host : from->host);
  to->port = port;
  return true;
}

static void on_slots(redisAsyncContext *ac, void *reply, void *privdata) {
  redis_node *n = privdata;
  redis *r = n->r;
  r->refreshing = false;
  if (!reply) return; /* the connection went: the next MOVED asks again */
  if (redis_slots_apply(r, reply, &n->addr) != KVA_OK)
    kva_log(KVA_LOG_WARN,
            "%s: CLUSTER SLOTS from %s:%d not understood; the map follows MOVED replies",
            r->cfg.name, n->addr.host, n->addr.port);
}

void redis_slots_refresh(redis *r, redis_node *n) {
  redis_conn *k = r->refreshing ? NULL : redis_node_connected(n);
  if (!k || redisAsyncCommand(k->ac, on_slots, n, "CLUSTER SLOTS") != REDIS_OK) return;
  r->refreshing = true; /* bounded: redis_health.c drops k when unanswered */
  r->refresh_conn = k;
  r->refresh_gen = k->gen;
  r->refresh_deadline = redis_now() + r->cfg.timeout_ns;
}
