/*
 * gauges.h — an actor's own numbers in its stats slot (actors/stats.h), for
 * kvinspect: an instance label ("pid 1234 uid 0") that tells apart actors
 * of one behaviour, and up to KVA_STATS_GAUGES gauges with names. Gauge 0
 * counts up (kvinspect shows its rate per second as well); the others are
 * levels. Internal to kvact (not in kvact.h).
 *
 * Only the actor itself calls these, from its receive: its slot has one
 * writer, so a gauge is one relaxed store and costs nothing on a hot path.
 */
#ifndef KVA_ACTORS_GAUGES_H
#define KVA_ACTORS_GAUGES_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/stats.h"
#include "kvact.h"

/* Sets self's label and its gauges' names, separated by spaces (e.g.
 * "requests write_locks read_locks pins"); both are cut to fit the slot. */
void actor_stats_label(kva_actor *self, const char *label, const char *gauge_names);
/* Sets gauge i (< KVA_STATS_GAUGES; others are ignored) of self to v. */
void actor_stats_gauge(kva_actor *self, unsigned i, uint64_t v);

/* A reader's copy (kvinspect, any process) of a slot's label and gauges'
 * names, each ended within its array. */
typedef struct stats_label_copy {
  char label[KVA_STATS_LABEL];
  char gauge_names[KVA_STATS_GAUGE_NAMES];
} stats_label_copy;

/* Copies them out of slot; false, with both "", when the writer kept
 * changing them (or died while writing) over a few tries. */
bool stats_label_read(const stats_slot *slot, stats_label_copy *out);

#endif
