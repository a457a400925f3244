/*
 * prefetch_internal.h — state of the prefetch controller, shared by
 *   prefetch_controller.c  the actor: hand-offs, pending queue, slots, drain
 *   prefetch_request.c     one request's state machine (docs/invariants.md
 *                          I-PC-1 to I-PC-5)
 */
#ifndef KVA_L2_PREFETCH_INTERNAL_H
#define KVA_L2_PREFETCH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "l1/l1_manager.h"
#include "l2/prefetch_controller.h"

/* Steps of a request; each waits for one kind of reply. */
enum {
  PF_QUEUED = 0,
  PF_LOOKUP,  /* KVA_L2_DONE of every tier asked */
  PF_RESERVE, /* L1_REPLY: write buffers of the plan's prefix */
  PF_HOLD,    /* L1_REPLY: read locks on planned keys L1 holds already */
  PF_DROP,    /* L1_REPLY: reserved buffers past the reservation gap removed */
  PF_LOAD,    /* KVA_L2_DONE of every tier loading */
  PF_COMMIT,  /* L1_REPLY: loaded prefix write -> read locked */
  PF_UNREAD,  /* L1_REPLY: read locks past a commit gap released */
  PF_ABORT,   /* L1_REPLY: buffers of failed loads and loads past the gap removed */
};

/* Where a planned key of [0, nplanned) comes from once L1 answered the RESERVE
 * (and the HOLD): a write buffer to load into, or the object L1 holds
 * already, read-locked for the caller (it was there when the reservation
 * said KVA_KEY_NOT_WRITABLE, e.g. an L1 hit past the L1 prefix's gap). */
enum { PF_SRC_NONE = 0, PF_SRC_BUF, PF_SRC_L1 };

/* One prefetch the L1 manager handed off, for the keys past its L1 prefix
 * (prefetch_request.c). Each prefix below lies within the one before it:
 * hits <= nfilled <= nreserved <= nplanned <= n. */
typedef struct prefetch_req {
  struct prefetch_req *next; /* pending queue or free list */
  /* the facade's request, answered with L1_REPLY when done */
  l1_req *user;
  kva_actor *reply_to;
  uint64_t reply_tag;
  size_t base;         /* its L1 hits: keys[0, base) are read-locked already */
  const kva_key *keys; /* user->keys + base */
  size_t n;
  uint32_t slot, state, waiting;
  uint32_t asked;   /* tiers sent a lookup (bit mask) */
  uint64_t sent_ns; /* when the lookups (then the loads) were sent, for the meters */
  size_t key_bytes; /* of one object of the layout */
  double chunk_s;   /* load_or_recompute: its model's compute time per chunk */
  size_t nplanned;  /* keys [0, nplanned) planned: contiguous, one tier each */
  size_t nreserved; /* keys [0, nreserved) reserved in L1: a write buffer, or
                       a read lock on the object L1 holds already */
  size_t nfilled;   /* keys [0, nfilled) have their bytes in L1: loaded or held */
  size_t hits;      /* keys [0, hits) read-locked for the caller */
  kva_l2_req look[L2_MAX_TIERS], load[L2_MAX_TIERS];
  l1_req l1;
  /* arrays of n entries (cap allocated), in one block */
  size_t cap;
  void *block;
  uint8_t *found[L2_MAX_TIERS]; /* lookup bitmaps */
  uint8_t *lbits[L2_MAX_TIERS]; /* load bitmaps */
  int8_t *plan;                 /* tier per key, -1 = not loaded */
  uint8_t *loaded;              /* per key */
  uint8_t *src;                 /* per key of [0, nplanned): PF_SRC_* */
  int *status;
  kva_buf *bufs;  /* L1 write buffers, per key */
  uint64_t *ids;  /* per key: the L1 object reserved or held (release by id) */
  uint64_t *lids; /* ids of lkeys, for L1 requests on gathered keys */
  kva_key *lkeys; /* keys grouped by tier for loads; scratch for unlocks */
  kva_buf *lbufs;
  uint32_t *lidx; /* lkeys[j] is keys[lidx[j]] */
} prefetch_req;

/* The prefetch controller actor's state. */
typedef struct prefetch_controller {
  kva_actor *self, *l1;
  l2_tiers *tiers;
  prefetch_opts o;
  prefetch_req *head, *tail, *free_reqs; /* pending (FIFO), recycled */
  prefetch_req **slots;                  /* o.max_in_flight entries: requests in flight */
  uint32_t *gen, ninflight;              /* gen: per slot, bumped as it frees (stale tags) */
  bool draining;
  kva_actor *drain_to;
  uint64_t drain_tag;
} prefetch_controller;

/* prefetch_controller.c */
uint64_t pf_now(const prefetch_controller *c); /* the runtime's clock (meter.h) */
/* Counts keys found but left to the engine as slower than recompute. */
void pf_count_skipped(prefetch_controller *c, const uint32_t *per_tier);
uint64_t pf_tag(const prefetch_controller *c, const prefetch_req *req);
/* Answers the facade with hits (base + req->hits) and frees the slot. */
void pf_finish(prefetch_controller *c, prefetch_req *req);
void pf_send_l1(prefetch_controller *c, prefetch_req *req, uint32_t type);

/* prefetch_request.c */
void pf_start(prefetch_controller *c, prefetch_req *req);                      /* PF_LOOKUP */
void pf_on_l2(prefetch_controller *c, prefetch_req *req, const kva_l2_req *r); /* a KVA_L2_DONE */
void pf_on_l1(prefetch_controller *c, prefetch_req *req);                      /* an L1_REPLY */

#endif
