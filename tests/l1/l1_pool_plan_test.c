/*
 * l1_pool_plan_test.c — the pool's room planner (pool_plan_*): which
 * allocated blocks to free so that a batch fits, checked by hand on small
 * layouts and against a brute-force count of the free runs on random ones.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "l1/pool.h"
#include "tests/support/fixture.h"

#define UNIT UINT64_C(4096)

/* A plain pool of `units` 4 KiB units. */
static pool *new_pool(uint32_t units) {
  pool_opts o = {.size_bytes = units * UNIT, .align_bytes = UNIT, .numa_node = -1, .pinned = 0};
  pool *p = NULL;
  char err[256] = "";
  ck_assert_msg(pool_create(&o, &p, err, sizeof(err)) == 0, "pool_create: %s", err);
  ck_assert_uint_eq(pool_capacity(p), units * UNIT);
  return p;
}

static void assert_consistent(const pool *p) {
  char report[256] = "";
  ck_assert_msg(pool_memcheck(p, report, sizeof(report)) == 0, "memcheck: %s", report);
}

/* Fills the pool with `units` blocks of one unit, a[0] first. */
static void fill_units(pool *p, void **a, uint32_t units) {
  for (uint32_t i = 0; i < units; i++) ck_assert_ptr_nonnull(a[i] = pool_alloc(p, UNIT));
}

/* Opens a plan for n blocks of `units` units. */
static int start(pool *p, uint32_t units, size_t n) {
  uint64_t bytes[8];
  ck_assert_uint_le(n, 8);
  for (size_t k = 0; k < n; k++) bytes[k] = units * UNIT;
  return pool_plan_start(p, bytes, n);
}

/* [0][1 free][2]...[7], 2 units: block 5 has no free neighbour and makes no
 * room; block 2 joins the free unit beside it. Only block 2 is kept. */
START_TEST(a_victim_next_to_free_space_makes_room) {
  pool *p = new_pool(8);
  void *a[8];
  fill_units(p, a, 8);
  pool_free(p, a[1]);
  ck_assert_int_eq(start(p, 2, 1), 0);
  ck_assert_int_eq(pool_plan_add(p, a[5]), 0);
  ck_assert_int_eq(pool_plan_add(p, a[2]), 1);
  ck_assert_uint_eq(pool_plan_finish(p), 1);
  ck_assert(!pool_plan_needed(p, 0));
  ck_assert(pool_plan_needed(p, 1));
  assert_consistent(p); /* no planned mark left */
  pool_free(p, a[2]);
  ck_assert(pool_fits(p, 2 * UNIT));
  pool_destroy(p);
}
END_TEST

/* Two blocks of 2 units from eight 1-unit blocks, planned in the order
 * 0 2 1 5 6: {0 1 2} holds one block, {5 6} the other. Block 2, the latest
 * planned of the first run, is not needed ({0 1} is enough); the rest is. */
START_TEST(a_batch_gets_room_for_each_of_its_blocks) {
  pool *p = new_pool(8);
  void *a[8];
  fill_units(p, a, 8);
  ck_assert_int_eq(start(p, 2, 2), 0);
  ck_assert_int_eq(pool_plan_add(p, a[0]), 0);
  ck_assert_int_eq(pool_plan_add(p, a[2]), 0);
  ck_assert_int_eq(pool_plan_add(p, a[1]), 0);
  ck_assert_int_eq(pool_plan_add(p, a[5]), 0);
  ck_assert_int_eq(pool_plan_add(p, a[6]), 1);
  ck_assert_uint_eq(pool_plan_finish(p), 4);
  static const bool needed[] = {true, false, true, true, true};
  for (size_t k = 0; k < 5; k++) ck_assert_int_eq(pool_plan_needed(p, k), needed[k]);
  pool_free(p, a[0]);
  pool_free(p, a[1]);
  pool_free(p, a[5]);
  pool_free(p, a[6]);
  uint64_t bytes[2] = {2 * UNIT, 2 * UNIT};
  void *out[2];
  ck_assert_int_eq(pool_alloc_batch(p, bytes, 2, out), 0);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(plan_start_tells_fitting_and_impossible_batches) {
  pool *p = new_pool(8);
  uint64_t zero = 0;
  ck_assert_int_eq(start(p, 2, 4), 1);
  ck_assert_int_eq(start(p, 2, 5), KVA_ENOMEM);
  ck_assert_int_eq(start(p, 9, 1), KVA_ENOMEM);
  ck_assert_int_eq(pool_plan_start(p, &zero, 1), KVA_EINVAL);
  ck_assert_int_eq(pool_plan_start(p, &zero, 0), KVA_EINVAL);
  ck_assert_int_eq(pool_plan_add(p, pool_base(p)), KVA_EINVAL); /* no plan open */
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(plan_add_refuses_what_it_cannot_plan) {
  pool *p = new_pool(8);
  void *a[8];
  fill_units(p, a, 8);
  pool_free(p, a[3]);
  ck_assert_int_eq(start(p, 2, 1), 0);
  ck_assert_int_eq(pool_plan_add(p, a[3]), KVA_EINVAL);              /* free */
  ck_assert_int_eq(pool_plan_add(p, (char *)a[0] + 64), KVA_EINVAL); /* inside */
  ck_assert_int_eq(pool_plan_add(p, NULL), KVA_EINVAL);
  ck_assert_int_eq(pool_plan_add(p, a[0]), 0);
  ck_assert_int_eq(pool_plan_add(p, a[0]), KVA_EINVAL); /* planned already */
  pool_plan_cancel(p);
  ck_assert(!pool_plan_needed(p, 0));
  ck_assert_int_eq(pool_plan_add(p, a[1]), KVA_EINVAL); /* closed */
  assert_consistent(p);
  ck_assert_int_eq(start(p, 2, 1), 0);
  ck_assert_int_eq(pool_plan_add(p, a[6]), 0);
  ck_assert_uint_eq(pool_plan_finish(p), 0); /* no room: nothing kept */
  ck_assert(!pool_plan_needed(p, 0));
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

/* ---- random layouts against a brute-force count ------------------------ */

#define R_UNITS 256u

typedef struct r_pool {
  pool *p;
  void *ptr[R_UNITS]; /* per block start unit: its pointer, NULL = none */
  uint32_t size[R_UNITS];
  uint8_t gone[R_UNITS]; /* per block start unit: counted as freed */
} r_pool;

static uint64_t r_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Blocks of u units the free runs hold, counting blocks with gone[] set as
 * free. */
static uint64_t r_room(const r_pool *r, uint32_t u) {
  uint64_t room = 0, run = 0;
  for (uint32_t i = 0; i < R_UNITS;) {
    if (r->ptr[i] && !r->gone[i]) {
      room += run / u;
      run = 0;
      i += r->size[i];
      continue;
    }
    run += r->ptr[i] ? r->size[i] : 1;
    i += r->ptr[i] ? r->size[i] : 1;
  }
  return room + run / u;
}

/* Fills the pool with blocks of 1-12 units, then frees about a third. */
static void r_layout(r_pool *r, uint64_t *rng) {
  uint8_t *base = pool_base(r->p);
  void *q;
  while ((q = pool_alloc(r->p, (1 + r_next(rng) % 12) * UNIT)) != NULL) {
    uint32_t i = (uint32_t)(((uint8_t *)q - base) / UNIT);
    r->ptr[i] = q;
  }
  while ((q = pool_alloc(r->p, UNIT)) != NULL) r->ptr[((uint8_t *)q - base) / UNIT] = q;
  for (uint32_t i = 0; i < R_UNITS; i++) {
    if (!r->ptr[i]) continue;
    uint32_t n = 1;
    while (i + n < R_UNITS && !r->ptr[i + n]) n++;
    r->size[i] = n;
  }
  for (uint32_t i = 0; i < R_UNITS; i++)
    if (r->ptr[i] && r_next(rng) % 3 == 0) {
      pool_free(r->p, r->ptr[i]);
      r->ptr[i] = NULL;
    }
}

/* One round: a random batch, the live blocks planned in random order
 * (a quarter left out, as locked ones would be); checks every answer of add
 * against the brute-force room, then that the kept blocks make room and
 * are each needed, then that the batch really fits once they are freed. */
static void r_round(uint64_t seed) {
  r_pool *r = calloc(1, sizeof(*r));
  uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
  r->p = new_pool(R_UNITS);
  r_layout(r, &rng);
  uint32_t u = 2 + (uint32_t)(r_next(&rng) % 40), n = 1 + (uint32_t)(r_next(&rng) % 8);
  int rc = start(r->p, u, n);
  if (u * n > R_UNITS) { /* not even in an empty pool */
    ck_assert_int_eq(rc, KVA_ENOMEM);
    rc = 1;
  } else {
    ck_assert_int_eq(rc, r_room(r, u) >= n ? 1 : 0);
  }
  uint32_t order[R_UNITS], k = 0;
  for (uint32_t i = 0; i < R_UNITS; i++)
    if (r->ptr[i] && r_next(&rng) % 4) order[k++] = i;
  for (uint32_t j = k; j > 1; j--) {
    uint32_t x = (uint32_t)(r_next(&rng) % j), t = order[j - 1];
    order[j - 1] = order[x];
    order[x] = t;
  }
  uint32_t added = 0;
  while (rc == 0 && added < k) {
    r->gone[order[added]] = 1;
    rc = pool_plan_add(r->p, r->ptr[order[added++]]);
    ck_assert_int_eq(rc, r_room(r, u) >= n ? 1 : 0);
  }
  if (rc == 1 && added > 0) {
    size_t kept = pool_plan_finish(r->p), seen = 0;
    for (uint32_t j = 0; j < added; j++) {
      r->gone[order[j]] = pool_plan_needed(r->p, j);
      seen += r->gone[order[j]];
    }
    ck_assert_uint_eq(kept, seen);
    ck_assert_uint_ge(r_room(r, u), n);
    for (uint32_t j = 0; j < added; j++) {
      if (!r->gone[order[j]]) continue;
      r->gone[order[j]] = 0;
      ck_assert_msg(r_room(r, u) < n, "seed %llu: block %u not needed", (unsigned long long)seed,
                    order[j]);
      r->gone[order[j]] = 1;
    }
    for (uint32_t j = 0; j < added; j++)
      if (r->gone[order[j]]) pool_free(r->p, r->ptr[order[j]]);
    uint64_t bytes[8];
    void *out[8];
    for (uint32_t j = 0; j < n; j++) bytes[j] = u * UNIT;
    ck_assert_int_eq(pool_alloc_batch(r->p, bytes, n, out), 0);
  } else {
    pool_plan_cancel(r->p);
  }
  assert_consistent(r->p);
  pool_destroy(r->p);
  free(r);
}

START_TEST(random_plans_keep_only_needed_blocks_and_make_room) {
  for (uint64_t seed = 0; seed < 500; seed++) r_round(seed);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_pool_plan");
  TCase *t = tcase_create("plan");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, a_victim_next_to_free_space_makes_room);
  tcase_add_test(t, a_batch_gets_room_for_each_of_its_blocks);
  tcase_add_test(t, plan_start_tells_fitting_and_impossible_batches);
  tcase_add_test(t, plan_add_refuses_what_it_cannot_plan);
  tcase_add_test(t, random_plans_keep_only_needed_blocks_and_make_room);
  suite_add_tcase(s, t);
  return s;
}
