/*
 * config_threads_test.c — one kva_config shared by threads: concurrent
 * kva_config_set on keys of their own and on one shared key, typed gets,
 * kva_config_to_msgpack and kva_runtime_start's copy, each checked against
 * what the writers wrote, and strings from kva_config_get_str that stay
 * readable while other threads replace the trees. Also run under TSan.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"

#define ITERS 300
#define SHARED_WRITERS 3
#define SEED_STRIDE 1000000 /* runtime.seed = writer * SEED_STRIDE + iteration */

/* Keys of one writer each (nobody else sets them) and their first value. */
static const struct {
  const char *path;
  int64_t base;
} own_keys[] = {
    {"l1.size_bytes", 1 << 20},
    {"l1.reserve_bytes", 4096},
    {"eviction.interval_ms", 10},
    {"runtime.batch", 1},
};
#define OWN_WRITERS (int)(sizeof(own_keys) / sizeof(own_keys[0]))

typedef struct worker {
  kva_config *c;
  int index;
  int bad; /* the first problem seen, as a line number; 0 = none */
} worker;

#define CHECK(w, cond)                                                                             \
  do {                                                                                             \
    if (!(cond) && !(w)->bad) (w)->bad = __LINE__;                                                 \
  } while (0)

static int64_t get_i64(kva_config *c, const char *path) {
  int64_t v = -1;
  return kva_config_get_i64(c, path, &v) == KVA_OK ? v : -1;
}

/* A seed some shared writer wrote (or the default, 0). */
static int seed_is_written(int64_t seed) {
  uint64_t u = (uint64_t)seed;
  return u == 0 || (u / SEED_STRIDE < SHARED_WRITERS && u % SEED_STRIDE < ITERS);
}

/* Sets its own key and reads back exactly what it set; reads the shared
 * key, which holds some writer's value. */
static void *own_writer(void *arg) {
  worker *w = arg;
  char v[32];
  for (int i = 0; i < ITERS; i++) {
    snprintf(v, sizeof v, "%lld", (long long)(own_keys[w->index].base + i));
    CHECK(w, kva_config_set(w->c, own_keys[w->index].path, v) == KVA_OK);
    CHECK(w, get_i64(w->c, own_keys[w->index].path) == own_keys[w->index].base + i);
    CHECK(w, seed_is_written(get_i64(w->c, "runtime.seed")));
  }
  return NULL;
}

/* Sets the shared key; what it reads back is some writer's value. */
static void *shared_writer(void *arg) {
  worker *w = arg;
  char v[32];
  for (int i = 0; i < ITERS; i++) {
    snprintf(v, sizeof v, "%d", w->index * SEED_STRIDE + i);
    CHECK(w, kva_config_set(w->c, "runtime.seed", v) == KVA_OK);
    CHECK(w, seed_is_written(get_i64(w->c, "runtime.seed")));
    CHECK(w, kva_config_set(w->c, "runtime.seed", "not a number") == KVA_ECONFIG);
  }
  return NULL;
}

/* Takes strings and whole copies while the writers replace the trees: the
 * strings stay readable, and every copy loads and holds written values. */
static void *reader(void *arg) {
  worker *w = arg;
  const char *names[ITERS / 10];
  for (int i = 0; i < ITERS; i++) {
    const char *type = NULL;
    CHECK(w, kva_config_get_str(w->c, "l2[0].type", &type) == KVA_OK);
    if (i % 10 == 0) names[i / 10] = type;
    void *buf = NULL;
    size_t len = 0;
    kva_config *copy = NULL;
    CHECK(w, kva_config_to_msgpack(w->c, &buf, &len) == KVA_OK);
    CHECK(w, kva_config_from_msgpack(buf, len, &copy, NULL, 0) == KVA_OK);
    CHECK(w, copy && seed_is_written(get_i64(copy, "runtime.seed")));
    CHECK(w, copy && get_i64(copy, "l1.size_bytes") >= own_keys[0].base);
    kva_config_free(copy);
    free(buf);
  }
  for (int i = 0; i < ITERS / 10; i++) CHECK(w, names[i] && strcmp(names[i], "disk") == 0);
  return NULL;
}

START_TEST(threads_share_one_config) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(kva_config_set(c, "l1.size_bytes", "1048576"), KVA_OK);
  enum { N = OWN_WRITERS + SHARED_WRITERS + 1 };
  worker w[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    w[i] = (worker){.c = c, .index = i < OWN_WRITERS ? i : i - OWN_WRITERS};
    void *(*fn)(void *) = i < OWN_WRITERS ? own_writer : i < N - 1 ? shared_writer : reader;
    ck_assert_int_eq(pthread_create(&t[i], NULL, fn, &w[i]), 0);
  }
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++) ck_assert_msg(!w[i].bad, "thread %d: check at line %d", i, w[i].bad);
  /* each own key holds its writer's last value; the seed some writer's last */
  for (int i = 0; i < OWN_WRITERS; i++)
    ck_assert_int_eq(get_i64(c, own_keys[i].path), own_keys[i].base + ITERS - 1);
  uint64_t seed = (uint64_t)get_i64(c, "runtime.seed");
  ck_assert_uint_eq(seed % SEED_STRIDE, ITERS - 1);
  ck_assert_uint_lt(seed / SEED_STRIDE, SHARED_WRITERS);
  kva_config_free(c);
}
END_TEST

/* kva_runtime_start copies the config it is given while another thread
 * keeps setting it: the runtime starts from one whole version. */
static void *seed_setter(void *arg) {
  worker *w = arg;
  char v[32];
  for (int i = 0; i < ITERS; i++) {
    snprintf(v, sizeof v, "%d", i);
    CHECK(w, kva_config_set(w->c, "runtime.seed", v) == KVA_OK);
  }
  return NULL;
}

START_TEST(runtime_start_copies_a_config_being_set) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(kva_config_set(c, "l1.size_bytes", "0"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l2", "[]"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "runtime.workers", "1"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "runtime.stats", "false"), KVA_OK);
  worker w = {.c = c};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, seed_setter, &w), 0);
  for (int i = 0; i < 20; i++) {
    kva_runtime *rt = NULL;
    ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_OK);
    kva_runtime_shutdown(rt);
  }
  pthread_join(t, NULL);
  ck_assert_int_eq(w.bad, 0);
  ck_assert_int_eq(get_i64(c, "runtime.seed"), ITERS - 1);
  kva_config_free(c);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("config_threads");
  TCase *tc = tcase_create("shared");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, threads_share_one_config);
  tcase_add_test(tc, runtime_start_copies_a_config_being_set);
  suite_add_tcase(s, tc);
  return s;
}
