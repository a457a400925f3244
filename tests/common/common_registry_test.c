/*
 * common_registry_test.c — common/registry.h, the one registry behind
 * adapter types and policies: built-ins go in before the first use of any
 * kind, a taken name is refused, values are copies that stay put, names
 * are checked and listed in order, a full registry says KVA_ENOMEM.
 */
#include <check.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/registry.h"
#include "kvact.h"

typedef struct thing {
  int x;
  const char *name;
} thing;

static int builtins_runs; /* runs of thing_builtins, in this process */

static void thing_builtins(void);
REGISTRY_DEFINE(things, thing, thing_builtins, offsetof(thing, name));

static void thing_builtins(void) {
  builtins_runs++;
  registry_put(&things, "one", &(thing){1, NULL});
  registry_put(&things, "two", &(thing){2, NULL});
}

static int x_of(const char *name) {
  const thing *t = registry_find(&things, name);
  return t ? t->x : -1;
}

/* Each test is a forked process: the registry starts empty in each. */

START_TEST(builtins_go_in_before_the_first_registration) {
  ck_assert_int_eq(registry_add(&things, "one", &(thing){100, NULL}), KVA_EINVAL);
  ck_assert_int_eq(x_of("one"), 1);
  ck_assert_int_eq(x_of("two"), 2);
  ck_assert_int_eq(builtins_runs, 1);
}
END_TEST

START_TEST(a_taken_name_is_refused_and_the_first_value_stays) {
  ck_assert_int_eq(registry_add(&things, "three", &(thing){3, NULL}), KVA_OK);
  ck_assert_int_eq(registry_add(&things, "three", &(thing){33, NULL}), KVA_EINVAL);
  ck_assert_int_eq(registry_add(&things, "two", &(thing){22, NULL}), KVA_EINVAL);
  ck_assert_int_eq(x_of("three"), 3);
  ck_assert_int_eq(x_of("two"), 2);
  ck_assert_int_eq(x_of("Three"), -1); /* case-sensitive */
}
END_TEST

START_TEST(bad_names_are_refused) {
  char longest[REGISTRY_NAME_MAX + 2];
  memset(longest, 'n', sizeof longest);
  longest[REGISTRY_NAME_MAX + 1] = '\0';
  ck_assert_int_eq(registry_add(&things, NULL, &(thing){0, NULL}), KVA_EINVAL);
  ck_assert_int_eq(registry_add(&things, "", &(thing){0, NULL}), KVA_EINVAL);
  ck_assert_int_eq(registry_add(&things, longest, &(thing){0, NULL}), KVA_EINVAL);
  longest[REGISTRY_NAME_MAX] = '\0'; /* 31 bytes: fits */
  ck_assert_int_eq(registry_add(&things, longest, &(thing){31, NULL}), KVA_OK);
  ck_assert_int_eq(x_of(longest), 31);
  ck_assert_int_eq(registry_add(&things, "null", NULL), KVA_EINVAL);
  ck_assert_ptr_null(registry_find(&things, NULL));
}
END_TEST

/* The value is copied, its name pointed at the registry's copy, and a
 * found value keeps its address. */
START_TEST(values_are_copies_that_stay_put) {
  char name[8] = "mine";
  thing t = {7, "not this"};
  ck_assert_int_eq(registry_add(&things, name, &t), KVA_OK);
  t.x = 0;
  memset(name, 'x', sizeof name - 1);
  const thing *found = registry_find(&things, "mine");
  ck_assert_int_eq(found->x, 7);
  ck_assert_str_eq(found->name, "mine");
  ck_assert_str_eq(((const thing *)registry_find(&things, "one"))->name, "one");
  for (int i = 0; i < 20; i++) {
    char n[16];
    snprintf(n, sizeof n, "more%d", i);
    ck_assert_int_eq(registry_add(&things, n, &(thing){i, NULL}), KVA_OK);
  }
  ck_assert_ptr_eq(registry_find(&things, "mine"), found);
}
END_TEST

START_TEST(a_full_registry_says_enomem) {
  int ok = 0, rc = KVA_OK;
  for (int i = 0; rc == KVA_OK; i++) {
    char n[16];
    snprintf(n, sizeof n, "n%d", i);
    if ((rc = registry_add(&things, n, &(thing){i, NULL})) == KVA_OK) ok++;
  }
  ck_assert_int_eq(rc, KVA_ENOMEM);
  ck_assert_int_eq(ok, REGISTRY_CAP - 2);
  ck_assert_int_eq(registry_add(&things, "one", &(thing){0, NULL}), KVA_EINVAL); /* still taken */
  ck_assert_int_eq(x_of("n0"), 0);
}
END_TEST

START_TEST(names_are_listed_in_order_and_cut_safely) {
  char buf[64];
  ck_assert_uint_eq(registry_names(&things, ", ", buf, sizeof buf), 8);
  ck_assert_str_eq(buf, "one, two");
  ck_assert_int_eq(registry_add(&things, "three", &(thing){3, NULL}), KVA_OK);
  ck_assert_uint_eq(registry_names(&things, " ", buf, sizeof buf), 13);
  ck_assert_str_eq(buf, "one two three");
  char small[6];
  ck_assert_uint_eq(registry_names(&things, " ", small, sizeof small), 13);
  ck_assert_str_eq(small, "one t");
  ck_assert_uint_eq(registry_names(&things, " ", NULL, 0), 13);
}
END_TEST

static void *add_same(void *arg) {
  (void)arg;
  return (void *)(intptr_t)registry_add(&things, "same", &(thing){9, NULL});
}

/* Racing first uses: the built-ins go in once, one add of a name wins. */
START_TEST(racing_adds_of_one_name_admit_exactly_one) {
  pthread_t th[8];
  void *rc;
  int ok = 0;
  for (int i = 0; i < 8; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, add_same, NULL), 0);
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(pthread_join(th[i], &rc), 0);
    ok += (intptr_t)rc == KVA_OK;
  }
  ck_assert_int_eq(ok, 1);
  ck_assert_int_eq(builtins_runs, 1);
  ck_assert_int_eq(x_of("same"), 9);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("common_registry");
  TCase *tc = tcase_create("registry");
  tcase_add_test(tc, builtins_go_in_before_the_first_registration);
  tcase_add_test(tc, a_taken_name_is_refused_and_the_first_value_stays);
  tcase_add_test(tc, bad_names_are_refused);
  tcase_add_test(tc, values_are_copies_that_stay_put);
  tcase_add_test(tc, a_full_registry_says_enomem);
  tcase_add_test(tc, names_are_listed_in_order_and_cut_safely);
  tcase_add_test(tc, racing_adds_of_one_name_admit_exactly_one);
  suite_add_tcase(s, tc);
  return s;
}
