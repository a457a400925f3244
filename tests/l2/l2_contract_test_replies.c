/*
 * l2_contract_test_replies.c — the replies: every STORE, LOOKUP_AND_LOCK,
 * LOAD and STATS is answered exactly once with KVA_L2_DONE to its sender,
 * with its tag and its pointer, whatever the tag; UNLOCK never is; many
 * requests in flight from two senders that use the same tags are each
 * answered once, to their own sender, in any order (the protocol allows
 * any), and the adapter leaves a request alone once it answered it (each
 * is poisoned and freed on its reply: ASan sees a late touch).
 */
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_contract_test.h"
#include "tests/support/fixture.h"

/* One request sent with `tag` from c->port, answered once with it. */
static int call_tagged(ct *c, uint32_t type, kva_l2_req *r, uint64_t tag) {
  ct_send_from(c, c->port, type, r, tag);
  uint64_t got;
  kva_l2_req *p = ct_reply_on(c->port, &got);
  ck_assert_msg(got == tag, "type %u: reply tag %#llx, sent %#llx", type, (unsigned long long)got,
                (unsigned long long)tag);
  ck_assert_msg(p == r, "type %u: reply pointer %p, sent %p", type, (void *)p, (void *)r);
  ct_expect_quiet(c, c->port); /* and only once */
  return r->result;
}

START_TEST(every_request_is_answered_once_with_its_tag_and_pointer) {
  ct c = ct_open();
  ct_objs *o = ct_objs_new(1, 3, 0);
  kva_l2_req store = {.keys = o->keys, .n = 3, .layout = &o->layout, .bufs = o->bufs};
  ck_assert_int_eq(call_tagged(&c, KVA_L2_STORE, &store, 0), KVA_OK);
  ct_check_store_intact(o);
  kva_l2_req lookup = {.keys = o->keys, .n = 3, .bits = o->bits};
  ck_assert_int_eq(call_tagged(&c, KVA_L2_LOOKUP_AND_LOCK, &lookup, UINT64_MAX), KVA_OK);
  ck_assert_uint_eq(ct_bits_mask(o), 7);
  ct_objs_blank(o);
  kva_l2_req load = {
      .keys = o->keys, .n = 3, .layout = &o->layout, .bufs = o->bufs, .bits = o->bits};
  ck_assert_int_eq(call_tagged(&c, KVA_L2_LOAD, &load, 0x8000000000000001ull), KVA_OK);
  ck_assert_uint_eq(ct_check_loaded(o, 0), 7);
  kva_l2_stats st;
  kva_l2_req stats = {.stats = &st};
  ck_assert_int_eq(call_tagged(&c, KVA_L2_STATS, &stats, 42), KVA_OK);
  ck_assert_uint_eq(st.keys_locked, 3);
  ct_unlock_objs(&c, o);
  ct_objs_free(o);
  ct_close(&c);
}
END_TEST

START_TEST(an_unlock_is_never_answered) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 1, 2, 0), KVA_OK);
  ck_assert_uint_eq(ct_lock(&c, 1, 2), 3);
  kva_key k[2] = {fixture_key(1), fixture_key(2)};
  /* from a sender with a tag, as the prober sends it, and from none */
  ck_assert_int_eq(kva_send(c.a, KVA_L2_UNLOCK, &k[0], sizeof(k[0]), kva_port_actor(c.port), 77),
                   KVA_OK);
  ck_assert_int_eq(kva_send(c.a, KVA_L2_UNLOCK, &k[1], sizeof(k[1]), NULL, 0), KVA_OK);
  ct_expect_quiet(&c, c.port);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 0);
  ct_close(&c);
}
END_TEST

/* ---- in flight ------------------------------------------------------------ */

#define NF 8 /* keys in flight: within every bounded adapter's capacity */

typedef struct item {
  kva_port *port;
  uint64_t tag;
  uint32_t type;
  kva_l2_req *r;
  ct_objs *o; /* key `key`, one per request */
  kva_l2_stats *st;
  int answered;
} item;

static item item_new(kva_port *port, uint64_t tag, uint32_t type, uint64_t key) {
  item it = {.port = port, .tag = tag, .type = type};
  it.r = calloc(1, sizeof(*it.r));
  it.o = ct_objs_new(key, 1, 0);
  ck_assert(it.r && it.o);
  if (type == KVA_L2_LOAD) ct_objs_blank(it.o);
  if (type == KVA_L2_STATS) {
    it.st = malloc(sizeof(*it.st));
    ck_assert_ptr_nonnull(it.st);
    *it.r = (kva_l2_req){.stats = it.st};
  } else {
    *it.r = (kva_l2_req){.keys = it.o->keys,
                         .n = 1,
                         .layout = &it.o->layout,
                         .bufs = type == KVA_L2_LOOKUP_AND_LOCK ? NULL : it.o->bufs,
                         .bits = type == KVA_L2_STORE ? NULL : it.o->bits};
  }
  return it;
}

/* The checks of one answered request, then it is poisoned and freed. */
static void item_retire(item *it) {
  ck_assert_msg(it->r->result == KVA_OK, "type %u, tag %llu: result %d", it->type,
                (unsigned long long)it->tag, it->r->result);
  if (it->type == KVA_L2_STORE) ct_check_store_intact(it->o);
  if (it->type == KVA_L2_LOOKUP_AND_LOCK) ck_assert_uint_eq(ct_bits_mask(it->o), 1);
  if (it->type == KVA_L2_LOAD) ck_assert_uint_eq(ct_check_loaded(it->o, 0), 1);
  memset(it->r, 0x5a, sizeof(*it->r));
  if (it->st) memset(it->st, 0x5a, sizeof(*it->st));
  for (size_t i = 0; i < it->o->n; i++) memset(&it->o->keys[i], 0x5a, sizeof(kva_key));
  free(it->r);
  free(it->st);
  ct_objs_free(it->o);
}

/* Receives every reply due on port: each names one of its items (same
 * tag, same pointer), none twice, in whatever order they come. */
static void collect(kva_port *port, item *items, size_t n) {
  size_t due = 0;
  for (size_t i = 0; i < n; i++) due += items[i].port == port;
  for (; due > 0; due--) {
    uint64_t tag;
    kva_l2_req *p = ct_reply_on(port, &tag);
    item *it = NULL;
    for (size_t i = 0; !it && i < n; i++)
      if (items[i].port == port && items[i].tag == tag) it = &items[i];
    ck_assert_msg(it != NULL, "a reply with tag %llu that this sender never sent",
                  (unsigned long long)tag);
    ck_assert_msg(!it->answered, "tag %llu answered twice", (unsigned long long)tag);
    ck_assert_msg(p == it->r, "tag %llu: reply pointer %p, sent %p (another sender's?)",
                  (unsigned long long)tag, (void *)p, (void *)it->r);
    it->answered = 1;
    item_retire(it);
  }
}

/* NF requests of `type` (key i from port i % 2) and NF STATS between them
 * (from the other port); both ports count their tags 1, 2, ... */
static void fly(ct *c, kva_port *ports[2], uint32_t type) {
  item items[2 * NF];
  uint64_t tags[2] = {0, 0};
  for (size_t i = 0; i < NF; i++) {
    int p = (int)(i % 2);
    items[2 * i] = item_new(ports[p], ++tags[p], type, i);
    items[2 * i + 1] = item_new(ports[!p], ++tags[!p], KVA_L2_STATS, 0);
  }
  for (size_t i = 0; i < 2 * NF; i++)
    ct_send_from(c, items[i].port, items[i].type, items[i].r, items[i].tag);
  collect(ports[0], items, 2 * NF);
  collect(ports[1], items, 2 * NF);
}

START_TEST(requests_in_flight_are_each_answered_once_to_their_sender) {
  ct c = ct_open();
  kva_port *ports[2] = {c.port, kva_port_open(c.rt, "l2_contract_2")};
  ck_assert_ptr_nonnull(ports[1]);
  fly(&c, ports, KVA_L2_STORE);
  fly(&c, ports, KVA_L2_LOOKUP_AND_LOCK);
  fly(&c, ports, KVA_L2_LOAD);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, NF); /* the counters: l2_contract_test_data.c */
  ct_unlock(&c, 0, NF);
  ct_expect_quiet(&c, ports[1]);
  kva_port_close(ports[1]);
  ct_close(&c);
}
END_TEST

TCase *l2_contract_replies_tcase(void) {
  TCase *tc = tcase_create("replies");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, every_request_is_answered_once_with_its_tag_and_pointer);
  tcase_add_test(tc, an_unlock_is_never_answered);
  tcase_add_test(tc, requests_in_flight_are_each_answered_once_to_their_sender);
  return tc;
}
