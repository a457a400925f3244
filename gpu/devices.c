/*
 * devices.c — one copy actor per (runtime, device), shared by the kvs
 * registered on it and stopped with the last of them.
 *
 * A process-wide list under one mutex: registering is rare, and the list
 * holds a handful of entries. An actor stopped by runtime shutdown (a kv
 * still registered) takes itself out in on_stop, so a later runtime at the
 * same address never finds a dead actor, and leaves its struct to the last
 * kva_kv_unregister (an orphan), which then only frees it.
 */
#include <pthread.h>
#include <stdlib.h>

#include "actors/log.h"
#include "gpu/copy_actor.h"
#include "gpu/kv_internal.h"

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static copy_actor *table; /* under table_lock */

static copy_actor *devices_find(kva_runtime *rt, int device) {
  for (copy_actor *d = table; d; d = d->next)
    if (d->rt == rt && d->device == device) return d;
  return NULL;
}

/* The backend of a device: the host, or a CUDA ordinal (KVA_ENOTSUP when
 * it cannot be served; cuda_device_create logged why). */
static int devices_backend(int device, uint32_t streams, gpu_backend **out) {
  if (device != KVA_DEVICE_HOST) return cuda_device_create(device, streams, out);
  *out = host_device_create(streams);
  return *out ? KVA_OK : KVA_ENOMEM;
}

int devices_acquire(kva_runtime *rt, kva_actor *l1, int device, uint32_t streams, kva_kv *kv,
                    copy_actor **out) {
  pthread_mutex_lock(&table_lock);
  copy_actor *d = devices_find(rt, device);
  int rc = KVA_OK;
  if (!d) {
    gpu_backend *b = NULL;
    rc = devices_backend(device, streams, &b);
    if (rc == KVA_OK && !(d = copy_actor_spawn(rt, l1, device, b))) rc = KVA_ENOMEM;
    if (rc == KVA_OK) {
      d->in_table = 1;
      d->next = table;
      table = d;
    }
  }
  if (d) {
    d->refs++;
    kv->next_on_dev = d->kvs;
    d->kvs = kv;
  }
  pthread_mutex_unlock(&table_lock);
  *out = d;
  return rc;
}

static void devices_unlink(copy_actor *d) {
  for (copy_actor **p = &table; *p; p = &(*p)->next) {
    if (*p == d) {
      *p = d->next;
      break;
    }
  }
  d->in_table = 0;
}

void devices_release(copy_actor *d, kva_kv *kv) {
  pthread_mutex_lock(&table_lock);
  for (kva_kv **p = &d->kvs; *p; p = &(*p)->next_on_dev) {
    if (*p == kv) {
      *p = kv->next_on_dev;
      break;
    }
  }
  int last = --d->refs == 0, orphan = d->orphan;
  if (last && !orphan) devices_unlink(d);
  pthread_mutex_unlock(&table_lock);
  if (last && orphan)
    free(d);
  else if (last)
    kva_actor_stop(d->self); /* on_stop frees d */
}

/* Under the table lock: a kva_kv_unregister racing with shutdown waits in
 * devices_release instead of freeing a kv we are waiting on. Completions
 * take no table lock, so the waits end. */
void gpu_drain(kva_runtime *rt) {
  pthread_mutex_lock(&table_lock);
  for (copy_actor *d = table; d; d = d->next) {
    if (d->rt != rt) continue;
    for (kva_kv *kv = d->kvs; kv; kv = kv->next_on_dev) kv_wait_idle(kv);
  }
  pthread_mutex_unlock(&table_lock);
}

int devices_forget(copy_actor *d) {
  pthread_mutex_lock(&table_lock);
  if (d->in_table) devices_unlink(d);
  d->orphan = d->refs > 0;
  int keep = d->orphan;
  pthread_mutex_unlock(&table_lock);
  return keep;
}
