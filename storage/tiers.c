/*
 * tiers.c — the facade's calls across tiers (LMCache v1 StorageManager's
 * features; docs/invariants.md I-FA-2, I-L2-7): kva_lookup
 * (get_block_mapping) and pins, freeze, bypass, kva_flush, kva_l2_contains,
 * kva_l2_get_tier_stats, _keys and _nodes. Each is a short sequence of
 * requests from one borrowed session: to the L1 manager, then tier by
 * tier. In a client (client.socket) each is one CL_CALL: the daemon walks
 * its own tiers.
 */
#include <stdlib.h>
#include <string.h>

#include "client/connection.h"
#include "common/key.h"
#include "l2/load_plan.h"
#include "l2/store_controller.h"
#include "storage/storage_internal.h"

/* Looks keys up on tier t and gives the locks back at once: *prefix is the
 * contiguous run of found keys from keys[0]; bits is scratch. */
static int tier_prefix(kva_storage *s, session *ss, uint32_t t, const kva_key *k, size_t n,
                       uint8_t *bits, size_t *prefix) {
  memset(bits, 0, (n + 7) / 8);
  kva_l2_req r = {.keys = k, .n = n, .bits = bits};
  uint64_t t0 = kva_runtime_now_ns(s->rt);
  int rc = session_ask(ss, s->tiers.t[t].actor, KVA_L2_LOOKUP_AND_LOCK, &r, -1);
  if (rc != KVA_OK) return rc;
  l2_health(&s->tiers, t, r.result);
  if (r.result >= 0) { /* the meter's round trip (meter.h) */
    uint64_t now = kva_runtime_now_ns(s->rt);
    l2_meter_lookup(&s->tiers.t[t].meter, now - t0, now);
  }
  /* a key whose newest version did not reach the tier is a miss there:
   * its copy is older (absent.h); its lock goes back at once */
  l2_absent_settle_lookup(&s->tiers.t[t].absent, s->tiers.t[t].actor, k, n, bits);
  /* KVA_EUNAVAIL: some keys' server is down, the others were looked up */
  int result = r.result < 0 && r.result != KVA_EUNAVAIL ? r.result : KVA_OK;
  size_t found = 0;
  *prefix = 0;
  while (*prefix < n && kva_bit_get(bits, *prefix)) (*prefix)++;
  for (size_t i = 0; i < n; i++) found += kva_bit_get(bits, i);
  if (found == 0) return result;
  kva_key *locked = malloc(found * sizeof(*locked));
  if (!locked) return KVA_ENOMEM; /* cannot happen twice: the adapter keeps the locks */
  for (size_t i = 0, j = 0; i < n; i++)
    if (kva_bit_get(bits, i)) locked[j++] = k[i];
  rc = kva_send(s->tiers.t[t].actor, KVA_L2_UNLOCK, locked, (uint32_t)(found * sizeof(*locked)),
                NULL, 0);
  free(locked);
  if (rc != KVA_OK) return rc;
  return result;
}

typedef struct lookup_args {
  const kva_key *k;
  size_t n;
  int pin;
  kva_tier_hits *out;
  /* kva_plan_load: tiers whose lookup cannot pay are not asked; the
   * chunk's bytes and compute time, found once per call */
  int plan, can_split;
  double chunk_bytes, chunk_s;
  uint32_t not_asked; /* out: bit i for out->tier[i] */
} lookup_args;

/* kva_plan_load's gate: whether tier t is worth a lookup of the keys left
 * (load_plan_worth_asking). */
static int worth_asking(kva_storage *s, const lookup_args *a, uint32_t t, size_t left) {
  load_plan_tier lt;
  l2_meter_plan(&s->tiers.t[t].meter, kva_runtime_now_ns(s->rt), &lt);
  return load_plan_worth_asking(&lt, a->chunk_bytes, a->chunk_s, left, s->plan_margin,
                                a->can_split);
}

static int do_lookup(kva_storage *s, session *ss, void *arg) {
  lookup_args *a = arg;
  kva_tier_hits *out = a->out;
  memset(out, 0, sizeof(*out));
  l1_req r = {.keys = a->k, .n = a->n, .pin = a->pin};
  int rc = session_ask(ss, s->l1, L1_LOOKUP, &r, -1);
  if (rc != KVA_OK) return rc;
  if (r.result != KVA_OK) return r.result;
  strcpy(out->tier[0].name, "L1");
  out->tier[0].hits = r.hits;
  out->total = r.hits;
  out->ntiers = 1;
  uint8_t *bits = s->tiers.n ? malloc((a->n + 7) / 8) : NULL;
  if (s->tiers.n && !bits) return KVA_ENOMEM;
  /* Every tier is walked; the per-tier report has room for L1 and the
   * first 7 tiers (kva_tier_hits of kvact.h), while the schema allows 8: an
   * eighth tier's hits count in total only. */
  const uint32_t room = (uint32_t)(sizeof(out->tier) / sizeof(out->tier[0]));
  for (uint32_t t = 0; t < s->tiers.n; t++) {
    size_t hits = 0;
    int ask = out->total < a->n && !l2_frozen(&s->tiers) && l2_usable(&s->tiers, t);
    if (ask && a->plan && !worth_asking(s, a, t, a->n - out->total)) {
      ask = 0;
      l2_count(&s->tiers.t[t].lookups_skipped, 1);
      if (out->ntiers < room) a->not_asked |= 1u << out->ntiers;
    }
    if (ask && tier_prefix(s, ss, t, a->k + out->total, a->n - out->total, bits, &hits) != KVA_OK)
      hits = 0; /* a failing tier holds nothing, for this lookup */
    out->total += hits;
    if (out->ntiers == room) continue;
    memcpy(out->tier[out->ntiers].name, s->tiers.t[t].name, sizeof(out->tier[0].name));
    out->tier[out->ntiers++].hits = hits;
  }
  free(bits);
  return KVA_OK;
}

int kva_lookup(kva_storage *s, const kva_key *k, size_t n, int pin, kva_tier_hits *out) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!out) return KVA_EINVAL;
  if (s->client) {
    client_call c = {.req = {.type = P_LOOKUP, .n = (uint32_t)n, .flag = pin != 0, .keys = k},
                     .lookup = out};
    return n > PROTO_MAX_KEYS ? KVA_EINVAL : storage_remote(s, &c);
  }
  lookup_args a = {.k = k, .n = n, .pin = pin != 0, .out = out};
  return storage_with_session(s, do_lookup, &a);
}

/* The load plan of a found prefix (load_plan.h): one round trip for the
 * prefetch's lookup and one for its load are still to pay. */
static int plan_found(kva_storage *s, const lookup_args *a, kva_load_plan *out) {
  const kva_tier_hits *f = &out->found;
  size_t h = f->tier[0].hits;
  int8_t *tier = malloc(f->total - h + 1);
  if (!tier) return KVA_ENOMEM;
  size_t n = h + load_plan_tiers_of(f, f->ntiers, tier, f->total - h);
  load_plan_tier views[L2_MAX_TIERS];
  l2_plan_views(&s->tiers, kva_runtime_now_ns(s->rt), views);
  load_plan_in in = {.n = n,
                     .h = h,
                     .tier = tier,
                     .ntiers = s->tiers.n,
                     .tiers = views,
                     .chunk_bytes = a->chunk_bytes,
                     .chunk_compute_s = a->chunk_s,
                     .layers = 1,
                     .round_trips = 2,
                     .margin = s->plan_margin};
  load_plan_out p;
  int rc = load_plan(&in, &p);
  if (rc == KVA_OK) {
    out->worth = p.k;
    for (size_t i = p.k; i < n; i++) out->skipped[tier[i - h] + 1]++;
  }
  free(tier);
  if (rc != KVA_OK) return rc;
  out->load_s = p.load_s;
  out->recompute_s = p.recompute_s;
  out->split_at = p.split_at;
  out->split_s = p.split_s;
  return KVA_OK;
}

int kva_plan_load(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l, unsigned flags,
                  kva_load_plan *out) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!out || !l || kva_layout_bytes(l) == 0 || (flags & ~(KVA_PLAN_PIN | KVA_PLAN_SPLIT)))
    return KVA_EINVAL;
  if (s->client) return KVA_ENOTSUP;
  memset(out, 0, sizeof(*out));
  int pin = (flags & KVA_PLAN_PIN) != 0;
  lookup_args a = {.k = k,
                   .n = n,
                   .pin = pin,
                   .out = &out->found,
                   .plan = 1,
                   .can_split = (flags & KVA_PLAN_SPLIT) != 0,
                   .chunk_bytes = (double)kva_layout_bytes(l),
                   .chunk_s = prefill_chunk_s(&s->prefill, k[0].model)};
  rc = storage_with_session(s, do_lookup, &a);
  if (rc != KVA_OK) return rc;
  out->not_asked = a.not_asked;
  rc = plan_found(s, &a, out);
  if (rc != KVA_OK && pin) kva_unpin(s, k, out->found.tier[0].hits);
  return rc;
}

int kva_report_prefill(kva_storage *s, const char *model, uint32_t chunk_tokens, uint64_t tokens,
                       uint64_t ns) {
  if (!s) return KVA_EINVAL;
  if (s->client) return KVA_ENOTSUP;
  return prefill_report(&s->prefill, model, chunk_tokens, tokens, ns);
}

int kva_unpin(kva_storage *s, const kva_key *k, size_t n) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  l1_req r = {.keys = k, .n = n};
  return storage_call(s, L1_UNPIN, &r);
}

/* A call naming a tier, in a client: c holds its other arguments and
 * outputs. */
static int remote_tier_call(kva_storage *s, const char *tier, client_call *c) {
  if (!tier || strlen(tier) >= PROTO_TIER_BYTES) return KVA_EINVAL;
  strcpy(c->req.tier, tier);
  return storage_remote(s, c);
}

static int remote_tier_ask(kva_storage *s, uint16_t type, const char *tier, int on,
                           const kva_key *k) {
  client_call c = {.req = {.type = type, .flag = on != 0, .n = k ? 1 : 0, .keys = k}};
  return remote_tier_call(s, tier, &c);
}

int kva_set_freeze(kva_storage *s, int on) {
  if (!s) return KVA_EINVAL;
  if (s->client)
    return storage_remote(s, &(client_call){.req = {.type = P_FREEZE, .flag = on != 0}});
  __atomic_store_n(&s->tiers.frozen, on != 0, __ATOMIC_RELAXED);
  return KVA_OK;
}

int kva_set_tier_bypass(kva_storage *s, const char *tier, int on) {
  if (s && s->client) return remote_tier_ask(s, P_SET_BYPASS, tier, on, NULL);
  int t = s ? l2_tier_index(&s->tiers, tier) : -1;
  if (t < 0) return KVA_EINVAL;
  __atomic_store_n(&s->tiers.t[t].bypass_manual, on != 0, __ATOMIC_RELAXED);
  if (!on) l2_recovered(&s->tiers, (uint32_t)t); /* the operator says it is fine */
  return KVA_OK;
}

int kva_tier_bypassed(kva_storage *s, const char *tier) {
  if (s && s->client) return remote_tier_ask(s, P_BYPASSED, tier, 0, NULL);
  int t = s ? l2_tier_index(&s->tiers, tier) : -1;
  if (t < 0) return KVA_EINVAL;
  return !l2_usable(&s->tiers, (uint32_t)t);
}

static int do_flush(kva_storage *s, session *ss, void *arg) {
  return session_ask(ss, s->store, SC_FLUSH, NULL, *(int *)arg);
}

int kva_flush(kva_storage *s, int timeout_ms) {
  if (!s) return KVA_EINVAL;
  if (s->client) /* waits for the daemon at most client.timeout_ms, like every call */
    return storage_remote(s, &(client_call){.req = {.type = P_FLUSH, .timeout_ms = timeout_ms}});
  if (!s->store) return KVA_OK;
  int t = timeout_ms < 0 ? -1 : timeout_ms;
  return storage_with_session(s, do_flush, &t);
}

typedef struct contains_args {
  uint32_t tier;
  const kva_key *k;
} contains_args;

static int do_contains(kva_storage *s, session *ss, void *arg) {
  contains_args *a = arg;
  uint8_t bits = 0;
  size_t prefix = 0;
  int rc = tier_prefix(s, ss, a->tier, a->k, 1, &bits, &prefix);
  if (rc != KVA_OK) return rc == KVA_ENOMEM || rc == KVA_ESHUTDOWN ? rc : KVA_EIO;
  return prefix == 1;
}

int kva_l2_contains(kva_storage *s, const char *tier, const kva_key *k) {
  if (s && s->client)
    return k && key_valid(k) ? remote_tier_ask(s, P_L2_CONTAINS, tier, 0, k) : KVA_EINVAL;
  int t = s ? l2_tier_index(&s->tiers, tier) : -1;
  if (t < 0 || !k || !key_valid(k)) return KVA_EINVAL;
  contains_args a = {(uint32_t)t, k};
  return storage_with_session(s, do_contains, &a);
}

int storage_tier_stats(kva_storage *s, session *ss, uint32_t t, kva_l2_stats *out) {
  kva_l2_req r = {.stats = out};
  int rc = session_ask(ss, s->tiers.t[t].actor, KVA_L2_STATS, &r, -1);
  if (rc != KVA_OK) return rc;
  return r.result == KVA_OK ? KVA_OK : KVA_EIO;
}

typedef struct tier_stats_args {
  uint32_t tier;
  kva_l2_stats *out;
} tier_stats_args;

static int do_tier_stats(kva_storage *s, session *ss, void *arg) {
  tier_stats_args *a = arg;
  return storage_tier_stats(s, ss, a->tier, a->out) == KVA_OK ? KVA_OK : KVA_EIO;
}

int kva_l2_get_tier_stats(kva_storage *s, const char *tier, kva_l2_tier_stats *out) {
  if (s && s->client)
    return out ? remote_tier_call(s, tier,
                                  &(client_call){.req = {.type = P_TIER_STATS}, .tier_stats = out})
               : KVA_EINVAL;
  int t = s ? l2_tier_index(&s->tiers, tier) : -1;
  if (t < 0 || !out) return KVA_EINVAL;
  const l2_tier *lt = &s->tiers.t[t];
  *out = (kva_l2_tier_stats){
      .stored_keys = __atomic_load_n(&lt->stored_keys, __ATOMIC_RELAXED),
      .stored_bytes = __atomic_load_n(&lt->stored_bytes, __ATOMIC_RELAXED),
      .loaded_keys = __atomic_load_n(&lt->loaded_keys, __ATOMIC_RELAXED),
      .loaded_bytes = __atomic_load_n(&lt->loaded_bytes, __ATOMIC_RELAXED),
      .bypassed = !l2_usable(&s->tiers, (uint32_t)t),
      .skipped_slow_keys = __atomic_load_n(&lt->skipped_slow_keys, __ATOMIC_RELAXED),
      .lookups_skipped = __atomic_load_n(&lt->lookups_skipped, __ATOMIC_RELAXED)};
  load_plan_tier v;
  l2_meter_read(&s->tiers.t[t].meter, &v);
  out->queued_bytes = (uint64_t)v.queued_bytes;
  out->bytes_per_s = v.bytes_per_s;
  out->latency_s = v.latency_s;
  kva_l2_stats adapter = {0};
  int rc = storage_with_session(s, do_tier_stats, &(tier_stats_args){(uint32_t)t, &adapter});
  if (rc == KVA_OK) out->adapter = adapter;
  return rc;
}

int kva_l2_get_tier_keys(kva_storage *s, const char *tier, kva_l2_tier_keys *out) {
  if (s && s->client)
    return out ? remote_tier_call(s, tier,
                                  &(client_call){.req = {.type = P_TIER_KEYS}, .tier_keys = out})
               : KVA_EINVAL;
  int t = s ? l2_tier_index(&s->tiers, tier) : -1;
  if (t < 0 || !out) return KVA_EINVAL;
  const l2_tier *lt = &s->tiers.t[t];
#define LOAD(f) __atomic_load_n(&lt->f, __ATOMIC_RELAXED)
  *out = (kva_l2_tier_keys){.written = LOAD(k_written),
                            .stored = LOAD(stored_keys),
                            .coalesced = LOAD(k_coalesced),
                            .bypassed = LOAD(k_bypassed),
                            .frozen = LOAD(k_frozen),
                            .gone = LOAD(k_gone),
                            .unavailable = LOAD(k_unavailable),
                            .failed = LOAD(k_failed),
                            .dropped = LOAD(k_dropped)};
#undef LOAD
  l2_absent_stats a;
  l2_absent_stats_get(&s->tiers.t[t].absent, &a);
  out->absent_now = a.marked_now;
  out->absent_overflowed = a.overflowed;
  return KVA_OK;
}

typedef struct tier_nodes_args {
  uint32_t tier;
  kva_l2_req r;
} tier_nodes_args;

static int do_tier_nodes(kva_storage *s, session *ss, void *arg) {
  tier_nodes_args *a = arg;
  int rc = session_ask(ss, s->tiers.t[a->tier].actor, KVA_L2_NODES, &a->r, -1);
  return rc != KVA_OK ? rc : a->r.result;
}

/* In a client: the daemon's answer, at most PROTO_MAX_NODES entries of
 * it (*n still counts them all). */
static int remote_tier_nodes(kva_storage *s, const char *tier, kva_l2_node_stats *out, size_t cap,
                             size_t *n, double *map_age_s) {
  if (!n || (cap && !out)) return KVA_EINVAL;
  client_call c = {
      .req = {.type = P_TIER_NODES, .cap = cap < PROTO_MAX_NODES ? (uint32_t)cap : PROTO_MAX_NODES},
      .nodes = out};
  int rc = remote_tier_call(s, tier, &c);
  if (rc != KVA_OK) return rc;
  *n = c.nodes_n;
  if (map_age_s) *map_age_s = c.map_age_s;
  return KVA_OK;
}

/* Only built-in adapters of servers are asked (has_nodes): one that does
 * not know KVA_L2_NODES would never answer, and the request lives on this
 * stack. */
int kva_l2_get_tier_nodes(kva_storage *s, const char *tier, kva_l2_node_stats *out, size_t cap,
                          size_t *n, double *map_age_s) {
  if (s && s->client) return remote_tier_nodes(s, tier, out, cap, n, map_age_s);
  int t = s ? l2_tier_index(&s->tiers, tier) : -1;
  if (t < 0 || !n || (cap && !out)) return KVA_EINVAL;
  if (!s->tiers.t[t].has_nodes) return KVA_ENOTSUP;
  tier_nodes_args a = {.tier = (uint32_t)t, .r = {.nodes = out, .nodes_cap = cap}};
  int rc = storage_with_session(s, do_tier_nodes, &a);
  if (rc != KVA_OK) return rc;
  *n = a.r.nodes_n;
  if (map_age_s) *map_age_s = a.r.map_age_s;
  return KVA_OK;
}
