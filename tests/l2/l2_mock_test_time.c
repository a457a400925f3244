/*
 * l2_mock_test_time.c — latency and bandwidth emulation. In deterministic
 * mode the clock is virtual: a reply is checked to be absent 1 ns before
 * its emulated completion and present at it (kva_runtime_advance). One
 * threaded test checks the real clock as a lower bound.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_mock_test.h"
#include "tests/support/fixture.h"

#define US 1000ull
#define MS 1000000ull

/* The next reply, already there without moving the clock. */
static void reply_now(mk *h, uint64_t tag, const kva_l2_req *r) {
  mk_expect_reply_within(h, 0, tag, r);
}

/* The reply arrives exactly ns from now: not at ns - 1, but at ns. */
static void reply_after(mk *h, uint64_t tag, const kva_l2_req *r, uint64_t ns) {
  mk_expect_silence(h, 0);
  kva_runtime_advance(h->rt, ns - 1);
  mk_expect_silence(h, 0);
  kva_runtime_advance(h->rt, 1);
  reply_now(h, tag, r);
}

/* Sends r as `type`; its reply comes exactly ns later (reply_after). */
static void call_after(mk *h, uint32_t type, kva_l2_req *r, uint64_t ns) {
  reply_after(h, mk_send(h, type, r), r, ns);
}

/* Sends r as `type`; its reply is there without moving the clock. */
static void call_now(mk *h, uint32_t type, kva_l2_req *r) {
  reply_now(h, mk_send(h, type, r), r);
}

typedef struct reqs {
  objs *o;
  kva_l2_req store, lookup, load;
} reqs;

static reqs *reqs_make(uint64_t first, size_t n, uint64_t bytes) {
  reqs *q = calloc(1, sizeof(*q));
  objs *o = q->o = objs_make(first, n, bytes, 1);
  q->store = (kva_l2_req){.keys = o->k, .n = n, .layout = &o->l, .bufs = o->b};
  q->lookup = (kva_l2_req){.keys = o->k, .n = n, .bits = o->bits};
  q->load = (kva_l2_req){.keys = o->k, .n = n, .layout = &o->l, .bufs = o->b, .bits = o->bits};
  return q;
}

/* Frees the NULL-terminated reqs, unlocking their keys, then mk_close. */
static void close_with(mk *h, reqs *q, ...) {
  va_list ap;
  va_start(ap, q);
  for (; q; q = va_arg(ap, reqs *)) {
    mk_unlock_free(h, q->o);
    free(q);
  }
  va_end(ap);
  mk_close(h);
}

START_TEST(latency_holds_every_reply_back_exactly) {
  mk h = mk_open(0, "\"latency_us\":100");
  reqs *q = reqs_make(0, 2, 500);
  call_after(&h, KVA_L2_STORE, &q->store, 100 * US);
  call_after(&h, KVA_L2_LOOKUP_AND_LOCK, &q->lookup, 100 * US);
  call_after(&h, KVA_L2_LOAD, &q->load, 100 * US);
  ck_assert_uint_eq(objs_bits(q->o), 3);
  kva_l2_stats s;
  kva_l2_req st = {.stats = &s};
  call_now(&h, KVA_L2_STATS, &st); /* STATS costs nothing */
  close_with(&h, q, NULL);
}
END_TEST

START_TEST(bandwidth_adds_bytes_over_bandwidth) {
  mk h = mk_open(0, "\"latency_us\":10,\"bandwidth_bytes_per_s\":1000000");
  reqs *q = reqs_make(0, 2, 500); /* 1000 bytes: 1 ms */
  call_after(&h, KVA_L2_STORE, &q->store, 10 * US + 1 * MS);
  call_after(&h, KVA_L2_LOAD, &q->load, 10 * US + 1 * MS);
  reqs *missing = reqs_make(50, 1, 500); /* nothing moved: latency only */
  call_after(&h, KVA_L2_LOAD, &missing->load, 10 * US);
  close_with(&h, q, missing, NULL);
}
END_TEST

START_TEST(transfers_queue_on_one_channel) {
  mk h = mk_open(0, "\"bandwidth_bytes_per_s\":1000000");
  reqs *a = reqs_make(0, 1, 1000), *b = reqs_make(1, 1, 1000);
  uint64_t ta = mk_send(&h, KVA_L2_STORE, &a->store), tb = mk_send(&h, KVA_L2_STORE, &b->store);
  reply_after(&h, ta, &a->store, 1 * MS);
  reply_after(&h, tb, &b->store, 1 * MS);
  close_with(&h, a, b, NULL);
}
END_TEST

START_TEST(a_lookup_costs_latency_only_and_overtakes_a_transfer) {
  mk h = mk_open(0, "\"latency_us\":100,\"bandwidth_bytes_per_s\":1000000");
  reqs *a = reqs_make(0, 1, 1000), *b = reqs_make(7, 1, 1);
  uint64_t ta = mk_send(&h, KVA_L2_STORE, &a->store);
  uint64_t tb = mk_send(&h, KVA_L2_LOOKUP_AND_LOCK, &b->lookup);
  reply_after(&h, tb, &b->lookup, 100 * US);
  reply_after(&h, ta, &a->store, 1 * MS);
  close_with(&h, a, b, NULL);
}
END_TEST

START_TEST(replies_leave_in_completion_order) {
  mk h = mk_open(0, "\"latency_us\":100,\"bandwidth_bytes_per_s\":1000000");
  reqs *a = reqs_make(0, 1, 1000), *b = reqs_make(1, 1, 1), *c = reqs_make(2, 1, 1);
  kva_l2_stats s;
  kva_l2_req d = {.stats = &s};
  uint64_t ta = mk_send(&h, KVA_L2_STORE, &a->store);            /* 1.1 ms */
  uint64_t tb = mk_send(&h, KVA_L2_STORE, &b->store);            /* after a: 1.201 ms */
  uint64_t tc = mk_send(&h, KVA_L2_LOOKUP_AND_LOCK, &c->lookup); /* 0.1 ms */
  uint64_t td = mk_send(&h, KVA_L2_STATS, &d);                   /* at once */
  kva_runtime_advance(h.rt, 2 * MS);
  reply_now(&h, td, &d);
  reply_now(&h, tc, &c->lookup);
  reply_now(&h, ta, &a->store);
  reply_now(&h, tb, &b->store);
  close_with(&h, a, b, c, NULL);
}
END_TEST

START_TEST(without_emulation_replies_come_at_once) {
  mk h = mk_open(0, "");
  reqs *q = reqs_make(0, 3, 4096);
  uint64_t t0 = kva_runtime_now_ns(h.rt);
  call_now(&h, KVA_L2_STORE, &q->store);
  call_now(&h, KVA_L2_LOOKUP_AND_LOCK, &q->lookup);
  call_now(&h, KVA_L2_LOAD, &q->load);
  ck_assert_uint_eq(kva_runtime_now_ns(h.rt), t0);
  ck_assert_uint_eq(objs_bits(q->o), 7);
  close_with(&h, q, NULL);
}
END_TEST

static void set_latency(mk *h, uint64_t us) {
  mock_control c = {.set = MOCK_SET_LATENCY | MOCK_SET_BANDWIDTH, .latency_us = us};
  mk_control(h, &c);
}

START_TEST(a_latency_set_by_control_applies_to_later_requests) {
  mk h = mk_open(0, "");
  reqs *a = reqs_make(0, 1, 64), *b = reqs_make(1, 1, 64);
  set_latency(&h, 50);
  call_after(&h, KVA_L2_STORE, &a->store, 50 * US);
  /* a request handled before the change keeps its time; a transfer after
   * it still waits for the channel */
  uint64_t ta = mk_send(&h, KVA_L2_LOAD, &a->load);
  set_latency(&h, 0);
  uint64_t tb = mk_send(&h, KVA_L2_STORE, &b->store);
  reply_after(&h, ta, &a->load, 50 * US);
  reply_now(&h, tb, &b->store);
  call_now(&h, KVA_L2_STORE, &b->store);
  close_with(&h, a, b, NULL);
}
END_TEST

START_TEST(stopping_the_mock_answers_what_is_pending) {
  mk h = mk_open(0, "\"latency_us\":1000000");
  reqs *q = reqs_make(0, 1, 64);
  uint64_t tag = mk_send(&h, KVA_L2_STORE, &q->store);
  mk_expect_silence(&h, 0);
  kva_actor_stop(h.a);
  reply_now(&h, tag, &q->store);
  ck_assert_int_eq(q->store.result, KVA_OK);
  objs_free(q->o);
  free(q);
  mk_shutdown(&h);
}
END_TEST

START_TEST(threaded_latency_is_a_lower_bound) {
  mk h = mk_open(2, "\"latency_us\":20000");
  uint64_t t0 = fixture_now_ns();
  ck_assert_int_eq(mk_store_range(&h, 0, 1, 64, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 1), 1);
  ck_assert_uint_ge(fixture_now_ns() - t0, 40 * MS);
  mk_close(&h);
}
END_TEST

TCase *l2_mock_time_tcase(void) {
  TCase *t = tcase_create("time");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, latency_holds_every_reply_back_exactly);
  tcase_add_test(t, bandwidth_adds_bytes_over_bandwidth);
  tcase_add_test(t, transfers_queue_on_one_channel);
  tcase_add_test(t, a_lookup_costs_latency_only_and_overtakes_a_transfer);
  tcase_add_test(t, replies_leave_in_completion_order);
  tcase_add_test(t, without_emulation_replies_come_at_once);
  tcase_add_test(t, a_latency_set_by_control_applies_to_later_requests);
  tcase_add_test(t, stopping_the_mock_answers_what_is_pending);
  tcase_add_test(t, threaded_latency_is_a_lower_bound);
  return t;
}
