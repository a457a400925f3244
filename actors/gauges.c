/*
 * gauges.c — an actor's label and gauges in its stats slot (gauges.h).
 *
 * The label and the gauges' names are two strings a reader in another
 * process copies while their actor may rewrite them, so they sit under a
 * sequence lock: the writer makes label_seq odd, writes, makes it even
 * again; a reader that saw the same even value before and after its copy
 * has a whole one. A gauge is one 64-bit word: a relaxed atomic store,
 * read torn-free with no order to the other fields (nor needed).
 */
#include "actors/gauges.h"

#include <ck_pr.h>
#include <stdio.h>
#include <string.h>

#include "actors/runtime_internal.h"

#define READ_TRIES 64

void actor_stats_label(kva_actor *self, const char *label, const char *gauge_names) {
  stats_slot *st = self->stats;
  uint32_t seq = st->label_seq; /* only this actor writes it */
  ck_pr_store_32(&st->label_seq, seq + 1);
  /* store fence: the odd value is seen before any byte of the strings changes */
  ck_pr_fence_store();
  snprintf(st->label, sizeof(st->label), "%s", label ? label : "");
  snprintf(st->gauge_names, sizeof(st->gauge_names), "%s", gauge_names ? gauge_names : "");
  /* store fence: the strings are whole before the even value says so */
  ck_pr_fence_store();
  ck_pr_store_32(&st->label_seq, seq + 2);
}

void actor_stats_gauge(kva_actor *self, unsigned i, uint64_t v) {
  /* relaxed: each gauge stands alone; atomic only so no reader sees it torn */
  if (i < KVA_STATS_GAUGES) ck_pr_store_64(&self->stats->gauge[i], v);
}

bool stats_label_read(const stats_slot *slot, stats_label_copy *out) {
  uint32_t *seqp = (uint32_t *)&slot->label_seq;
  for (int t = 0; t < READ_TRIES; t++) {
    uint32_t before = ck_pr_load_32(seqp);
    /* load fence: the copy is read after the value it is checked against */
    ck_pr_fence_load();
    memcpy(out->label, slot->label, sizeof(out->label));
    memcpy(out->gauge_names, slot->gauge_names, sizeof(out->gauge_names));
    /* load fence: the copy is read before the value that vouches for it */
    ck_pr_fence_load();
    if ((before & 1) == 0 && ck_pr_load_32(seqp) == before) {
      out->label[sizeof(out->label) - 1] = '\0';
      out->gauge_names[sizeof(out->gauge_names) - 1] = '\0';
      return true;
    }
  }
  out->label[0] = out->gauge_names[0] = '\0';
  return false;
}

/* The adapter kit's (kvact.h): the same, for actors built against kvact.h
 * alone. */
void kva_actor_label(kva_actor *self, const char *label, const char *gauge_names) {
  if (self && self->stats) actor_stats_label(self, label, gauge_names);
}

void kva_actor_gauge(kva_actor *self, unsigned i, uint64_t v) {
  if (self && self->stats) actor_stats_gauge(self, i, v);
}
