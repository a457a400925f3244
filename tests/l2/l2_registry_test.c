/*
 * l2_registry_test.c — the L2 registries (l2/registry.h): adapter types,
 * store and prefetch policies follow one rule (common/registry.h): a taken
 * name is refused with KVA_EINVAL, the built-ins cannot be replaced, and
 * the names list the built-ins first, then registrations in order.
 */
#include <check.h>
#include <pthread.h>
#include <string.h>

#include "kvact.h"
#include "l2/registry.h"
#include "tests/support/fixture.h"

static kva_actor *no_adapter(kva_runtime *rt, const kva_config_node *cfg, char *err,
                             size_t errlen) {
  (void)rt, (void)cfg, (void)err, (void)errlen;
  return NULL;
}

static void no_targets(void *arg, const kva_key *k, size_t n, uint32_t ntiers, uint8_t *t) {
  (void)arg, (void)k, (void)ntiers;
  memset(t, 0, n);
}

static void no_deletions(void *arg, uint32_t tier, const kva_key *k, size_t n, uint8_t *del) {
  (void)arg, (void)tier, (void)k, (void)n, (void)del;
}

static void no_plan(void *arg, size_t n, uint32_t ntiers, const uint8_t *const *found,
                    int8_t *plan) {
  (void)arg, (void)ntiers, (void)found;
  memset(plan, -1, n);
}

START_TEST(builtin_adapter_types_cannot_be_replaced) {
  const char *builtin[] = {"mock", "disk", "redis"};
  for (int i = 0; i < 3; i++) {
    kva_l2_factory before = l2_factory_find(builtin[i]);
    ck_assert_ptr_nonnull(before);
    ck_assert_int_eq(kva_l2_register(builtin[i], no_adapter), KVA_EINVAL);
    ck_assert(l2_factory_find(builtin[i]) == before);
  }
}
END_TEST

START_TEST(a_registered_adapter_type_is_taken_too) {
  ck_assert_int_eq(kva_l2_register("mine", no_adapter), KVA_OK);
  ck_assert(l2_factory_find("mine") == no_adapter);
  ck_assert_int_eq(kva_l2_register("mine", no_adapter), KVA_EINVAL);
  ck_assert_ptr_null(l2_factory_find("Mine"));
}
END_TEST

START_TEST(builtin_store_policies_cannot_be_replaced) {
  const char *builtin[] = {"default", "skip_l1"};
  for (int i = 0; i < 2; i++) {
    kva_store_policy before, after;
    ck_assert_int_eq(store_policy_find(builtin[i], &before), KVA_OK);
    ck_assert_str_eq(before.name, builtin[i]);
    kva_store_policy p = {builtin[i], no_targets, no_deletions, NULL};
    ck_assert_int_eq(kva_store_policy_register(&p), KVA_EINVAL);
    ck_assert_int_eq(store_policy_find(builtin[i], &after), KVA_OK);
    ck_assert(after.select_targets == before.select_targets &&
              after.select_l1_deletions == before.select_l1_deletions);
  }
  kva_store_policy mine = {"mine", no_targets, no_deletions, NULL};
  ck_assert_int_eq(kva_store_policy_register(&mine), KVA_OK);
  ck_assert_int_eq(kva_store_policy_register(&mine), KVA_EINVAL);
}
END_TEST

START_TEST(builtin_prefetch_policy_cannot_be_replaced) {
  kva_prefetch_policy before, after;
  ck_assert_int_eq(prefetch_policy_find("default", &before), KVA_OK);
  kva_prefetch_policy p = {"default", no_plan, NULL};
  ck_assert_int_eq(kva_prefetch_policy_register(&p), KVA_EINVAL);
  ck_assert_int_eq(prefetch_policy_find("default", &after), KVA_OK);
  ck_assert(after.select_load_plan == before.select_load_plan);
  p.name = "mine";
  ck_assert_int_eq(kva_prefetch_policy_register(&p), KVA_OK);
  ck_assert_int_eq(kva_prefetch_policy_register(&p), KVA_EINVAL);
}
END_TEST

/* A found policy's name is the registry's copy, not the caller's. */
START_TEST(registered_policies_are_copied_with_their_names) {
  char name[32] = "copied";
  kva_store_policy p = {name, no_targets, no_deletions, &name};
  ck_assert_int_eq(kva_store_policy_register(&p), KVA_OK);
  memset(name, 'x', sizeof name - 1);
  kva_store_policy got;
  ck_assert_int_eq(store_policy_find("copied", &got), KVA_OK);
  ck_assert_str_eq(got.name, "copied");
  ck_assert(got.name != name && got.arg == (void *)&name);
}
END_TEST

START_TEST(names_list_the_builtins_first_then_registrations) {
  char buf[256];
  l2_adapter_names(", ", buf, sizeof buf);
  ck_assert_str_eq(buf, "mock, disk, redis");
  store_policy_names(" ", buf, sizeof buf);
  ck_assert_str_eq(buf, "default skip_l1");
  ck_assert_uint_eq(prefetch_policy_names(" ", buf, sizeof buf),
                    strlen("default load_or_recompute"));
  ck_assert_str_eq(buf, "default load_or_recompute");
  ck_assert_int_eq(kva_l2_register("mine", no_adapter), KVA_OK);
  kva_prefetch_policy p = {"mine", no_plan, NULL};
  ck_assert_int_eq(kva_prefetch_policy_register(&p), KVA_OK);
  l2_adapter_names(", ", buf, sizeof buf);
  ck_assert_str_eq(buf, "mock, disk, redis, mine");
  prefetch_policy_names(" ", buf, sizeof buf);
  ck_assert_str_eq(buf, "default load_or_recompute mine");
}
END_TEST

static void *register_race(void *arg) {
  (void)arg;
  return (void *)(intptr_t)kva_l2_register("race", no_adapter);
}

/* Threads registering the same name at once, the first of them also the
 * first use: exactly one wins, and the built-ins are all there. */
START_TEST(racing_registrations_of_one_name_admit_exactly_one) {
  pthread_t th[8];
  void *rc;
  int ok = 0;
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, register_race, NULL), 0);
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(pthread_join(th[i], &rc), 0);
    if ((intptr_t)rc == KVA_OK)
      ok++;
    else
      ck_assert_int_eq((intptr_t)rc, KVA_EINVAL);
  }
  ck_assert_int_eq(ok, 1);
  ck_assert_ptr_nonnull(l2_factory_find("mock"));
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_registry");
  TCase *tc = tcase_create("registry");
  tcase_add_test(tc, builtin_adapter_types_cannot_be_replaced);
  tcase_add_test(tc, a_registered_adapter_type_is_taken_too);
  tcase_add_test(tc, builtin_store_policies_cannot_be_replaced);
  tcase_add_test(tc, builtin_prefetch_policy_cannot_be_replaced);
  tcase_add_test(tc, registered_policies_are_copied_with_their_names);
  tcase_add_test(tc, names_list_the_builtins_first_then_registrations);
  tcase_add_test(tc, racing_registrations_of_one_name_admit_exactly_one);
  suite_add_tcase(s, tc);
  return s;
}
