/*
 * l2_mock_test.h — the harness shared by the mock adapter suite's files: a
 * runtime with one mock and a port, request helpers that check the reply
 * (KVA_L2_DONE, same tag, same pointer), and test objects whose bytes are
 * a pattern of (key, offset, generation) for byte-exact checks.
 */
#ifndef KVA_TESTS_L2_MOCK_TEST_H
#define KVA_TESTS_L2_MOCK_TEST_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/mock/mock.h"

#define MAXN 64u     /* keys per test object set (bit masks are uint64_t) */
#define WAIT_MS 5000 /* threaded mode: how long a reply may take */

typedef struct mk {
  kva_runtime *rt;
  kva_port *port;
  kva_actor *a; /* the mock */
  uint64_t tag;
  int wait_ms; /* -1 in deterministic mode: the port advances virtual time */
} mk;

/* A runtime with `workers` (0 = deterministic) and one mock configured by
 * the JSON members in `opts` ("" = schema defaults). */
mk mk_open(int workers, const char *opts);
/* Asserts that no lookup lock is held, then shuts down. */
void mk_close(mk *h);
void mk_shutdown(mk *h); /* without the check */

uint64_t mk_send(mk *h, uint32_t type, kva_l2_req *r); /* returns the tag */
/* One KVA_L2_DONE within timeout_ms: KVA_OK with its tag and pointer, or
 * KVA_ETIMEDOUT. Fails the test for anything else. */
int mk_try_reply(mk *h, int timeout_ms, uint64_t *tag, kva_l2_req **r);
/* The next KVA_L2_DONE, which must come within timeout_ms: its pointer,
 * and its tag in *tag. */
kva_l2_req *mk_next_reply(mk *h, int timeout_ms, uint64_t *tag);
/* The next reply is tag's, with pointer r (within timeout_ms, or the
 * mode's wait for mk_expect_reply). */
void mk_expect_reply_within(mk *h, int timeout_ms, uint64_t tag, const kva_l2_req *r);
void mk_expect_reply(mk *h, uint64_t tag, const kva_l2_req *r);
void mk_expect_silence(mk *h, int timeout_ms);
int mk_call(mk *h, uint32_t type, kva_l2_req *r); /* send, wait; r->result */
kva_l2_stats mk_stats(mk *h);
void mk_control(mk *h, const mock_control *c); /* waits until it applies */

typedef struct objs {
  size_t n;
  kva_key k[MAXN];
  kva_buf b[MAXN];
  uint8_t bits[MAXN / 8];
  kva_layout l; /* u8 [bytes] */
} objs;

/* Keys [first, first + n) of `bytes` each, filled with generation gen, or
 * zeroed (a load target) when gen < 0. */
objs *objs_make(uint64_t first, size_t n, uint64_t bytes, int gen);
void objs_free(objs *o);
uint8_t objs_pattern(uint64_t key, size_t off, uint8_t gen);
int objs_hold(const objs *o, size_t i, uint64_t key, int gen); /* buffer i is key's gen */
uint64_t objs_bits(const objs *o);                             /* o->bits as a mask */

int mk_store(mk *h, objs *o);       /* the task's result */
uint64_t mk_lookup(mk *h, objs *o); /* mask of the keys found (now locked) */
uint64_t mk_load(mk *h, objs *o);   /* mask of the keys loaded */
void mk_unlock(mk *h, const objs *o);
void mk_unlock_free(mk *h, objs *o); /* mk_unlock, then objs_free */
int mk_store_range(mk *h, uint64_t first, size_t n, uint64_t bytes, int gen);
/* Mask of the keys [first, first + n) present (locks released at once). */
uint64_t mk_present(mk *h, uint64_t first, size_t n);
/* Loads keys [first, first + n) of `bytes`, checks generation gen of each
 * key loaded; returns the mask. */
uint64_t mk_load_check(mk *h, uint64_t first, size_t n, uint64_t bytes, int gen);

/* Counts the warnings logged from now on. */
void mk_count_warnings(void);
int mk_warnings(void);

TCase *l2_mock_lmcache_tcase(void);
TCase *l2_mock_store_tcase(void);
TCase *l2_mock_faults_tcase(void);
TCase *l2_mock_time_tcase(void);
TCase *l2_mock_input_tcase(void);

#endif
