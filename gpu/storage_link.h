/*
 * storage_link.h — what the copy devices and the kva_kv_* calls need of
 * the storage facade. Declared here, defined by storage/ (gpu_link.c):
 * gpu/ depends on no package above it, and the facade's internals stay
 * its own.
 */
#ifndef KVA_GPU_STORAGE_LINK_H
#define KVA_GPU_STORAGE_LINK_H

#include <stddef.h>

#include "kvact.h"

/* The runtime the storage runs on, and its L1 manager actor. */
kva_runtime *storage_link_runtime(kva_storage *s);
kva_actor *storage_link_l1(kva_storage *s);
/* Enter/leave a facade call: KVA_ESHUTDOWN once shutdown began. */
int storage_link_enter(kva_storage *s);
void storage_link_leave(kva_storage *s);
/* Drops reservations made with kva_reserve_write, unseen (st[i] per key). */
int storage_link_abort_write(kva_storage *s, const kva_key *k, size_t n, int *st);

#endif
