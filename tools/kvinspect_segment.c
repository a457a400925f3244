/*
 * kvinspect_segment.c — finds /dev/shm/kvact.<pid>.* for a process, maps
 * each read-only after checking its header, and turns the slots into rows.
 * A segment whose process is dead (actors/stats_owner.c) is still read,
 * and marked stale.
 *
 * The runtime writes the segment while we read it: every counter is read
 * with one atomic load (torn-free), but rows are not a snapshot across
 * fields, so depth and dequeued may be a few messages apart.
 */
#include <ck_pr.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "actors/gauges.h"
#include "common/array.h"
#include "tools/kvinspect.h"

#define SHM_DIR "/dev/shm"

/* Loads a 64-bit counter the runtime may be writing (relaxed: each value
 * stands alone, the table needs no order between fields). */
static uint64_t load64(const uint64_t *p) {
  return ck_pr_load_64((uint64_t *)p);
}

static uint32_t load32(const uint32_t *p) {
  return ck_pr_load_32((uint32_t *)p);
}

/* Checks the header of a mapped segment; prints why it is unusable. */
static int check_header(const char *path, const void *map, size_t bytes) {
  const stats_header *h = map;
  if (bytes < sizeof(stats_header)) {
    fprintf(stderr, "kvinspect: %s: too small for a kvact stats segment (%zu bytes)\n", path,
            bytes);
    return -1;
  }
  /* load fence: the runtime stores the magic last, after a store fence */
  uint64_t magic = load64(&h->magic);
  ck_pr_fence_load();
  if (magic != KVA_STATS_MAGIC) {
    fprintf(stderr, "kvinspect: %s: not a kvact stats segment (bad magic)\n", path);
    return -1;
  }
  if (h->version != KVA_STATS_VERSION || h->header_bytes != sizeof(stats_header) ||
      h->slot_bytes != sizeof(stats_slot)) {
    fprintf(stderr,
            "kvinspect: %s: stats layout version %u (header %u, slot %u bytes); this kvinspect "
            "reads version %u (header %zu, slot %zu bytes)\n",
            path, h->version, h->header_bytes, h->slot_bytes, KVA_STATS_VERSION,
            sizeof(stats_header), sizeof(stats_slot));
    return -1;
  }
  if (bytes < h->header_bytes + (size_t)h->max_slots * h->slot_bytes) {
    fprintf(stderr, "kvinspect: %s: too small for its %u slots (%zu bytes)\n", path, h->max_slots,
            bytes);
    return -1;
  }
  return 0;
}

/* Maps one segment of pid into s (s->name already set). */
static int map_one(kvi_segment *s, int pid, int writable) {
  char path[128];
  snprintf(path, sizeof(path), SHM_DIR "/%s", s->name);
  int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EACCES || errno == EPERM)
      fprintf(stderr,
              "kvinspect: %s: permission denied (the segment is mode 0600: run as the "
              "process's user or root)\n",
              path);
    else
      fprintf(stderr, "kvinspect: %s: %s\n", path, strerror(errno));
    return -1;
  }
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size > 0)
    map =
        mmap(NULL, (size_t)st.st_size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    fprintf(stderr, "kvinspect: %s: too small for a kvact stats segment (%lld bytes)\n", path,
            (long long)st.st_size);
    return -1;
  }
  s->hdr = map;
  s->bytes = (size_t)st.st_size;
  if (check_header(path, map, s->bytes) != 0) return -1;
  s->owner = stats_owner_state(s->hdr, pid);
  s->slots = (const stats_slot *)((const char *)map + s->hdr->header_bytes);
  s->prev_dequeued = calloc(s->hdr->max_slots + 1, sizeof(uint64_t));
  s->prev_gauge0 = calloc(s->hdr->max_slots + 1, sizeof(uint64_t));
  s->rows = calloc(s->hdr->max_slots + 1, sizeof(kvi_row));
  if (!s->prev_dequeued || !s->prev_gauge0 || !s->rows) {
    fprintf(stderr, "kvinspect: out of memory\n");
    return -1;
  }
  return 0;
}

int kvi_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  uint64_t start;
  bool zombie;
  if (stats_proc_start(pid, &start, &zombie) != 0) return 1; /* no /proc: trust kill */
  return !zombie;
}

static int by_seq(const void *a, const void *b) {
  const kvi_segment *x = a, *y = b;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Collects the names kvact.<pid>.<n> under /dev/shm into a new array. */
static int find_names(int pid, kvi_segment **out, int *count) {
  DIR *d = opendir(SHM_DIR);
  if (!d) {
    fprintf(stderr, "kvinspect: " SHM_DIR ": %s\n", strerror(errno));
    return -1;
  }
  char prefix[32];
  int plen = snprintf(prefix, sizeof(prefix), "kvact.%d.", pid);
  kvi_segment *segs = NULL;
  size_t cap = 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    char *end;
    if (strncmp(e->d_name, prefix, (size_t)plen) != 0 || !e->d_name[plen]) continue;
    unsigned long seq = strtoul(e->d_name + plen, &end, 10);
    if (*end || strlen(e->d_name) >= sizeof(segs->name)) continue;
    if (!ARRAY_GROW(segs, &cap, (size_t)n + 1)) break;
    memset(&segs[n], 0, sizeof(segs[n]));
    memcpy(segs[n].name, e->d_name, strlen(e->d_name) + 1); /* checked to fit above */
    segs[n++].seq = (unsigned)seq;
  }
  closedir(d);
  if (n) qsort(segs, (size_t)n, sizeof(*segs), by_seq);
  *out = segs;
  *count = n;
  return 0;
}

int kvi_segment_count(int pid) {
  kvi_segment *segs;
  int n;
  if (find_names(pid, &segs, &n) != 0) return -1;
  free(segs);
  return n;
}

int kvi_stale(const kvi_segment *s) {
  return s->owner == STATS_OWNER_EXITED || s->owner == STATS_OWNER_GONE;
}

int kvi_open_all(int pid, kvi_segment **out, int *count, int writable) {
  if (find_names(pid, out, count) != 0) return -1;
  if (*count == 0) {
    fprintf(stderr,
            "kvinspect: process %d has no kvact stats segment (" SHM_DIR "/kvact.%d.*): not a "
            "kvact process, or runtime.stats = false\n",
            pid, pid);
    free(*out);
    return -1;
  }
  for (int i = 0; i < *count; i++) {
    if (map_one(&(*out)[i], pid, writable) != 0) {
      kvi_close_all(*out, *count);
      return -1;
    }
  }
  return 0;
}

void kvi_close_all(kvi_segment *segs, int count) {
  for (int i = 0; i < count; i++) {
    if (segs[i].hdr) munmap((void *)segs[i].hdr, segs[i].bytes);
    free(segs[i].prev_dequeued);
    free(segs[i].prev_gauge0);
    free(segs[i].rows);
  }
  free(segs);
}

/* Slots claimed so far, never more than the segment holds. */
static uint32_t slot_count(const kvi_segment *s) {
  uint32_t n = load32(&s->hdr->nslots);
  return n < s->hdr->max_slots ? n : s->hdr->max_slots;
}

void kvi_mark(kvi_segment *s) {
  uint32_t n = slot_count(s);
  for (uint32_t i = 0; i < n; i++) {
    s->prev_dequeued[i] = load64(&s->slots[i].dequeued);
    s->prev_gauge0[i] = load64(&s->slots[i].gauge[0]);
  }
}

/* Upper bound in ns of the bucket holding quantile q (permille) of the
 * receive times: bucket b holds [2^b, 2^(b+1)) ns, so the answer is exact
 * to within a factor of two. 0 when the actor never received. */
static uint64_t hist_quantile(const uint64_t *hist, unsigned permille) {
  uint64_t counts[KVA_STATS_HIST], total = 0;
  for (int b = 0; b < KVA_STATS_HIST; b++) total += counts[b] = load64(&hist[b]);
  if (total == 0) return 0;
  uint64_t rank = (total * permille + 999) / 1000, seen = 0;
  for (int b = 0; b < KVA_STATS_HIST; b++) {
    seen += counts[b];
    if (seen >= rank) return 2ull << b;
  }
  return 2ull << (KVA_STATS_HIST - 1);
}

static const char *kind_name(uint32_t kind) {
  return kind == STATS_KIND_PINNED ? "pinned" : kind == STATS_KIND_PORT ? "port" : "actor";
}

/* The ring's depth: p_tail and c_head are the consumer's and producers'
 * own counters, each read once; a reader racing both may see a transient
 * value, clamped to the ring's size. */
static uint64_t ring_depth(const ck_ring_t *r) {
  uint32_t tail = load32((const uint32_t *)&r->p_tail);
  uint32_t head = load32((const uint32_t *)&r->c_head);
  uint32_t depth = tail - head, size = load32((const uint32_t *)&r->size);
  return depth > size ? size : depth;
}

static double rate_of(uint64_t now, uint64_t prev, double seconds) {
  return seconds > 0 && now >= prev ? (double)(now - prev) / seconds : 0;
}

/* The actor's label and its named gauges (gauges.h); none without a label. */
static void fill_gauges(kvi_row *r, const stats_slot *sl, uint64_t prev0, double seconds) {
  stats_label_copy c;
  r->ngauges = 0;
  if (!stats_label_read(sl, &c) || !c.label[0]) {
    r->label[0] = '\0';
    return;
  }
  memcpy(r->label, c.label, sizeof(r->label));
  char *save = NULL;
  for (char *w = strtok_r(c.gauge_names, " ", &save); w && r->ngauges < KVA_STATS_GAUGES;
       w = strtok_r(NULL, " ", &save))
    memcpy(r->gauge_name[r->ngauges++], w, strlen(w) + 1); /* w is shorter than the array */
  for (unsigned i = 0; i < KVA_STATS_GAUGES; i++) r->gauge[i] = load64(&sl->gauge[i]);
  r->gauge0_rate = rate_of(r->gauge[0], prev0, seconds);
}

static void fill_row(kvi_row *r, const stats_slot *sl, uint64_t prev, double seconds, int stale) {
  memcpy(r->name, sl->name, sizeof(r->name));
  r->name[sizeof(r->name) - 1] = '\0';
  r->kind = kind_name(sl->kind);
  r->state = load32(&sl->state) == STATS_SLOT_STOPPED ? "stopped" : stale ? "stale" : "live";
  r->depth = ring_depth(&sl->ring);
  r->peak_depth = load64(&sl->peak_depth);
  r->dequeued = load64(&sl->dequeued);
  /* load fence: the consumer stores enqueued, a store fence, then dequeued */
  ck_pr_fence_load();
  r->enqueued = load64(&sl->enqueued);
  r->rate = rate_of(r->dequeued, prev, seconds);
  r->p50_ns = hist_quantile(sl->hist, 500);
  r->p99_ns = hist_quantile(sl->hist, 990);
  r->overflowed = load64(&sl->overflowed);
  r->backpressure = load64(&sl->backpressure);
  r->turns = load64(&sl->turns);
}

void kvi_sample(kvi_segment *s, double seconds) {
  uint32_t n = slot_count(s);
  s->nrows = 0;
  for (uint32_t i = 0; i < n; i++) {
    const stats_slot *sl = &s->slots[i];
    /* load fence: name and kind are stored, a store fence, then the state */
    if (load32(&sl->state) == STATS_SLOT_FREE) continue;
    ck_pr_fence_load();
    kvi_row *r = &s->rows[s->nrows++];
    fill_row(r, sl, s->prev_dequeued[i], seconds, kvi_stale(s));
    fill_gauges(r, sl, s->prev_gauge0[i], seconds);
  }
  uint64_t start = s->hdr->start_ns;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* the runtime's clock, system-wide */
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  s->uptime_s = now > start ? (double)(now - start) / 1e9 : 0;
}

static int sort_key;

static int cmp_u64_desc(uint64_t a, uint64_t b) {
  return (a < b) - (a > b);
}

static int cmp_rows(const void *pa, const void *pb) {
  const kvi_row *a = pa, *b = pb;
  int c = 0;
  if (sort_key == KVI_SORT_DEPTH) c = cmp_u64_desc(a->depth, b->depth);
  if (sort_key == KVI_SORT_RATE) c = (a->rate < b->rate) - (a->rate > b->rate);
  if (sort_key == KVI_SORT_P99) c = cmp_u64_desc(a->p99_ns, b->p99_ns);
  return c ? c : strcmp(a->name, b->name);
}

void kvi_sort(kvi_segment *s, int key) {
  sort_key = key;
  qsort(s->rows, s->nrows, sizeof(kvi_row), cmp_rows);
}
