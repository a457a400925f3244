/*
 * disk_open.c — the disk tier's file: open or create it, size it, check
 * the superblock, format, and close it at stop (disk_internal.h).
 *
 * Everything here runs at start (in the factory, on the thread calling
 * kva_runtime_start) or at stop (on_stop), where blocking is allowed, so
 * it uses plain pread/pwrite on DISK_BLOCK-aligned buffers (O_DIRECT).
 *
 * A file whose first block is all zeros is taken as never formatted (we
 * create files that way: the superblock is written once slot_bytes is
 * known). An existing file keeps its size; capacity_bytes sizes new ones.
 *
 * A temporary tier (path "") never has a name a crash could leave behind:
 * it is an O_TMPFILE in $TMPDIR, or, where the filesystem has no
 * O_TMPFILE, a mkostemp file unlinked as soon as it is open (before it is
 * sized, so even a crash in between leaves an empty file). Either way the
 * kernel frees its blocks when the last descriptor closes, killed or not.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "l2/adapters/disk/disk_internal.h"

#define MIN_SLOT (2 * DISK_BLOCK) /* a header block and one payload block */

/* open(2). A test that plays a filesystem refusing O_DIRECT or O_TMPFILE
 * compiles this file into itself with -DDISK_OPEN_HOOK=<its function
 * pointer> (tests/defs.bzl, kva_disk_open_hooked_test): the library has no
 * hook. */
#ifdef DISK_OPEN_HOOK
extern int (*DISK_OPEN_HOOK)(const char *path, int flags, mode_t mode);
#define DISK_SYS_OPEN DISK_OPEN_HOOK
#else
#define DISK_SYS_OPEN open
#endif

/* ---- blocking I/O ------------------------------------------------------- */

int disk_pread(disk *d, void *buf, uint64_t len, uint64_t off) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = pread(d->fd, (char *)buf + done, len - done, (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : -EIO; /* EOF inside the tier: a short file */
    done += (uint64_t)n;
  }
  return 0;
}

int disk_pwrite(disk *d, const void *buf, uint64_t len, uint64_t off) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = pwrite(d->fd, (const char *)buf + done, len - done, (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : -EIO;
    done += (uint64_t)n;
  }
  return 0;
}

static void *block_alloc(uint64_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, DISK_BLOCK, (size_t)disk_round_up(bytes)) != 0) return NULL;
  memset(p, 0, (size_t)disk_round_up(bytes));
  return p;
}

/* Seals and writes the superblock, then fdatasync. */
static int disk_write_super(disk *d) {
  disk_super *b = block_alloc(DISK_BLOCK);
  if (!b) return -ENOMEM;
  disk_super_seal(&d->super);
  *b = d->super;
  int rc = disk_pwrite(d, b, DISK_BLOCK, 0);
  if (rc == 0 && fdatasync(d->fd) != 0) rc = -errno;
  free(b);
  return rc;
}

/* ---- open --------------------------------------------------------------- */

/* Why open(2) failed, in words a user can act on. */
static void open_error(const disk *d, int e, char *err, size_t errlen) {
  const char *p = d->cfg.path;
  if (e == ENOENT)
    snprintf(err, errlen, "path %s: the directory does not exist", p);
  else if (e == EACCES || e == EPERM)
    snprintf(err, errlen, "path %s: permission denied (it needs read and write access)", p);
  else if (e == EISDIR)
    snprintf(err, errlen, "path %s: is a directory (expected a file or a block device)", p);
  else
    snprintf(err, errlen, "path %s: cannot open: %s", p, strerror(e));
}

/* One user at a time: two runtimes (or a runtime and `kvconf fsck
 * --repair`, which takes the same lock) writing one tier would corrupt
 * each other's slots. The lock goes with the descriptor — but a process
 * that just died with I/O in flight keeps its file (and lock) until the
 * kernel has torn its io_uring down, after the process is gone: a busy
 * lock is retried for a second before the tier is called in use. */
static int lock_file(disk *d, char *err, size_t errlen) {
  int e = 0;
  for (int i = 0; i < 100; i++) {
    if (flock(d->fd, LOCK_EX | LOCK_NB) == 0) return KVA_OK;
    e = errno;
    if (e != EWOULDBLOCK) break;
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  snprintf(err, errlen, "%s: %s", d->cfg.path,
           e == EWOULDBLOCK ? "in use by another process (a kvact runtime or kvconf fsck --repair)"
                            : strerror(e));
  close(d->fd);
  d->fd = -1;
  return KVA_ECONFIG;
}

/* Opens (creating when missing) with O_DIRECT when asked; a filesystem
 * that refuses O_DIRECT (EINVAL) gets buffered I/O and one warning. */
static int open_file(disk *d, char *err, size_t errlen) {
  for (;;) {
    int flags = O_RDWR | O_CREAT | O_CLOEXEC | (d->direct ? O_DIRECT : 0);
    d->fd = DISK_SYS_OPEN(d->cfg.path, flags, 0600);
    if (d->fd >= 0) return lock_file(d, err, errlen);
    int e = errno;
    if (e == EINVAL && d->direct) {
      kva_log(KVA_LOG_WARN,
              "%s: %s: the filesystem refuses O_DIRECT; using buffered I/O (page cache)",
              d->cfg.name, d->cfg.path);
      d->direct = false;
      continue;
    }
    open_error(d, e, err, errlen);
    return KVA_ECONFIG;
  }
}

/* Whether an open of O_TMPFILE failed because the filesystem (or kernel)
 * has none, rather than for a reason a named file would share. */
static bool no_tmpfile(int e) {
  return e == EOPNOTSUPP || e == EISDIR || e == EINVAL;
}

/* An unnamed file in dir; -errno when O_TMPFILE cannot be used there.
 * O_DIRECT refused at open (EINVAL either way) is told apart by trying
 * once more without it. */
static int open_unnamed(disk *d, const char *dir) {
  int base = O_TMPFILE | O_RDWR | O_CLOEXEC;
  d->fd = DISK_SYS_OPEN(dir, base | (d->direct ? O_DIRECT : 0), 0600);
  if (d->fd >= 0) return 0;
  int e = errno;
  if (e != EINVAL || !d->direct) return -e;
  d->fd = DISK_SYS_OPEN(dir, base, 0600);
  if (d->fd < 0) return -errno;
  kva_log(KVA_LOG_WARN, "%s: %s: the filesystem refuses O_DIRECT; using buffered I/O (page cache)",
          d->cfg.name, dir);
  d->direct = false;
  return 0;
}

/* No O_TMPFILE: a named file, opened as any tier's, then unlinked. */
static int open_named_then_unlink(disk *d, const char *dir, char *err, size_t errlen) {
  snprintf(d->cfg.path, sizeof(d->cfg.path), "%s/kvact-%s-XXXXXX", dir, d->cfg.name);
  int fd = mkostemp(d->cfg.path, O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create a temporary file in %s: %s", dir, strerror(errno));
    return KVA_ECONFIG;
  }
  close(fd); /* reopened with the tier's flags */
  int rc = open_file(d, err, errlen);
  if (unlink(d->cfg.path) != 0 && rc == KVA_OK)
    kva_log(KVA_LOG_WARN, "%s: cannot unlink the temporary file %s: %s", d->cfg.name, d->cfg.path,
            strerror(errno));
  return rc;
}

/* A temporary tier's file in $TMPDIR (or /tmp). It has no name to show,
 * so messages name the directory. */
static int open_temp(disk *d, char *err, size_t errlen) {
  char dir[PATH_MAX - 64];
  const char *env = getenv("TMPDIR");
  if (snprintf(dir, sizeof(dir), "%s", env && *env ? env : "/tmp") >= (int)sizeof(dir)) {
    snprintf(err, errlen, "TMPDIR: longer than %zu bytes", sizeof(dir) - 1);
    return KVA_ECONFIG;
  }
  d->temp = true;
  int rc = open_unnamed(d, dir);
  if (rc != 0 && no_tmpfile(-rc))
    rc = open_named_then_unlink(d, dir, err, errlen);
  else if (rc != 0)
    snprintf(err, errlen, "cannot create a temporary file in %s: %s", dir, strerror(-rc));
  if (rc != 0) return KVA_ECONFIG;
  snprintf(d->cfg.path, sizeof(d->cfg.path), "%s (temporary file)", dir);
  return KVA_OK;
}

/* The smallest tier: superblock, one index block, one slot. */
static uint64_t min_bytes(const disk *d) {
  uint64_t slot = d->cfg.slot_bytes ? d->cfg.slot_bytes : MIN_SLOT;
  return DISK_INDEX_OFFSET + DISK_BLOCK + slot;
}

/* The size of a block device, or of a file (preallocated when new or empty). */
static int size_file(disk *d, char *err, size_t errlen) {
  struct stat st;
  if (fstat(d->fd, &st) != 0) {
    snprintf(err, errlen, "path %s: fstat: %s", d->cfg.path, strerror(errno));
    return KVA_ECONFIG;
  }
  if (S_ISBLK(st.st_mode)) {
    d->blockdev = true;
    if (ioctl(d->fd, BLKGETSIZE64, &d->file_bytes) != 0) {
      snprintf(err, errlen, "path %s: BLKGETSIZE64: %s", d->cfg.path, strerror(errno));
      return KVA_ECONFIG;
    }
    return KVA_OK;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "path %s: not a regular file or a block device", d->cfg.path);
    return KVA_ECONFIG;
  }
  d->file_bytes = (uint64_t)st.st_size;
  if (d->file_bytes) return KVA_OK; /* an existing file keeps its size */
  if (d->cfg.capacity < min_bytes(d)) {
    snprintf(err, errlen, "capacity_bytes: %llu bytes hold no slot (a tier needs at least %llu)",
             (unsigned long long)d->cfg.capacity, (unsigned long long)min_bytes(d));
    return KVA_ECONFIG;
  }
  int rc = posix_fallocate(d->fd, 0, (off_t)d->cfg.capacity);
  if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(d->fd, (off_t)d->cfg.capacity) ? errno : 0;
  if (rc) {
    snprintf(err, errlen, "path %s: cannot preallocate %llu bytes: %s", d->cfg.path,
             (unsigned long long)d->cfg.capacity, strerror(rc));
    return KVA_ECONFIG;
  }
  d->file_bytes = d->cfg.capacity;
  return KVA_OK;
}

/* Reads block 0; *blank = all zeros. Detects a filesystem that accepted
 * O_DIRECT at open but refuses it on I/O, and falls back as open does. */
static int read_super(disk *d, bool *blank, char *err, size_t errlen) {
  uint8_t *b = block_alloc(DISK_BLOCK);
  if (!b) return KVA_ENOMEM;
  int rc = disk_pread(d, b, DISK_BLOCK, 0);
  if (rc == -EINVAL && d->direct) {
    kva_log(KVA_LOG_WARN,
            "%s: %s: O_DIRECT reads fail with EINVAL; using buffered I/O (page cache)", d->cfg.name,
            d->cfg.path);
    d->direct = false;
    if (fcntl(d->fd, F_SETFL, fcntl(d->fd, F_GETFL) & ~O_DIRECT) != 0) rc = -errno;
    if (rc == -EINVAL) rc = disk_pread(d, b, DISK_BLOCK, 0);
  }
  if (rc == 0) {
    memcpy(&d->super, b, sizeof(d->super));
    *blank = disk_block_is_zero(b, DISK_BLOCK);
  } else {
    snprintf(err, errlen, "path %s: cannot read the superblock: %s", d->cfg.path, strerror(-rc));
  }
  free(b);
  return rc == 0 ? KVA_OK : KVA_ECONFIG;
}

int disk_format(disk *d, uint64_t slot_bytes) {
  uint64_t seq = d->super.seq, bytes = d->file_bytes; /* a reformatted file keeps counting up */
  uint64_t most = DISK_NONE - 1;                      /* the index counts slots in 32 bits */
  if (bytes / slot_bytes > most)
    bytes = DISK_INDEX_OFFSET + disk_index_bytes(most) + most * slot_bytes;
  if (disk_super_init(&d->super, bytes, slot_bytes) != KVA_OK) {
    d->super.seq = seq;
    return KVA_ENOMEM;
  }
  d->super.seq = seq;
  disk_index_destroy(&d->ix);
  if (disk_index_init(&d->ix, (uint32_t)d->super.nslots) != KVA_OK) return KVA_ENOMEM;
  /* an empty index first: every slot the file held is dead under the new
   * superblock (the generation rule of disk_format.h) */
  int rc = disk_save_index(d, false);
  if (rc == 0 && fdatasync(d->fd) != 0) rc = -errno;
  if (rc == 0) rc = disk_write_super(d);
  if (rc != 0) {
    kva_log(KVA_LOG_ERROR, "%s: %s: cannot format: %s", d->cfg.name, d->cfg.path, strerror(-rc));
    disk_index_destroy(&d->ix);
    return KVA_EIO;
  }
  d->formatted = true;
  return KVA_OK;
}

/* persist = false: whatever the file held is discarded at start. */
static int format_fresh(disk *d, char *err, size_t errlen) {
  uint64_t slot = d->cfg.slot_bytes ? d->cfg.slot_bytes : d->super.slot_bytes;
  int rc = disk_format(d, slot);
  if (rc != KVA_OK)
    snprintf(err, errlen, "path %s: cannot format slots of %llu bytes: %s", d->cfg.path,
             (unsigned long long)slot, kva_strerror(rc));
  return rc == KVA_OK ? KVA_OK : KVA_ECONFIG;
}

/* A formatted file: its geometry wins over the config; persist = false
 * starts over (keeping the sequence numbers growing). */
static int open_formatted(disk *d, char *err, size_t errlen) {
  char why[200] = "";
  if (disk_super_check(&d->super, d->file_bytes, why, sizeof(why)) != KVA_OK) {
    snprintf(err, errlen, "path %s: %s", d->cfg.path, why[0] ? why : "not a kvact disk tier");
    return KVA_ECONFIG;
  }
  if (d->super.nslots >= DISK_NONE) {
    snprintf(err, errlen, "path %s: %llu slots: at most %u are supported", d->cfg.path,
             (unsigned long long)d->super.nslots, DISK_NONE - 1);
    return KVA_ECONFIG;
  }
  if (d->cfg.slot_bytes && d->cfg.slot_bytes != d->super.slot_bytes && d->cfg.persist)
    kva_log(KVA_LOG_INFO, "%s: %s keeps its slots of %llu bytes (slot_bytes %llu ignored)",
            d->cfg.name, d->cfg.path, (unsigned long long)d->super.slot_bytes,
            (unsigned long long)d->cfg.slot_bytes);
  if (!d->cfg.persist) return format_fresh(d, err, errlen);
  if (disk_index_init(&d->ix, (uint32_t)d->super.nslots) != KVA_OK) {
    snprintf(err, errlen, "%s: out of memory for %llu slots", d->cfg.name,
             (unsigned long long)d->super.nslots);
    return KVA_ENOMEM;
  }
  d->formatted = true;
  int rc = disk_recover(d, err, errlen);
  if (rc != KVA_OK) return rc;
  d->super.clean = 0; /* from now on a crash must be detected */
  if ((rc = disk_write_super(d)) != 0) {
    snprintf(err, errlen, "path %s: cannot write the superblock: %s", d->cfg.path, strerror(-rc));
    return KVA_ECONFIG;
  }
  return KVA_OK;
}

int disk_open(disk *d, char *err, size_t errlen) {
  bool blank = false;
  d->direct = d->cfg.o_direct;
  int rc = d->cfg.path[0] ? open_file(d, err, errlen) : open_temp(d, err, errlen);
  if (rc == KVA_OK) rc = size_file(d, err, errlen);
  if (rc != KVA_OK) return rc;
  if (d->file_bytes < min_bytes(d)) {
    snprintf(err, errlen, "path %s: %llu bytes, smaller than one slot (a tier needs %llu)",
             d->cfg.path, (unsigned long long)d->file_bytes, (unsigned long long)min_bytes(d));
    return KVA_ECONFIG;
  }
  rc = read_super(d, &blank, err, errlen);
  if (rc == KVA_OK && !blank) rc = open_formatted(d, err, errlen);
  if (rc != KVA_OK) return rc;
  if (blank) memset(&d->super, 0, sizeof(d->super));
  if (!d->formatted && d->cfg.slot_bytes) {
    rc = disk_format(d, d->cfg.slot_bytes);
    if (rc == KVA_ENOMEM)
      snprintf(err, errlen, "path %s: %llu bytes hold no slot of %llu bytes", d->cfg.path,
               (unsigned long long)d->file_bytes, (unsigned long long)d->cfg.slot_bytes);
    else if (rc != KVA_OK)
      snprintf(err, errlen, "path %s: cannot write the superblock", d->cfg.path);
    if (rc != KVA_OK) return KVA_ECONFIG;
  }
  return KVA_OK;
}

/* ---- close -------------------------------------------------------------- */

/* Clean stop: the index region, then (once it is durable) clean = 1. With
 * persist = false the index is saved empty, so the next start finds a
 * clean, empty tier instead of scanning old slots back in. */
static void persist(disk *d) {
  int rc = disk_save_index(d, d->cfg.persist);
  if (rc == 0 && fdatasync(d->fd) != 0) rc = -errno;
  if (rc == 0) {
    d->super.clean = 1;
    rc = disk_write_super(d);
  }
  if (rc != 0)
    kva_log(KVA_LOG_ERROR, "%s: %s: cannot save the index (%s); the next start scans every slot",
            d->cfg.name, d->cfg.path, strerror(-rc));
}

/* A temporary file has no name: closing it frees it. */
void disk_close(disk *d) {
  if (d->fd < 0) return;
  if (d->formatted && !d->temp) persist(d);
  close(d->fd);
  d->fd = -1;
}
