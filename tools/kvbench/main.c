/*
 * kvbench — kvact's benchmark driver.
 *
 *   kvbench [--model NAME] [--duration S] [-o key=value] [--json] ...
 *   kvbench --suite runtime|l1|l2-mock|disk|redis|gpu|mp|all [--reps N] [--workers N] [--quick] ...
 *
 * Without --suite it runs the serving-engine simulation (sim_main.c) on the
 * embedded default config. "all" is runtime, l1 and l2-mock; disk writes a
 * file of a few GB, redis starts a redis-server, gpu moves a few hundred
 * MB of KV cache and mp forks server processes, so they run only when
 * asked for.
 */
#include <getopt.h>
#include <stdbool.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim/sim.h"

static void usage(FILE *f) {
  fprintf(f, "usage: kvbench --suite NAME [options]   (without --suite: the simulation,\n"
             "                                         kvbench --help)\n"
             "  --suite NAME      runtime | l1 | l2-mock | disk | redis | gpu | mp | all\n"
             "                    (all = runtime, l1, l2-mock)\n"
             "  --reps N          repetitions per measure, medians reported (5)\n"
             "  --workers N       scheduler threads for kvact and CAF (online CPUs)\n"
             "  --pingpong N      ping-pong round trips (2000000)\n"
             "  --fanin N         fan-in messages (8000000)\n"
             "  --ring-hops N     token-ring hops (1000000)\n"
             "  --anchors DIR     folder of caf_bench and ring_anchor\n"
             "  --disk-file PATH  disk: the tier's file, removed at the end (relative to\n"
             "                    the directory bazel run was called from; default\n"
             "                    kvbench-disk.tmp)\n"
             "  --disk-chunks N   disk: 8 MiB objects per pass (64)\n"
             "  --redis-addr H:P  redis: use this server (default: start a redis-server\n"
             "                    on a free loopback port, stopped at the end)\n"
             "  --redis-objects N redis: objects per pass, each size (64)\n"
             "  --redis-connections N, --redis-pipeline N\n"
             "                    redis: the tier's settings (default: its defaults)\n"
             "  --redis-no-cluster redis: one server only (no three-master pass)\n"
             "  --mp-iters N      mp: single-key round trips per rep (50000); each\n"
             "                    batch client makes N / 10 + 1\n"
             "  --quick           small sizes (a smoke run, figures meaningless)\n");
}

/* Under `bazel run` the anchors sit in the runfiles tree; elsewhere beside
 * bazel-bin/tools/kvbench/, in bazel-bin/tools/bench. */
static const char *default_anchors(void) {
  static char dir[4096];
  if (access("tools/bench/caf_bench", X_OK) == 0) return "tools/bench";
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "tools/bench";
  self[n] = 0;
  snprintf(dir, sizeof(dir), "%s/../bench", dirname(self));
  return dir;
}

/* The suites; `all` runs those marked in_all, in this order. */
static const struct {
  const char *name;
  int (*run)(const bench_opts *o);
  bool in_all;
} suites[] = {
    {"runtime", suite_runtime, true}, {"l1", suite_l1, true},
    {"l2-mock", suite_l2_mock, true}, {"disk", suite_disk, false},
    {"redis", suite_redis, false},    {"gpu", suite_gpu, false},
    {"mp", suite_mp, false},
};

/* Whether argv asks for a suite (--suite NAME or --suite=NAME). */
static bool wants_suite(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--suite") == 0 || strncmp(argv[i], "--suite=", 8) == 0) return true;
  return false;
}

int main(int argc, char **argv) {
  if (!wants_suite(argc, argv)) return sim_main(argc, argv);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  bench_opts o = {.workers = cpus > 0 ? (int)cpus : 1,
                  .reps = 5,
                  .pingpong = 2000000,
                  .fanin = 8000000,
                  .ring_hops = 1000000,
                  .ring_msgs = 10000000,
                  .anchors = default_anchors(),
                  .cycle_bytes = 4ull << 30,
                  .cp_cycles = 4000,
                  .rtt_samples = 100000,
                  .disk_chunks = 64,
                  .redis_objects = 64,
                  .mp_iters = 50000};
  const char *suite = "runtime";
  static const struct option opts[] = {{"suite", 1, 0, 's'},
                                       {"reps", 1, 0, 'r'},
                                       {"workers", 1, 0, 'w'},
                                       {"pingpong", 1, 0, 'p'},
                                       {"fanin", 1, 0, 'f'},
                                       {"ring-hops", 1, 0, 'h'},
                                       {"anchors", 1, 0, 'a'},
                                       {"quick", 0, 0, 'q'},
                                       {"disk-file", 1, 0, 'D'},
                                       {"disk-chunks", 1, 0, 'C'},
                                       {"help", 0, 0, 'H'},
                                       {"redis-addr", 1, 0, 'R'},
                                       {"redis-objects", 1, 0, 'O'},
                                       {"mp-iters", 1, 0, 'M'},
                                       {"redis-connections", 1, 0, 'K'},
                                       {"redis-pipeline", 1, 0, 'P'},
                                       {"redis-no-cluster", 0, 0, 'N'},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      suite = optarg;
      break;
    case 'r':
      o.reps = atoi(optarg);
      break;
    case 'w':
      o.workers = atoi(optarg);
      break;
    case 'p':
      o.pingpong = strtoull(optarg, NULL, 10);
      break;
    case 'f':
      o.fanin = strtoull(optarg, NULL, 10);
      break;
    case 'h':
      o.ring_hops = strtoull(optarg, NULL, 10);
      break;
    case 'a':
      o.anchors = optarg;
      break;
    case 'D':
      o.disk_file = optarg;
      break;
    case 'C':
      o.disk_chunks = (unsigned)strtoul(optarg, NULL, 10);
      break;
    case 'R':
      o.redis_addr = optarg;
      break;
    case 'O':
      o.redis_objects = (unsigned)strtoul(optarg, NULL, 10);
      break;
    case 'M':
      o.mp_iters = strtoull(optarg, NULL, 10);
      break;
    case 'K':
      o.redis_connections = (unsigned)strtoul(optarg, NULL, 10);
      break;
    case 'P':
      o.redis_pipeline = (unsigned)strtoul(optarg, NULL, 10);
      break;
    case 'N':
      o.redis_no_cluster = 1;
      break;
    case 'q':
      o.reps = 1;
      o.pingpong = 20000;
      o.fanin = 80000;
      o.ring_hops = 10000;
      o.ring_msgs = 100000;
      o.cycle_bytes = 256ull << 20;
      o.cp_cycles = 100;
      o.rtt_samples = 2000;
      o.disk_chunks = 16;
      o.redis_objects = 8;
      o.mp_iters = 5000;
      break;
    case 'H':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (o.reps < 1 || o.workers < 1 || !o.pingpong || !o.fanin || !o.ring_hops || !o.disk_chunks ||
      !o.redis_objects || !o.mp_iters) {
    fprintf(stderr, "kvbench: --reps, --workers and sizes must be positive\n");
    return 2;
  }
  bool all = strcmp(suite, "all") == 0, known = all;
  int rc = 0;
  for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
    if (!(all && suites[i].in_all) && strcmp(suite, suites[i].name) != 0) continue;
    known = true;
    rc |= suites[i].run(&o);
  }
  if (!known) {
    fprintf(stderr,
            "kvbench: unknown suite \"%s\" (runtime, l1, l2-mock, disk, redis, gpu, mp, all)\n",
            suite);
    return 2;
  }
  return rc;
}
