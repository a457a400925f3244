/*
 * kv_internal.h — a registered paged KV cache (kva_kv, kv.c).
 */
#ifndef KVA_GPU_KV_INTERNAL_H
#define KVA_GPU_KV_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "gpu/copy_actor.h"
#include "gpu/kv_geom.h"
#include "kvact.h"

struct kva_kv {
  kva_storage *s;
  kva_paged_kv desc; /* desc.layers points at `layers` */
  void **layers;     /* copy of the caller's pointers */
  kv_geom g;
  copy_actor *dev;            /* one reference, dropped by unregister */
  pthread_mutex_t lock;       /* inflight and the op pool (op.c) */
  pthread_cond_t idle;        /* broadcast when inflight drops to 0 */
  uint32_t inflight;          /* ops started and not yet complete */
  kva_op *free_ops;           /* pooled ops, ready for reuse */
  uint32_t ops_made;          /* ops ever created (the pool's size) */
  uint32_t ops_grown;         /* times an op's arrays were (re)allocated */
  uint32_t ops_out;           /* taken and not yet returned (kva_op_wait) */
  uint32_t ops_peak;          /* the most ever out at once */
  int unregistered;           /* the last op returned frees the kv */
  uint32_t fork_gen;          /* the runtime's (actors/fork.c): ops outlive it */
  struct kva_kv *next_on_dev; /* dev->kvs, under devices.c's table lock */
};

/* An op of kv is starting / has completed (op_complete). */
void kv_op_started(kva_kv *kv);
void kv_op_finished(kva_kv *kv);
/* Waits until no op of kv is in flight. */
void kv_wait_idle(kva_kv *kv);
/* Frees kv and its pool: unregistered, every op returned. */
void kv_destroy(kva_kv *kv);

#endif
