/*
 * l2_disk_recovery_test.c — the disk tier across restarts: a clean stop
 * and start keeps every key byte for byte (threaded and deterministic); a
 * process killed while storing leaves only objects that verify; torn and
 * damaged slots are misses while their neighbours load; persist = false
 * and temporary files leave nothing behind, not even for the scan after a
 * later crash (the generation rule of l2/disk_format.h), and what a crash
 * scan restored survives a second crash.
 */
#include <check.h>
#include <dirent.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/l2/l2_disk_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define CRASH_KEYS 64u
#define CRASH_BATCH 4u

static kva_runtime *reopen(int workers, const char *path, uint32_t nslots, const char *extra) {
  return l2_start_disk(workers, DT_L1, dt_json(path, dt_capacity(nslots), extra), NULL);
}

/* Unlinks the stats segments of a process that died without shutdown. */
static void remove_stats_segment(pid_t pid) {
  char pattern[64];
  snprintf(pattern, sizeof(pattern), "/dev/shm/kvact.%d.*", (int)pid);
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0) return;
  for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
  globfree(&g);
}

START_TEST(a_restart_finds_every_key_with_identical_bytes) {
  char path[512];
  dt_path(path, sizeof(path), "restart.kvd");
  kva_layout l = dt_layout();
  kva_runtime *rt = reopen(2, path, 128, "");
  dt_write_flush_clear(kva_storage_of(rt), 0, 100, &l, 1);
  l2_finish(rt);
  ck_assert_uint_eq(dt_super_read(path).clean, 1);
  rt = reopen(2, path, 128, "");
  ck_assert_uint_eq(dt_super_read(path).clean, 0); /* a crash from now on is detected */
  ck_assert_uint_eq(l2_stats(kva_storage_of(rt), 0).objects, 100);
  ck_assert_uint_eq(dt_read_back(kva_storage_of(rt), 0, 100, &l, 1), 100);
  l2_finish(rt);
  rt = reopen(0, path, 128, ""); /* and again, deterministic */
  ck_assert_uint_eq(dt_read_back(kva_storage_of(rt), 0, 100, &l, 1), 100);
  l2_finish(rt);
}
END_TEST

START_TEST(rewritten_keys_come_back_in_their_last_version) {
  char path[512];
  dt_path(path, sizeof(path), "rewrite.kvd");
  const uint64_t all[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  kva_runtime *rt = reopen(1, path, 16, "");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), all, 10, 1, true), KVA_OK);
  ck_assert_int_eq(dt_store(kva_storage_of(rt), all, 5, 2, false), KVA_OK);
  l2_finish(rt);
  rt = reopen(1, path, 16, "");
  uint8_t bits[2];
  ck_assert_int_eq(dt_load(kva_storage_of(rt), all, 5, 2, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x1f);
  ck_assert_int_eq(dt_load(kva_storage_of(rt), all + 5, 5, 1, false, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x1f);
  ck_assert_uint_eq(dt_super_read(path).seq, 15);
  l2_finish(rt);
}
END_TEST

/* ---- crashes -------------------------------------------------------------- */

/* The child: stores keys 0..CRASH_KEYS-1 round after round (version =
 * round) into a tier of 32 slots, so slots are rewritten and evicted all
 * the time, until it is killed. Plain calls only: no Check in a child. */
static void crash_child(const char *json, int ready_fd) {
  kva_runtime *rt = l2_start_disk(2, DT_L1, json, NULL);
  kva_storage *s = kva_storage_of(rt);
  for (uint32_t round = 0;; round++) {
    for (uint64_t first = 0; first < CRASH_KEYS; first += CRASH_BATCH) {
      uint64_t ids[CRASH_BATCH];
      for (uint32_t i = 0; i < CRASH_BATCH; i++) ids[i] = first + i;
      if (dt_store(s, ids, CRASH_BATCH, round, round % 2) != KVA_OK) _exit(3);
    }
    if (round == 1 && write(ready_fd, "r", 1) != 1) _exit(4);
  }
}

/* Whether the bytes are a version written for key id. */
static bool some_version(const void *p, size_t len, uint64_t id) {
  for (uint32_t v = 0; v < (1u << 20); v++)
    if (l2_matches(p, len, id, v)) return true;
  return false;
}

START_TEST(a_crash_mid_store_leaves_only_objects_that_verify) {
  char path[512];
  dt_path(path, sizeof(path), "crash.kvd");
  char json[1024];
  snprintf(json, sizeof(json), "%s", dt_json(path, dt_capacity(32), ""));
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    crash_child(json, fds[1]);
  }
  close(fds[1]);
  char c;
  ck_assert_int_eq(read(fds[0], &c, 1), 1); /* two full rounds are on disk */
  l2_sleep_ms(30 + (unsigned)(fixture_now_ns() % 50));
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFSIGNALED(status));
  close(fds[0]);
  remove_stats_segment(pid); /* the killed child never unlinked it */
  ck_assert_uint_eq(dt_super_read(path).clean, 0);

  l2_log_start(KVA_LOG_INFO);
  kva_runtime *rt = l2_start_disk(1, DT_L1, json, NULL);
  ck_assert_uint_eq(l2_log_count("not closed cleanly"), 1);
  l2_log_stop();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  size_t served = 0;
  for (uint64_t id = 0; id < CRASH_KEYS; id++) {
    if (l2_prefetch(s, &id, 1, &l, 0) != 1) continue;
    kva_key k = fixture_key(id);
    kva_buf b;
    ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &b), KVA_OK);
    ck_assert_msg(some_version(b.ptr, b.len, id), "key %lu: bytes of no version",
                  (unsigned long)id);
    ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
    served++;
  }
  ck_assert_uint_gt(served, 0);
  ck_assert_uint_le(served, 32);
  ck_assert_uint_eq(l2_stats(s, 0).load_failures, 0); /* the scan already dropped the torn */
  l2_finish(rt);
}
END_TEST

/* What a crash mid-rewrite leaves: the superblock not clean, and a slot
 * whose old header now fronts other payload bytes. */
START_TEST(a_torn_slot_is_dropped_by_the_scan_at_start) {
  char path[512];
  dt_path(path, sizeof(path), "torn.kvd");
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
  kva_runtime *rt = reopen(1, path, 16, "");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 8, 4, true), KVA_OK);
  l2_finish(rt);
  disk_super sb = dt_super_read(path);
  sb.clean = 0;
  dt_super_write(path, &sb);
  uint64_t off = dt_slot_of(path, 3);
  ck_assert_uint_ne(off, 0);
  for (uint64_t o = 100; o < 140; o++) dt_flip_byte(path, off + DISK_BLOCK + o);
  l2_log_start(KVA_LOG_INFO);
  rt = reopen(0, path, 16, "");
  ck_assert_uint_eq(l2_log_count("1 slots did not verify"), 1);
  ck_assert_uint_eq(l2_log_count("7 objects recovered"), 1);
  l2_log_stop();
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(kva_storage_of(rt), ids, 8, 4, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0xf7);
  l2_finish(rt);
}
END_TEST

START_TEST(a_flipped_payload_byte_is_a_miss_and_neighbours_load) {
  char path[512];
  dt_path(path, sizeof(path), "flip.kvd");
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
  kva_runtime *rt = reopen(1, path, 16, "");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 8, 7, true), KVA_OK);
  l2_finish(rt);
  uint64_t off = dt_slot_of(path, 3);
  ck_assert_uint_ne(off, 0);
  dt_flip_byte(path, off + DISK_BLOCK + 9999); /* the last payload byte */
  rt = reopen(1, path, 16, "");
  kva_storage *s = kva_storage_of(rt);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 8); /* a clean start trusts the checksums... */
  kva_layout l = dt_layout();
  for (uint64_t id = 0; id < 8; id++) { /* ...which every load checks */
    size_t hit = l2_prefetch(s, &id, 1, &l, 0);
    ck_assert_uint_eq(hit, id != 3);
    if (hit) l2_read_release(s, &id, 1, 7, 0);
  }
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.load_failures, 1);
  ck_assert_uint_eq(st.objects, 7); /* dropped */
  ck_assert(!dt_has(s, 3));
  l2_finish(rt);
}
END_TEST

START_TEST(a_flipped_header_byte_drops_the_slot_at_start) {
  char path[512];
  dt_path(path, sizeof(path), "flip_header.kvd");
  const uint64_t ids[] = {0, 1, 2, 3};
  kva_runtime *rt = reopen(1, path, 8, "");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 4, 1, false), KVA_OK);
  l2_finish(rt);
  dt_flip_byte(path, dt_slot_of(path, 2) + 40); /* payload_sum */
  rt = reopen(1, path, 8, "");
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(kva_storage_of(rt), ids, 4, 1, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0xb);
  ck_assert_uint_eq(l2_stats(kva_storage_of(rt), 0).objects, 3);
  l2_finish(rt);
}
END_TEST

/* ---- nothing kept --------------------------------------------------------- */

START_TEST(persist_false_discards_the_objects_at_stop) {
  char path[512];
  dt_path(path, sizeof(path), "nopersist.kvd");
  const uint64_t ids[] = {0, 1, 2};
  kva_runtime *rt = reopen(1, path, 8, "\"persist\":false");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 3, 0, true), KVA_OK);
  l2_finish(rt);
  rt = reopen(1, path, 8, "");
  ck_assert_uint_eq(l2_stats(kva_storage_of(rt), 0).objects, 0);
  ck_assert(!dt_has(kva_storage_of(rt), 0));
  l2_finish(rt);
}
END_TEST

/* What a run killed right after its start leaves: clean = 0, nothing else
 * changed (the start writes only that). */
static void crash_after_start(const char *path) {
  disk_super sb = dt_super_read(path);
  sb.clean = 0;
  dt_super_write(path, &sb);
}

START_TEST(a_crash_scan_does_not_bring_back_discarded_objects) {
  char path[512];
  dt_path(path, sizeof(path), "nopersist_crash.kvd");
  const uint64_t ids[] = {0, 1, 2};
  kva_runtime *rt = reopen(1, path, 8, "\"persist\":false");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 3, 0, true), KVA_OK);
  l2_finish(rt);
  crash_after_start(path); /* a later run with persist = true died */
  rt = reopen(1, path, 8, "");
  ck_assert_uint_eq(l2_stats(kva_storage_of(rt), 0).objects, 0);
  ck_assert(!dt_has(kva_storage_of(rt), 0));
  l2_finish(rt);
}
END_TEST

/* A child that starts on path, stores keys ids[] (version 1) when n > 0,
 * says so, and dies without stopping. */
static void run_and_die(const char *path, const uint64_t *ids, size_t n) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    kva_runtime *rt = reopen(1, path, 16, "");
    if (n && dt_store(kva_storage_of(rt), ids, n, 1, true) != KVA_OK) _exit(3);
    _exit(write(fds[1], "s", 1) == 1 ? 0 : 4);
  }
  close(fds[1]);
  char c;
  ck_assert_int_eq(read(fds[0], &c, 1), 1);
  close(fds[0]);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  remove_stats_segment(pid);
}

START_TEST(objects_a_crash_scan_restored_survive_a_second_crash) {
  char path[512];
  dt_path(path, sizeof(path), "crash_twice.kvd");
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5};
  kva_runtime *rt = reopen(1, path, 16, "");
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 3, 1, true), KVA_OK);
  l2_finish(rt);
  run_and_die(path, ids + 3, 3); /* keys 3..5 above the last clean stop's seq */
  run_and_die(path, NULL, 0);    /* its scan restores them; it dies too */
  ck_assert_uint_eq(dt_super_read(path).clean, 0);
  rt = reopen(1, path, 16, "");
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(kva_storage_of(rt), ids, 6, 1, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x3f);
  l2_finish(rt);
}
END_TEST

static size_t files_in(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

START_TEST(a_temporary_file_is_gone_after_shutdown) {
  char dir[512];
  dt_path(dir, sizeof(dir), "tmpdir");
  rmdir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  ck_assert_int_eq(setenv("TMPDIR", dir, 1), 0);
  for (int persist = 0; persist < 2; persist++) {
    kva_runtime *rt = l2_start_disk(1, DT_L1,
                                    persist ? "\"capacity_bytes\":1048576"
                                            : "\"capacity_bytes\":1048576,\"persist\":false",
                                    NULL);
    const uint64_t id = 5;
    ck_assert_int_eq(dt_store(kva_storage_of(rt), &id, 1, 0, true), KVA_OK);
    ck_assert_uint_eq(files_in(dir), 0); /* unnamed while it serves, too */
    l2_finish(rt);
    ck_assert_uint_eq(files_in(dir), 0);
  }
  rmdir(dir);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_disk_recovery");
  TCase *tc = tcase_create("recovery");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, a_restart_finds_every_key_with_identical_bytes);
  tcase_add_test(tc, rewritten_keys_come_back_in_their_last_version);
  tcase_add_test(tc, a_crash_mid_store_leaves_only_objects_that_verify);
  tcase_add_test(tc, a_torn_slot_is_dropped_by_the_scan_at_start);
  tcase_add_test(tc, a_flipped_payload_byte_is_a_miss_and_neighbours_load);
  tcase_add_test(tc, a_flipped_header_byte_drops_the_slot_at_start);
  tcase_add_test(tc, persist_false_discards_the_objects_at_stop);
  tcase_add_test(tc, a_crash_scan_does_not_bring_back_discarded_objects);
  tcase_add_test(tc, objects_a_crash_scan_restored_survive_a_second_crash);
  tcase_add_test(tc, a_temporary_file_is_gone_after_shutdown);
  suite_add_tcase(su, tc);
  return su;
}
