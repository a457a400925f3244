/*
 * crash_leftovers_test.c — a process killed with SIGKILL leaves nothing
 * that outlives it for good: its temporary disk tier has no name to leave
 * (in $TMPDIR or anywhere), and its stats segment /dev/shm/kvact.<pid>.<n>
 * is removed by the next runtime start, on any pid. Segments whose owner
 * still runs (or may: a zombie, another pid namespace, a layout we cannot
 * read) are kept.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/stats.h"
#include "kvact.h"
#include "l2/adapters/disk/disk.h"
#include "tests/l2/l2_disk_test.h"
#include "tests/support/disk_open_hook.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* ---- helpers ------------------------------------------------------------ */

/* A fresh empty directory $TEST_TMPDIR/name. */
static void fresh_dir(char *dir, size_t cap, const char *name) {
  dt_path(dir, cap, name);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
}

/* The first entry of dir other than . and .., or NULL (static buffer). */
static const char *dir_entry(const char *dir) {
  static char name[256];
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  const char *found = NULL;
  for (struct dirent *e; !found && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(name, sizeof name, "%s", e->d_name);
    found = name;
  }
  closedir(d);
  return found;
}

/* How many /dev/shm/kvact.<pid>.* exist. */
static size_t segments_of(pid_t pid) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "/dev/shm/kvact.%d.*", (int)pid);
  glob_t g = {0};
  size_t n = glob(pattern, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
  globfree(&g);
  return n;
}

/* A child that starts a runtime from the embedded default config (its
 * temporary disk tier made smaller) with TMPDIR = tmpdir (NULL: no L1 and
 * no tier), says so on a pipe and waits to be killed. No Check calls in the
 * child: it reports by exiting. */
static pid_t runtime_child(const char *tmpdir) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(p[0]);
    kva_config *c = kva_config_default();
    int rc = c ? KVA_OK : KVA_ENOMEM;
    if (tmpdir && setenv("TMPDIR", tmpdir, 1) != 0) _exit(2);
    const char *sets[][2] = {{"runtime.workers", "1"},
                             {"l1.size_bytes", "16777216"},
                             {"l1.hugepages", "false"},
                             {"l1.pinned", "false"},
                             {"l2[0].capacity_bytes", "8388608"}};
    for (size_t i = 0; rc == KVA_OK && i < sizeof sets / sizeof sets[0]; i++)
      rc = kva_config_set(c, sets[i][0], sets[i][1]);
    if (rc == KVA_OK && !tmpdir) rc = kva_config_set(c, "l1.size_bytes", "0");
    if (rc == KVA_OK && !tmpdir) rc = kva_config_set(c, "l2", "[]");
    kva_runtime *rt = NULL;
    if (rc == KVA_OK) rc = kva_runtime_start(c, &rt);
    if (rc != KVA_OK || write(p[1], "r", 1) != 1) _exit(3);
    for (;;) pause();
  }
  close(p[1]);
  char c = 0;
  ssize_t n = read(p[0], &c, 1);
  close(p[0]);
  if (n != 1) {
    int st = 0;
    waitpid(pid, &st, 0);
    ck_abort_msg("the child did not start its runtime (exit status %d)", WEXITSTATUS(st));
  }
  return pid;
}

/* ---- the temporary disk tier -------------------------------------------- */

START_TEST(a_killed_process_leaves_no_temporary_tier_file) {
  char dir[512];
  fresh_dir(dir, sizeof dir, "tmp_killed");
  pid_t child = runtime_child(dir);
  const char *running = dir_entry(dir);
  char seen[256];
  snprintf(seen, sizeof seen, "%s", running ? running : "");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  const char *left = dir_entry(dir);
  ck_assert_msg(!running, "a running tier's file has a name: %s/%s", dir, seen);
  ck_assert_msg(!left, "left behind by a killed process: %s/%s", dir, left);
}
END_TEST

/* A temporary tier serves from its unnamed file and leaves nothing at a
 * clean shutdown either. */
START_TEST(a_temporary_tier_serves_from_an_unnamed_file) {
  char dir[512];
  fresh_dir(dir, sizeof dir, "tmp_unnamed");
  ck_assert_int_eq(setenv("TMPDIR", dir, 1), 0);
  kva_runtime *rt = l2_start_disk(1, DT_L1, dt_json("", dt_capacity(8), ""), NULL);
  ck_assert_ptr_null(dir_entry(dir));
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {1, 2, 3};
  uint8_t bits[1];
  ck_assert_int_eq(dt_store(s, ids, 3, 5, true), KVA_OK);
  ck_assert_int_eq(dt_load(s, ids, 3, 5, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x7);
  l2_finish(rt);
  ck_assert_ptr_null(dir_entry(dir));
}
END_TEST

/* Filesystems without O_TMPFILE (EOPNOTSUPP), or refusing O_DIRECT. */
static int refuse_tmpfile(const char *path, int flags, mode_t mode) {
  if ((flags & O_TMPFILE) == O_TMPFILE) {
    errno = EOPNOTSUPP;
    return -1;
  }
  return open(path, flags, mode);
}

static int refuse_direct(const char *path, int flags, mode_t mode) {
  if (flags & O_DIRECT) {
    errno = EINVAL;
    return -1;
  }
  return open(path, flags, mode);
}

/* Without O_TMPFILE the tier's named file is unlinked once open; a
 * filesystem refusing O_DIRECT gets buffered I/O and one warning. Either
 * way nothing is named while the tier serves. */
START_TEST(a_temporary_tier_is_unnamed_on_any_filesystem) {
  int (*hooks[])(const char *, int, mode_t) = {refuse_tmpfile, refuse_direct};
  const size_t warnings[] = {0, 1};
  for (int i = 0; i < 2; i++) {
    char dir[512];
    fresh_dir(dir, sizeof dir, "tmp_hooked");
    ck_assert_int_eq(setenv("TMPDIR", dir, 1), 0);
    disk_open_fn = hooks[i];
    l2_log_start(KVA_LOG_WARN);
    kva_runtime *rt = l2_start_disk(1, DT_L1, dt_json("", dt_capacity(8), ""), NULL);
    ck_assert_msg(l2_log_count("O_DIRECT") == warnings[i], "log:\n%s", l2_log_text());
    l2_log_stop();
    ck_assert_msg(!dir_entry(dir), "named while serving: %s", dir_entry(dir));
    kva_storage *s = kva_storage_of(rt);
    const uint64_t ids[] = {4, 5};
    uint8_t bits[1];
    ck_assert_int_eq(dt_store(s, ids, 2, 6, true), KVA_OK);
    ck_assert_int_eq(dt_load(s, ids, 2, 6, true, DT_LEN, bits), KVA_OK);
    ck_assert_uint_eq(bits[0], 0x3);
    l2_finish(rt);
    ck_assert_ptr_null(dir_entry(dir));
  }
}
END_TEST

/* ---- stats segments ----------------------------------------------------- */

/* Starts and stops a runtime: its start reclaims what is gone. */
static void start_a_runtime(void) {
  kva_runtime *rt = fixture_runtime(1, NULL);
  ck_assert_uint_eq(segments_of(getpid()), 1); /* ours, and only ours */
  kva_runtime_shutdown(rt);
  ck_assert_uint_eq(segments_of(getpid()), 0);
}

/* A zombie keeps its segment (kvinspect shows it as stale); once it is
 * reaped, the next start removes it. */
START_TEST(a_killed_process_segment_is_reclaimed_at_the_next_start) {
  pid_t child = runtime_child(NULL);
  ck_assert_uint_eq(segments_of(child), 1);
  kill(child, SIGKILL);
  ck_assert_int_eq(waitid(P_PID, (id_t)child, &(siginfo_t){0}, WEXITED | WNOWAIT), 0);
  start_a_runtime();
  ck_assert_uint_eq(segments_of(child), 1); /* a zombie: exited, not gone */
  waitpid(child, NULL, 0);                  /* reaped: the pid is free */
  start_a_runtime();
  ck_assert_uint_eq(segments_of(child), 0);
}
END_TEST

/* Writes /dev/shm/kvact.<pid>.<seq> holding header h; returns its path. */
static const char *write_segment(pid_t pid, unsigned seq, const stats_header *h) {
  static char path[64];
  snprintf(path, sizeof path, "/dev/shm/kvact.%d.%u", (int)pid, seq);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, h, sizeof *h), (ssize_t)sizeof *h);
  close(fd);
  return path;
}

/* A current-layout header as pid's runtime, started at `start`, writes. */
static stats_header header_of(pid_t pid, uint64_t start) {
  return (stats_header){.magic = KVA_STATS_MAGIC,
                        .version = KVA_STATS_VERSION,
                        .header_bytes = sizeof(stats_header),
                        .slot_bytes = sizeof(stats_slot),
                        .pid = (uint32_t)pid,
                        .owner_start = start,
                        .owner_pidns = stats_pidns_self()};
}

static pid_t sleeping_child(void) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    for (;;) pause();
  return pid;
}

static pid_t reaped_pid(void) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

static bool exists(const char *path) {
  return access(path, F_OK) == 0;
}

/* The pid is alive but is another process than the one that made the
 * segment (it started at another time): the segment is reclaimed. The one
 * that names the live process's own start time is kept. */
START_TEST(a_segment_of_a_recycled_pid_is_reclaimed) {
  pid_t child = sleeping_child();
  uint64_t start = 0;
  bool zombie = true;
  ck_assert_int_eq(stats_proc_start(child, &start, &zombie), 0);
  ck_assert(!zombie);
  ck_assert_uint_gt(start, 0);
  stats_header older = header_of(child, start - 1), own = header_of(child, start);
  char recycled[64], live[64];
  snprintf(recycled, sizeof recycled, "%s", write_segment(child, 90, &older));
  snprintf(live, sizeof live, "%s", write_segment(child, 91, &own));
  ck_assert_int_eq(stats_owner_state(&older, child), STATS_OWNER_GONE);
  ck_assert_int_eq(stats_owner_state(&own, child), STATS_OWNER_LIVE);
  start_a_runtime();
  bool recycled_left = exists(recycled), live_left = exists(live);
  unlink(live);
  unlink(recycled);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  ck_assert_msg(!recycled_left, "%s (a recycled pid) was kept", recycled);
  ck_assert_msg(live_left, "%s (a live owner) was removed", live);
}
END_TEST

/* A dead pid whose segment we cannot judge stays: another pid namespace
 * (its pids are not ours), another layout, a header with no magic yet, a
 * header naming another pid. */
START_TEST(segments_that_cannot_be_judged_are_kept) {
  pid_t dead = reaped_pid();
  stats_header h[4];
  for (int i = 0; i < 4; i++) h[i] = header_of(dead, 12345);
  h[0].owner_pidns += 1;
  h[1].version = KVA_STATS_VERSION - 1;
  h[2].magic = 0;
  h[3].pid = (uint32_t)dead + 1;
  char paths[4][64];
  for (int i = 0; i < 4; i++)
    snprintf(paths[i], sizeof paths[i], "%s", write_segment(dead, 80 + (unsigned)i, &h[i]));
  ck_assert_int_eq(stats_owner_state(&h[0], dead), STATS_OWNER_UNKNOWN);
  stats_header gone = header_of(dead, 12345);
  ck_assert_int_eq(stats_owner_state(&gone, dead), STATS_OWNER_GONE);
  start_a_runtime();
  bool left[4];
  for (int i = 0; i < 4; i++) {
    left[i] = exists(paths[i]);
    unlink(paths[i]);
  }
  for (int i = 0; i < 4; i++) ck_assert_msg(left[i], "%s (case %d) was removed", paths[i], i);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("crash_leftovers");
  TCase *tc = tcase_create("leftovers");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_killed_process_leaves_no_temporary_tier_file);
  tcase_add_test(tc, a_temporary_tier_serves_from_an_unnamed_file);
  tcase_add_test(tc, a_temporary_tier_is_unnamed_on_any_filesystem);
  tcase_add_test(tc, a_killed_process_segment_is_reclaimed_at_the_next_start);
  tcase_add_test(tc, a_segment_of_a_recycled_pid_is_reclaimed);
  tcase_add_test(tc, segments_that_cannot_be_judged_are_kept);
  suite_add_tcase(su, tc);
  return su;
}
