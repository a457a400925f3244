/*
 * sim_clients.c — kvbench --clients N: the serving-engine simulation as N
 * engine processes, first against one kvactd, then as N embedded
 * instances, and one table comparing them.
 *
 * The daemon is a child forked before this process has any thread: a
 * runtime with server.socket=/tmp/kvbench-sim-<pid>.sock on the sim's
 * config (the whole L1 and disk budget), waiting for SIGTERM; it is
 * stopped and its socket removed at the end, whatever happened (not with
 * --socket: then the daemon running there serves). Each engine process is
 * a child too: --conversations split among them, --threads each, process
 * i's conversations seeded by i (the same in both modes) and every
 * process on the same shared system prompts and chunk keys (the model's
 * name, no salt), so that what one process stores the others can hit
 * through the daemon. An embedded instance gets 1/N of l1.size_bytes and
 * of each disk tier's capacity_bytes (a disk tier with a path gets
 * PATH.<i>). The processes start their runtimes, say so, and run together
 * once all are ready; each writes its figures and every request's TTFT
 * back on a pipe, and the parent aggregates: hit ratio = all hits / all
 * chunks looked up, TTFT percentiles over every request of the mode.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim/sim.h"

#define SIM_UP_MS 30000 /* the longest a daemon or a client takes to come up */

/* What an engine process writes back, then `nsamples` TTFTs (seconds). */
typedef struct sim_proc_figs {
  uint64_t turns, chunks, hit_chunks, stored_chunks, wrong_bytes, errors, nsamples;
  double store_s; /* in kva_kv_store until its op is waited for */
} sim_proc_figs;

/* A mode's figures, every process together. */
typedef struct sim_mode_figs {
  sim_proc_figs sum;
  double *ttft;
  size_t n;
  int failed; /* processes that did not report */
} sim_mode_figs;

/* The run's fixed inputs. */
typedef struct sim_clients_run {
  const sim_opts *o;
  const char *file, *socket;
  char **sets;
  int nsets;
} sim_clients_run;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

static int write_all(int fd, const void *p, size_t n) {
  for (const char *b = p; n;) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w, n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  for (char *b = p; n;) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r, n -= (size_t)r;
  }
  return 0;
}

/* ---- the daemon --------------------------------------------------------- */

static int socket_accepts(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0), ok;
  if (fd < 0) return 0;
  ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* The daemon child: serves until SIGTERM or SIGINT, then shuts down. */
static void daemon_child(const sim_clients_run *r) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, NULL); /* every runtime thread inherits it */
  kva_config *c = sim_config(r->file, r->sets, r->nsets, KVA_DEVICE_HOST);
  kva_runtime *rt = NULL;
  int rc = c ? kva_config_set(c, "server.socket", r->socket) : KVA_ENOMEM;
  if (rc == KVA_OK && (rc = kva_runtime_start(c, &rt)) != KVA_OK)
    fprintf(stderr, "kvbench: kvactd: %s\n", kva_strerror(rc));
  kva_config_free(c);
  if (!rt) _exit(2);
  int sig;
  sigwait(&stop, &sig);
  kva_runtime_shutdown(rt);
  _exit(0);
}

/* The daemon's pid once its socket accepts, or -1 (it is reaped). */
static pid_t daemon_start(const sim_clients_run *r) {
  pid_t pid = fork();
  if (pid == 0) daemon_child(r);
  for (int ms = 0; pid > 0 && ms < SIM_UP_MS; ms += 10) {
    if (socket_accepts(r->socket)) return pid;
    if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
    sleep_ms(10);
  }
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  fprintf(stderr, "kvbench: the daemon did not come up on %s\n", r->socket);
  return -1;
}

static void daemon_stop(pid_t pid, const char *socket) {
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  unlink(socket);
}

/* ---- an engine process --------------------------------------------------- */

/* Process i's embedded share of the budget: 1/n of l1.size_bytes and of
 * each disk tier's capacity_bytes, its own file for a disk tier's path. */
static int embedded_share(kva_config *c, int i, int n) {
  int64_t v = 0;
  char key[64], val[4200];
  const char *type, *path;
  int rc = kva_config_get_i64(c, "l1.size_bytes", &v);
  snprintf(val, sizeof val, "%lld", (long long)(v / n));
  if (rc == KVA_OK) rc = kva_config_set(c, "l1.size_bytes", val);
  for (int t = 0; rc == KVA_OK; t++) {
    snprintf(key, sizeof key, "l2[%d].type", t);
    if (kva_config_get_str(c, key, &type) != KVA_OK) break;
    if (strcmp(type, "disk") != 0) continue;
    snprintf(key, sizeof key, "l2[%d].capacity_bytes", t);
    if ((rc = kva_config_get_i64(c, key, &v)) != KVA_OK) break;
    snprintf(val, sizeof val, "%lld", (long long)(v / n));
    if ((rc = kva_config_set(c, key, val)) != KVA_OK) break;
    snprintf(key, sizeof key, "l2[%d].path", t);
    if ((rc = kva_config_get_str(c, key, &path)) != KVA_OK || !path[0]) continue;
    snprintf(val, sizeof val, "%s.%d", path, i);
    rc = kva_config_set(c, key, val);
  }
  return rc;
}

/* A client's storage answers once it has reached the daemon. */
static int client_wait_up(kva_storage *s) {
  kva_storage_stats st;
  for (int ms = 0; ms < SIM_UP_MS; ms += 10, sleep_ms(10))
    if (kva_storage_get_stats(s, &st) == KVA_OK) return KVA_OK;
  return KVA_ETIMEDOUT;
}

/* The runtime of engine process i: a client of the daemon, or embedded. */
static kva_runtime *engine_runtime(const sim_clients_run *r, int client, int i, int device) {
  kva_config *c = sim_config(r->file, r->sets, r->nsets, device);
  kva_runtime *rt = NULL;
  int rc = !c       ? KVA_ENOMEM
           : client ? kva_config_set(c, "client.socket", r->socket)
                    : embedded_share(c, i, r->o->clients);
  if (rc == KVA_OK) rc = kva_runtime_start(c, &rt);
  if (rc == KVA_OK && client && (rc = client_wait_up(kva_storage_of(rt))) != KVA_OK) {
    kva_runtime_shutdown(rt);
    rt = NULL;
  }
  kva_config_free(c);
  if (rc != KVA_OK) fprintf(stderr, "kvbench: engine process %d: %s\n", i, kva_strerror(rc));
  return rt;
}

/* Engine process i: its runtime, 'R' on out, the start (EOF on go), the
 * simulation, its figures on out. Never returns. */
static void engine_child(const sim_clients_run *r, int client, int i, int out, int go) {
  sim_opts o = *r->o;
  int n = r->o->clients;
  o.proc = i;
  o.quiet = i != 0;
  o.conversations = r->o->conversations / n + (i < r->o->conversations % n);
  if (o.threads > o.conversations) o.threads = o.conversations;
  static sim_stats st = {.mu = PTHREAD_MUTEX_INITIALIZER,
                         .chains = {.mu = PTHREAD_MUTEX_INITIALIZER}};
  st.device = sim_device();
  kva_runtime *rt = engine_runtime(r, client, i, st.device);
  char ch;
  if (!rt || write_all(out, "R", 1) || read(go, &ch, 1) != 0) _exit(1);
  int rc = sim_run(&o, kva_storage_of(rt), &st) < 0;
  sim_proc_figs f = {st.turns,       st.chunks, st.hit_chunks, st.stored_chunks,
                     st.wrong_bytes, st.errors, st.nsamples,   st.store_s};
  if (!rc)
    rc = write_all(out, &f, sizeof f) || write_all(out, st.ttft_s, f.nsamples * sizeof(double));
  kva_runtime_shutdown(rt);
  _exit(rc);
}

/* ---- one mode: N processes ----------------------------------------------- */

/* Adds process fd's report to m; -1 when it had none. */
static int collect(int fd, sim_mode_figs *m) {
  sim_proc_figs f;
  if (read_all(fd, &f, sizeof f)) return -1;
  double *v = realloc(m->ttft, (m->n + f.nsamples) * sizeof(double) + 1);
  if (!v || read_all(fd, v + m->n, f.nsamples * sizeof(double))) {
    m->ttft = v ? v : m->ttft;
    return -1;
  }
  m->ttft = v;
  m->n += f.nsamples;
  m->sum.turns += f.turns;
  m->sum.chunks += f.chunks;
  m->sum.hit_chunks += f.hit_chunks;
  m->sum.stored_chunks += f.stored_chunks;
  m->sum.store_s += f.store_s;
  m->sum.wrong_bytes += f.wrong_bytes;
  m->sum.errors += f.errors;
  return 0;
}

/* Forks the N engine processes, starts them together once each is ready,
 * and collects their figures. */
static void run_mode(const sim_clients_run *r, int client, sim_mode_figs *m) {
  int n = r->o->clients, go[2];
  int *fd = calloc((size_t)n, sizeof(int));
  pid_t *pid = calloc((size_t)n, sizeof(pid_t));
  *m = (sim_mode_figs){.failed = n};
  if (!fd || !pid || pipe(go)) {
    free(fd);
    free(pid);
    return;
  }
  int started = 0;
  for (; started < n; started++) {
    int p[2];
    if (pipe(p)) break;
    if ((pid[started] = fork()) == 0) {
      close(p[0]);
      close(go[1]);
      engine_child(r, client, started, p[1], go[0]);
    }
    close(p[1]);
    fd[started] = p[0];
    if (pid[started] < 0) {
      close(p[0]);
      break;
    }
  }
  for (int i = 0; i < started; i++) { /* ready, or failed */
    char ch;
    if (read_all(fd[i], &ch, 1)) {
      close(fd[i]);
      fd[i] = -1;
    }
  }
  close(go[1]); /* everyone: go */
  close(go[0]);
  m->failed = n - started;
  for (int i = 0; i < started; i++) {
    int status = 1;
    m->failed += fd[i] < 0 || collect(fd[i], m) != 0;
    if (fd[i] >= 0) close(fd[i]);
    waitpid(pid[i], &status, 0);
  }
  free(fd);
  free(pid);
}

/* ---- the table ------------------------------------------------------------ */

static double hit_ratio(const sim_mode_figs *m) {
  return m->sum.chunks ? (double)m->sum.hit_chunks / (double)m->sum.chunks : 0;
}

/* Store throughput: every process's kva_kv_store bytes over their time in
 * it, as the single-process report has it. */
static void print_row(const sim_opts *o, const char *mode, sim_mode_figs *m, double *p50,
                      double *p99) {
  kva_layout l = sim_layout(o->model);
  double bytes = (double)m->sum.stored_chunks * (double)kva_layout_bytes(&l);
  *p50 = 1e3 * sim_pct(m->ttft, m->n, 50);
  *p99 = 1e3 * sim_pct(m->ttft, m->n, 99);
  printf("clients=%d  mode=%-8s  hit_ratio=%.3f  ttft_p50_ms=%.2f  ttft_p99_ms=%.2f  "
         "requests=%llu  store_gbs=%.2f  wrong_bytes=%llu  errors=%llu  failed_processes=%d\n",
         o->clients, mode, hit_ratio(m), *p50, *p99, (unsigned long long)m->sum.turns,
         m->sum.store_s > 0 ? bytes / m->sum.store_s / 1e9 : 0,
         (unsigned long long)m->sum.wrong_bytes, (unsigned long long)m->sum.errors, m->failed);
}

static int bad(const sim_mode_figs *m) {
  return m->failed || m->sum.wrong_bytes || m->sum.errors || !m->n;
}

int sim_clients(const sim_opts *o, const char *file, char **sets, int nsets) {
  char path[108];
  snprintf(path, sizeof path, "/tmp/kvbench-sim-%d.sock", (int)getpid());
  sim_clients_run r = {
      .o = o, .file = file, .socket = o->socket ? o->socket : path, .sets = sets, .nsets = nsets};
  kva_config *c = sim_config(file, sets, nsets, KVA_DEVICE_HOST); /* checked once, here */
  if (!c) return 1;
  kva_config_free(c);
  fflush(NULL); /* nothing buffered is written twice by a child */
  pid_t d = o->socket ? 0 : daemon_start(&r);
  if (d < 0) return 1;
  sim_mode_figs m[2];
  fprintf(stderr, "kvbench: %d engine processes against kvactd on %s\n", o->clients, r.socket);
  run_mode(&r, 1, &m[0]);
  if (d > 0) daemon_stop(d, r.socket);
  fprintf(stderr, "kvbench: %d embedded engine processes, 1/%d of the budget each\n", o->clients,
          o->clients);
  run_mode(&r, 0, &m[1]);
  double p50[2], p99[2];
  print_row(o, "kvactd", &m[0], &p50[0], &p99[0]);
  print_row(o, "embedded", &m[1], &p50[1], &p99[1]);
  printf("measure=sim-clients N=%d hit_ratio_kvactd=%.3f hit_ratio_embedded=%.3f "
         "ttft_p50_kvactd=%.2f ttft_p50_embedded=%.2f ttft_p99_kvactd=%.2f "
         "ttft_p99_embedded=%.2f",
         o->clients, hit_ratio(&m[0]), hit_ratio(&m[1]), p50[0], p50[1], p99[0], p99[1]);
  /* what one shared daemon is for: its engines hit at least as often as
   * N private caches of the same total size */
  bench_target("sim-clients", "hit_ratio_kvactd_over_embedded",
               hit_ratio(&m[1]) > 0 ? hit_ratio(&m[0]) / hit_ratio(&m[1]) : NAN, ">=", 1);
  printf("\n");
  int rc = bad(&m[0]) || bad(&m[1]);
  if (rc) bench_missed("wrong-bytes-or-errors");
  bench_suite_end("sim-clients");
  free(m[0].ttft);
  free(m[1].ttft);
  return rc;
}
