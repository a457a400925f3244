/*
 * l2_load_plan_test.c — load_plan (l2/load_plan.h) against cases computed
 * by hand (issue 30): a tier too slow for any chunk, a fast tier ahead of
 * a busy one (only the first chunks are worth it), a fast tier (all of
 * them), the margin tipping a tier at its threshold, L1 hits always kept,
 * unknown rates loading everything, the split, and bad input.
 *
 * The numbers: llama3-8b chunks (B = 32 MiB, 256 tokens) at 10 000
 * prefill tokens/s, so C = 25.6 ms per chunk; recomputing 8 is 204.8 ms.
 * The copy into the engine's cache is free (Rc not measured), one layer.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "kvact.h"
#include "l2/load_plan.h"

#define B 33554432.0
#define C 0.0256
#define MS 1e-3

static const int8_t ALL_T0[8] = {0, 0, 0, 0, 0, 0, 0, 0};

static load_plan_in input(size_t n, size_t h, const int8_t *tier, uint32_t ntiers,
                          const load_plan_tier *tiers, double margin) {
  return (load_plan_in){.n = n,
                        .h = h,
                        .tier = tier,
                        .ntiers = ntiers,
                        .tiers = tiers,
                        .chunk_bytes = B,
                        .chunk_compute_s = C,
                        .round_trips = 1,
                        .margin = margin};
}

static load_plan_out plan(const load_plan_in *in) {
  load_plan_out out;
  memset(&out, 0xa5, sizeof out);
  ck_assert_int_eq(load_plan(in, &out), KVA_OK);
  return out;
}

#define ck_assert_ms(x, want)                                                                      \
  ck_assert_msg(fabs((x) / MS - (want)) < 0.1, "%s = %.3f ms, want %.1f", #x, (x) / MS,            \
                (double)(want))

/* A: 0.5 GB/s: a chunk takes 70.6 ms (margin 5%) against 25.6 to compute. */
START_TEST(a_tier_too_slow_for_any_chunk_loads_none) {
  load_plan_tier slow = {.bytes_per_s = 0.5e9};
  load_plan_in in = input(8, 0, ALL_T0, 1, &slow, 0.05);
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.k, 0);
  ck_assert_uint_eq(out.skipped[0], 8);
  ck_assert_ms(out.load_s, 204.8);
  ck_assert_ms(out.recompute_s, 204.8);
}
END_TEST

/* B: chunks 0-2 on a 10 GB/s tier, 3-7 on a disk (2 GB/s, 1 ms) with 512
 * MiB queued: loading the first 3 ends at 10.6 ms, then 5 are computed
 * (138.6 ms); any disk chunk lands after 300 ms. */
START_TEST(a_queue_makes_only_the_first_chunks_worth_it) {
  load_plan_tier tiers[2] = {
      {.bytes_per_s = 10e9},
      {.bytes_per_s = 2e9, .latency_s = 1 * MS, .queued_bytes = 512.0 * (1 << 20)}};
  const int8_t tier[8] = {0, 0, 0, 1, 1, 1, 1, 1};
  load_plan_in in = input(8, 0, tier, 2, tiers, 0.05);
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.k, 3);
  ck_assert_uint_eq(out.skipped[0], 0);
  ck_assert_uint_eq(out.skipped[1], 5);
  ck_assert_ms(out.load_s, 138.6);
  ck_assert_ms(out.recompute_s, 204.8);
}
END_TEST

/* C: 10 GB/s, 0.1 ms: all 8 land by 28.4 ms. */
START_TEST(a_fast_tier_loads_every_chunk) {
  load_plan_tier fast = {.bytes_per_s = 10e9, .latency_s = 0.1 * MS};
  load_plan_in in = input(8, 0, ALL_T0, 1, &fast, 0.05);
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.k, 8);
  ck_assert_uint_eq(out.skipped[0], 0);
  ck_assert_ms(out.load_s, 28.4);
}
END_TEST

/* D: one tier is all or nothing. A disk (2 GB/s, 1 ms, 128 MiB queued):
 * without margin 8 chunks land at 202.3 ms < 204.8 (all); 7 would land at
 * 185.6 > 179.2 (none); with a 5% margin 8 land at 213.0 (none). */
START_TEST(a_busy_tier_at_its_threshold_is_all_or_nothing_and_the_margin_tips_it) {
  load_plan_tier disk = {
      .bytes_per_s = 2e9, .latency_s = 1 * MS, .queued_bytes = 128.0 * (1 << 20)};
  load_plan_in in = input(8, 0, ALL_T0, 1, &disk, 0);
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.k, 8);
  ck_assert_ms(out.load_s, 202.3);
  in.n = 7;
  ck_assert_uint_eq(plan(&in).k, 0);
  in.n = 8;
  in.margin = 0.05;
  out = plan(&in);
  ck_assert_uint_eq(out.k, 0);
  ck_assert_uint_eq(out.skipped[0], 8);
}
END_TEST

/* L1 hits are kept even when the tier behind them is too slow. */
START_TEST(l1_hits_are_kept_before_a_slow_tier) {
  load_plan_tier slow = {.bytes_per_s = 0.5e9};
  load_plan_in in = input(8, 2, ALL_T0, 1, &slow, 0.05);
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.k, 2);
  ck_assert_uint_eq(out.skipped[0], 6);
  ck_assert_ms(out.load_s, 6 * 25.6);
  ck_assert_ms(out.recompute_s, 6 * 25.6);
}
END_TEST

/* A tier not yet measured, or no prefill rate: load what was found. */
START_TEST(unknown_rates_load_everything_found) {
  load_plan_tier unmeasured = {0};
  load_plan_in in = input(8, 0, ALL_T0, 1, &unmeasured, 0.05);
  ck_assert_uint_eq(plan(&in).k, 8);
  load_plan_tier slow = {.bytes_per_s = 0.5e9};
  in = input(8, 0, ALL_T0, 1, &slow, 0.05);
  in.chunk_compute_s = 0;
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.k, 8);
  ck_assert_uint_eq(out.skipped[0], 0);
}
END_TEST

/* The split, no margin: S1 (A's tier) m* = 6, 153.6 ms; S2 (C's) m* = 1,
 * 25.6 ms; S3 (D's) m* = 5, 128.0 ms. Never worse than either extreme. */
START_TEST(the_split_meets_in_the_middle) {
  struct {
    load_plan_tier tier;
    size_t m;
    double ms;
  } cases[] = {
      {{.bytes_per_s = 0.5e9}, 6, 153.6},
      {{.bytes_per_s = 10e9, .latency_s = 0.1 * MS}, 1, 25.6},
      {{.bytes_per_s = 2e9, .latency_s = 1 * MS, .queued_bytes = 128.0 * (1 << 20)}, 5, 128.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    load_plan_in in = input(8, 0, ALL_T0, 1, &cases[i].tier, 0);
    load_plan_out out = plan(&in);
    ck_assert_uint_eq(out.split_at, cases[i].m);
    ck_assert_ms(out.split_s, cases[i].ms);
    ck_assert(out.split_s <= out.load_s + 1e-12 && out.split_s <= out.recompute_s + 1e-12);
  }
}
END_TEST

START_TEST(bad_input_is_refused_and_leaves_the_output_alone) {
  load_plan_tier ok = {.bytes_per_s = 1e9};
  const int8_t bad_tier[2] = {0, 3};
  load_plan_in in = input(2, 0, bad_tier, 1, &ok, 0);
  load_plan_out out;
  memset(&out, 0x5a, sizeof out);
  load_plan_out before = out;
  ck_assert_int_eq(load_plan(&in, &out), KVA_EINVAL); /* tier 3 of 1 */
  in = input(2, 3, ALL_T0, 1, &ok, 0);
  ck_assert_int_eq(load_plan(&in, &out), KVA_EINVAL); /* h > n */
  in = input(2, 0, ALL_T0, 1, &ok, 1.0);
  ck_assert_int_eq(load_plan(&in, &out), KVA_EINVAL); /* margin 1 */
  load_plan_tier nan_rate = {.bytes_per_s = NAN};
  in = input(2, 0, ALL_T0, 1, &nan_rate, 0);
  ck_assert_int_eq(load_plan(&in, &out), KVA_EINVAL);
  in = input(2, 0, NULL, 1, &ok, 0);
  ck_assert_int_eq(load_plan(&in, &out), KVA_EINVAL); /* no tiers for chunks past L1 */
  ck_assert_int_eq(load_plan(NULL, &out), KVA_EINVAL);
  ck_assert_int_eq(memcmp(&out, &before, sizeof out), 0);
  in = input(2, 0, ALL_T0, 1, &ok, 0);
  ck_assert_int_eq(load_plan(&in, NULL), KVA_EINVAL);
}
END_TEST

/* Whether a lookup is worth asking (B = 32 MiB, C = 25.6 ms, no margin):
 *   0.5 GB/s: s = 67.1 ms >= C: a prefix engine never asks; a split one
 *     asks while L < 8·C·C/(C + s) = 8 · 25.6² / 92.7 = 56.6 ms;
 *   2 GB/s: s = 16.8 ms: asks while L < 8·(25.6 - 16.8) = 70.5 ms (split:
 *     8 · 25.6² / 42.4 = 123.7 ms);
 *   unmeasured, unknown C, no chunks: asks. */
/* The split after 2 L1 hits, case A's tier (s = 67.1 ms), no margin: the
 * L1 hits are copied (free here), not computed; m >= 2:
 * T(m) = max((m - 2)·25.6, (8 - m)·67.1): m = 6: 134.2; m = 7:
 * max(128.0, 67.1) = 128.0; m = 8 (recompute): 153.6. So m* = 7, 128 ms
 * (computing the L1 hits too would have made it 153.6). */
START_TEST(the_split_copies_the_l1_hits_in_front) {
  load_plan_tier slow = {.bytes_per_s = B / (67.108864 * MS)};
  load_plan_in in = input(8, 2, ALL_T0, 1, &slow, 0);
  load_plan_out out = plan(&in);
  ck_assert_uint_eq(out.split_at, 7);
  ck_assert_ms(out.split_s, 128.0);
  ck_assert_ms(out.recompute_s, 153.6);
}
END_TEST

START_TEST(a_lookup_is_asked_only_when_it_can_pay) {
  load_plan_tier slow = {.bytes_per_s = 0.5e9, .latency_s = 1 * MS};
  ck_assert_int_eq(load_plan_worth_asking(&slow, B, C, 8, 0, 0), 0);
  ck_assert_int_eq(load_plan_worth_asking(&slow, B, C, 8, 0, 1), 1);
  slow.latency_s = 57 * MS;
  ck_assert_int_eq(load_plan_worth_asking(&slow, B, C, 8, 0, 1), 0);
  slow.latency_s = 56 * MS;
  ck_assert_int_eq(load_plan_worth_asking(&slow, B, C, 8, 0, 1), 1);
  load_plan_tier disk = {.bytes_per_s = 2e9, .latency_s = 70 * MS};
  ck_assert_int_eq(load_plan_worth_asking(&disk, B, C, 8, 0, 0), 1);
  disk.latency_s = 71 * MS;
  ck_assert_int_eq(load_plan_worth_asking(&disk, B, C, 8, 0, 0), 0);
  ck_assert_int_eq(load_plan_worth_asking(&disk, B, C, 8, 0, 1), 1);
  disk.latency_s = 124 * MS;
  ck_assert_int_eq(load_plan_worth_asking(&disk, B, C, 8, 0, 1), 0);
  /* the margin makes the tier slower: at 5%, s = 17.7 ms, and L = 62 ms
   * counts 65.3 ms against 8·(25.6 - 17.7) = 63.5 ms */
  disk.latency_s = 62 * MS;
  ck_assert_int_eq(load_plan_worth_asking(&disk, B, C, 8, 0, 0), 1);
  ck_assert_int_eq(load_plan_worth_asking(&disk, B, C, 8, 0.05, 0), 0);
  load_plan_tier unmeasured = {.latency_s = 1};
  ck_assert_int_eq(load_plan_worth_asking(&unmeasured, B, C, 8, 0, 0), 1);
  ck_assert_int_eq(load_plan_worth_asking(&slow, B, 0, 8, 0, 0), 1);
  ck_assert_int_eq(load_plan_worth_asking(&slow, B, C, 0, 0, 0), 1);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_load_plan");
  TCase *tc = tcase_create("plan");
  tcase_add_test(tc, a_tier_too_slow_for_any_chunk_loads_none);
  tcase_add_test(tc, a_queue_makes_only_the_first_chunks_worth_it);
  tcase_add_test(tc, a_fast_tier_loads_every_chunk);
  tcase_add_test(tc, a_busy_tier_at_its_threshold_is_all_or_nothing_and_the_margin_tips_it);
  tcase_add_test(tc, l1_hits_are_kept_before_a_slow_tier);
  tcase_add_test(tc, unknown_rates_load_everything_found);
  tcase_add_test(tc, the_split_meets_in_the_middle);
  tcase_add_test(tc, bad_input_is_refused_and_leaves_the_output_alone);
  tcase_add_test(tc, a_lookup_is_asked_only_when_it_can_pay);
  tcase_add_test(tc, the_split_copies_the_l1_hits_in_front);
  suite_add_tcase(su, tc);
  return su;
}
