/*
 * l2_disk_errors_test.c — a disk tier that cannot start says why, and the
 * runtime start fails with KVA_ECONFIG: a missing directory, no
 * permission, a file smaller than one slot, a file of another format or
 * version, a capacity or slot size that holds nothing, a directory. A
 * filesystem that refuses O_DIRECT gets buffered I/O and one warning.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "l2/adapters/disk/disk.h"
#include "tests/l2/l2_disk_test.h"
#include "tests/support/disk_open_hook.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* Starts a runtime with one disk tier of these members, expecting
 * KVA_ECONFIG and a logged error that contains `why`. */
static void refused(const char *json, const char *why) {
  kva_runtime *rt;
  l2_log_start(KVA_LOG_WARN);
  ck_assert_int_eq(l2_try_start_disk(1, json, &rt), KVA_ECONFIG);
  ck_assert_msg(l2_log_count(why) == 1, "no \"%s\" in:\n%s", why, l2_log_text());
  l2_log_stop();
}

static void write_file(const char *path, const void *data, size_t len, off_t size) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
  if (size) ck_assert_int_eq(ftruncate(fd, size), 0);
  close(fd);
}

/* Two runtimes on one tier would overwrite each other's slots. */
START_TEST(a_tier_in_use_is_refused) {
  char path[512];
  dt_path(path, sizeof(path), "in_use.kvd");
  const char *json = dt_json(path, dt_capacity(4), "");
  kva_runtime *first = l2_start_disk(2, 16u << 20, json, NULL);
  refused(dt_json(path, dt_capacity(4), ""), "in use by another process");
  kva_runtime_shutdown(first);
  kva_runtime *again = l2_start_disk(2, 16u << 20, dt_json(path, dt_capacity(4), ""), NULL);
  kva_runtime_shutdown(again);
}
END_TEST

START_TEST(a_missing_directory_is_refused) {
  char dir[512], path[600];
  dt_path(dir, sizeof(dir), "no_such_dir");
  snprintf(path, sizeof(path), "%s/tier.kvd", dir);
  refused(dt_json(path, dt_capacity(4), ""), "the directory does not exist");
}
END_TEST

/* As root the kernel grants everything, so a child drops to nobody. */
START_TEST(no_permission_is_refused) {
  char dir[512], path[600];
  dt_path(dir, sizeof(dir), "locked");
  rmdir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  snprintf(path, sizeof(path), "%s/tier.kvd", dir);
  if (geteuid() != 0) {
    ck_assert_int_eq(chmod(dir, 0500), 0);
    refused(dt_json(path, dt_capacity(4), ""), "permission denied");
    return;
  }
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    refused(dt_json(path, dt_capacity(4), ""), "permission denied");
    _exit(0);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}
END_TEST

START_TEST(a_file_smaller_than_one_slot_is_refused) {
  char path[512];
  dt_path(path, sizeof(path), "small.kvd");
  write_file(path, "hello", 5, 0);
  refused(dt_json(path, dt_capacity(4), ""), "smaller than one slot");
}
END_TEST

START_TEST(a_file_of_another_format_is_refused) {
  char path[512];
  dt_path(path, sizeof(path), "zip.kvd");
  write_file(path, "PK\3\4 not a tier", 16, 1 << 20);
  refused(dt_json(path, dt_capacity(4), ""), "not a kvact disk tier");
}
END_TEST

START_TEST(a_file_of_another_version_is_refused) {
  char path[512];
  dt_path(path, sizeof(path), "v2.kvd");
  disk_super s;
  ck_assert_int_eq(disk_super_init(&s, 1 << 20, DT_SLOT), KVA_OK);
  s.version = 2;
  disk_super_seal(&s);
  write_file(path, &s, sizeof(s), 1 << 20);
  refused(dt_json(path, dt_capacity(4), ""), "format version 2");
}
END_TEST

START_TEST(a_capacity_without_room_for_a_slot_is_refused) {
  char path[512];
  dt_path(path, sizeof(path), "tiny.kvd");
  refused(dt_json(path, 3 * DISK_BLOCK, ""), "capacity_bytes");
}
END_TEST

START_TEST(slot_bytes_off_the_block_size_are_refused) {
  char path[512], json[1024];
  dt_path(path, sizeof(path), "odd.kvd");
  snprintf(json, sizeof(json), "\"path\":\"%s\",\"slot_bytes\":5000", path);
  refused(json, "slot_bytes: expected 0 or a multiple of 4096");
}
END_TEST

START_TEST(a_directory_is_refused) {
  char dir[512];
  dt_path(dir, sizeof(dir), "a_dir");
  rmdir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  refused(dt_json(dir, dt_capacity(4), ""), "is a directory");
}
END_TEST

START_TEST(a_failed_start_leaves_no_temporary_file) {
  char dir[512];
  dt_path(dir, sizeof(dir), "tmp_failed");
  rmdir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  ck_assert_int_eq(setenv("TMPDIR", dir, 1), 0);
  refused("\"capacity_bytes\":4096", "capacity_bytes");
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  for (struct dirent *e; (e = readdir(d));)
    ck_assert_msg(e->d_name[0] == '.', "left behind: %s", e->d_name);
  closedir(d);
}
END_TEST

/* ---- O_DIRECT ------------------------------------------------------------- */

/* A filesystem that refuses O_DIRECT at open, as tmpfs did before 6.6. */
static int refuse_direct(const char *path, int flags, mode_t mode) {
  if (flags & O_DIRECT) {
    errno = EINVAL;
    return -1;
  }
  return open(path, flags, mode);
}

/* Starts, warns as many times as expected, and serves exact bytes. */
static void serves_with_warnings(const char *json, size_t warnings) {
  l2_log_start(KVA_LOG_WARN);
  kva_runtime *rt = l2_start_disk(1, DT_L1, json, NULL);
  ck_assert_msg(l2_log_count("O_DIRECT") == warnings, "log:\n%s", l2_log_text());
  l2_log_stop();
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {1, 2, 3};
  uint8_t bits[1];
  ck_assert_int_eq(dt_store(s, ids, 3, 8, false), KVA_OK);
  ck_assert_int_eq(dt_load(s, ids, 3, 8, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x7);
  l2_finish(rt);
}

START_TEST(refused_o_direct_falls_back_to_buffered_io_with_one_warning) {
  char path[512];
  dt_path(path, sizeof(path), "no_direct.kvd");
  disk_open_fn = refuse_direct;
  serves_with_warnings(dt_json(path, dt_capacity(8), ""), 1);
  serves_with_warnings(dt_json(path, dt_capacity(8), "\"o_direct\":false"), 0);
}
END_TEST

/* tmpfs takes O_DIRECT since Linux 6.6; either way the tier works and
 * warns at most once. */
START_TEST(a_tier_on_tmpfs_works) {
  char path[512];
  snprintf(path, sizeof(path), "/dev/shm/kvact-disk-test-%d.kvd", (int)getpid());
  unlink(path);
  l2_log_start(KVA_LOG_WARN);
  kva_runtime *rt = l2_start_disk(1, DT_L1, dt_json(path, dt_capacity(8), ""), NULL);
  ck_assert_uint_le(l2_log_count("O_DIRECT"), 1);
  l2_log_stop();
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {4, 5};
  uint8_t bits[1];
  ck_assert_int_eq(dt_store(s, ids, 2, 1, true), KVA_OK);
  ck_assert_int_eq(dt_load(s, ids, 2, 1, false, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x3);
  l2_finish(rt);
  unlink(path);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_disk_errors");
  TCase *tc = tcase_create("errors");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_tier_in_use_is_refused);
  tcase_add_test(tc, a_missing_directory_is_refused);
  tcase_add_test(tc, no_permission_is_refused);
  tcase_add_test(tc, a_file_smaller_than_one_slot_is_refused);
  tcase_add_test(tc, a_file_of_another_format_is_refused);
  tcase_add_test(tc, a_file_of_another_version_is_refused);
  tcase_add_test(tc, a_capacity_without_room_for_a_slot_is_refused);
  tcase_add_test(tc, slot_bytes_off_the_block_size_are_refused);
  tcase_add_test(tc, a_directory_is_refused);
  tcase_add_test(tc, a_failed_start_leaves_no_temporary_file);
  tcase_add_test(tc, refused_o_direct_falls_back_to_buffered_io_with_one_warning);
  tcase_add_test(tc, a_tier_on_tmpfs_works);
  suite_add_tcase(su, tc);
  return su;
}
