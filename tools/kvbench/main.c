/*
 * kvbench — kvact's benchmark driver.
 *
 *   kvbench [--model NAME] [--duration S] [-o key=value] [--json] ...
 *   kvbench --suite NAME [--reps N] [--workers N] [--quick] ...
 *
 * Without --suite it runs the serving-engine simulation (sim/sim_main.c)
 * on the embedded default config. The options are one table (opts[],
 * read by opt.c), the suites one list (suites[]): the usage, the checks
 * and `all` come from them. "all" is the suites marked in_all; disk
 * writes a file of a few GB, redis starts a redis-server, gpu moves a few
 * hundred MB of KV cache and mp forks server processes, so they run only
 * when asked for.
 *
 * Two binaries run this file: kvbench, with glibc's malloc, and
 * kvbench_counted, with malloc_count.c's interposer over it. kvbench
 * hands a suite that counts allocations to kvbench_counted (exec_counted).
 */
#include <errno.h>
#include <libgen.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/malloc_count.h"
#include "tools/kvbench/opt.h"
#include "tools/kvbench/sim/sim.h"
#include "tools/tool_version.h"

/* Everything the command line sets, both modes. */
typedef struct kvbench_args {
  const char *suite; /* --suite NAME */
  int quick, help, version;
  const char *model;  /* --model: the simulation's, by name */
  const char *config; /* --config FILE (NULL: the embedded default) */
  opt_list sets;      /* -o key=value */
  sim_opts sim;
  bench_opts bench;
} kvbench_args;

#define A(field) offsetof(kvbench_args, field)

/* The options: {name, argument, kind, field, mode, positive, default,
 * --quick's value, help}. A row with no name is a size that --quick
 * alone changes. */
static const opt_spec opts[] = {
    {"model", "NAME", OPT_STR, A(model), OPT_SIM, 0, "llama3-8b", NULL,
     "llama3-8b, llama3-70b, qwen2.5-7b, tiny"},
    {"conversations", "N", OPT_INT, A(sim.conversations), OPT_SIM, 1, "8", NULL,
     "concurrent conversations"},
    {"threads", "N", OPT_INT, A(sim.threads), OPT_SIM, 1, "2", NULL, "engine threads"},
    {"prompts", "N", OPT_INT, A(sim.prompts), OPT_SIM, 1, "4", NULL,
     "shared 1024-token system prompts"},
    {"prefill-tps", "X", OPT_DOUBLE, A(sim.prefill_tps), OPT_SIM, 1, "10000", NULL,
     "simulated prefill speed, tokens/s"},
    {"duration", "S", OPT_DOUBLE, A(sim.duration_s), OPT_SIM, 1, "10", NULL, "seconds to run"},
    {"seed", "N", OPT_U64, A(sim.seed), OPT_SIM, 0, "1", NULL, "token PRNG seed"},
    {"engine", "NAME", OPT_STR, A(sim.engine_name), OPT_SIM, 0, "auto", NULL,
     "how the engine uses each turn's load plan: auto (the\n"
     "faster of prefix and split), prefix (load the prefix\n"
     "worth loading), split (compute the front of the found\n"
     "prefix while its back loads), all (load all found)"},
    {"config", "FILE", OPT_STR, A(config), OPT_SIM, 0, NULL, NULL,
     "config file (default: the embedded default, with\n"
     "l1.prefault=true as an engine with a GPU pins it,\n"
     "and l1.pinned=true when CUDA device 0 is usable)"},
    {"o", "key=value", OPT_LIST, A(sets), OPT_SIM, 0, NULL, NULL,
     "config override (repeatable), e.g. -o l2=[]"},
    {"json", NULL, OPT_FLAG, A(sim.json), OPT_SIM, 0, NULL, NULL, "final report as JSON on stdout"},
    {"svg", "PATH", OPT_STR, A(sim.svg), OPT_SIM, 0, NULL, NULL,
     "chart (default kvbench-report.svg in the directory\n"
     "bazel run was called from)"},
    {"clients", "N", OPT_INT, A(sim.clients), OPT_SIM, 0, NULL, NULL,
     "N engine processes against one kvactd (started by\n"
     "kvbench on the config, with the whole L1 and disk\n"
     "budget), then N embedded instances with 1/N of\n"
     "l1.size_bytes and of each disk tier's capacity\n"
     "each, on the same seeds: hit ratio and TTFT of\n"
     "both, one table. --conversations is the total,\n"
     "split among the processes; --threads is per\n"
     "process. No --json, no chart"},
    {"socket", "PATH", OPT_STR, A(sim.socket), OPT_SIM, 0, NULL, NULL,
     "with --clients: use the kvactd running there"},
    {"suite", "NAME", OPT_STR, A(suite), OPT_SUITE, 0, NULL, NULL, NULL}, /* usage(): suites[] */
    {"reps", "N", OPT_INT, A(bench.reps), OPT_SUITE, 1, "5", "1",
     "repetitions per measure, medians reported"},
    {"workers", "N", OPT_INT, A(bench.workers), OPT_SUITE, 1, NULL, NULL,
     "scheduler threads for kvact and CAF (online CPUs)"},
    {"pingpong", "N", OPT_U64, A(bench.pingpong), OPT_SUITE, 1, "2000000", "20000",
     "ping-pong round trips"},
    {"fanin", "N", OPT_U64, A(bench.fanin), OPT_SUITE, 1, "8000000", "80000", "fan-in messages"},
    {"ring-hops", "N", OPT_U64, A(bench.ring_hops), OPT_SUITE, 1, "1000000", "10000",
     "token-ring hops"},
    {NULL, NULL, OPT_U64, A(bench.ring_msgs), OPT_SUITE, 1, "10000000", "100000", NULL},
    {NULL, NULL, OPT_U64, A(bench.cycle_bytes), OPT_SUITE, 1, "4294967296", "268435456", NULL},
    {NULL, NULL, OPT_U64, A(bench.cp_cycles), OPT_SUITE, 1, "4000", "100", NULL},
    {NULL, NULL, OPT_U64, A(bench.rtt_samples), OPT_SUITE, 1, "100000", "2000", NULL},
    {"anchors", "DIR", OPT_STR, A(bench.anchors), OPT_SUITE, 0, NULL, NULL,
     "folder of caf_bench and ring_anchor"},
    {"disk-file", "PATH", OPT_STR, A(bench.disk_file), OPT_SUITE, 0, NULL, NULL,
     "disk: the tier's file, removed at the end (relative to\n"
     "the directory bazel run was called from; default\n"
     "kvbench-disk.tmp)"},
    {"disk-chunks", "N", OPT_UNSIGNED, A(bench.disk_chunks), OPT_SUITE, 1, "64", "16",
     "disk: 8 MiB objects per pass"},
    {"redis-addr", "H:P", OPT_STR, A(bench.redis_addr), OPT_SUITE, 0, NULL, NULL,
     "redis: use this server (default: start a redis-server\n"
     "on a free loopback port, stopped at the end)"},
    {"redis-objects", "N", OPT_UNSIGNED, A(bench.redis_objects), OPT_SUITE, 1, "64", "8",
     "redis: objects per pass, each size"},
    {"redis-connections", "N", OPT_UNSIGNED, A(bench.redis_connections), OPT_SUITE, 0, NULL, NULL,
     "redis: the tier's connections (default: its default)"},
    {"redis-pipeline", "N", OPT_UNSIGNED, A(bench.redis_pipeline), OPT_SUITE, 0, NULL, NULL,
     "redis: the tier's pipeline (default: its default)"},
    {"redis-no-cluster", NULL, OPT_FLAG, A(bench.redis_no_cluster), OPT_SUITE, 0, NULL, NULL,
     "redis: one server only (no three-master pass, no\n"
     "failover pass)"},
    {"redis-no-failover", NULL, OPT_FLAG, A(bench.redis_no_failover), OPT_SUITE, 0, NULL, NULL,
     "redis: no failover pass (3 masters + 3 replicas, one\n"
     "master killed under a workload)"},
    {"redis-only-failover", NULL, OPT_FLAG, A(bench.redis_only_failover), OPT_SUITE, 0, NULL, NULL,
     "redis: the failover pass alone"},
    {"redis-failover-s", "N", OPT_UNSIGNED, A(bench.redis_failover_s), OPT_SUITE, 1, "12", "6",
     "redis: seconds of the failover workload (a master\n"
     "is killed at 3 s)"},
    {"mp-iters", "N", OPT_U64, A(bench.mp_iters), OPT_SUITE, 1, "50000", "5000",
     "mp: single-key round trips per rep; each\n"
     "batch client makes N / 10 + 1"},
    {"quick", NULL, OPT_QUICK, A(quick), OPT_SUITE, 0, NULL, NULL,
     "small sizes (a smoke run, figures meaningless)"},
    {"version", NULL, OPT_FLAG, A(version), OPT_BOTH, 0, NULL, NULL,
     "print kvbench's and libkvact's versions"},
    {"help", NULL, OPT_FLAG, A(help), OPT_BOTH, 0, NULL, NULL, "this text"},
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* The suites; `all` runs those marked in_all, in this order. Those that
 * count allocations (they read malloc_count()) run in kvbench_counted. */
static const struct {
  const char *name;
  int (*run)(const bench_opts *o);
  bool in_all, counts_allocs;
} suites[] = {
    {"runtime", suite_runtime, true, true},  {"l1", suite_l1, true, true},
    {"l2-mock", suite_l2_mock, true, false}, {"disk", suite_disk, false, false},
    {"redis", suite_redis, false, false},    {"gpu", suite_gpu, false, true},
    {"mp", suite_mp, false, true},
};

#define NSUITES (sizeof(suites) / sizeof(suites[0]))

/* The suites' names, then "all", sep between them. */
static void suite_names(FILE *f, const char *sep) {
  for (size_t i = 0; i < NSUITES; i++) fprintf(f, "%s%s", suites[i].name, sep);
  fprintf(f, "all");
}

static void usage(FILE *f) {
  fprintf(f, "usage: kvbench [options]            serving-engine simulation (default)\n");
  opt_usage(f, opts, NOPTS, OPT_SIM);
  fprintf(f, "       kvbench --suite NAME [options]   a benchmark suite\n  %-21s ", "--suite NAME");
  suite_names(f, " | ");
  fprintf(f, "\n%24s(all = ", "");
  for (size_t i = 0, n = 0; i < NSUITES; i++)
    if (suites[i].in_all) fprintf(f, "%s%s", n++ ? ", " : "", suites[i].name);
  fprintf(f, ")\n");
  opt_usage(f, opts, NOPTS, OPT_SUITE);
  opt_usage(f, opts, NOPTS, OPT_BOTH);
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

/* Whether argv asks for a suite (--suite NAME or --suite=NAME). */
static bool wants_suite(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--suite") == 0 || strncmp(argv[i], "--suite=", 8) == 0) return true;
  return false;
}

/* Whether the suite NAME (or one of `all`) counts allocations. */
static bool counts_allocs(const char *name) {
  bool all = strcmp(name, "all") == 0;
  for (size_t i = 0; i < NSUITES; i++)
    if (((all && suites[i].in_all) || strcmp(name, suites[i].name) == 0) && suites[i].counts_allocs)
      return true;
  return false;
}

/* Replaces this process with kvbench_counted, the same program with the
 * malloc interposer (interposition is for the whole process, so the
 * simulation and the other suites run without it), given the same argv.
 * It sits next to this binary: in bazel-bin beside /proc/self/exe, in a
 * runfiles tree beside argv[0] (a link to it). Returns only when neither
 * can be executed, after saying so: the suites then print their counts
 * as unavailable. */
static void exec_counted(char **argv) {
  char self[4096], path[4096 + 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    snprintf(path, sizeof path, "%s/kvbench_counted", dirname(self));
    execv(path, argv);
  }
  snprintf(self, sizeof self, "%s", argv[0]);
  snprintf(path, sizeof path, "%s/kvbench_counted", dirname(self));
  execv(path, argv);
  fprintf(stderr, "kvbench: %s: %s (allocations not counted)\n", path, strerror(errno));
}

/* The suite NAME, or all those in `all`; 2 for a name not in suites[]. */
static int run_suites(const char *name, const bench_opts *o) {
  bool all = strcmp(name, "all") == 0, known = all;
  int rc = 0;
  for (size_t i = 0; i < NSUITES; i++) {
    if (!(all && suites[i].in_all) && strcmp(name, suites[i].name) != 0) continue;
    known = true;
    rc |= suites[i].run(o);
  }
  if (known) return rc;
  fprintf(stderr, "kvbench: unknown suite \"%s\" (", name);
  suite_names(stderr, ", ");
  fprintf(stderr, ")\n");
  return 2;
}

int main(int argc, char **argv) {
  unsigned mode = wants_suite(argc, argv) ? OPT_SUITE : OPT_SIM;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  kvbench_args a = {.suite = "runtime",
                    .bench = {.workers = cpus > 0 ? (int)cpus : 1, .anchors = default_anchors()}};
  char **args = malloc(((size_t)argc + 1) * sizeof(char *)); /* getopt reorders it */
  if (!args) return 1;
  memcpy(args, argv, ((size_t)argc + 1) * sizeof(char *));
  int rc = opt_parse(opts, NOPTS, mode, argc, args, &a);
  if (rc == 0 && mode == OPT_SUITE && !a.help && !a.version &&
      malloc_count() == MALLOC_COUNT_NONE && counts_allocs(a.suite))
    exec_counted(argv);
  if (rc == 0 && a.version)
    rc = tool_version("kvbench");
  else if (rc == 0 && a.help)
    usage(stdout);
  else if (rc == 0 && mode == OPT_SIM)
    rc = sim_main(&a.sim, a.model, a.config, a.sets.v, a.sets.n);
  else if (rc == 0)
    rc = run_suites(a.suite, &a.bench);
  free(a.sets.v);
  free(args);
  return rc;
}
