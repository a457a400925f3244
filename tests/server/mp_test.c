/*
 * mp_test.c — multi-process mode with real processes, the data path:
 * clients sharing chunks byte-exact, a client killed holding every kind
 * of lock, the daemon restarted under a client, kva_kv_* across
 * processes, reads typed by their layout, lookups (mp_support.h: kvactd
 * exec'd, clients forked).
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/server/mp_support.h"
#include "tests/support/fixture.h"

/* ---- N clients share one pool ------------------------------------------------ */

#define SHARE_KEYS 64
#define SHARE_BYTES 65536

static int writer_body(kva_storage *s, int i, int out_fd) {
  write_keys(s, (uint64_t)i * 1000, SHARE_KEYS, SHARE_BYTES);
  return 0;
}

static int reader_body(kva_storage *s, int i, int out_fd) {
  /* reads the chunks of the writer before it, byte-exact */
  int other = (i + 3) % 4;
  return read_keys(s, (uint64_t)other * 1000, SHARE_KEYS, SHARE_BYTES) == SHARE_KEYS ? 0 : 1;
}

START_TEST(clients_read_each_others_chunks_byte_exact) {
  pid_t d = daemon_start();
  pid_t w[4], r[4];
  for (int i = 0; i < 4; i++) w[i] = fork_client(writer_body, i, -1);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(child_status(w[i]), 0);
  for (int i = 0; i < 4; i++) r[i] = fork_client(reader_body, i, -1);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(child_status(r[i]), 0);
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_objects, 4 * SHARE_KEYS);
  /* a prefetch handle's eventfd turns readable when the daemon answers */
  kva_key k = fixture_key(0);
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  struct pollfd pf = {.fd = kva_prefetch_eventfd(h), .events = POLLIN};
  ck_assert_int_ge(pf.fd, 0);
  ck_assert_int_eq(poll(&pf, 1, 5000), 1);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
  ck_assert_int_ne(access(sock_path, F_OK), 0); /* the socket is removed */
}
END_TEST

/* ---- a client killed while holding locks -------------------------------------- */

#define HELD 100

/* Takes HELD write reservations, HELD read locks, HELD pins and HELD
 * prefetches that wait on the slow tier, then reports and waits to die. */
static int holder_body(kva_storage *s, int base, int out_fd) {
  kva_layout l = fixture_layout_bytes(4096);
  kva_key k[HELD];
  kva_buf b[HELD];
  int st[HELD];
  for (int i = 0; i < HELD; i++) k[i] = fixture_key((uint64_t)base + i); /* reserved, unfinished */
  if (kva_reserve_write(s, k, HELD, &l, KVA_WRITE_NEW, b, st) != HELD) return 2;
  for (int i = 0; i < HELD; i++) memset(b[i].ptr, 0xee, 4096);
  for (int i = 0; i < HELD; i++) k[i] = fixture_key(5000 + i); /* the survivor's chunks */
  kva_prefetch *h;
  size_t hits = 0;
  if (kva_submit_prefetch(s, k, HELD, &l, 0, &h) != KVA_OK) return 3;
  if (kva_wait_prefetch(s, h, 5000, &hits) != KVA_OK || hits != HELD) return 4;
  kva_tier_hits th;
  if (kva_lookup(s, k, HELD, 1, &th) != KVA_OK || th.tier[0].hits != HELD) return 5;
  for (int i = 0; i < HELD; i++) k[i] = fixture_key(7000 + i); /* only in the slow tier */
  for (int i = 0; i < HELD; i++)
    if (kva_submit_prefetch(s, &k[i], 1, &l, 0, &h) != KVA_OK) return 6;
  char c = 'r';
  if (write(out_fd, &c, 1) != 1) return 7;
  pause();
  return 0;
}

START_TEST(a_killed_client_leaves_no_lock_and_loses_nothing) {
  pid_t d = daemon_start_with(100000, 0, NULL); /* the mock tier answers in 0.1 s */
  int p[2], gate[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(pipe(gate), 0);
  pid_t c = fork_client_gated(holder_body, 9000, p[1], gate[0]);
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  write_batch(s, 5000, HELD, 4096);
  /* keys 7000.. exist in L2 only: written, flushed, then dropped from L1 */
  write_batch(s, 7000, HELD, 4096);
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  kva_key k7[HELD];
  int st[HELD];
  for (int i = 0; i < HELD; i++) k7[i] = fixture_key(7000 + i);
  ck_assert_int_eq(kva_delete(s, k7, HELD, 0, st), HELD);
  /* the survivor holds a read lock of its own through it all */
  kva_key mine = fixture_key(5000);
  kva_prefetch *h;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, &mine, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);

  ck_assert_int_eq(write(gate[1], "g", 1), 1);
  char ready = 0;
  ck_assert_int_eq(read(p[0], &ready, 1), 1);
  ck_assert_int_eq(ready, 'r');
  kill(c, SIGKILL);
  ck_assert_int_eq(child_status(c), 128 + SIGKILL);

  /* the daemon releases everything but the survivor's lock, soon */
  kva_buf b;
  ck_assert_int_eq(kva_read_prefetched(s, &mine, 1, &b), KVA_OK);
  ck_assert(check_pattern(b.ptr, 4096, 5000));
  ck_assert_int_eq(kva_finish_read_prefetched(s, &mine, 1, 0), 1);
  char report[256] = "";
  int rc = KVA_EIO;
  for (int i = 0; i < 2000 && rc != KVA_OK; i++) { /* the slow prefetches end first */
    rc = kva_memcheck(s, report, sizeof(report));
    if (rc != KVA_OK) sleep_ms(10);
  }
  ck_assert_msg(rc == KVA_OK, "locks left after the kill: %s", report);
  /* the reservations were never stored nor readable; the rest is intact */
  ck_assert_uint_eq(read_keys(s, 9000, HELD, 4096), 0);
  ck_assert_uint_eq(read_keys(s, 5000, HELD, 4096), HELD);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- the daemon killed and restarted under a client --------------------------- */

START_TEST(a_client_survives_the_daemon_restarting) {
  pid_t d = daemon_start_with(0, 1, NULL);
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  write_keys(s, 100, 16, 8192);
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  /* a read lock held across the crash: its bytes stay mapped */
  kva_key k = fixture_key(100);
  kva_prefetch *h;
  size_t hits;
  kva_buf held;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &held), KVA_OK);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0); /* graceful: the disk index is saved */
  ck_assert(check_pattern(held.ptr, 8192, 100));

  /* meanwhile: errors and misses, never a hang */
  kva_layout l = fixture_layout_bytes(8192);
  kva_buf b;
  int st;
  kva_key k2 = fixture_key(200);
  ck_assert_int_lt(kva_reserve_write(s, &k2, 1, &l, KVA_WRITE_NEW, &b, &st), 0);
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, &k, 1, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 0);

  d = daemon_start_with(0, 1, NULL);
  client_wait_up(s);
  /* the disk tier kept the chunks: they come back through a prefetch */
  kva_key ks[16];
  for (int i = 0; i < 16; i++) ks[i] = fixture_key(100 + i);
  ck_assert_int_eq(kva_submit_prefetch(s, ks, 16, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 16);
  kva_buf bs[16];
  ck_assert_int_eq(kva_read_prefetched(s, ks, 16, bs), KVA_OK);
  for (int i = 0; i < 16; i++) ck_assert(check_pattern(bs[i].ptr, 8192, 100 + i));
  ck_assert_int_eq(kva_finish_read_prefetched(s, ks, 16, 0), 16);
  /* the lock of the old daemon is not the new one's: refused, harmless */
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- kva_kv_* in two processes ------------------------------------------------- */

#define KV_CHUNKS 4
#define KV_TOKENS 64 /* 4 chunks of 16 */

static void kv_cache(test_cache *c) {
  cache_init(c, KVA_DEVICE_HOST, KVA_KV_FLASH, KVA_DT_BF16, 2, 8, 16, 2, 64);
}

static void kv_slots(int64_t *slots) {
  for (int t = 0; t < KV_TOKENS; t++)
    slots[t] = KV_TOKENS - 1 - t; /* reversed: not a copy by luck */
}

static int kv_storer_body(kva_storage *s, int arg, int out_fd) {
  test_cache c;
  kv_cache(&c);
  cache_fill(&c, 42);
  kva_kv *kv = NULL;
  if (kva_kv_register(s, &c.d, &kv) != KVA_OK) return 2;
  kva_key k[KV_CHUNKS];
  gpu_test_keys(k, 0, KV_CHUNKS);
  int64_t slots[KV_TOKENS];
  kv_slots(slots);
  kva_op *op = NULL;
  if (kva_kv_store(s, kv, k, KV_CHUNKS, 16, slots, KV_TOKENS, &op) != KVA_OK) return 3;
  int st = -99;
  if (kva_op_wait(op, 10000, &st) != KVA_OK || st != KVA_OK) return 4;
  kva_kv_unregister(kv);
  cache_free(&c);
  return 0;
}

START_TEST(kv_store_in_one_process_and_kv_load_in_another_are_bit_exact) {
  pid_t d = daemon_start();
  ck_assert_int_eq(child_status(fork_client(kv_storer_body, 0, -1)), 0);
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  test_cache want, got;
  kv_cache(&want);
  cache_fill(&want, 42);
  kv_cache(&got);
  kva_kv *kv = NULL;
  ck_assert_int_eq(kva_kv_register(s, &got.d, &kv), KVA_OK);
  kva_key k[KV_CHUNKS];
  gpu_test_keys(k, 0, KV_CHUNKS);
  ck_assert_uint_eq(gpu_test_prefetch(s, k, KV_CHUNKS), KV_CHUNKS);
  int64_t slots[KV_TOKENS];
  kv_slots(slots);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_load(s, kv, k, KV_CHUNKS, 16, slots, KV_TOKENS, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  /* the cache has 8 x 16 = 128 slots; the 64 loaded are the storer's, the
   * rest stayed zero */
  for (uint32_t l = 0; l < 2; l++) {
    for (uint32_t kvh = 0; kvh < 2; kvh++)
      for (uint64_t slot = 0; slot < 128; slot++) {
        size_t off = ref_paged_offset(&got, kvh, slot);
        const uint8_t *g = (const uint8_t *)got.layers[l] + off;
        const uint8_t *w = (const uint8_t *)want.layers[l] + off;
        uint8_t zero[256] = {0};
        ck_assert_msg(memcmp(g, slot < KV_TOKENS ? w : zero, got.row_bytes) == 0,
                      "layer %u kv %u slot %lu differs", l, kvh, (unsigned long)slot);
      }
  }
  kva_kv_unregister(kv);
  cache_free(&want);
  cache_free(&got);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- reads typed by their layout --------------------------------------------------- */

/* Keys 0, 1 and 3 of fixture_layout_two, key 2 of the basic layout, each
 * filled with its pattern. */
static int typed_writer_body(kva_storage *s, int arg, int out_fd) {
  kva_layout two = fixture_layout_two(), basic = fixture_layout_basic();
  const kva_layout *lay[4] = {&two, &two, &basic, &two};
  for (int i = 0; i < 4; i++) {
    kva_key k = fixture_key((uint64_t)i);
    kva_buf b;
    int st;
    if (kva_reserve_write(s, &k, 1, lay[i], KVA_WRITE_NEW, &b, &st) != 1) return 2;
    fill_pattern(b.ptr, b.len, (uint64_t)i);
    if (kva_finish_write(s, &k, 1, &st) != 1) return 3;
  }
  return 0;
}

/* Objects one process wrote come back to another with the layouts they
 * were written with (several in one read), also once loaded from a tier;
 * a read that fails zeroes them, as in-process. */
START_TEST(a_read_through_kvactd_gives_each_object_its_layout) {
  pid_t d = daemon_start();
  ck_assert_int_eq(child_status(fork_client(typed_writer_body, 0, -1)), 0);
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  kva_layout two = fixture_layout_two(), basic = fixture_layout_basic(), got[3];
  const kva_layout *want[3] = {&two, &two, &basic};
  kva_key k[4];
  kva_buf b[3];
  for (int i = 0; i < 4; i++) k[i] = fixture_key((uint64_t)i);
  ck_assert_uint_eq(prefetch_hits(s, k, 3, NULL), 3);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, 3, b, got), KVA_OK);
  for (int i = 0; i < 3; i++) {
    fixture_assert_layout_eq(&got[i], want[i]);
    ck_assert_uint_eq(b[i].len, kva_layout_bytes(want[i]));
    ck_assert(check_pattern(b[i].ptr, b[i].len, (uint64_t)i));
  }
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  /* key 3 is there, but not read-locked by this client */
  ck_assert_uint_eq(prefetch_hits(s, k, 1, NULL), 1);
  kva_key k03[2] = {k[0], k[3]};
  memset(got, 0x11, sizeof(got));
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k03, 2, b, got), KVA_KEY_NOT_READABLE);
  static const kva_layout zero;
  ck_assert_mem_eq(&got[0], &zero, sizeof(zero));
  ck_assert_ptr_null(b[0].ptr);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 0); /* released by the read */
  /* loaded back from the mock tier */
  int st;
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  ck_assert_int_eq(kva_delete(s, &k[1], 1, 0, &st), 1);
  ck_assert_uint_eq(prefetch_hits(s, &k[1], 1, &two), 1);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, &k[1], 1, b, got), KVA_OK);
  fixture_assert_layout_eq(&got[0], &two);
  ck_assert(check_pattern(b[0].ptr, b[0].len, 1));
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k[1], 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- lookups ------------------------------------------------------------------------ */

START_TEST(lookups_from_l1_and_through_the_tiers_answer_as_in_process) {
  pid_t d = daemon_start();
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  write_batch(s, 1, 5, 4096);
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  kva_key k[6];
  int st[6];
  for (int i = 0; i < 6; i++) k[i] = fixture_key(1 + i);
  ck_assert_int_eq(kva_delete(s, &k[4], 1, 0, st), 1); /* key 5: in the mock tier only */
  kva_tier_hits th;
  /* all in L1: answered by the L1 manager, the tier listed with none */
  ck_assert_int_eq(kva_lookup(s, k, 4, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 4);
  ck_assert_uint_eq(th.ntiers, 2);
  ck_assert_str_eq(th.tier[0].name, "L1");
  ck_assert_uint_eq(th.tier[0].hits, 4);
  ck_assert_uint_eq(th.tier[1].hits, 0);
  /* past L1: the tier walk finds key 5, key 6 is nowhere */
  ck_assert_int_eq(kva_lookup(s, k, 6, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 5);
  ck_assert_uint_eq(th.tier[0].hits, 4);
  ck_assert_uint_eq(th.tier[1].hits, 1);
  /* pinned through the walk: the L1 hits get one pin each */
  ck_assert_int_eq(kva_lookup(s, k, 6, 1, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 5);
  ck_assert_int_eq(kva_unpin(s, k, 4), 4);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_daemon_without_tiers_pins_its_l1_hits) {
  pid_t d = daemon_start_with(0, 0, "l2=[]");
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  write_batch(s, 1, 3, 4096);
  kva_key k[4];
  for (int i = 0; i < 4; i++) k[i] = fixture_key(1 + i);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, k, 4, 1, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 3);
  ck_assert_uint_eq(th.ntiers, 1);
  char report[256];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO); /* three pins held */
  ck_assert_int_eq(kva_unpin(s, k, 4), 3);                            /* key 4 was never pinned */
  ck_assert_int_eq(kva_unpin(s, k, 3), 0);                            /* nor twice */
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("mp");
  TCase *tc = tcase_create("mp");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, clients_read_each_others_chunks_byte_exact);
  tcase_add_test(tc, a_killed_client_leaves_no_lock_and_loses_nothing);
  tcase_add_test(tc, a_client_survives_the_daemon_restarting);
  tcase_add_test(tc, kv_store_in_one_process_and_kv_load_in_another_are_bit_exact);
  tcase_add_test(tc, a_read_through_kvactd_gives_each_object_its_layout);
  tcase_add_test(tc, lookups_from_l1_and_through_the_tiers_answer_as_in_process);
  tcase_add_test(tc, a_daemon_without_tiers_pins_its_l1_hits);
  suite_add_tcase(s, tc);
  return s;
}
