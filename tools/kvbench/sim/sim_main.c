/*
 * sim_main.c — kvbench with no --suite: the options main.c parsed, checked;
 * the runtime on the embedded default config (or --config FILE, with -o
 * overrides), the simulation, the report; --clients goes to sim_clients.c.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/cuda_lib.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim/sim.h"

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

/* What the option table (main.c) cannot check alone: the model's name,
 * the run's length, --clients against the other options. -1 when o can
 * run (its threads at most its conversations), else 2 after saying why. */
const char *const sim_engine_names[SIM_ENGINES] = {"auto", "prefix", "split", "all"};

static int sim_check(sim_opts *o, const char *model) {
  if (!(o->model = sim_model_find(model))) {
    fprintf(stderr, "kvbench: unknown model \"%s\"\n", model);
    return 2;
  }
  o->engine = -1;
  for (int i = 0; i < SIM_ENGINES; i++)
    if (o->engine_name && strcmp(o->engine_name, sim_engine_names[i]) == 0) o->engine = i;
  if (o->engine < 0) {
    fprintf(stderr, "kvbench: --engine is auto, prefix, split or all, not \"%s\"\n",
            o->engine_name ? o->engine_name : "");
    return 2;
  }
  if (o->duration_s > SIM_MAX_SECONDS) {
    fprintf(stderr, "kvbench: --duration is at most %d\n", SIM_MAX_SECONDS);
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

int sim_main(const sim_opts *opts, const char *model, const char *file, char **sets, int nsets) {
  sim_opts o = *opts;
  if (!o.svg) o.svg = default_svg();
  o.simple_chart = getenv("KVBENCH_CHART") && !strcmp(getenv("KVBENCH_CHART"), "simple");
  int rc = sim_check(&o, model);
  if (rc >= 0) return rc;
  if (o.clients) /* before any thread of this process */
    return sim_clients(&o, file, sets, nsets);
  int device = rc < 0 ? sim_device() : KVA_DEVICE_HOST;
  kva_config *c = rc < 0 ? sim_config(file, sets, nsets, device) : NULL;
  static sim_stats st = {.mu = PTHREAD_MUTEX_INITIALIZER,
                         .chains = {.mu = PTHREAD_MUTEX_INITIALIZER}};
  kva_layout l = sim_layout(o.model);
  if (rc < 0 && c) sim_bw_probe(c, kva_layout_bytes(&l), &st.bw); /* the disk still idle */
  st.bw_shared = st.bw;
  kva_runtime *rt = NULL;
  if (rc < 0 && c && (rc = kva_runtime_start(c, &rt)) != KVA_OK)
    fprintf(stderr, "kvbench: runtime: %s\n", kva_strerror(rc));
  kva_config_free(c);
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
