/*
 * kvsoak.c — kvactd over time: a daemon with a faulty mock tier, client
 * processes that come and go at random (orderly exits, crashes, SIGKILL),
 * and a report every interval of what the daemon holds: fds, RSS, live
 * actors, the sessions' ledgers, L1 locks, and the wrong bytes the clients
 * read. Flat columns over a long run are what "runs for months" means.
 *
 *   kvsoak [--minutes M] [--interval S] [--clients N] [--seed X]
 *   kvsoak --version | --help
 *
 * Not a test (CI runs tests/server/mp_lifetime_test): a soak is long by
 * design. The daemon is this process's child, started before any runtime
 * of the parent (there is none), as are the clients.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include "kvact.h"
#include "tools/kvinspect.h"
#include "tools/tool_version.h"

#define KEYSPACE 4096u
#define CHUNK 16384u
#define MAX_CLIENTS 64

/* What the clients tell the daemon's reporter, in shared memory. */
typedef struct soak_shared {
  atomic_ulong ops, reads_checked, wrong_bytes, starts, kills, errors;
} soak_shared;

static const char usage[] = "usage: kvsoak [--minutes M] [--interval S] [--clients N] [--seed X]\n"
                            "       kvsoak --version | --help\n";

static soak_shared *shared;
static char sock[108];

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static kva_key key_of(uint64_t i) {
  kva_key k;
  memset(&k, 0, sizeof(k));
  snprintf(k.model, sizeof(k.model), "soak");
  memcpy(k.hash, &i, sizeof(i));
  k.hash_len = sizeof(i);
  return k;
}

/* Key i's bytes depend on i alone: any reader can check any chunk. */
static void fill(uint8_t *p, uint64_t i) {
  for (size_t j = 0; j < CHUNK; j += 8) {
    uint64_t v = (i + 1) * 0x9e3779b97f4a7c15ull ^ j;
    memcpy(p + j, &v, 8);
  }
}

static size_t wrong(const uint8_t *p, uint64_t i) {
  uint8_t want[CHUNK];
  fill(want, i);
  size_t bad = 0;
  for (size_t j = 0; j < CHUNK; j++) bad += p[j] != want[j];
  return bad;
}

/* ---- the daemon and its report ------------------------------------------------ */

static size_t count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  size_t n = 0;
  if (!d) return 0;
  while (readdir(d)) n++;
  closedir(d);
  return n > 3 ? n - 3 : n; /* ., .. and the directory's own fd */
}

static long rss_mib(void) {
  long size = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
  if (f) fclose(f);
  return res * sysconf(_SC_PAGESIZE) / (1024 * 1024);
}

/* The sessions' ledgers, summed from their rows' gauges as kvinspect reads
 * them (session.c: 1 write locks, 2 read locks, 3 pins), and how many
 * sessions live. */
static void ledgers(uint64_t sum[4], unsigned *sessions) {
  memset(sum, 0, 4 * sizeof(uint64_t));
  *sessions = 0;
  kvi_segment *segs;
  int n;
  if (kvi_open_all(getpid(), &segs, &n, 0) != 0) return;
  for (int i = 0; i < n; i++) {
    kvi_sample(&segs[i], 0);
    for (uint32_t r = 0; r < segs[i].nrows; r++) {
      const kvi_row *row = &segs[i].rows[r];
      if (strcmp(row->state, "live") != 0 || strcmp(row->name, "kvactd_session") != 0) continue;
      (*sessions)++;
      for (int g = 1; g < 4; g++) sum[g] += row->gauge[g];
    }
  }
  kvi_close_all(segs, n);
}

static void report(kva_runtime *rt, double minutes) {
  kva_storage_stats st = {0};
  kva_storage_get_stats(kva_storage_of(rt), &st);
  kva_runtime_counters c;
  kva_runtime_get_counters(rt, &c);
  uint64_t led[4];
  unsigned sessions;
  ledgers(led, &sessions);
  printf("%6.1f min  fds %4zu  rss %4ld MiB  actors %4llu  sessions %3u  ledger w/r/p "
         "%llu/%llu/%llu  l1 locks w/r %llu/%llu  clients %lu (killed %lu)  ops %lu  "
         "reads checked %lu  wrong bytes %lu  errors %lu\n",
         minutes, count_fds(), rss_mib(), (unsigned long long)c.actors, sessions,
         (unsigned long long)led[1], (unsigned long long)led[2], (unsigned long long)led[3],
         (unsigned long long)st.l1_write_locked, (unsigned long long)st.l1_read_locked,
         atomic_load(&shared->starts), atomic_load(&shared->kills), atomic_load(&shared->ops),
         atomic_load(&shared->reads_checked), atomic_load(&shared->wrong_bytes),
         atomic_load(&shared->errors));
  fflush(stdout);
}

/* The daemon: reports every interval until SIGTERM; then, its clients
 * gone, the final memcheck. */
static _Noreturn void daemon_main(int interval_s, int ready_w) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, NULL);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  kva_config *cfg = kva_config_default();
  const char *set[][2] = {
      {"server.socket", sock},
      {"l1.size_bytes", "268435456"},
      {"l1.hugepages", "false"},
      {"l1.pinned", "false"},
      {"runtime.workers", "2"},
      {"l2", "[{\"type\":\"mock\",\"capacity_bytes\":536870912,\"latency_us\":300,"
             "\"fail_store_rate\":0.05,\"fail_load_rate\":0.05}]"},
  };
  for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
    if (kva_config_set(cfg, set[i][0], set[i][1]) != KVA_OK) _exit(2);
  kva_runtime *rt = NULL;
  int rc = kva_runtime_start(cfg, &rt);
  kva_config_free(cfg);
  if (write(ready_w, rc == KVA_OK ? "r" : "x", 1) != 1 || rc != KVA_OK) _exit(1);
  uint64_t t0 = now_ns();
  for (;;) {
    struct timespec ts = {interval_s, 0};
    if (sigtimedwait(&term, NULL, &ts) == SIGTERM) break;
    report(rt, (double)(now_ns() - t0) / 60e9);
  }
  char text[256] = "";
  rc = kva_memcheck(kva_storage_of(rt), text, sizeof(text));
  for (int i = 0; i < 500 && rc != KVA_OK; i++) { /* the last sessions closing */
    usleep(10000);
    rc = kva_memcheck(kva_storage_of(rt), text, sizeof(text));
  }
  report(rt, (double)(now_ns() - t0) / 60e9);
  printf("final memcheck: %s\n", rc == KVA_OK ? "clean" : text);
  fflush(stdout);
  kva_runtime_shutdown(rt);
  _exit(rc == KVA_OK ? 0 : 3);
}

/* ---- the clients -------------------------------------------------------------- */

static void client_write(kva_storage *s, uint64_t i) {
  kva_key k = key_of(i);
  kva_layout l = {.ntensors = 1};
  l.tensor[0].dtype = KVA_DT_U8;
  l.tensor[0].ndim = 1;
  l.tensor[0].shape[0] = CHUNK;
  kva_buf b;
  int st;
  if (kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st) != 1) return;
  fill(b.ptr, i);
  kva_finish_write(s, &k, 1, &st);
}

static void client_read(kva_storage *s, uint64_t first, size_t n) {
  kva_key k[8];
  kva_buf b[8];
  for (size_t j = 0; j < n; j++) k[j] = key_of((first + j) % KEYSPACE);
  kva_prefetch *h;
  size_t hits = 0;
  if (kva_submit_prefetch(s, k, n, NULL, 0, &h) != KVA_OK) return;
  if (kva_wait_prefetch(s, h, 5000, &hits) != KVA_OK || !hits) return;
  if (kva_read_prefetched(s, k, hits, b) == KVA_OK)
    for (size_t j = 0; j < hits; j++) {
      size_t bad = b[j].len == CHUNK ? wrong(b[j].ptr, (first + j) % KEYSPACE) : CHUNK;
      atomic_fetch_add(&shared->wrong_bytes, bad);
      atomic_fetch_add(&shared->reads_checked, 1);
    }
  if (kva_finish_read_prefetched(s, k, hits, 0) < 0) atomic_fetch_add(&shared->errors, 1);
}

/* Works for a random while, then exits in order, or crashes without
 * saying goodbye; the parent may SIGKILL it meanwhile. */
static _Noreturn void client_main(uint64_t seed) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  kva_config *cfg = kva_config_default();
  kva_config_set(cfg, "client.socket", sock);
  kva_config_set(cfg, "client.timeout_ms", "3000");
  kva_config_set(cfg, "runtime.workers", "1");
  kva_runtime *rt = NULL;
  if (kva_runtime_start(cfg, &rt) != KVA_OK) _exit(1);
  kva_config_free(cfg);
  atomic_fetch_add(&shared->starts, 1);
  kva_storage *s = kva_storage_of(rt);
  uint64_t end = now_ns() + (200 + rng(&seed) % 4800) * 1000000ull;
  while (now_ns() < end) {
    uint64_t r = rng(&seed), i = r % KEYSPACE;
    switch ((r >> 32) % 8) {
    case 0:
    case 1:
      client_write(s, i);
      break;
    case 2: { /* a lookup that pins, then its unpin */
      kva_key k = key_of(i);
      kva_tier_hits th;
      if (kva_lookup(s, &k, 1, 1, &th) == KVA_OK && th.tier[0].hits) kva_unpin(s, &k, 1);
      break;
    }
    case 3: { /* a delete: the key is written again later, with the same bytes */
      kva_key k = key_of(i);
      int st;
      kva_delete(s, &k, 1, 0, &st);
      break;
    }
    default:
      client_read(s, i, 1 + (r >> 40) % 8);
    }
    atomic_fetch_add(&shared->ops, 1);
  }
  if (rng(&seed) % 4 == 0) _exit(0); /* a crash: no shutdown, no goodbye */
  kva_runtime_shutdown(rt);
  _exit(0);
}

static pid_t spawn_client(uint64_t seed) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) client_main(seed);
  return pid;
}

int main(int argc, char **argv) {
  double minutes = 30;
  int interval = 60, nclients = 6;
  uint64_t seed = 1;
  static const struct option opts[] = {{"minutes", 1, 0, 'm'},
                                       {"interval", 1, 0, 'i'},
                                       {"clients", 1, 0, 'c'},
                                       {"seed", 1, 0, 's'},
                                       {"version", 0, 0, 'V'},
                                       {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
  for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (o == 'm')
      minutes = atof(optarg);
    else if (o == 'i')
      interval = atoi(optarg);
    else if (o == 'c')
      nclients = atoi(optarg);
    else if (o == 's')
      seed = strtoull(optarg, NULL, 0);
    else if (o == 'V')
      return tool_version("kvsoak");
    else {
      fputs(usage, o == 'h' ? stdout : stderr);
      return o == 'h' ? 0 : 2;
    }
  }
  if (minutes <= 0 || interval <= 0 || nclients < 1 || nclients > MAX_CLIENTS || !seed) {
    fprintf(stderr, "kvsoak: minutes and interval > 0, 1 <= clients <= %d, seed != 0\n",
            MAX_CLIENTS);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  snprintf(sock, sizeof(sock), "/tmp/kvsoak-%d.sock", (int)getpid());
  int p[2];
  if (pipe(p) != 0) return 1;
  fflush(NULL);
  pid_t daemon = fork();
  if (daemon == 0) daemon_main(interval, p[1]);
  char c = 0;
  if (read(p[0], &c, 1) != 1 || c != 'r') {
    fprintf(stderr, "kvsoak: the daemon did not start\n");
    return 1;
  }
  printf("kvsoak: kvactd pid %d on %s, %d clients, %.1f minutes, mock tier failing 5%% of "
         "stores and loads\n",
         (int)daemon, sock, nclients, minutes);
  fflush(stdout);
  pid_t kids[MAX_CLIENTS];
  for (int i = 0; i < nclients; i++) kids[i] = spawn_client(rng(&seed) | 1);
  uint64_t end = now_ns() + (uint64_t)(minutes * 60e9);
  while (now_ns() < end) {
    usleep(100000);
    int k = (int)(rng(&seed) % (uint64_t)nclients);
    if (rng(&seed) % 30 == 0 && kids[k] > 0) { /* about one SIGKILL every 3 s */
      kill(kids[k], SIGKILL);
      atomic_fetch_add(&shared->kills, 1);
    }
    for (int i = 0; i < nclients; i++) /* those that ended are replaced */
      if (kids[i] > 0 && waitpid(kids[i], NULL, WNOHANG) == kids[i])
        kids[i] = spawn_client(rng(&seed) | 1);
  }
  for (int i = 0; i < nclients; i++) {
    kill(kids[i], SIGKILL);
    waitpid(kids[i], NULL, 0);
  }
  kill(daemon, SIGTERM);
  int st = 0;
  waitpid(daemon, &st, 0);
  unlink(sock);
  int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && atomic_load(&shared->wrong_bytes) == 0;
  printf("kvsoak: %s\n", ok ? "flat run, no wrong byte, no lock left" : "FAILED");
  return ok ? 0 : 1;
}
