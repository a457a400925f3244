/*
 * redis_ops.c — the redis adapter's requests as commands (redis_internal.h):
 * one EXISTS, SET or GET per key, routed to its node, and their replies.
 *
 * A value is [object_header][payload] (l2/adapters/object_header.h): the header
 * names the full key, the layout fingerprint, the payload length and its
 * xxh3-64, and seals itself with a checksum. A GET is served only when all
 * of that matches the key, layout and buffer asked for, checked over the
 * reply's bytes (redis_value_check) before one byte is copied into L1;
 * anything else (nil, a foreign or damaged value, another reply type)
 * leaves the key's bit clear. A value changed behind our back is therefore
 * a miss, never wrong bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/object_header.h"
#include "l2/adapters/redis/redis_internal.h"
#include "l2/adapters/redis/redis_value.h"

/* The Redis key of key k (namespace:printed key); its length.
 * The printed key is at most 148 bytes (model 63, kv_rank 8, group 10,
 * hash 64, three '@'), the namespace at most REDIS_NS_MAX: both fit. */
static size_t redis_key(const redis *r, const kva_key *k, char *buf) {
  char printed[192];
  kva_key_format(k, printed, sizeof(printed));
  int len = snprintf(buf, REDIS_KEY_MAX, "%s:%s", r->cfg.ns, printed);
  return len < 0 ? 0 : (size_t)len < REDIS_KEY_MAX ? (size_t)len : REDIS_KEY_MAX - 1;
}

/* ---- starting a request ------------------------------------------------- */

static redis_cmd *cmd_get(redis *r) {
  redis_cmd *c = r->free_cmds;
  if (c)
    r->free_cmds = c->next;
  else
    c = malloc(sizeof(*c));
  return c;
}

/* The value bytes a command moves, for the pipeline's byte budget. */
static uint64_t cmd_bytes(const redis_task *t, size_t i) {
  return t->type == KVA_L2_LOOKUP_AND_LOCK ? 0 : REDIS_VALUE_HDR + t->req->bufs[i].len;
}

static uint8_t cmd_kind(uint32_t type) {
  return type == KVA_L2_STORE ? CMD_SET : type == KVA_L2_LOAD ? CMD_GET : CMD_EXISTS;
}

bool redis_task_start(redis *r, redis_task *t) {
  const kva_l2_req *req = t->req;
  redis_cmd *chain = NULL;
  for (size_t i = 0; i < req->n; i++) { /* all first: nothing queued on ENOMEM */
    redis_cmd *c = cmd_get(r);
    if (!c) {
      while (chain) {
        redis_cmd *next = chain->next;
        redis_cmd_put(r, chain);
        chain = next;
      }
      return false;
    }
    c->next = chain;
    chain = c;
  }
  t->pending = (uint32_t)req->n;
  char key[REDIS_KEY_MAX];
  for (size_t i = 0; i < req->n; i++) {
    redis_cmd *c = chain;
    chain = c->next;
    *c = (redis_cmd){.task = t, .key = i, .kind = cmd_kind(t->type), .bytes = cmd_bytes(t, i)};
    redis_node_enqueue(redis_route(r, key, redis_key(r, &req->keys[i], key)), c);
  }
  return true;
}

/* ---- sending ------------------------------------------------------------ */

static char *scratch(redis *r, size_t len) {
  if (len > r->scratch_cap) {
    char *p = realloc(r->scratch, len);
    if (!p) return NULL;
    r->scratch = p;
    r->scratch_cap = len;
  }
  return r->scratch;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* A payload this large is written from L1 (redis_write.c), not copied. */
#define SPLICE_MIN_BYTES (64u * 1024u)

/* SET key [header][payload]. A small payload is formatted here with the
 * rest and copied into hiredis's buffer; a large one is spliced into the
 * stream after the head, which hiredis queues with the reply callback. */
static bool send_set(redis *r, redis_conn *k, redis_cmd *c, const char *key, size_t klen) {
  const redis_task *t = c->task;
  const kva_buf *b = &t->req->bufs[c->key];
  char head[128];
  int hl = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$%zu\r\n", klen);
  char mid[64];
  int ml = snprintf(mid, sizeof(mid), "\r\n$%zu\r\n", REDIS_VALUE_HDR + b->len);
  bool splice = b->len >= SPLICE_MIN_BYTES;
  size_t total = (size_t)hl + klen + (size_t)ml + REDIS_VALUE_HDR + (splice ? 0 : b->len + 2);
  char *p = scratch(r, total);
  if (!p) return false;
  object_header h;
  object_header_init(&h, &t->req->keys[c->key], t->fp, b->ptr, b->len, ++r->seq);
  memcpy(p, head, (size_t)hl);
  memcpy(p += hl, key, klen);
  memcpy(p += klen, mid, (size_t)ml);
  memcpy(p += ml, &h, REDIS_VALUE_HDR);
  if (!splice) {
    memcpy(p += REDIS_VALUE_HDR, b->ptr, b->len);
    memcpy(p + b->len, "\r\n", 2);
  }
  if (redisAsyncFormattedCommand(k->ac, on_reply, c, r->scratch, total) != REDIS_OK) return false;
  if (splice && !redis_write_splice(k, b->ptr, b->len)) {
    /* the head is queued: the stream cannot go on without its payload */
    k->kill_why = "out of memory for a splice";
    k->kill = true;
  }
  return true;
}

bool redis_cmd_send(redis *r, redis_conn *k, redis_cmd *c) {
  char key[REDIS_KEY_MAX];
  size_t klen = redis_key(r, &c->task->req->keys[c->key], key);
  if (c->asking && redisAsyncCommand(k->ac, NULL, NULL, "ASKING") != REDIS_OK) return false;
  c->asking = false;
  if (c->kind == CMD_SET) return send_set(r, k, c, key, klen);
  const char *argv[2] = {c->kind == CMD_GET ? "GET" : "EXISTS", key};
  size_t lens[2] = {strlen(argv[0]), klen};
  return redisAsyncCommandArgv(k->ac, on_reply, c, 2, argv, lens) == REDIS_OK;
}

/* ---- replies ------------------------------------------------------------ */

static void bad_value(redis *r, const redis_cmd *c, const char *why) {
  if (r->warned_value) return;
  r->warned_value = true;
  char key[REDIS_KEY_MAX];
  redis_key(r, &c->task->req->keys[c->key], key);
  kva_log(KVA_LOG_WARN, "%s: value of %s not served: %s (said once)", r->cfg.name, key, why);
}

/* GET: verified over the reply's bytes, then copied into L1. */
static void got_value(redis *r, redis_cmd *c, const redisReply *rep) {
  redis_task *t = c->task;
  const kva_buf *b = &t->req->bufs[c->key];
  if (rep->type == REDIS_REPLY_NIL) return; /* a plain miss */
  if (rep->type != REDIS_REPLY_STRING) {
    bad_value(r, c, "not a string");
    return;
  }
  const char *why;
  const void *payload =
      redis_value_check(rep->str, (size_t)rep->len, &t->req->keys[c->key], t->fp, b->len, &why);
  if (!payload) {
    bad_value(r, c, why);
    return;
  }
  memcpy(b->ptr, payload, b->len);
  kva_bit_set(t->req->bits, c->key);
}

static int got_exists(redis *r, redis_cmd *c, const redisReply *rep) {
  redis_task *t = c->task;
  if (rep->type != REDIS_REPLY_INTEGER) return KVA_EIO;
  if (rep->integer <= 0) return KVA_OK;
  if (!redis_lock(&r->locks, &t->req->keys[c->key])) return KVA_ENOMEM;
  kva_bit_set(t->req->bits, c->key);
  return KVA_OK;
}

static int got_set(redis_cmd *c, const redisReply *rep) {
  redis_task *t = c->task;
  if (rep->type != REDIS_REPLY_STATUS || strcmp(rep->str, "OK") != 0) return KVA_EIO;
  t->stored += t->req->bufs[c->key].len;
  t->stored_keys++;
  if (t->req->bits) kva_bit_set(t->req->bits, c->key); /* which keys, for KVA_EUNAVAIL */
  return KVA_OK;
}

/* An error reply that is no redirect: WRONGTYPE is a key holding
 * something else (a miss), "OOM ..." a full server (not a health
 * failure), CLUSTERDOWN a cluster that refuses while a slot has no live
 * master (with cluster-require-full-coverage: a node of it is down, the
 * tier is not: KVA_EUNAVAIL), anything else an I/O error. */
static int got_error(redis *r, const redis_node *n, redis_cmd *c, const redisReply *rep) {
  if (strncmp(rep->str, "WRONGTYPE", 9) == 0) {
    bad_value(r, c, "not a string");
    return KVA_OK;
  }
  if (r->cfg.cluster && strncmp(rep->str, "CLUSTERDOWN", 11) == 0) {
    if (n->state == NODE_OK) r->map_next = 0; /* the slots are moving: read the map */
    return KVA_EUNAVAIL;
  }
  if (!r->warned_error)
    kva_log(KVA_LOG_WARN, "%s: redis %s:%d: %s (said once)", r->cfg.name, n->addr.host,
            n->addr.port, rep->str);
  r->warned_error = true;
  return strncmp(rep->str, "OOM", 3) == 0 ? KVA_ENOMEM : KVA_EIO;
}

static void finish(redis *r, redis_cmd *c, int result) {
  redis_task *t = c->task;
  redis_cmd_put(r, c);
  redis_task_step(r, t, result);
}

/* MOVED: the slot moves now (the retry goes there) and the map is read
 * again; ASK: this command only, behind ASKING. */
static bool redirect(redis *r, redis_node *n, redis_cmd *c, const redisReply *rep) {
  bool ask;
  uint16_t slot;
  redis_addr to;
  if (!r->cfg.cluster ||
      !redis_redirect_parse(rep->str, (size_t)rep->len, &n->addr, &ask, &slot, &to))
    return false;
  redis_node *target = redis_node_get(r, to.host, to.port);
  if (!target || ++c->redirects > REDIS_MAX_REDIRECTS) {
    kva_log(KVA_LOG_WARN, "%s: %s: too many redirects, or no room for node %s:%d", r->cfg.name,
            rep->str, to.host, to.port);
    finish(r, c, KVA_EIO);
    return true;
  }
  if (ask) {
    c->asking = true;
  } else {
    redis_slot_set(r, slot, target->id);
    redis_slots_refresh(r, n);
  }
  redis_node_enqueue(target, c);
  return true;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
  redis_cmd *c = privdata;
  redis_conn *k = c->conn;
  redis_node *n = k->node;
  redis *r = n->r;
  const redisReply *rep = reply;
  redis_flight_done(k, c);
  if (rep) redis_node_answered(n);
  if (!rep) {
    int result = k->drop_result;
    if (result != KVA_ESHUTDOWN && (result = redis_node_down_result(r, result)) == KVA_EUNAVAIL)
      n->failed_cmds++;
    finish(r, c, result);
  } else if (rep->type == REDIS_REPLY_ERROR) {
    if (!redirect(r, n, c, rep)) finish(r, c, got_error(r, n, c, rep));
  } else if (c->kind == CMD_GET) {
    got_value(r, c, rep);
    finish(r, c, KVA_OK);
  } else {
    finish(r, c, c->kind == CMD_SET ? got_set(c, rep) : got_exists(r, c, rep));
  }
}
