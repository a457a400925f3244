/*
 * copy_actor.c — the copy actor of one device, on a thread of its own.
 *
 * Accepts                          | Sends
 * ---------------------------------+-----------------------------------
 * COPY_START (first, from spawn)   | kva_watch_fd(efd)
 * COPY_SUBMIT (kva_op *)           | the op's job to the backend
 * KVA_MSG_FD_READY (efd)           | per copied op: L1_FINISH_WRITE (store),
 *                                  | L1_ABORT_WRITE (failed store) or
 *                                  | L1_FINISH_READ (load) to L1, tag = op
 * L1_REPLY (tag = op)              | op_complete
 *
 * Invariants: every op handed over reaches op_complete exactly once, after
 * its L1 objects were finished, aborted or released (never with a lock of
 * its own left): kva_kv_unregister waits for its kv's ops (kv.c), and the
 * storage facade's close waits for every kv's ops in flight (gpu_drain)
 * before the runtime stops the fd watch that completions arrive through. The
 * actor never waits for a copy: backend callbacks put the op on `copied`
 * and ring efd.
 */
#include "gpu/copy_actor.h"

#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "actors/log.h"
#include "gpu/op.h"
#include "l1/l1_manager.h"

/* ---- backend callbacks (backend threads) ------------------------------- */

static void on_layer_done(copy_job *j, uint32_t layer) {
  op_layer_landed((kva_op *)((char *)j - offsetof(kva_op, job)), layer);
}

static void on_copy_done(copy_job *j, int result) {
  kva_op *op = (kva_op *)((char *)j - offsetof(kva_op, job));
  copy_actor *d = op->job.arg;
  op->copy_result = result;
  op->next = NULL;
  pthread_mutex_lock(&d->lock);
  int was_empty = !d->copied_head;
  if (d->copied_tail)
    d->copied_tail->next = op;
  else
    d->copied_head = op;
  d->copied_tail = op;
  pthread_mutex_unlock(&d->lock);
  /* one ring per batch: the actor drains efd before it takes the list, so
   * an op added to a non-empty list is taken with the ops before it */
  uint64_t one = 1;
  if (was_empty && write(d->efd, &one, sizeof(one)) < 0)
    LOG_ERROR("gpu: completion eventfd write failed");
}

/* ---- actor ------------------------------------------------------------- */

/* The L1 request that ends op: a stored chunk becomes readable (or is
 * dropped unseen if its copy failed); a loaded chunk's read lock goes. */
static void finish_in_l1(copy_actor *d, kva_op *op) {
  uint32_t type = L1_FINISH_READ;
  if (op->kind == OP_STORE) type = op->copy_result == KVA_OK ? L1_FINISH_WRITE : L1_ABORT_WRITE;
  op->req = (l1_req){.keys = op->keys, .n = op->job.nchunks, .readers = 1, .status = op->st};
  l1_req *r = &op->req;
  if (kva_send(d->l1, type, &r, sizeof(r), d->self, (uint64_t)(uintptr_t)op) != KVA_OK)
    op_complete(op, KVA_ESHUTDOWN);
}

static void drain_copied(copy_actor *d) {
  uint64_t n;
  while (read(d->efd, &n, sizeof(n)) > 0) {
  }
  pthread_mutex_lock(&d->lock);
  kva_op *op = d->copied_head;
  d->copied_head = d->copied_tail = NULL;
  pthread_mutex_unlock(&d->lock);
  while (op) {
    kva_op *next = op->next;
    finish_in_l1(d, op);
    op = next;
  }
}

static void on_l1_reply(kva_op *op) {
  int status = op->result_if_copied;
  if (op->copy_result != KVA_OK)
    status = KVA_EIO;
  else if (op->req.result < 0)
    status = op->req.result;
  op_complete(op, status);
}

static void submit(copy_actor *d, kva_op *op) {
  op->job.layer_done = on_layer_done;
  op->job.done = on_copy_done;
  op->job.arg = d;
  if (d->backend->submit(d->backend, &op->job) != KVA_OK) {
    op->copy_result = KVA_EIO;
    finish_in_l1(d, op);
  }
}

static void copy_receive(kva_actor *self, void *state, const kva_msg *m) {
  copy_actor *d = state;
  switch (m->type) {
  case COPY_START:
    if (kva_watch_fd(self, d->efd, EPOLLIN, 0) != KVA_OK)
      LOG_ERROR("gpu: copy actor %d cannot watch its eventfd", d->device);
    break;
  case COPY_SUBMIT:
    submit(d, *(kva_op *const *)m->data);
    break;
  case KVA_MSG_FD_READY:
    drain_copied(d);
    break;
  case L1_REPLY:
    on_l1_reply((kva_op *)(uintptr_t)m->tag);
    break;
  default:
    LOG_WARN("gpu: copy actor %d: unexpected message %u", d->device, m->type);
  }
}

/* Everything but the struct itself. */
static void copy_release(copy_actor *d) {
  if (d->backend) d->backend->destroy(d->backend);
  d->backend = NULL;
  if (d->efd >= 0) close(d->efd);
  d->efd = -1;
  pthread_mutex_destroy(&d->lock);
}

static void copy_free(copy_actor *d) {
  copy_release(d);
  free(d);
}

/* Waits for the backend's jobs; ops still in flight here were never
 * waited for (runtime shutdown with kvs registered) and stay incomplete. */
static void copy_on_stop(kva_actor *self, void *state) {
  copy_actor *d = state;
  kva_unwatch_fd(self, d->efd);
  if (devices_forget(d))
    copy_release(d); /* the last kva_kv_unregister frees d */
  else
    copy_free(d);
}

static const kva_behavior copy_behavior = {
    .name = "gpu_copy", .receive = copy_receive, .on_stop = copy_on_stop};

copy_actor *copy_actor_spawn(kva_runtime *rt, kva_actor *l1, int device, gpu_backend *backend) {
  copy_actor *d = calloc(1, sizeof(*d));
  if (!d) {
    backend->destroy(backend);
    return NULL;
  }
  d->backend = backend;
  d->l1 = l1;
  d->rt = rt;
  d->device = device;
  pthread_mutex_init(&d->lock, NULL);
  d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  kva_spawn_opts o = {.pinned = 1};
  if (d->efd < 0 || !(d->self = kva_spawn(rt, &copy_behavior, d, &o))) {
    copy_free(d);
    return NULL;
  }
  if (kva_send(d->self, COPY_START, NULL, 0, NULL, 0) != KVA_OK) {
    kva_actor_stop(d->self); /* on_stop frees d */
    return NULL;
  }
  return d;
}

int copy_actor_submit(copy_actor *d, kva_op *op) {
  return kva_send(d->self, COPY_SUBMIT, &op, sizeof(op), NULL, 0);
}
