/*
 * l2_contract_test_malformed.c — malformed requests: no keys, too many
 * keys, no bits, no buffers, no or an invalid layout, an invalid key, an
 * empty or NULL buffer, no stats, and payloads that are not one request
 * pointer. Each is answered once (KVA_L2_DONE, same tag: the sender must
 * not hang), with a negative result where the payload names a request,
 * and changes nothing: no bit set, no buffer written, the same STATS, the
 * stored key as it was and no new key. One loop test per case, each in a
 * fresh tier that holds key HELD (version 0; locked by the sender before
 * a LOAD, as LOAD's senders hold their keys' locks). A STORE's keys are
 * HELD and NEW with version 1 bytes: a part of it applied shows.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_contract_test.h"
#include "tests/support/fixture.h"

#define HELD 50u /* stored before the request; the request's keys[0] */
#define NEW 51u  /* the request's keys[1]: must not appear */
/* More keys than any adapter takes (kvact's own limit is 2^24); only
 * two keys and two buffers are behind the pointers. */
#define TOO_MANY ((size_t)1 << 40)
#define UNTOUCHED 0x7e57 /* r->result before: a payload with no request leaves it */

typedef enum {
  NO_KEYS,        /* n = 0 */
  NULL_KEYS,      /* keys = NULL, n = 2 */
  MANY_KEYS,      /* n = TOO_MANY */
  NULL_BITS,      /* bits = NULL */
  NULL_BUFS,      /* bufs = NULL */
  NULL_LAYOUT,    /* layout = NULL */
  EMPTY_LAYOUT,   /* ntensors = 0: kva_layout_bytes 0 */
  KEY_NO_HASH,    /* keys[1].hash_len = 0 */
  KEY_LONG_HASH,  /* keys[1].hash_len = 33 */
  KEY_AT_MODEL,   /* keys[1].model holds '@' */
  KEY_NO_MODEL,   /* keys[1].model = "" */
  EMPTY_BUF,      /* bufs[1].len = 0 (a STORE: nothing to store) */
  NULL_BUF,       /* bufs[1].ptr = NULL */
  NULL_STATS,     /* stats = NULL */
  PAYLOAD_EMPTY,  /* no payload */
  PAYLOAD_SHORT,  /* 4 bytes */
  PAYLOAD_DOUBLE, /* two request pointers */
} spoil;

typedef struct bad_case {
  uint32_t type;
  spoil how;
  const char *what;
} bad_case;

#define STORE KVA_L2_STORE
#define LOOKUP KVA_L2_LOOKUP_AND_LOCK
#define LOAD KVA_L2_LOAD
#define STATS KVA_L2_STATS

static const bad_case cases[] = {
    {STORE, NO_KEYS, "STORE of no keys"},
    {STORE, NULL_KEYS, "STORE with keys = NULL"},
    {STORE, MANY_KEYS, "STORE of too many keys"},
    {STORE, NULL_BUFS, "STORE with bufs = NULL"},
    {STORE, NULL_LAYOUT, "STORE with layout = NULL"},
    {STORE, EMPTY_LAYOUT, "STORE with an empty layout"},
    {STORE, KEY_NO_HASH, "STORE of a key with no hash"},
    {STORE, KEY_LONG_HASH, "STORE of a key with a 33-byte hash"},
    {STORE, KEY_AT_MODEL, "STORE of a key whose model holds '@'"},
    {STORE, KEY_NO_MODEL, "STORE of a key with no model"},
    {STORE, EMPTY_BUF, "STORE of an empty buffer"},
    {STORE, NULL_BUF, "STORE of a NULL buffer"},
    {STORE, PAYLOAD_EMPTY, "STORE with no payload"},
    {STORE, PAYLOAD_SHORT, "STORE with a 4-byte payload"},
    {STORE, PAYLOAD_DOUBLE, "STORE with two pointers as payload"},
    {LOOKUP, NO_KEYS, "LOOKUP_AND_LOCK of no keys"},
    {LOOKUP, NULL_KEYS, "LOOKUP_AND_LOCK with keys = NULL"},
    {LOOKUP, MANY_KEYS, "LOOKUP_AND_LOCK of too many keys"},
    {LOOKUP, NULL_BITS, "LOOKUP_AND_LOCK with bits = NULL"},
    {LOOKUP, KEY_NO_HASH, "LOOKUP_AND_LOCK of a key with no hash"},
    {LOOKUP, KEY_AT_MODEL, "LOOKUP_AND_LOCK of a key whose model holds '@'"},
    {LOOKUP, PAYLOAD_EMPTY, "LOOKUP_AND_LOCK with no payload"},
    {LOOKUP, PAYLOAD_SHORT, "LOOKUP_AND_LOCK with a 4-byte payload"},
    {LOOKUP, PAYLOAD_DOUBLE, "LOOKUP_AND_LOCK with two pointers as payload"},
    {LOAD, NO_KEYS, "LOAD of no keys"},
    {LOAD, NULL_KEYS, "LOAD with keys = NULL"},
    {LOAD, MANY_KEYS, "LOAD of too many keys"},
    {LOAD, NULL_BITS, "LOAD with bits = NULL"},
    {LOAD, NULL_BUFS, "LOAD with bufs = NULL"},
    {LOAD, NULL_LAYOUT, "LOAD with layout = NULL"},
    {LOAD, EMPTY_LAYOUT, "LOAD with an empty layout"},
    {LOAD, KEY_NO_HASH, "LOAD of a key with no hash"},
    {LOAD, KEY_AT_MODEL, "LOAD of a key whose model holds '@'"},
    {LOAD, NULL_BUF, "LOAD into a NULL buffer"},
    {LOAD, PAYLOAD_EMPTY, "LOAD with no payload"},
    {LOAD, PAYLOAD_SHORT, "LOAD with a 4-byte payload"},
    {LOAD, PAYLOAD_DOUBLE, "LOAD with two pointers as payload"},
    {STATS, NULL_STATS, "STATS with stats = NULL"},
    {STATS, PAYLOAD_EMPTY, "STATS with no payload"},
    {STATS, PAYLOAD_SHORT, "STATS with a 4-byte payload"},
    {STATS, PAYLOAD_DOUBLE, "STATS with two pointers as payload"},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* The defects of the request's own fields. */
static void spoil_request(kva_l2_req *r, spoil how, kva_layout *empty) {
  switch (how) {
  case NO_KEYS:
    r->n = 0;
    break;
  case NULL_KEYS:
    r->keys = NULL;
    break;
  case MANY_KEYS:
    r->n = TOO_MANY;
    break;
  case NULL_BITS:
    r->bits = NULL;
    break;
  case NULL_BUFS:
    r->bufs = NULL;
    break;
  case NULL_LAYOUT:
    r->layout = NULL;
    break;
  case EMPTY_LAYOUT:
    memset(empty, 0, sizeof(*empty));
    r->layout = empty;
    break;
  case NULL_STATS:
    r->stats = NULL;
    break;
  default:
    break;
  }
}

/* The defects of its second key or buffer (the first stays good). */
static void spoil_objs(ct_objs *o, spoil how) {
  switch (how) {
  case KEY_NO_HASH:
    o->keys[1].hash_len = 0;
    break;
  case KEY_LONG_HASH:
    o->keys[1].hash_len = 33;
    break;
  case KEY_AT_MODEL:
    strcpy(o->keys[1].model, "test@model");
    break;
  case KEY_NO_MODEL:
    o->keys[1].model[0] = '\0';
    break;
  case EMPTY_BUF:
    o->bufs[1].len = 0;
    break;
  case NULL_BUF:
    o->bufs[1].ptr = NULL;
    break;
  default:
    break;
  }
}

/* A well-formed request of the case's type over o (keys HELD, NEW), then
 * the case's defect; the payload cases keep it well formed (it is sent
 * wrongly). */
static kva_l2_req build(const bad_case *bc, ct_objs *o, kva_layout *empty, kva_l2_stats *st) {
  kva_l2_req r = {.keys = o->keys, .n = o->n, .layout = &o->layout, .result = UNTOUCHED};
  if (bc->type != LOOKUP) r.bufs = o->bufs;
  if (bc->type != STORE) r.bits = o->bits;
  if (bc->type == STATS) r = (kva_l2_req){.stats = st, .result = UNTOUCHED};
  spoil_request(&r, bc->how, empty);
  spoil_objs(o, bc->how);
  return r;
}

static bool payload_case(spoil how) {
  return how == PAYLOAD_EMPTY || how == PAYLOAD_SHORT || how == PAYLOAD_DOUBLE;
}

/* Sends r as the case says: its pointer, or a payload that is not one. */
static void send_case(ct *c, const bad_case *bc, kva_l2_req *r, uint64_t tag) {
  kva_l2_req *two[2] = {r, r};
  const void *data = &r;
  uint32_t len = sizeof(r);
  if (bc->how == PAYLOAD_EMPTY) data = NULL, len = 0;
  if (bc->how == PAYLOAD_SHORT) len = 4;
  if (bc->how == PAYLOAD_DOUBLE) data = two, len = sizeof(two);
  ck_assert_int_eq(kva_send(c->a, bc->type, data, len, kva_port_actor(c->port), tag), KVA_OK);
}

/* The one answer: KVA_L2_DONE with the tag; it hands back r with a
 * negative result, or, when the payload named no request, no request (no
 * payload or a NULL pointer) and r untouched. */
static void expect_refusal(ct *c, const bad_case *bc, const kva_l2_req *r, uint64_t tag) {
  kva_msg m;
  const kva_l2_req *p[2] = {NULL, NULL};
  int rc = kva_port_recv(c->port, &m, p, sizeof(p), CT_WAIT_MS);
  ck_assert_msg(rc == KVA_OK, "%s: not answered within %d ms", bc->what, CT_WAIT_MS);
  ck_assert_msg(m.type == KVA_L2_DONE && m.tag == tag, "%s: answered with type %u, tag %#llx",
                bc->what, m.type, (unsigned long long)m.tag);
  if (payload_case(bc->how)) {
    ck_assert_msg(m.len == 0 || (m.len == sizeof(p[0]) && p[0] == NULL),
                  "%s: the answer names a request (%u bytes)", bc->what, m.len);
    ck_assert_msg(r->result == UNTOUCHED, "%s: the adapter wrote result %d", bc->what, r->result);
  } else {
    ck_assert_msg(m.len == sizeof(p[0]) && p[0] == r, "%s: the answer is not its pointer",
                  bc->what);
    ck_assert_msg(r->result < 0, "%s: result %d, not an error", bc->what, r->result);
  }
  ct_expect_quiet(c, c->port);
}

/* No bit set, no byte of a LOAD buffer written. */
static void expect_untouched(const bad_case *bc, const ct_objs *o) {
  for (size_t i = 0; i < (o->n + 7) / 8; i++)
    ck_assert_msg(o->bits[i] == 0, "%s: bits set (%#x)", bc->what, o->bits[i]);
  if (bc->type != LOAD) return;
  for (size_t i = 0; i < o->n; i++) {
    const uint8_t *b = o->bufs_copy[i].ptr;
    for (size_t j = 0; j < o->len; j++)
      ck_assert_msg(b[j] == 0xee, "%s: buffer %zu written at %zu", bc->what, i, j);
  }
}

START_TEST(a_malformed_request_is_refused_and_changes_nothing) {
  const bad_case *bc = &cases[_i];
  uint64_t tag = 0xbad0000000000000ull | (uint64_t)_i;
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, HELD, 1, 0), KVA_OK);
  if (bc->type == LOAD) ck_assert_uint_eq(ct_lock(&c, HELD, 1), 1); /* its sender holds locks */
  kva_l2_stats before = ct_stats(&c), st;
  uint64_t ids[2] = {HELD, NEW};
  kva_layout l = fixture_layout_bytes(CT_LEN), empty;
  ct_objs *o = ct_objs_make(ids, 2, &l, CT_LEN, 1);
  if (bc->type == LOAD) ct_objs_blank(o);
  memset(&st, 0xab, sizeof(st));
  kva_l2_req r = build(bc, o, &empty, &st);
  send_case(&c, bc, &r, tag);
  expect_refusal(&c, bc, &r, tag);
  expect_untouched(bc, o);
  kva_l2_stats after = ct_stats(&c);
  ct_expect_same_stats(&before, &after, bc->what);
  if (bc->type == LOAD) {
    ck_assert_msg(ct_load(&c, HELD, 1, 0) == 1, "%s: key %u is gone", bc->what, HELD);
    ct_unlock(&c, HELD, 1);
  }
  ck_assert_msg(ct_read_back(&c, HELD, 1, 0) == 1, "%s: key %u is gone", bc->what, HELD);
  ck_assert_msg(ct_lock(&c, NEW, 1) == 0, "%s: key %u was stored", bc->what, NEW);
  ct_objs_free(o);
  ct_close(&c);
}
END_TEST

TCase *l2_contract_malformed_tcase(void) {
  TCase *tc = tcase_create("malformed");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, a_malformed_request_is_refused_and_changes_nothing, 0, NCASES);
  return tc;
}
