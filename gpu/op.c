/*
 * op.c — completion and waiting of kva_op (kvact.h "GPU copy").
 *
 * A waiter sleeps on the op's condition variable (monotonic clock) rather
 * than on its eventfd, so kva_op_wait_layer can wake for a single layer;
 * the eventfd is for engines that put ops into their own poll loop, and
 * is written once, when the op is complete and kva_op_eventfd was asked.
 *
 * The pool (op.h): a LIFO free list per kv under the kv's lock. An op is
 * created only when the free list is empty (more ops out than ever
 * before) and keeps its lock, condition variable, eventfd and arrays until
 * its kv is destroyed, which waits for the last op to come back.
 */
#include "gpu/op.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "actors/runtime_internal.h"
#include "common/array.h"
#include "gpu/kv_internal.h"

/* A new op of the pool: lock, condition variable (monotonic clock) and
 * eventfd, no arrays yet. */
static kva_op *op_create(void) {
  kva_op *op = calloc(1, sizeof(*op));
  if (!op) return NULL;
  op->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (op->efd < 0) {
    free(op);
    return NULL;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&op->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&op->lock, NULL);
  return op;
}

static void op_destroy(kva_op *op) {
  close(op->efd);
  pthread_cond_destroy(&op->cond);
  pthread_mutex_destroy(&op->lock);
  free(op->arrays);
  free(op);
}

/* Room for nchunks chunks and ntokens slots, in one allocation whose
 * arrays are each aligned for their type (copy_chunk, int64_t and kva_buf
 * sizes are multiples of 8, kva_key's of 4). Capacities double from 4
 * chunks and 64 slots, so an op regrows at most a few times over its life.
 * 1 when it grew, 0 when it had room, -1 on ENOMEM (op unchanged). */
static int op_reserve(kva_op *op, size_t nchunks, size_t ntokens) {
  if (op->arrays && op->cap_chunks >= nchunks && op->cap_tokens >= ntokens) return 0;
  size_t chunk_bytes = sizeof(copy_chunk) + sizeof(kva_buf) + sizeof(kva_key) + sizeof(int);
  size_t n = array_next_cap(op->cap_chunks ? op->cap_chunks : 4, nchunks, chunk_bytes);
  size_t t = array_next_cap(op->cap_tokens ? op->cap_tokens : 64, ntokens, sizeof(int64_t));
  if (n == 0 || t == 0) return -1; /* each part fits one object: their sum fits size_t */
  size_t slots = n * sizeof(copy_chunk), bufs = slots + t * sizeof(int64_t);
  size_t keys = bufs + n * sizeof(kva_buf), st = keys + n * sizeof(kva_key);
  char *mem = malloc(st + n * sizeof(int));
  if (!mem) return -1;
  free(op->arrays);
  op->arrays = mem;
  op->cap_chunks = n;
  op->cap_tokens = t;
  op->chunks = (copy_chunk *)mem;
  op->slots = (int64_t *)(mem + slots);
  op->bufs = (kva_buf *)(mem + bufs);
  op->keys = (kva_key *)(mem + keys);
  op->st = (int *)(mem + st);
  return 1;
}

/* Puts op on kv's free list; the caller holds kv->lock. */
static void pool_push(kva_kv *kv, kva_op *op) {
  op->pool_next = kv->free_ops;
  kv->free_ops = op;
}

kva_op *op_take(kva_kv *kv, int kind, size_t nchunks, size_t ntokens) {
  pthread_mutex_lock(&kv->lock);
  kva_op *op = kv->free_ops;
  if (op) kv->free_ops = op->pool_next;
  if (++kv->ops_out > kv->ops_peak) kv->ops_peak = kv->ops_out;
  pthread_mutex_unlock(&kv->lock);
  int fresh = 0, grew = -1;
  if (!op) fresh = (op = op_create()) != NULL;
  if (op) grew = op_reserve(op, nchunks, ntokens);
  pthread_mutex_lock(&kv->lock);
  kv->ops_made += fresh && grew >= 0;
  kv->ops_grown += grew > 0;
  if (grew < 0) {
    kv->ops_out--;
    if (op && op->arrays) { /* a pooled op stays in the pool */
      pool_push(kv, op);
      op = NULL;
    }
  }
  pthread_mutex_unlock(&kv->lock);
  if (grew < 0) {
    if (op) op_destroy(op);
    return NULL;
  }
  /* the op is this thread's alone now: the free list's lock ordered its
   * last user's touches before these */
  if (op->efd_written) { /* reset the count of its last completion */
    uint64_t v;
    if (read(op->efd, &v, sizeof(v)) < 0) {
    }
  }
  op->kind = kind;
  op->kv = kv;
  op->job = (copy_job){0};
  op->req = (l1_req){0};
  op->copy_result = op->result_if_copied = 0;
  op->present = op->no_room = 0;
  op->next = op->pool_next = NULL;
  op->layers_done = 0;
  op->complete = op->status = op->efd_wanted = op->efd_written = 0;
  return op;
}

void op_return(kva_op *op) {
  kva_kv *kv = op->kv;
  pthread_mutex_lock(&kv->lock);
  pool_push(kv, op);
  int last = --kv->ops_out == 0 && kv->unregistered;
  pthread_mutex_unlock(&kv->lock);
  if (last) kv_destroy(kv);
}

void op_pool_free(kva_op *list) {
  while (list) {
    kva_op *next = list->pool_next;
    op_destroy(list);
    list = next;
  }
}

void op_store_counts(const kva_op *op, uint32_t *copied, uint32_t *present, uint32_t *no_room) {
  *copied = op->job.nchunks;
  *present = op->present;
  *no_room = op->no_room;
}

void op_pool_get_stats(kva_kv *kv, op_pool_stats *out) {
  pthread_mutex_lock(&kv->lock);
  *out = (op_pool_stats){
      .made = kv->ops_made, .grown = kv->ops_grown, .out = kv->ops_out, .peak_out = kv->ops_peak};
  for (kva_op *op = kv->free_ops; op; op = op->pool_next) out->free_ops++;
  pthread_mutex_unlock(&kv->lock);
}

/* Makes efd readable; under op->lock. */
static void op_ring(kva_op *op) {
  uint64_t one = 1;
  if (write(op->efd, &one, sizeof(one)) == (ssize_t)sizeof(one)) op->efd_written = 1;
}

void op_layer_landed(kva_op *op, uint32_t layer) {
  pthread_mutex_lock(&op->lock);
  if (layer + 1 > op->layers_done) op->layers_done = layer + 1;
  pthread_cond_broadcast(&op->cond);
  pthread_mutex_unlock(&op->lock);
}

void op_complete(kva_op *op, int status) {
  kva_kv *kv = op->kv;
  pthread_mutex_lock(&op->lock);
  op->layers_done = op->job.g.num_layers;
  op->status = status;
  op->complete = 1;
  if (op->efd_wanted) op_ring(op);
  pthread_cond_broadcast(&op->cond);
  pthread_mutex_unlock(&op->lock);
  /* op may be gone from here on */
  kv_op_finished(kv);
}

/* Absolute CLOCK_MONOTONIC deadline timeout_ms from now. */
static struct timespec deadline_in(int timeout_ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += timeout_ms / 1000;
  t.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* Waits under op->lock until done(op) holds; KVA_ETIMEDOUT after
 * timeout_ms (< 0: forever). */
static int op_wait_until(kva_op *op, int (*done)(const kva_op *, uint32_t), uint32_t arg,
                         int timeout_ms) {
  struct timespec until = deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  int rc = 0;
  while (!done(op, arg) && rc != ETIMEDOUT) {
    if (timeout_ms < 0)
      pthread_cond_wait(&op->cond, &op->lock);
    else
      rc = pthread_cond_timedwait(&op->cond, &op->lock, &until);
  }
  return done(op, arg) ? KVA_OK : KVA_ETIMEDOUT;
}

static int is_complete(const kva_op *op, uint32_t unused) {
  return op->complete;
}
static int has_layer(const kva_op *op, uint32_t layer) {
  return op->layers_done > layer;
}

/* A pooled actor must not wait here: the op completes on the L1 manager's
 * (or a client's connection's) replies, which may need its worker. */
static bool may_wait(int timeout_ms) {
  return timeout_ms == 0 || !actor_in_pooled_turn();
}

int kva_op_wait(kva_op *op, int timeout_ms, int *status) {
  if (!op || !may_wait(timeout_ms)) return KVA_EINVAL;
  if (op->kv->fork_gen != runtime_fork_gen()) return KVA_ESHUTDOWN; /* a child of fork() */
  pthread_mutex_lock(&op->lock);
  int rc = op_wait_until(op, is_complete, 0, timeout_ms);
  int st = op->status;
  pthread_mutex_unlock(&op->lock);
  if (rc != KVA_OK) return rc;
  if (status) *status = st;
  op_return(op);
  return KVA_OK;
}

int kva_op_wait_layer(kva_op *op, uint32_t layer, int timeout_ms) {
  if (!op || layer >= op->job.g.num_layers || !may_wait(timeout_ms)) return KVA_EINVAL;
  if (op->kv->fork_gen != runtime_fork_gen()) return KVA_ESHUTDOWN; /* a child of fork() */
  pthread_mutex_lock(&op->lock);
  int rc = op_wait_until(op, has_layer, layer, timeout_ms);
  pthread_mutex_unlock(&op->lock);
  return rc;
}

/* Completion is only written to the eventfd of an op whose waiter asked
 * for it, so ops waited for with kva_op_wait make no syscall. The op is
 * const to the caller: only its private efd flags change. */
int kva_op_eventfd(const kva_op *cop) {
  if (!cop) return KVA_EINVAL;
  kva_op *op = (kva_op *)cop;
  pthread_mutex_lock(&op->lock);
  if (!op->efd_wanted) {
    op->efd_wanted = 1;
    if (op->complete) op_ring(op);
  }
  pthread_mutex_unlock(&op->lock);
  return op->efd;
}
