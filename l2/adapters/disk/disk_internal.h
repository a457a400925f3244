/*
 * disk_internal.h — the disk adapter's state, shared by its files:
 *
 *   disk_adapter.c  the actor: dispatch, LOOKUP_AND_LOCK, UNLOCK, STATS,
 *                   tasks and replies, config and spawn
 *   disk_store.c    STORE: slot choice, payload then header writes
 *   disk_load.c     LOAD: header + payload reads, verification
 *   disk_open.c     open / create / validate / format, close at stop
 *   disk_recover.c  index rebuild at start, index save at stop
 *   disk_hasher.c   the "disk_hasher" actor (checksums on another worker)
 *                   and the adapter's side of its jobs
 */
#ifndef KVA_L2_DISK_INTERNAL_H
#define KVA_L2_DISK_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/disk/disk.h"
#include "l2/adapters/disk/disk_format.h"
#include "l2/adapters/disk/disk_index.h"
#include "l2/adapters/disk/disk_io.h"

typedef struct disk_cfg {
  char name[32];
  char path[PATH_MAX]; /* "" = a temporary file (then "<dir> (temporary file)") */
  uint64_t capacity;   /* bytes of a new file */
  uint64_t slot_bytes; /* 0 = from the first layout stored */
  bool o_direct, persist;
  uint32_t queue_depth, timeout_ms;
} disk_cfg;

/* Per key of a task. */
typedef struct disk_tkey {
  uint32_t slot;         /* DISK_NONE: no I/O for this key (miss, duplicate) */
  int err;               /* 0 or -errno of its first failed I/O */
  uint64_t seq;          /* STORE: the header's; LOAD: the slot's when the read began */
  uint64_t sum;          /* payload_sum of the L1 bytes (STORE: to write; LOAD: read) */
  uint32_t parent;       /* STORE: chain id of the key it continues, 0 = none (disk_index.h) */
  bool hashed;           /* sum computed */
  bool job;              /* its sum is being computed by the hasher */
  bool done;             /* its payload write, or its read, completed */
  struct disk_xop *held; /* LOAD: the completed read waiting for its sum */
} disk_tkey;

/* One request in progress. Pooled, with its per-key array kept. */
typedef struct disk_task {
  uint32_t type; /* KVA_L2_STORE, KVA_L2_LOAD or KVA_L2_LOOKUP_AND_LOCK (probing) */
  kva_actor *to;
  uint64_t tag;
  kva_l2_req *req;
  uint64_t fp;       /* kva_layout_fingerprint */
  uint32_t pending;  /* ops not completed */
  size_t next_hash;  /* STORE: first key whose sum may not be computed yet */
  size_t next_share; /* STORE: first key not yet offered to the hasher */
  uint32_t gen;      /* bumped at each reuse: a stale hasher reply is ignored */
  uint32_t jobs;     /* hash jobs at the hasher: no reply, no reuse while > 0 */
  disk_tkey *k;
  size_t capk;
  struct disk_task *next_free;
  struct disk_task *live_prev, *live_next; /* tasks in progress (on_stop) */
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
  kva_actor *hasher;   /* NULL: every sum computed here (deterministic mode) */
  bool hasher_stopped; /* a send to it failed: every later sum computed here */
  uint32_t hash_out;   /* jobs sent and not answered, all tasks */
  bool det;            /* deterministic runtime: I/O is waited for inside receive */
  disk_cfg cfg;
  int fd;
  bool temp;      /* a temporary file: unnamed, freed when closed */
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
  disk_task *live; /* tasks between task_get and disk_task_finish */
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

/* ---- disk_hasher.c ---- */

#define DISK_HASH 291   /* adapter -> hasher: a disk_hash_job to sum */
#define DISK_HASHED 292 /* hasher -> adapter: the same job, sum filled */

typedef struct disk_hash_job {
  struct disk_task *task;
  uint32_t gen; /* task->gen when sent */
  uint32_t key;
  const void *ptr; /* L1 bytes, locked until the adapter replies */
  uint64_t len;
  uint64_t sum; /* the reply's */
} disk_hash_job;

/* The companion actor, on the pool (NULL when it cannot be spawned). */
kva_actor *disk_hasher_spawn(kva_runtime *rt);
/* Whether key i of t should be summed by the hasher rather than here. */
bool disk_hash_share(const disk *d, size_t i);
/* Sends the job (true), or false when no hasher takes it (none, stopped,
 * or DISK_HASH_MAX_OUT jobs out already): sum it here. */
bool disk_hash_send(disk *d, disk_task *t, size_t i, const void *ptr, uint64_t len);
/* A DISK_HASHED reply: records the sum and moves the key on. */
void disk_hash_received(disk *d, const kva_msg *msg);
/* on_stop: no reply can come any more; sums every outstanding job here. */
void disk_hash_settle(disk *d);
/* A task may be answered: every I/O completed and every job answered. */
static inline bool disk_task_idle(const disk_task *t) {
  return !t->pending && !t->jobs;
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
/* Key i's sum became known (t->k[i].hashed) after a hasher job. */
void disk_store_hashed(disk *d, disk_task *t, size_t i);
void disk_load_hashed(disk *d, disk_task *t, size_t i);
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
void disk_close(disk *d); /* persists (or discards) and closes */

/* disk_recover.c */
/* Rebuilds the index of a formatted file: from the saved index when it
 * was closed cleanly (every listed header re-read), else by scanning and
 * checksumming every slot. */
int disk_recover(disk *d, char *err, size_t errlen);
/* The index region (one disk_index_entry per slot), from the live index;
 * all free when `keep` is false. */
int disk_save_index(disk *d, bool keep);

#endif
