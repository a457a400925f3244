/*
 * l2_chains.h — chains of chunks for the L2 eviction suites: a chain's
 * chunk i is only useful while chunks 0..i-1 can be loaded too, so a tier
 * must evict a chain from its end. These helpers drive one tier the way
 * the prefetch and store controllers do for a serving engine's turn, and
 * check what it kept.
 */
#ifndef KVA_TESTS_L2_CHAINS_H
#define KVA_TESTS_L2_CHAINS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define L2_CHAIN_MAX 64u /* chunks of one chain at most */

/* The id (fixture_key) of chunk i of chain c. */
static inline uint64_t l2_chain_id(uint64_t c, size_t i) {
  return c * 1000 + i;
}

/* Which of chain c's first n chunks the tier holds (bit i of *held), from
 * one LOOKUP_AND_LOCK of them in order, unlocked at once; returns how many
 * of the first chunks it holds in a row (the usable prefix). */
size_t l2_chain_prefix(kva_storage *s, uint32_t tier, uint64_t c, size_t n, uint64_t *held);
/* A serving engine's turn over chain c of n chunks: the chunks are looked
 * up in order (and unlocked), the held prefix counts as hits, and the rest
 * is stored after it in STOREs of `batch` keys each (version 0 bytes of
 * layout l). Returns the hits. */
size_t l2_chain_turn(kva_storage *s, uint32_t tier, uint64_t c, size_t n, size_t batch,
                     const kva_layout *l);
/* Stores chunks [from, to) of chain c in one STORE. */
void l2_chain_store(kva_storage *s, uint32_t tier, uint64_t c, size_t from, size_t to,
                    const kva_layout *l);
/* Asserts that what the tier holds of chain c's first n chunks is a prefix
 * of the chain (no chunk held past a missing one); returns its length. */
size_t l2_chain_assert_prefix(kva_storage *s, uint32_t tier, uint64_t c, size_t n);
/* Asserts that chains 0..n-1, of lengths len[], each keep a prefix of
 * want[c] chunks in the tier. */
void l2_chain_expect_prefixes(kva_storage *s, uint32_t tier, const size_t *len, const size_t *want,
                              size_t n);
/* A tier smaller than the working set: `chains` chains grow by 1 to 3
 * chunks a turn (up to max_len, then start over as a new chain), turns
 * taken by a seeded random chain, stored in STOREs of 4; after every turn
 * every chain the tier holds must be a prefix. Returns the chunks held
 * at the end. */
size_t l2_chains_scenario(kva_storage *s, uint32_t tier, uint32_t chains, size_t max_len,
                          uint32_t turns, uint64_t seed, const kva_layout *l);

#endif
