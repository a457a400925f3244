/*
 * absent.h — per-tier "absent" marks: the keys whose newest version did
 * not reach an L2 tier, which a lookup in that tier must treat as misses.
 *
 * Why: when a key is rewritten in L1 and the new version does not reach a
 * tier (the tier was bypassed, the node holding the key was down, the
 * store failed, the object was evicted before the store locked it), the
 * tier may still hold an OLDER version of the key, and a later read would
 * serve it. The rule: the key is marked absent in that tier until a store
 * of it to that tier succeeds; lookups in that tier filter marked keys
 * out (l2_absent_filter) so they count as misses.
 *
 * One l2_absent per tier, embedded by value. The store controller marks
 * and clears, the prefetch controller filters, on different threads: one
 * pthread mutex per l2_absent, taken once per call (per request, not per
 * key). Memory is allocated once, by l2_absent_init; mark, clear, filter
 * and has neither allocate nor make a syscall (but for the one warning
 * logged when overflow starts, below).
 *
 * The exact set: an open-addressing table of 64-bit kva_key_hash values
 * (a hash of 0 is kept as a non-zero sentinel, 0 meaning an empty slot),
 * its size the power of two >= 2 x cap, linear probing, backward-shift
 * deletion (no tombstones). Keys are told apart by their hash alone:
 *  - a key that shares a marked key's hash is reported absent too: a miss
 *    in that tier, the safe direction, never an older version served;
 *  - the one unsafe case is a clear of such a key, which clears the marked
 *    one as well. Its odds are marked_now / 2^64 per clear (XXH3): below
 *    2^-46 at the default cap, the price of 8 bytes per key instead of a
 *    whole kva_key.
 *
 * Past the bound: once the exact set holds cap keys, a mark of any other
 * key sets one bit of an overflow filter, a fixed bitmap of 65536 bits
 * indexed by the hash's top 16 bits (the table indexes by its low bits).
 * A key whose bit is set is absent, cleared or not, until
 * l2_absent_reset_overflow. So past the bound:
 *  - the tier keeps serving every key outside the marked buckets;
 *  - keys in a marked bucket (overflow_now / 65536 of all keys, at most
 *    overflowed / 65536) miss in that tier: a lost hit, never a wrong
 *    version, and never a marked key reported present (no false negative);
 *  - memory stays what init allocated: 8 bytes per slot of the table
 *    (16 x cap bytes when cap is a power of two, as the default is; under
 *    32 x cap otherwise) + 8 KiB of filter.
 * A warning is logged (kva_log, KVA_LOG_WARN) once when overflow starts,
 * and again only after a reset. Marks go to the exact set again as soon
 * as clears make room in it.
 */
#ifndef KVA_L2_ABSENT_H
#define KVA_L2_ABSENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define L2_ABSENT_DEFAULT_CAP 262144u /* exact keys kept when init gets cap = 0 */
#define L2_ABSENT_FILTER_BITS 65536u  /* the overflow filter: 8 KiB */

typedef struct l2_absent {
  pthread_mutex_t mu;
  uint64_t *slots;        /* mask + 1 hashes, 0 = empty; allocated with filter */
  uint64_t *filter;       /* L2_ABSENT_FILTER_BITS bits: the overflow buckets */
  size_t mask;            /* slots - 1 (slots a power of two >= 2 x cap) */
  size_t cap;             /* keys the exact set holds at most */
  size_t n;               /* keys in the exact set now */
  uint64_t marks, clears; /* keys marked; marks removed by a clear */
  uint64_t filtered;      /* bits l2_absent_filter cleared */
  uint64_t overflow_now;  /* filter bits set now */
  uint64_t overflowed;    /* marks that went to the filter, since init */
  bool warned;            /* overflow warning logged since the last reset */
  const char *name;       /* the tier's, for the warning; the owner sets it after init */
} l2_absent;

typedef struct l2_absent_stats {
  uint64_t marked_now;   /* keys in the exact set */
  uint64_t marks;        /* keys marked (l2_absent_mark calls), since init */
  uint64_t clears;       /* marks of the exact set a clear removed, since init */
  uint64_t filtered;     /* lookup hits l2_absent_filter turned into misses */
  uint64_t overflow_now; /* overflow filter bits set (buckets of keys missing) */
  uint64_t overflowed;   /* marks that went to the filter, since init */
} l2_absent_stats;

/* cap: the exact keys kept (0 = L2_ABSENT_DEFAULT_CAP). KVA_OK, or
 * KVA_ENOMEM (a left as destroy takes it). name starts NULL ("l2"). */
int l2_absent_init(l2_absent *a, size_t cap);
/* Frees what init allocated; harmless after a failed init. */
void l2_absent_destroy(l2_absent *a);
/* The newest version of k did not reach the tier. */
void l2_absent_mark(l2_absent *a, const kva_key *k);
/* A store of k to the tier succeeded: k's mark goes (its overflow bucket,
 * if set, stays). */
void l2_absent_clear(l2_absent *a, const kva_key *k);
/* The same for many keys, under one lock: every keys[i] whose bit in
 * skip is clear (skip NULL: every key) is marked; every keys[i] whose bit
 * in only is set (only NULL: every key) is cleared. */
void l2_absent_mark_many(l2_absent *a, const kva_key *keys, size_t n, const uint8_t *skip);
void l2_absent_clear_many(l2_absent *a, const kva_key *keys, size_t n, const uint8_t *only);
/* Clears bit i of bits (kva_bit_* of kvact.h) for each keys[i] marked
 * absent and whose bit is set; writes those indices' keys to out[] (may be
 * NULL; room for n) and returns how many. One lock per call. */
size_t l2_absent_filter(l2_absent *a, const kva_key *keys, size_t n, uint8_t *bits, kva_key *out);
/* Whether any key is marked (exact set or filter). */
bool l2_absent_any(l2_absent *a);
/* A LOOKUP_AND_LOCK of keys[0, n) on the tier actor `tier` answered
 * `bits`: the marked keys found there become misses and their locks go
 * back to the tier (a KVA_L2_UNLOCK per 64 keys, only when some were
 * marked). Returns how many. No allocation: the keys are gathered on the
 * stack, 64 at a time. */
size_t l2_absent_settle_lookup(l2_absent *a, kva_actor *tier, const kva_key *keys, size_t n,
                               uint8_t *bits);
/* Whether k is absent: marked in the exact set, or in an overflow bucket. */
bool l2_absent_has(l2_absent *a, const kva_key *k);
/* Empties the overflow filter. Call it only when the tier is known empty
 * of old versions (after a tier-wide clear); otherwise never: a bucket
 * cleared early would serve the older versions its keys stand for. */
void l2_absent_reset_overflow(l2_absent *a);
void l2_absent_stats_get(l2_absent *a, l2_absent_stats *out);

#endif
