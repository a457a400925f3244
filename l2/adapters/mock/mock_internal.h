/*
 * mock_internal.h — the mock adapter's state, shared by mock_adapter.c
 * (requests, control, spawn) and mock_time.c (completion times, the reply
 * queue and its timer).
 */
#ifndef KVA_L2_MOCK_INTERNAL_H
#define KVA_L2_MOCK_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/mock/mock.h"
#include "l2/adapters/mock/mock_store.h"

/* A KVA_L2_DONE waiting for its emulated completion time. */
typedef struct mock_reply {
  uint64_t at;  /* completion, on the runtime clock (virtual in deterministic mode) */
  uint64_t seq; /* arrival order: equal completions leave in arrival order */
  kva_actor *to;
  uint64_t tag;
  kva_l2_req *req;
} mock_reply;

typedef struct mock {
  kva_actor *self;
  kva_runtime *rt;
  char name[32]; /* tier name, for logs and kvinspect */
  mock_store st;
  /* emulation: one channel shared by STOREs and LOADs */
  uint64_t latency_ns;
  uint64_t bandwidth;  /* bytes/s; 0 = unlimited */
  uint64_t busy_until; /* the channel is taken until then */
  mock_reply *q;       /* binary min-heap on (at, seq) */
  size_t nq, capq;
  uint64_t seq;
  int timer_id; /* the one armed timer, or -1 */
  uint64_t timer_at;
  uint64_t timer_tag; /* tag of the armed timer: a stale tick is told apart */
  /* fault injection */
  bool down;
  double fail_store_rate, fail_load_rate;
  uint64_t rng; /* splitmix64 state */
  uint32_t nfail_store, nfail_load;
  kva_key fail_store[MOCK_FAIL_KEYS_MAX];
  kva_key fail_load[MOCK_FAIL_KEYS_MAX];
  kva_l2_stats stats; /* the counters; gauges are filled in on STATS */
  uint64_t *hashes;   /* scratch: key hashes of the STORE being handled */
  size_t nhashes;
} mock;

/* mock_time.c */
uint64_t mock_now(const mock *m);
/* Whether completion times must be computed at all: false (no clock read,
 * no timer) when there is no latency, no bandwidth limit and no reply
 * waiting. */
bool mock_emulating(const mock *m);
/* STORE/LOAD that arrived at t0 (0 when not emulating) and moved `bytes`. */
void mock_reply_channel(mock *m, const kva_msg *msg, kva_l2_req *r, uint64_t t0, uint64_t bytes);
/* LOOKUP_AND_LOCK that arrived at t0: latency only, not the channel. */
void mock_reply_lookup(mock *m, const kva_msg *msg, kva_l2_req *r, uint64_t t0);
/* Answers now, after every reply that is already due. */
void mock_reply_now(mock *m, kva_actor *to, uint64_t tag, kva_l2_req *r);
void mock_reply_control(mock *m, kva_actor *to, uint64_t tag);
void mock_on_timer(mock *m, uint64_t tag);
void mock_flush_all(mock *m); /* on_stop: every pending reply, in order */

#endif
