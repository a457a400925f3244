/*
 * l1_read.c — the L1 manager's read side: reserve/finish read, the L1 part
 * of a prefetch, reading prefetched objects, touch.
 *
 * Accesses are reported to the eviction controller in reverse request order
 * (LMCache's touch_cache; docs/invariants.md I-L1-8): the first chunk of a
 * request ends up the most recently used, so a prefix outlives its suffix.
 */
#include <string.h>

#include "common/key.h"
#include "l1/l1_internal.h"

#define READERS_LIMIT 65535u /* read locks one object may accumulate */

/* Looks up every key into sc.slot. */
static void lookup_all(struct l1_manager *m, const l1_req *r) {
  for (size_t i = 0; i < r->n; i++)
    m->sc.slot[i] = object_table_find(&m->t, &r->keys[i], m->sc.hash[i]);
}

/* Notes an access for each key whose slot is set, last key first. */
static void note_touched_reversed(struct l1_manager *m, size_t n) {
  for (size_t i = n; i-- > 0;)
    if (m->sc.slot[i] != NO_SLOT) l1_note(m, NOTE_TOUCHED, m->sc.slot[i], 0);
}

static bool can_add_readers(const l1_obj *o, uint32_t n) {
  return !o->zombie && !o->write_locked && o->readers + n <= READERS_LIMIT;
}

/* Whether the request's read locks are its sender's own (by id). */
static bool own_locks(const l1_req *r) {
  return r->ids && r->own;
}

/* Whether n read locks of that kind are held on o. */
static bool read_held(const l1_obj *o, bool own, uint32_t n) {
  return !o->write_locked && (own ? o->id_readers : l1_key_readers(o)) >= n;
}

/* With r->layout (the store controller's), an object of another layout
 * (its key rewritten since the store was queued) is not locked. */
void l1_reserve_read(struct l1_manager *m, l1_req *r) {
  int ok = 0;
  uint64_t fp = r->layout ? layout_fingerprint(r->layout) : 0;
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    int st = l1_key_slot(m, r, i, &slot);
    if (st == KVA_OK && !can_add_readers(object_at(&m->t, slot), r->readers))
      st = KVA_KEY_NOT_READABLE;
    if (st == KVA_OK && r->layout && object_at(&m->t, slot)->fingerprint != fp)
      st = KVA_KEY_NOT_READABLE;
    m->sc.slot[i] = st == KVA_OK ? slot : NO_SLOT;
    if (r->bufs) r->bufs[i] = (kva_buf){0};
    if (r->ids) r->ids[i] = st == KVA_OK ? object_id(&m->t, slot) : 0;
    if (st == KVA_OK) {
      l1_obj *o = object_at(&m->t, slot);
      l1_add_readers(m, o, r->readers, own_locks(r));
      if (r->bufs) r->bufs[i] = (kva_buf){o->ptr, o->bytes};
      ok++;
    }
    r->status[i] = st;
  }
  note_touched_reversed(m, r->n);
  r->result = ok;
}

void l1_finish_read(struct l1_manager *m, l1_req *r) {
  int ok = 0;
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    int st = l1_held_slot(m, r, i, &slot);
    /* fewer locks than the release names: not released (as kvactd's
     * ledger refuses it, docs/invariants.md I-MP-2) */
    if (st == KVA_OK && !read_held(object_at(&m->t, slot), own_locks(r), r->readers))
      st = KVA_KEY_WRONG_STATE;
    if (st == KVA_OK) {
      bool remove = r->del && r->del[i];
      l1_drop_readers(m, slot, r->readers, own_locks(r));
      /* still there (not temporary, not a zombie), now unlocked: the
       * release and the deletion are one step, so no writer slips between */
      if (remove && object_at(&m->t, slot)->gen && !l1_locked(object_at(&m->t, slot)))
        l1_remove(m, slot, true);
      ok++;
    }
    if (r->status) r->status[i] = st;
  }
  r->result = ok;
}

/* The L1 part of a prefetch: read-lock the contiguous prefix of keys that
 * are present and readable; nothing after the first gap is locked. */
void l1_prefetch(struct l1_manager *m, l1_req *r) {
  lookup_all(m, r);
  size_t hits = 0;
  while (hits < r->n && m->sc.slot[hits] != NO_SLOT &&
         can_add_readers(object_at(&m->t, m->sc.slot[hits]), r->readers)) {
    l1_add_readers(m, object_at(&m->t, m->sc.slot[hits]), r->readers, false);
    hits++;
  }
  note_touched_reversed(m, hits);
  m->st.hits += hits;
  m->st.misses += r->n - hits;
  r->hits = hits;
  r->result = KVA_OK;
}

/* Buffers (and with r->layouts, layouts) of prefetched (read-locked)
 * objects. All or nothing: on a problem, one read lock of every key that
 * holds one is released (the caller will not read them) and the first
 * problem is returned. With r->held, the keys it marks 0 are not the
 * sender's to read or release. */
void l1_read(struct l1_manager *m, l1_req *r) {
  lookup_all(m, r);
  /* a reader of a force-deleted object still reads it: by key, the one
   * indexed object of its key is the reader's (l1_admin.c) */
  int problem = KVA_OK;
  for (size_t i = 0; i < r->n && problem == KVA_OK; i++) {
    uint32_t slot = m->sc.slot[i];
    if (slot == NO_SLOT) {
      problem = KVA_KEY_NOT_EXIST;
    } else if (!read_held(object_at(&m->t, slot), false, 1) || (r->held && !r->held[i])) {
      problem = KVA_KEY_NOT_READABLE;
    } else {
      const l1_obj *o = object_at(&m->t, slot);
      r->bufs[i] = (kva_buf){o->ptr, o->bytes};
      if (r->layouts) r->layouts[i] = o->layout;
    }
  }
  if (problem != KVA_OK) {
    for (size_t i = 0; i < r->n; i++) {
      r->bufs[i] = (kva_buf){0};
      if (r->layouts) memset(&r->layouts[i], 0, sizeof(r->layouts[i]));
      uint32_t slot = m->sc.slot[i];
      if (slot != NO_SLOT && (!r->held || r->held[i])) l1_drop_readers(m, slot, 1, false);
    }
  }
  r->result = problem;
}

void l1_touch(struct l1_manager *m, l1_req *r) {
  int found = 0;
  for (size_t i = 0; i < r->n; i++) {
    l1_key_slot(m, r, i, &m->sc.slot[i]);
    found += m->sc.slot[i] != NO_SLOT;
  }
  note_touched_reversed(m, r->n);
  r->result = found;
}

/* kva_lookup's L1 tier: the contiguous prefix of keys present and
 * readable; with pin, each of them gets one pin (not evictable, still
 * readable) until L1_UNPIN. */
void l1_lookup(struct l1_manager *m, l1_req *r) {
  lookup_all(m, r);
  size_t hits = 0;
  while (hits < r->n && m->sc.slot[hits] != NO_SLOT &&
         !object_at(&m->t, m->sc.slot[hits])->write_locked &&
         !object_at(&m->t, m->sc.slot[hits])->zombie) {
    l1_obj *o = object_at(&m->t, m->sc.slot[hits]);
    if (r->pin && o->pins == UINT32_MAX) break;
    if (r->pin) o->pins++;
    hits++;
  }
  note_touched_reversed(m, hits);
  r->hits = hits;
  r->result = KVA_OK;
}

void l1_unpin(struct l1_manager *m, l1_req *r) {
  int ok = 0;
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    int st = l1_key_slot(m, r, i, &slot);
    if (st == KVA_OK && object_at(&m->t, slot)->pins == 0) st = KVA_KEY_WRONG_STATE;
    if (st == KVA_OK) {
      object_at(&m->t, slot)->pins--;
      l1_settle(m, slot); /* a temporary object outlives its last reader while pinned */
      ok++;
    }
    if (r->status) r->status[i] = st;
  }
  r->result = ok;
}

void l1_inspect(struct l1_manager *m, l1_req *r) {
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    l1_key_slot(m, r, i, &slot);
    if (slot == NO_SLOT) {
      r->status[i] = L1_ABSENT;
      continue;
    }
    const l1_obj *o = object_at(&m->t, slot);
    r->status[i] = (int)(o->readers & 0xffffff) | (o->write_locked ? L1_WRITE_LOCKED : 0) |
                   (o->temporary ? L1_TEMPORARY : 0) | (o->pins ? L1_PINNED : 0);
  }
  r->result = KVA_OK;
}
