/*
 * kvinspect_test.c — tools/kvinspect against this process's own runtime:
 * the JSON names the actors with their counts, the table has its header,
 * `kvinspect trace` writes Chrome trace JSON with slices and flows for each
 * actor and leaves tracing off, a dead process's segment is shown with its
 * last counters and marked stale, a kvactd session's row shows its client's
 * pid and the locks it holds, and each error (no process, no segment, bad
 * segment, usage) exits with its status and reason.
 * Usage: kvinspect_test KVINSPECT
 */
#include <check.h>
#include <ck_pr.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/stats.h"
#include "kvact.h"
#include "tests/support/cli.h"
#include "tests/support/fixture.h"

enum { T_DATA = KVA_MSG_USER, T_PING, T_TICK };
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
static int pingpong_pause;  /* atomic: microseconds each side waits before bouncing */

static void sink_receive(kva_actor *self, void *state, const kva_msg *m) {
  ck_pr_inc_64(&sink_count); /* relaxed: the test only polls it */
}

/* Bounces the ball back to its sender until the test stops it. */
static void pingpong_receive(kva_actor *self, void *state, const kva_msg *m) {
  int pause = ck_pr_load_int(&pingpong_pause);
  if (pause) usleep((useconds_t)pause);
  if (!ck_pr_load_int(&pingpong_stop)) kva_send(m->from, T_PING, NULL, 0, self, 0);
}

/* Every timer tick: one message to the sink (state), sent as itself. */
static void ticker_receive(kva_actor *self, void *state, const kva_msg *m) {
  if (m->type == KVA_MSG_TIMER) kva_send(state, T_TICK, NULL, 0, self, 0);
}

static const kva_behavior sink_behavior = {"inspect_sink", sink_receive, NULL};
static const kva_behavior ticker_behavior = {"inspect_ticker", ticker_receive, NULL};
static const kva_behavior ping_behavior = {"inspect_ping", pingpong_receive, NULL};
static const kva_behavior pong_behavior = {"inspect_pong", pingpong_receive, NULL};

static kva_actor *sink;

/* Starts the three actors: the sink has received exactly SINK_MESSAGES
 * when this returns, and ping and pong keep bouncing one message. */
static kva_runtime *start_flowing(void) {
  ck_pr_store_64(&sink_count, 0);
  ck_pr_store_int(&pingpong_stop, 0);
  kva_runtime *rt = fixture_runtime(2, NULL);
  sink = kva_spawn(rt, &sink_behavior, NULL, NULL);
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
  ck_pr_store_int(&pingpong_pause, 0);
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
  json_t *seg0 = json_array_get(json_object_get(root, "segments"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(seg0, "tracing")), "off");
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
  assert_out_has("tracing off");
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

/* ---- kvinspect trace ---------------------------------------------------- */

/* This process's runtime's stats header, mapped read-only. */
static const stats_header *own_header(kva_runtime *rt, size_t *bytes) {
  int fd = shm_open(kva_runtime_stats_name(rt), O_RDONLY, 0);
  ck_assert_int_ge(fd, 0);
  *bytes = sizeof(stats_header);
  const stats_header *h = mmap(NULL, *bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ck_assert(h != MAP_FAILED);
  return h;
}

static uint32_t trace_on(kva_runtime *rt) {
  size_t bytes;
  const stats_header *h = own_header(rt, &bytes);
  uint32_t on = ck_pr_load_32((uint32_t *)&h->trace_on);
  munmap((void *)h, bytes);
  return on;
}

/* The trace JSON's tid for the actor called name (its thread_name), -1. */
static json_int_t track_of(json_t *events, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    json_t *args = json_object_get(e, "args");
    if (strcmp(ph, "M") == 0 &&
        strcmp(json_string_value(json_object_get(e, "name")), "thread_name") == 0 &&
        strcmp(json_string_value(json_object_get(args, "name")), name) == 0)
      return json_integer_value(json_object_get(e, "tid"));
  }
  return -1;
}

/* Events of phase ph (and category cat unless NULL) on track tid. */
static int count_on(json_t *events, const char *ph, const char *cat, json_int_t tid) {
  size_t i;
  json_t *e;
  int n = 0;
  json_array_foreach(events, i, e) {
    json_t *c = json_object_get(e, "cat");
    n += strcmp(json_string_value(json_object_get(e, "ph")), ph) == 0 &&
         json_integer_value(json_object_get(e, "tid")) == tid &&
         (!cat || (c && strcmp(json_string_value(c), cat) == 0));
  }
  return n;
}

/* Flows whose start is on track `from` and whose end is on track `to`;
 * checks that every flow has exactly one start and one end, in order. */
static int flows_between(json_t *events, json_int_t from, json_int_t to) {
  json_t *starts = json_object(), *e;
  size_t i;
  int n = 0, ends = 0;
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    if (strcmp(ph, "s") != 0) continue;
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(e, "id")));
    ck_assert_ptr_null(json_object_get(starts, id));
    json_object_set(starts, id, e);
  }
  json_array_foreach(events, i, e) {
    if (strcmp(json_string_value(json_object_get(e, "ph")), "f") != 0) continue;
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(e, "id")));
    json_t *s = json_object_get(starts, id);
    ck_assert_msg(s, "flow end %s without a start", id);
    ck_assert(json_number_value(json_object_get(s, "ts")) <=
              json_number_value(json_object_get(e, "ts")));
    json_object_del(starts, id);
    ends++;
    n += json_integer_value(json_object_get(s, "tid")) == from &&
         json_integer_value(json_object_get(e, "tid")) == to;
  }
  ck_assert_int_eq(json_object_size(starts), 0); /* every start has its end */
  json_decref(starts);
  return n;
}

static json_t *load_trace(const char *path, json_t **root) {
  json_error_t jerr;
  *root = json_load_file(path, 0, &jerr);
  ck_assert_msg(*root, "bad trace JSON (%s line %d)", jerr.text, jerr.line);
  json_t *events = json_object_get(*root, "traceEvents");
  ck_assert(json_is_array(events));
  return events;
}

START_TEST(trace_has_a_track_slices_and_flows_for_each_actor) {
  kva_runtime *rt = start_flowing();
  /* a paced ball: a free-running one makes millions of events a second,
   * more than a recorder starved of CPU (sanitizers, a loaded CI machine)
   * can drain without losing some; what losses do is kvinspect's business,
   * this test checks the trace's shape */
  ck_pr_store_int(&pingpong_pause, 50);
  kva_actor *ticker = kva_spawn(rt, &ticker_behavior, sink, NULL);
  ck_assert_int_ge(kva_timer(ticker, 1000000, 1000000, 0), 0);
  ck_assert_uint_eq(trace_on(rt), 0);
  char trace_path[300], args[400];
  snprintf(trace_path, sizeof trace_path, "%s.trace.json", out_path);
  snprintf(args, sizeof args, "trace %d --seconds 0.5 --max-events 40000 -o %s", (int)getpid(),
           trace_path);
  ck_assert_int_eq(inspect(args), 0);
  assert_out_has("receives by");
  ck_assert_uint_eq(trace_on(rt), 0); /* the recorder turned it off again */
  json_t *root, *events = load_trace(trace_path, &root);
  json_int_t ping = track_of(events, "inspect_ping"), pong = track_of(events, "inspect_pong");
  json_int_t tick = track_of(events, "inspect_ticker"), snk = track_of(events, "inspect_sink");
  ck_assert_msg(ping >= 0 && pong >= 0 && tick >= 0 && snk >= 0, "tracks missing");
  json_int_t tracks[] = {ping, pong, tick, snk};
  for (int i = 0; i < 4; i++) ck_assert_int_gt(count_on(events, "X", "receive", tracks[i]), 0);
  ck_assert_int_gt(flows_between(events, ping, pong), 0);
  ck_assert_int_gt(flows_between(events, pong, ping), 0);
  ck_assert_int_gt(flows_between(events, tick, snk), 0);
  json_t *other = json_object_get(root, "otherData");
  ck_assert_int_eq(json_integer_value(json_object_get(other, "pid")), getpid());
  ck_assert_int_gt(json_integer_value(json_object_get(other, "flows")), 0);
  json_decref(root);
  unlink(trace_path);
  stop_flowing(rt);
}
END_TEST

START_TEST(a_killed_recorder_stops_tracing_within_its_lease) {
  kva_runtime *rt = start_flowing();
  char args[300];
  snprintf(args, sizeof args, "trace %d --seconds 60 --max-events 1000 -o /dev/null & echo $!",
           (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  pid_t recorder = (pid_t)atoi(cli_slurp(out_path));
  ck_assert_int_gt(recorder, 0);
  uint64_t t0 = fixture_now_ns();
  while (trace_on(rt) == 0) {
    ck_assert_msg(fixture_now_ns() - t0 < 10000000000ull, "the recorder never turned tracing on");
    usleep(1000);
  }
  kill(recorder, SIGKILL);
  /* the ball keeps bouncing: the first event past the lease turns it off */
  t0 = fixture_now_ns();
  while (trace_on(rt) != 0) {
    ck_assert_msg(fixture_now_ns() - t0 < 10000000000ull, "tracing still on 10 s after the kill");
    usleep(10000);
  }
  ck_assert_uint_ge(fixture_now_ns() - t0, 500000000ull); /* not before the lease ran out */
  stop_flowing(rt);
}
END_TEST

/* A child whose runtime bounces a ball until a recorder has been tracing
 * it for 300 ms (or 20 s went by), then exits. */
static pid_t short_lived_child(void) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    kva_runtime *rt = start_flowing();
    for (int i = 0; i < 20000 && trace_on(rt) == 0; i++) usleep(1000);
    usleep(300000);
    stop_flowing(rt);
    _exit(0);
  }
  return pid;
}

START_TEST(a_trace_stops_when_the_process_exits) {
  pid_t child = short_lived_child();
  char trace_path[300], args[400];
  snprintf(trace_path, sizeof trace_path, "%s.exit.json", out_path);
  char pattern[64];
  snprintf(pattern, sizeof pattern, "/dev/shm/kvact.%d.*", (int)child);
  glob_t g = {0};
  for (int i = 0; i < 2000 && glob(pattern, 0, NULL, &g) != 0; i++) usleep(10000);
  ck_assert_uint_ge(g.gl_pathc, 1); /* its segment exists */
  globfree(&g);
  snprintf(args, sizeof args, "trace %d --seconds 60 --max-events 10000 -o %s", (int)child,
           trace_path);
  uint64_t t0 = fixture_now_ns();
  int rc = inspect(args);
  waitpid(child, NULL, 0);
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_lt(fixture_now_ns() - t0, 30000000000ull); /* not the 60 s asked for */
  assert_err_has("exited");
  json_t *root, *events = load_trace(trace_path, &root);
  ck_assert_int_ge(track_of(events, "inspect_ping"), 0);
  json_decref(root);
  unlink(trace_path);
}
END_TEST

START_TEST(runtime_trace_true_keeps_history_for_seconds_0) {
  kva_runtime *rt = fixture_runtime(2, "runtime.trace=true", NULL);
  ck_pr_store_64(&sink_count, 0);
  kva_actor *s = kva_spawn(rt, &sink_behavior, NULL, NULL);
  kva_port *p = kva_port_open(rt, "inspect_engine");
  ck_assert(s && p);
  for (int i = 0; i < 100; i++)
    ck_assert_int_eq(kva_send(s, T_DATA, NULL, 0, kva_port_actor(p), 0), KVA_OK);
  while (ck_pr_load_64(&sink_count) < 100) usleep(1000);
  ck_assert_uint_eq(trace_on(rt), TRACE_ON_CONFIG);
  char trace_path[300], args[400];
  snprintf(args, sizeof args, "%d --once --interval 50", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  assert_out_has("tracing on (runtime.trace)");
  snprintf(trace_path, sizeof trace_path, "%s.history.json", out_path);
  snprintf(args, sizeof args, "trace %d --seconds 0 -o %s", (int)getpid(), trace_path);
  ck_assert_int_eq(inspect(args), 0);
  ck_assert_uint_eq(trace_on(rt), TRACE_ON_CONFIG); /* still on: the config's */
  json_t *root, *events = load_trace(trace_path, &root);
  json_int_t engine = track_of(events, "inspect_engine"), snk = track_of(events, "inspect_sink");
  ck_assert_int_eq(count_on(events, "X", "receive", snk), 100);
  /* the port's sends have slices of their own for the arrows to start from */
  ck_assert_int_eq(count_on(events, "X", "send", engine), 100);
  ck_assert_int_eq(flows_between(events, engine, snk), 100);
  json_decref(root);
  unlink(trace_path);
  kva_port_close(p);
  kva_runtime_shutdown(rt);
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
  char args[64];
  snprintf(args, sizeof args, "%d --once", (int)pid);
  ck_assert_int_eq(inspect(args), 1);
  assert_err_has("no such process");
  snprintf(args, sizeof args, "trace %d", (int)pid);
  ck_assert_int_eq(inspect(args), 1);
  assert_err_has("no such process");
}
END_TEST

START_TEST(a_process_without_a_segment_exits_1) {
  pid_t pid = sleeping_child();
  char args[64];
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
  char want[64];
  snprintf(want, sizeof want, "layout version %u", KVA_STATS_VERSION + 1);
  ck_assert_int_eq(wrong_version, 1);
  ck_assert_msg(strstr(err_version, want), "stderr: %s", err_version);
  ck_assert_int_eq(bad_magic, 1);
  ck_assert_msg(strstr(err_magic, "bad magic"), "stderr: %s", err_magic);
  ck_assert_int_eq(too_small, 1);
  assert_err_has("too small");
  free(err_version);
  free(err_magic);
}
END_TEST

/* A child whose runtime has received SINK_MESSAGES, killed before its
 * shutdown and left a zombie: no runtime start removes its segment while
 * it is one (crash_leftovers_test), so kvinspect reads it undisturbed. */
static pid_t killed_child(void) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(p[0]);
    start_flowing();
    ck_pr_store_int(&pingpong_stop, 1);
    if (write(p[1], "r", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(p[1]);
  char c;
  ck_assert_int_eq(read(p[0], &c, 1), 1);
  close(p[0]);
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitid(P_PID, (id_t)pid, &(siginfo_t){0}, WEXITED | WNOWAIT), 0);
  return pid;
}

START_TEST(a_dead_process_segment_is_shown_as_stale) {
  pid_t pid = killed_child();
  char args[128];
  snprintf(args, sizeof args, "%d --once --json --interval 50", (int)pid);
  int json_rc = inspect(args);
  json_error_t jerr;
  json_t *root = json_load_file(out_path, 0, &jerr);
  snprintf(args, sizeof args, "%d --once --interval 50", (int)pid);
  int table_rc = inspect(args);
  char *table = strdup(cli_slurp(out_path));
  waitpid(pid, NULL, 0);
  ck_assert_int_eq(json_rc, 0);
  ck_assert_msg(root, "bad JSON (%s)", jerr.text);
  json_t *seg0 = json_array_get(json_object_get(root, "segments"), 0);
  ck_assert_ptr_nonnull(seg0);
  ck_assert(json_is_true(json_object_get(seg0, "stale")));
  ck_assert_str_eq(json_string_value(json_object_get(seg0, "owner")), "exited");
  json_t *sink = find_actor(root, "inspect_sink");
  ck_assert_ptr_nonnull(sink);
  ck_assert_int_eq(field(sink, "dequeued"), SINK_MESSAGES); /* its last counters */
  ck_assert_str_eq(json_string_value(json_object_get(sink, "state")), "stale");
  json_decref(root);
  ck_assert_int_eq(table_rc, 0);
  ck_assert_msg(strstr(table, "stale (its process exited"), "table:\n%s", table);
  ck_assert_msg(strstr(table, "inspect_sink"), "table:\n%s", table);
  free(table);
}
END_TEST

/* The owner a live runtime's header names is this process, live. */
START_TEST(a_live_segment_is_not_stale) {
  kva_runtime *rt = start_flowing();
  char args[128];
  snprintf(args, sizeof args, "%d --once --json --interval 50", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  json_error_t jerr;
  json_t *root = json_load_file(out_path, 0, &jerr);
  ck_assert_msg(root, "bad JSON (%s)", jerr.text);
  json_t *seg0 = json_array_get(json_object_get(root, "segments"), 0);
  ck_assert(json_is_false(json_object_get(seg0, "stale")));
  ck_assert_str_eq(json_string_value(json_object_get(seg0, "owner")), "live");
  ck_assert_str_eq(json_string_value(json_object_get(find_actor(root, "inspect_sink"), "state")),
                   "live");
  json_decref(root);
  stop_flowing(rt);
}
END_TEST

START_TEST(usage_errors_exit_2) {
  ck_assert_int_eq(inspect("trace"), 2);
  assert_err_has("no PID given");
  ck_assert_int_eq(inspect("trace 1 --seconds -1"), 2);
  ck_assert_int_eq(inspect("trace 1 --seconds x"), 2);
  ck_assert_int_eq(inspect("trace 1 --max-events 0"), 2);
  ck_assert_int_eq(inspect("trace 1 -o"), 2);
  ck_assert_int_eq(inspect("trace 1 --color"), 2);
  ck_assert_int_eq(inspect(""), 2);
  ck_assert_int_eq(inspect("abc"), 2);
  ck_assert_int_eq(inspect("1 --sort size"), 2);
  ck_assert_int_eq(inspect("1 --interval 0"), 2);
  ck_assert_int_eq(inspect("1 --json"), 2); /* --json needs --once */
  ck_assert_int_eq(inspect("--help"), 0);
  assert_out_has("upper bound");
}
END_TEST

/* ---- a daemon's sessions ------------------------------------------------ */

#define HELD_WRITES 1
#define HELD_READS 2
#define HELD_PINS 3

static char sock_path[108];

/* The client's body: locks taken (HELD_WRITES write reservations,
 * HELD_READS read locks, HELD_PINS pins), a byte to ready_fd, then
 * lookups that take none, every 2 ms until it is killed. A nonzero return
 * says which step failed. */
static int holder(kva_storage *s, int ready_fd) {
  kva_storage_stats st;
  int up = 0;
  for (int i = 0; i < 1000 && !(up = kva_storage_get_stats(s, &st) == KVA_OK); i++) usleep(10000);
  if (!up) return 2; /* it connects as soon as the daemon listens */
  enum { STORED = HELD_READS + HELD_PINS };
  kva_layout l = fixture_layout_bytes(4096);
  kva_key k[STORED + HELD_WRITES];
  kva_buf b[STORED + HELD_WRITES];
  int status[STORED + HELD_WRITES];
  for (int i = 0; i < STORED + HELD_WRITES; i++) k[i] = fixture_key((uint64_t)i + 1);
  if (kva_reserve_write(s, k, STORED + HELD_WRITES, &l, KVA_WRITE_NEW, b, status) !=
      STORED + HELD_WRITES)
    return 3;
  if (kva_finish_write(s, k, STORED, status) != STORED) return 4; /* the last stays reserved */
  kva_prefetch *h;
  size_t hits = 0;
  if (kva_submit_prefetch(s, k, HELD_READS, &l, 0, &h) != KVA_OK ||
      kva_wait_prefetch(s, h, 5000, &hits) != KVA_OK || hits != HELD_READS)
    return 5;
  if (kva_read_prefetched(s, k, HELD_READS, b) != KVA_OK) return 6;
  kva_tier_hits th;
  if (kva_lookup(s, k + HELD_READS, HELD_PINS, 1, &th) != KVA_OK) return 7;
  if (write(ready_fd, "r", 1) != 1) return 8;
  for (;;) {
    if (kva_lookup(s, k, 1, 0, &th) != KVA_OK) return 9;
    usleep(2000);
  }
}

/* A child that waits for kvactd on sock_path and runs holder() there. */
static pid_t holder_child(int *ready_fd) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(p[0]);
    kva_config *c = kva_config_default();
    kva_runtime *rt = NULL;
    if (kva_config_set(c, "client.socket", sock_path) != KVA_OK ||
        kva_config_set(c, "runtime.workers", "2") != KVA_OK || kva_runtime_start(c, &rt) != KVA_OK)
      _exit(1);
    _exit(holder(kva_storage_of(rt), p[1]));
  }
  close(p[1]);
  *ready_fd = p[0];
  return pid;
}

/* kvinspect --once --json of this process: the session actor whose label
 * starts with want, or NULL (*root to be freed). */
static json_t *find_session(json_t **root, const char *want) {
  char args[128];
  snprintf(args, sizeof args, "%d --once --json --interval 100", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  json_error_t jerr;
  ck_assert_msg((*root = json_load_file(out_path, 0, &jerr)), "bad JSON (%s)", jerr.text);
  size_t i, j;
  json_t *seg, *actor;
  json_array_foreach(json_object_get(*root, "segments"), i, seg) {
    json_array_foreach(json_object_get(seg, "actors"), j, actor) {
      const char *label = json_string_value(json_object_get(actor, "label"));
      if (label && strncmp(label, want, strlen(want)) == 0) return actor;
    }
  }
  return NULL;
}

static json_int_t gauge(json_t *actor, const char *name) {
  json_t *v = json_object_get(json_object_get(actor, "gauges"), name);
  ck_assert_msg(json_is_integer(v), "gauge %s missing", name);
  return json_integer_value(v);
}

START_TEST(a_session_row_shows_its_client_and_the_locks_it_holds) {
  snprintf(sock_path, sizeof sock_path, "/tmp/kvinspect_test.%d.sock", (int)getpid());
  int ready_fd;
  pid_t child = holder_child(&ready_fd); /* forked before this process has threads */
  char sock_kv[160];
  snprintf(sock_kv, sizeof sock_kv, "server.socket=%s", sock_path);
  kva_runtime *rt = fixture_storage(2, 16 << 20, sock_kv, NULL);
  char c;
  ssize_t got = read(ready_fd, &c, 1);
  close(ready_fd);
  int st = 0;
  if (got != 1) waitpid(child, &st, 0);
  ck_assert_msg(got == 1, "the client failed (exit status %d)", WEXITSTATUS(st));
  char want[64];
  snprintf(want, sizeof want, "pid %d uid %u", (int)child, (unsigned)getuid());
  json_t *root, *ss = find_session(&root, want);
  ck_assert_msg(ss, "no session labelled \"%s\": %s", want, cli_slurp(out_path));
  ck_assert_str_eq(json_string_value(json_object_get(ss, "name")), "kvactd_session");
  ck_assert_int_eq(gauge(ss, "write_locks"), HELD_WRITES);
  ck_assert_int_eq(gauge(ss, "read_locks"), HELD_READS);
  ck_assert_int_eq(gauge(ss, "pins"), HELD_PINS);
  ck_assert_int_ge(gauge(ss, "requests"), 5); /* stats, reserve, finish, prefetch..., lookup */
  double per_s = json_real_value(json_object_get(json_object_get(ss, "gauges"), "requests_per_s"));
  ck_assert_msg(per_s > 0 && per_s <= 1000, "requests_per_s %f", per_s); /* one per 2 ms or less */
  json_decref(root);
  char args[128], line[160];
  snprintf(args, sizeof args, "%d --once --interval 50", (int)getpid());
  ck_assert_int_eq(inspect(args), 0);
  snprintf(line, sizeof line, "  %s: requests ", want);
  assert_out_has(line);
  snprintf(line, sizeof line, "/s), write_locks %d, read_locks %d, pins %d\n", HELD_WRITES,
           HELD_READS, HELD_PINS);
  assert_out_has(line);
  reap(child);
  /* the closed session gave everything back, then its actor and its row
   * went (a daemon that served 20 000 clients shows the live ones) */
  uint64_t t0 = fixture_now_ns();
  while ((ss = find_session(&root, want))) {
    json_decref(root);
    ck_assert_msg(fixture_now_ns() - t0 < 10000000000ull, "the session's row never went");
  }
  json_decref(root);
  fixture_memcheck_clean(kva_storage_of(rt));
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  if (!(kvinspect = fixture_arg(1))) {
    fprintf(stderr, "usage: kvinspect_test KVINSPECT\n");
    exit(2);
  }
  Suite *s = suite_create("kvinspect");
  TCase *tc = tcase_create("kvinspect");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, once_json_finds_actors_by_name_with_their_counts);
  tcase_add_test(tc, once_table_has_the_header_and_the_actors);
  tcase_add_test(tc, a_pid_that_does_not_exist_exits_1);
  tcase_add_test(tc, a_process_without_a_segment_exits_1);
  tcase_add_test(tc, bad_segments_exit_1_with_the_reason);
  tcase_add_test(tc, a_dead_process_segment_is_shown_as_stale);
  tcase_add_test(tc, a_live_segment_is_not_stale);
  tcase_add_test(tc, a_session_row_shows_its_client_and_the_locks_it_holds);
  tcase_add_test(tc, trace_has_a_track_slices_and_flows_for_each_actor);
  tcase_add_test(tc, a_killed_recorder_stops_tracing_within_its_lease);
  tcase_add_test(tc, runtime_trace_true_keeps_history_for_seconds_0);
  tcase_add_test(tc, a_trace_stops_when_the_process_exits);
  tcase_add_test(tc, usage_errors_exit_2);
  suite_add_tcase(s, tc);
  return s;
}
