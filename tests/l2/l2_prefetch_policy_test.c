/*
 * l2_prefetch_policy_test.c — prefetch policies (config prefetch_policy,
 * kva_prefetch_policy_register; LMCache test_prefetch_policy.py): the
 * built-in "default" as a pure function, a user's policy chosen by name
 * and driven through a prefetch, and what the controller does with a
 * policy that answers nonsense (a tier out of range, a negative one, a tier
 * that does not hold the key, no answer at all): such a key is not loaded,
 * and the prefix ends before it.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "l1/l1_manager.h"
#include "l2/registry.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* ---- "default" as a pure function ----------------------------------------- */

/* One case of test_prefetch_policy.py: found[t] as a bit mask over n <= 8
 * keys (bit i = key i), a tier in `missing` has no lookup result at all
 * (NULL), and the expected plan (-1 = not loaded). */
typedef struct plan_case {
  const char *name;
  size_t n;
  uint32_t ntiers;
  uint8_t found[3];
  uint8_t missing;
  int8_t want[8];
} plan_case;

static const plan_case cases[] = {
    {"single_adapter_all_keys_found", 3, 1, {0x7}, 0, {0, 0, 0}},
    {"single_adapter_partial_hits (not trimmed)", 4, 1, {0x5}, 0, {0, -1, 0, -1}},
    {"multi_adapter_overlap_first_wins", 3, 2, {0x3, 0x6}, 0, {0, 0, 1}},
    {"multi_adapter_disjoint", 4, 2, {0x3, 0xc}, 0, {0, 0, 1, 1}},
    {"no_hits_returns_empty", 3, 2, {0, 0}, 0, {-1, -1, -1}},
    {"empty_adapters_returns_empty", 1, 0, {0}, 0, {-1}},
    {"adapter_order_matters (lowest index wins)", 1, 2, {0x1, 0x1}, 0, {0}},
    {"three_adapters_with_overlap", 5, 3, {0x09, 0x0e, 0x1c}, 0, {0, 1, 1, 0, 2}},
    {"missing_lookup_result_for_adapter", 2, 2, {0, 0x3}, 0x1, {1, 1}},
    {"each_key_appears_at_most_once", 3, 3, {0x7, 0x7, 0x7}, 0, {0, 0, 0}},
};

START_TEST(default_policy_gives_each_key_to_the_lowest_tier_holding_it) {
  const plan_case *c = &cases[_i];
  kva_prefetch_policy p;
  ck_assert_int_eq(prefetch_policy_find("default", &p), KVA_OK);
  ck_assert_str_eq(p.name, "default");
  const uint8_t *found[3];
  for (uint32_t t = 0; t < 3; t++) found[t] = (c->missing >> t & 1) ? NULL : &c->found[t];
  int8_t plan[9];
  memset(plan, 55, sizeof(plan));
  p.select_load_plan(p.arg, c->n, c->ntiers, found, plan);
  for (size_t i = 0; i < c->n; i++)
    ck_assert_msg(plan[i] == c->want[i], "%s: key %zu planned to %d, want %d", c->name, i, plan[i],
                  c->want[i]);
  ck_assert_msg(plan[c->n] == 55, "%s: wrote past n", c->name);
}
END_TEST

/* test_empty_keys_returns_empty: n = 0 writes nothing. */
START_TEST(default_policy_with_no_keys_writes_nothing) {
  kva_prefetch_policy p;
  ck_assert_int_eq(prefetch_policy_find("default", &p), KVA_OK);
  uint8_t none = 0;
  const uint8_t *found[1] = {&none};
  int8_t plan[1] = {55};
  p.select_load_plan(p.arg, 0, 1, found, plan);
  ck_assert_int_eq(plan[0], 55);
}
END_TEST

/* ---- policies of the test's own, registered in kva_test_suite ------------- */

/* "highest_tier": each key to the highest-index tier holding it; records
 * what it was given in its arg. */
typedef struct seen {
  uint32_t calls, ntiers;
  size_t n;
  uint8_t found[2];
} seen;
static seen highest_seen;

static void highest_tier(void *arg, size_t n, uint32_t ntiers, const uint8_t *const *found,
                         int8_t *plan) {
  seen *s = arg;
  s->calls++;
  s->n = n;
  s->ntiers = ntiers;
  for (uint32_t t = 0; t < ntiers && t < 2; t++) s->found[t] = found[t][0];
  for (size_t i = 0; i < n; i++) {
    plan[i] = -1;
    for (uint32_t t = ntiers; t-- > 0 && plan[i] < 0;)
      if (kva_bit_get(found[t], i)) plan[i] = (int8_t)t;
  }
}

/* "nonsense": the default plan, except that key `at` gets `bad` (or, for
 * NOTHING, that no entry is written at all). Set before the runtime
 * starts. */
enum { NOTHING = 99 };
static struct {
  size_t at;
  int bad;
} nonsense;

static void nonsense_plan(void *arg, size_t n, uint32_t ntiers, const uint8_t *const *found,
                          int8_t *plan) {
  (void)arg;
  if (nonsense.bad == NOTHING) return;
  for (size_t i = 0; i < n; i++) {
    plan[i] = -1;
    for (uint32_t t = 0; t < ntiers && plan[i] < 0; t++)
      if (kva_bit_get(found[t], i)) plan[i] = (int8_t)t;
  }
  if (nonsense.at < n) plan[nonsense.at] = (int8_t)nonsense.bad;
}

START_TEST(default_policy_chosen_by_name_loads_from_the_lowest_tier) {
  kva_runtime *rt = l2_start_no_writeback(_i ? 0 : 2, 2, "prefetch_policy=default");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  l2_seed_range(s, 1, 0, 3, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 3);
  ck_assert_uint_eq(l2_stats(s, 1).loads, 0);
  l2_read_release_range(s, 0, 3, 0);
  l2_finish(rt);
}
END_TEST

/* The user's policy decides: everything from tier 1 (whose bytes differ).
 * It is given the L1 misses only, every tier, and a bypassed tier's bitmap
 * empty. */
START_TEST(registered_policy_chosen_by_name_decides_the_tier) {
  kva_runtime *rt = l2_start_no_writeback(_i ? 0 : 2, 2, "prefetch_policy=highest_tier");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3}, first[] = {0};
  l2_write_l1_only(s, first, 1, &l, 3);
  l2_seed(s, 0, ids + 1, 3, &l, 0);
  l2_seed(s, 1, ids + 1, 3, &l, 5);
  ck_assert_uint_eq(l2_prefetch(s, ids, 4, &l, 0), 4);
  ck_assert_uint_eq(highest_seen.calls, 1);
  ck_assert_uint_eq(highest_seen.n, 3);
  ck_assert_uint_eq(highest_seen.ntiers, 2);
  ck_assert_uint_eq(highest_seen.found[0], 0x7);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 0);
  ck_assert_uint_eq(l2_stats(s, 1).loads, 3);
  l2_read_release(s, first, 1, 3, 0);
  l2_read_release(s, ids + 1, 3, 5, 0);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock1", 1), KVA_OK);
  ck_assert_uint_eq(l2_prefetch(s, ids, 4, &l, 0), 4); /* 0 from L1, 1..3 from tier 0 */
  ck_assert_uint_eq(highest_seen.found[1], 0);
  l2_read_release(s, ids + 1, 3, 0, 0);
  l2_read_release(s, first, 1, 3, 0);
  l2_finish(rt);
}
END_TEST

/* Nonsense for key 2 of 4 (every key in tier 0, none in tier 1): the
 * prefix is keys 0, 1; key 2 and what follows are neither loaded nor left
 * locked anywhere. With nonsense for key 0 nothing is loaded. */
static const struct {
  size_t at;
  int bad;
  size_t hits;
} nonsense_cases[] = {
    {2, 100, 2},     /* far out of range */
    {2, 7, 2},       /* below L2_MAX_TIERS, but no such tier */
    {2, -2, 2},      /* negative, not -1 */
    {2, 1, 2},       /* tier 1 did not find the key */
    {0, 100, 0},     /* the same for the first key: nothing */
    {0, 1, 0},       /* ditto */
    {0, NOTHING, 0}, /* no entry written */
};

START_TEST(nonsense_from_a_policy_means_not_loaded) {
  nonsense.at = nonsense_cases[_i % 7].at;
  nonsense.bad = nonsense_cases[_i % 7].bad;
  kva_runtime *rt = l2_start_no_writeback(_i < 7 ? 2 : 0, 2, "prefetch_policy=nonsense");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  size_t hits = nonsense_cases[_i % 7].hits;
  l2_seed_range(s, 0, 0, 4, &l);
  for (int round = 0; round < 2; round++) { /* the second reuses the request */
    ck_assert_uint_eq(l2_prefetch_range(s, 0, 4, &l), hits);
    l2_expect_states(s, 0, hits, 1 | L1_TEMPORARY);
    l2_expect_states(s, hits, 4 - hits, L1_ABSENT);
    ck_assert_uint_eq(l2_stats(s, 0).loads, hits * (size_t)(round + 1));
    ck_assert_uint_eq(l2_stats(s, 1).loads, 0);
    l2_assert_unlocked(s);
    if (hits) l2_read_release_range(s, 0, hits, 0);
  }
  l2_finish(rt);
}
END_TEST

/* ---- configuration and registration ---------------------------------------- */

START_TEST(unknown_prefetch_policy_refuses_to_start) {
  ck_assert_int_eq(l2_try_start("prefetch_policy", "no_such_policy"), KVA_ECONFIG);
}
END_TEST

START_TEST(bad_registrations_are_refused) {
  char long_name[40];
  memset(long_name, 'p', 32);
  long_name[32] = 0;
  ck_assert_int_eq(kva_prefetch_policy_register(NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_prefetch_policy_register(&(kva_prefetch_policy){"", highest_tier, NULL}),
                   KVA_EINVAL);
  ck_assert_int_eq(
      kva_prefetch_policy_register(&(kva_prefetch_policy){long_name, highest_tier, NULL}),
      KVA_EINVAL);
  ck_assert_int_eq(kva_prefetch_policy_register(&(kva_prefetch_policy){"no_fn", NULL, NULL}),
                   KVA_EINVAL);
  ck_assert_int_eq(
      kva_prefetch_policy_register(&(kva_prefetch_policy){"default", highest_tier, NULL}),
      KVA_EINVAL);
  kva_prefetch_policy p;
  ck_assert_int_eq(prefetch_policy_find("no_fn", &p), KVA_EINVAL);
  ck_assert_int_eq(prefetch_policy_find("highest_tier", &p), KVA_OK);
  ck_assert_ptr_eq(p.arg, &highest_seen);
}
END_TEST

Suite *kva_test_suite(void) {
  /* before any runtime starts, as the registry asks (outside a test, so
   * no ck_assert) */
  if (kva_prefetch_policy_register(
          &(kva_prefetch_policy){"highest_tier", highest_tier, &highest_seen}) != KVA_OK ||
      kva_prefetch_policy_register(&(kva_prefetch_policy){"nonsense", nonsense_plan, NULL}) !=
          KVA_OK)
    abort();
  Suite *su = suite_create("l2_prefetch_policy");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, default_policy_gives_each_key_to_the_lowest_tier_holding_it, 0,
                      (int)(sizeof(cases) / sizeof(cases[0])));
  tcase_add_test(tc, default_policy_with_no_keys_writes_nothing);
  tcase_add_loop_test(tc, default_policy_chosen_by_name_loads_from_the_lowest_tier, 0, 2);
  tcase_add_loop_test(tc, registered_policy_chosen_by_name_decides_the_tier, 0, 2);
  tcase_add_loop_test(tc, nonsense_from_a_policy_means_not_loaded, 0, 14);
  tcase_add_test(tc, unknown_prefetch_policy_refuses_to_start);
  tcase_add_test(tc, bad_registrations_are_refused);
  suite_add_tcase(su, tc);
  return su;
}
