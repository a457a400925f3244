/*
 * mock_adapter.c — the in-memory L2 adapter actor ("mock"): the L2 adapter
 * protocol of kvact.h over mock_store.c, with latency and bandwidth
 * emulation (mock_time.c) and fault injection for tests and benchmarks.
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * KVA_L2_STORE, KVA_L2_LOAD,          | KVA_L2_DONE (same tag, same
 *   KVA_L2_LOOKUP_AND_LOCK,            |   pointer) to msg->from, once, at
 *   KVA_L2_STATS (kva_l2_req *)        |   the emulated completion time
 * KVA_L2_NODES (kva_l2_req *)          | KVA_L2_DONE at once, KVA_ENOTSUP
 * KVA_L2_UNLOCK (kva_key[n])           |
 * MOCK_CONTROL (mock_control)          | KVA_L2_DONE (no payload) if from
 * KVA_MSG_TIMER (a reply is due)       | the due KVA_L2_DONEs
 *
 * Invariants:
 *  - every request with a sender is answered exactly once: malformed ones
 *    at once (result KVA_EINVAL, or a NULL pointer when the payload is not
 *    a request), pending ones by the timer or, at the latest, in on_stop;
 *  - the request is read and written only while its message is handled
 *    (the bytes are copied at arrival); after that only its pointer travels
 *    back, so the sender may reuse it as soon as the reply arrives;
 *  - a STORE task changes the store only if it succeeds as a whole;
 *  - a key locked by LOOKUP_AND_LOCK is neither evicted nor replaced until
 *    as many UNLOCKs arrived; UNLOCK of an unknown or unlocked key is
 *    ignored, and UNLOCK works even while the tier is down.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/mock/mock_internal.h"

#define MOCK_MAX_LATENCY_US 60000000ull /* MOCK_CONTROL's bound, the schema's for latency_us */

/* ---- fault injection ---------------------------------------------------- */

/* splitmix64: tiny and seedable; the same seed and the same requests give
 * the same failures */
static uint64_t rng_next(mock *m) {
  uint64_t z = (m->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* True with probability rate; draws nothing when rate is 0, so turning a
 * rate on does not shift the pattern of the other one. */
static bool rng_fails(mock *m, double rate) {
  return rate > 0 && (double)(rng_next(m) >> 11) * 0x1.0p-53 < rate;
}

static bool key_listed(const kva_key *list, uint32_t n, const kva_key *k) {
  for (uint32_t i = 0; i < n; i++)
    if (kva_key_equal(&list[i], k)) return true;
  return false;
}

/* ---- validation --------------------------------------------------------- */

static const char *type_name(uint32_t type) {
  switch (type) {
  case KVA_L2_STORE:
    return "STORE";
  case KVA_L2_LOOKUP_AND_LOCK:
    return "LOOKUP_AND_LOCK";
  case KVA_L2_LOAD:
    return "LOAD";
  default:
    return "STATS";
  }
}

/* ---- the requests ------------------------------------------------------- */

/* kva_key_hash of every key, into the reusable scratch array. */
static bool hash_keys(mock *m, const kva_l2_req *r) {
  if (r->n > m->nhashes) {
    uint64_t *h = realloc(m->hashes, r->n * sizeof(*h));
    if (!h) return false;
    m->hashes = h;
    m->nhashes = r->n;
  }
  for (size_t i = 0; i < r->n; i++) m->hashes[i] = kva_key_hash(&r->keys[i]);
  return true;
}

/* Faults first, then the store's own all-or-nothing check, then apply. */
static int store_task(mock *m, const kva_l2_req *r, uint64_t *copied) {
  for (size_t i = 0; m->nfail_store && i < r->n; i++)
    if (key_listed(m->fail_store, m->nfail_store, &r->keys[i])) return KVA_EIO;
  if (rng_fails(m, m->fail_store_rate)) return KVA_EIO;
  if (!hash_keys(m, r)) return KVA_ENOMEM;
  int rc = mock_store_check(&m->st, r, m->hashes);
  if (rc != KVA_OK) return rc;
  return mock_store_apply(&m->st, r, m->hashes, kva_layout_fingerprint(r->layout), copied);
}

static void on_store(mock *m, const kva_msg *msg, kva_l2_req *r) {
  uint64_t t0 = mock_emulating(m) ? mock_now(m) : 0, copied = 0;
  r->result = store_task(m, r, &copied);
  m->stats.stores++;
  if (r->result != KVA_OK) m->stats.store_failures++;
  mock_reply_channel(m, msg, r, t0, copied);
}

/* Locks the keys found; each key continues the one before it in the
 * request (a prefetch looks a chain up in order), the first continues
 * r->prev when set, which the store notes for the chain order of eviction
 * (mock_store.h). */
static void on_lookup(mock *m, const kva_msg *msg, kva_l2_req *r) {
  uint64_t t0 = mock_emulating(m) ? mock_now(m) : 0;
  uint64_t prev = r->prev ? kva_key_hash(r->prev) : 0;
  for (size_t i = 0; i < r->n; i++) {
    uint64_t h = kva_key_hash(&r->keys[i]);
    mock_entry *e = mock_store_find(&m->st, &r->keys[i], h);
    if (i > 0 || r->prev) mock_store_follows(&m->st, e, h, prev);
    prev = h;
    if (!e) continue;
    mock_store_lock(&m->st, e);
    kva_bit_set(r->bits, i);
  }
  m->stats.lookups += r->n;
  r->result = KVA_OK;
  mock_reply_lookup(m, msg, r, t0);
}

/* One key of a LOAD: only exactly the stored bytes of this layout, never a
 * partial or foreign copy. */
static bool load_one(mock *m, const kva_key *k, kva_buf *b, uint64_t fp) {
  mock_entry *e = mock_store_find(&m->st, k, kva_key_hash(k));
  if (!e || b->len != e->bytes || e->fp != fp) return false;
  if (key_listed(m->fail_load, m->nfail_load, k) || rng_fails(m, m->fail_load_rate)) return false;
  memcpy(b->ptr, e->data, e->bytes);
  return true;
}

static void on_load(mock *m, const kva_msg *msg, kva_l2_req *r) {
  uint64_t t0 = mock_emulating(m) ? mock_now(m) : 0, copied = 0;
  uint64_t fp = kva_layout_fingerprint(r->layout);
  for (size_t i = 0; i < r->n; i++) {
    if (load_one(m, &r->keys[i], &r->bufs[i], fp)) {
      kva_bit_set(r->bits, i);
      copied += r->bufs[i].len;
    } else {
      m->stats.load_failures++;
    }
  }
  m->stats.loads += r->n;
  r->result = KVA_OK;
  mock_reply_channel(m, msg, r, t0, copied);
}

static void on_stats(mock *m, const kva_msg *msg, kva_l2_req *r) {
  kva_l2_stats *s = r->stats;
  *s = m->stats;
  s->objects = m->st.count;
  s->bytes = m->st.used;
  s->capacity_bytes = m->st.capacity;
  s->keys_locked = m->st.locks;
  s->evictions = m->st.evictions;
  r->result = KVA_OK;
  mock_reply_now(m, msg->from, msg->tag, r);
}

/* A down tier refuses at once; counters still see the attempt. */
static void on_down(mock *m, const kva_msg *msg, kva_l2_req *r) {
  if (msg->type == KVA_L2_STORE) {
    m->stats.stores++;
    m->stats.store_failures++;
  } else if (msg->type == KVA_L2_LOAD) {
    m->stats.loads += r->n;
    m->stats.load_failures += r->n;
  } else {
    m->stats.lookups += r->n;
  }
  r->result = KVA_EIO;
  mock_reply_now(m, msg->from, msg->tag, r);
}

static void on_request(mock *m, const kva_msg *msg) {
  const char *what = type_name(msg->type);
  if (!msg->from) {
    kva_log(KVA_LOG_WARN, "%s: %s without a sender to answer: dropped", m->name, what);
    return;
  }
  kva_l2_req *r = kva_l2_req_of(msg);
  if (!r) {
    kva_log(KVA_LOG_WARN, "%s: %s of %u bytes is not a request pointer", m->name, what, msg->len);
    mock_reply_now(m, msg->from, msg->tag, NULL);
    return;
  }
  const char *bad = kva_l2_req_problem(msg->type, r);
  if (bad) {
    kva_log(KVA_LOG_WARN, "%s: %s refused: %s", m->name, what, bad);
    r->result = KVA_EINVAL;
    mock_reply_now(m, msg->from, msg->tag, r);
  } else if (msg->type == KVA_L2_NODES) { /* no servers to list */
    r->result = KVA_ENOTSUP;
    mock_reply_now(m, msg->from, msg->tag, r);
  } else if (m->down && msg->type != KVA_L2_STATS) {
    on_down(m, msg, r);
  } else if (msg->type == KVA_L2_STORE) {
    on_store(m, msg, r);
  } else if (msg->type == KVA_L2_LOOKUP_AND_LOCK) {
    on_lookup(m, msg, r);
  } else if (msg->type == KVA_L2_LOAD) {
    on_load(m, msg, r);
  } else {
    on_stats(m, msg, r);
  }
}

/* Fire and forget: releases one lock per key; unknown keys are ignored.
 * The keys are copied out because the payload need not be aligned. */
static void on_unlock(mock *m, const kva_msg *msg) {
  if (msg->len % sizeof(kva_key) != 0) {
    kva_log(KVA_LOG_WARN, "%s: UNLOCK of %u bytes is not a whole number of keys: ignored", m->name,
            msg->len);
    return;
  }
  for (uint32_t off = 0; off < msg->len; off += sizeof(kva_key)) {
    kva_key k;
    memcpy(&k, (const char *)msg->data + off, sizeof(k));
    mock_entry *e = mock_store_find(&m->st, &k, kva_key_hash(&k));
    if (e) mock_store_unlock(&m->st, e);
  }
}

/* ---- control ------------------------------------------------------------ */

static bool rate_ok(double r) {
  return r >= 0 && r <= 1; /* false for NaN too */
}

static const char *control_problem(const mock_control *c) {
  if ((c->set & MOCK_SET_FAIL_STORE_RATE) && !rate_ok(c->fail_store_rate))
    return "fail_store_rate outside [0, 1]";
  if ((c->set & MOCK_SET_FAIL_LOAD_RATE) && !rate_ok(c->fail_load_rate))
    return "fail_load_rate outside [0, 1]";
  if ((c->set & MOCK_SET_LATENCY) && c->latency_us > MOCK_MAX_LATENCY_US)
    return "latency_us above 60 s";
  if ((c->set & MOCK_SET_FAIL_STORE_KEYS) && c->nfail_store > MOCK_FAIL_KEYS_MAX)
    return "too many failing store keys";
  if ((c->set & MOCK_SET_FAIL_LOAD_KEYS) && c->nfail_load > MOCK_FAIL_KEYS_MAX)
    return "too many failing load keys";
  return NULL;
}

static void control_apply(mock *m, const mock_control *c) {
  if (c->set & MOCK_SET_DOWN) m->down = c->down != 0;
  if (c->set & MOCK_SET_FAIL_STORE_RATE) m->fail_store_rate = c->fail_store_rate;
  if (c->set & MOCK_SET_FAIL_LOAD_RATE) m->fail_load_rate = c->fail_load_rate;
  if (c->set & MOCK_SET_SEED) m->rng = c->seed;
  if (c->set & MOCK_SET_LATENCY) m->latency_ns = c->latency_us * 1000;
  if (c->set & MOCK_SET_BANDWIDTH) m->bandwidth = c->bandwidth_bytes_per_s;
  if (c->set & MOCK_SET_FAIL_STORE_KEYS) {
    m->nfail_store = c->nfail_store;
    memcpy(m->fail_store, c->fail_store, sizeof(m->fail_store));
  }
  if (c->set & MOCK_SET_FAIL_LOAD_KEYS) {
    m->nfail_load = c->nfail_load;
    memcpy(m->fail_load, c->fail_load, sizeof(m->fail_load));
  }
}

static void on_control(mock *m, const kva_msg *msg) {
  mock_control c;
  const char *bad = "wrong payload size";
  if (msg->len == sizeof(c)) {
    memcpy(&c, msg->data, sizeof(c));
    bad = control_problem(&c);
  }
  if (bad)
    kva_log(KVA_LOG_WARN, "%s: MOCK_CONTROL ignored: %s", m->name, bad);
  else
    control_apply(m, &c);
  if (msg->from) mock_reply_control(m, msg->from, msg->tag);
}

/* ---- the actor ---------------------------------------------------------- */

static void mock_receive(kva_actor *self, void *state, const kva_msg *msg) {
  mock *m = state;
  switch (msg->type) {
  case KVA_L2_STORE:
  case KVA_L2_LOOKUP_AND_LOCK:
  case KVA_L2_LOAD:
  case KVA_L2_STATS:
  case KVA_L2_NODES:
    on_request(m, msg);
    break;
  case KVA_L2_UNLOCK:
    on_unlock(m, msg);
    break;
  case MOCK_CONTROL:
    on_control(m, msg);
    break;
  case KVA_MSG_TIMER:
    mock_on_timer(m, msg->tag);
    break;
  default:
    kva_log(KVA_LOG_WARN, "%s: unknown message type %u ignored", m->name, msg->type);
    break;
  }
}

static void mock_free(mock *m) {
  mock_store_destroy(&m->st);
  free(m->q);
  free(m->hashes);
  free(m);
}

static void mock_on_stop(kva_actor *self, void *state) {
  mock *m = state;
  mock_flush_all(m); /* the timers are gone: answer what is still pending */
  if (m->st.locks) {
    uint64_t keys = 0;
    for (const mock_entry *e = m->st.oldest; e; e = e->newer) keys += e->locks > 0;
    kva_log(KVA_LOG_WARN, "%s: stopped with %llu lookup locks still held on %llu keys", m->name,
            (unsigned long long)m->st.locks, (unsigned long long)keys);
  }
  mock_free(m);
}

/* ---- config and spawn --------------------------------------------------- */

static void set_err(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
}

/* cfg is effective (kvact.h): every key is there, at its schema default
 * when the config left it out, and passed the schema's checks (the rates
 * in [0, 1], latency_us at most 60 s); NULL reads the schema defaults. So
 * nothing here repeats a default or a range. */
static const char *read_config(mock *m, const kva_config_node *cfg, uint64_t *capacity) {
  const char *name = "";
  uint64_t latency_us = 0;
  if (!cfg && !(cfg = kva_config_node_default("mock"))) return "mock: out of memory";
  kva_config_node_str(cfg, "name", &name);
  kva_config_node_u64(cfg, "capacity_bytes", capacity);
  kva_config_node_u64(cfg, "bandwidth_bytes_per_s", &m->bandwidth);
  kva_config_node_u64(cfg, "latency_us", &latency_us);
  kva_config_node_u64(cfg, "seed", &m->rng);
  kva_config_node_f64(cfg, "fail_store_rate", &m->fail_store_rate);
  kva_config_node_f64(cfg, "fail_load_rate", &m->fail_load_rate);
  snprintf(m->name, sizeof(m->name), "%s", name);
  m->latency_ns = latency_us * 1000;
  return NULL;
}

kva_actor *mock_adapter_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                              size_t errlen) {
  mock *m = calloc(1, sizeof(*m));
  uint64_t capacity = 0;
  if (!rt || !m) {
    set_err(err, errlen, rt ? "mock: out of memory" : "mock: no runtime");
    free(m);
    return NULL;
  }
  m->rt = rt;
  m->timer_id = -1;
  const char *bad = read_config(m, cfg, &capacity);
  if (bad || mock_store_init(&m->st, capacity) != KVA_OK) {
    set_err(err, errlen, bad ? bad : "mock: out of memory");
    mock_free(m);
    return NULL;
  }
  kva_behavior b = {.name = m->name, .receive = mock_receive, .on_stop = mock_on_stop};
  /* set before anyone can send: the pointer is returned only below */
  kva_actor *a = m->self = kva_spawn(rt, &b, m, NULL);
  if (!a) {
    set_err(err, errlen, "mock: cannot spawn the actor");
    mock_free(m);
  }
  return a;
}
