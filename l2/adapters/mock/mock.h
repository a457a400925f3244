/*
 * mock.h — the in-memory L2 adapter actor ("mock"): capacity with FIFO
 * eviction, latency and bandwidth emulation, fault injection. It speaks
 * the L2 adapter protocol of kvact.h; tests and benchmarks steer it at run
 * time with MOCK_CONTROL.
 *
 * What the mock counts in kva_l2_stats (all since start):
 *   stores / store_failures   STORE tasks answered / those that failed
 *   loads / load_failures     keys asked for by LOAD / keys left clear
 *   lookups                   keys asked for by LOOKUP_AND_LOCK
 *   evictions                 objects dropped to make room (not replaced
 *                             ones)
 * Malformed requests (answered KVA_EINVAL) are counted nowhere.
 *
 * Results: STORE fails with KVA_EIO (down, a failing key, the fail rate),
 * KVA_EAGAIN (a key of the task is locked: locked keys are never
 * replaced) or KVA_ENOMEM (the task does not fit even after evicting every
 * unlocked object, oldest stored first; then nothing was evicted or kept).
 * LOOKUP_AND_LOCK and LOAD fail only while down (KVA_EIO, no bits); a key
 * that cannot be loaded just leaves its bit clear. A STORE, LOOKUP, LOAD or
 * STATS whose payload is not a kva_l2_req pointer (or is NULL) is answered
 * with a NULL pointer; one without msg->from is dropped (nobody to tell).
 * A key twice in one STORE: the later bytes win (capacity is checked as if
 * both were kept).
 */
#ifndef KVA_L2_MOCK_H
#define KVA_L2_MOCK_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

/* The factory registered as "mock" (kva_l2_factory). cfg may be NULL (every
 * key at its schema default). */
kva_actor *mock_adapter_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                              size_t errlen);

/* Test/benchmark control. Payload: one mock_control, copied inline. When
 * msg->from is set the mock answers KVA_L2_DONE (no payload, same tag)
 * once the change is in effect, so a sender can wait for it. A malformed
 * control (wrong length, a rate outside [0, 1], more than
 * MOCK_FAIL_KEYS_MAX keys, latency_us above 60 s) changes nothing and is
 * logged; it is answered all the same so no waiter hangs. Requests that
 * arrived before the control keep the settings they were handled with. */
enum { MOCK_CONTROL = KVA_L2_ADAPTER_MSG + 8 };

#define MOCK_FAIL_KEYS_MAX 8u

/* Which fields of a mock_control apply (the others are left as they are). */
enum {
  MOCK_SET_DOWN = 1u << 0,
  MOCK_SET_FAIL_STORE_RATE = 1u << 1,
  MOCK_SET_FAIL_LOAD_RATE = 1u << 2,
  MOCK_SET_SEED = 1u << 3,
  MOCK_SET_LATENCY = 1u << 4,
  MOCK_SET_BANDWIDTH = 1u << 5,
  MOCK_SET_FAIL_STORE_KEYS = 1u << 6, /* replaces the list (0 keys clears it) */
  MOCK_SET_FAIL_LOAD_KEYS = 1u << 7,  /* replaces the list (0 keys clears it) */
};

typedef struct mock_control {
  uint32_t set;                   /* MOCK_SET_* */
  uint32_t down;                  /* 1 = STORE, LOOKUP_AND_LOCK and LOAD fail at once with
                                     KVA_EIO and no bits; UNLOCK and STATS still work */
  double fail_store_rate;         /* fraction of STORE tasks that fail (KVA_EIO) */
  double fail_load_rate;          /* fraction of loadable keys left clear */
  uint64_t seed;                  /* restarts the fault PRNG */
  uint64_t latency_us;            /* added to every STORE, LOAD and LOOKUP */
  uint64_t bandwidth_bytes_per_s; /* 0 = unlimited */
  uint32_t nfail_store;           /* a STORE holding one of these keys fails */
  uint32_t nfail_load;            /* a LOAD of one of these keys leaves its bit clear */
  kva_key fail_store[MOCK_FAIL_KEYS_MAX];
  kva_key fail_load[MOCK_FAIL_KEYS_MAX];
} mock_control;

#endif
