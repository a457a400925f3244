/*
 * kvconf_fsck.c — `kvconf fsck PATH [--repair]`: checks a disk tier (file or
 * block device) slot by slot, and with --repair drops the bad slots and
 * rebuilds the index region from the good ones.
 *
 * Which slots are live follows the generation rule of l2/disk_format.h,
 * as the adapter's start does: on a tier that stopped cleanly the index
 * region lists the live slots; on one that did not, a slot above super.seq
 * is live when it verifies, one at or below it only when the index lists
 * it. A slot is
 *   free        its header block is all zero or lacks OBJECT_MAGIC (or,
 *               on a clean tier, holds a broken header the index does not
 *               list: the adapter never reads it)
 *   valid       live: intact header (magic, version, checksum), sane
 *               fields, the payload's xxh3-64 matches, and no live copy of
 *               its key has a higher seq
 *   superseded  an intact header the rule makes dead: a lower-seq copy of
 *               a live key, or a slot the index no longer lists (evicted,
 *               replaced, discarded). Free space, not damage
 *   torn        would be live, but the payload checksum does not match (a
 *               store killed between payload and header, a flipped byte)
 *   mismatched  magic present but the header is not intact, or its fields
 *               are nonsense (seq 0, invalid key, length over the capacity)
 * When the superblock says clean, the index region and super.seq must also
 * agree with the slots (the adapter trusts them without a scan): an entry
 * naming a slot that does not hold it, or a slot seq above super.seq, is
 * damage.
 *
 * Repair is ordered so that a crash part way leaves a tier the adapter
 * rescans: clean = 0 goes to disk first, then the bad headers are zeroed
 * and the index rewritten to list exactly the valid slots, fsync, and only
 * then clean = 1 with super.seq at the highest seq of any intact header
 * (so every copy left unlisted is dead, and no seq is issued twice). It
 * takes an exclusive flock (O_EXCL for a block device) and refuses a tier
 * that is in use.
 */
#include "tools/kvconf_fsck.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "common/array.h"
#include "common/key.h"
#include "l2/adapters/disk/disk_format.h"

#define FSCK_CHUNK (1u << 20)                                    /* payload read size */
#define FSCK_WINDOW (DISK_BLOCK / sizeof(disk_index_entry) * 16) /* index entries per read */
#define FSCK_MAX_LINES 50                                        /* bad slots listed by name */

typedef enum { SLOT_FREE, SLOT_VALID, SLOT_SUPERSEDED, SLOT_TORN, SLOT_MISMATCHED } slot_state;

/* A slot whose payload verified: live unless a copy of its key with a
 * higher seq verified too. */
typedef struct live {
  uint64_t slot, seq, key_hash;
  kva_key key;
} live;

typedef struct fsck {
  const char *path;
  int fd;
  bool repair;
  uint64_t file_bytes;
  disk_super super;
  unsigned char super_block[DISK_BLOCK]; /* block 0 as read (written back around super) */
  unsigned char block[DISK_BLOCK];       /* the header block of the slot being checked */
  unsigned char *chunk;                  /* FSCK_CHUNK bytes of payload */
  XXH3_state_t *sum;
  disk_index_entry index[FSCK_WINDOW]; /* the index entries of the current window */
  uint64_t count[5];                   /* per slot_state */
  uint64_t stale;                      /* index entries that disagree (clean only) */
  uint64_t max_seq;                    /* highest seq of an intact header */
  uint64_t listed;                     /* bad slots printed */
  live *live;                          /* the slots that verified, in slot order */
  size_t nlive, caplive;
} fsck;

/* ---- I/O ---- */

static int io_fail(fsck *f, const char *what, uint64_t off) {
  fprintf(stderr, "kvconf: %s: %s at offset %" PRIu64 ": %s\n", f->path, what, off,
          errno ? strerror(errno) : "short transfer");
  return -1;
}

static int read_at(fsck *f, void *buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    errno = 0;
    ssize_t r = pread(f->fd, (char *)buf + done, len - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return io_fail(f, "read", off + done);
    done += (size_t)r;
  }
  return 0;
}

static int write_at(fsck *f, const void *buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    errno = 0;
    ssize_t r = pwrite(f->fd, (const char *)buf + done, len - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return io_fail(f, "write", off + done);
    done += (size_t)r;
  }
  return 0;
}

static int sync_fd(fsck *f) {
  if (fsync(f->fd) == 0) return 0;
  return io_fail(f, "fsync", 0);
}

/* Opens read-only, or for repair read-write and exclusively: a live
 * adapter must not have its slots zeroed under it. */
static int open_tier(fsck *f) {
  struct stat st;
  int flags = f->repair ? O_RDWR : O_RDONLY;
  if (stat(f->path, &st) == 0 && S_ISBLK(st.st_mode) && f->repair) flags |= O_EXCL;
  f->fd = open(f->path, flags | O_CLOEXEC);
  if (f->fd < 0) {
    fprintf(stderr, "kvconf: %s: %s\n", f->path, strerror(errno));
    return -1;
  }
  if (f->repair && flock(f->fd, LOCK_EX | LOCK_NB) != 0) {
    fprintf(stderr, "kvconf: %s: in use (%s); stop kvact first\n", f->path, strerror(errno));
    return -1;
  }
  off_t end = lseek(f->fd, 0, SEEK_END); /* works for block devices too */
  if (end < 0) return io_fail(f, "seek", 0);
  f->file_bytes = (uint64_t)end;
  return 0;
}

/* ---- the superblock ---- */

static int super_read(fsck *f) {
  char why[256];
  if (f->file_bytes < DISK_BLOCK) {
    fprintf(stderr, "kvconf: %s: not a kvact disk tier (%" PRIu64 " bytes)\n", f->path,
            f->file_bytes);
    return -1;
  }
  if (read_at(f, f->super_block, DISK_BLOCK, 0)) return -1;
  memcpy(&f->super, f->super_block, sizeof f->super);
  if (disk_super_check(&f->super, f->file_bytes, why, sizeof why) != KVA_OK) {
    fprintf(stderr, "kvconf: %s: %s\n", f->path, why);
    return -1;
  }
  return 0;
}

/* Seals and writes the superblock (the rest of its block as it was). */
static int super_write(fsck *f) {
  disk_super_seal(&f->super);
  memcpy(f->super_block, &f->super, sizeof f->super);
  if (write_at(f, f->super_block, DISK_BLOCK, 0)) return -1;
  return sync_fd(f);
}

/* ---- one slot ---- */

static int payload_sum(fsck *f, uint64_t off, uint64_t length, uint64_t *sum) {
  XXH3_64bits_reset(f->sum);
  for (uint64_t done = 0; done < length;) {
    size_t n = length - done < FSCK_CHUNK ? (size_t)(length - done) : FSCK_CHUNK;
    if (read_at(f, f->chunk, n, off + done)) return -1;
    XXH3_64bits_update(f->sum, f->chunk, n);
    done += n;
  }
  *sum = XXH3_64bits_digest(f->sum);
  return 0;
}

/* Header fields an intact header may still get wrong; NULL when sane. */
static const char *header_nonsense(const fsck *f, const object_header *h, char *buf, size_t len) {
  if (h->seq == 0) return "seq 0";
  if (h->seq >= DISK_SEQ_LIMIT) return "seq past any a writer issues";
  if (!key_valid(&h->key)) return "invalid key";
  if (h->length <= disk_slot_capacity(f->super.slot_bytes)) return NULL;
  snprintf(buf, len, "length %" PRIu64 " over the slot's %" PRIu64, h->length,
           disk_slot_capacity(f->super.slot_bytes));
  return buf;
}

/* An intact, sane header: whether the generation rule may make it live
 * (then its payload decides), or says it is dead. */
static bool may_live(const fsck *f, const object_header *h, const disk_index_entry *e) {
  if (disk_entry_names(e, h)) return true;
  return !f->super.clean && h->seq > f->super.seq; /* written by a run that crashed */
}

/* Reads slot i and classifies it against its index entry e; *why says
 * what is wrong with a bad one. -1 on an I/O error. */
static int slot_check(fsck *f, uint64_t i, const disk_index_entry *e, object_header *h,
                      slot_state *st, const char **why, char *buf, size_t len) {
  uint64_t off = disk_slot_offset(&f->super, i), magic, sum;
  if (read_at(f, f->block, DISK_BLOCK, off)) return -1;
  memcpy(&magic, f->block, sizeof magic);
  memcpy(h, f->block, sizeof *h);
  *st = SLOT_MISMATCHED;
  if (disk_block_is_zero(f->block, DISK_BLOCK) || magic != OBJECT_MAGIC)
    *st = SLOT_FREE;
  else if (h->version != OBJECT_VERSION)
    snprintf(buf, len, "header version %" PRIu32, h->version), *why = buf;
  else if (!object_header_valid(h))
    *why = "header checksum mismatch";
  else if ((*why = header_nonsense(f, h, buf, len)) != NULL)
    ;
  else if (!may_live(f, h, e))
    *st = SLOT_SUPERSEDED;
  else {
    if (payload_sum(f, off + DISK_BLOCK, h->length, &sum)) return -1;
    *st = sum == h->payload_sum ? SLOT_VALID : SLOT_TORN;
    *why = "payload checksum mismatch";
  }
  if (*st == SLOT_MISMATCHED && f->super.clean && e->seq == 0) *st = SLOT_FREE; /* never read */
  return 0;
}

static void slot_report(fsck *f, uint64_t i, const object_header *h, slot_state st,
                        const char *why) {
  char key[160] = "";
  if (f->listed++ == FSCK_MAX_LINES) printf("(more bad slots not listed)\n");
  if (f->listed > FSCK_MAX_LINES) return;
  if (st == SLOT_TORN) key_format(&h->key, key, sizeof key);
  printf("%sslot %" PRIu64 ": %s (%s)", f->repair ? "dropped " : "", i,
         st == SLOT_TORN ? "torn" : "mismatched", why);
  if (st == SLOT_TORN) printf(" seq %" PRIu64 " key %s", h->seq, key);
  putchar('\n');
}

static int live_add(fsck *f, uint64_t i, const object_header *h) {
  if (!ARRAY_GROW(f->live, &f->caplive, f->nlive + 1)) {
    fprintf(stderr, "kvconf: out of memory\n");
    return -1;
  }
  f->live[f->nlive++] = (live){i, h->seq, key_hash(&h->key), h->key};
  return 0;
}

/* Checks slot i against its index entry e; with repair zeroes it when bad.
 * A slot that verified joins f->live (whether it wins is decided later). */
static int slot_visit(fsck *f, uint64_t i, const disk_index_entry *e) {
  object_header h;
  slot_state st;
  const char *why = "";
  char buf[128];
  if (slot_check(f, i, e, &h, &st, &why, buf, sizeof buf)) return -1;
  f->count[st]++;
  bool intact = st == SLOT_VALID || st == SLOT_SUPERSEDED || st == SLOT_TORN;
  if (intact && h.seq > f->max_seq) f->max_seq = h.seq;
  bool bad = st == SLOT_TORN || st == SLOT_MISMATCHED;
  if (bad)
    slot_report(f, i, &h, st, why); /* its index entry is stale too: not counted twice */
  else if (f->super.clean && e->seq != 0 && !(intact && disk_entry_names(e, &h)))
    f->stale++;
  if (st == SLOT_VALID && live_add(f, i, &h)) return -1;
  if (!f->repair || !bad) return 0;
  memset(f->block, 0, DISK_BLOCK);
  return write_at(f, f->block, DISK_BLOCK, disk_slot_offset(&f->super, i));
}

/* Every slot, a window of index entries at a time (the index of a big
 * device with small slots does not fit in memory whole). */
static int scan(fsck *f) {
  for (uint64_t w = 0; w < f->super.nslots; w += FSCK_WINDOW) {
    uint64_t n = f->super.nslots - w < FSCK_WINDOW ? f->super.nslots - w : FSCK_WINDOW;
    uint64_t off = DISK_INDEX_OFFSET + w * sizeof(disk_index_entry);
    if (read_at(f, f->index, (size_t)n * sizeof(disk_index_entry), off)) return -1;
    for (uint64_t i = 0; i < n; i++)
      if (slot_visit(f, w + i, &f->index[i])) return -1;
  }
  return 0;
}

/* ---- copies of one key ---- */

static int by_key_then_newest(const void *a, const void *b) {
  const live *x = a, *y = b;
  if (x->key_hash != y->key_hash) return x->key_hash < y->key_hash ? -1 : 1;
  if (x->seq != y->seq) return x->seq > y->seq ? -1 : 1;
  return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static int by_slot(const void *a, const void *b) {
  const live *x = a, *y = b;
  return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Whether an earlier entry of the sorted f->live (a newer copy, since
 * copies of a key sort newest first) holds the key of entry i and wins. */
static bool newer_copy(const fsck *f, const bool *lost, size_t i) {
  for (size_t j = i; j-- > 0 && f->live[j].key_hash == f->live[i].key_hash;)
    if (!lost[j] && key_equal(&f->live[j].key, &f->live[i].key)) return true;
  return false;
}

/* Of the copies of a key that verified, the highest seq wins; the others
 * are superseded (dropped from f->live, which ends in slot order). */
static int resolve_copies(fsck *f) {
  if (f->nlive == 0) return 0; /* and f->live may be NULL, which qsort refuses */
  bool *lost = calloc(f->nlive, sizeof *lost);
  if (!lost) {
    fprintf(stderr, "kvconf: out of memory\n");
    return -1;
  }
  qsort(f->live, f->nlive, sizeof *f->live, by_key_then_newest);
  size_t kept = 0;
  for (size_t i = 0; i < f->nlive; i++) lost[i] = newer_copy(f, lost, i);
  for (size_t i = 0; i < f->nlive; i++)
    if (!lost[i]) f->live[kept++] = f->live[i];
  f->count[SLOT_VALID] -= f->nlive - kept;
  f->count[SLOT_SUPERSEDED] += f->nlive - kept;
  f->nlive = kept;
  free(lost);
  qsort(f->live, f->nlive, sizeof *f->live, by_slot);
  return 0;
}

/* Rewrites the index region to list exactly the live slots. */
static int index_rewrite(fsck *f) {
  size_t next = 0;
  for (uint64_t w = 0; w < f->super.nslots; w += FSCK_WINDOW) {
    uint64_t n = f->super.nslots - w < FSCK_WINDOW ? f->super.nslots - w : FSCK_WINDOW;
    memset(f->index, 0, sizeof f->index);
    for (; next < f->nlive && f->live[next].slot < w + n; next++)
      f->index[f->live[next].slot - w] =
          (disk_index_entry){.seq = f->live[next].seq, .key_hash = f->live[next].key_hash};
    uint64_t off = DISK_INDEX_OFFSET + w * sizeof(disk_index_entry);
    if (write_at(f, f->index, (size_t)n * sizeof(disk_index_entry), off)) return -1;
  }
  return 0;
}

/* ---- the whole tier ---- */

static uint64_t bad_slots(const fsck *f) {
  return f->count[SLOT_TORN] + f->count[SLOT_MISMATCHED];
}

/* Whether a clean superblock lies about the slots. */
static bool super_stale(const fsck *f) {
  return f->super.clean && (f->stale || f->max_seq > f->super.seq);
}

static void summary(const fsck *f) {
  printf("valid %" PRIu64 " superseded %" PRIu64 " torn %" PRIu64 " mismatched %" PRIu64
         " free %" PRIu64 " (slots %" PRIu64 ", slot_bytes %" PRIu64 ")\n",
         f->count[SLOT_VALID], f->count[SLOT_SUPERSEDED], f->count[SLOT_TORN],
         f->count[SLOT_MISMATCHED], f->count[SLOT_FREE], f->super.nslots, f->super.slot_bytes);
  if (f->stale)
    printf("index: %" PRIu64 " of %" PRIu64
           " entries disagree with the slots (superblock says clean)\n",
           f->stale, f->super.nslots);
  if (f->super.clean && f->max_seq > f->super.seq)
    printf("superblock: seq %" PRIu64 " is below slot seq %" PRIu64 " (superblock says clean)\n",
           f->super.seq, f->max_seq);
  if (!f->repair && (bad_slots(f) || super_stale(f)))
    printf("run kvconf fsck %s --repair (with kvact stopped) to fix\n", f->path);
}

/* Everything checked: the index lists the live slots, then (synced) the
 * superblock says clean with a seq no intact header exceeds. */
static int repair_finish(fsck *f) {
  if (index_rewrite(f) || sync_fd(f)) return FSCK_FAILED;
  if (f->max_seq > f->super.seq) f->super.seq = f->max_seq; /* never reissue a seq */
  f->super.clean = 1;
  if (super_write(f)) return FSCK_FAILED;
  printf("repaired: dropped %" PRIu64 " slots, index rebuilt from %" PRIu64
         " valid slots, seq %" PRIu64 ", clean\n",
         bad_slots(f), f->count[SLOT_VALID], f->super.seq);
  return FSCK_CLEAN;
}

static int check(fsck *f) {
  if (open_tier(f) || super_read(f)) return FSCK_FAILED;
  uint32_t was_clean = f->super.clean;
  if (f->repair) { /* a crash from here on leaves a tier the adapter rescans */
    f->super.clean = 0;
    if (super_write(f)) return FSCK_FAILED;
    f->super.clean = was_clean; /* still judge the index against it */
  }
  if (scan(f) || resolve_copies(f)) return FSCK_FAILED;
  summary(f);
  if (f->repair) return repair_finish(f);
  return bad_slots(f) || super_stale(f) ? FSCK_DAMAGED : FSCK_CLEAN;
}

int kvconf_fsck(const char *path, bool repair) {
  fsck *f = calloc(1, sizeof *f);
  int rc = FSCK_FAILED;
  if (f) f->chunk = malloc(FSCK_CHUNK), f->sum = XXH3_createState();
  if (!f || !f->chunk || !f->sum) {
    fprintf(stderr, "kvconf: out of memory\n");
  } else {
    f->path = path, f->repair = repair, f->fd = -1;
    rc = check(f);
    if (f->fd >= 0) close(f->fd);
  }
  if (f) free(f->chunk), free(f->live), XXH3_freeState(f->sum);
  free(f);
  return fflush(stdout) != 0 && rc == FSCK_CLEAN ? FSCK_FAILED : rc;
}
