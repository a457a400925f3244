/*
 * disk_internal.h — the disk adapter's state, shared by its files:
 *
 *   disk_adapter.c  the actor: dispatch, LOOKUP_AND_LOCK, UNLOCK, STATS,
 *                   tasks and replies, config and spawn
 *   disk_store.c    STORE: slot choice, payload then header writes
 *   disk_load.c     LOAD: header + payload reads, verification
 *   disk_open.c     open / create / validate / format, close at stop
 *   disk_recover.c  index rebuild at start, index save at stop
 */
#ifndef KVA_L2_DISK_INTERNAL_H
#define KVA_L2_DISK_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/disk.h"
#include "l2/disk_format.h"
#include "l2/disk_index.h"
#include "l2/disk_io.h"

typedef struct disk_cfg {
  char name[32];
  char path[PATH_MAX]; /* "" = a temporary file */
  uint64_t capacity;   /* bytes of a new file */
  uint64_t slot_bytes; /* 0 = from the first layout stored */
  bool o_direct, persist;
  uint32_t queue_depth, timeout_ms;
} disk_cfg;

/* Per key of a task. */
typedef struct disk_tkey {
  uint32_t slot; /* DISK_NONE: no I/O for this key (miss, duplicate) */
  int err;       /* 0 or -errno of its first failed I/O */
  uint64_t seq;  /* STORE: the header's; LOAD: the slot's when the read began */
  uint64_t sum;  /* STORE: payload_sum */
  bool hashed;   /* STORE: sum computed */
} disk_tkey;

/* One request in progress. Pooled, with its per-key array kept. */
typedef struct disk_task {
  uint32_t type; /* KVA_L2_STORE, KVA_L2_LOAD or KVA_L2_LOOKUP_AND_LOCK (probing) */
  kva_actor *to;
  uint64_t tag;
  kva_l2_req *req;
  uint64_t fp;      /* layout_fingerprint */
  uint32_t pending; /* ops not completed */
  size_t next_hash; /* STORE: first key whose sum may not be computed yet */
  disk_tkey *k;
  size_t capk;
  struct disk_task *next_free;
} disk_task;

enum { XOP_PAYLOAD = 0, XOP_HEADER = 1, XOP_LOAD = 2, XOP_PROBE = 3 };

/* An I/O of a task, with the bounce buffers it holds. Pooled. */
typedef struct disk_xop {
  disk_op op; /* first: the completion hands back &op */
  disk_task *task;
  size_t key;
  uint32_t stage;
  void *hdr;  /* header block bounce (DISK_BLOCK) or NULL */
  void *tail; /* last partial block of the payload (DISK_BLOCK) or NULL */
  void *big;  /* the whole payload, for a misaligned L1 buffer */
  uint64_t big_bytes;
  struct disk_xop *next_free;
} disk_xop;

typedef struct disk {
  kva_actor *self;
  bool det; /* deterministic runtime: I/O is waited for inside receive */
  disk_cfg cfg;
  int fd;
  bool temp;      /* a temporary file: removed at stop */
  bool direct;    /* O_DIRECT in effect (false after the fallback) */
  bool blockdev;  /* path is a block device */
  bool formatted; /* the superblock is written; ix and super are live */
  uint64_t file_bytes;
  disk_super super; /* as on disk, with seq the last one issued */
  disk_index ix;
  disk_io io;
  bool io_ok;
  disk_bounce bounce;
  disk_task *free_tasks;
  disk_xop *free_xops;
  uint32_t *dedup; /* STORE scratch: open-addressing table of key indexes */
  size_t dedup_cap;
  kva_l2_stats stats;
  bool warned_size; /* "object larger than a slot" said once */
  bool failing;     /* the last I/O to complete failed: lookups probe first */
  int retry_timer;  /* armed when the kernel refused a submit, else -1 */
} disk;

/* The byte offset of slot id (its header block). */
static inline uint64_t disk_slot_off(const disk *d, uint32_t id) {
  return d->super.data_offset + (uint64_t)id * d->super.slot_bytes;
}
static inline uint64_t disk_round_up(uint64_t n) {
  return (n + DISK_BLOCK - 1) & ~(uint64_t)(DISK_BLOCK - 1);
}

/* disk_adapter.c */
disk_xop *disk_xop_get(disk *d, disk_task *t, size_t key, uint32_t stage);
void disk_xop_put(disk *d, disk_xop *x);                  /* gives back its bounce buffers too */
void disk_task_finish(disk *d, disk_task *t, int result); /* reply, back to the pool */

/* disk_store.c / disk_load.c: the request, and one completed I/O of it */
void disk_store_start(disk *d, disk_task *t);
void disk_store_done(disk *d, disk_xop *x);
void disk_load_start(disk *d, disk_task *t);
void disk_load_done(disk *d, disk_xop *x);
/* Points x's iovecs at the payload of buf (direct when aligned, tail or
 * all through bounce buffers otherwise) after `first` iovecs; false when
 * out of memory. For a write the bounce copies are filled. */
bool disk_payload_iov(disk *d, disk_xop *x, int first, const kva_buf *buf, bool write);

/* disk_open.c */
int disk_open(disk *d, char *err, size_t errlen);
/* Writes a fresh superblock for slots of slot_bytes and starts an empty
 * index: KVA_OK, KVA_ENOMEM when not one slot fits, KVA_EIO. */
int disk_format(disk *d, uint64_t slot_bytes);
/* Blocking block-aligned I/O for start and stop (buffers DISK_BLOCK aligned). */
int disk_pread(disk *d, void *buf, uint64_t len, uint64_t off);
int disk_pwrite(disk *d, const void *buf, uint64_t len, uint64_t off);
/* Seals and writes the superblock, then fdatasync. */
int disk_write_super(disk *d);
void disk_close(disk *d); /* persists (or discards), closes, unlinks a temporary file */

/* disk_recover.c */
/* Rebuilds the index of a formatted file: from the saved index when it
 * was closed cleanly (every listed header re-read), else by scanning and
 * checksumming every slot. */
int disk_recover(disk *d, char *err, size_t errlen);
/* The index region (one disk_index_entry per slot), from the live index;
 * all free when `keep` is false. */
int disk_save_index(disk *d, bool keep);

#endif
