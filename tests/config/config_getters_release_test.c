/*
 * config_getters_release_test.c — in a release build (config/ compiled
 * with NDEBUG, tests/config/BUILD.bazel), the library's own getters go on past a
 * path the schema lacks with the type's zero value instead of aborting,
 * and still read real keys.
 */
#include <check.h>
#include <string.h>

#include "config/config_internal.h"
#include "kvact.h"

START_TEST(missing_paths_read_as_zero_values) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(config_i64(c, "l1.size_byte"), 0);
  ck_assert(config_f64(c, "eviction.rate") == 0.0);
  ck_assert(!config_bool(c, "runtime.stat"));
  ck_assert_str_eq(config_str(c, "l1.size_bytes"), ""); /* another type */
  ck_assert_int_eq(config_bool_auto(c, "eviction.policy"), CONFIG_AUTO);
  ck_assert_int_eq(config_i64(NULL, "l1.size_bytes"), 0);
  kva_config_free(c);
}
END_TEST

START_TEST(real_keys_still_read_their_values) {
  kva_config *c = kva_config_default();
  ck_assert_int_eq(config_i64(c, "l1.size_bytes"), 1073741824);
  ck_assert_str_eq(config_str(c, "eviction.policy"), "lru");
  ck_assert_int_eq(config_bool_auto(c, "l1.pinned"), CONFIG_AUTO);
  kva_config_free(c);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("config_getters_release");
  TCase *tc = tcase_create("release");
  tcase_add_test(tc, missing_paths_read_as_zero_values);
  tcase_add_test(tc, real_keys_still_read_their_values);
  suite_add_tcase(s, tc);
  return s;
}
