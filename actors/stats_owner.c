/*
 * stats_owner.c — who owns a stats segment, and removing the segments of
 * owners that are gone (stats.h).
 *
 * A pid alone does not name a process for long: once its owner is reaped
 * the pid is free, and a later process may get it. So a segment's header
 * records its owner's start time and pid namespace too, and the owner of
 * /dev/shm/kvact.<pid>.<n> is:
 *  - unknown when the header is not complete or of another layout, names
 *    another pid, or comes from another pid namespace (a container sharing
 *    /dev/shm: its pids mean other processes here);
 *  - gone when kill(pid, 0) says ESRCH (EPERM means the pid exists, under
 *    another user), or when the process at pid started at another time;
 *  - exited when it is a zombie (dead, its parent not yet told): kept, so
 *    that kvinspect can still show its last counters as stale; it goes at
 *    the first runtime start after the reap;
 *  - live otherwise, including when /proc cannot say (trusting kill).
 *
 * A runtime start removes the gone ones (stats_reclaim): the cost is one
 * readdir of /dev/shm and a header read per kvact segment.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/log.h"
#include "actors/stats.h"

#define SHM_DIR "/dev/shm"
#define START_FIELD 22 /* starttime in /proc/<pid>/stat (proc(5)) */

int stats_proc_start(int pid, uint64_t *start, bool *zombie) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return n < 0 ? -errno : -ENOENT;
  buf[n] = '\0';
  /* "pid (comm) S ...": comm may hold spaces and parentheses */
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return -EINVAL;
  p += 2; /* field 3, the state */
  *zombie = *p == 'Z';
  for (int field = 3; field < START_FIELD; field++) {
    p = strchr(p, ' ');
    if (!p) return -EINVAL;
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return 0;
}

uint64_t stats_pidns_self(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

void stats_owner_fill(stats_header *h) {
  uint64_t start = 0;
  bool zombie;
  h->pid = (uint32_t)getpid();
  h->owner_start = stats_proc_start((int)getpid(), &start, &zombie) == 0 ? start : 0;
  h->owner_pidns = stats_pidns_self();
}

int stats_owner_state(const stats_header *h, int pid) {
  if (pid <= 0 || h->pid != (uint32_t)pid || h->owner_pidns != stats_pidns_self())
    return STATS_OWNER_UNKNOWN;
  if (kill(pid, 0) != 0 && errno == ESRCH) return STATS_OWNER_GONE;
  uint64_t start;
  bool zombie;
  if (stats_proc_start(pid, &start, &zombie) != 0) return STATS_OWNER_LIVE; /* cannot tell */
  if (h->owner_start && start != h->owner_start) return STATS_OWNER_GONE;   /* pid recycled */
  return zombie ? STATS_OWNER_EXITED : STATS_OWNER_LIVE;
}

const char *stats_owner_name(int state) {
  static const char *names[] = {"live", "exited", "gone", "unknown"};
  return state >= 0 && state <= STATS_OWNER_UNKNOWN ? names[state] : "unknown";
}

/* Whether s is one or more decimal digits and nothing else. */
static bool all_digits(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return n > 0;
}

/* The pid in "kvact.<pid>.<n>", or 0 when name is not a segment's. */
static int segment_pid(const char *name) {
  if (strncmp(name, "kvact.", 6) != 0) return 0;
  const char *pid = name + 6, *dot = strchr(pid, '.');
  if (!dot || dot - pid > 10 || !all_digits(pid, (size_t)(dot - pid))) return 0;
  if (!all_digits(dot + 1, strlen(dot + 1))) return 0;
  long v = strtol(pid, NULL, 10);
  return v > 0 && v <= 0x7fffffff ? (int)v : 0;
}

/* Reads a complete header of the current layout from one of our own
 * segments; false for anything else. */
static bool read_header(const char *name, stats_header *h) {
  char path[320];
  snprintf(path, sizeof path, SHM_DIR "/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h;
  close(fd);
  /* the creator stores the magic last (stats_open): a header with it is whole */
  return ok && h->magic == KVA_STATS_MAGIC && h->version == KVA_STATS_VERSION &&
         h->header_bytes == sizeof(stats_header) && h->slot_bytes == sizeof(stats_slot);
}

unsigned stats_reclaim(void) {
  DIR *d = opendir(SHM_DIR);
  if (!d) return 0;
  unsigned removed = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    int pid = segment_pid(e->d_name);
    stats_header h;
    if (!pid || !read_header(e->d_name, &h)) continue;
    if (stats_owner_state(&h, pid) != STATS_OWNER_GONE) continue;
    char name[300];
    snprintf(name, sizeof name, "/%s", e->d_name);
    /* another runtime starting now may have removed it first: ENOENT */
    if (shm_unlink(name) == 0) {
      removed++;
      LOG_INFO("removed " SHM_DIR "%s: the stats segment of process %d, which is gone", name, pid);
    }
  }
  closedir(d);
  return removed;
}
