/*
 * l1_admin.c — the L1 manager's object bookkeeping and its maintenance
 * requests: delete, clear, watermark eviction, memcheck, stats.
 *
 * Forced deletes and who finds a deleted object. A pinned object is never
 * deleted, forced or not (I-L1-12: a pin is a lookup's promise that a load
 * will find it). A forced delete (or clear)
 * of a read- or write-locked object cannot free its block: a holder still reads or writes
 * it. The object becomes a zombie: out of the eviction policy, never
 * readable, writable, lookable or prefetchable again, its block kept until
 * the last lock goes. Its holders must still reach it, and nobody else may:
 *  - a controller's lock is taken with the object's id (generation + slot)
 *    and released by that id, so it always reaches its own object;
 *  - an engine's lock (kva_reserve_write, a prefetch's read locks) is
 *    released by key, and a key names one object only if a key has at most
 *    one object reachable by key. So a zombie with by-key holders stays in
 *    the key index: the key is not writable (KVA_KEY_NOT_WRITABLE) and a
 *    prefetch of it misses until those holders let go; then the zombie
 *    leaves the index (or goes, when unlocked) and the key is free again.
 *    A zombie held only by id leaves the index at once, so the key can be
 *    written again while a store task still copies the old bytes.
 * The other choice, every by-key lock recording which object it holds,
 * would need the caller to name its object, and the by-key calls of
 * kvact.h cannot: two readers of one key are indistinguishable. By-key
 * releases also never take a lock that was taken by id (l1_key_readers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "common/key.h"
#include "l1/l1_internal.h"

bool l1_locked(const l1_obj *o) {
  return o->write_locked || o->readers > 0 || o->pins > 0;
}

void l1_set_write_lock(struct l1_manager *m, l1_obj *o, bool on) {
  if (o->write_locked == on) return;
  o->write_locked = on;
  if (on)
    m->n_write_locked++;
  else
    m->n_write_locked--;
}

void l1_add_readers(struct l1_manager *m, l1_obj *o, uint32_t n, bool by_id) {
  if (o->readers == 0) m->n_read_locked++;
  o->readers += n;
  if (by_id) o->id_readers += n;
}

void l1_drop_readers(struct l1_manager *m, uint32_t slot, uint32_t n, bool by_id) {
  l1_obj *o = object_at(&m->t, slot);
  uint32_t held = by_id ? o->id_readers : l1_key_readers(o);
  if (n > held) n = held;
  if (n == 0) return;
  o->readers -= n;
  if (by_id) o->id_readers -= n;
  if (o->readers == 0) m->n_read_locked--;
  l1_settle(m, slot);
}

/* Whether an engine (by key) still holds a lock on the object. */
static bool key_held(const l1_obj *o) {
  return (o->write_locked && !o->write_by_id) || l1_key_readers(o) > 0;
}

void l1_settle(struct l1_manager *m, uint32_t slot) {
  l1_obj *o = object_at(&m->t, slot);
  if (o->zombie) {
    if (!o->write_locked && !o->readers)
      l1_remove(m, slot, false);
    else if (!key_held(o))
      object_table_unlink(&m->t, slot);
  } else if (o->temporary && !l1_locked(o)) {
    l1_remove(m, slot, true);
  }
}

/* Forgets an object and returns its block to the pool. */
void l1_remove(struct l1_manager *m, uint32_t slot, bool notify) {
  l1_obj *o = object_at(&m->t, slot);
  if (o->zombie) {
    m->n_zombies--;
    notify = false; /* the policy forgot it when it became a zombie */
  }
  if (notify) l1_note(m, NOTE_REMOVED, slot, 0);
  if (o->write_locked) m->n_write_locked--;
  if (o->readers) m->n_read_locked--;
  if (o->temporary) m->n_temporary--;
  if (o->ptr) pool_free(m->pool, o->ptr);
  object_table_remove(&m->t, slot);
}

bool l1_seen(struct l1_manager *m, uint32_t slot) {
  l1_obj *o = object_at(&m->t, slot);
  if (o->stamp == m->stamp) return true;
  o->stamp = m->stamp;
  return false;
}

/* Deletes an object: at once when unlocked; a locked one becomes a zombie
 * (out of the eviction policy, never readable or writable again, its block
 * kept) until its holders have released it. */
static void l1_force_remove(struct l1_manager *m, uint32_t slot) {
  l1_obj *o = object_at(&m->t, slot);
  if (!o->write_locked && !o->readers) {
    l1_remove(m, slot, true);
    return;
  }
  l1_note(m, NOTE_REMOVED, slot, 0);
  o->zombie = true;
  o->pins = 0;
  m->n_zombies++;
  l1_settle(m, slot);
}

int l1_held_slot(struct l1_manager *m, const l1_req *r, size_t i, uint32_t *slot) {
  if (r->ids) {
    *slot = object_table_by_id(&m->t, r->ids[i]);
    if (*slot != NO_SLOT && !key_equal(&object_at(&m->t, *slot)->key, &r->keys[i])) *slot = NO_SLOT;
  } else {
    *slot = object_table_find(&m->t, &r->keys[i], m->sc.hash[i]);
  }
  return *slot == NO_SLOT ? KVA_KEY_NOT_EXIST : KVA_OK;
}

int l1_key_slot(struct l1_manager *m, const l1_req *r, size_t i, uint32_t *slot) {
  *slot = object_table_find(&m->t, &r->keys[i], m->sc.hash[i]);
  if (*slot != NO_SLOT && object_at(&m->t, *slot)->zombie) *slot = NO_SLOT;
  return *slot == NO_SLOT ? KVA_KEY_NOT_EXIST : KVA_OK;
}

void l1_delete(struct l1_manager *m, l1_req *r) {
  int ok = 0;
  for (size_t i = 0; i < r->n; i++) {
    uint32_t slot;
    int st = l1_key_slot(m, r, i, &slot);
    const l1_obj *o = st == KVA_OK ? object_at(&m->t, slot) : NULL;
    if (o && (o->pins > 0 || (!r->force && l1_locked(o)))) st = KVA_KEY_LOCKED; /* I-L1-12 */
    if (st == KVA_OK) {
      l1_force_remove(m, slot);
      ok++;
    }
    r->status[i] = st;
  }
  r->result = ok;
}

void l1_clear(struct l1_manager *m, l1_req *r) {
  int removed = 0;
  for (uint32_t slot = 0; slot < m->t.nslots; slot++) {
    l1_obj *o = object_at(&m->t, slot);
    if (o->gen == 0 || o->zombie || o->pins > 0 || (!r->force && l1_locked(o))) continue;
    l1_force_remove(m, slot);
    removed++;
  }
  r->result = removed;
}

/* Watermark eviction: unlocked candidates in the controller's order until
 * `target` bytes are freed. The answer says where it stopped, so the
 * controller can send the next page when this one ran out. */
void l1_evict(struct l1_manager *m, const evict_list *l) {
  evict_done d = {0};
  uint32_t i = 0;
  for (; i < l->n && d.freed < l->target; i++) {
    d.after = l->ids[i];
    uint32_t slot = object_table_by_id(&m->t, l->ids[i]);
    if (slot == NO_SLOT || l1_locked(object_at(&m->t, slot))) continue;
    d.freed += pool_block_bytes(m->pool, object_at(&m->t, slot)->bytes);
    l1_remove(m, slot, true);
    m->st.evicted++;
  }
  d.exhausted = i == l->n && d.freed < l->target;
  l1_note_flush(m); /* the removals reach the controller before the answer */
  if (m->evictor && kva_send(m->evictor, EC_EVICT_DONE, &d, sizeof(d), m->self, 0) != KVA_OK)
    m->evictor = NULL;
}

/* Appends the first locked objects to the report. */
static void report_locked(struct l1_manager *m, char *out, size_t len, bool callers_only) {
  size_t o = strlen(out);
  unsigned shown = 0;
  for (uint32_t slot = 0; slot < m->t.nslots && shown < 4; slot++) {
    l1_obj *ob = object_at(&m->t, slot);
    if (ob->gen == 0 || !l1_locked(ob)) continue;
    if (callers_only && !ob->write_locked && !ob->pins && !l1_key_readers(ob)) continue;
    char k[160], own[48] = "";
    key_format(&ob->key, k, sizeof(k));
    if (ob->id_readers) snprintf(own, sizeof(own), " (%u of the store-behind)", ob->id_readers);
    int w = snprintf(out + o, len - o, "%s%s (%s, %u readers%s, %u pins)", shown ? "; " : ": ", k,
                     ob->write_locked ? "write-locked"
                     : ob->zombie     ? "deleted, still read"
                                      : "ready",
                     ob->readers, own, ob->pins);
    if (w < 0 || (size_t)w >= len - o) return;
    o += (size_t)w;
    shown++;
  }
}

/* Objects locked, by holder: a caller's (by key, a write lock, a pin) or
 * kvact's store-behind's (read locks taken by id and own: the store
 * controller's, I-L1-7). */
static kva_memcheck_report count_locked(struct l1_manager *m) {
  kva_memcheck_report c = {0};
  for (uint32_t slot = 0; slot < m->t.nslots; slot++) {
    const l1_obj *o = object_at(&m->t, slot);
    if (o->gen == 0) continue;
    c.caller_write_locked += o->write_locked;
    c.caller_read_locked += l1_key_readers(o) > 0;
    c.caller_pinned += o->pins > 0;
    c.store_read_locked += o->id_readers > 0;
  }
  return c;
}

/* Recounts everything and compares with the maintained counters. */
static int check_accounting(struct l1_manager *m, char *out, size_t len) {
  uint64_t objs = 0, blocks = 0, w = 0, rd = 0, tmp = 0, zombies = 0, indexed = 0;
  for (uint32_t slot = 0; slot < m->t.nslots; slot++) {
    l1_obj *o = object_at(&m->t, slot);
    if (o->gen == 0) continue;
    objs++;
    blocks += pool_block_bytes(m->pool, o->bytes);
    w += o->write_locked;
    rd += o->readers > 0;
    tmp += o->temporary;
    zombies += o->zombie;
    indexed += o->indexed;
    if (o->write_locked && o->readers) {
      snprintf(out, len, "l1: an object is write-locked and read-locked at once");
      return KVA_EIO;
    }
    if (o->id_readers > o->readers || (o->zombie && (!l1_locked(o) || o->pins)) ||
        (o->zombie && o->indexed && !key_held(o))) {
      snprintf(out, len, "l1: a deleted object's locks are inconsistent");
      return KVA_EIO;
    }
  }
  if (zombies != m->n_zombies || indexed != m->t.count) {
    snprintf(out, len, "l1: %lu deleted objects (counted %lu), %lu indexed (index %lu)",
             (unsigned long)zombies, (unsigned long)m->n_zombies, (unsigned long)indexed,
             (unsigned long)m->t.count);
    return KVA_EIO;
  }
  if (objs != m->t.records || objs != pool_live_blocks(m->pool) || blocks != pool_used(m->pool) ||
      w != m->n_write_locked || rd != m->n_read_locked || tmp != m->n_temporary) {
    snprintf(out, len,
             "l1: accounting mismatch: %lu objects (table %lu, pool blocks %lu), %lu bytes "
             "(pool %lu), locks %lu/%lu (counted %lu/%lu), temporary %lu (counted %lu)",
             (unsigned long)objs, (unsigned long)m->t.records,
             (unsigned long)pool_live_blocks(m->pool), (unsigned long)blocks,
             (unsigned long)pool_used(m->pool), (unsigned long)m->n_write_locked,
             (unsigned long)m->n_read_locked, (unsigned long)w, (unsigned long)rd,
             (unsigned long)m->n_temporary, (unsigned long)tmp);
    return KVA_EIO;
  }
  return KVA_OK;
}

/* "l1: W write-locked and R read-locked objects[, P pinned]", then how
 * many of the read-locked are the store-behind's, then the first locked
 * objects. */
static void report_locks(struct l1_manager *m, const kva_memcheck_report *c, bool callers_only,
                         char *out, size_t len) {
  int w = snprintf(out, len, "l1: %lu write-locked and %lu read-locked objects",
                   (unsigned long)m->n_write_locked, (unsigned long)m->n_read_locked);
  if (c->caller_pinned && w > 0 && (size_t)w < len)
    w += snprintf(out + w, len - (size_t)w, ", %lu pinned", (unsigned long)c->caller_pinned);
  if (c->store_read_locked && w > 0 && (size_t)w < len)
    snprintf(out + w, len - (size_t)w,
             "; %lu read-locked by kvact's store-behind (L1->L2 stores in flight%s), %lu by "
             "callers",
             (unsigned long)c->store_read_locked, callers_only ? ", not counted" : "",
             (unsigned long)c->caller_read_locked);
  report_locked(m, out, len, callers_only);
}

/* With r->callers_only the store-behind's read locks are counted and
 * reported but do not fail the check; r->memcheck (optional) gets the
 * counts. */
void l1_memcheck(struct l1_manager *m, l1_req *r) {
  char tmp[512] = "";
  char *out = r->report && r->report_len ? r->report : tmp;
  size_t len = r->report && r->report_len ? r->report_len : sizeof(tmp);
  out[0] = '\0';
  int rc = pool_memcheck(m->pool, out, len);
  if (rc == KVA_OK) rc = check_accounting(m, out, len);
  kva_memcheck_report c = count_locked(m);
  if (r->memcheck) *r->memcheck = c;
  bool callers = c.caller_write_locked || c.caller_read_locked || c.caller_pinned;
  if (rc == KVA_OK && (callers || (c.store_read_locked && !r->callers_only))) {
    report_locks(m, &c, r->callers_only, out, len);
    rc = KVA_EIO;
  }
  if (rc != KVA_OK) {
    r->result = rc;
    return;
  }
  int w = snprintf(out, len, "ok: %lu objects, %lu bytes used of %lu",
                   (unsigned long)(m->t.records - m->n_zombies), (unsigned long)pool_used(m->pool),
                   (unsigned long)pool_capacity(m->pool));
  if (c.store_read_locked && w > 0 && (size_t)w < len)
    snprintf(out + w, len - (size_t)w, "; %lu read-locked by kvact's store-behind, not counted",
             (unsigned long)c.store_read_locked);
  r->result = KVA_OK;
}

void l1_stats(struct l1_manager *m, l1_req *r) {
  kva_storage_stats *s = r->stats;
  *s = m->st;
  s->l1_capacity_bytes = pool_capacity(m->pool);
  s->l1_used_bytes = pool_used(m->pool);
  s->l1_objects = m->t.records - m->n_zombies;
  s->l1_write_locked = m->n_write_locked;
  s->l1_read_locked = m->n_read_locked;
  s->l1_temporary = m->n_temporary;
  s->l1_pinned = pool_is_pinned(m->pool);
  s->l1_numa_node = pool_numa_node(m->pool);
  r->result = KVA_OK;
}
