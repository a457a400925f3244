/*
 * l2_chains.c — chains of chunks for the L2 eviction suites (l2_chains.h).
 */
#include "tests/support/l2_chains.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

static void chain_ids(uint64_t c, size_t from, size_t to, uint64_t *ids) {
  for (size_t i = from; i < to; i++) ids[i - from] = l2_chain_id(c, i);
}

size_t l2_chain_prefix(kva_storage *s, uint32_t tier, uint64_t c, size_t n, uint64_t *held) {
  ck_assert_uint_le(n, L2_CHAIN_MAX);
  *held = 0;
  if (n == 0) return 0;
  uint64_t ids[L2_CHAIN_MAX], found[L2_CHAIN_MAX];
  kva_key keys[L2_CHAIN_MAX];
  uint8_t bits[L2_CHAIN_MAX / 8] = {0};
  chain_ids(c, 0, n, ids);
  for (size_t i = 0; i < n; i++) keys[i] = fixture_key(ids[i]);
  kva_l2_req r = {.keys = keys, .n = n, .bits = bits};
  ck_assert_int_eq(l2_ask(s, tier, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_OK);
  size_t nfound = 0, prefix = 0;
  for (size_t i = 0; i < n; i++) {
    if (!kva_bit_get(bits, i)) continue;
    *held |= 1ull << i;
    found[nfound++] = ids[i];
  }
  while (prefix < n && kva_bit_get(bits, prefix)) prefix++;
  if (nfound) l2_unlock(s, tier, found, nfound);
  return prefix;
}

void l2_chain_store(kva_storage *s, uint32_t tier, uint64_t c, size_t from, size_t to,
                    const kva_layout *l) {
  uint64_t ids[L2_CHAIN_MAX];
  ck_assert_uint_le(to, L2_CHAIN_MAX);
  chain_ids(c, from, to, ids);
  l2_seed(s, tier, ids, to - from, l, 0);
}

size_t l2_chain_turn(kva_storage *s, uint32_t tier, uint64_t c, size_t n, size_t batch,
                     const kva_layout *l) {
  uint64_t held;
  size_t hits = l2_chain_prefix(s, tier, c, n, &held);
  for (size_t b = hits; b < n; b += batch)
    l2_chain_store(s, tier, c, b, b + batch < n ? b + batch : n, l);
  return hits;
}

size_t l2_chain_assert_prefix(kva_storage *s, uint32_t tier, uint64_t c, size_t n) {
  uint64_t held;
  size_t prefix = l2_chain_prefix(s, tier, c, n, &held);
  ck_assert_msg(held == (prefix == 64 ? ~0ull : (1ull << prefix) - 1),
                "chain %llu: the tier holds chunks 0x%llx of %zu, not a prefix",
                (unsigned long long)c, (unsigned long long)held, n);
  return prefix;
}

static uint64_t rng_next(uint64_t *x) { /* splitmix64 */
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

size_t l2_chains_scenario(kva_storage *s, uint32_t tier, uint32_t chains, size_t max_len,
                          uint32_t turns, uint64_t seed, const kva_layout *l) {
  ck_assert_uint_le(max_len, L2_CHAIN_MAX);
  uint32_t ninst = chains, *active = calloc(chains, sizeof(*active));
  size_t *len = calloc(chains + turns, sizeof(*len));
  ck_assert(active && len);
  for (uint32_t c = 0; c < chains; c++) active[c] = c;
  for (uint32_t t = 0; t < turns; t++) {
    uint32_t c = (uint32_t)(rng_next(&seed) % chains), i = active[c];
    size_t grow = 1 + (size_t)(rng_next(&seed) % 3);
    if (len[i] + grow > max_len) { /* the conversation ends, another starts */
      i = active[c] = ninst++;
      grow = 2;
    }
    len[i] += grow;
    l2_chain_turn(s, tier, i, len[i], 4, l);
    for (uint32_t j = 0; j < ninst; j++) l2_chain_assert_prefix(s, tier, j, len[j]);
  }
  size_t held = 0;
  for (uint32_t j = 0; j < ninst; j++) held += l2_chain_assert_prefix(s, tier, j, len[j]);
  free(active);
  free(len);
  return held;
}

void l2_chain_expect_prefixes(kva_storage *s, uint32_t tier, const size_t *len, const size_t *want,
                              size_t n) {
  for (size_t c = 0; c < n; c++)
    ck_assert_uint_eq(l2_chain_assert_prefix(s, tier, c, len[c]), want[c]);
}
