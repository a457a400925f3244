/*
 * kvinspect.c — `kvinspect PID`: a live table of a kvact process's actors,
 * read from its shared-memory stats segments (actors/stats.h), or the last
 * counters of a dead one whose segments are still there (marked stale).
 * This file: options, the checks on the process, and the refresh loop.
 *
 * `kvinspect trace PID` (kvinspect_trace.c) records the trace ring.
 *
 * Exit status: 0 done (stale segments included), 1 the process or its
 * segments cannot be inspected, 2 usage.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/kvinspect.h"
#include "tools/tool_version.h"

static const char usage[] =
    "usage: kvinspect PID [--interval MS] [--sort name|depth|rate|p99] [--count N]\n"
    "       kvinspect PID --once [--json] [--interval MS]\n"
    "       kvinspect trace PID [--seconds N] [-o FILE] [--max-events N]\n"
    "       kvinspect --version | --help\n"
    "\n"
    "Shows the actors of kvact process PID from its stats segments\n"
    "(/dev/shm/kvact.PID.*), refreshing every interval like top (the screen is\n"
    "cleared when stdout is a terminal; otherwise tables follow each other).\n"
    "\n"
    "Columns: ACTOR name, KIND (actor, pinned, port), STATE (live, stopped, stale),\n"
    "DEPTH (messages in the mailbox now), PEAK (deepest mailbox seen at a turn\n"
    "start), MSG/S (messages received per second over the last interval),\n"
    "RECV_P50 / RECV_P99 (receive time since the actor started, from a log2\n"
    "histogram: the value shown is the upper bound of the bucket holding the\n"
    "percentile, so it is exact to within a factor of two), OVERFLOW (messages\n"
    "that went to the overflow queue), BACKPRESS (sends that waited or overflowed).\n"
    "An actor with a label of its own has a second line: the label and its gauges,\n"
    "the first (a counter) with its rate; kvactd's sessions show their client,\n"
    "\"pid P uid U: requests N (R/s), write_locks W, read_locks L, pins P\".\n"
    "\n"
    "  --interval MS  time between refreshes, and the window of MSG/S (default 1000)\n"
    "  --sort KEY     name, depth, rate or p99 (default rate; ties by name)\n"
    "  --count N      refresh N times, then exit (default: until interrupted)\n"
    "  --once         one sample: rates over one interval, then exit\n"
    "  --json         with --once: one JSON object {pid, segments: [{name, actors}]}\n"
    "\n"
    "A segment whose process is dead (killed before its shutdown removed it) is\n"
    "shown with its last counters and marked stale; the next kvact runtime\n"
    "start in any process removes it once the process is reaped. JSON: each\n"
    "segment's \"owner\" (live, exited, gone, unknown) and \"stale\".\n"
    "\n"
    "trace: turns on the process's trace ring for N seconds (default 5; it stops\n"
    "by itself within 2 s if kvinspect dies) and writes Chrome/Perfetto trace\n"
    "JSON to FILE (default kvact-trace.PID.json): a track per actor, a slice per\n"
    "receive, an arrow from each send to its receive. --seconds 0 writes what the\n"
    "ring holds now (with runtime.trace = true it records all the time).\n"
    "--max-events bounds kvinspect's memory and the file (default 1000000 events,\n"
    "about 170 MB of JSON; the rest are counted as not kept).\n"
    "\n"
    "Exit status: 0 ok (stale segments included), 1 no such process and no\n"
    "segment, no kvact segment, a segment of another layout version or no\n"
    "permission to read it, 2 usage.\n";

typedef struct options {
  int pid;
  int interval_ms;
  int sort;
  const char *sort_name;
  long count; /* refreshes; -1 = forever */
  int json;
} options;

static int usage_error(const char *fmt, const char *arg) {
  fputs("kvinspect: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\n(kvinspect --help for usage)\n", stderr);
  return 2;
}

/* Parses a decimal integer in [lo, hi]; -1 when it is not one. */
static long parse_long(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  return (s[0] && !*end && !errno && v >= lo && v <= hi) ? v : -1;
}

static int parse_sort(options *o, const char *s) {
  static const char *names[] = {"name", "depth", "rate", "p99"};
  static const int keys[] = {KVI_SORT_NAME, KVI_SORT_DEPTH, KVI_SORT_RATE, KVI_SORT_P99};
  for (int i = 0; i < 4; i++) {
    if (strcmp(s, names[i]) == 0) {
      o->sort = keys[i];
      o->sort_name = names[i];
      return 0;
    }
  }
  return usage_error("--sort: \"%s\" is not name, depth, rate or p99", s);
}

/* One option at argv[*i] (advancing past its value); 0 or exit status. */
static int parse_option(options *o, int argc, char **argv, int *i, int *once) {
  const char *a = argv[*i];
  int has_value =
      strcmp(a, "--interval") == 0 || strcmp(a, "--sort") == 0 || strcmp(a, "--count") == 0;
  if (strcmp(a, "--once") == 0) return *once = 1, 0;
  if (strcmp(a, "--json") == 0) return o->json = 1, 0;
  if (!has_value) return usage_error("unknown option %s", a);
  if (++*i >= argc) return usage_error("%s needs a value", a);
  const char *v = argv[*i];
  if (strcmp(a, "--sort") == 0) return parse_sort(o, v);
  long n = parse_long(v, 1, strcmp(a, "--interval") == 0 ? 3600000 : 1000000000);
  if (n < 0) return usage_error("bad value for %s", a);
  if (strcmp(a, "--interval") == 0)
    o->interval_ms = (int)n;
  else
    o->count = n;
  return 0;
}

static int parse_args(options *o, int argc, char **argv) {
  int once = 0, have_pid = 0;
  *o = (options){.interval_ms = 1000, .sort = KVI_SORT_RATE, .sort_name = "rate", .count = -1};
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1]) {
      int rc = parse_option(o, argc, argv, &i, &once);
      if (rc) return rc;
    } else if (!have_pid) {
      long pid = parse_long(argv[i], 1, 0x7fffffff);
      if (pid < 0) return usage_error("\"%s\" is not a process id", argv[i]);
      o->pid = (int)pid;
      have_pid = 1;
    } else {
      return usage_error("unexpected argument %s", argv[i]);
    }
  }
  if (!have_pid) return usage_error("%s", "no PID given");
  if (o->json && !once) return usage_error("%s", "--json needs --once");
  if (once) o->count = 1;
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The refresh loop: mark, wait one interval, sample and show. */
static int inspect(const options *o, kvi_segment *segs, int count) {
  int tty = isatty(STDOUT_FILENO);
  for (int i = 0; i < count; i++) kvi_mark(&segs[i]);
  double t0 = now_s();
  for (long n = 0; o->count < 0 || n < o->count; n++) {
    sleep_ms(o->interval_ms);
    double t1 = now_s();
    for (int i = 0; i < count; i++) {
      kvi_sample(&segs[i], t1 - t0);
      kvi_sort(&segs[i], o->sort);
      kvi_mark(&segs[i]);
    }
    t0 = t1;
    if (o->json) return kvi_show_json(o->pid, segs, count, o->interval_ms) == 0 ? 0 : 1;
    kvi_show_table(o->pid, segs, count, o->interval_ms, o->sort_name, tty && o->count != 1);
    if (!kvi_alive(o->pid)) {
      fprintf(stderr, "kvinspect: process %d exited\n", o->pid);
      return 0;
    }
  }
  return 0;
}

/* Checks that pid is a process we may look at, or a dead one that left
 * segments when `stale_ok`; the exit status or 0. */
static int check_process(int pid, int stale_ok) {
  if (kill(pid, 0) != 0 && errno == ESRCH && !(stale_ok && kvi_segment_count(pid) > 0)) {
    fprintf(stderr, "kvinspect: no such process: %d\n", pid);
    return 1;
  }
  return 0;
}

/* kvinspect trace PID [--seconds N] [-o FILE] [--max-events N] */
static int trace_main(int argc, char **argv) {
  int pid = 0;
  double seconds = 5;
  long max_events = 1000000;
  char def_path[64];
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-') {
      long p = parse_long(a, 1, 0x7fffffff);
      if (p < 0 || pid) return usage_error("trace: unexpected argument %s", a);
      pid = (int)p;
      continue;
    }
    if (strcmp(a, "--seconds") && strcmp(a, "-o") && strcmp(a, "--max-events"))
      return usage_error("trace: unknown option %s", a);
    if (++i >= argc) return usage_error("trace: %s needs a value", a);
    if (strcmp(a, "-o") == 0) {
      path = argv[i];
    } else if (strcmp(a, "--seconds") == 0) {
      char *end;
      seconds = strtod(argv[i], &end);
      if (*end || end == argv[i] || !(seconds >= 0 && seconds <= 86400))
        return usage_error("trace: bad value for --seconds: %s", argv[i]);
    } else if ((max_events = parse_long(argv[i], 1, 1000000000)) < 0) {
      return usage_error("trace: bad value for --max-events: %s", argv[i]);
    }
  }
  if (!pid) return usage_error("%s", "trace: no PID given");
  if (!path) {
    snprintf(def_path, sizeof def_path, "kvact-trace.%d.json", pid);
    path = def_path;
  }
  int rc = check_process(pid, 0); /* a dead process has nothing to record */
  return rc ? rc : kvi_trace(pid, seconds, path, (size_t)max_events);
}

int main(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    fputs(usage, stdout);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) return tool_version("kvinspect");
  if (argc >= 2 && strcmp(argv[1], "trace") == 0) return trace_main(argc - 1, argv + 1);
  options o;
  int rc = parse_args(&o, argc, argv);
  if (rc) return rc;
  if ((rc = check_process(o.pid, 1)) != 0) return rc;
  kvi_segment *segs;
  int count;
  if (kvi_open_all(o.pid, &segs, &count, 0) != 0) return 1;
  rc = inspect(&o, segs, count);
  kvi_close_all(segs, count);
  return rc;
}
