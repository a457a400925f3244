/*
 * gpu_link.c — the facade's side of gpu/storage_link.h.
 */
#include "gpu/storage_link.h"
#include "storage/storage_internal.h"

kva_runtime *storage_link_runtime(kva_storage *s) {
  return s->rt;
}

kva_actor *storage_link_l1(kva_storage *s) {
  return s->l1;
}

int storage_link_enter(kva_storage *s) {
  return storage_enter(s);
}

void storage_link_leave(kva_storage *s) {
  storage_leave(s);
}

int storage_link_abort_write(kva_storage *s, const kva_key *k, size_t n, int *st) {
  l1_req r = {.keys = k, .n = n, .status = st};
  return storage_call(s, L1_ABORT_WRITE, &r);
}
