/*
 * absent.c — absent.h's per-tier marks: an exact set of key hashes
 * (open addressing, linear probing, backward-shift deletion) and, past
 * its bound, a sticky overflow bitmap. Every entry point takes the mutex
 * once; only init allocates.
 */
#include "l2/absent.h"

#include <stdlib.h>
#include <string.h>

#define FILTER_WORDS (L2_ABSENT_FILTER_BITS / 64u)
/* What a key hashing to 0 is kept as: 0 marks an empty slot. */
#define ZERO_HASH 0x9e3779b97f4a7c15ull

/* k's hash as the table keeps it: never 0. */
static uint64_t absent_hash(const kva_key *k) {
  uint64_t h = kva_key_hash(k);
  return h ? h : ZERO_HASH;
}

/* The slot holding h, or the empty slot where its probe ends. Ends: the
 * set holds at most cap keys in >= 2 x cap slots, so one slot is empty. */
static size_t probe(const l2_absent *a, uint64_t h) {
  size_t i = (size_t)h & a->mask;
  while (a->slots[i] && a->slots[i] != h) i = (i + 1) & a->mask;
  return i;
}

/* h's overflow bit: the hash's top 16 bits, not the table's low ones. */
static uint64_t *bucket(const l2_absent *a, uint64_t h, uint64_t *bit) {
  uint32_t b = (uint32_t)(h >> 48);
  *bit = 1ull << (b & 63u);
  return &a->filter[b >> 6];
}

static bool has_locked(const l2_absent *a, uint64_t h) {
  uint64_t bit;
  if (a->overflow_now && (*bucket(a, h, &bit) & bit)) return true;
  return a->n && a->slots[probe(a, h)] == h;
}

int l2_absent_init(l2_absent *a, size_t cap) {
  *a = (l2_absent){0};
  if (!cap) cap = L2_ABSENT_DEFAULT_CAP;
  if (cap > SIZE_MAX / 32 - FILTER_WORDS) return KVA_ENOMEM;
  size_t slots = 2;
  while (slots < 2 * cap) slots <<= 1;
  uint64_t *mem = malloc((slots + FILTER_WORDS) * sizeof *mem);
  if (!mem) return KVA_ENOMEM;
  /* written now, not calloc'd: the pages fault in here, not on a mark */
  memset(mem, 0, (slots + FILTER_WORDS) * sizeof *mem);
  if (pthread_mutex_init(&a->mu, NULL)) {
    free(mem);
    return KVA_ENOMEM;
  }
  a->slots = mem;
  a->filter = mem + slots;
  a->mask = slots - 1;
  a->cap = cap;
  return KVA_OK;
}

void l2_absent_destroy(l2_absent *a) {
  if (!a->slots) return;
  pthread_mutex_destroy(&a->mu);
  free(a->slots);
  *a = (l2_absent){0};
}

/* The exact set is full: h's bucket is set for good (until a reset).
 * Whether this is the first overflow since the last reset, to warn. */
static bool overflow(l2_absent *a, uint64_t h) {
  uint64_t bit, *w = bucket(a, h, &bit);
  if (!(*w & bit)) a->overflow_now++;
  *w |= bit;
  a->overflowed++;
  if (a->warned) return false;
  a->warned = true;
  return true;
}

/* Whether to warn that overflow started. */
static bool mark_locked(l2_absent *a, uint64_t h) {
  size_t i = probe(a, h);
  a->marks++;
  if (a->slots[i] == h) return false;
  if (a->n == a->cap) return overflow(a, h);
  a->slots[i] = h;
  a->n++;
  return false;
}

void l2_absent_mark(l2_absent *a, const kva_key *k) {
  l2_absent_mark_many(a, k, 1, NULL);
}

/* Empties slot i, then moves back each entry of the cluster after it
 * that may take the hole: one whose home is not in (hole, j] cyclically,
 * i.e. whose distance from its home is at least the hole's from it. So
 * every probe still reaches its entry without tombstones. */
static void remove_at(l2_absent *a, size_t i) {
  for (size_t j = (i + 1) & a->mask; a->slots[j]; j = (j + 1) & a->mask) {
    size_t home = (size_t)a->slots[j] & a->mask;
    if (((j - home) & a->mask) < ((j - i) & a->mask)) continue;
    a->slots[i] = a->slots[j];
    i = j;
  }
  a->slots[i] = 0;
  a->n--;
}

void l2_absent_clear(l2_absent *a, const kva_key *k) {
  l2_absent_clear_many(a, k, 1, NULL);
}

void l2_absent_mark_many(l2_absent *a, const kva_key *keys, size_t n, const uint8_t *skip) {
  bool warn = false;
  pthread_mutex_lock(&a->mu);
  for (size_t i = 0; i < n; i++)
    if (!skip || !kva_bit_get(skip, i)) warn |= mark_locked(a, absent_hash(&keys[i]));
  size_t cap = a->cap;
  pthread_mutex_unlock(&a->mu);
  if (warn)
    kva_log(KVA_LOG_WARN,
            "%s: more than %zu keys marked absent: further marks go to the overflow filter; "
            "the keys of its buckets miss in this tier until it is reset",
            a->name ? a->name : "l2", cap);
}

void l2_absent_clear_many(l2_absent *a, const kva_key *keys, size_t n, const uint8_t *only) {
  pthread_mutex_lock(&a->mu);
  /* nothing marked (the usual case): no key is hashed */
  for (size_t i = 0; a->n && i < n; i++) {
    if (only && !kva_bit_get(only, i)) continue;
    uint64_t h = absent_hash(&keys[i]);
    size_t j = probe(a, h);
    if (a->slots[j] == h) {
      remove_at(a, j);
      a->clears++;
    }
  }
  pthread_mutex_unlock(&a->mu);
}

size_t l2_absent_filter(l2_absent *a, const kva_key *keys, size_t n, uint8_t *bits, kva_key *out) {
  size_t m = 0;
  pthread_mutex_lock(&a->mu);
  /* nothing marked (the usual case): no key is hashed */
  for (size_t i = 0; (a->n || a->overflow_now) && i < n; i++) {
    if (!kva_bit_get(bits, i) || !has_locked(a, absent_hash(&keys[i]))) continue;
    bits[i >> 3] = (uint8_t)(bits[i >> 3] & ~(1u << (i & 7)));
    if (out) out[m] = keys[i];
    m++;
  }
  a->filtered += m;
  pthread_mutex_unlock(&a->mu);
  return m;
}

bool l2_absent_any(l2_absent *a) {
  pthread_mutex_lock(&a->mu);
  bool any = a->n || a->overflow_now;
  pthread_mutex_unlock(&a->mu);
  return any;
}

size_t l2_absent_settle_lookup(l2_absent *a, kva_actor *tier, const kva_key *keys, size_t n,
                               uint8_t *bits) {
  if (!l2_absent_any(a)) return 0;
  enum { CHUNK = 64 }; /* keys per filter call: a multiple of 8, so bits + off / 8 */
  kva_key out[CHUNK];
  size_t total = 0;
  for (size_t off = 0; off < n; off += CHUNK) {
    size_t k = n - off < CHUNK ? n - off : CHUNK;
    size_t m = l2_absent_filter(a, keys + off, k, bits + off / 8, out);
    if (m) kva_send(tier, KVA_L2_UNLOCK, out, (uint32_t)(m * sizeof(*out)), NULL, 0);
    total += m;
  }
  return total;
}

bool l2_absent_has(l2_absent *a, const kva_key *k) {
  uint64_t h = absent_hash(k);
  pthread_mutex_lock(&a->mu);
  bool r = has_locked(a, h);
  pthread_mutex_unlock(&a->mu);
  return r;
}

void l2_absent_reset_overflow(l2_absent *a) {
  pthread_mutex_lock(&a->mu);
  memset(a->filter, 0, FILTER_WORDS * sizeof *a->filter);
  a->overflow_now = 0;
  a->warned = false;
  pthread_mutex_unlock(&a->mu);
}

void l2_absent_stats_get(l2_absent *a, l2_absent_stats *out) {
  pthread_mutex_lock(&a->mu);
  *out = (l2_absent_stats){.marked_now = a->n,
                           .marks = a->marks,
                           .clears = a->clears,
                           .filtered = a->filtered,
                           .overflow_now = a->overflow_now,
                           .overflowed = a->overflowed};
  pthread_mutex_unlock(&a->mu);
}
