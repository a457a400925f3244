/*
 * copy_actor.h — the copy actor of one device (copy_actor.c) and the table
 * that gives each (runtime, device) one of them (devices.c).
 */
#ifndef KVA_GPU_COPY_ACTOR_H
#define KVA_GPU_COPY_ACTOR_H

#include <pthread.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "common/msg_ids.h"
#include "kvact.h"

enum {
  COPY_START = MSG_COPY_BASE, /* no payload: watch the completion eventfd */
  COPY_SUBMIT,                /* payload kva_op *: copy job, then finish in L1 */
};
MSG_RANGE_CHECK(COPY_START, COPY_SUBMIT, MSG_COPY_BASE, MSG_COPY_END, "the copy actors'");

typedef struct copy_actor {
  kva_actor *self;
  kva_actor *l1;        /* the L1 manager, which finishes writes and reads */
  gpu_backend *backend; /* owned; destroyed in on_stop */
  int efd;              /* rung by job callbacks (backend threads) */
  pthread_mutex_t lock; /* copied_head/tail: backend threads -> actor */
  kva_op *copied_head, *copied_tail;
  /* devices.c, under its table lock */
  kva_runtime *rt;
  int device;
  uint32_t refs; /* registered kvs */
  kva_kv *kvs;   /* those kvs (kva_kv.next_on_dev) */
  int in_table;
  int orphan; /* stopped by shutdown while kvs still hold it */
  struct copy_actor *next;
} copy_actor;

/* Spawns the pinned copy actor of `device` over `backend` (taken over,
 * destroyed on failure). NULL on failure. */
copy_actor *copy_actor_spawn(kva_runtime *rt, kva_actor *l1, int device, gpu_backend *backend);
/* Hands op to the actor; KVA_ESHUTDOWN when it is stopped (op untouched). */
int copy_actor_submit(copy_actor *d, kva_op *op);

/* devices.c: the copy actor of (rt, device) for kv, spawned at its first
 * use with `streams` streams; kv joins its list. KVA_ENOTSUP for a device
 * that cannot be served. */
int devices_acquire(kva_runtime *rt, kva_actor *l1, int device, uint32_t streams, kva_kv *kv,
                    copy_actor **out);
/* kv leaves d's list; the last one stops the actor. */
void devices_release(copy_actor *d, kva_kv *kv);
/* copy_actor.c's on_stop: forget d if it is still in the table. Returns 1
 * when kvs still hold d: on_stop must then leave the struct to the last
 * devices_release. */
int devices_forget(copy_actor *d);
/* The storage facade's close (before the runtime stops its fd watches):
 * waits until every kv registered on rt has no op in flight, so an op
 * copying at shutdown finishes in L1 and completes. */
void gpu_drain(kva_runtime *rt);

#endif
