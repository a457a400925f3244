/*
 * fixture.c — shared helpers for the Check suites (see fixture.h).
 */
#include "tests/support/fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Applies one "key=value" setting, failing the test when it is refused. */
static void set_kv(kva_config *c, const char *kv) {
  char key[128], err[256];
  const char *eq = strchr(kv, '=');
  ck_assert_ptr_nonnull(eq);
  snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
  int rc = kva_config_set_err(c, key, eq + 1, err, sizeof(err));
  ck_assert_msg(rc == KVA_OK, "config %s: %s", kv, err);
}

/* Starts a runtime from the default config, `base` settings, then the
 * caller's NULL-terminated list. */
static kva_runtime *start_with(const char *const *base, size_t nbase, va_list ap) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  for (size_t i = 0; i < nbase; i++) set_kv(c, base[i]);
  for (const char *kv; (kv = va_arg(ap, const char *)) != NULL;) set_kv(c, kv);
  kva_runtime *rt = NULL;
  int rc = kva_runtime_start(c, &rt);
  ck_assert_msg(rc == KVA_OK, "runtime start: %s", kva_strerror(rc));
  kva_config_free(c);
  return rt;
}

kva_runtime *fixture_runtime(int workers, ...) {
  char w[48];
  snprintf(w, sizeof(w), "runtime.workers=%d", workers);
  const char *base[] = {w, "l1.size_bytes=0"};
  va_list ap;
  va_start(ap, workers);
  kva_runtime *rt = start_with(base, 2, ap);
  va_end(ap);
  return rt;
}

kva_msg fixture_recv(kva_port *p, void *buf, uint32_t buflen, int timeout_ms) {
  kva_msg m;
  memset(&m, 0, sizeof(m));
  int rc = kva_port_recv(p, &m, buf, buflen, timeout_ms);
  ck_assert_msg(rc == KVA_OK, "port recv: %s", kva_strerror(rc));
  return m;
}

uint64_t fixture_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

kva_runtime *fixture_storage(int workers, uint64_t l1_bytes, ...) {
  char w[48], size[64];
  snprintf(w, sizeof(w), "runtime.workers=%d", workers);
  snprintf(size, sizeof(size), "l1.size_bytes=%lu", (unsigned long)l1_bytes);
  const char *base[] = {w, size, "l1.hugepages=false", "l1.pinned=false", "l2=[]"};
  va_list ap;
  va_start(ap, l1_bytes);
  kva_runtime *rt = start_with(base, 5, ap);
  va_end(ap);
  ck_assert_ptr_nonnull(kva_storage_of(rt));
  return rt;
}

kva_key fixture_key(uint64_t i) {
  kva_key k;
  memset(&k, 0, sizeof(k));
  strcpy(k.model, "test_model");
  k.hash_len = 8;
  memcpy(k.hash, &i, 8);
  return k;
}

static kva_layout one_tensor(uint32_t ndim, const uint64_t *shape, kva_dtype dt) {
  kva_layout l;
  memset(&l, 0, sizeof(l));
  l.ntensors = 1;
  l.tensor[0].ndim = ndim;
  for (uint32_t d = 0; d < ndim; d++) l.tensor[0].shape[d] = shape[d];
  l.tensor[0].dtype = dt;
  return l;
}

kva_layout fixture_layout_basic(void) {
  const uint64_t shape[] = {100, 2, 512};
  return one_tensor(3, shape, KVA_DT_BF16);
}

kva_layout fixture_layout_large(void) {
  const uint64_t shape[] = {2048, 1024};
  return one_tensor(2, shape, KVA_DT_F32);
}

kva_layout fixture_layout_bytes(uint64_t bytes) {
  return one_tensor(1, &bytes, KVA_DT_U8);
}

kva_layout fixture_layout_two(void) {
  const uint64_t shape[] = {16, 8, 64};
  kva_layout l = one_tensor(3, shape, KVA_DT_BF16);
  l.ntensors = 2;
  l.tensor[1].ndim = 1;
  l.tensor[1].shape[0] = 16;
  l.tensor[1].dtype = KVA_DT_F32;
  return l;
}

void fixture_assert_layout_eq(const kva_layout *got, const kva_layout *want) {
  ck_assert_uint_eq(got->ntensors, want->ntensors);
  for (int t = 0; t < 4; t++) {
    ck_assert_uint_eq(got->tensor[t].ndim, want->tensor[t].ndim);
    ck_assert_int_eq(got->tensor[t].dtype, want->tensor[t].dtype);
    for (int d = 0; d < 6; d++)
      ck_assert_uint_eq(got->tensor[t].shape[d], want->tensor[t].shape[d]);
  }
}

void fixture_write(kva_storage *s, uint64_t first, size_t n, const kva_layout *l) {
  kva_key *k = calloc(n, sizeof(*k));
  kva_buf *b = calloc(n, sizeof(*b));
  int *st = calloc(n, sizeof(*st));
  ck_assert(k && b && st);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(first + i);
  ck_assert_int_eq(kva_reserve_write(s, k, n, l, KVA_WRITE_NEW, b, st), (int)n);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), (int)n);
  free(k);
  free(b);
  free(st);
}

kva_memcheck_report fixture_memcheck_counts(kva_storage *s, const kva_memcheck_opts *o, int want_rc,
                                            char *report, size_t len) {
  kva_memcheck_report c;
  memset(&c, 0xee, sizeof(c)); /* a count the call did not fill in shows */
  int rc = kva_memcheck_with(s, o, &c, report, len);
  ck_assert_msg(rc == want_rc, "memcheck %d (want %d): %s", rc, want_rc, report);
  return c;
}

void fixture_memcheck_clean(kva_storage *s) {
  char report[1024];
  /* the stores queued so far end first (10 s at most): their read locks
   * are kvact's own store-behind, not a caller's leftovers, and a check
   * made while one is in flight would fail by chance */
  kva_memcheck_opts o = {.wait_stores_ms = 10000};
  int rc = kva_memcheck_with(s, &o, NULL, report, sizeof(report));
  ck_assert_msg(rc == KVA_OK, "memcheck: %s", report);
}
