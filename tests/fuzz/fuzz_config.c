/*
 * fuzz_config.c — libFuzzer target for the config loader.
 *
 * Any bytes: kva_config_from_msgpack either fails with a "<path>: problem"
 * message and no config, or loads; a loaded config's effective msgpack
 * must load again to the very same bytes, and so must a copy. The same
 * bytes, as text, are also given to kva_config_set as the JSON of "l2"
 * (the setter's parser), which must either fail leaving the config as it
 * was or succeed with a config that round-trips too.
 *
 * Build: bazel build //tests/fuzz:fuzz_config; run: tests/fuzz/run_fuzz.sh config.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "kvact.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_config: %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static void *bytes_of(const kva_config *c, size_t *len) {
  void *buf = NULL;
  CHECK(kva_config_to_msgpack(c, &buf, len) == KVA_OK);
  return buf;
}

/* Loads c's effective bytes again (and a copy of c): all must be equal. */
static void check_round_trip(const kva_config *c) {
  char err[512];
  size_t n0, n1, n2;
  kva_config *d = NULL, *e = config_copy(c);
  void *a = bytes_of(c, &n0);
  CHECK(e != NULL);
  if (n0 <= CONFIG_MAX_BYTES) { /* float32 -> float64 may grow a near-limit input */
    int rc = kva_config_from_msgpack(a, n0, &d, err, sizeof err);
    if (rc != KVA_OK) fprintf(stderr, "fuzz_config: reload failed: %s\n", err);
    CHECK(rc == KVA_OK);
    void *b = bytes_of(d, &n1);
    CHECK(n0 == n1 && memcmp(a, b, n0) == 0);
    free(b);
  }
  void *x = bytes_of(e, &n2);
  CHECK(n0 == n2 && memcmp(a, x, n0) == 0);
  free(x);
  free(a);
  kva_config_free(d);
  kva_config_free(e);
}

static void fuzz_msgpack(const uint8_t *data, size_t size) {
  kva_config *c = (kva_config *)&c;
  char err[512] = "";
  int rc = kva_config_from_msgpack(data, size, &c, err, sizeof err);
  CHECK(rc == KVA_OK || rc == KVA_ECONFIG);
  if (rc != KVA_OK) {
    CHECK(c == NULL && strstr(err, ": ") != NULL);
    return;
  }
  const char *s;
  int64_t i;
  CHECK(kva_config_get_i64(c, "runtime.workers", &i) == KVA_OK);
  for (size_t t = 0; t < config_l2_count(c); t++) {
    CHECK(kva_config_node_str(config_l2_node(c, t), "type", &s) == KVA_OK);
    CHECK(kva_config_node_str(config_l2_node(c, t), "name", &s) == KVA_OK);
  }
  check_round_trip(c);
  kva_config_free(c);
}

static void fuzz_set(const uint8_t *data, size_t size) {
  kva_config *c = kva_config_default();
  char *text = malloc(size + 1), err[512];
  size_t n0, n1;
  CHECK(c && text);
  memcpy(text, data, size);
  text[size] = '\0';
  void *before = bytes_of(c, &n0);
  int rc = kva_config_set_err(c, "l2", text, err, sizeof err);
  CHECK(rc == KVA_OK || rc == KVA_ECONFIG);
  void *after = bytes_of(c, &n1);
  if (rc != KVA_OK)
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0);
  else
    check_round_trip(c);
  free(before);
  free(after);
  free(text);
  kva_config_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_msgpack(data, size);
  fuzz_set(data, size);
  return 0;
}
