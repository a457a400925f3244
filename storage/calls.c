/*
 * calls.c — the facade's write, delete, touch and maintenance
 * calls: validate in the caller's thread, then one message to the L1
 * manager with the request on the caller's stack (it waits for the reply).
 */
#include <stdio.h>
#include <string.h>

#include "common/key.h"
#include "storage/storage_internal.h"

int kva_reserve_write(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                      kva_write_mode mode, kva_buf *bufs, int *status) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!bufs || !status || layout_bytes(l) == 0) return KVA_EINVAL;
  if (mode != KVA_WRITE_NEW && mode != KVA_WRITE_UPDATE && mode != KVA_WRITE_ALL) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .layout = l, .mode = (int)mode, .bufs = bufs, .status = status};
  return storage_call(s, L1_RESERVE_WRITE, &r);
}

int kva_finish_write(kva_storage *s, const kva_key *k, size_t n, int *status) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!status) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .status = status};
  return storage_call(s, L1_FINISH_WRITE, &r);
}

int kva_delete(kva_storage *s, const kva_key *k, size_t n, int force, int *status) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!status) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .force = force != 0, .status = status};
  return storage_call(s, L1_DELETE, &r);
}

int kva_touch(kva_storage *s, const kva_key *k, size_t n) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  l1_req r = {.keys = k, .n = n};
  return storage_call(s, L1_TOUCH, &r);
}

int kva_clear(kva_storage *s, int force) {
  if (!s) return KVA_EINVAL;
  l1_req r = {.force = force != 0};
  return storage_call(s, L1_CLEAR, &r);
}

/* Asks every tier for its lock count; the first tier holding locks makes
 * the check fail. */
typedef struct memcheck_args {
  char *report;
  size_t len;
} memcheck_args;

static int memcheck_tiers(kva_storage *s, session *ss, void *arg) {
  char *report = ((memcheck_args *)arg)->report;
  size_t len = ((memcheck_args *)arg)->len;
  int rc = KVA_OK;
  for (uint32_t t = 0; t < s->tiers.n && rc == KVA_OK; t++) {
    kva_l2_stats st = {0};
    rc = storage_tier_stats(s, ss, t, &st);
    if (rc == KVA_EIO) rc = KVA_OK; /* a failing tier's locks cannot be asked about */
    if (rc == KVA_OK && st.keys_locked) {
      if (len)
        snprintf(report, len, "l2 tier %s: %lu keys locked", s->tiers.t[t].name,
                 (unsigned long)st.keys_locked);
      rc = KVA_EIO;
    }
  }
  return rc;
}

int kva_memcheck(kva_storage *s, char *report, size_t len) {
  if (!s || (len && !report)) return KVA_EINVAL;
  l1_req r = {.report = report, .report_len = len};
  int rc = storage_call(s, L1_MEMCHECK, &r); /* a client's: the daemon's, tiers too */
  if (rc != KVA_OK || s->tiers.n == 0) return rc;
  return storage_with_session(s, memcheck_tiers, &(memcheck_args){report, len});
}

int kva_storage_get_stats(kva_storage *s, kva_storage_stats *out) {
  if (!s || !out) return KVA_EINVAL;
  l1_req r = {.stats = out};
  int rc = storage_call(s, L1_STATS, &r);
  if (rc != KVA_OK || s->client) return rc; /* a client's: the daemon's, L2 too */
  const l2_tiers *t = &s->tiers;
  out->l2_store_tasks = __atomic_load_n(&t->store_tasks, __ATOMIC_RELAXED);
  out->l2_stored_keys = __atomic_load_n(&t->stored_keys, __ATOMIC_RELAXED);
  out->l2_store_failures = __atomic_load_n(&t->store_failures, __ATOMIC_RELAXED);
  out->l2_store_skipped = __atomic_load_n(&t->store_skipped, __ATOMIC_RELAXED);
  out->l2_prefetches = __atomic_load_n(&t->prefetch_requests, __ATOMIC_RELAXED);
  out->l2_loaded_keys = __atomic_load_n(&t->loaded_keys, __ATOMIC_RELAXED);
  out->l2_load_failures = __atomic_load_n(&t->load_failures, __ATOMIC_RELAXED);
  return KVA_OK;
}
