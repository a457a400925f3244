/*
 * op.h — kva_op: one store or load in flight, from the call that starts it
 * to the kva_op_wait that hands it back, and the pool of ops of each kv.
 *
 * Ops are pooled per kv (op.c): kva_op_wait puts a complete op back on its
 * kv's free list and the next store or load takes it again, with its
 * arrays, mutex, condition variable and eventfd. The pool only grows when
 * more ops are taken at once than ever before, and an op's arrays only
 * when a request is larger than any it held, so in steady state an op
 * costs no allocation and no syscall (its eventfd is written only once
 * kva_op_eventfd was asked for, and read back on reuse).
 *
 * Who writes what:
 *  - the starting call fills everything below `lock` before the op is
 *    sent to the copy actor (the send publishes it);
 *  - the copy actor and the backend's callbacks then own job, req and the
 *    arrays until op_complete;
 *  - the fields after `lock` are guarded by it; the waiter reads them under
 *    it and returns the op to the pool once complete is set;
 *  - pool_next and the kv's pool fields are guarded by the kv's lock.
 */
#ifndef KVA_GPU_OP_H
#define KVA_GPU_OP_H

#include <pthread.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "kvact.h"
#include "l1/l1_manager.h"

enum { OP_STORE = 0, OP_LOAD = 1 };

struct kva_op {
  int kind;             /* OP_STORE / OP_LOAD */
  int efd;              /* eventfd, kept for the op's life in the pool */
  kva_kv *kv;           /* its in-flight count holds the kv (and its device) */
  copy_job job;         /* job.chunks = chunks, job.slots = slots */
  copy_chunk *chunks;   /* one per chunk copied */
  int64_t *slots;       /* copy of the request's slot mapping */
  kva_key *keys;        /* the keys of `chunks`, to finish in L1 */
  int *st;              /* per key status of the L1 requests */
  kva_buf *bufs;        /* per key L1 bytes, while the op starts */
  l1_req req;           /* the finishing L1 request (copy actor's) */
  int copy_result;      /* the backend's result (KVA_OK or KVA_EIO) */
  int result_if_copied; /* the op's status if the copy and L1 succeed */
  uint32_t present;     /* store: chunks skipped, their keys present */
  uint32_t no_room;     /* store: chunks skipped for want of room */
  kva_op *next;         /* the copy actor's list of copied ops */
  void *arrays;         /* one allocation for the five arrays above */
  size_t cap_chunks, cap_tokens;
  kva_op *pool_next; /* the kv's free list */

  pthread_mutex_t lock; /* the fields below */
  pthread_cond_t cond;  /* broadcast when layers_done or complete changes */
  uint32_t layers_done; /* layers [0, layers_done) are in place */
  int complete;
  int status;
  int efd_wanted;  /* kva_op_eventfd was called: completion writes efd */
  int efd_written; /* efd holds a count, read back on reuse */
};

/* A zeroed op of kv for `kind` with room for `nchunks` chunks and
 * `ntokens` slots, from kv's pool; NULL on ENOMEM. */
kva_op *op_take(kva_kv *kv, int kind, size_t nchunks, size_t ntokens);
/* Back to its kv's pool: complete, or never started. */
void op_return(kva_op *op);
/* Frees a list of pooled ops (kv teardown). */
void op_pool_free(kva_op *list);
/* From a backend thread: layers [0, layer] are in place. */
void op_layer_landed(kva_op *op, uint32_t layer);
/* The last touch of the op by anyone but its waiter: every layer is
 * reported, status set, the eventfd written if asked for and waiters
 * woken; the kv's in-flight count drops (kv.c). */
void op_complete(kva_op *op, int status);

/* For kvbench: what a store started with (chunks copied, skipped as
 * present, skipped for want of room). Valid until kva_op_wait. */
void op_store_counts(const kva_op *op, uint32_t *copied, uint32_t *present, uint32_t *no_room);

/* For tests and benchmarks: the pool of kv. */
typedef struct op_pool_stats {
  uint32_t made;     /* ops ever created: the pool's size */
  uint32_t grown;    /* times an op's arrays were (re)allocated */
  uint32_t out;      /* ops taken and not yet returned */
  uint32_t peak_out; /* the most ever taken at once */
  uint32_t free_ops; /* on the free list */
} op_pool_stats;
void op_pool_get_stats(kva_kv *kv, op_pool_stats *out);

#endif
