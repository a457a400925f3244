/*
 * kvinspect_test.c — tools/kvinspect against this process's own runtime:
 * the JSON names the actors with their counts, the table has its header,
 * and each error (no process, no segment, bad segment, trace) exits with
 * its status and reason. Usage: kvinspect_test KVINSPECT
 */
#include <check.h>
#include <ck_pr.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/stats.h"
#include "kvact.h"
#include "tests/support/cli.h"
#include "tests/support/fixture.h"

enum { T_DATA = KVA_MSG_USER, T_PING };
#define SINK_MESSAGES 1000

static const char *kvinspect;
static char out_path[256], err_path[256];

/* kvinspect ARGS with stdout and stderr to out_path and err_path. */
static int inspect(const char *args) {
  return cli_run("%s %s > %s 2> %s", kvinspect, args, out_path, err_path);
}

#define assert_out_has(s) CLI_ASSERT_HAS(out_path, s)
#define assert_err_has(s) CLI_ASSERT_HAS(err_path, s)

static void setup(void) {
  const char *dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  snprintf(out_path, sizeof out_path, "%s/kvinspect.%d.out", dir, (int)getpid());
  snprintf(err_path, sizeof err_path, "%s/kvinspect.%d.err", dir, (int)getpid());
}

/* ---- a runtime with messages flowing ----------------------------------- */

static uint64_t sink_count; /* atomic: messages the sink received */
static int pingpong_stop;   /* atomic: 1 ends the ping-pong */

static void sink_receive(kva_actor *self, void *state, const kva_msg *m) {
  ck_pr_inc_64(&sink_count); /* relaxed: the test only polls it */
}

/* Bounces the ball back to its sender until the test stops it. */
static void pingpong_receive(kva_actor *self, void *state, const kva_msg *m) {
  if (!ck_pr_load_int(&pingpong_stop)) kva_send(m->from, T_PING, NULL, 0, self, 0);
}

static const kva_behavior sink_behavior = {"inspect_sink", sink_receive, NULL};
static const kva_behavior ping_behavior = {"inspect_ping", pingpong_receive, NULL};
static const kva_behavior pong_behavior = {"inspect_pong", pingpong_receive, NULL};

/* Starts the three actors: the sink has received exactly SINK_MESSAGES
 * when this returns, and ping and pong keep bouncing one message. */
static kva_runtime *start_flowing(void) {
  ck_pr_store_64(&sink_count, 0);
  ck_pr_store_int(&pingpong_stop, 0);
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_actor *sink = kva_spawn(rt, &sink_behavior, NULL, NULL);
  kva_actor *ping = kva_spawn(rt, &ping_behavior, NULL, NULL);
  kva_actor *pong = kva_spawn(rt, &pong_behavior, NULL, NULL);
  ck_assert(sink && ping && pong);
  for (int i = 0; i < SINK_MESSAGES; i++) kva_send(sink, T_DATA, NULL, 0, NULL, 0);
  kva_send(ping, T_PING, NULL, 0, pong, 0);
  uint64_t t0 = fixture_now_ns();
  while (ck_pr_load_64(&sink_count) < SINK_MESSAGES) {
    ck_assert_msg(fixture_now_ns() - t0 < 5000000000ull, "sink stuck");
    usleep(1000);
  }
  return rt;
}

static void stop_flowing(kva_runtime *rt) {
  ck_pr_store_int(&pingpong_stop, 1);
  kva_runtime_shutdown(rt);
}

/* The actor called name in the JSON's segments, or NULL. */
static json_t *find_actor(json_t *root, const char *name) {
  size_t i, j;
  json_t *seg, *actor;
  json_array_foreach(json_object_get(root, "segments"), i, seg) {
    json_array_foreach(json_object_get(seg, "actors"), j, actor) {
      if (strcmp(json_string_value(json_object_get(actor, "name")), name) == 0) return actor;
    }
  }
  return NULL;
}

static json_int_t field(json_t *actor, const char *key) {
  json_t *v = json_object_get(actor, key);
  ck_assert_msg(json_is_integer(v), "field %s missing", key);
  return json_integer_value(v);
}

/* ---- reading a live runtime -------------------------------------------- */

START_TEST(once_json_finds_actors_by_name_with_their_counts) {
  kva_runtime *rt = start_flowing();
  char args[128];
  snprintf(args, sizeof args, "%d --once --json --interval 200", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  json_error_t jerr;
  json_t *root = json_load_file(out_path, 0, &jerr);
  ck_assert_msg(root, "bad JSON (%s): %s", jerr.text, cli_slurp(out_path));
  ck_assert_int_eq(json_integer_value(json_object_get(root, "pid")), getpid());
  ck_assert_int_ge(json_array_size(json_object_get(root, "segments")), 1);
  json_t *sink = find_actor(root, "inspect_sink");
  json_t *ping = find_actor(root, "inspect_ping"), *pong = find_actor(root, "inspect_pong");
  ck_assert_msg(sink && ping && pong, "actors missing: %s", cli_slurp(out_path));
  ck_assert_int_eq(field(sink, "dequeued"), SINK_MESSAGES);
  ck_assert_int_eq(field(sink, "enqueued"), SINK_MESSAGES);
  ck_assert_int_eq(field(sink, "depth"), 0);
  ck_assert_int_ge(field(sink, "peak_depth"), 1);
  ck_assert_int_gt(field(sink, "recv_p50_ns"), 0);
  ck_assert_int_ge(field(sink, "recv_p99_ns"), field(sink, "recv_p50_ns"));
  ck_assert(json_real_value(json_object_get(sink, "rate")) == 0.0); /* idle since before */
  /* the ball keeps bouncing: both received, and at a rate (their slots are
   * read microseconds apart, so their counts need not match exactly) */
  json_t *sides[] = {ping, pong};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_gt(field(sides[i], "dequeued"), 0);
    ck_assert_int_ge(field(sides[i], "enqueued"), field(sides[i], "dequeued"));
    ck_assert(json_real_value(json_object_get(sides[i], "rate")) > 0.0);
  }
  json_decref(root);
  stop_flowing(rt);
}
END_TEST

START_TEST(once_table_has_the_header_and_the_actors) {
  kva_runtime *rt = start_flowing();
  char args[128];
  snprintf(args, sizeof args, "%d --once --interval 100 --sort name", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  assert_out_has("ACTOR");
  assert_out_has("DEPTH");
  assert_out_has("MSG/S");
  assert_out_has("RECV_P99");
  assert_out_has("inspect_sink");
  assert_out_has("inspect_ping");
  ck_assert_ptr_null(strstr(cli_slurp(out_path), "\033[")); /* not a terminal: no clearing */
  /* --count 2: two tables follow each other */
  snprintf(args, sizeof args, "%d --count 2 --interval 50", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  const char *out = cli_slurp(out_path), *first = strstr(out, "kvinspect: pid");
  ck_assert_ptr_nonnull(first);
  ck_assert_ptr_nonnull(strstr(first + 1, "kvinspect: pid"));
  stop_flowing(rt);
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

/* A child that sleeps until killed: a live pid without a runtime. */
static pid_t sleeping_child(void) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

static void reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

START_TEST(a_pid_that_does_not_exist_exits_1) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0); /* reaped: the pid is free now */
  char args[32];
  snprintf(args, sizeof args, "%d --once", (int)pid);
  ck_assert_int_eq(inspect(args), 1);
  assert_err_has("no such process");
}
END_TEST

START_TEST(a_process_without_a_segment_exits_1) {
  pid_t pid = sleeping_child();
  char args[32];
  snprintf(args, sizeof args, "%d --once", (int)pid);
  int rc = inspect(args);
  reap(pid);
  ck_assert_int_eq(rc, 1);
  assert_err_has("no kvact stats segment");
}
END_TEST

/* Writes /dev/shm/kvact.<pid>.0 holding the bytes given. */
static void fake_segment(char *path, size_t len, pid_t pid, const void *bytes, size_t n) {
  snprintf(path, len, "/dev/shm/kvact.%d.0", (int)pid);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

/* kvinspect on a fake segment: its exit status, stderr in err_path. */
static int inspect_fake(pid_t pid, const void *bytes, size_t n) {
  char path[64], args[32];
  fake_segment(path, sizeof path, pid, bytes, n);
  snprintf(args, sizeof args, "%d --once", (int)pid);
  int rc = inspect(args);
  unlink(path);
  return rc;
}

START_TEST(bad_segments_exit_1_with_the_reason) {
  pid_t pid = sleeping_child();
  stats_header h = {.magic = KVA_STATS_MAGIC,
                    .version = KVA_STATS_VERSION + 1,
                    .header_bytes = sizeof(stats_header),
                    .slot_bytes = sizeof(stats_slot),
                    .pid = (uint32_t)pid};
  int wrong_version = inspect_fake(pid, &h, sizeof h);
  char *err_version = strdup(cli_slurp(err_path));
  h.version = KVA_STATS_VERSION;
  h.magic = 0x1234;
  int bad_magic = inspect_fake(pid, &h, sizeof h);
  char *err_magic = strdup(cli_slurp(err_path));
  int too_small = inspect_fake(pid, "kvact", 5);
  reap(pid);
  ck_assert_int_eq(wrong_version, 1);
  ck_assert_msg(strstr(err_version, "layout version 2"), "stderr: %s", err_version);
  ck_assert_int_eq(bad_magic, 1);
  ck_assert_msg(strstr(err_magic, "bad magic"), "stderr: %s", err_magic);
  ck_assert_int_eq(too_small, 1);
  assert_err_has("too small");
  free(err_version);
  free(err_magic);
}
END_TEST

START_TEST(trace_and_usage_errors_exit_2) {
  ck_assert_int_eq(inspect("trace 1 --seconds 1"), 2);
  assert_err_has("not available in this build");
  ck_assert_int_eq(inspect(""), 2);
  ck_assert_int_eq(inspect("abc"), 2);
  ck_assert_int_eq(inspect("1 --sort size"), 2);
  ck_assert_int_eq(inspect("1 --interval 0"), 2);
  ck_assert_int_eq(inspect("1 --json"), 2); /* --json needs --once */
  ck_assert_int_eq(inspect("--help"), 0);
  assert_out_has("upper bound");
}
END_TEST

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: kvinspect_test KVINSPECT\n");
    return 2;
  }
  kvinspect = argv[1];
  Suite *s = suite_create("kvinspect");
  TCase *tc = tcase_create("kvinspect");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, once_json_finds_actors_by_name_with_their_counts);
  tcase_add_test(tc, once_table_has_the_header_and_the_actors);
  tcase_add_test(tc, a_pid_that_does_not_exist_exits_1);
  tcase_add_test(tc, a_process_without_a_segment_exits_1);
  tcase_add_test(tc, bad_segments_exit_1_with_the_reason);
  tcase_add_test(tc, trace_and_usage_errors_exit_2);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
