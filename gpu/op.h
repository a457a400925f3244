/*
 * op.h — kva_op: one store or load in flight, from the call that starts it
 * to the kva_op_wait that frees it.
 *
 * Who writes what:
 *  - the starting call fills everything below `lock` before the op is
 *    sent to the copy actor (the send publishes it);
 *  - the copy actor and the backend's callbacks then own job, req and the
 *    arrays until op_complete;
 *  - layers_done, complete and status are guarded by `lock`; the waiter
 *    reads them under it and frees the op once complete is set.
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
  int efd;              /* eventfd, written once when complete */
  kva_kv *kv;           /* its in-flight count holds the kv (and its device) */
  copy_job job;         /* job.chunks = chunks, job.slots = slots */
  copy_chunk *chunks;   /* one per chunk copied */
  int64_t *slots;       /* copy of the request's slot mapping */
  kva_key *keys;        /* the keys of `chunks`, to finish in L1 */
  int *st;              /* per key status of the finishing L1 request */
  l1_req req;           /* the finishing L1 request (copy actor's) */
  int copy_result;      /* the backend's result (KVA_OK or KVA_EIO) */
  int result_if_copied; /* the op's status if the copy and L1 succeed */
  kva_op *next;         /* the copy actor's list of copied ops */

  pthread_mutex_t lock; /* the three fields below */
  pthread_cond_t cond;  /* broadcast when one of them changes */
  uint32_t layers_done; /* layers [0, layers_done) are in place */
  int complete;
  int status;
};

/* A zeroed op of `kind` with `nchunks` chunks, `ntokens` slots and its
 * eventfd; NULL on ENOMEM. */
kva_op *op_new(int kind, size_t nchunks, size_t ntokens);
void op_free(kva_op *op);
/* From a backend thread: layers [0, layer] are in place. */
void op_layer_landed(kva_op *op, uint32_t layer);
/* The last touch of the op by anyone but its waiter: every layer is
 * reported, status set, the eventfd written and waiters woken; the kv's
 * in-flight count drops (kv.c). */
void op_complete(kva_op *op, int status);

#endif
