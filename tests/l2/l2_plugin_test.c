/*
 * l2_plugin_test.c — a user's own L2 adapter ("tiny",
 * tests/support/plugin_adapter.c, written only against kvact.h),
 * registered with kva_l2_register and driven through the whole stack (the
 * README's "Writing your own L2 adapter" points here). Nothing here
 * includes kvact's internal headers.
 */
#include <check.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/plugin_adapter.h"

#define MiB (1024u * 1024u)

static void register_tiny(void) {
  int rc = plugin_tiny_register();
  ck_assert(rc == KVA_OK || rc == KVA_EINVAL); /* EINVAL: registered by an earlier test */
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(register_refuses_bad_arguments) {
  register_tiny();
  ck_assert_int_eq(kva_l2_register(NULL, plugin_tiny_factory), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("", plugin_tiny_factory), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("x", NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("mock", plugin_tiny_factory), KVA_EINVAL); /* taken */
  ck_assert_int_eq(kva_l2_register("tiny", plugin_tiny_factory), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("a-name-that-is-longer-than-31-bytes", plugin_tiny_factory),
                   KVA_EINVAL);
}
END_TEST

/* Writes n keys with bytes derived from their index, finishes them. */
static void write_keys(kva_storage *s, kva_key *k, size_t n, const kva_layout *l) {
  kva_buf b[8];
  int st[8];
  ck_assert_int_eq(kva_reserve_write(s, k, n, l, KVA_WRITE_NEW, b, st), (int)n);
  for (size_t i = 0; i < n; i++) memset(b[i].ptr, (int)(0x40 + i), b[i].len);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), (int)n);
}

static void check_tier(kva_runtime *rt, const char *tier, int workers) {
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  for (int i = 0; i < 4; i++) k[i] = fixture_key(100 + (uint64_t)i);
  write_keys(s, k, 4, &l);
  ck_assert_int_eq(kva_flush(s, 10000), KVA_OK);
  ck_assert_int_eq(kva_l2_contains(s, tier, &k[3]), 1);
  ck_assert_int_eq(kva_clear(s, 0), 4);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, k, 4, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 4);
  ck_assert_uint_eq(th.ntiers, 2);
  ck_assert_str_eq(th.tier[1].name, tier);
  ck_assert_uint_eq(th.tier[1].hits, 4);
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 4);
  kva_buf b[4];
  ck_assert_int_eq(kva_read_prefetched(s, k, 4, b), KVA_OK);
  for (int i = 0; i < 4; i++)
    for (size_t o = 0; o < b[i].len; o++) ck_assert_uint_eq(((uint8_t *)b[i].ptr)[o], 0x40 + i);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  fixture_memcheck_clean(s);
  (void)workers;
}

START_TEST(a_registered_adapter_serves_the_whole_stack) {
  register_tiny();
  kva_runtime *rt =
      fixture_storage(2, 16 * MiB, "l2=[{\"type\":\"tiny\",\"name\":\"fast\"}]", NULL);
  check_tier(rt, "fast", 2);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(a_registered_adapter_in_deterministic_mode) {
  register_tiny();
  kva_runtime *rt = fixture_storage(0, 16 * MiB, "l2=[{\"type\":\"tiny\"}]", NULL);
  check_tier(rt, "tiny0", 0);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(unknown_type_and_failing_factory_stop_the_start) {
  register_tiny();
  kva_config *c = kva_config_default();
  ck_assert_int_eq(kva_config_set(c, "l2", "[{\"type\":\"nosuch\"}]"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.size_bytes", "16777216"), KVA_OK);
  kva_runtime *rt = NULL;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_ECONFIG);
  ck_assert_ptr_null(rt);
  ck_assert_int_eq(kva_config_set(c, "l2", "[{\"type\":\"tiny\",\"refuse\":1}]"), KVA_OK);
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_ECONFIG);
  ck_assert_ptr_null(rt);
  kva_config_free(c);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_plugin");
  TCase *tc = tcase_create("plugin");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, register_refuses_bad_arguments);
  tcase_add_test(tc, a_registered_adapter_serves_the_whole_stack);
  tcase_add_test(tc, a_registered_adapter_in_deterministic_mode);
  tcase_add_test(tc, unknown_type_and_failing_factory_stop_the_start);
  suite_add_tcase(su, tc);
  return su;
}
