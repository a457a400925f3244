/*
 * metrics_l2.c — the L2 families of kvactd's Prometheus page
 * (metrics_page.h): per tier, what moved through it and the adapter's own
 * answer (kva_l2_get_tier_stats), the load plan's view of it, what became
 * of every key written toward it (kva_l2_get_tier_keys); per server of a
 * tier of servers (redis: a Redis Cluster's nodes, or its one server),
 * its state, slots and failures (kva_l2_get_tier_nodes), and the age of
 * the tier's slot map.
 *
 * Every tier is read (metrics_l2_read) before a family is written
 * (metrics_l2_put), as the page's other parts are. A part a source cannot
 * answer is left out: a tier's adapter fields when its adapter fails, its
 * keys when the call fails, its servers when it has none (mock, disk:
 * KVA_ENOTSUP) or cannot say; the map age while there is no map (-1).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics_page.h"
#include "storage/storage_internal.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct tier_view {
  const char *name;
  int rc; /* of kva_l2_get_tier_stats: KVA_EIO = adapter unknown, the rest filled */
  kva_l2_tier_stats st;
  int keys_rc; /* of kva_l2_get_tier_keys */
  kva_l2_tier_keys keys;
  kva_l2_node_stats *nodes; /* its servers (NULL: none, or not known) */
  size_t nnodes;
  double map_age_s; /* < 0: no slot map */
} tier_view;

struct metrics_l2 {
  uint32_t n;
  tier_view t[L2_MAX_TIERS];
};

/* ---- reading -------------------------------------------------------------- */

/* The tier's servers into a buffer sized by their count (as the clients
 * are read): none when it has none or cannot say. */
static void read_nodes(kva_storage *s, tier_view *t) {
  size_t n = 0, now = 0;
  t->map_age_s = -1;
  if (kva_l2_get_tier_nodes(s, t->name, NULL, 0, &n, NULL) != KVA_OK || n == 0) return;
  kva_l2_node_stats *nodes = calloc(n, sizeof(*nodes));
  if (!nodes || kva_l2_get_tier_nodes(s, t->name, nodes, n, &now, &t->map_age_s) != KVA_OK) {
    free(nodes);
    t->map_age_s = -1;
    return;
  }
  t->nodes = nodes;
  t->nnodes = now < n ? now : n; /* some may have been met in between */
}

/* The tiers' names and counts are fixed once the runtime started. */
metrics_l2 *metrics_l2_read(kva_storage *s) {
  metrics_l2 *v = calloc(1, sizeof(*v));
  if (!v) return NULL;
  v->n = s->tiers.n;
  for (uint32_t i = 0; i < v->n; i++) {
    tier_view *t = &v->t[i];
    t->name = s->tiers.t[i].name;
    t->rc = kva_l2_get_tier_stats(s, t->name, &t->st);
    t->keys_rc = kva_l2_get_tier_keys(s, t->name, &t->keys);
    read_nodes(s, t);
  }
  return v;
}

void metrics_l2_free(metrics_l2 *v) {
  if (!v) return;
  for (uint32_t i = 0; i < v->n; i++) free(v->t[i].nodes);
  free(v);
}

/* ---- a tier's traffic and its adapter ------------------------------------------- */

typedef struct tier_field {
  const char *name, *type, *help;
  size_t off;  /* of a uint64_t in kva_l2_tier_stats */
  int adapter; /* from the adapter's answer: left out when it failed */
} tier_field;

#define TIER(n, t, f, h, a)                                                                        \
  { "kvact_l2_tier_" n, t, h, offsetof(kva_l2_tier_stats, f), a }
static const tier_field tier_fields[] = {
    TIER("stored_keys_total", "counter", stored_keys, "Keys stored to the tier.", 0),
    TIER("stored_bytes_total", "counter", stored_bytes, "Bytes stored to the tier.", 0),
    TIER("loaded_keys_total", "counter", loaded_keys, "Keys loaded from the tier.", 0),
    TIER("loaded_bytes_total", "counter", loaded_bytes, "Bytes loaded from the tier.", 0),
    TIER("objects", "gauge", adapter.objects, "Objects the tier holds.", 1),
    TIER("bytes", "gauge", adapter.bytes, "Bytes the tier holds.", 1),
    TIER("keys_locked", "gauge", adapter.keys_locked, "Lookup locks the tier holds.", 1),
    TIER("store_failures_total", "counter", adapter.store_failures,
         "Store tasks the tier's adapter failed.", 1),
    TIER("load_failures_total", "counter", adapter.load_failures,
         "Keys the tier's adapter failed to load.", 1),
    TIER("skipped_slow_keys_total", "counter", skipped_slow_keys,
         "Keys found in the tier but left to the engine to recompute, as slower to load.", 0),
    TIER("queued_bytes", "gauge", queued_bytes,
         "Bytes the load plan sees queued on the tier (loads, or loads and stores before a load "
         "was measured), not yet answered.",
         0),
    TIER("lookups_skipped_total", "counter", lookups_skipped,
         "Prefetches and plans that did not ask the tier, as its lookup could not pay.", 0),
};

/* The meter's measurements (doubles), as the load plan sees them. */
typedef struct tier_rate {
  const char *name, *help;
  size_t off;
} tier_rate;
static const tier_rate tier_rates[] = {
    {"kvact_l2_tier_bytes_per_second",
     "The tier's measured throughput while busy, loads and stores (0 = not measured yet).",
     offsetof(kva_l2_tier_stats, bytes_per_s)},
    {"kvact_l2_tier_lookup_seconds", "The tier's measured lookup round trip (average).",
     offsetof(kva_l2_tier_stats, latency_s)},
};

/* name{tier="<t>" and what follows; the caller closes the labels. */
static void put_tier_labels(page *p, const char *name, const tier_view *t) {
  page_put(p, "%s{tier=\"", name);
  page_label_value(p, t->name);
  page_put(p, "\"");
}

static void put_tier_sample(page *p, const char *name, const tier_view *t, uint64_t v) {
  put_tier_labels(p, name, t);
  page_put(p, "} %lu\n", (unsigned long)v);
}

static bool tier_has(const tier_view *t, int adapter) {
  return t->rc == KVA_OK || (t->rc == KVA_EIO && !adapter);
}

static void put_traffic(page *p, const metrics_l2 *v) {
  page_family(p, "kvact_l2_tier_bypassed", "gauge", "1 while the tier is bypassed, else 0.");
  for (uint32_t i = 0; i < v->n; i++)
    if (tier_has(&v->t[i], 0))
      put_tier_sample(p, "kvact_l2_tier_bypassed", &v->t[i], (uint64_t)v->t[i].st.bypassed);
  for (size_t k = 0; k < COUNT(tier_fields); k++) {
    const tier_field *f = &tier_fields[k];
    page_family(p, f->name, f->type, f->help);
    for (uint32_t i = 0; i < v->n; i++)
      if (tier_has(&v->t[i], f->adapter))
        put_tier_sample(p, f->name, &v->t[i], page_u64_at(&v->t[i].st, f->off));
  }
  for (size_t k = 0; k < COUNT(tier_rates); k++) {
    const tier_rate *r = &tier_rates[k];
    page_family(p, r->name, "gauge", r->help);
    for (uint32_t i = 0; i < v->n; i++) {
      if (!tier_has(&v->t[i], 0)) continue;
      double d;
      memcpy(&d, (const char *)&v->t[i].st + r->off, sizeof(d));
      put_tier_labels(p, r->name, &v->t[i]);
      page_put(p, "} %.9g\n", d);
    }
  }
}

/* ---- what became of the keys written toward a tier -------------------------------- */

typedef struct outcome {
  const char *name;
  size_t off; /* of a uint64_t in kva_l2_tier_keys */
} outcome;
#define OUTCOME(f)                                                                                 \
  { #f, offsetof(kva_l2_tier_keys, f) }
static const outcome outcomes[] = {
    OUTCOME(stored), OUTCOME(coalesced),   OUTCOME(bypassed), OUTCOME(frozen),
    OUTCOME(gone),   OUTCOME(unavailable), OUTCOME(failed),   OUTCOME(dropped),
};

static const tier_field key_fields[] = {
    {"kvact_l2_tier_keys_written_total", "counter",
     "Keys written toward the tier; once stores are flushed, each is in one outcome of "
     "kvact_l2_tier_keys_total.",
     offsetof(kva_l2_tier_keys, written), 0},
    {"kvact_l2_tier_absent_keys", "gauge",
     "Keys marked absent from the tier now: their newest version did not reach it, so it does "
     "not serve them.",
     offsetof(kva_l2_tier_keys, absent_now), 0},
    {"kvact_l2_tier_absent_overflowed_total", "counter",
     "Absent marks past the tier's bound (l2_absent_keys).",
     offsetof(kva_l2_tier_keys, absent_overflowed), 0},
};

static void put_keys(page *p, const metrics_l2 *v) {
  const char *name = "kvact_l2_tier_keys_total";
  page_family(p, name, "counter",
              "Keys written toward the tier, by what became of them: stored, coalesced into a "
              "newer store, bypassed, frozen, gone from L1 first, unavailable (their server "
              "down), failed, dropped.");
  for (uint32_t i = 0; i < v->n; i++) {
    if (v->t[i].keys_rc != KVA_OK) continue;
    for (size_t k = 0; k < COUNT(outcomes); k++) {
      put_tier_labels(p, name, &v->t[i]);
      page_put(p, ",outcome=\"%s\"} %lu\n", outcomes[k].name,
               (unsigned long)page_u64_at(&v->t[i].keys, outcomes[k].off));
    }
  }
  for (size_t k = 0; k < COUNT(key_fields); k++) {
    const tier_field *f = &key_fields[k];
    page_family(p, f->name, f->type, f->help);
    for (uint32_t i = 0; i < v->n; i++)
      if (v->t[i].keys_rc == KVA_OK)
        put_tier_sample(p, f->name, &v->t[i], page_u64_at(&v->t[i].keys, f->off));
  }
}

/* ---- a tier's servers ----------------------------------------------------------------- */

enum { NF_INT, NF_U32, NF_F64, NF_U64 };

typedef struct node_field {
  const char *name, *type, *help;
  int kind;   /* NF_*: the field's C type */
  size_t off; /* in kva_l2_node_stats */
} node_field;

static const node_field node_fields[] = {
    {"kvact_l2_node_state", "gauge",
     "A server of the tier: 0 ok, 1 failed (still tried), 2 bypassed (its keys fail at once "
     "until it answers a probe).",
     NF_INT, offsetof(kva_l2_node_stats, state)},
    {"kvact_l2_node_failed_seconds", "gauge", "Seconds since the server left ok (0 while ok).",
     NF_F64, offsetof(kva_l2_node_stats, failed_s)},
    {"kvact_l2_node_slots", "gauge",
     "Hash slots the tier's slot map gives the server (a Redis Cluster; else 0).", NF_U32,
     offsetof(kva_l2_node_stats, slots)},
    {"kvact_l2_node_outages_total", "counter", "Times the server left ok.", NF_U64,
     offsetof(kva_l2_node_stats, outages)},
    {"kvact_l2_node_failed_commands_total", "counter",
     "Commands that failed because the server was down.", NF_U64,
     offsetof(kva_l2_node_stats, failed_cmds)},
};

static void put_node_value(page *p, const node_field *f, const kva_l2_node_stats *n) {
  const char *at = (const char *)n + f->off;
  int i;
  uint32_t u;
  double d;
  switch (f->kind) {
  case NF_INT:
    memcpy(&i, at, sizeof(i));
    page_put(p, " %d\n", i);
    return;
  case NF_U32:
    memcpy(&u, at, sizeof(u));
    page_put(p, " %u\n", u);
    return;
  case NF_F64:
    memcpy(&d, at, sizeof(d));
    page_put(p, " %.9g\n", d);
    return;
  default:
    page_put(p, " %lu\n", (unsigned long)page_u64_at(n, f->off));
  }
}

static void put_node_field(page *p, const node_field *f, const metrics_l2 *v) {
  page_family(p, f->name, f->type, f->help);
  for (uint32_t i = 0; i < v->n; i++)
    for (size_t k = 0; k < v->t[i].nnodes; k++) {
      put_tier_labels(p, f->name, &v->t[i]);
      page_put(p, ",node=\"");
      page_label_value(p, v->t[i].nodes[k].addr);
      page_put(p, "\"}");
      put_node_value(p, f, &v->t[i].nodes[k]);
    }
}

static void put_nodes(page *p, const metrics_l2 *v) {
  for (size_t k = 0; k < COUNT(node_fields); k++) put_node_field(p, &node_fields[k], v);
  const char *age = "kvact_l2_tier_map_age_seconds";
  page_family(p, age, "gauge", "Seconds since the tier last read its slot map (a Redis Cluster).");
  for (uint32_t i = 0; i < v->n; i++) {
    if (!v->t[i].nodes || v->t[i].map_age_s < 0) continue;
    put_tier_labels(p, age, &v->t[i]);
    page_put(p, "} %.9g\n", v->t[i].map_age_s);
  }
}

void metrics_l2_put(page *p, const metrics_l2 *v) {
  put_traffic(p, v);
  put_keys(p, v);
  put_nodes(p, v);
}
