/*
 * l2_mock_test_lmcache.c — every scenario of LMCache's
 * tests/v1/distributed/test_mock_l2_adapter.py, in threaded mode (its
 * adapter runs on a background thread too). Its event fds are our replies
 * on the sender's port, its task ids our tags, its "query once" our
 * "answered exactly once".
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_mock_test.h"
#include "tests/support/fixture.h"

/* Its fixtures: 1 MB at 10 GB/s, and objects of 1024 floats. */
#define LMC_OPTS "\"capacity_bytes\":1048576,\"bandwidth_bytes_per_s\":10000000000"
#define LMC_OBJ 4096u

static mk lmc_open(void) {
  return mk_open(2, LMC_OPTS);
}

/* The task types of its interface, in workflow order. */
static const uint32_t types[] = {KVA_L2_STORE, KVA_L2_LOOKUP_AND_LOCK, KVA_L2_LOAD};

static kva_l2_req lmc_req(objs *o, uint32_t type) {
  kva_l2_req r = {.keys = o->k, .n = o->n};
  if (type != KVA_L2_LOOKUP_AND_LOCK) r.layout = &o->l, r.bufs = o->b;
  if (type != KVA_L2_STORE) r.bits = o->bits;
  return r;
}

/* TestEventFdInterface: a completion makes the sender's port eventfd
 * readable (one doorbell per port, not one per operation: requests are
 * told apart by tag). */
START_TEST(lmcache_each_completion_makes_the_port_fd_readable) {
  mk h = lmc_open();
  ck_assert_int_ge(kva_actor_eventfd(h.a), 0);
  ck_assert_int_ne(kva_actor_eventfd(h.a), kva_port_fd(h.port));
  objs *o = objs_make(1, 1, LMC_OBJ, 1);
  for (int i = 0; i < 3; i++) {
    kva_l2_req r = lmc_req(o, types[i]);
    uint64_t tag = mk_send(&h, types[i], &r);
    struct pollfd pf = {.fd = kva_port_fd(h.port), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, WAIT_MS), 1);
    mk_expect_reply(&h, tag, &r);
    ck_assert_int_eq(r.result, KVA_OK);
  }
  mk_unlock_free(&h, o);
  mk_close(&h);
}
END_TEST

/* submit_*_task returns a task id: here every request comes back under its
 * own tag with its own pointer, whatever the order. */
START_TEST(lmcache_each_request_is_answered_under_its_own_tag) {
  mk h = lmc_open();
  objs *o = objs_make(1, 1, LMC_OBJ, 1);
  ck_assert_int_eq(mk_store(&h, o), KVA_OK);
  kva_l2_req r[3];
  uint64_t tags[3], seen = 0;
  for (int i = 0; i < 3; i++) r[i] = lmc_req(o, types[i]), tags[i] = mk_send(&h, types[i], &r[i]);
  for (int n = 0; n < 3; n++) {
    uint64_t tag;
    int i = (int)(mk_next_reply(&h, WAIT_MS, &tag) - r);
    ck_assert(i >= 0 && i < 3 && tags[i] == tag && !(seen >> i & 1));
    seen |= 1u << i;
  }
  mk_unlock_free(&h, o);
  mk_close(&h);
}
END_TEST

/* pop_completed_store_tasks: success once; popped again: nothing. The same
 * for lookup and load results, and nothing ever for a task never sent. */
START_TEST(lmcache_a_completion_is_reported_exactly_once) {
  mk h = lmc_open();
  objs *o = objs_make(1, 1, LMC_OBJ, 1);
  ck_assert_int_eq(mk_store(&h, o), KVA_OK);
  mk_expect_silence(&h, 100);
  ck_assert_uint_eq(mk_lookup(&h, o), 1);
  mk_expect_silence(&h, 100);
  ck_assert_uint_eq(mk_load(&h, o), 1);
  mk_expect_silence(&h, 100);
  mk_unlock_free(&h, o);
  mk_close(&h);
}
END_TEST

START_TEST(lmcache_several_store_tasks_each_succeed) {
  mk h = lmc_open();
  objs *o[3];
  kva_l2_req r[3];
  for (int i = 0; i < 3; i++) {
    o[i] = objs_make((uint64_t)i, 1, LMC_OBJ, i);
    r[i] = lmc_req(o[i], KVA_L2_STORE);
    mk_send(&h, KVA_L2_STORE, &r[i]);
  }
  for (int n = 0; n < 3; n++) {
    uint64_t tag;
    ck_assert_int_eq(mk_next_reply(&h, WAIT_MS, &tag)->result, KVA_OK);
  }
  ck_assert_uint_eq(mk_present(&h, 0, 3), 7);
  for (int i = 0; i < 3; i++) objs_free(o[i]);
  mk_close(&h);
}
END_TEST

START_TEST(lmcache_one_store_task_stores_a_batch) {
  mk h = lmc_open();
  ck_assert_int_eq(mk_store_range(&h, 0, 5, LMC_OBJ, 3), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 5), 0x1f);
  ck_assert_uint_eq(mk_load_check(&h, 0, 5, LMC_OBJ, 3), 0x1f);
  mk_close(&h);
}
END_TEST

/* TestLookupAndLockInterface: missing 0, stored 1, mixed 1 then 0. */
START_TEST(lmcache_lookup_sets_the_bits_of_stored_keys_only) {
  mk h = lmc_open();
  ck_assert_uint_eq(mk_present(&h, 999, 1), 0);
  ck_assert_int_eq(mk_store_range(&h, 1, 1, LMC_OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 1, 1), 1);
  objs *mixed = objs_make(1, 2, 1, -1);
  mixed->k[1] = fixture_key(999);
  ck_assert_uint_eq(mk_lookup(&h, mixed), 1);
  mk_unlock_free(&h, mixed);
  mk_close(&h);
}
END_TEST

/* TestUnlockInterface */
START_TEST(lmcache_unlock_of_a_missing_key_is_harmless) {
  mk h = lmc_open();
  objs *o = objs_make(1, 1, 1, -1);
  mk_unlock(&h, o);
  ck_assert_uint_eq(mk_stats(&h).objects, 0);
  objs_free(o);
  mk_close(&h);
}
END_TEST

START_TEST(lmcache_unlock_after_lookup_releases_the_lock) {
  mk h = lmc_open();
  objs *o = objs_make(1, 1, LMC_OBJ, 0);
  ck_assert_int_eq(mk_store(&h, o), KVA_OK);
  ck_assert_uint_eq(mk_lookup(&h, o), 1);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 1);
  mk_unlock_free(&h, o);
  mk_close(&h);
}
END_TEST

/* TestLoadInterface: a missing key fails; a stored one is copied. */
START_TEST(lmcache_load_of_a_missing_key_clears_its_bit) {
  mk h = lmc_open();
  ck_assert_uint_eq(mk_load_check(&h, 999, 1, LMC_OBJ, 0), 0);
  ck_assert_uint_eq(mk_stats(&h).load_failures, 1);
  mk_close(&h);
}
END_TEST

/* n floats of value v as one object of key `key`. */
static objs *floats(uint64_t key, size_t n, float v) {
  objs *o = objs_make(key, 1, n * sizeof(float), -1);
  for (size_t j = 0; j < n; j++) ((float *)o->b[0].ptr)[j] = v;
  return o;
}

static int all_floats(const objs *o, float v) {
  for (size_t j = 0; j < o->b[0].len / sizeof(float); j++)
    if (((const float *)o->b[0].ptr)[j] != v) return 0;
  return 1;
}

START_TEST(lmcache_load_copies_the_stored_data) {
  mk h = lmc_open();
  objs *in = floats(1, 100, 42.0f), *out = floats(1, 100, 0.0f);
  ck_assert_int_eq(mk_store(&h, in), KVA_OK);
  ck_assert_uint_eq(mk_load(&h, out), 1);
  ck_assert(all_floats(out, 42.0f));
  objs_free(in);
  objs_free(out);
  mk_close(&h);
}
END_TEST

/* TestEndToEndWorkflow */
START_TEST(lmcache_store_lookup_load_unlock_workflow) {
  mk h = lmc_open();
  objs *in = floats(1, 256, 123.0f), *out = floats(1, 256, 0.0f);
  ck_assert_int_eq(mk_store(&h, in), KVA_OK);
  ck_assert_uint_eq(mk_lookup(&h, in), 1);
  ck_assert_uint_eq(mk_load(&h, out), 1);
  ck_assert(all_floats(out, 123.0f));
  mk_unlock(&h, in);
  objs_free(in);
  objs_free(out);
  mk_close(&h);
}
END_TEST

START_TEST(lmcache_workflow_with_several_objects) {
  mk h = lmc_open();
  objs *in = objs_make(0, 5, 64 * sizeof(float), -1),
       *out = objs_make(0, 5, 64 * sizeof(float), -1);
  for (size_t i = 0; i < 5; i++)
    for (size_t j = 0; j < 64; j++) ((float *)in->b[i].ptr)[j] = (float)(i * 10);
  ck_assert_int_eq(mk_store(&h, in), KVA_OK);
  ck_assert_uint_eq(mk_lookup(&h, in), 0x1f);
  ck_assert_uint_eq(mk_load(&h, out), 0x1f);
  for (size_t i = 0; i < 5; i++) ck_assert_mem_eq(out->b[i].ptr, in->b[i].ptr, 64 * sizeof(float));
  mk_unlock(&h, in);
  objs_free(in);
  objs_free(out);
  mk_close(&h);
}
END_TEST

/* TestCloseInterface: shutdown with and without traffic (LSan checks that
 * everything was freed). */
START_TEST(lmcache_close_without_requests) {
  mk h = lmc_open();
  mk_shutdown(&h);
}
END_TEST

START_TEST(lmcache_close_after_requests) {
  mk h = lmc_open();
  ck_assert_int_eq(mk_store_range(&h, 1, 1, LMC_OBJ, 0), KVA_OK);
  mk_shutdown(&h);
}
END_TEST

/* TestBandwidthSimulation, on the real clock: a lower bound only. */
START_TEST(lmcache_store_completion_is_delayed_by_bandwidth) {
  mk h = mk_open(2, "\"bandwidth_bytes_per_s\":100000");
  uint64_t t0 = fixture_now_ns();
  ck_assert_int_eq(mk_store_range(&h, 1, 1, 40000, 0), KVA_OK); /* 0.4 s */
  ck_assert_uint_ge(fixture_now_ns() - t0, 400000000ull);
  mk_close(&h);
}
END_TEST

START_TEST(lmcache_fast_bandwidth_completes_quickly) {
  mk h = lmc_open();
  uint64_t t0 = fixture_now_ns();
  ck_assert_int_eq(mk_store_range(&h, 1, 1, LMC_OBJ, 0), KVA_OK);
  ck_assert_uint_lt(fixture_now_ns() - t0, 1000000000ull);
  mk_close(&h);
}
END_TEST

TCase *l2_mock_lmcache_tcase(void) {
  TCase *t = tcase_create("lmcache");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, lmcache_each_completion_makes_the_port_fd_readable);
  tcase_add_test(t, lmcache_each_request_is_answered_under_its_own_tag);
  tcase_add_test(t, lmcache_a_completion_is_reported_exactly_once);
  tcase_add_test(t, lmcache_several_store_tasks_each_succeed);
  tcase_add_test(t, lmcache_one_store_task_stores_a_batch);
  tcase_add_test(t, lmcache_lookup_sets_the_bits_of_stored_keys_only);
  tcase_add_test(t, lmcache_unlock_of_a_missing_key_is_harmless);
  tcase_add_test(t, lmcache_unlock_after_lookup_releases_the_lock);
  tcase_add_test(t, lmcache_load_of_a_missing_key_clears_its_bit);
  tcase_add_test(t, lmcache_load_copies_the_stored_data);
  tcase_add_test(t, lmcache_store_lookup_load_unlock_workflow);
  tcase_add_test(t, lmcache_workflow_with_several_objects);
  tcase_add_test(t, lmcache_close_without_requests);
  tcase_add_test(t, lmcache_close_after_requests);
  tcase_add_test(t, lmcache_store_completion_is_delayed_by_bandwidth);
  tcase_add_test(t, lmcache_fast_bandwidth_completes_quickly);
  return t;
}
