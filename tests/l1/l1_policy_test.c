/*
 * l1_policy_test.c — L1 eviction policies (lru, mru, fifo, lfu) and their
 * registry, including ports of LMCache's policy tests:
 *   [CP]  tests/v1/storage_backend/test_cache_policy.py
 *   [LRU] tests/v1/distributed/test_lru_eviction_policy.py
 * Each ported test names its source. Where LMCache's semantics differ from
 * l1/policy.h (the contract here), the test says so.
 */
#include <check.h>
#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "l1/policy.h"

/* Policies the loop tests run over; _i indexes it. */
static const char *const NAMES[] = {"lru", "mru", "fifo", "lfu"};
#define NPOLICIES 4

/* An object id: generation in the high 32 bits, slot index in the low. */
#define ID(gen, slot) (((uint64_t)(gen) << 32) | (uint32_t)(slot))

/* A policy under test with its ops. */
typedef struct tp {
  const policy_ops *ops;
  policy *p;
} tp;

/* Creates the policy registered as `name`, failing the test if absent. */
static tp tp_open(const char *name) {
  tp t = {.ops = policy_find(name)};
  ck_assert_ptr_nonnull(t.ops);
  t.p = t.ops->create();
  ck_assert_ptr_nonnull(t.p);
  return t;
}

/* Up to max candidates after `after` (0: from the start), ids only. */
static size_t tp_next(tp t, uint64_t after, uint64_t *ids, size_t max) {
  return t.ops->candidates(t.p, after, ids, NULL, max);
}

/* The first candidate after `after`, or 0 when there is none. */
static uint64_t tp_first(tp t, uint64_t after) {
  uint64_t id = 0;
  return tp_next(t, after, &id, 1) == 1 ? id : 0;
}

/* The whole eviction order is exactly want[0..n), each with its bytes, and
 * count() agrees. */
static void assert_order(tp t, const uint64_t *want, size_t n) {
  uint64_t got[64], bytes[64];
  ck_assert_uint_le(n, 63);
  ck_assert_uint_eq(t.ops->candidates(t.p, 0, got, bytes, 64), n);
  ck_assert_uint_eq(t.ops->count(t.p), n);
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(got[i], want[i]);
    ck_assert_uint_eq(bytes[i], 100 + (uint32_t)want[i]);
  }
}

/* Notifies op ('+' created, '*' touched, '-' removed) for each id, in order; the
 * bytes of a creation derive from the id so that candidates can check them. */
static void each(tp t, char op, const uint64_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (op == '+') t.ops->on_created(t.p, ids[i], 100 + (uint32_t)ids[i]);
    if (op == '*') t.ops->on_touched(t.p, ids[i]);
    if (op == '-') t.ops->on_removed(t.p, ids[i]);
  }
}

/* Objects a, b, c, d are slots 1..4 of generation 1. IDS(...) expands to an
 * array and its length, for each() and assert_order(). */
#define A ID(1, 1)
#define B ID(1, 2)
#define C ID(1, 3)
#define D ID(1, 4)
#define IDS(...)                                                                                   \
  (const uint64_t[]){__VA_ARGS__}, sizeof((const uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t)
#define CREATE(t, ...) each(t, '+', IDS(__VA_ARGS__))
#define TOUCH(t, ...) each(t, '*', IDS(__VA_ARGS__))
#define REMOVE(t, ...) each(t, '-', IDS(__VA_ARGS__))
#define ORDER(t, ...) assert_order(t, IDS(__VA_ARGS__))
#define COUNT(t) ((t).ops->count((t).p))
#define CLOSE(t) ((t).ops->destroy((t).p))

/* Runs a scenario on a fresh policy `name`. Letters a..z are slots 1..26 of
 * generation 1, A..Z the same slots in generation 2. '+' creates, '*'
 * touches and '-' removes the letters that follow, in order; '=' checks that
 * the whole eviction order is exactly the letters that follow. */
static void script(const char *name, const char *s) {
  tp t = tp_open(name);
  uint64_t want[32];
  size_t n = 0;
  char op = 0;
  for (;; s++) {
    if (*s >= 'a' && *s <= 'z') want[n++] = ID(1, *s - 'a' + 1);
    if (*s >= 'A' && *s <= 'Z') want[n++] = ID(2, *s - 'A' + 1);
    if (n > 0 && op != '=') each(t, op, want, n), n = 0;
    if (*s != ' ' && !isalpha((unsigned char)*s)) {
      if (op == '=') assert_order(t, want, n);
      op = *s, n = 0;
    }
    if (!*s) break;
  }
  CLOSE(t);
}

/* ---- registry ----------------------------------------------------------- */

START_TEST(builtin_policies_are_found_by_name) {
  for (int i = 0; i < NPOLICIES; i++) {
    ck_assert_ptr_nonnull(policy_find(NAMES[i]));
    ck_assert_str_eq(policy_find(NAMES[i])->name, NAMES[i]);
  }
  ck_assert_ptr_null(policy_find("LRU")); /* names are case-sensitive */
  ck_assert_ptr_null(policy_find("s3fifo"));
  ck_assert_ptr_null(policy_find(""));
  ck_assert_ptr_null(policy_find(NULL));
}
END_TEST

START_TEST(register_rejects_null_or_incomplete_ops) {
  ck_assert_int_eq(kva_eviction_policy_register(NULL), KVA_EINVAL);
  policy_ops bad[10];
  for (int i = 0; i < 10; i++) bad[i] = *policy_find("lru"), bad[i].name = "broken";
  bad[0].name = NULL;
  bad[1].name = "";
  bad[2].create = NULL;
  bad[3].destroy = NULL;
  bad[4].on_created = NULL;
  bad[5].on_touched = NULL;
  bad[6].on_removed = NULL;
  bad[7].candidates = NULL;
  bad[8].count = NULL;
  bad[9].name = "a-name-that-is-longer-than-31-bytes";
  for (int i = 0; i < 10; i++) ck_assert_int_eq(kva_eviction_policy_register(&bad[i]), KVA_EINVAL);
  ck_assert_ptr_null(policy_find("broken"));
  ck_assert_ptr_null(policy_find(bad[9].name));
}
END_TEST

/* One rule for every registry (common/registry.h): a taken name is
 * refused, built-in or not, and the policy registered first stays. */
START_TEST(register_refuses_a_taken_name_and_the_builtin_stays) {
  policy_ops fake = *policy_find("fifo");
  fake.name = "lru";
  ck_assert_int_eq(kva_eviction_policy_register(&fake), KVA_EINVAL);
  tp t = tp_open("lru"); /* still lru: a touch moves A to the back */
  CREATE(t, A, B);
  TOUCH(t, A);
  ORDER(t, B, A);
  CLOSE(t);
  fake.name = "mine";
  ck_assert_int_eq(kva_eviction_policy_register(&fake), KVA_OK);
  fake = *policy_find("lfu");
  fake.name = "mine";
  ck_assert_int_eq(kva_eviction_policy_register(&fake), KVA_EINVAL);
  ck_assert_ptr_eq(policy_find("mine")->create, policy_find("fifo")->create);
}
END_TEST

/* The registry keeps a copy, name included: the caller's struct and name
 * buffer may go away. */
START_TEST(register_copies_the_policy_and_its_name) {
  char name[32] = "copied";
  policy_ops ops = *policy_find("mru");
  ops.name = name;
  ck_assert_int_eq(kva_eviction_policy_register(&ops), KVA_OK);
  memset(name, 'x', sizeof name - 1);
  ops.create = NULL;
  const policy_ops *found = policy_find("copied");
  ck_assert_ptr_nonnull(found);
  ck_assert_str_eq(found->name, "copied");
  ck_assert_ptr_ne(found->name, name);
  ck_assert_ptr_eq(found->create, policy_find("mru")->create);
  ck_assert_ptr_eq(policy_find("copied"), found); /* the same entry every time */
}
END_TEST

/* 64 entries in all: the 4 built-ins and 60 more. */
START_TEST(register_fails_when_the_table_is_full) {
  static char names[64][24];
  int ok = 0, rc = KVA_OK;
  for (int i = 0; i < 64 && rc == KVA_OK; i++) {
    policy_ops extra = *policy_find("lfu");
    snprintf(names[i], sizeof(names[i]), "extra%d", i);
    extra.name = names[i];
    if ((rc = kva_eviction_policy_register(&extra)) == KVA_OK) ok++;
  }
  ck_assert_int_eq(rc, KVA_ENOMEM);
  ck_assert_int_eq(ok, 60);
  ck_assert_str_eq(policy_find("extra0")->name, "extra0");
  ck_assert_str_eq(policy_find("extra59")->name, "extra59");
  ck_assert_ptr_null(policy_find("extra60"));
  policy_ops again = *policy_find("extra0");
  ck_assert_int_eq(kva_eviction_policy_register(&again), KVA_EINVAL); /* taken, even when full */
  for (int i = 0; i < NPOLICIES; i++) ck_assert_ptr_nonnull(policy_find(NAMES[i]));
}
END_TEST

START_TEST(names_list_the_builtins_first_then_registrations) {
  char buf[128];
  ck_assert_uint_eq(policy_names(", ", buf, sizeof buf), strlen("lru, mru, fifo, lfu"));
  ck_assert_str_eq(buf, "lru, mru, fifo, lfu");
  policy_ops ops = *policy_find("lru");
  ops.name = "mine";
  ck_assert_int_eq(kva_eviction_policy_register(&ops), KVA_OK);
  policy_names(" ", buf, sizeof buf);
  ck_assert_str_eq(buf, "lru mru fifo lfu mine");
  char small[8];
  ck_assert_uint_eq(policy_names(" ", small, sizeof small), strlen("lru mru fifo lfu mine"));
  ck_assert_str_eq(small, "lru mru"); /* cut, and terminated */
}
END_TEST

/* Looks every built-in up 100 times; non-NULL when one is missing. */
static void *find_all(void *arg) {
  for (int r = 0; r < 100; r++)
    for (int i = 0; i < NPOLICIES; i++)
      if (!policy_find(NAMES[i])) return (void *)1;
  return arg;
}

/* Built-ins are registered lazily; racing first lookups all see them. */
START_TEST(concurrent_first_lookups_all_see_the_builtins) {
  pthread_t th[8];
  void *r;
  for (int i = 0; i < 8; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, find_all, NULL), 0);
  for (int i = 0; i < 8; i++) ck_assert(pthread_join(th[i], &r) == 0 && r == NULL);
}
END_TEST

/* ---- every policy (loop tests over NAMES) ------------------------------- */

/* [LRU] test_empty_policy_has_no_tracked_keys,
 *       test_empty_policy_returns_no_eviction_actions */
START_TEST(new_policy_tracks_nothing_and_has_no_candidates) {
  tp t = tp_open(NAMES[_i]);
  ck_assert(COUNT(t) == 0 && tp_first(t, 0) == 0 && tp_first(t, A) == 0);
  CLOSE(t);
}
END_TEST

/* [CP] test_get_evict_candidates_selects_evictable_key; the bytes given at
 * creation come back with the candidate. */
START_TEST(created_object_is_a_candidate_with_its_bytes) {
  tp t = tp_open(NAMES[_i]);
  t.ops->on_created(t.p, ID(7, 5), 4096);
  uint64_t id = 0, bytes = 0;
  ck_assert(t.ops->candidates(t.p, 0, &id, &bytes, 1) == 1 && id == ID(7, 5) && bytes == 4096);
  CLOSE(t);
}
END_TEST

/* [CP] test_get_evict_candidates_skips_non_evictable_key. Differs: LMCache
 * filters out entries with can_evict == False itself; our policies never see
 * lock state (policy.h), so a locked object is still returned and the L1
 * manager skips it, paging on past it with `after`. */
START_TEST(policy_returns_locked_objects_and_the_caller_pages_past_them) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, A);
  ck_assert_uint_eq(tp_first(t, 0), A); /* even if the manager holds it locked */
  ck_assert_uint_eq(tp_first(t, A), 0); /* nothing else to try */
  CREATE(t, B);
  uint64_t first = tp_first(t, 0), next = tp_first(t, first);
  ck_assert(first != 0 && next != 0 && next != first);
  CLOSE(t);
}
END_TEST

/* [CP] test_get_evict_candidates_is_side_effect_free (an LFU regression in
 * LMCache: choosing dropped the key from the bookkeeping, so the next hit
 * crashed). Also: asking twice gives the same answer and count is kept. */
START_TEST(candidates_has_no_side_effects) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, A);
  ck_assert_uint_eq(tp_first(t, 0), A);
  TOUCH(t, A); /* chosen but left resident, then hit */
  ck_assert_uint_eq(tp_first(t, 0), A);
  for (int k = 0; k < 20; k++) CREATE(t, ID(1, 10 + k));
  for (int k = 0; k < 20; k += 3) TOUCH(t, ID(1, 10 + k));
  uint64_t x[32], y[32], bx[32], by[32];
  ck_assert_uint_eq(t.ops->candidates(t.p, 0, x, bx, 32), 21);
  ck_assert_uint_eq(t.ops->candidates(t.p, 0, y, by, 32), 21);
  ck_assert(!memcmp(x, y, sizeof(x[0]) * 21) && !memcmp(bx, by, sizeof(bx[0]) * 21) &&
            COUNT(t) == 21);
  CLOSE(t);
}
END_TEST

/* [CP] test_force_evict_then_key_is_no_longer_a_candidate;
 * [LRU] test_create_keys_increases_tracked_count,
 *       test_delete_keys_decreases_tracked_count */
START_TEST(removed_objects_leave_the_count_and_the_candidates) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, A, B, C);
  ck_assert_uint_eq(COUNT(t), 3);
  REMOVE(t, B);
  uint64_t ids[4];
  ck_assert_uint_eq(tp_next(t, 0, ids, 4), 2);
  ck_assert(COUNT(t) == 2 && ids[0] != B && ids[1] != B);
  REMOVE(t, A, C);
  ck_assert(COUNT(t) == 0 && tp_first(t, 0) == 0);
  CLOSE(t);
}
END_TEST

/* [LRU] test_delete_nonexistent_key_is_safe, test_touch_nonexistent_key_is_safe */
START_TEST(removing_or_touching_unknown_ids_is_harmless) {
  tp t = tp_open(NAMES[_i]);
  REMOVE(t, ID(1, 999));
  TOUCH(t, ID(1, 999));
  ck_assert_uint_eq(COUNT(t), 0);
  CREATE(t, A);
  TOUCH(t, ID(1, 999), ID(1, 0)); /* beyond the array; inside it, never created */
  REMOVE(t, ID(1, 999), ID(1, 0), ID(0xffffffffu, 0xffffffffu));
  ORDER(t, A);
  CLOSE(t);
}
END_TEST

/* [LRU] test_create_duplicate_key_does_not_increase_count. policy.h says a
 * slot is created at most once between removals; a repeat is taken as a
 * re-creation (old forgotten, new tracked), never a duplicate entry. */
START_TEST(creating_a_tracked_id_again_does_not_duplicate_it) {
  script(NAMES[_i], "+aa =a");
}
END_TEST

/* [LRU] test_get_candidates_respects_count_limit,
 * test_get_candidates_returns_all_if_count_exceeds_tracked, and the
 * expected_ratio tests (ratio 0, 0.5, 1, tiny, clamped) restated as `max`:
 * how many to evict is the eviction controller's choice here, so the policy
 * only honours max. The destination tests have no counterpart: destinations
 * are not part of a policy in kvact. */
START_TEST(candidates_return_at_most_max) {
  tp t = tp_open(NAMES[_i]);
  uint64_t ids[16];
  for (int k = 0; k < 10; k++) CREATE(t, ID(1, k + 1));
  size_t max[] = {0, 1, 3, 5, 10, 16}, want[] = {0, 1, 3, 5, 10, 10};
  for (int i = 0; i < 6; i++) ck_assert_uint_eq(tp_next(t, 0, ids, max[i]), want[i]);
  ck_assert_uint_eq(t.ops->candidates(t.p, 0, NULL, NULL, 16), 0); /* no room given */
  CLOSE(t);
}
END_TEST

/* Paging with `after` = last id of the previous page yields the whole
 * order, each object once, for any page size. */
START_TEST(after_cursor_pages_through_the_whole_order) {
  tp t = tp_open(NAMES[_i]);
  for (int k = 0; k < 40; k++) CREATE(t, ID(3, k * 2 + 1));
  for (int k = 0; k < 40; k += 3) TOUCH(t, ID(3, k * 2 + 1));
  for (int k = 0; k < 40; k += 7) TOUCH(t, ID(3, k * 2 + 1));
  uint64_t all[64], got[64];
  ck_assert_uint_eq(tp_next(t, 0, all, 64), 40);
  for (size_t ps = 1; ps <= 7; ps++) {
    size_t m = 0, k;
    while ((k = tp_next(t, m ? got[m - 1] : 0, got + m, ps)) > 0) {
      m += k;
      ck_assert_uint_le(m, 40);
    }
    ck_assert_uint_eq(m, 40);
    ck_assert_int_eq(memcmp(got, all, sizeof(all[0]) * 40), 0);
  }
  CLOSE(t);
}
END_TEST

/* An `after` that is not tracked (removed, other generation, never seen)
 * starts from the start. */
START_TEST(untracked_after_starts_from_the_start) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, A, B, C);
  REMOVE(t, B);
  uint64_t first[2], got[2];
  ck_assert_uint_eq(tp_next(t, 0, first, 2), 2);
  uint64_t afters[] = {B, ID(2, 1), ID(1, 77), ID(1, 0), ID(9, 0xffffffffu)};
  for (size_t i = 0; i < sizeof(afters) / sizeof(afters[0]); i++)
    ck_assert(tp_next(t, afters[i], got, 2) == 2 && got[0] == first[0] && got[1] == first[1]);
  CLOSE(t);
}
END_TEST

/* Touches and removals naming another generation of a slot are ignored. */
START_TEST(stale_generation_is_ignored) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, ID(2, 1), ID(2, 2));
  uint64_t before[2], after[2];
  ck_assert_uint_eq(tp_next(t, 0, before, 2), 2);
  TOUCH(t, ID(1, 1), ID(1, 2), ID(3, 1)); /* a future generation is as unknown */
  REMOVE(t, ID(1, 1), ID(3, 2));
  ck_assert(tp_next(t, 0, after, 2) == 2 && after[0] == before[0] && after[1] == before[1]);
  CLOSE(t);
}
END_TEST

/* A slot index reused after removal carries the new generation; the old id
 * (d = generation 1 of slot 4, D = generation 2) no longer reaches it. */
START_TEST(slot_reused_after_removal_tracks_the_new_generation) {
  script(NAMES[_i], "+d -d +D =D -d =D -D =");
}
END_TEST

/* Defensive: created again under a new generation without a removal in
 * between, the old object is forgotten and the new one tracked once. */
START_TEST(creating_over_a_live_slot_replaces_the_old_generation) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, ID(1, 1), ID(1, 2), ID(2, 1));
  uint64_t ids[4];
  ck_assert_uint_eq(tp_next(t, 0, ids, 4), 2);
  ck_assert((ids[0] == ID(2, 1) && ids[1] == B) || (ids[1] == ID(2, 1) && ids[0] == B));
  REMOVE(t, ID(1, 1)); /* stale now */
  ck_assert_uint_eq(COUNT(t), 2);
  CLOSE(t);
}
END_TEST

/* Sparse, high slot indexes grow the table and work like low ones. */
START_TEST(high_slot_indexes_are_tracked) {
  tp t = tp_open(NAMES[_i]);
  CREATE(t, ID(1, 3), ID(1, 1u << 20), ID(1, 70000));
  ck_assert_uint_eq(COUNT(t), 3);
  REMOVE(t, ID(1, 3), ID(1, 70000));
  ORDER(t, ID(1, 1u << 20));
  CLOSE(t);
}
END_TEST

/* A million objects created, touched and removed quickly (the tcase
 * timeout bounds the time, sanitizers included). */
START_TEST(a_million_objects_are_created_and_removed_quickly) {
  enum { N = 1000000 };
  tp t = tp_open(NAMES[_i]);
  uint64_t ids[4];
  for (uint32_t k = 0; k < N; k++) CREATE(t, ID(1, k));
  ck_assert_uint_eq(COUNT(t), N);
  for (uint32_t k = 0; k < N; k += 2) TOUCH(t, ID(1, k));
  ck_assert_uint_eq(tp_next(t, 0, ids, 4), 4);
  for (uint32_t k = 0; k < N; k++) REMOVE(t, ID(1, (uint64_t)k * 7919u % N)); /* scattered */
  ck_assert_uint_eq(COUNT(t), 0);
  ck_assert_uint_eq(tp_next(t, 0, ids, 4), 0);
  CLOSE(t);
}
END_TEST
/* ---- orders of each policy ---------------------------------------------- */

/* [LRU] test_eviction_order_is_lru, test_get_candidates_returns_lru_order
 * (first version: created 1, 2, 3 → candidates 1, 2, 3). */
START_TEST(lru_untouched_objects_go_in_creation_order) {
  script("lru", "+a +b +c =abc");
}
END_TEST

/* [LRU] test_touch_moves_key_to_most_recent, both versions. Later LMCache
 * notifies a batch in reverse (the last chunk of a request is evicted first,
 * as earlier chunks serve prefix hits): batch (1, 2, 3) created, touch 3 →
 * 2, 1, 3, and test_get_candidates_returns_lru_order expects 3, 2 first. Our
 * notifications are per id, so that reversal is the caller's; the second
 * script spells out the reversed calls. */
START_TEST(lru_touch_moves_an_object_to_the_back) {
  script("lru", "+abc *a =bca");
  script("lru", "+cba =cba *c =bac");
}
END_TEST

/* [LRU] test_create_existing_key_moves_to_most_recent (both versions). */
START_TEST(lru_creating_an_object_again_moves_it_to_the_back) {
  script("lru", "+abca =bca");
}
END_TEST

/* MRU (LMCache's cache_policy/mru.py evicts from the most recent end). */
START_TEST(mru_evicts_the_most_recently_used_first) {
  script("mru", "+abc =cba *a =acb -c =ab +d =dab");
}
END_TEST

/* FIFO (cache_policy/fifo.py): insertion order, hits change nothing. */
START_TEST(fifo_keeps_creation_order_despite_touches) {
  script("fifo", "+abc *aab =abc -a +A =bcA");
}
END_TEST

/* [CP] test_lfu_evicts_least_frequently_used_first: a = 1, b = 3, c = 2
 * accesses (creation counts as one) → a, c, b. */
START_TEST(lfu_evicts_the_least_frequently_used_first) {
  script("lfu", "+abc *bbc =acb");
}
END_TEST

/* Like LMCache's FIFO within one frequency: the object that reached its
 * count first goes first (c and a reach 2 in that order; then c reaches 3
 * and b 2; a re-created a arrives in count 1 after d). */
START_TEST(lfu_ties_go_to_the_object_that_reached_the_count_first) {
  script("lfu", "+abcd *ca =bdca *cb =dabc -a =dbc +a =dabc");
}
END_TEST

/* A re-created object starts again at one access. */
START_TEST(lfu_recreated_object_starts_again_at_one_access) {
  script("lfu", "+ab *aa =ba +A =bA");
}
END_TEST

/* ---- random operations against a reference model ------------------------ */

enum { M_SLOTS = 48, M_OPS = 6000 };

/* The model's view of a slot; times are operation numbers. k1, k2 are the
 * sort key m_order fills in. */
typedef struct m_obj {
  uint64_t id, bytes, used, created, count, reached, k1, k2;
  bool live;
} m_obj;

/* Orders by k1, then k2. */
static int m_cmp(const void *x, const void *y) {
  const m_obj *a = x, *b = y;
  if (a->k1 != b->k1) return a->k1 < b->k1 ? -1 : 1;
  return a->k2 < b->k2 ? -1 : a->k2 > b->k2;
}

/* The model's eviction order for NAMES[pi]: lru by last use, mru by last use
 * reversed, fifo by creation, lfu by count then time of reaching it. */
static size_t m_order(const m_obj *o, int pi, m_obj *out) {
  size_t n = 0;
  for (int s = 0; s < M_SLOTS; s++) {
    if (!o[s].live) continue;
    uint64_t k1[] = {o[s].used, UINT64_MAX - o[s].used, o[s].created, o[s].count};
    out[n] = o[s];
    out[n].k1 = k1[pi];
    out[n++].k2 = pi == 3 ? o[s].reached : 0;
  }
  qsort(out, n, sizeof(*out), m_cmp);
  return n;
}

/* The policy's order, paged with page size `page`, equals the model's. */
static void m_check(tp t, const m_obj *o, int pi, size_t page) {
  m_obj want[M_SLOTS];
  uint64_t ids[M_SLOTS], bytes[M_SLOTS];
  size_t n = m_order(o, pi, want), m = 0, k;
  ck_assert_uint_eq(COUNT(t), n);
  while ((k = t.ops->candidates(t.p, m ? ids[m - 1] : 0, ids + m, bytes + m, page)) > 0) {
    m += k;
    ck_assert_uint_le(m, n);
  }
  ck_assert_uint_eq(m, n);
  for (size_t i = 0; i < n; i++) ck_assert(ids[i] == want[i].id && bytes[i] == want[i].bytes);
}

/* Random creations (some over live slots), touches and removals (some with
 * stale generations) agree with a simple model after every step. */
START_TEST(random_operations_match_a_reference_model) {
  tp t = tp_open(NAMES[_i]);
  m_obj o[M_SLOTS] = {{0}};
  uint32_t gen[M_SLOTS] = {0};
  uint64_t rng = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
  for (uint64_t now = 1; now <= M_OPS; now++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    int s = (int)(rng % M_SLOTS), op = (int)((rng >> 8) % 10);
    bool stale = (rng >> 16) % 8 == 0 && gen[s] > 1;
    uint64_t id = ID(stale ? gen[s] - 1 : gen[s], s);
    bool hit = o[s].live && o[s].id == id;
    if (op < 4) { /* create, replacing a live object on that slot */
      id = ID(++gen[s], s);
      t.ops->on_created(t.p, id, now);
      o[s] = (m_obj){id, now, now, now, 1, now, 0, 0, true};
    } else if (op < 8) {
      TOUCH(t, id);
      if (hit) o[s].used = o[s].reached = now, o[s].count++;
    } else {
      REMOVE(t, id);
      if (hit) o[s].live = false;
    }
    m_check(t, o, _i, 1 + (size_t)(rng >> 24) % 9);
  }
  CLOSE(t);
}
END_TEST

/* A test case running each of tests[0..n) `loops` times (_i = 0..loops-1). */
static TCase *tcase_of(const char *name, const TTest **tests, size_t n, int loops) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 120);
  for (size_t i = 0; i < n; i++) tcase_add_loop_test(tc, tests[i], 0, loops);
  return tc;
}

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_policy");
  const TTest *reg[] = {
      builtin_policies_are_found_by_name,
      concurrent_first_lookups_all_see_the_builtins,
      register_rejects_null_or_incomplete_ops,
      register_refuses_a_taken_name_and_the_builtin_stays,
      register_copies_the_policy_and_its_name,
      register_fails_when_the_table_is_full,
      names_list_the_builtins_first_then_registrations,
  };
  suite_add_tcase(s, tcase_of("registry", reg, sizeof(reg) / sizeof(reg[0]), 1));
  /* each of these runs once per policy in NAMES */
  const TTest *every[] = {
      new_policy_tracks_nothing_and_has_no_candidates,
      created_object_is_a_candidate_with_its_bytes,
      policy_returns_locked_objects_and_the_caller_pages_past_them,
      candidates_has_no_side_effects,
      removed_objects_leave_the_count_and_the_candidates,
      removing_or_touching_unknown_ids_is_harmless,
      creating_a_tracked_id_again_does_not_duplicate_it,
      candidates_return_at_most_max,
      after_cursor_pages_through_the_whole_order,
      untracked_after_starts_from_the_start,
      stale_generation_is_ignored,
      slot_reused_after_removal_tracks_the_new_generation,
      creating_over_a_live_slot_replaces_the_old_generation,
      high_slot_indexes_are_tracked,
      a_million_objects_are_created_and_removed_quickly,
      random_operations_match_a_reference_model,
  };
  suite_add_tcase(s, tcase_of("every_policy", every, sizeof(every) / sizeof(every[0]), NPOLICIES));
  const TTest *ord[] = {
      lru_untouched_objects_go_in_creation_order,
      lru_touch_moves_an_object_to_the_back,
      lru_creating_an_object_again_moves_it_to_the_back,
      mru_evicts_the_most_recently_used_first,
      fifo_keeps_creation_order_despite_touches,
      lfu_evicts_the_least_frequently_used_first,
      lfu_ties_go_to_the_object_that_reached_the_count_first,
      lfu_recreated_object_starts_again_at_one_access,
  };
  suite_add_tcase(s, tcase_of("orders", ord, sizeof(ord) / sizeof(ord[0]), 1));
  return s;
}
