/*
 * chunk_keys_test.c — kva_chunk_keys: prefix-chained, salted, partial
 * chunks, limits and bad arguments, and keys the store accepts.
 */
#include <check.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

/* ---- kva_chunk_keys ------------------------------------------------------- */

#define NTOK 1536 /* six chunks of 256 */
#define CHUNK 256

static void tokens_init(int32_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(i * 7919 % 32000);
}

static int key_eq(const kva_key *a, const kva_key *b) {
  return memcmp(a, b, sizeof(*a)) == 0;
}

START_TEST(chunk_keys_are_deterministic) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[8], b[8];
  memset(a, 0xee, sizeof(a));
  memset(b, 0x11, sizeof(b));
  ck_assert_uint_eq(kva_chunk_keys("llama", 3, NULL, t, NTOK, CHUNK, 0, a, 8), 6);
  ck_assert_uint_eq(kva_chunk_keys("llama", 3, NULL, t, NTOK, CHUNK, 0, b, 8), 6);
  for (int i = 0; i < 6; i++) {
    ck_assert(key_eq(&a[i], &b[i]));
    ck_assert_str_eq(a[i].model, "llama");
    ck_assert_uint_eq(a[i].kv_rank, 3);
    ck_assert_uint_eq(a[i].group, 0);
    ck_assert_uint_ge(a[i].hash_len, 1);
    ck_assert_uint_le(a[i].hash_len, 32);
    for (int j = 0; j < i; j++) ck_assert(!key_eq(&a[i], &a[j]));
  }
  /* another kv_rank: same chunks, other keys */
  ck_assert_uint_eq(kva_chunk_keys("llama", 4, NULL, t, NTOK, CHUNK, 0, b, 8), 6);
  for (int i = 0; i < 6; i++) ck_assert(!key_eq(&a[i], &b[i]));
}
END_TEST

START_TEST(chunk_key_depends_on_its_prefix_only) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[6], b[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 6);
  t[3 * CHUNK + 17] ^= 1; /* a token of chunk 3 */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, b, 6), 6);
  for (int i = 0; i < 3; i++) ck_assert(key_eq(&a[i], &b[i]));
  for (int i = 3; i < 6; i++) ck_assert(!key_eq(&a[i], &b[i]));
  /* fewer tokens: the keys of the chunks still complete are the same */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 2 * CHUNK + 5, CHUNK, 0, b, 6), 2);
  for (int i = 0; i < 2; i++) ck_assert(key_eq(&a[i], &b[i]));
}
END_TEST

START_TEST(chunk_keys_salt_changes_every_key) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[6], b[6], c[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 6);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, "tenant-a", t, NTOK, CHUNK, 0, b, 6), 6);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, "tenant-b", t, NTOK, CHUNK, 0, c, 6), 6);
  for (int i = 0; i < 6; i++) {
    ck_assert(!key_eq(&a[i], &b[i]));
    ck_assert(!key_eq(&b[i], &c[i]));
    ck_assert(!key_eq(&a[i], &c[i]));
  }
}
END_TEST

START_TEST(chunk_keys_partial_chunk_only_when_asked) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key full[6], a[6], b[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, full, 6), 6);
  size_t n = 3 * CHUNK + 100;
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, n, CHUNK, 0, a, 6), 3);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, n, CHUNK, 1, b, 6), 4);
  for (int i = 0; i < 3; i++) {
    ck_assert(key_eq(&a[i], &full[i]));
    ck_assert(key_eq(&b[i], &full[i]));
  }
  ck_assert(!key_eq(&b[3], &full[3])); /* 100 tokens are not chunk 3's 256 */
  /* the partial key depends on the partial tokens */
  kva_key c[6];
  t[3 * CHUNK + 50] ^= 1;
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, n, CHUNK, 1, c, 6), 4);
  ck_assert(!key_eq(&b[3], &c[3]));
  ck_assert(key_eq(&b[2], &c[2]));
  /* no remainder: include_partial adds nothing */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 3 * CHUNK, CHUNK, 1, a, 6), 3);
  /* fewer tokens than a chunk */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 10, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 10, CHUNK, 1, a, 6), 1);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 0, CHUNK, 1, a, 6), 0);
}
END_TEST

START_TEST(chunk_keys_max_limits_the_count) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key full[6], a[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, full, 6), 6);
  memset(a, 0x33, sizeof(a));
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, a, 2), 2);
  ck_assert(key_eq(&a[0], &full[0]));
  ck_assert(key_eq(&a[1], &full[1]));
  for (size_t i = 0; i < sizeof(a[2]); i++) ck_assert_uint_eq(((uint8_t *)&a[2])[i], 0x33);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 1, a, 0), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK - 7, CHUNK, 1, a, 6), 6);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK - 7, CHUNK, 1, a, 5), 5);
}
END_TEST

START_TEST(chunk_keys_bad_arguments_give_zero) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[6];
  char m63[64], m64[65];
  memset(m63, 'm', 63);
  m63[63] = '\0';
  memset(m64, 'm', 64);
  m64[64] = '\0';
  ck_assert_uint_eq(kva_chunk_keys(NULL, 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, 0, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m@x", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys(m64, 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, NULL, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, NULL, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys(m63, 0, NULL, t, NTOK, CHUNK, 0, a, 6), 6);
  ck_assert_str_eq(a[0].model, m63);
}
END_TEST

START_TEST(chunk_keys_are_valid_store_keys) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  int32_t t[NTOK + 10];
  tokens_init(t, NTOK + 10);
  kva_key k[7];
  size_t n = kva_chunk_keys("llama-3-8b", 1, "salt", t, NTOK + 10, CHUNK, 1, k, 7);
  ck_assert_uint_eq(n, 7);
  kva_layout l = fixture_layout_bytes(4096);
  kva_buf b[7];
  int st[7];
  ck_assert_int_eq(kva_reserve_write(s, k, n, &l, KVA_WRITE_NEW, b, st), 7);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), 7);
  /* the keys of a shorter prompt find the shared prefix */
  kva_key p[7];
  t[4 * CHUNK] ^= 1;
  ck_assert_uint_eq(kva_chunk_keys("llama-3-8b", 1, "salt", t, NTOK, CHUNK, 0, p, 7), 6);
  ck_assert_uint_eq(prefetch_l(s, p, 6, &l, 0), 4);
  ck_assert_int_eq(kva_finish_read_prefetched(s, p, 4, 0), 4);
  ck_assert_uint_eq(prefetch_l(s, k, n, &l, 0), 7);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, n, 0), 7);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("chunk_keys_test");
  TCase *tc = tcase_create("chunk_keys");
  tcase_add_test(tc, chunk_keys_are_deterministic);
  tcase_add_test(tc, chunk_key_depends_on_its_prefix_only);
  tcase_add_test(tc, chunk_keys_salt_changes_every_key);
  tcase_add_test(tc, chunk_keys_partial_chunk_only_when_asked);
  tcase_add_test(tc, chunk_keys_max_limits_the_count);
  tcase_add_test(tc, chunk_keys_bad_arguments_give_zero);
  tcase_add_test(tc, chunk_keys_are_valid_store_keys);
  suite_add_tcase(s, tc);
  return s;
}
