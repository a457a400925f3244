/*
 * fixture.c — shared helpers for the Check suites (see fixture.h).
 */
#include "tests/support/fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

kva_runtime *fixture_runtime(int workers, ...) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  char num[32], err[256];
  snprintf(num, sizeof(num), "%d", workers);
  ck_assert_int_eq(kva_config_set_err(c, "runtime.workers", num, err, sizeof(err)), KVA_OK);
  ck_assert_int_eq(kva_config_set_err(c, "l1.size_bytes", "0", err, sizeof(err)), KVA_OK);
  va_list ap;
  va_start(ap, workers);
  for (const char *kv; (kv = va_arg(ap, const char *)) != NULL;) {
    char key[128];
    const char *eq = strchr(kv, '=');
    ck_assert_ptr_nonnull(eq);
    snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
    int rc = kva_config_set_err(c, key, eq + 1, err, sizeof(err));
    ck_assert_msg(rc == KVA_OK, "config %s: %s", kv, err);
  }
  va_end(ap);
  kva_runtime *rt = NULL;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_OK);
  kva_config_free(c);
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
