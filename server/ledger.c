/*
 * ledger.c — the per-connection lock ledger (ledger.h).
 */
#include <stdlib.h>
#include <string.h>

#include "server/ledger.h"

void ledger_free(ledger *l) {
  free(l->e);
  *l = (ledger){0};
}

static size_t home(const ledger *l, const kva_key *k) {
  return (size_t)kva_key_hash(k) & (l->cap - 1);
}

ledger_entry *ledger_find(ledger *l, const kva_key *k) {
  if (!l->cap) return NULL;
  for (size_t i = home(l, k);; i = (i + 1) & (l->cap - 1)) {
    if (!l->e[i].used) return NULL;
    if (kva_key_equal(&l->e[i].key, k)) return &l->e[i];
  }
}

static bool grow(ledger *l) {
  size_t cap = l->cap ? l->cap * 2 : 64;
  ledger_entry *e = calloc(cap, sizeof(*e));
  if (!e) return false;
  ledger old = *l;
  l->e = e;
  l->cap = cap;
  for (size_t i = 0; i < old.cap; i++) {
    if (!old.e[i].used) continue;
    size_t j = home(l, &old.e[i].key);
    while (e[j].used) j = (j + 1) & (cap - 1);
    e[j] = old.e[i];
  }
  free(old.e);
  return true;
}

ledger_entry *ledger_get(ledger *l, const kva_key *k) {
  ledger_entry *e = ledger_find(l, k);
  if (e) return e;
  if ((l->n + 1) * 4 > l->cap * 3 && !grow(l)) return NULL; /* load <= 3/4 */
  size_t i = home(l, k);
  while (l->e[i].used) i = (i + 1) & (l->cap - 1);
  l->e[i] = (ledger_entry){.key = *k, .used = true};
  l->n++;
  return &l->e[i];
}

/* Backward-shift deletion: later entries of the probe run move up. */
static void drop(ledger *l, ledger_entry *e) {
  size_t hole = (size_t)(e - l->e), mask = l->cap - 1;
  l->e[hole].used = false;
  l->n--;
  for (size_t i = (hole + 1) & mask; l->e[i].used; i = (i + 1) & mask) {
    size_t h = home(l, &l->e[i].key);
    /* the entry at i may fill the hole if its home is not in (hole, i] */
    if (((i - h) & mask) >= ((i - hole) & mask)) {
      l->e[hole] = l->e[i];
      l->e[i].used = false;
      hole = i;
    }
  }
}

static void settle(ledger *l, ledger_entry *e) {
  if (!e->write_id && !e->reads && !e->pins) drop(l, e);
}

void ledger_set_write(ledger *l, ledger_entry *e, uint64_t id) {
  l->writes += (id != 0) - (e->write_id != 0);
  e->write_id = id;
  settle(l, e);
}

void ledger_add_reads(ledger *l, ledger_entry *e, int64_t delta) {
  if (delta < 0 && (uint64_t)-delta > e->reads) delta = -(int64_t)e->reads;
  e->reads = (uint32_t)((int64_t)e->reads + delta);
  l->reads = (uint64_t)((int64_t)l->reads + delta);
  settle(l, e);
}

void ledger_add_pins(ledger *l, ledger_entry *e, int64_t delta) {
  if (delta < 0 && (uint64_t)-delta > e->pins) delta = -(int64_t)e->pins;
  e->pins = (uint32_t)((int64_t)e->pins + delta);
  l->pins = (uint64_t)((int64_t)l->pins + delta);
  settle(l, e);
}

ledger_entry *ledger_next(ledger *l, size_t *i) {
  for (; *i < l->cap; (*i)++)
    if (l->e[*i].used) return &l->e[(*i)++];
  return NULL;
}
