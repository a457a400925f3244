/*
 * sim_main.c — kvbench with no --suite: options, the runtime on the
 * embedded default config (or --config FILE, with -o overrides), the
 * simulation, the report; --clients goes to sim_clients.c.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/cuda_lib.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim.h"

void sim_usage(FILE *f) {
  fprintf(f, "usage: kvbench [options]            serving-engine simulation (default)\n"
             "       kvbench --suite NAME [...]   a benchmark suite (kvbench --suite NAME --help)\n"
             "  --model NAME          llama3-8b (default), llama3-70b, qwen2.5-7b, tiny\n"
             "  --conversations N     concurrent conversations (8)\n"
             "  --threads N           engine threads (2)\n"
             "  --prompts N           shared 1024-token system prompts (4)\n"
             "  --prefill-tps X       simulated prefill speed, tokens/s (10000)\n"
             "  --duration S          seconds to run (10)\n"
             "  --seed N              token PRNG seed (1)\n"
             "  --config FILE         config file (default: the embedded default, with\n"
             "                        l1.prefault=true as an engine with a GPU pins it,\n"
             "                        and l1.pinned=true when CUDA device 0 is usable)\n"
             "  -o key=value          config override (repeatable), e.g. -o l2=[]\n"
             "  --json                final report as JSON on stdout\n"
             "  --svg PATH            chart (default kvbench-report.svg in the directory\n"
             "                        bazel run was called from): report.py's, drawn with\n"
             "                        Debian's python3-matplotlib (KVBENCH_CHART=simple:\n"
             "                        kvbench's own one panel); the JSON report beside it\n"
             "                        (PATH with .json for .svg)\n"
             "  --clients N           N engine processes against one kvactd (started by\n"
             "                        kvbench on the config, with the whole L1 and disk\n"
             "                        budget), then N embedded instances with 1/N of\n"
             "                        l1.size_bytes and of each disk tier's capacity\n"
             "                        each, on the same seeds: hit ratio and TTFT of\n"
             "                        both, one table. --conversations is the total,\n"
             "                        split among the processes; --threads is per\n"
             "                        process. No --json, no chart\n"
             "  --socket PATH         with --clients: use the kvactd running there\n");
}

static const char *default_svg(void) {
  static char path[4096];
  const char *dir = getenv("BUILD_WORKING_DIRECTORY");
  snprintf(path, sizeof path, "%s%skvbench-report.svg", dir ? dir : "", dir ? "/" : "");
  return path;
}

static void log_drop(int level, const char *msg, void *arg) {}

/* CUDA device 0 when the kernel library loads and the device can read
 * registered host memory, else the host device. Asked before the runtime
 * starts, with the library's log lines muted: no GPU is the usual case,
 * and the report says which device the engines used. */
int sim_device(void) {
  kva_log_set(log_drop, NULL, KVA_LOG_ERROR);
  int cuda = cuda_lib_api() && cuda_device_probe(0) == KVA_OK;
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
  return cuda ? 0 : KVA_DEVICE_HOST;
}

/* Loads the config and applies the -o overrides; NULL after saying why.
 * The embedded default gets l1.pinned=true for a CUDA device (its copies
 * read and write the page-locked pool) and l1.prefault=true. The -o
 * strings are given back as they came. */
kva_config *sim_config(const char *file, char **sets, int nsets, int device) {
  kva_config *c = NULL;
  char err[256] = "";
  if (file && kva_config_from_file(file, &c, err, sizeof err) != KVA_OK) {
    fprintf(stderr, "kvbench: %s: %s\n", file, err);
    return NULL;
  }
  if (!file && !(c = kva_config_default())) return NULL;
  /* an engine with a GPU page-locks its pool, which faults it in; without
   * one, prefault it so stores measure copies, not first-touch faults */
  if (!file && (kva_config_set_err(c, "l1.prefault", "true", err, sizeof err) != KVA_OK ||
                (device != KVA_DEVICE_HOST &&
                 kva_config_set_err(c, "l1.pinned", "true", err, sizeof err) != KVA_OK))) {
    kva_config_free(c);
    return NULL;
  }
  for (int i = 0; i < nsets; i++) {
    char *eq = strchr(sets[i], '=');
    if (eq) *eq = 0;
    int rc = eq ? kva_config_set_err(c, sets[i], eq + 1, err, sizeof err) : KVA_EINVAL;
    if (eq) *eq = '=';
    if (rc != KVA_OK) {
      fprintf(stderr, "kvbench: -o %s: %s\n", sets[i], eq ? err : "want key=value");
      kva_config_free(c);
      return NULL;
    }
  }
  return c;
}

static int sim_parse(int argc, char **argv, sim_opts *o, const char **cfg, char **sets,
                     int *nsets) {
  static const struct option opts[] = {{"model", 1, 0, 'm'},       {"conversations", 1, 0, 'c'},
                                       {"threads", 1, 0, 't'},     {"prompts", 1, 0, 'p'},
                                       {"prefill-tps", 1, 0, 'P'}, {"duration", 1, 0, 'd'},
                                       {"seed", 1, 0, 's'},        {"config", 1, 0, 'C'},
                                       {"json", 0, 0, 'j'},        {"svg", 1, 0, 'S'},
                                       {"help", 0, 0, 'H'},        {"clients", 1, 0, 'N'},
                                       {"socket", 1, 0, 'U'},      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
    switch (c) {
    case 'm':
      if (!(o->model = sim_model_find(optarg))) {
        fprintf(stderr, "kvbench: unknown model \"%s\"\n", optarg);
        return 2;
      }
      break;
    case 'c':
      o->conversations = atoi(optarg);
      break;
    case 't':
      o->threads = atoi(optarg);
      break;
    case 'p':
      o->prompts = atoi(optarg);
      break;
    case 'P':
      o->prefill_tps = atof(optarg);
      break;
    case 'd':
      o->duration_s = atof(optarg);
      break;
    case 's':
      o->seed = strtoull(optarg, NULL, 10);
      break;
    case 'C':
      *cfg = optarg;
      break;
    case 'o':
      sets[(*nsets)++] = optarg;
      break;
    case 'j':
      o->json = 1;
      break;
    case 'S':
      o->svg = optarg;
      break;
    case 'N':
      o->clients = atoi(optarg);
      break;
    case 'U':
      o->socket = optarg;
      break;
    case 'H':
      sim_usage(stdout);
      return 0;
    default:
      sim_usage(stderr);
      return 2;
    }
  }
  if (optind < argc || o->conversations < 1 || o->threads < 1 || o->prompts < 1 ||
      !(o->prefill_tps > 0) || !(o->duration_s > 0) || o->duration_s > SIM_MAX_SECONDS) {
    fprintf(stderr, "kvbench: counts, --prefill-tps and --duration must be positive\n");
    return 2;
  }
  if (o->clients < 0 || (o->clients && (o->json || o->conversations < o->clients)) ||
      (o->socket && !o->clients)) {
    fprintf(stderr, "kvbench: --clients N wants N <= --conversations and no --json; "
                    "--socket wants --clients\n");
    return 2;
  }
  if (o->threads > o->conversations) o->threads = o->conversations;
  return -1;
}

/* The JSON report's path: the chart's, .json for .svg (or added). */
static void json_path(const char *svg, char *out, size_t n) {
  size_t len = strlen(svg);
  int ext = len > 4 && strcmp(svg + len - 4, ".svg") == 0;
  snprintf(out, n, "%.*s.json", (int)(ext ? len - 4 : len), svg);
}

static int sim_finish(sim_result *r, kva_storage *s) {
  char json[4096];
  kva_flush(s, 30000);
  kva_storage_get_stats(s, &r->after);
  for (uint32_t t = 1; t < r->st->ntiers; t++) /* the runtime started with the run: no deltas */
    kva_l2_get_tier_stats(s, r->st->tier_name[t], &r->tier[t]);
  if (sim_chains_usable(&r->st->chains, s, r->st, &r->l2) != 0) r->st->errors++;
  if (!r->o->json) sim_report_text(r);
  json_path(r->o->svg, json, sizeof json);
  if (sim_report_json(r, json)) return 1;
  int svg = sim_write_chart(r, json);
  return svg || r->st->wrong_bytes || r->st->errors ? 1 : 0;
}

int sim_main(int argc, char **argv) {
  sim_opts o = {.model = sim_model_find("llama3-8b"),
                .conversations = 8,
                .threads = 2,
                .prompts = 4,
                .seed = 1,
                .prefill_tps = 10000,
                .duration_s = 10,
                .svg = default_svg(),
                .simple_chart =
                    getenv("KVBENCH_CHART") && !strcmp(getenv("KVBENCH_CHART"), "simple")};
  const char *file = NULL;
  char **sets = calloc((size_t)argc + 1, sizeof(char *));
  int nsets = 0, rc = sets ? sim_parse(argc, argv, &o, &file, sets, &nsets) : 1;
  if (rc < 0 && o.clients) { /* before any thread of this process */
    rc = sim_clients(&o, file, sets, nsets);
    free(sets);
    return rc;
  }
  int device = rc < 0 ? sim_device() : KVA_DEVICE_HOST;
  kva_config *c = rc < 0 ? sim_config(file, sets, nsets, device) : NULL;
  static sim_stats st = {.mu = PTHREAD_MUTEX_INITIALIZER,
                         .chains = {.mu = PTHREAD_MUTEX_INITIALIZER}};
  kva_layout l = sim_layout(o.model);
  if (rc < 0 && c) sim_bw_probe(c, kva_layout_bytes(&l), &st.bw); /* the disk still idle */
  kva_runtime *rt = NULL;
  if (rc < 0 && c && (rc = kva_runtime_start(c, &rt)) != KVA_OK)
    fprintf(stderr, "kvbench: runtime: %s\n", kva_strerror(rc));
  kva_config_free(c);
  free(sets);
  if (!rt) return rc < 0 || rc > 2 ? 1 : rc;
  kva_storage *s = kva_storage_of(rt);
  sim_result r = {.o = &o, .chunk_bytes = kva_layout_bytes(&l), .st = &st};
  if (!s) {
    fprintf(stderr, "kvbench: the config has no storage (l1.size_bytes = 0)\n");
    rc = 1;
  } else {
    kva_storage_get_stats(s, &r.before);
    st.device = device;
    r.elapsed_s = sim_run(&o, s, &st);
    rc = r.elapsed_s < 0 ? 1 : sim_finish(&r, s);
  }
  kva_runtime_shutdown(rt);
  sim_chains_free(&st.chains);
  return rc;
}
