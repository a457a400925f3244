/*
 * fuzz_redis_value.c — libFuzzer target for the check of a value read back
 * from Redis (l2/redis_value.c), the only parser of the bytes a GET brings:
 * whatever the server holds, the tier serves exactly the payload stored
 * for the key, layout and length asked for, or nothing.
 *
 * Input: [flags][payload length asked: u64][value: the rest, as the
 * server's reply bytes]. The request's key and layout fingerprint are the
 * ones the value's header names (zeros past a short value); flag 1 asks
 * for another key (kv_rank changed), flag 2 for another layout. Flag 4
 * makes the header describe the payload (length, payload_sum) and flag 8
 * seals it, so the fuzzer gets past the checksums. Checked: the value is
 * accepted exactly when an oracle written here accepts it (length, magic,
 * version, checksum, key, layout, length, payload checksum), the payload
 * returned is the value's bytes after the header, a refusal says why, and
 * no byte outside the value is read (the value is the fuzzer's own
 * buffer, bounds-checked by ASan).
 *
 * Build: bazel build //tests/fuzz:fuzz_redis_value; run: tests/fuzz/run_fuzz.sh.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvact.h"
#include "common/key.h"
#include "l2/adapters/redis/redis_value.h"
#include "tests/fuzz/fuzz.h"

enum { OTHER_KEY = 1, OTHER_LAYOUT = 2, DESCRIBE = 4, SEAL = 8 };

static bool oracle(const uint8_t *v, size_t n, const kva_key *k, uint64_t fp, uint64_t len) {
  object_header h;
  if (n < sizeof h || n - sizeof h != len) return false;
  memcpy(&h, v, sizeof h);
  if (h.magic != OBJECT_MAGIC || h.version != OBJECT_VERSION) return false;
  if (h.checksum != XXH3_64bits(&h, offsetof(object_header, checksum))) return false;
  return h.fingerprint == fp && h.length == len && key_equal(&h.key, k) &&
         h.payload_sum == XXH3_64bits(v + sizeof h, len);
}

/* The value with its header fixed up as the flags ask (a copy, exactly
 * sized, so ASan still sees every overread). */
static uint8_t *fix_up(const uint8_t *v, size_t n, uint8_t flags) {
  uint8_t *c = malloc(n ? n : 1);
  FUZZ_CHECK(c != NULL);
  memcpy(c, v, n);
  if (n < sizeof(object_header)) return c;
  object_header h;
  memcpy(&h, c, sizeof h);
  if (flags & DESCRIBE) {
    h.length = n - sizeof h;
    h.payload_sum = XXH3_64bits(c + sizeof h, h.length);
  }
  if (flags & SEAL) object_header_seal(&h);
  memcpy(c, &h, sizeof h);
  return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size};
  uint8_t flags = fuzz_u8(&in);
  uint64_t len = fuzz_u64(&in);
  uint8_t *v = fix_up(in.p, in.n, flags);
  object_header h;
  fuzz_in hv = {v, in.n};
  fuzz_take(&hv, &h, sizeof h); /* the request: what the header names */
  kva_key k = h.key;
  uint64_t fp = h.fingerprint;
  if (flags & OTHER_KEY) k.kv_rank ^= 1;
  if (flags & OTHER_LAYOUT) fp ^= 1;
  const char *why = "unset";
  const void *p = redis_value_check(v, in.n, &k, fp, len, &why);
  FUZZ_CHECK((p != NULL) == oracle(v, in.n, &k, fp, len));
  FUZZ_CHECK(p ? why == NULL && p == v + REDIS_VALUE_HDR : why != NULL && why[0] != '\0');
  FUZZ_CHECK(redis_value_check(v, in.n, &k, fp, len, NULL) == p);
  if (flags & (OTHER_KEY | OTHER_LAYOUT)) FUZZ_CHECK(p == NULL);
  free(v);
  return 0;
}
