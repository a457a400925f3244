/*
 * l2_load_or_recompute_test.c — the load_or_recompute prefetch policy and
 * kva_plan_load through real mock tiers on virtual time (issue 30;
 * docs/load-plan.md): the tier meter measures the mock's configured
 * bandwidth exactly, a tier too slow for any chunk is not asked
 * (lookups_skipped), keys found on a tier with too much queued are
 * skipped and counted (per tier in kva_l2_tier_stats and in
 * kva_storage_stats), a fast tier is loaded in full, a prefetch marked
 * KVA_PREFETCH_AS_PLANNED is not judged again, kva_plan_load asks a slow
 * tier only for an engine that can split and a slower reported prefill
 * makes it worth loading, and the default policy still loads everything.
 *
 * Numbers: chunks of 1 MiB; prefill 320000 tokens/s and 256 tokens per
 * chunk, so C = 0.8 ms; 16 chunks (16 MiB, 33.5 ms at the slow rate: one
 * rate sample of the meter, METER_WINDOW_NS = 20 ms). The slow tier
 * (0.5 GB/s) delivers a chunk in 2.1 ms; the fast one (10 GB/s) in
 * 0.105 ms.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "actors/gauges.h"
#include "actors/runtime_internal.h"
#include "l2/meter.h"
#include "storage/storage_internal.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MIB (1u << 20)
#define N 16

/* A deterministic runtime with one mock tier of the given bandwidth, the
 * policy named, and the prefill rate above. */
static kva_runtime *start(const char *bandwidth, const char *policy) {
  char mock[128];
  snprintf(mock, sizeof(mock), "\"name\":\"t\",\"bandwidth_bytes_per_s\":%s", bandwidth);
  char pol[64];
  snprintf(pol, sizeof(pol), "prefetch_policy=%s", policy);
  return l2_start(0, 64u << 20, 1, mock, pol, "load_plan.prefill_tokens_per_s=320000",
                  "load_plan.chunk_tokens=256", NULL);
}

/* Keys [0, N) written through L1 (so the store controller's meter sees
 * the tier work), then dropped from L1: only the tier holds them. */
static void stored_in_l2_only(kva_storage *s, const kva_layout *l) {
  l2_write_range(s, 0, N, l, 0);
  l2_flush(s);
  ck_assert_int_eq(kva_clear(s, 0), N);
}

/* At 10 GB/s, 16 MiB of stores take 1.7 ms, under the meter's 20 ms
 * window: the fast tier would stay unmeasured (and be loaded for that).
 * Tests of a measured fast tier give its loads' gauge one window at the
 * tier's rate: 200 MiB in 20.97 ms. */
static void measured_fast(kva_runtime *rt) {
  l2_meter *m = &kva_storage_of(rt)->tiers.t[0].meter;
  uint64_t now = kva_runtime_now_ns(rt), bytes = 200ull << 20;
  l2_meter_sent(m, 1, bytes, now);
  l2_meter_done(m, 1, bytes, bytes, now + bytes / 10); /* 10 bytes per ns */
}

static kva_l2_tier_stats tier_stats(kva_storage *s) {
  kva_l2_tier_stats ts;
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "t", &ts), KVA_OK);
  return ts;
}

START_TEST(the_meter_measures_the_mock_bandwidth) {
  kva_runtime *rt = start("500000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  kva_l2_tier_stats ts = tier_stats(s);
  ck_assert_msg(fabs(ts.bytes_per_s / 5e8 - 1) < 0.01, "rate %.0f B/s, want 5e8", ts.bytes_per_s);
  ck_assert_uint_eq(ts.queued_bytes, 0);
  l2_finish(rt);
}
END_TEST

/* No chunk of it would be loaded: the prefetch does not even ask it. */
START_TEST(a_tier_too_slow_for_any_chunk_is_not_asked) {
  kva_runtime *rt = start("500000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  uint64_t lookups = l2_stats(s, 0).lookups;
  ck_assert_uint_eq(l2_prefetch_range(s, 0, N, &l), 0);
  kva_l2_tier_stats ts = tier_stats(s);
  ck_assert_uint_eq(ts.lookups_skipped, 1);
  ck_assert_uint_eq(ts.adapter.lookups, lookups);
  ck_assert_uint_eq(ts.loaded_keys, 0);
  l2_finish(rt);
}
END_TEST

/* A fast tier is asked, but a 1 GiB load queued on it (faked in its meter: 107 ms
 * at 10 GB/s, against 16 x 0.69 ms saved) makes every key found not worth
 * loading: skipped and counted, per tier and in all. Once the queue is
 * gone, they load. */
START_TEST(a_queue_makes_found_keys_skipped_and_counted) {
  kva_runtime *rt = start("10000000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  measured_fast(rt);
  ck_assert_msg(fabs(tier_stats(s).bytes_per_s / 1e10 - 1) < 0.01, "rate %g",
                tier_stats(s).bytes_per_s);
  l2_meter *m = &s->tiers.t[0].meter;
  l2_meter_sent(m, 1, 1ull << 30, kva_runtime_now_ns(rt)); /* another engine's load */
  ck_assert_uint_eq(l2_prefetch_range(s, 0, N, &l), 0);
  kva_l2_tier_stats ts = tier_stats(s);
  ck_assert_uint_eq(ts.lookups_skipped, 0);
  ck_assert_uint_eq(ts.skipped_slow_keys, N);
  ck_assert_uint_eq(ts.queued_bytes, 1ull << 30);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  ck_assert_uint_eq(st.l2_skipped_slow_keys, N);
  /* what kvinspect shows: the controller's label and its skip gauges */
  stats_slot *slot = s->prefetcher->stats;
  if (slot) { /* NULL only when the stats segment had no room */
    stats_label_copy lc;
    ck_assert(stats_label_read(slot, &lc));
    ck_assert_str_eq(lc.label, "load_or_recompute");
    ck_assert_str_eq(lc.gauge_names, "skipped_slow t");
    ck_assert_uint_eq(__atomic_load_n(&slot->gauge[0], __ATOMIC_RELAXED), N);
    ck_assert_uint_eq(__atomic_load_n(&slot->gauge[1], __ATOMIC_RELAXED), N);
  }
  l2_meter_done(m, 1, 1ull << 30, 0, kva_runtime_now_ns(rt));
  ck_assert_uint_eq(l2_prefetch_range(s, 0, N, &l), N);
  l2_read_release_range(s, 0, N, 0);
  ck_assert_uint_eq(tier_stats(s).skipped_slow_keys, N);
  l2_finish(rt);
}
END_TEST

START_TEST(a_prefetch_as_planned_is_not_judged_again) {
  kva_runtime *rt = start("500000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  kva_key k[N];
  for (size_t i = 0; i < N; i++) k[i] = fixture_key(i);
  kva_prefetch *h = NULL;
  kva_prefetch_opts o = {.flags = KVA_PREFETCH_AS_PLANNED};
  ck_assert_int_eq(kva_submit_prefetch_with(s, k, N, &l, &o, &h), KVA_OK);
  size_t hits = 0;
  ck_assert_int_eq(kva_wait_prefetch(s, h, -1, &hits), KVA_OK);
  ck_assert_uint_eq(hits, N);
  l2_read_release_range(s, 0, N, 0);
  ck_assert_uint_eq(tier_stats(s).skipped_slow_keys, 0);
  o.flags = 0x80; /* no such flag */
  ck_assert_int_eq(kva_submit_prefetch_with(s, k, N, &l, &o, &h), KVA_EINVAL);
  l2_finish(rt);
}
END_TEST

START_TEST(a_fast_tier_is_loaded_in_full) {
  kva_runtime *rt = start("10000000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  measured_fast(rt);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, N, &l), N);
  l2_read_release_range(s, 0, N, 0);
  ck_assert_uint_eq(tier_stats(s).skipped_slow_keys, 0);
  l2_finish(rt);
}
END_TEST

START_TEST(the_default_policy_loads_a_slow_tier_all_the_same) {
  kva_runtime *rt = start("500000000", "default");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, N, &l), N);
  l2_read_release_range(s, 0, N, 0);
  ck_assert_uint_eq(tier_stats(s).skipped_slow_keys, 0);
  l2_finish(rt);
}
END_TEST

/* kva_plan_load: the L1 hits are always worth it; the slow tier is not
 * asked by a prefix engine (it holds nothing worth loading), is asked by
 * one that can split (which would gain from it) but its keys are skipped
 * for a prefix; a slower reported prefill (1000 tokens/s: C = 256 ms)
 * makes them worth loading. */
START_TEST(plan_load_reports_what_is_worth_loading) {
  kva_runtime *rt = start("500000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  stored_in_l2_only(s, &l);
  fixture_write(s, 0, 2, &l); /* keys 0 and 1 in L1 again */
  kva_key k[N];
  for (size_t i = 0; i < N; i++) k[i] = fixture_key(i);
  kva_load_plan p;
  ck_assert_int_eq(kva_plan_load(s, k, N, &l, 0, &p), KVA_OK);
  ck_assert_uint_eq(p.found.total, 2);
  ck_assert_uint_eq(p.worth, 2);
  ck_assert_uint_eq(p.not_asked, 1u << 1);
  ck_assert_uint_eq(tier_stats(s).lookups_skipped, 1);
  ck_assert_int_eq(kva_plan_load(s, k, N, &l, KVA_PLAN_SPLIT, &p), KVA_OK);
  ck_assert_uint_eq(p.not_asked, 0);
  ck_assert_uint_eq(p.found.total, N);
  ck_assert_uint_eq(p.found.tier[0].hits, 2);
  ck_assert_uint_eq(p.worth, 2);
  ck_assert_uint_eq(p.skipped[0], 0);
  ck_assert_uint_eq(p.skipped[1], N - 2);
  ck_assert_msg(p.split_s < p.recompute_s, "split %g, recompute %g", p.split_s, p.recompute_s);
  ck_assert_msg(p.recompute_s <= p.load_s + 1e-12, "recompute %g > load %g", p.recompute_s,
                p.load_s);
  ck_assert_int_eq(kva_report_prefill(s, fixture_key(0).model, 256, 1000, 1000000000ull), KVA_OK);
  ck_assert_int_eq(kva_plan_load(s, k, N, &l, 0, &p), KVA_OK);
  ck_assert_uint_eq(p.worth, N);
  ck_assert_uint_eq(p.skipped[1], 0);
  /* bad input */
  ck_assert_int_eq(kva_plan_load(s, k, N, NULL, 0, &p), KVA_EINVAL);
  ck_assert_int_eq(kva_plan_load(s, k, N, &l, 0, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_plan_load(s, k, N, &l, 4, &p), KVA_EINVAL); /* no such flag */
  ck_assert_int_eq(kva_report_prefill(s, "", 256, 1, 1), KVA_EINVAL);
  ck_assert_int_eq(kva_report_prefill(s, "m", 256, 0, 1), KVA_EINVAL);
  ck_assert_int_eq(kva_report_prefill(s, "m", 256, 1, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_report_prefill(NULL, "m", 256, 1, 1), KVA_EINVAL);
  l2_finish(rt);
}
END_TEST

/* With pin, the L1 hits stay pinned until kva_unpin, as kva_lookup's. */
START_TEST(plan_load_pins_the_l1_hits) {
  kva_runtime *rt = start("500000000", "load_or_recompute");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MIB);
  fixture_write(s, 0, 3, &l);
  kva_key k[4];
  for (size_t i = 0; i < 4; i++) k[i] = fixture_key(i);
  kva_load_plan p;
  ck_assert_int_eq(kva_plan_load(s, k, 4, &l, 1, &p), KVA_OK);
  ck_assert_uint_eq(p.worth, 3);
  kva_memcheck_report r;
  char report[512];
  ck_assert_int_eq(kva_memcheck_with(s, NULL, &r, report, sizeof(report)), KVA_EIO);
  ck_assert_uint_eq(r.caller_pinned, 3);
  ck_assert_int_eq(kva_unpin(s, k, 3), 3);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_load_or_recompute");
  TCase *tc = tcase_create("policy");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, the_meter_measures_the_mock_bandwidth);
  tcase_add_test(tc, a_tier_too_slow_for_any_chunk_is_not_asked);
  tcase_add_test(tc, a_queue_makes_found_keys_skipped_and_counted);
  tcase_add_test(tc, a_prefetch_as_planned_is_not_judged_again);
  tcase_add_test(tc, a_fast_tier_is_loaded_in_full);
  tcase_add_test(tc, the_default_policy_loads_a_slow_tier_all_the_same);
  tcase_add_test(tc, plan_load_reports_what_is_worth_loading);
  tcase_add_test(tc, plan_load_pins_the_l1_hits);
  suite_add_tcase(s, tc);
  return s;
}
