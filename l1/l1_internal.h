/*
 * l1_internal.h — state of the L1 manager actor, shared by its files:
 *   l1_manager.c  receive loop, lifecycle, notifications, deferral
 *   l1_write.c    reserve_write (with demand eviction), finish_write
 *   l1_read.c     reserve/finish read, prefetch, read, touch
 *   l1_admin.c    delete, clear, evict, memcheck, stats
 */
#ifndef KVA_L1_L1_INTERNAL_H
#define KVA_L1_L1_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"
#include "l1/eviction_controller.h"
#include "l1/l1_manager.h"
#include "l1/object_table.h"
#include "l1/pool.h"

#define NO_SLOT UINT32_MAX

/* A message that arrived while a demand eviction was waiting for the
 * eviction controller: kept, in order, until the demand is over. */
typedef struct deferred_msg {
  kva_msg m;
  struct deferred_msg *next;
  uint8_t data[];
} deferred_msg;

/* A reserve_write waiting for eviction candidates (at most one). */
typedef struct demand {
  bool active;
  l1_req *req;
  kva_actor *reply_to;
  uint64_t tag;
  size_t nalloc;    /* blocks the reservation needs (in scratch) */
  uint64_t deficit; /* bytes the plan must free at least (for the controller) */
  uint64_t after;   /* cursor into the policy order */
  uint32_t *plan;   /* slots of the candidates planned so far, in the order of
                       the pool's room plan (kept between demands) */
  size_t nplan, cap_plan;
} demand;

/* Per-request scratch: which keys need a block, grown on demand. */
typedef struct scratch {
  uint32_t *slot;  /* per key: object slot, NO_SLOT if the key failed */
  uint8_t *fresh;  /* per key: 1 = created by this request, 2 = resized */
  uint64_t *bytes; /* per allocation */
  void **ptrs;
  uint32_t *owner; /* per allocation: key index */
  uint64_t *hash;  /* per key: key_hash */
  size_t cap;
  uint32_t *seen; /* open-addressing set of key indexes: finds a repeat */
  size_t seen_cap;
} scratch;

struct l1_manager {
  kva_actor *self;
  kva_actor *evictor;    /* eviction controller; NULL = none */
  kva_actor *store;      /* store controller; NULL = none */
  kva_actor *prefetcher; /* prefetch controller; NULL = none */
  /* the current request's finished writes, for the store controller */
  uint8_t *written;
  size_t written_len, written_cap;
  pool *pool;
  object_table t;
  uint64_t stamp; /* request counter: which objects the current request names */
  /* notifications of the current request, sent at its end */
  evict_note *note;
  size_t note_cap;
  demand dem;
  deferred_msg *dq_head, *dq_tail;
  scratch sc;
  uint64_t n_write_locked, n_read_locked, n_temporary; /* objects, maintained */
  uint64_t n_zombies;   /* force-deleted objects still held (l1_admin.c) */
  kva_storage_stats st; /* counters */
};

/* l1_manager.c */
void l1_note(struct l1_manager *m, uint32_t op, uint32_t slot, uint64_t bytes);
void l1_note_flush(struct l1_manager *m);
/* Finished writes of the current request, sent to the store controller as
 * one SC_WRITTEN at its end. */
void l1_written_add(struct l1_manager *m, uint32_t slot);
void l1_reply(struct l1_manager *m, kva_actor *to, uint64_t tag);

/* object helpers (l1_admin.c) */
bool l1_locked(const l1_obj *o);
void l1_remove(struct l1_manager *m, uint32_t slot, bool notify);
void l1_set_write_lock(struct l1_manager *m, l1_obj *o, bool on);
/* Read locks: by_id = taken with an object id (a controller's), else by
 * key (an engine's, or handed to one). */
void l1_add_readers(struct l1_manager *m, l1_obj *o, uint32_t n, bool by_id);
/* Releases up to n read locks of that kind (never below zero); a temporary
 * object goes with its last reader unless pinned, a zombie with its last
 * lock. */
void l1_drop_readers(struct l1_manager *m, uint32_t slot, uint32_t n, bool by_id);
/* A temporary or force-deleted object whose last lock or pin just went:
 * removed, or (a zombie) out of the index once no by-key holder is left. */
void l1_settle(struct l1_manager *m, uint32_t slot);
/* Read locks held by key. */
static inline uint32_t l1_key_readers(const l1_obj *o) {
  return o->readers - o->id_readers;
}
/* Key i of the request, for calls on live objects: sets *slot (NO_SLOT
 * when absent or force-deleted) and returns KVA_OK or KVA_KEY_NOT_EXIST.
 * (A request never names a key twice: l1_manager.c refuses it.) */
int l1_key_slot(struct l1_manager *m, const l1_req *r, size_t i, uint32_t *slot);
/* The object a holder releases: by r->ids[i] when ids are given (live or
 * zombie, its key must be keys[i]); else the one indexed object of the key
 * (live or zombie), which a by-key holder's object always is (l1_admin.c).
 * Sets *slot (NO_SLOT when none) and returns KVA_OK or KVA_KEY_NOT_EXIST. */
int l1_held_slot(struct l1_manager *m, const l1_req *r, size_t i, uint32_t *slot);
/* marks an object as touched by this request; true if it already was */
bool l1_seen(struct l1_manager *m, uint32_t slot);

/* handlers */
void l1_reserve_write(struct l1_manager *m, l1_req *r, kva_actor *from, uint64_t tag);
void l1_demand_candidates(struct l1_manager *m, const evict_list *l);
void l1_finish_write(struct l1_manager *m, l1_req *r, bool and_read);
void l1_abort_write(struct l1_manager *m, l1_req *r);
void l1_reserve_read(struct l1_manager *m, l1_req *r);
void l1_finish_read(struct l1_manager *m, l1_req *r);
void l1_prefetch(struct l1_manager *m, l1_req *r);
void l1_read(struct l1_manager *m, l1_req *r);
void l1_touch(struct l1_manager *m, l1_req *r);
void l1_lookup(struct l1_manager *m, l1_req *r);
void l1_unpin(struct l1_manager *m, l1_req *r);
void l1_inspect(struct l1_manager *m, l1_req *r);
void l1_delete(struct l1_manager *m, l1_req *r);
void l1_clear(struct l1_manager *m, l1_req *r);
void l1_evict(struct l1_manager *m, const evict_list *l);
void l1_memcheck(struct l1_manager *m, l1_req *r);
void l1_stats(struct l1_manager *m, l1_req *r);

#endif
