/*
 * metrics_l2.c — the L2 families of kvactd's Prometheus page
 * (metrics_page.h): per tier, what moved through it and the adapter's own
 * answer (kva_l2_get_tier_stats), and the load plan's view of it.
 *
 * Every tier is read (metrics_l2_read) before a family is written
 * (metrics_l2_put), as the page's other parts are. A part a source cannot
 * answer is left out: a tier's adapter fields when its adapter fails.
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
} tier_view;

struct metrics_l2 {
  uint32_t n;
  tier_view t[L2_MAX_TIERS];
};

/* ---- reading -------------------------------------------------------------- */

/* The tiers' names and counts are fixed once the runtime started. */
metrics_l2 *metrics_l2_read(kva_storage *s) {
  metrics_l2 *v = calloc(1, sizeof(*v));
  if (!v) return NULL;
  v->n = s->tiers.n;
  for (uint32_t i = 0; i < v->n; i++) {
    tier_view *t = &v->t[i];
    t->name = s->tiers.t[i].name;
    t->rc = kva_l2_get_tier_stats(s, t->name, &t->st);
  }
  return v;
}

void metrics_l2_free(metrics_l2 *v) {
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

void metrics_l2_put(page *p, const metrics_l2 *v) {
  put_traffic(p, v);
}
