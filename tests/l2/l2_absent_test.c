/*
 * l2_absent_test.c — the per-tier absent marks (l2/absent.h): a mark
 * holds until its clear; a filter turns only marked hits into misses and
 * names them; the exact set matches a reference model over 100k random
 * operations and under clears in random order; backward-shift deletion
 * keeps every probe whole across the table's wraparound; past the bound no
 * mark is ever lost, the overflow buckets stick until a reset and warn
 * once; concurrent markers and a filterer end where their models say.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "l2/absent.h"
#include "tests/support/fixture.h"

/* xorshift64*: a fixed seed makes every run the same sequence. */
static uint64_t rnd(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dull;
}

static bool absent(l2_absent *a, uint64_t i) {
  kva_key k = fixture_key(i);
  return l2_absent_has(a, &k);
}

static void mark(l2_absent *a, uint64_t i) {
  kva_key k = fixture_key(i);
  l2_absent_mark(a, &k);
}

static void clear(l2_absent *a, uint64_t i) {
  kva_key k = fixture_key(i);
  l2_absent_clear(a, &k);
}

static l2_absent_stats stats(l2_absent *a) {
  l2_absent_stats s;
  l2_absent_stats_get(a, &s);
  return s;
}

START_TEST(a_mark_holds_until_its_clear) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 64), KVA_OK);
  ck_assert(!absent(&a, 1));
  mark(&a, 1);
  mark(&a, 1); /* rewritten again while the tier was down: one mark */
  mark(&a, 2);
  ck_assert(absent(&a, 1));
  ck_assert(absent(&a, 2));
  ck_assert(!absent(&a, 3));
  clear(&a, 1);
  clear(&a, 3); /* a store of a key never marked */
  ck_assert(!absent(&a, 1));
  ck_assert(absent(&a, 2));
  l2_absent_stats s = stats(&a);
  ck_assert_uint_eq(s.marked_now, 1);
  ck_assert_uint_eq(s.marks, 3);
  ck_assert_uint_eq(s.clears, 1);
  ck_assert_uint_eq(s.overflowed, 0);
  l2_absent_destroy(&a);
  l2_absent_destroy(&a); /* harmless twice */
}
END_TEST

START_TEST(init_takes_the_default_cap_and_refuses_an_impossible_one) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 0), KVA_OK);
  ck_assert_uint_eq(a.cap, L2_ABSENT_DEFAULT_CAP);
  ck_assert_uint_eq(a.mask + 1, 2 * L2_ABSENT_DEFAULT_CAP);
  l2_absent_destroy(&a);
  ck_assert_int_eq(l2_absent_init(&a, 5), KVA_OK);
  ck_assert_uint_eq(a.mask + 1, 16); /* the power of two >= 2 x cap */
  l2_absent_destroy(&a);
  ck_assert_int_eq(l2_absent_init(&a, SIZE_MAX / 2), KVA_ENOMEM);
  l2_absent_destroy(&a);
}
END_TEST

/* Keys 0..9; hits at every index but 5 and 9; marks at 1, 3, 5, 7, 9:
 * only 1, 3 and 7 are both, so only they turn into misses. */
START_TEST(filter_clears_only_marked_hits_and_names_them) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 64), KVA_OK);
  kva_key keys[10], out[10];
  uint8_t bits[2] = {0};
  for (uint64_t i = 0; i < 10; i++) {
    keys[i] = fixture_key(i);
    if (i != 5 && i != 9) kva_bit_set(bits, i);
    if (i & 1) mark(&a, i);
  }
  ck_assert_uint_eq(l2_absent_filter(&a, keys, 10, bits, out), 3);
  ck_assert(kva_key_equal(&out[0], &keys[1]));
  ck_assert(kva_key_equal(&out[1], &keys[3]));
  ck_assert(kva_key_equal(&out[2], &keys[7]));
  for (uint64_t i = 0; i < 10; i++) ck_assert_int_eq(kva_bit_get(bits, i), !(i & 1));
  ck_assert_uint_eq(stats(&a).filtered, 3);
  /* out may be NULL; marks stay after a filter */
  for (uint64_t i = 0; i < 10; i++) kva_bit_set(bits, i);
  ck_assert_uint_eq(l2_absent_filter(&a, keys, 10, bits, NULL), 5);
  ck_assert_uint_eq(bits[0], 0x55);
  ck_assert_uint_eq(bits[1], 0x01);
  ck_assert_uint_eq(stats(&a).filtered, 8);
  l2_absent_destroy(&a);
}
END_TEST

START_TEST(filter_with_nothing_marked_keeps_every_hit) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 64), KVA_OK);
  kva_key keys[8];
  for (uint64_t i = 0; i < 8; i++) keys[i] = fixture_key(i);
  uint8_t bits[1] = {0xff};
  mark(&a, 3);
  clear(&a, 3);
  ck_assert_uint_eq(l2_absent_filter(&a, keys, 8, bits, NULL), 0);
  ck_assert_uint_eq(bits[0], 0xff);
  l2_absent_destroy(&a);
}
END_TEST

#define MODEL_KEYS 2048u /* = cap: the model never overflows */

static void assert_matches(l2_absent *a, const bool *model, uint64_t nkeys) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < nkeys; i++) {
    ck_assert_msg(absent(a, i) == model[i], "key %llu: absent %d, model %d", (unsigned long long)i,
                  absent(a, i), model[i]);
    n += model[i];
  }
  ck_assert_uint_eq(stats(a).marked_now, n);
}

/* 100k random marks, clears and lookups over 2048 keys in a table of
 * 4096 slots (long probe runs as it fills), checked against a plain
 * array at every lookup and in full every 1000 operations. */
START_TEST(random_marks_and_clears_match_a_model) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, MODEL_KEYS), KVA_OK);
  static bool model[MODEL_KEYS];
  uint64_t seed = 0x1234abcd5678ef01ull;
  for (int op = 0; op < 100000; op++) {
    uint64_t r = rnd(&seed), i = (r >> 8) % MODEL_KEYS;
    /* drift: marks outnumber clears in the first half, then the reverse */
    unsigned cut = op < 50000 ? 60 : 35;
    if (r % 100 < cut) {
      mark(&a, i);
      model[i] = true;
    } else if (r % 100 < 90) {
      clear(&a, i);
      model[i] = false;
    } else {
      ck_assert_int_eq(absent(&a, i), model[i]);
    }
    if (op % 1000 == 999) assert_matches(&a, model, MODEL_KEYS);
  }
  ck_assert_uint_eq(stats(&a).overflowed, 0);
  l2_absent_destroy(&a);
}
END_TEST

/* Every key marked (the table half full), then cleared in a random
 * order: after each clear every key still marked is found. */
START_TEST(clears_in_random_order_leave_every_other_mark_found) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, MODEL_KEYS), KVA_OK);
  static bool model[MODEL_KEYS];
  static uint64_t order[MODEL_KEYS];
  for (uint64_t i = 0; i < MODEL_KEYS; i++) {
    mark(&a, i);
    model[i] = true;
    order[i] = i;
  }
  uint64_t seed = 0x0ddba11cafef00dull;
  for (uint64_t i = MODEL_KEYS - 1; i > 0; i--) {
    uint64_t j = rnd(&seed) % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (uint64_t i = 0; i < MODEL_KEYS; i++) {
    clear(&a, order[i]);
    model[order[i]] = false;
    if (i % 8 == 0 || i > MODEL_KEYS - 64) assert_matches(&a, model, MODEL_KEYS);
  }
  ck_assert_uint_eq(stats(&a).clears, MODEL_KEYS);
  l2_absent_destroy(&a);
}
END_TEST

/* A key numbered from `from` whose slot, in a table of mask + 1 slots,
 * is `home`, with its hash. */
static uint64_t key_at(uint64_t *from, size_t mask, size_t home, uint64_t *h) {
  for (;; (*from)++) {
    kva_key k = fixture_key(*from);
    *h = kva_key_hash(&k);
    if (*h && (*h & mask) == home) return (*from)++;
  }
}

/* cap 4: 8 slots. b, c and d's homes are 7, 7 and 0; e's is 1:
 *   slots 7 0 1 2:  b c e d   (c wraps past 7; d probes 0 and 1 to 2)
 * Clearing b must move c back to 7 and d back to 0, across the
 * wraparound, and leave e in its home 1: in slot 0, before its home, a
 * probe for e would never see it. Clearing c then moves nothing. */
START_TEST(deletion_shifts_back_across_the_wraparound) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 4), KVA_OK);
  ck_assert_uint_eq(a.mask, 7);
  uint64_t from = 0, hb, hc, hd, he;
  uint64_t b = key_at(&from, 7, 7, &hb), c = key_at(&from, 7, 7, &hc);
  uint64_t d = key_at(&from, 7, 0, &hd);
  from = 0;
  uint64_t e = key_at(&from, 7, 1, &he);
  mark(&a, b);
  mark(&a, c);
  mark(&a, e);
  mark(&a, d);
  ck_assert(a.slots[7] == hb && a.slots[0] == hc && a.slots[1] == he && a.slots[2] == hd);
  clear(&a, b);
  ck_assert(!absent(&a, b));
  ck_assert(absent(&a, c) && absent(&a, d) && absent(&a, e));
  ck_assert(a.slots[7] == hc && a.slots[0] == hd && a.slots[1] == he && a.slots[2] == 0);
  clear(&a, c);
  ck_assert(absent(&a, d) && absent(&a, e) && !absent(&a, c));
  ck_assert(a.slots[7] == 0 && a.slots[0] == hd && a.slots[1] == he && a.slots[2] == 0);
  clear(&a, e);
  clear(&a, d);
  ck_assert_uint_eq(stats(&a).marked_now, 0);
  for (size_t i = 0; i <= a.mask; i++) ck_assert_uint_eq(a.slots[i], 0);
  l2_absent_destroy(&a);
}
END_TEST

static int warnings;
static void count_warning(int level, const char *msg, void *arg) {
  if (level == KVA_LOG_WARN && strstr(msg, "absent")) warnings++;
}

/* cap 16, 100 keys marked: 84 go to the filter, and not one of the 100
 * reads as present. A clear cannot take a key out of its bucket. */
START_TEST(past_the_bound_no_mark_is_lost_and_one_warning_says_so) {
  kva_log_set(count_warning, NULL, KVA_LOG_WARN);
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 16), KVA_OK);
  a.name = "mock0";
  for (uint64_t i = 0; i < 100; i++) mark(&a, i);
  for (uint64_t i = 0; i < 100; i++)
    ck_assert_msg(absent(&a, i), "key %llu lost", (unsigned long long)i);
  l2_absent_stats s = stats(&a);
  ck_assert_uint_eq(s.marked_now, 16);
  ck_assert_uint_eq(s.overflowed, 84);
  ck_assert(s.overflow_now >= 1 && s.overflow_now <= 84);
  ck_assert_int_eq(warnings, 1);
  clear(&a, 99); /* in a bucket: stays absent */
  ck_assert(absent(&a, 99));
  clear(&a, 0); /* in the exact set: present again, and room for one more */
  ck_assert(!absent(&a, 0));
  mark(&a, 200);
  ck_assert_uint_eq(stats(&a).marked_now, 16);
  ck_assert_uint_eq(stats(&a).overflowed, 84);
  ck_assert(absent(&a, 200));
  l2_absent_destroy(&a);
}
END_TEST

/* A reset empties the buckets (the exact marks stay) and re-arms the
 * warning. */
START_TEST(reset_overflow_empties_the_buckets_only) {
  kva_log_set(count_warning, NULL, KVA_LOG_WARN);
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 16), KVA_OK);
  for (uint64_t i = 0; i < 100; i++) mark(&a, i);
  l2_absent_reset_overflow(&a);
  for (uint64_t i = 0; i < 100; i++) ck_assert_int_eq(absent(&a, i), i < 16);
  l2_absent_stats s = stats(&a);
  ck_assert_uint_eq(s.overflow_now, 0);
  ck_assert_uint_eq(s.overflowed, 84);
  ck_assert_uint_eq(s.marked_now, 16);
  mark(&a, 100); /* overflows into one fresh bucket: none of the old ones is back */
  ck_assert(absent(&a, 100));
  ck_assert_uint_eq(stats(&a).overflow_now, 1);
  for (uint64_t i = 16; i < 100; i++) ck_assert(!absent(&a, i));
  ck_assert_int_eq(warnings, 2);
  l2_absent_destroy(&a);
}
END_TEST

#define RACE_KEYS 1024u /* per marker */
#define RACE_OPS 50000

typedef struct racer {
  l2_absent *a;
  uint64_t first, seed;
  uint64_t marks; /* mark calls made */
  bool model[RACE_KEYS];
} racer;

static void *race_marks(void *arg) {
  racer *r = arg;
  for (int op = 0; op < RACE_OPS; op++) {
    uint64_t x = rnd(&r->seed), i = (x >> 8) % RACE_KEYS;
    bool on = x % 2;
    if (on) {
      mark(r->a, r->first + i);
      r->marks++;
    } else
      clear(r->a, r->first + i);
    r->model[i] = on;
  }
  return NULL;
}

static int racers_done;

/* Filters every key as a hit until both markers are done: each call
 * clears exactly the bits of the keys it names. */
static void *race_filter(void *arg) {
  l2_absent *a = arg;
  static kva_key keys[2 * RACE_KEYS], out[2 * RACE_KEYS];
  uint8_t bits[2 * RACE_KEYS / 8];
  for (uint64_t i = 0; i < 2 * RACE_KEYS; i++) keys[i] = fixture_key(i);
  /* relaxed: the flag only ends the loop, no data travels with it */
  while (!__atomic_load_n(&racers_done, __ATOMIC_RELAXED)) {
    memset(bits, 0xff, sizeof bits);
    size_t m = l2_absent_filter(a, keys, 2 * RACE_KEYS, bits, out), j = 0;
    for (uint64_t i = 0; i < 2 * RACE_KEYS; i++)
      if (!kva_bit_get(bits, i)) ck_assert(j < m && kva_key_equal(&out[j++], &keys[i]));
    ck_assert_uint_eq(j, m);
  }
  return NULL;
}

START_TEST(concurrent_markers_and_a_filter_end_as_their_models) {
  l2_absent a;
  ck_assert_int_eq(l2_absent_init(&a, 2 * RACE_KEYS), KVA_OK);
  static racer r[2];
  r[0] = (racer){.a = &a, .first = 0, .seed = 0x9e3779b97f4a7c15ull};
  r[1] = (racer){.a = &a, .first = RACE_KEYS, .seed = 0xbf58476d1ce4e5b9ull};
  pthread_t t[3];
  ck_assert_int_eq(pthread_create(&t[2], NULL, race_filter, &a), 0);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, race_marks, &r[i]), 0);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  /* relaxed: only ends the filter's loop (race_filter) */
  __atomic_store_n(&racers_done, 1, __ATOMIC_RELAXED);
  ck_assert_int_eq(pthread_join(t[2], NULL), 0);
  uint64_t n = 0;
  for (int w = 0; w < 2; w++)
    for (uint64_t i = 0; i < RACE_KEYS; i++) {
      ck_assert_int_eq(absent(&a, r[w].first + i), r[w].model[i]);
      n += r[w].model[i];
    }
  l2_absent_stats s = stats(&a);
  ck_assert_uint_eq(s.marked_now, n);
  ck_assert_uint_eq(s.overflowed, 0);
  ck_assert_uint_eq(s.marks, r[0].marks + r[1].marks);
  l2_absent_destroy(&a);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_absent");
  TCase *tc = tcase_create("absent");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_mark_holds_until_its_clear);
  tcase_add_test(tc, init_takes_the_default_cap_and_refuses_an_impossible_one);
  tcase_add_test(tc, filter_clears_only_marked_hits_and_names_them);
  tcase_add_test(tc, filter_with_nothing_marked_keeps_every_hit);
  tcase_add_test(tc, random_marks_and_clears_match_a_model);
  tcase_add_test(tc, clears_in_random_order_leave_every_other_mark_found);
  tcase_add_test(tc, deletion_shifts_back_across_the_wraparound);
  tcase_add_test(tc, past_the_bound_no_mark_is_lost_and_one_warning_says_so);
  tcase_add_test(tc, reset_overflow_empties_the_buckets_only);
  tcase_add_test(tc, concurrent_markers_and_a_filter_end_as_their_models);
  suite_add_tcase(s, tc);
  return s;
}
