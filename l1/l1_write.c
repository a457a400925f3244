/*
 * l1_write.c — the L1 manager's write side: reserve_write with demand
 * eviction, finish_write, finish_write_and_reserve_read.
 *
 * reserve_write in three steps:
 *  1. per key: reuse an existing object (modes UPDATE/ALL, when unlocked,
 *     not temporary and of the same layout) or create a record for a new
 *     key (modes NEW/ALL);
 *  2. allocate the blocks of the new records all at once;
 *  3. if that fails, demand eviction: ask the eviction controller for
 *     candidates in policy order (other messages wait, see l1_manager.c)
 *     and plan unlocked ones, not part of the request, with the pool's
 *     room planner (pool.h) until freeing them would make contiguous room
 *     for every block of the batch; keep only the planned ones that are
 *     needed (the latest in policy order go first), evict those and
 *     allocate again. If no plan can make room (candidates exhausted)
 *     nothing is evicted and every new key gets KVA_OUT_OF_MEMORY.
 *
 * Room, not bytes: a free byte count that covers the request says nothing
 * when the free space is in pieces (LMCache #3187: allocations failing for
 * hours with memory "free"), and bytes evicted in policy order need not be
 * next to each other. So the plan counts the blocks of the batch the free
 * runs would hold, victims merged with their free neighbours, and it stops
 * at the shortest prefix of the policy order that makes room: victims are
 * taken in policy order as far as contiguity allows, and each one evicted
 * is needed. A size-class allocator would avoid the question for one chunk
 * size but wastes a fifth or more of the pool with mixed sizes (measured:
 * pool_plan.c, docs/benchmarks.md); with one chunk size the plan comes
 * down to the least recent unlocked objects, one block each.
 */
#include <stdlib.h>

#include "common/array.h"
#include "common/key.h"
#include "l1/l1_internal.h"

/* Step 1 for one key: its status, or KVA_OK with the slot set up. */
static int claim_key(struct l1_manager *m, const l1_req *r, size_t i, uint64_t bytes, uint64_t fp,
                     size_t *nalloc) {
  const kva_key *k = &r->keys[i];
  uint64_t h = m->sc.hash[i];
  m->sc.slot[i] = NO_SLOT;
  m->sc.fresh[i] = 0;
  uint32_t slot = object_table_find(&m->t, k, h);
  if (slot != NO_SLOT) {
    l1_obj *o = object_at(&m->t, slot);
    l1_seen(m, slot); /* part of this request: never a demand-eviction victim */
    if (r->mode == KVA_WRITE_NEW || o->zombie || l1_locked(o) || o->temporary ||
        o->fingerprint != fp)
      return KVA_KEY_NOT_WRITABLE;
    l1_set_write_lock(m, o, true);
    o->write_by_id = r->ids != NULL;
    m->sc.slot[i] = slot;
    return KVA_OK;
  }
  if (r->mode == KVA_WRITE_UPDATE) return KVA_KEY_NOT_WRITABLE;
  slot = object_table_insert(&m->t, k, h);
  if (slot == NO_SLOT) return KVA_OUT_OF_MEMORY;
  l1_obj *o = object_at(&m->t, slot);
  o->stamp = m->stamp;
  o->bytes = bytes;
  o->fingerprint = fp;
  o->layout = *r->layout;
  o->temporary = r->temporary != 0;
  m->n_temporary += o->temporary;
  m->sc.slot[i] = slot;
  m->sc.fresh[i] = 1;
  m->sc.bytes[*nalloc] = bytes;
  m->sc.owner[*nalloc] = (uint32_t)i;
  (*nalloc)++;
  return KVA_OK;
}

/* Step 2 done (allocated = whether sc.ptrs holds the blocks): settle every
 * key, notify, reply. */
static void complete(struct l1_manager *m, l1_req *r, size_t nalloc, bool allocated, kva_actor *to,
                     uint64_t tag) {
  for (size_t j = 0; j < nalloc; j++) {
    uint32_t i = m->sc.owner[j], slot = m->sc.slot[i];
    if (allocated) {
      l1_obj *o = object_at(&m->t, slot);
      o->ptr = m->sc.ptrs[j];
      l1_set_write_lock(m, o, true);
      o->write_by_id = r->ids != NULL;
    } else {
      l1_remove(m, slot, false);
      m->sc.slot[i] = NO_SLOT;
      r->status[i] = KVA_OUT_OF_MEMORY;
      m->st.out_of_memory++;
    }
  }
  int ok = 0;
  for (size_t i = r->n; i-- > 0;) {
    uint32_t slot = m->sc.slot[i];
    r->bufs[i] = (kva_buf){0};
    if (r->ids) r->ids[i] = 0;
    if (slot == NO_SLOT || r->status[i] != KVA_OK) continue;
    l1_obj *o = object_at(&m->t, slot);
    r->bufs[i] = (kva_buf){o->ptr, o->bytes};
    if (r->ids) r->ids[i] = object_id(&m->t, slot);
    l1_note(m, m->sc.fresh[i] ? NOTE_CREATED : NOTE_TOUCHED, slot,
            pool_block_bytes(m->pool, o->bytes));
    ok++;
  }
  m->st.reserved += (uint64_t)ok;
  r->result = ok;
  m->dem.active = false;
  l1_note_flush(m);
  l1_reply(m, to, tag);
}

static bool try_alloc(struct l1_manager *m, size_t nalloc) {
  return pool_alloc_batch(m->pool, m->sc.bytes, nalloc, m->sc.ptrs) == KVA_OK;
}

/* Asks the eviction controller for the next page of candidates. */
static bool demand_ask(struct l1_manager *m) {
  evict_demand d = {.deficit = m->dem.deficit, .after = m->dem.after};
  if (!m->evictor) return false;
  if (kva_send(m->evictor, EC_DEMAND, &d, sizeof(d), m->self, 0) == KVA_OK) return true;
  m->evictor = NULL;
  return false;
}

/* Step 3 begins: the batch did not fit. The pool's room plan stays open
 * until the demand ends (the pool does not change meanwhile: every other
 * message waits). */
static void demand_start(struct l1_manager *m, l1_req *r, size_t nalloc, kva_actor *to,
                         uint64_t tag) {
  uint64_t need = 0;
  for (size_t j = 0; j < nalloc; j++) need += pool_block_bytes(m->pool, m->sc.bytes[j]);
  uint64_t free_bytes = pool_free_bytes(m->pool);
  demand *d = &m->dem;
  *d = (demand){.active = true,
                .req = r,
                .reply_to = to,
                .tag = tag,
                .plan = d->plan,
                .cap_plan = d->cap_plan};
  /* a lower bound for the controller: at least one block must go */
  d->deficit = need > free_bytes ? need - free_bytes : pool_block_bytes(m->pool, m->sc.bytes[0]);
  d->nalloc = nalloc;
  l1_note_flush(m); /* the controller must know everything before it chooses */
  /* 1 (fits as it is) cannot follow a failed batch; like a batch larger
   * than the pool it is answered as out of memory */
  if (pool_plan_start(m->pool, m->sc.bytes, nalloc) != 0 || !demand_ask(m)) {
    pool_plan_cancel(m->pool);
    complete(m, r, nalloc, false, to, tag);
  }
}

void l1_reserve_write(struct l1_manager *m, l1_req *r, kva_actor *from, uint64_t tag) {
  uint64_t bytes = layout_bytes(r->layout);
  if (!bytes) {
    r->result = KVA_EINVAL;
    l1_reply(m, from, tag);
    return;
  }
  uint64_t fp = layout_fingerprint(r->layout);
  size_t nalloc = 0;
  for (size_t i = 0; i < r->n; i++) r->status[i] = claim_key(m, r, i, bytes, fp, &nalloc);
  if (nalloc == 0 || try_alloc(m, nalloc))
    complete(m, r, nalloc, true, from, tag);
  else
    demand_start(m, r, nalloc, from, tag);
}

/* Adds one candidate to the plan unless it is gone, locked, or part of the
 * reservation itself; true once the plan makes room for the batch. */
static bool plan_add(struct l1_manager *m, uint64_t id) {
  demand *d = &m->dem;
  uint32_t slot = object_table_by_id(&m->t, id);
  if (slot == NO_SLOT || l1_locked(object_at(&m->t, slot)) || l1_seen(m, slot)) return false;
  if (!ARRAY_GROW(d->plan, &d->cap_plan, d->nplan + 1)) return false;
  int rc = pool_plan_add(m->pool, object_at(&m->t, slot)->ptr);
  if (rc < 0) return false; /* ENOMEM: this candidate is not planned */
  d->plan[d->nplan++] = slot;
  return rc == 1;
}

/* A page of candidates arrived for the waiting reservation. */
void l1_demand_candidates(struct l1_manager *m, const evict_list *l) {
  demand *d = &m->dem;
  bool room = false;
  for (uint32_t i = 0; i < l->n && !room; i++) room = plan_add(m, l->ids[i]);
  if (!room) {
    if (l->n) d->after = l->ids[l->n - 1];
    if (!l->end && l->n && demand_ask(m)) return;
    pool_plan_cancel(m->pool);
    complete(m, d->req, d->nalloc, false, d->reply_to, d->tag);
    return;
  }
  pool_plan_finish(m->pool); /* keeps the planned objects that are needed */
  for (size_t i = 0; i < d->nplan; i++) {
    if (!pool_plan_needed(m->pool, i)) continue;
    l1_remove(m, d->plan[i], true);
    m->st.evicted_on_demand++;
  }
  complete(m, d->req, d->nalloc, try_alloc(m, d->nalloc), d->reply_to, d->tag);
}

/* Whether the caller may release o's write lock: by id (which names the
 * very object), or by key when the lock was taken by key. */
static bool write_held(const l1_obj *o, const l1_req *r) {
  return o->write_locked && (r->ids || !o->write_by_id);
}

/* Key i's write lock as the caller holds it: KVA_OK with *slot set, or
 * its status. A force-deleted object's lock is released here and the
 * caller is told KVA_KEY_NOT_EXIST (it is never readable). */
static int held_for_write(struct l1_manager *m, const l1_req *r, size_t i, uint32_t *slot) {
  int st = l1_held_slot(m, r, i, slot);
  if (st != KVA_OK) return st;
  l1_obj *o = object_at(&m->t, *slot);
  if (!write_held(o, r) || o->readers) return o->zombie ? KVA_KEY_NOT_EXIST : KVA_KEY_WRONG_STATE;
  if (!o->zombie) return KVA_OK;
  l1_set_write_lock(m, o, false);
  l1_settle(m, *slot);
  return KVA_KEY_NOT_EXIST;
}

void l1_finish_write(struct l1_manager *m, l1_req *r, bool and_read) {
  int ok = 0;
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    int st = held_for_write(m, r, i, &slot);
    if (and_read && r->bufs) r->bufs[i] = (kva_buf){0};
    if (st == KVA_OK) {
      l1_obj *o = object_at(&m->t, slot);
      l1_set_write_lock(m, o, false);
      if (and_read) { /* the readers are the engine's: released by key */
        l1_add_readers(m, o, r->readers, false);
        if (r->bufs) r->bufs[i] = (kva_buf){o->ptr, o->bytes};
      }
      l1_note(m, NOTE_WRITE_FINISHED, slot, 0);
      if (!and_read && !o->temporary) l1_written_add(m, slot);
      ok++;
    }
    r->status[i] = st;
  }
  m->st.finished += (uint64_t)ok;
  r->result = ok;
}

/* Removes objects that are still write-locked: the buffers of a load that
 * failed or lies past a gap. Nobody ever read them, so nothing is stored
 * to L2 and nothing is reported but their removal. */
void l1_abort_write(struct l1_manager *m, l1_req *r) {
  int ok = 0;
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    int st = l1_held_slot(m, r, i, &slot);
    if (st == KVA_OK && !write_held(object_at(&m->t, slot), r)) st = KVA_KEY_WRONG_STATE;
    if (st == KVA_OK) {
      l1_remove(m, slot, !object_at(&m->t, slot)->zombie);
      ok++;
    }
    if (r->status) r->status[i] = st;
  }
  r->result = ok;
}
