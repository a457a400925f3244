/*
 * sim_prefix.c — which of the chunks an L2 tier holds at the end of a run
 * could be used by prefix-only loading.
 *
 * The engines note every turn's chunk keys (a conversation's whole history,
 * in order), so each key seen is recorded once with the key before it in
 * its conversation: a forest of chains (conversations that share a system
 * prompt share its chunks). At the end, a chunk an L2 tier holds is usable
 * when every chunk before it in its chain is held by that same tier, so the
 * tier alone can serve the whole prefix; a held chunk past a missing one is
 * dead weight. A key is always recorded after its parent, so one
 * pass in recording order decides every key after its parent.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/kvbench/sim.h"

#define REG_MAX (1u << 20) /* keys recorded at most; later ones are not */

typedef struct reg_entry {
  kva_key key;
  int32_t parent; /* index of the key before it in its chain, -1 for chunk 0 */
} reg_entry;

static uint64_t key_word(const kva_key *k) {
  uint64_t h;
  memcpy(&h, k->hash, sizeof h); /* chunk keys are xxh3-128: any 8 bytes spread */
  return h;
}

/* Doubles the open-addressing table and re-inserts every entry. */
static int reg_grow_table(sim_chains *c) {
  uint32_t cap = c->tcap ? 2 * c->tcap : 4096;
  int32_t *t = malloc(cap * sizeof *t);
  if (!t) return -1;
  memset(t, 0xff, cap * sizeof *t);
  for (uint32_t i = 0; i < c->n; i++) {
    uint32_t h = (uint32_t)key_word(&c->e[i].key) & (cap - 1);
    while (t[h] >= 0) h = (h + 1) & (cap - 1);
    t[h] = (int32_t)i;
  }
  free(c->table);
  c->table = t;
  c->tcap = cap;
  return 0;
}

/* The index of k, recorded with parent when new; -1 when out of room. */
static int32_t reg_find_add(sim_chains *c, const kva_key *k, int32_t parent) {
  if (2 * (c->n + 1) > c->tcap && reg_grow_table(c)) return -1;
  uint32_t h = (uint32_t)key_word(k) & (c->tcap - 1);
  for (; c->table[h] >= 0; h = (h + 1) & (c->tcap - 1))
    if (memcmp(&c->e[c->table[h]].key, k, sizeof *k) == 0) return c->table[h];
  if (c->n == REG_MAX) return -1;
  if (c->n == c->cap) {
    uint32_t cap = c->cap ? 2 * c->cap : 4096;
    reg_entry *e = realloc(c->e, cap * sizeof *e);
    if (!e) return -1;
    c->e = e;
    c->cap = cap;
  }
  c->e[c->n] = (reg_entry){.key = *k, .parent = parent};
  c->table[h] = (int32_t)c->n;
  return (int32_t)c->n++;
}

void sim_chains_note(sim_chains *c, const kva_key *keys, size_t n) {
  pthread_mutex_lock(&c->mu);
  int32_t parent = -1;
  for (size_t i = 0; i < n && (parent >= 0 || i == 0); i++)
    parent = reg_find_add(c, &keys[i], parent);
  pthread_mutex_unlock(&c->mu);
}

/* Counts the chunks `tier` holds and those of them usable as a prefix. */
static int count_tier(sim_chains *c, kva_storage *s, const char *tier, uint8_t *ok,
                      uint64_t *usable, uint64_t *resident) {
  for (uint32_t i = 0; i < c->n; i++) {
    int held = kva_l2_contains(s, tier, &c->e[i].key);
    if (held < 0) return held;
    int32_t p = c->e[i].parent;
    ok[i] = held && (p < 0 || ok[p]);
    *resident += (uint64_t)held;
    *usable += ok[i];
  }
  return 0;
}

int sim_chains_usable(sim_chains *c, kva_storage *s, const sim_stats *st, uint64_t *usable,
                      uint64_t *resident) {
  *usable = *resident = 0;
  pthread_mutex_lock(&c->mu);
  uint8_t *ok = malloc(c->n ? c->n : 1);
  int rc = ok ? 0 : -1;
  for (uint32_t t = 1; rc == 0 && t < st->ntiers; t++) /* tier 0 is L1 */
    rc = count_tier(c, s, st->tier_name[t], ok, usable, resident);
  pthread_mutex_unlock(&c->mu);
  free(ok);
  return rc;
}

void sim_chains_free(sim_chains *c) {
  free(c->e);
  free(c->table);
  c->e = NULL;
  c->table = NULL;
  c->n = c->cap = c->tcap = 0;
}
