/*
 * fuzz.h — shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a check
 * that aborts (libFuzzer's signal of a finding), and a cursor over the
 * input that reads zeros past its end, so any input length is a case.
 */
#ifndef KVA_TESTS_FUZZ_H
#define KVA_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

typedef struct fuzz_in {
  const uint8_t *p;
  size_t n;
} fuzz_in;

/* The next n bytes into out (zeros once the input is used up). */
static inline void fuzz_take(fuzz_in *in, void *out, size_t n) {
  size_t k = in->n < n ? in->n : n;
  memcpy(out, in->p, k);
  memset((uint8_t *)out + k, 0, n - k);
  in->p += k;
  in->n -= k;
}

static inline uint8_t fuzz_u8(fuzz_in *in) {
  uint8_t v;
  fuzz_take(in, &v, sizeof v);
  return v;
}

static inline uint64_t fuzz_u64(fuzz_in *in) {
  uint64_t v;
  fuzz_take(in, &v, sizeof v);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
