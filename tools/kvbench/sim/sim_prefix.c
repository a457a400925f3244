/*
 * sim_prefix.c — which of the chunks an L2 tier holds at the end of a run
 * could be used by prefix-only loading.
 *
 * The engines note every turn's chunk keys (a conversation's whole history,
 * in order), so each key seen is recorded once with the key before it in
 * its conversation: a forest of chains (conversations that share a system
 * prompt share its chunks). At the end, a chunk an L2 tier holds is usable
 * when every chunk before it in its chain can be loaded too, from L1 or any
 * L2 tier (prefix-only loading: a held chunk past a missing one is dead
 * weight), and usable by the tier alone when that tier holds them all
 * (what is left once L1 is gone, as after a restart).
 */
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "tools/kvbench/sim/sim.h"

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
    size_t cap = c->cap;
    if (!ARRAY_GROW(c->e, &cap, (size_t)c->n + 1)) return -1;
    c->cap = cap > REG_MAX ? REG_MAX : (uint32_t)cap; /* c->n stops at REG_MAX */
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

/* held[i] = whether L1 holds key i (kva_lookup of that key alone). */
static void held_l1(sim_chains *c, kva_storage *s, uint8_t *held) {
  for (uint32_t i = 0; i < c->n; i++) {
    kva_tier_hits th = {0};
    held[i] = kva_lookup(s, &c->e[i].key, 1, 0, &th) == KVA_OK && th.tier[0].hits == 1;
  }
}

/* held[i] = whether `tier` holds key i; 0, or the first error. */
static int held_tier(sim_chains *c, kva_storage *s, const char *tier, uint8_t *held) {
  for (uint32_t i = 0; i < c->n; i++) {
    int rc = kva_l2_contains(s, tier, &c->e[i].key);
    if (rc < 0) return rc;
    held[i] = (uint8_t)rc;
  }
  return 0;
}

/* ok[i] = every chunk of key i's chain up to it is held (held[]): keys
 * come after their parents, so one pass in recording order decides. */
static void prefix_ok(const sim_chains *c, const uint8_t *held, uint8_t *ok) {
  for (uint32_t i = 0; i < c->n; i++) {
    int32_t p = c->e[i].parent;
    ok[i] = held[i] && (p < 0 || ok[p]);
  }
}

/* Counts one tier's chunks (held) and those usable: by the tier alone
 * (alone) and with the chunks before it from any tier (any). */
static void count_tier(const sim_chains *c, const uint8_t *held, const uint8_t *alone,
                       const uint8_t *any, sim_prefix_counts *out) {
  for (uint32_t i = 0; i < c->n; i++) {
    if (!held[i]) continue;
    int32_t p = c->e[i].parent;
    out->resident++;
    out->usable += p < 0 || any[p];
    out->usable_alone += alone[i];
  }
}

int sim_chains_usable(sim_chains *c, kva_storage *s, const sim_stats *st, sim_prefix_counts *out) {
  *out = (sim_prefix_counts){0};
  pthread_mutex_lock(&c->mu);
  size_t n = c->n ? c->n : 1, ntiers = st->ntiers > 1 ? st->ntiers - 1 : 0;
  uint8_t *held = calloc((ntiers + 3) * n, 1); /* per L2 tier, then anywhere, alone, any */
  uint8_t *where = held + ntiers * n, *alone = where + n, *any = alone + n;
  int rc = held ? 0 : -1;
  if (rc == 0) held_l1(c, s, where);
  for (size_t t = 0; rc == 0 && t < ntiers; t++) {
    rc = held_tier(c, s, st->tier_name[t + 1], held + t * n); /* tier_name[0] is L1 */
    for (uint32_t i = 0; i < c->n; i++) where[i] |= held[t * n + i];
  }
  if (rc == 0) prefix_ok(c, where, any);
  for (size_t t = 0; rc == 0 && t < ntiers; t++) {
    prefix_ok(c, held + t * n, alone);
    count_tier(c, held + t * n, alone, any, out);
  }
  pthread_mutex_unlock(&c->mu);
  free(held);
  return rc;
}

void sim_chains_free(sim_chains *c) {
  free(c->e);
  free(c->table);
  c->e = NULL;
  c->table = NULL;
  c->n = c->cap = c->tcap = 0;
}
