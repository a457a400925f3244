/*
 * l2_forced_delete_test.c — forced deletes of objects a controller still
 * holds: the memory stays with its holder, and late releases do not touch
 * a newer object of the same key.
 */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define OBJ_BYTES (16u * 1024u)

/* What the random runs found (seeds 52 and 54 at 20000 steps) before
 * forced deletes kept a locked object's memory: the L1 manager freed a
 * force-deleted object's block at once and forgot it while a store task or
 * a prefetch still held it, and those released their locks by key. Each
 * test below replays one consequence deterministically.
 */

/* "lazy": an L2 adapter holding one object, that touches request buffers
 * only when it answers, 1 ms (virtual) after the request — as a disk
 * adapter's DMA would, and as the protocol allows (the buffers stay locked
 * until the reply). */
#define LAZY_OPS 16u
typedef struct lazy_op {
  uint32_t type;
  kva_actor *to;
  uint64_t tag;
  kva_l2_req *req;
} lazy_op;
typedef struct lazy {
  kva_actor *self;
  lazy_op ops[LAZY_OPS];
  uint32_t nops;
  bool armed;
} lazy;
static struct {
  kva_key key;
  bool full;
  uint8_t bytes[OBJ_BYTES];
} lazy_slot;

static bool lazy_has(const kva_key *k) {
  return lazy_slot.full && memcmp(k, &lazy_slot.key, sizeof(*k)) == 0;
}

static void lazy_do(const lazy_op *op) {
  kva_l2_req *r = op->req;
  for (size_t i = 0; i < r->n; i++) {
    if (op->type == KVA_L2_STORE && r->bufs[i].len == OBJ_BYTES) {
      lazy_slot.key = r->keys[i];
      memcpy(lazy_slot.bytes, r->bufs[i].ptr, OBJ_BYTES);
      lazy_slot.full = true;
    } else if (op->type == KVA_L2_LOOKUP_AND_LOCK && lazy_has(&r->keys[i])) {
      kva_bit_set(r->bits, i);
    } else if (op->type == KVA_L2_LOAD && lazy_has(&r->keys[i]) && r->bufs[i].len == OBJ_BYTES) {
      memcpy(r->bufs[i].ptr, lazy_slot.bytes, OBJ_BYTES);
      kva_bit_set(r->bits, i);
    }
  }
  r->result = KVA_OK;
  kva_send(op->to, KVA_L2_DONE, &r, sizeof(r), NULL, op->tag);
}

static void lazy_flush(lazy *z) {
  for (uint32_t i = 0; i < z->nops; i++) lazy_do(&z->ops[i]);
  z->nops = 0;
}

static void lazy_receive(kva_actor *self, void *state, const kva_msg *m) {
  lazy *z = state;
  kva_l2_req *r = NULL;
  if (m->len == sizeof(r)) memcpy(&r, m->data, sizeof(r));
  if (m->type == KVA_MSG_TIMER) {
    z->armed = false;
    lazy_flush(z);
  } else if (m->type == KVA_L2_STATS && r) {
    memset(r->stats, 0, sizeof(*r->stats));
    r->result = KVA_OK;
    kva_send(m->from, KVA_L2_DONE, &r, sizeof(r), self, m->tag);
  } else if (m->type >= KVA_L2_STORE && m->type <= KVA_L2_LOAD && r) {
    ck_assert_uint_lt(z->nops, LAZY_OPS);
    z->ops[z->nops++] = (lazy_op){m->type, m->from, m->tag, r};
    if (!z->armed) z->armed = kva_timer(self, 1000000u, 0, 0) >= 0;
  }
}

static void lazy_stop(kva_actor *self, void *state) {
  lazy_flush(state); /* every request is answered */
  free(state);
}

static kva_actor *lazy_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                             size_t errlen) {
  static const kva_behavior b = {.name = "lazy", .receive = lazy_receive, .on_stop = lazy_stop};
  lazy *z = calloc(1, sizeof(*z));
  if (z && (z->self = kva_spawn(rt, &b, z, NULL))) return z->self;
  free(z);
  return NULL;
}

/* Deterministic mode, one lazy tier, and an L1 of three objects: two fit
 * below the eviction watermark, and the pool hands a new object the
 * memory a removed one had just given back. */
static kva_runtime *start_lazy(void) {
  int rc = kva_l2_register("lazy", lazy_spawn);
  ck_assert(rc == KVA_OK || rc == KVA_EINVAL); /* EINVAL: registered by an earlier test */
  memset(&lazy_slot, 0, sizeof(lazy_slot));
  return fixture_storage(0, OBJ_BYTES * 3, "l2=[{\"type\":\"lazy\"}]", NULL);
}

static void force_delete(kva_storage *s, uint64_t id) {
  ck_assert_int_eq(l2_delete_one(s, id, 1), KVA_OK);
}

/* Reads key id's prefetched object, which must be version 1 of id (and
 * says so when it is version 1 of key `other`), then releases it. */
static void expect_own_bytes(kva_storage *s, uint64_t id, uint64_t other) {
  kva_key k = fixture_key(id);
  kva_buf buf;
  ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &buf), KVA_OK);
  ck_assert_msg(l2_matches(buf.ptr, buf.len, id, 1), "key %lu holds %s", (unsigned long)id,
                l2_matches(buf.ptr, buf.len, other, 1) ? "the other key's bytes"
                                                       : "bytes never written");
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
}

/* The store task of key a still holds a's buffer when a is force-deleted;
 * were the memory given to key b at once, the tier would store b's bytes
 * as a, then serve them for a. */
START_TEST(forced_delete_during_a_store_keeps_the_bytes_it_stores) {
  kva_runtime *rt = start_lazy();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t a = 1, b = 2;
  l2_write(s, &a, 1, &l, 1);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, a), 1); /* the store task's lock; the tier answers at 1 ms */
  force_delete(s, a);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  l2_write(s, &b, 1, &l, 1); /* over a's memory */
  kva_runtime_advance(rt, 2000000u);
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
  ck_assert_uint_eq(l2_prefetch(s, &a, 1, &l, 0), 1);
  expect_own_bytes(s, a, b);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A prefetch's L2 load still targets a's buffer when a is force-deleted;
 * were the memory given to key b, the load would overwrite b. */
START_TEST(forced_delete_during_a_load_leaves_other_objects_alone) {
  kva_runtime *rt = start_lazy();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t a = 1, b = 2;
  l2_seed(s, 0, &a, 1, &l, 1);
  kva_prefetch *h = l2_submit(s, &a, 1, &l, 0);
  kva_runtime_run_until_idle(rt);
  kva_runtime_advance(rt, 1000000u); /* lookup answered; the load waits in the tier */
  ck_assert_int_ne(l2_l1_state(s, a) & L1_WRITE_LOCKED, 0);
  force_delete(s, a);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  l2_write(s, &b, 1, &l, 1);           /* over a's memory */
  ck_assert_uint_eq(l2_wait(s, h), 0); /* a is gone */
  ck_assert_uint_eq(l2_prefetch(s, &b, 1, &l, 0), 1);
  expect_own_bytes(s, b, a);
  kva_runtime_shutdown(rt);
}
END_TEST

/* The store task of a's first object releases its read lock after a was
 * force-deleted and written again; by key, it would take the lock of
 * whoever holds the new object (here a prefetch's). */
START_TEST(forced_delete_during_a_store_leaves_later_locks_of_the_key_alone) {
  kva_runtime *rt = l2_start(0, 64u * 1024u * 1024u, 1, "\"latency_us\":1000", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t a = 1;
  l2_write(s, &a, 1, &l, 1);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, a), 1); /* the store task's; the mock answers at 1 ms */
  force_delete(s, a);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK); /* version 2 is not stored */
  l2_write(s, &a, 1, &l, 2);
  kva_prefetch *h = l2_submit(s, &a, 1, &l, 0);
  ck_assert_uint_eq(l2_wait(s, h), 1); /* an L1 hit: read-locked for us */
  ck_assert_int_eq(l2_readers(s, a), 1);
  kva_runtime_advance(rt, 2000000u); /* the store of version 1 completes */
  ck_assert_int_eq(l2_readers(s, a), 1);
  l2_read_release(s, &a, 1, 2, 0);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_forced_delete");
  TCase *tc = tcase_create("forced");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, forced_delete_during_a_store_keeps_the_bytes_it_stores);
  tcase_add_test(tc, forced_delete_during_a_load_leaves_other_objects_alone);
  tcase_add_test(tc, forced_delete_during_a_store_leaves_later_locks_of_the_key_alone);
  suite_add_tcase(su, tc);
  return su;
}
