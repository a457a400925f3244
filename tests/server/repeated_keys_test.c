/*
 * repeated_keys_test.c — a key named twice in one call (issue 26, item 2):
 * every call that takes a key array refuses it (KVA_EINVAL, nothing
 * changed), in-process and through kvactd alike, so a daemon's
 * per-connection ledger never parts from L1. Random call sequences with
 * random repeats run on an embedded storage and on a client of a kvactd
 * started in this process, step by step: the same codes, the same per-key
 * results, the same memcheck and lock counts; and the client's exit gives
 * back every lock it held.
 *
 * Where the two modes differ on purpose the sequences stay clear of it
 * (docs/invariants.md I-MP-2: a client releases only what it took): a
 * prefetch and its release use the same extra_readers; a forced delete or
 * clear comes only while no write is reserved (a client's reservation is
 * held by object id, so the key is free again at once); and finish_write of
 * a key this client did not reserve is KVA_KEY_WRONG_STATE through kvactd
 * whether or not L1 has it, so KVA_KEY_NOT_EXIST counts as that.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "kvact.h"
#include "tests/server/mp_support.h"
#include "tests/support/fixture.h"
#include "wire/protocol.h"

#define L1_BYTES (16u << 20) /* far from any watermark: nothing is evicted */
#define OBJ_BYTES 4096u
#define NKEYS 6u
#define MAXN 4u
#define STEPS 400
#define SEEDS 16

/* Log lines naming a repeated key: each refused call says why, once. */
static int repeat_lines;

static void count_repeats(int level, const char *msg, void *arg) {
  if (level == KVA_LOG_WARN && strstr(msg, "are the same key"))
    __atomic_add_fetch(&repeat_lines, 1, __ATOMIC_RELAXED);
}

/* An embedded storage, and a client of kvactd running in this process. */
typedef struct pair {
  kva_runtime *in_rt, *daemon_rt, *client_rt;
  kva_storage *in, *daemon, *client;
} pair;

static pair pair_start(void) {
  kva_log_set(count_repeats, NULL, KVA_LOG_WARN);
  char sock_kv[160];
  snprintf(sock_kv, sizeof(sock_kv), "server.socket=%s", sock_path);
  pair p;
  p.in_rt = fixture_storage(1, L1_BYTES, NULL);
  p.daemon_rt = fixture_storage(1, L1_BYTES, sock_kv, NULL);
  p.client_rt = client_up();
  p.in = kva_storage_of(p.in_rt);
  p.daemon = kva_storage_of(p.daemon_rt);
  p.client = kva_storage_of(p.client_rt);
  return p;
}

/* The client exits (orderly): the daemon must then hold no lock at all. */
static void pair_stop(pair *p) {
  kva_runtime_shutdown(p->client_rt);
  memcheck_soon(p->daemon);
  kva_runtime_shutdown(p->daemon_rt);
  kva_runtime_shutdown(p->in_rt);
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
}

/* ---- one call, as data --------------------------------------------------- */

enum {
  OP_RESERVE, /* arg: write mode, arg2: layout 0/1 */
  OP_FINISH_WRITE,
  OP_DELETE, /* arg: force */
  OP_TOUCH,
  OP_PREFETCH, /* arg: extra readers, arg2: with a layout */
  OP_READ,
  OP_FINISH_READ, /* arg: extra readers */
  OP_LOOKUP,      /* arg: pin */
  OP_UNPIN,
  OP_CLEAR, /* arg: force */
  OP_COUNT
};
static const char *const op_names[OP_COUNT] = {
    "reserve_write", "finish_write", "delete", "touch", "prefetch",
    "read",          "finish_read",  "lookup", "unpin", "clear"};

typedef struct op {
  int type, arg, arg2;
  size_t n;
  uint64_t ids[MAXN];
} op;

/* What a call answered: comparable between the two storages (buffers by
 * length only: each process maps the pool at its own address). */
typedef struct outcome {
  int rc, rc2; /* rc2: a prefetch's wait */
  int status[MAXN];
  size_t len[MAXN];
  uint64_t layout[MAXN]; /* READ with layouts (arg 1): ntensors << 32 ^ first dim */
  size_t hits, l1_hits;
} outcome;

static bool repeats(const op *o) {
  for (size_t i = 0; i < o->n; i++)
    for (size_t j = 0; j < i; j++)
      if (o->ids[i] == o->ids[j]) return true;
  return false;
}

static void describe(const op *o, char *buf, size_t cap) {
  int w = snprintf(buf, cap, "%s(arg %d/%d) [", op_names[o->type], o->arg, o->arg2);
  for (size_t i = 0; i < o->n && w > 0 && (size_t)w < cap; i++)
    w += snprintf(buf + w, cap - (size_t)w, "%s%lu", i ? "," : "", (unsigned long)o->ids[i]);
  if (w > 0 && (size_t)w < cap) snprintf(buf + w, cap - (size_t)w, "]");
}

static void run_op(kva_storage *s, const op *o, outcome *out) {
  kva_key k[MAXN];
  kva_buf b[MAXN];
  kva_layout lay[MAXN];
  memset(out, 0, sizeof(*out));
  memset(lay, 0x11, sizeof(lay)); /* untouched, zeroed and filled all differ */
  for (size_t i = 0; i < MAXN; i++) {
    out->status[i] = 99; /* a refused call leaves status untouched */
    b[i] = (kva_buf){0};
  }
  for (size_t i = 0; i < o->n; i++) k[i] = fixture_key(o->ids[i]);
  kva_layout l = fixture_layout_bytes(o->arg2 ? 2 * OBJ_BYTES : OBJ_BYTES);
  kva_prefetch *h = NULL;
  kva_tier_hits th;
  switch (o->type) {
  case OP_RESERVE:
    out->rc = kva_reserve_write(s, k, o->n, &l, (kva_write_mode)o->arg, b, out->status);
    break;
  case OP_FINISH_WRITE:
    out->rc = kva_finish_write(s, k, o->n, out->status);
    break;
  case OP_DELETE:
    out->rc = kva_delete(s, k, o->n, o->arg, out->status);
    break;
  case OP_TOUCH:
    out->rc = kva_touch(s, k, o->n);
    break;
  case OP_PREFETCH:
    out->rc = kva_submit_prefetch(s, k, o->n, o->arg2 ? &l : NULL, (uint32_t)o->arg, &h);
    if (out->rc == KVA_OK) out->rc2 = kva_wait_prefetch(s, h, 10000, &out->hits);
    break;
  case OP_READ: /* arg 1: with each object's layout */
    out->rc = o->arg ? kva_read_prefetched_layouts(s, k, o->n, b, lay)
                     : kva_read_prefetched(s, k, o->n, b);
    for (size_t i = 0; o->arg && i < MAXN; i++)
      out->layout[i] = (uint64_t)lay[i].ntensors << 32 ^ lay[i].tensor[0].shape[0];
    break;
  case OP_FINISH_READ:
    out->rc = kva_finish_read_prefetched(s, k, o->n, (uint32_t)o->arg);
    break;
  case OP_LOOKUP:
    memset(&th, 0, sizeof(th));
    out->rc = kva_lookup(s, k, o->n, o->arg, &th);
    out->hits = th.total;
    out->l1_hits = th.tier[0].hits;
    break;
  case OP_UNPIN:
    out->rc = kva_unpin(s, k, o->n);
    break;
  case OP_CLEAR:
    out->rc = kva_clear(s, o->arg);
    break;
  }
  for (size_t i = 0; i < MAXN; i++) out->len[i] = b[i].ptr ? b[i].len : 0;
  if (o->type == OP_FINISH_WRITE) /* I-MP-2: not this caller's reservation */
    for (size_t i = 0; i < MAXN; i++)
      if (out->status[i] == KVA_KEY_NOT_EXIST) out->status[i] = KVA_KEY_WRONG_STATE;
}

static void outcome_text(const outcome *x, char *buf, size_t cap) {
  snprintf(buf, cap, "rc %d/%d status %d,%d,%d,%d len %zu,%zu,%zu,%zu hits %zu/%zu", x->rc, x->rc2,
           x->status[0], x->status[1], x->status[2], x->status[3], x->len[0], x->len[1], x->len[2],
           x->len[3], x->hits, x->l1_hits);
}

/* What the locks look like: memcheck's verdict and L1's counts. */
typedef struct locks {
  int memcheck;
  uint64_t objects, write_locked, read_locked;
} locks;

static locks locks_of(kva_storage *s) {
  char report[512];
  kva_storage_stats st;
  locks x;
  memset(&x, 0, sizeof(x)); /* compared with memcmp, padding included */
  x.memcheck = kva_memcheck(s, report, sizeof(report));
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  x.objects = st.l1_objects;
  x.write_locked = st.l1_write_locked;
  x.read_locked = st.l1_read_locked;
  return x;
}

/* Runs o on both storages and asserts they agree, and that a call naming
 * a key twice is refused with nothing changed. */
static void step_both(pair *p, const op *o, const char *where) {
  outcome a, c;
  char what[128], ta[160], tc[160];
  locks before = locks_of(p->in);
  int lines = __atomic_load_n(&repeat_lines, __ATOMIC_RELAXED);
  run_op(p->in, o, &a);
  run_op(p->client, o, &c);
  lines = __atomic_load_n(&repeat_lines, __ATOMIC_RELAXED) - lines;
  describe(o, what, sizeof(what));
  outcome_text(&a, ta, sizeof(ta));
  outcome_text(&c, tc, sizeof(tc));
  ck_assert_msg(memcmp(&a, &c, sizeof(a)) == 0, "%s %s: in-process %s, through kvactd %s", where,
                what, ta, tc);
  locks la = locks_of(p->in), lc = locks_of(p->client);
  ck_assert_msg(memcmp(&la, &lc, sizeof(la)) == 0,
                "%s after %s: in-process memcheck %d, %lu objects, %lu/%lu write/read-locked; "
                "kvactd memcheck %d, %lu objects, %lu/%lu",
                where, what, la.memcheck, (unsigned long)la.objects, (unsigned long)la.write_locked,
                (unsigned long)la.read_locked, lc.memcheck, (unsigned long)lc.objects,
                (unsigned long)lc.write_locked, (unsigned long)lc.read_locked);
  if (o->type == OP_CLEAR || !repeats(o)) return;
  ck_assert_msg(a.rc == KVA_EINVAL, "%s %s: a repeated key answered %s", where, what, ta);
  ck_assert_msg(lines == 2, "%s %s: %d log lines name the repeat, not one per call", where, what,
                lines);
  ck_assert_msg(memcmp(&before, &la, sizeof(la)) == 0, "%s %s changed the locks", where, what);
  for (size_t i = 0; i < MAXN; i++) ck_assert_int_eq(a.status[i], 99);
}

static op mk(int type, int arg, int arg2, size_t n, uint64_t a0, uint64_t a1, uint64_t a2) {
  op o = {.type = type, .arg = arg, .arg2 = arg2, .n = n, .ids = {a0, a1, a2}};
  return o;
}

/* ---- the issue's cases ----------------------------------------------------- */

enum { K = 1, J = 2 };

START_TEST(the_issues_cases_agree_and_a_closed_client_holds_nothing) {
  pair p = pair_start();
  const op script[] = {
      mk(OP_RESERVE, KVA_WRITE_NEW, 0, 1, K, 0, 0),
      mk(OP_FINISH_WRITE, 0, 0, 1, K, 0, 0),
      mk(OP_RESERVE, KVA_WRITE_NEW, 0, 1, J, 0, 0),
      mk(OP_FINISH_WRITE, 0, 0, 1, J, 0, 0),
      /* read_prefetched([K,K]) then finish_read_prefetched([K]) */
      mk(OP_PREFETCH, 0, 0, 1, K, 0, 0),
      mk(OP_READ, 0, 0, 2, K, K, 0),
      mk(OP_FINISH_READ, 0, 0, 1, K, 0, 0),
      /* finish_read_prefetched([K,K]) holding two locks, then [K] twice */
      mk(OP_PREFETCH, 0, 0, 1, K, 0, 0),
      mk(OP_PREFETCH, 0, 0, 1, K, 0, 0),
      mk(OP_FINISH_READ, 0, 0, 2, K, K, 0),
      mk(OP_FINISH_READ, 0, 0, 1, K, 0, 0),
      mk(OP_FINISH_READ, 0, 0, 1, K, 0, 0),
      /* unpin([K,K]) holding two pins, then [K] twice */
      mk(OP_LOOKUP, 1, 0, 1, K, 0, 0),
      mk(OP_LOOKUP, 1, 0, 1, K, 0, 0),
      mk(OP_UNPIN, 0, 0, 2, K, K, 0),
      mk(OP_UNPIN, 0, 0, 1, K, 0, 0),
      mk(OP_UNPIN, 0, 0, 1, K, 0, 0),
      /* read_prefetched([K,K,J]) with J not held */
      mk(OP_PREFETCH, 0, 0, 1, K, 0, 0),
      mk(OP_READ, 0, 0, 3, K, K, J),
      mk(OP_FINISH_READ, 0, 0, 1, K, 0, 0),
      /* the same again, left held for the client's exit to give back */
      mk(OP_PREFETCH, 0, 0, 1, K, 0, 0),
      mk(OP_PREFETCH, 0, 0, 1, K, 0, 0),
      mk(OP_FINISH_READ, 0, 0, 2, K, K, 0),
      mk(OP_LOOKUP, 1, 0, 1, K, 0, 0),
      mk(OP_LOOKUP, 1, 0, 1, K, 0, 0),
      mk(OP_UNPIN, 0, 0, 2, K, K, 0),
      mk(OP_READ, 0, 0, 2, K, K, 0),
  };
  for (size_t i = 0; i < sizeof(script) / sizeof(script[0]); i++) {
    char where[32];
    snprintf(where, sizeof(where), "step %zu:", i);
    step_both(&p, &script[i], where);
  }
  pair_stop(&p);
}
END_TEST

/* ---- a peer that is not a kvact client --------------------------------------- */

/* Sends q on a raw connection and returns its reply's result (prefetch:
 * *hits too). */
static int raw_call(int fd, const proto_req *q, uint64_t id, uint64_t *hits) {
  uint8_t buf[4096];
  size_t n = proto_req_put(buf, sizeof(buf), q, id);
  ck_assert_uint_gt(n, 0);
  ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
  size_t have = 0;
  proto_hdr h;
  for (;;) {
    ssize_t k = read(fd, buf + have, sizeof(buf) - have);
    ck_assert_int_gt(k, 0);
    have += (size_t)k;
    if (have < PROTO_HDR_BYTES) continue;
    ck_assert_int_eq(proto_hdr_get(buf, &h, NULL, 0), PROTO_OK);
    if (have >= PROTO_HDR_BYTES + h.len) break;
  }
  ck_assert_uint_eq(h.id, id);
  int32_t st[MAXN];
  proto_rep r = {.type = q->type, .n = q->n, .status = st};
  char why[128] = "";
  ck_assert_msg(proto_rep_get(&h, buf + PROTO_HDR_BYTES, 1ull << 40, &r, why, sizeof(why)) ==
                    PROTO_OK,
                "%s", why);
  if (hits) *hits = r.hits;
  return r.result;
}

/* kvactd refuses a repeated key itself, before its ledger: a peer that
 * speaks the protocol by hand gets KVA_EINVAL and keeps its locks. */
START_TEST(kvactd_refuses_a_repeated_key_from_a_raw_peer_before_its_ledger) {
  char sock_kv[160];
  snprintf(sock_kv, sizeof(sock_kv), "server.socket=%s", sock_path);
  kva_runtime *rt = fixture_storage(1, L1_BYTES, sock_kv, NULL);
  kva_storage *d = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  fixture_write(d, K, 1, &l);
  kva_log_set(count_repeats, NULL, KVA_LOG_WARN);
  int fd = raw_connect();
  ck_assert_int_ge(fd, 0);
  proto_req hello = {.type = P_HELLO, .pid = (uint32_t)getpid()};
  ck_assert_int_eq(raw_call(fd, &hello, 0, NULL), KVA_OK);
  kva_key kk[2] = {fixture_key(K), fixture_key(K)};
  proto_req one = {.type = P_PREFETCH, .n = 1, .readers = 1, .keys = kk};
  uint64_t hits = 0;
  for (uint64_t id = 1; id <= 2; id++) { /* two read locks */
    ck_assert_int_eq(raw_call(fd, &one, id, &hits), KVA_OK);
    ck_assert_uint_eq(hits, 1);
  }
  int lines = __atomic_load_n(&repeat_lines, __ATOMIC_RELAXED);
  const uint16_t types[] = {P_FINISH_READ, P_READ, P_UNPIN, P_TOUCH, P_PREFETCH, P_LOOKUP};
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
    proto_req twice = {.type = types[i], .n = 2, .readers = 1, .keys = kk};
    ck_assert_int_eq(raw_call(fd, &twice, 10 + i, NULL), KVA_EINVAL);
  }
  ck_assert_int_eq(__atomic_load_n(&repeat_lines, __ATOMIC_RELAXED) - lines, 6); /* logged */
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(d, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_read_locked, 1); /* both locks still there */
  proto_req release = {.type = P_FINISH_READ, .n = 1, .readers = 1, .keys = kk};
  ck_assert_int_eq(raw_call(fd, &release, 20, NULL), 1); /* the ledger kept both */
  ck_assert_int_eq(raw_call(fd, &release, 21, NULL), 1);
  ck_assert_int_eq(raw_call(fd, &release, 22, NULL), 0);
  ck_assert_int_eq(raw_call(fd, &one, 23, &hits), KVA_OK); /* one left for the goodbye */
  uint8_t bye[PROTO_HDR_BYTES];
  proto_hdr_put(bye, P_BYE, 0, 24);
  ck_assert_int_eq(write(fd, bye, sizeof(bye)), (ssize_t)sizeof(bye));
  close(fd);
  memcheck_soon(d);
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- random sequences ------------------------------------------------------- */

static uint64_t rnd(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Mostly calls on distinct keys; about a third name a key twice or more.
 * extra: the sequence's extra_readers; writes: whether a write is
 * reserved now (no forced delete or clear then). */
static op random_op(uint64_t *x, int extra, bool writes) {
  op o = {.type = (int)(rnd(x) % OP_COUNT), .n = 1 + rnd(x) % MAXN};
  if (o.type == OP_CLEAR && rnd(x) % 4) o.type = OP_TOUCH; /* clear: rarely */
  o.arg = (int)(rnd(x) % 2);
  o.arg2 = (int)(rnd(x) % 2);
  if (o.type == OP_RESERVE) o.arg = (int)(rnd(x) % 3);
  if (o.type == OP_RESERVE) o.arg2 = rnd(x) % 8 == 0; /* another layout, now and then */
  if (o.type == OP_PREFETCH || o.type == OP_FINISH_READ) o.arg = extra;
  if ((o.type == OP_DELETE || o.type == OP_CLEAR) && writes) o.arg = 0;
  bool repeat = o.n > 1 && rnd(x) % 3 == 0;
  uint64_t perm[NKEYS];
  for (uint64_t i = 0; i < NKEYS; i++) perm[i] = i;
  for (size_t i = NKEYS - 1; i > 0; i--) {
    size_t j = rnd(x) % (i + 1);
    uint64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (size_t i = 0; i < o.n; i++) o.ids[i] = perm[i];
  if (repeat) o.ids[o.n - 1] = o.ids[rnd(x) % (o.n - 1)];
  return o;
}

START_TEST(random_calls_with_repeated_keys_agree_in_process_and_through_kvactd) {
  for (int seed = 1; seed <= SEEDS; seed++) {
    pair p = pair_start();
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)seed;
    for (int i = 0; i < STEPS; i++) {
      kva_storage_stats st;
      ck_assert_int_eq(kva_storage_get_stats(p.in, &st), KVA_OK);
      op o = random_op(&x, seed % 2, st.l1_write_locked > 0);
      char where[48];
      snprintf(where, sizeof(where), "seed %d step %d:", seed, i);
      step_both(&p, &o, where);
    }
    pair_stop(&p);
  }
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("repeated_keys");
  TCase *tc = tcase_create("repeated_keys");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, the_issues_cases_agree_and_a_closed_client_holds_nothing);
  tcase_add_test(tc, kvactd_refuses_a_repeated_key_from_a_raw_peer_before_its_ledger);
  tcase_add_test(tc, random_calls_with_repeated_keys_agree_in_process_and_through_kvactd);
  suite_add_tcase(s, tc);
  return s;
}
