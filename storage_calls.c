/*
 * storage_calls.c — the facade's write, delete, touch and maintenance
 * calls: validate in the caller's thread, then one message to the L1
 * manager with the request on the caller's stack (it waits for the reply).
 */
#include <string.h>

#include "l1/key.h"
#include "storage_internal.h"

int kva_reserve_write(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                      kva_write_mode mode, kva_buf *bufs, int *status) {
  int rc = storage_check_keys(s, k, n);
  if (rc != KVA_OK) return rc;
  if (!bufs || !status || layout_bytes(l) == 0) return KVA_EINVAL;
  if (mode != KVA_WRITE_NEW && mode != KVA_WRITE_UPDATE && mode != KVA_WRITE_ALL) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .layout = l, .mode = (int)mode, .bufs = bufs, .status = status};
  return storage_call(s, L1_RESERVE_WRITE, &r);
}

int kva_finish_write(kva_storage *s, const kva_key *k, size_t n, int *status) {
  int rc = storage_check_keys(s, k, n);
  if (rc != KVA_OK) return rc;
  if (!status) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .status = status};
  return storage_call(s, L1_FINISH_WRITE, &r);
}

int kva_delete(kva_storage *s, const kva_key *k, size_t n, int force, int *status) {
  int rc = storage_check_keys(s, k, n);
  if (rc != KVA_OK) return rc;
  if (!status) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .force = force != 0, .status = status};
  return storage_call(s, L1_DELETE, &r);
}

int kva_touch(kva_storage *s, const kva_key *k, size_t n) {
  int rc = storage_check_keys(s, k, n);
  if (rc != KVA_OK) return rc;
  l1_req r = {.keys = k, .n = n};
  return storage_call(s, L1_TOUCH, &r);
}

int kva_clear(kva_storage *s, int force) {
  if (!s) return KVA_EINVAL;
  l1_req r = {.force = force != 0};
  return storage_call(s, L1_CLEAR, &r);
}

int kva_memcheck(kva_storage *s, char *report, size_t len) {
  if (!s || (len && !report)) return KVA_EINVAL;
  l1_req r = {.report = report, .report_len = len};
  return storage_call(s, L1_MEMCHECK, &r);
}

int kva_storage_get_stats(kva_storage *s, kva_storage_stats *out) {
  if (!s || !out) return KVA_EINVAL;
  l1_req r = {.stats = out};
  return storage_call(s, L1_STATS, &r);
}
