/*
 * op.c — completion and waiting of kva_op (kvact.h "GPU copy").
 *
 * A waiter sleeps on the op's condition variable (monotonic clock) rather
 * than on its eventfd, so kva_op_wait_layer can wake for a single layer;
 * the eventfd is for engines that put ops into their own poll loop, and
 * is written once, when the op is complete.
 */
#include "gpu/op.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "gpu/kv_internal.h"

/* One allocation holds the op and its arrays, each aligned for its type:
 * the struct, copy_chunk and int64_t sizes are multiples of 8, kva_key's
 * of 4. */
kva_op *op_new(int kind, size_t nchunks, size_t ntokens) {
  size_t n = nchunks ? nchunks : 1, t = ntokens ? ntokens : 1;
  size_t chunks = sizeof(kva_op), slots = chunks + n * sizeof(copy_chunk);
  size_t keys = slots + t * sizeof(int64_t), st = keys + n * sizeof(kva_key);
  char *mem = calloc(1, st + n * sizeof(int));
  if (!mem) return NULL;
  kva_op *op = (kva_op *)mem;
  op->kind = kind;
  op->chunks = (copy_chunk *)(mem + chunks);
  op->slots = (int64_t *)(mem + slots);
  op->keys = (kva_key *)(mem + keys);
  op->st = (int *)(mem + st);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&op->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&op->lock, NULL);
  op->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (op->efd < 0) {
    op_free(op);
    return NULL;
  }
  return op;
}

void op_free(kva_op *op) {
  if (!op) return;
  if (op->efd >= 0) close(op->efd);
  pthread_cond_destroy(&op->cond);
  pthread_mutex_destroy(&op->lock);
  free(op);
}

void op_layer_landed(kva_op *op, uint32_t layer) {
  pthread_mutex_lock(&op->lock);
  if (layer + 1 > op->layers_done) op->layers_done = layer + 1;
  pthread_cond_broadcast(&op->cond);
  pthread_mutex_unlock(&op->lock);
}

void op_complete(kva_op *op, int status) {
  kva_kv *kv = op->kv;
  uint64_t one = 1;
  /* before `complete`: once that is set the waiter may close the fd */
  if (write(op->efd, &one, sizeof(one)) < 0) {
  }
  pthread_mutex_lock(&op->lock);
  op->layers_done = op->job.g.num_layers;
  op->status = status;
  op->complete = 1;
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

int kva_op_wait(kva_op *op, int timeout_ms, int *status) {
  if (!op) return KVA_EINVAL;
  pthread_mutex_lock(&op->lock);
  int rc = op_wait_until(op, is_complete, 0, timeout_ms);
  int st = op->status;
  pthread_mutex_unlock(&op->lock);
  if (rc != KVA_OK) return rc;
  if (status) *status = st;
  op_free(op);
  return KVA_OK;
}

int kva_op_wait_layer(kva_op *op, uint32_t layer, int timeout_ms) {
  if (!op || layer >= op->job.g.num_layers) return KVA_EINVAL;
  pthread_mutex_lock(&op->lock);
  int rc = op_wait_until(op, has_layer, layer, timeout_ms);
  pthread_mutex_unlock(&op->lock);
  return rc;
}

int kva_op_eventfd(const kva_op *op) {
  return op ? op->efd : KVA_EINVAL;
}
