/*
 * l1_fragmentation_test.c — demand eviction in a fragmented L1 pool: when
 * evicting unlocked objects can make contiguous room for a reservation it
 * succeeds, evicting as little as possible; when nothing can, nothing is
 * evicted and every new key gets KVA_OUT_OF_MEMORY.
 *
 * Deterministic mode (workers = 0), watermark eviction off
 * (eviction.ratio = 0), so every eviction seen is a demand eviction.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

#define KiB 1024ull
#define SMALL 3000u /* keys of the 4 KiB objects */
#define BIG 5000u   /* keys of the 4 MiB objects */

/* Deletes keys [first, first + n) (unlocked, so all of them). */
static void delete_range(kva_storage *s, uint64_t first, size_t n) {
  kva_key k[128];
  int st[128];
  ck_assert_uint_le(n, 128);
  key_range(k, first, n);
  ck_assert_int_eq(kva_delete(s, k, n, 0, st), (int)n);
}

/* The pool: 64 MiB that held 4 KiB and 64 KiB objects, now full of
 * 4 MiB ones. Fourteen times a 4 KiB object then 72 of 64 KiB (4.5 MiB),
 * from the start of the pool; the 64 KiB ones are deleted, fourteen 4 MiB
 * objects take the holes. What is left free (~8 MiB) lies in pieces of
 * 0.5 MiB between a 4 MiB object and a 4 KiB one (1.4 MiB at the end): no
 * piece holds 4 MiB although the free bytes would. */
static kva_runtime *fragmented_pool(kva_storage **out) {
  kva_runtime *rt = fixture_storage(0, 64 * MiB, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  for (uint64_t j = 0; j < 14; j++) {
    ck_assert_int_eq(write_batch(s, SMALL + j, 1, 4 * KiB, st), 1);
    ck_assert_int_eq(write_batch(s, 100 * j, 36, 64 * KiB, st), 36);
    ck_assert_int_eq(write_batch(s, 100 * j + 36, 36, 64 * KiB, st), 36);
  }
  for (uint64_t j = 0; j < 14; j++) delete_range(s, 100 * j, 72);
  for (uint64_t j = 0; j < 14; j++) ck_assert_int_eq(write_batch(s, BIG + j, 1, 4 * MiB, st), 1);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.evicted_on_demand, 0);
  ck_assert_uint_eq(x.l1_objects, 28);
  ck_assert_uint_ge(x.l1_capacity_bytes - x.l1_used_bytes, 4 * MiB);
  *out = s;
  return rt;
}

/* Each further 4 MiB write evicts exactly one 4 MiB object, the least
 * recently used; the 4 KiB objects, older but useless to evict, stay. */
START_TEST(a_fragmented_full_pool_keeps_admitting_4mib_objects) {
  kva_storage *s;
  kva_runtime *rt = fragmented_pool(&s);
  int st[64];
  for (uint64_t i = 14; i < 42; i++) {
    ck_assert_int_eq(write_batch(s, BIG + i, 1, 4 * MiB, st), 1);
    kva_storage_stats x = stats_of(s);
    ck_assert_uint_eq(x.evicted_on_demand, i - 13);
    ck_assert_uint_eq(x.l1_objects, 28);
  }
  for (uint64_t i = 0; i < 42; i++) ck_assert_int_eq(present(s, BIG + i), i >= 28);
  for (uint64_t j = 0; j < 14; j++) ck_assert(present(s, SMALL + j));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A batch of three 4 MiB keys is all or nothing: room for all three, by
 * evicting three 4 MiB objects. */
START_TEST(a_batch_in_a_fragmented_pool_gets_room_for_every_block) {
  kva_storage *s;
  kva_runtime *rt = fragmented_pool(&s);
  int st[64];
  ck_assert_int_eq(write_batch(s, BIG + 100, 3, 4 * MiB, st), 3);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.evicted_on_demand, 3);
  ck_assert_uint_eq(x.l1_objects, 28);
  for (uint64_t i = 0; i < 14; i++) ck_assert_int_eq(present(s, BIG + i), i >= 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Every 4 MiB object read-locked: only the 4 KiB objects are evictable and
 * evicting them makes no room, so none is evicted. */
START_TEST(nothing_is_evicted_when_only_useless_victims_are_unlocked) {
  kva_storage *s;
  kva_runtime *rt = fragmented_pool(&s);
  int st[64];
  for (uint64_t i = 0; i < 14; i++) lock_key(s, BIG + i);
  ck_assert_int_eq(write_batch(s, BIG + 100, 2, 4 * MiB, st), 0);
  ck_assert_int_eq(st[0], KVA_OUT_OF_MEMORY);
  ck_assert_int_eq(st[1], KVA_OUT_OF_MEMORY);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.evicted_on_demand, 0);
  ck_assert_uint_eq(x.l1_objects, 28);
  for (uint64_t i = 0; i < 14; i++) unlock_key(s, BIG + i);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- randomized: mixed sizes, locks, deletes ------------------------------ */

#define PAGE 4096u
#define R_PAGES 256u /* pool of 1 MiB */
#define R_KEYS 96u   /* about 3x the pool at 8.5 pages a key */
#define R_MAX_PAGES 16u
#define R_STEPS 1000

typedef struct r_obj {
  bool present, write_locked, pinned, in_req;
  uint32_t at, pages; /* where it lies in the pool, in pages */
  uint32_t readers;   /* read locks the test holds */
} r_obj;

/* The test's view of L1: every object's place and the locks it holds. */
typedef struct r_model {
  kva_storage *s;
  uintptr_t base;
  r_obj o[R_KEYS];
  uint64_t rng;
} r_model;

static uint32_t r_rand(r_model *m, uint32_t n) {
  m->rng ^= m->rng << 13;
  m->rng ^= m->rng >> 7;
  m->rng ^= m->rng << 17;
  return (uint32_t)(m->rng % n);
}

static bool r_locked(const r_obj *o) {
  return o->write_locked || o->pinned || o->readers > 0;
}

/* How many blocks of `pages` fit in the pool when only the objects with
 * occupied[id] = 1 are there: the sum over the free runs of run / pages. */
static uint32_t r_room(const r_model *m, const uint8_t *occupied, uint32_t pages) {
  uint8_t busy[R_PAGES] = {0};
  for (uint32_t id = 0; id < R_KEYS; id++)
    if (occupied[id]) memset(busy + m->o[id].at, 1, m->o[id].pages);
  uint32_t room = 0, run = 0;
  for (uint32_t p = 0; p <= R_PAGES; p++) {
    if (p < R_PAGES && !busy[p]) {
      run++;
      continue;
    }
    room += run / pages;
    run = 0;
  }
  return room;
}

/* Which objects the last write evicted: each resident one that is not
 * write-locked is looked up (write-locked ones cannot be looked up; the
 * object count covers them). */
static uint32_t r_find_evicted(r_model *m, uint8_t *evicted) {
  uint32_t n = 0;
  for (uint32_t id = 0; id < R_KEYS; id++) {
    evicted[id] = 0;
    if (!m->o[id].present || m->o[id].write_locked || m->o[id].in_req) continue;
    kva_key k = fixture_key(id);
    kva_tier_hits h;
    ck_assert_int_eq(kva_lookup(m->s, &k, 1, 0, &h), KVA_OK);
    if (h.tier[0].hits) continue;
    evicted[id] = 1;
    n++;
  }
  return n;
}

/* The properties of one demand eviction that made room: only unlocked
 * objects outside the request went, and each of them was needed (keeping
 * any one of them would leave too little room). */
static void r_check_victims(r_model *m, const uint8_t *evicted, uint32_t pages, uint32_t want) {
  uint8_t occupied[R_KEYS];
  for (uint32_t v = 0; v < R_KEYS; v++) {
    if (!evicted[v]) continue;
    ck_assert(!r_locked(&m->o[v]));
    for (uint32_t id = 0; id < R_KEYS; id++)
      occupied[id] = m->o[id].present && (!evicted[id] || id == v);
    ck_assert_msg(r_room(m, occupied, pages) < want, "victim %u was not needed", v);
  }
}

/* Whether [at, at + pages) overlaps a resident object. */
static bool r_overlaps(const r_model *m, uint32_t at, uint32_t pages) {
  for (uint32_t id = 0; id < R_KEYS; id++) {
    const r_obj *o = &m->o[id];
    if (o->present && at < o->at + o->pages && o->at < at + pages) return true;
  }
  return false;
}

/* Records the new objects, checking that they lie inside the pool, clear
 * of every other object, and finishes most of them. */
static void r_place(r_model *m, const uint64_t *ids, size_t n, const kva_buf *b, const int *st,
                    uint32_t pages) {
  for (size_t i = 0; i < n; i++) {
    if (st[i] != KVA_OK) continue;
    uintptr_t off = (uintptr_t)b[i].ptr - m->base;
    ck_assert_uint_eq(off % PAGE, 0);
    ck_assert_uint_le(off / PAGE + pages, R_PAGES);
    ck_assert(!r_overlaps(m, (uint32_t)(off / PAGE), pages));
    r_obj *o = &m->o[ids[i]];
    *o = (r_obj){
        .present = true, .write_locked = true, .at = (uint32_t)(off / PAGE), .pages = pages};
    if (r_rand(m, 8) == 0) continue; /* stays write-locked for a while */
    kva_key k = fixture_key(ids[i]);
    int fst;
    ck_assert_int_eq(kva_finish_write(m->s, &k, 1, &fst), 1);
    o->write_locked = false;
  }
}

/* One reservation of 1-3 keys of one random size, checked against the
 * model: it succeeds exactly when evicting unlocked objects outside the
 * request can make room; it evicts nothing when it fits as it is or
 * cannot fit at all; what it evicts was unlocked, outside the request and
 * needed. */
static void r_write(r_model *m) {
  uint32_t pages = 1 + r_rand(m, R_MAX_PAGES), n = 1 + r_rand(m, 3), want = 0;
  uint64_t ids[3];
  kva_key k[3];
  for (uint32_t i = 0; i < n; i++) {
    bool again;
    do {
      ids[i] = r_rand(m, R_KEYS);
      again = false;
      for (uint32_t q = 0; q < i; q++) again |= ids[q] == ids[i];
    } while (again);
    k[i] = fixture_key(ids[i]);
    m->o[ids[i]].in_req = true;
    want += !m->o[ids[i]].present;
  }
  uint8_t now[R_KEYS], fixed[R_KEYS], evicted[R_KEYS];
  for (uint32_t id = 0; id < R_KEYS; id++) {
    const r_obj *o = &m->o[id];
    now[id] = o->present;
    fixed[id] = o->present && (r_locked(o) || o->in_req);
  }
  bool fits = r_room(m, now, pages) >= want, can = r_room(m, fixed, pages) >= want;
  kva_storage_stats x0 = stats_of(m->s);
  kva_layout l = fixture_layout_bytes((uint64_t)pages * PAGE);
  kva_buf b[3];
  int st[3];
  ck_assert_int_eq(kva_reserve_write(m->s, k, n, &l, KVA_WRITE_NEW, b, st), can ? (int)want : 0);
  for (uint32_t i = 0; i < n; i++)
    ck_assert_int_eq(st[i], m->o[ids[i]].present ? KVA_KEY_NOT_WRITABLE
                            : can                ? KVA_OK
                                                 : KVA_OUT_OF_MEMORY);
  kva_storage_stats x1 = stats_of(m->s);
  uint64_t gone = x1.evicted_on_demand - x0.evicted_on_demand;
  if (fits || !can) ck_assert_uint_eq(gone, 0);
  ck_assert_uint_eq(r_find_evicted(m, evicted), gone);
  ck_assert_uint_eq(x1.l1_objects, x0.l1_objects - gone + (can ? want : 0));
  r_check_victims(m, evicted, pages, want);
  for (uint32_t id = 0; id < R_KEYS; id++)
    if (evicted[id]) m->o[id].present = false;
  r_place(m, ids, n, b, st, pages);
  for (uint32_t i = 0; i < n; i++) m->o[ids[i]].in_req = false;
}

/* A random resident key, or R_KEYS when none qualifies after a few tries. */
static uint32_t r_pick(r_model *m, bool (*ok)(const r_obj *)) {
  for (int t = 0; t < 16; t++) {
    uint32_t id = r_rand(m, R_KEYS);
    if (m->o[id].present && ok(&m->o[id])) return id;
  }
  return R_KEYS;
}

static bool r_readable(const r_obj *o) {
  return !o->write_locked && o->readers < 3;
}
static bool r_read_held(const r_obj *o) {
  return o->readers > 0;
}
static bool r_write_held(const r_obj *o) {
  return o->write_locked;
}
static bool r_pinnable(const r_obj *o) {
  return !o->write_locked && !o->pinned;
}
static bool r_pin_held(const r_obj *o) {
  return o->pinned;
}
static bool r_unlocked(const r_obj *o) {
  return !r_locked(o);
}

/* Everything but a write: take or drop a read lock or a pin, finish a
 * write, delete an unlocked object. */
static void r_other(r_model *m, uint32_t dice) {
  kva_tier_hits h;
  int st;
  uint32_t id = R_KEYS;
  if (dice < 8 && (id = r_pick(m, r_readable)) < R_KEYS) {
    lock_key(m->s, id);
    m->o[id].readers++;
  } else if (dice < 18 && (id = r_pick(m, r_read_held)) < R_KEYS) {
    unlock_key(m->s, id);
    m->o[id].readers--;
  } else if (dice < 26 && (id = r_pick(m, r_write_held)) < R_KEYS) {
    kva_key k = fixture_key(id);
    ck_assert_int_eq(kva_finish_write(m->s, &k, 1, &st), 1);
    m->o[id].write_locked = false;
  } else if (dice < 30 && (id = r_pick(m, r_pinnable)) < R_KEYS) {
    kva_key k = fixture_key(id);
    ck_assert_int_eq(kva_lookup(m->s, &k, 1, 1, &h), KVA_OK);
    ck_assert_uint_eq(h.tier[0].hits, 1);
    m->o[id].pinned = true;
  } else if (dice < 35 && (id = r_pick(m, r_pin_held)) < R_KEYS) {
    kva_key k = fixture_key(id);
    ck_assert_int_eq(kva_unpin(m->s, &k, 1), 1);
    m->o[id].pinned = false;
  } else if ((id = r_pick(m, r_unlocked)) < R_KEYS) {
    kva_key k = fixture_key(id);
    ck_assert_int_eq(kva_delete(m->s, &k, 1, 0, &st), 1);
    m->o[id].present = false;
  }
}

/* Releases every lock the model holds. */
static void r_release_all(r_model *m) {
  int st;
  for (uint32_t id = 0; id < R_KEYS; id++) {
    r_obj *o = &m->o[id];
    kva_key k = fixture_key(id);
    if (o->write_locked) ck_assert_int_eq(kva_finish_write(m->s, &k, 1, &st), 1);
    if (o->pinned) ck_assert_int_eq(kva_unpin(m->s, &k, 1), 1);
    for (; o->readers; o->readers--) unlock_key(m->s, id);
  }
}

START_TEST(random_mixed_sizes_evict_only_what_makes_room) {
  kva_runtime *rt = fixture_storage(0, R_PAGES * PAGE, "eviction.ratio=0", NULL);
  static r_model m;
  memset(&m, 0, sizeof(m));
  m.s = kva_storage_of(rt);
  m.rng = 0x2545f4914f6cdd1dull * (uint64_t)(_i + 1);
  int st;
  kva_buf b;
  kva_key k = fixture_key(R_KEYS);
  kva_layout one = fixture_layout_bytes(PAGE);
  ck_assert_int_eq(kva_reserve_write(m.s, &k, 1, &one, KVA_WRITE_NEW, &b, &st), 1);
  m.base = (uintptr_t)b.ptr; /* the first block of an empty pool */
  ck_assert_int_eq(kva_finish_write(m.s, &k, 1, &st), 1);
  ck_assert_int_eq(kva_delete(m.s, &k, 1, 0, &st), 1);
  ck_assert_uint_eq(stats_of(m.s).l1_capacity_bytes, R_PAGES * PAGE);
  for (int step = 0; step < R_STEPS; step++) {
    uint32_t dice = r_rand(&m, 100);
    if (dice < 60)
      r_write(&m);
    else
      r_other(&m, dice - 60);
  }
  r_release_all(&m);
  fixture_memcheck_clean(m.s);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_fragmentation");
  TCase *f = tcase_create("fragmented_pool");
  tcase_set_timeout(f, 60);
  tcase_add_test(f, a_fragmented_full_pool_keeps_admitting_4mib_objects);
  tcase_add_test(f, a_batch_in_a_fragmented_pool_gets_room_for_every_block);
  tcase_add_test(f, nothing_is_evicted_when_only_useless_victims_are_unlocked);
  suite_add_tcase(s, f);
  TCase *r = tcase_create("randomized");
  tcase_set_timeout(r, 120);
  tcase_add_loop_test(r, random_mixed_sizes_evict_only_what_makes_room, 0, 4);
  suite_add_tcase(s, r);
  return s;
}
