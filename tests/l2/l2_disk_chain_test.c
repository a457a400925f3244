/*
 * l2_disk_chain_test.c — the disk tier evicts a chain from its end: a
 * STORE's keys are a chain, a lookup links a stored batch to the chain it
 * continues, recency order across chains is kept, and the order survives
 * a restart (the link is in the slot header; a file whose headers hold no
 * link, as files written before chains, opens and serves).
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/l2/l2_disk_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_chains.h"
#include "tests/support/l2_client.h"

static kva_runtime *start(const char *path, uint32_t nslots) {
  return l2_start_disk(1, DT_L1, dt_json(path, dt_capacity(nslots), ""), NULL);
}

static kva_runtime *start_new(const char *name, uint32_t nslots, char *path) {
  dt_path(path, 512, name);
  return start(path, nslots);
}

START_TEST(eviction_takes_a_chains_end_before_its_prefix) {
  char path[512];
  kva_runtime *rt = start_new("chain_end.kvd", 8, path);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  l2_chain_store(s, 0, 0, 0, 4, &l); /* the least recently used chain */
  l2_chain_store(s, 0, 1, 0, 4, &l);
  l2_chain_store(s, 0, 2, 0, 2, &l); /* two evictions: chain 0's last two chunks */
  const size_t len[] = {4, 4, 2}, want[] = {2, 4, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 3);
  ck_assert_uint_eq(l2_stats(s, 0).evictions, 2);
  l2_finish(rt);
}
END_TEST

START_TEST(a_batch_stored_after_its_lookup_continues_the_chain) {
  char path[512];
  kva_runtime *rt = start_new("chain_batches.kvd", 8, path);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  ck_assert_uint_eq(l2_chain_turn(s, 0, 0, 4, 4, &l), 0);
  ck_assert_uint_eq(l2_chain_turn(s, 0, 1, 2, 4, &l), 0);
  /* chunks 4 and 5 of chain 0, after a lookup that found 0..3 */
  ck_assert_uint_eq(l2_chain_turn(s, 0, 0, 6, 4, &l), 4);
  l2_chain_store(s, 0, 2, 0, 2, &l); /* evicts chain 1, the least recent */
  l2_chain_store(s, 0, 3, 0, 2, &l); /* then chain 0 from its end: 5, 4 */
  const size_t len[] = {6, 2, 2, 2}, want[] = {4, 0, 2, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 4);
  l2_finish(rt);
}
END_TEST

START_TEST(recency_order_across_chains_is_kept) {
  char path[512];
  kva_runtime *rt = start_new("chain_recency.kvd", 8, path);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  l2_chain_store(s, 0, 0, 0, 4, &l);
  l2_chain_store(s, 0, 1, 0, 4, &l);
  ck_assert_uint_eq(l2_chain_turn(s, 0, 0, 4, 4, &l), 4); /* chain 0 used again */
  l2_chain_store(s, 0, 2, 0, 2, &l);                      /* so chain 1 loses its end */
  const size_t len[] = {4, 4, 2}, want[] = {4, 2, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 3);
  l2_finish(rt);
}
END_TEST

/* Looks up (and unlocks) keys ids[] in one request, in order. */
static void lookup(kva_storage *s, const uint64_t *ids, size_t n) {
  uint8_t bits[2];
  dt_lock(s, ids, n, bits);
  l2_unlock(s, 0, ids, n);
}

/* Whether key ids[i] is held, for each i: the bits of one lookup. */
static uint32_t held(kva_storage *s, const uint64_t *ids, size_t n) {
  uint8_t bits[2] = {0};
  size_t found = dt_lock(s, ids, n, bits);
  if (found) l2_unlock(s, 0, ids, n);
  return (uint32_t)bits[0] | (uint32_t)bits[1] << 8;
}

/* X and Y continue a shared prefix P (a system prompt): P outlives both. */
START_TEST(a_shared_prefix_outlives_the_chains_that_continue_it) {
  char path[512];
  kva_runtime *rt = start_new("chain_shared.kvd", 8, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t x[] = {100, 101, 200, 201}, y[] = {100, 101, 300, 301, 302}, w = 500, v = 600;
  ck_assert_int_eq(dt_store(s, x, 4, 0, true), KVA_OK);
  lookup(s, y, 5); /* finds P, notes that 300 continues 101 */
  ck_assert_int_eq(dt_store(s, y + 2, 3, 0, true), KVA_OK);
  lookup(s, x, 4);                                       /* X used again: Y is the least recent */
  ck_assert_int_eq(dt_store(s, &w, 1, 0, true), KVA_OK); /* the eighth slot */
  ck_assert_int_eq(dt_store(s, &v, 1, 0, true), KVA_OK); /* evicts Y's end, 302 */
  ck_assert_uint_eq(held(s, y, 5), 0x0f);
  ck_assert_uint_eq(held(s, x, 4), 0x0f);
  ck_assert_uint_eq(l2_stats(s, 0).evictions, 1);
  l2_finish(rt);
}
END_TEST

/* Chain 0 is stored before chain 1; after a restart (clean, or a scan
 * after a crash) chain 0 is still evicted first, from its end. */
static void restart_keeps_the_order(const char *name, bool crash) {
  char path[512];
  kva_runtime *rt = start_new(name, 8, path);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  l2_chain_store(s, 0, 0, 0, 4, &l);
  l2_chain_store(s, 0, 1, 0, 4, &l);
  l2_finish(rt);
  if (crash) { /* what a run killed after its start leaves */
    disk_super sb = dt_super_read(path);
    sb.clean = 0;
    dt_super_write(path, &sb);
  }
  rt = start(path, 8);
  s = kva_storage_of(rt);
  l2_chain_store(s, 0, 2, 0, 2, &l);
  const size_t len[] = {4, 4, 2}, want[] = {2, 4, 2};
  l2_chain_expect_prefixes(s, 0, len, want, 3);
  l2_finish(rt);
}

START_TEST(the_chain_order_survives_a_clean_restart) {
  restart_keeps_the_order("chain_restart.kvd", false);
}
END_TEST

START_TEST(the_chain_order_survives_a_crash_scan) {
  restart_keeps_the_order("chain_crash.kvd", true);
}
END_TEST

/* Headers without a chain link (what builds before chains wrote: the field
 * was zeroed padding) open and serve every object. */
START_TEST(a_tier_whose_headers_hold_no_links_opens_and_serves) {
  char path[512];
  kva_runtime *rt = start_new("chain_old.kvd", 8, path);
  const uint64_t ids[] = {0, 1, 2, 3};
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 4, 7, true), KVA_OK);
  l2_finish(rt);
  for (size_t i = 0; i < 4; i++) {
    uint64_t off = dt_slot_of(path, ids[i]);
    ck_assert_uint_ne(off, 0);
    object_header h;
    int fd = open(path, O_RDWR);
    ck_assert_int_eq(pread(fd, &h, sizeof h, (off_t)off), (ssize_t)sizeof h);
    ck_assert_uint_eq(h.parent != 0, i > 0); /* a STORE's keys are a chain */
    h.parent = 0;
    object_header_seal(&h);
    ck_assert_int_eq(pwrite(fd, &h, sizeof h, (off_t)off), (ssize_t)sizeof h);
    close(fd);
  }
  rt = start(path, 8);
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(kva_storage_of(rt), ids, 4, 7, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x0f);
  l2_finish(rt);
}
END_TEST

START_TEST(a_tier_smaller_than_its_chains_keeps_every_chain_a_prefix) {
  char path[512];
  kva_runtime *rt = start_new("chain_scenario.kvd", 24, path);
  kva_layout l = dt_layout();
  size_t kept = l2_chains_scenario(kva_storage_of(rt), 0, 8, 10, 80, 1, &l);
  ck_assert_uint_gt(kept, 16); /* the tier stayed in use */
  ck_assert_uint_gt(l2_stats(kva_storage_of(rt), 0).evictions, 20);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_disk_chain");
  TCase *tc = tcase_create("chains");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, eviction_takes_a_chains_end_before_its_prefix);
  tcase_add_test(tc, a_batch_stored_after_its_lookup_continues_the_chain);
  tcase_add_test(tc, recency_order_across_chains_is_kept);
  tcase_add_test(tc, a_shared_prefix_outlives_the_chains_that_continue_it);
  tcase_add_test(tc, the_chain_order_survives_a_clean_restart);
  tcase_add_test(tc, the_chain_order_survives_a_crash_scan);
  tcase_add_test(tc, a_tier_whose_headers_hold_no_links_opens_and_serves);
  tcase_add_test(tc, a_tier_smaller_than_its_chains_keeps_every_chain_a_prefix);
  suite_add_tcase(s, tc);
  return s;
}
