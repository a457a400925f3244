/*
 * l2_mock_chain_test.c — the mock tier evicts a chain from its end: a
 * STORE's keys are a chain, a lookup links a stored batch to the chain it
 * continues, and a tier smaller than the chains it is given keeps each of
 * them a prefix. Objects of 1 KiB in a tier of eight.
 */
#include <check.h>
#include <stdio.h>

#include "tests/support/fixture.h"
#include "tests/support/l2_chains.h"
#include "tests/support/l2_client.h"

#define OBJ 1024u

static kva_runtime *start(uint32_t objects) {
  char json[64];
  snprintf(json, sizeof json, "\"capacity_bytes\":%u", objects * OBJ);
  return l2_start(1, 16u << 20, 1, json, NULL);
}

START_TEST(eviction_takes_a_chains_end_before_its_prefix) {
  kva_runtime *rt = start(8);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ);
  l2_chain_store(s, 0, 0, 0, 4, &l); /* the oldest chain */
  l2_chain_store(s, 0, 1, 0, 4, &l);
  l2_chain_store(s, 0, 2, 0, 2, &l); /* two evictions: chain 0's last two chunks */
  const size_t len[] = {4, 4, 2}, want[] = {2, 4, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 3);
  ck_assert_uint_eq(l2_stats(s, 0).evictions, 2);
  l2_finish(rt);
}
END_TEST

START_TEST(a_batch_stored_after_its_lookup_continues_the_chain) {
  kva_runtime *rt = start(8);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ);
  ck_assert_uint_eq(l2_chain_turn(s, 0, 0, 4, 4, &l), 0);
  ck_assert_uint_eq(l2_chain_turn(s, 0, 1, 2, 4, &l), 0);
  /* chunks 4 and 5 of chain 0, after a lookup that found 0..3: the whole
   * chain is now newer than chain 1 */
  ck_assert_uint_eq(l2_chain_turn(s, 0, 0, 6, 4, &l), 4);
  l2_chain_store(s, 0, 2, 0, 2, &l); /* evicts chain 1 */
  l2_chain_store(s, 0, 3, 0, 2, &l); /* then chain 0 from its end: 5, 4 */
  const size_t len[] = {6, 2, 2, 2}, want[] = {4, 0, 2, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 4);
  l2_finish(rt);
}
END_TEST

/* Through the prefetch controller: L1 holds chunks 0..3 of chain 0, so
 * the tier is asked for 4..5 only; the lookup names chunk 3 as the one
 * before, and the engine's write of 4..5 continues chain 0 in the tier
 * (unlinked, chain 0's prefix would be the oldest and go first). */
START_TEST(a_lookup_past_the_l1_hits_links_the_chain_to_its_l1_prefix) {
  kva_runtime *rt = start(10);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ);
  uint64_t ids[6];
  for (size_t i = 0; i < 6; i++) ids[i] = l2_chain_id(0, i);
  l2_write(s, ids, 4, &l, 1); /* L1 and the tier */
  l2_flush(s);
  l2_chain_store(s, 0, 1, 0, 4, &l); /* chain 1: newer in the tier */
  ck_assert_uint_eq(l2_prefetch(s, ids, 6, &l, 0), 4);
  l2_read_release(s, ids, 4, 1, 0);
  l2_write(s, ids + 4, 2, &l, 1);
  l2_flush(s);
  l2_chain_store(s, 0, 2, 0, 2, &l); /* evicts chain 1's end */
  const size_t len[] = {6, 4, 2}, want[] = {6, 2, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 3);
  l2_finish(rt);
}
END_TEST

START_TEST(a_tier_smaller_than_its_chains_keeps_every_chain_a_prefix) {
  kva_runtime *rt = start(24);
  kva_layout l = fixture_layout_bytes(OBJ);
  size_t kept = l2_chains_scenario(kva_storage_of(rt), 0, 8, 10, 80, 1, &l);
  ck_assert_uint_gt(kept, 16); /* the tier stayed in use */
  ck_assert_uint_gt(l2_stats(kva_storage_of(rt), 0).evictions, 20);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_mock_chain");
  TCase *tc = tcase_create("chains");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, eviction_takes_a_chains_end_before_its_prefix);
  tcase_add_test(tc, a_batch_stored_after_its_lookup_continues_the_chain);
  tcase_add_test(tc, a_lookup_past_the_l1_hits_links_the_chain_to_its_l1_prefix);
  tcase_add_test(tc, a_tier_smaller_than_its_chains_keeps_every_chain_a_prefix);
  suite_add_tcase(s, tc);
  return s;
}
