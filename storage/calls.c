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

int kva_abort_write(kva_storage *s, const kva_key *k, size_t n, int *status) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!status) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .status = status};
  return storage_call(s, L1_ABORT_WRITE, &r);
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

/* Asks every tier for its lock count (summed into counts); the first tier
 * holding locks makes the check fail, unless L1's already did. */
typedef struct memcheck_args {
  char *report;
  size_t len;
  int rc; /* L1's verdict */
  kva_memcheck_report *counts;
} memcheck_args;

static int memcheck_tiers(kva_storage *s, session *ss, void *arg) {
  memcheck_args *a = arg;
  int rc = a->rc;
  for (uint32_t t = 0; t < s->tiers.n; t++) {
    kva_l2_stats st = {0};
    int trc = storage_tier_stats(s, ss, t, &st);
    if (trc == KVA_ESHUTDOWN || trc == KVA_ENOMEM) return trc;
    if (trc != KVA_OK || !st.keys_locked) continue; /* a failing tier cannot be asked */
    a->counts->l2_keys_locked += st.keys_locked;
    if (rc != KVA_OK) continue;
    if (a->len)
      snprintf(a->report, a->len, "l2 tier %s: %lu keys locked", s->tiers.t[t].name,
               (unsigned long)st.keys_locked);
    rc = KVA_EIO;
  }
  return rc;
}

int kva_memcheck_with(kva_storage *s, const kva_memcheck_opts *o, kva_memcheck_report *out,
                      char *report, size_t len) {
  if (!s || (len && !report)) return KVA_EINVAL;
  kva_memcheck_opts none = {0};
  if (!o) o = &none;
  /* the store-behind's locks go as its stores answer; what a wait that
   * timed out leaves is what the check reports */
  if (o->wait_stores_ms) kva_flush(s, o->wait_stores_ms);
  kva_memcheck_report counts = {0};
  l1_req r = {
      .report = report, .report_len = len, .memcheck = &counts, .callers_only = o->callers_only};
  int rc = storage_call(s, L1_MEMCHECK, &r); /* a client's: the daemon's, tiers too */
  if (s->tiers.n && (rc == KVA_OK || rc == KVA_EIO)) {
    memcheck_args a = {report, len, rc, &counts};
    rc = storage_with_session(s, memcheck_tiers, &a);
  }
  if (out) *out = counts;
  return rc;
}

int kva_memcheck(kva_storage *s, char *report, size_t len) {
  return kva_memcheck_with(s, NULL, NULL, report, len);
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
  out->l2_skipped_slow_keys = __atomic_load_n(&t->skipped_slow_keys, __ATOMIC_RELAXED);
  return KVA_OK;
}
