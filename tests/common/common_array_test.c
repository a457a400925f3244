/*
 * common_array_test.c — common/array.h: capacities double from
 * ARRAY_FIRST_CAP, overflow is refused, and a failed growth (overflow or
 * realloc) leaves the array and its capacity as they were.
 *
 * common/array.c is built here with realloc renamed to test_realloc
 * (tests/common/BUILD.bazel), so that a test can make the next realloc fail.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"

static int reallocs;     /* calls of realloc made by array.c */
static int fail_realloc; /* the next realloc of array.c fails */

void *test_realloc(void *p, size_t n);
void *test_realloc(void *p, size_t n) {
  reallocs++;
  if (fail_realloc) {
    fail_realloc = 0;
    return NULL;
  }
  return realloc(p, n);
}

static void setup(void) {
  reallocs = 0;
  fail_realloc = 0;
}

/* An int array of n elements 0..n-1 (capacity *cap). */
static int *filled(size_t n, size_t *cap) {
  int *a = NULL;
  *cap = 0;
  ck_assert(ARRAY_GROW(a, cap, n));
  for (size_t i = 0; i < n; i++) a[i] = (int)i;
  return a;
}

static void assert_filled(const int *a, size_t n) {
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(a[i], (int)i);
}

START_TEST(next_cap_doubles_from_the_first_capacity) {
  ck_assert_uint_eq(array_next_cap(0, 1, 4), ARRAY_FIRST_CAP);
  ck_assert_uint_eq(array_next_cap(0, ARRAY_FIRST_CAP + 1, 4), 2 * ARRAY_FIRST_CAP);
  ck_assert_uint_eq(array_next_cap(16, 17, 4), 32);
  ck_assert_uint_eq(array_next_cap(16, 1000, 4), 1024);
  ck_assert_uint_eq(array_next_cap(24, 25, 4), 48); /* doubles the capacity it is given */
  ck_assert_uint_eq(array_next_cap(64, 64, 4), 64); /* enough already */
  ck_assert_uint_eq(array_next_cap(64, 0, 4), 64);
}
END_TEST

START_TEST(next_cap_refuses_what_no_object_can_hold) {
  size_t max = (size_t)PTRDIFF_MAX / 8;
  ck_assert_uint_eq(array_next_cap(0, max + 1, 8), 0);
  ck_assert_uint_eq(array_next_cap(16, SIZE_MAX, 1), 0);
  ck_assert_uint_eq(array_next_cap(0, 1, 0), 0);
  /* doubling would pass the limit: the limit itself, which holds need */
  ck_assert_uint_eq(array_next_cap(max / 2 + 1, max, 8), max);
  ck_assert_uint_eq(array_next_cap(0, 1, (size_t)PTRDIFF_MAX), 1);
}
END_TEST

START_TEST(grow_keeps_the_contents_and_reallocates_log_times) {
  size_t cap;
  int *a = filled(1, &cap);
  ck_assert_uint_eq(cap, ARRAY_FIRST_CAP);
  for (size_t n = 1; n < 1000; n++) {
    ck_assert(ARRAY_GROW(a, &cap, n + 1));
    a[n] = (int)n;
  }
  assert_filled(a, 1000);
  ck_assert_uint_eq(cap, 1024);
  ck_assert_int_eq(reallocs, 7); /* 16, 32, ..., 1024 */
  free(a);
}
END_TEST

START_TEST(grow_within_the_capacity_does_nothing) {
  size_t cap;
  int *a = filled(10, &cap), *before = a;
  reallocs = 0;
  ck_assert(ARRAY_GROW(a, &cap, cap));
  ck_assert(ARRAY_GROW(a, &cap, 0));
  ck_assert(a == before && cap == ARRAY_FIRST_CAP && reallocs == 0);
  free(a);
}
END_TEST

START_TEST(overflow_fails_and_leaves_the_array_intact) {
  size_t cap;
  int *a = filled(ARRAY_FIRST_CAP, &cap), *before = a;
  reallocs = 0;
  ck_assert(!ARRAY_GROW(a, &cap, SIZE_MAX / 2));
  ck_assert(!ARRAY_GROW(a, &cap, (size_t)PTRDIFF_MAX / sizeof(int) + 1));
  ck_assert(!ARRAY_RESIZE(a, SIZE_MAX / 2));
  ck_assert(a == before && cap == ARRAY_FIRST_CAP && reallocs == 0);
  assert_filled(a, ARRAY_FIRST_CAP);
  free(a);
}
END_TEST

START_TEST(failed_realloc_leaves_the_array_intact) {
  size_t cap;
  int *a = filled(ARRAY_FIRST_CAP, &cap), *before = a;
  fail_realloc = 1;
  ck_assert(!ARRAY_GROW(a, &cap, cap + 1));
  ck_assert(a == before && cap == ARRAY_FIRST_CAP);
  assert_filled(a, ARRAY_FIRST_CAP);
  fail_realloc = 1;
  ck_assert(!ARRAY_RESIZE(a, 4 * cap));
  ck_assert(a == before);
  ck_assert(ARRAY_GROW(a, &cap, cap + 1)); /* the next try succeeds */
  ck_assert_uint_eq(cap, 2 * ARRAY_FIRST_CAP);
  assert_filled(a, ARRAY_FIRST_CAP);
  free(a);
}
END_TEST

START_TEST(resize_sets_an_exact_size_and_refuses_zero) {
  size_t cap;
  int *a = filled(8, &cap);
  ck_assert(ARRAY_RESIZE(a, 3));
  assert_filled(a, 3);
  ck_assert(!ARRAY_RESIZE(a, 0)); /* realloc(p, 0) would free it */
  assert_filled(a, 3);
  free(a);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("common_array");
  TCase *tc = tcase_create("array");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, next_cap_doubles_from_the_first_capacity);
  tcase_add_test(tc, next_cap_refuses_what_no_object_can_hold);
  tcase_add_test(tc, grow_keeps_the_contents_and_reallocates_log_times);
  tcase_add_test(tc, grow_within_the_capacity_does_nothing);
  tcase_add_test(tc, overflow_fails_and_leaves_the_array_intact);
  tcase_add_test(tc, failed_realloc_leaves_the_array_intact);
  tcase_add_test(tc, resize_sets_an_exact_size_and_refuses_zero);
  suite_add_tcase(s, tc);
  return s;
}
