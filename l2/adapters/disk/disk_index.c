/*
 * disk_index.c — key → slot hash table, slot states, lock counts, the LRU
 * list of idle valid slots and the free stack (disk_index.h).
 *
 * Every transition keeps one invariant: a slot is in the LRU list iff it
 * is VALID and idle (no lock, no load in flight). Eviction is then the LRU
 * head, with no walk past locked slots. A slot joins the list by a touch
 * (touch): at the tail, followed by the idle slots before it in its chain,
 * so the head is the end of the least recently used chain.
 */
#include "l2/adapters/disk/disk_index.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int disk_index_init(disk_index *ix, uint32_t nslots) {
  memset(ix, 0, sizeof(*ix));
  uint32_t nb = 16;
  while (nb < nslots && nb < (1u << 31)) nb <<= 1;
  ix->slots = calloc(nslots ? nslots : 1, sizeof(*ix->slots));
  ix->buckets = malloc(nb * sizeof(*ix->buckets));
  ix->free = malloc((nslots ? nslots : 1) * sizeof(*ix->free));
  ix->hint = calloc(DISK_HINTS, sizeof(*ix->hint));
  if (!ix->slots || !ix->buckets || !ix->free || !ix->hint) {
    disk_index_destroy(ix);
    return KVA_ENOMEM;
  }
  ix->nslots = nslots;
  ix->mask = nb - 1;
  memset(ix->buckets, 0xff, nb * sizeof(*ix->buckets)); /* DISK_NONE */
  ix->lru_head = ix->lru_tail = DISK_NONE;
  for (uint32_t i = 0; i < nslots; i++) {
    ix->slots[i].prev = ix->slots[i].next = ix->slots[i].hnext = DISK_NONE;
    ix->free[i] = nslots - 1 - i; /* popped from the top: slot 0 first */
  }
  ix->nfree = nslots;
  return KVA_OK;
}

void disk_index_destroy(disk_index *ix) {
  free(ix->slots);
  free(ix->buckets);
  free(ix->free);
  free(ix->hint);
  memset(ix, 0, sizeof(*ix));
}

/* ---- hash table --------------------------------------------------------- */

static void hash_insert(disk_index *ix, uint32_t id) {
  uint32_t *head = &ix->buckets[ix->slots[id].key_hash & ix->mask];
  ix->slots[id].hnext = *head;
  *head = id;
}

static void hash_remove(disk_index *ix, uint32_t id) {
  uint32_t *p = &ix->buckets[ix->slots[id].key_hash & ix->mask];
  while (*p != DISK_NONE && *p != id) p = &ix->slots[*p].hnext;
  assert(*p == id);
  *p = ix->slots[id].hnext;
  ix->slots[id].hnext = DISK_NONE;
}

static uint32_t find_state(const disk_index *ix, const kva_key *k, uint64_t hash, bool dropped) {
  if (!ix->slots || !ix->nslots) return DISK_NONE;
  uint32_t found = DISK_NONE;
  for (uint32_t id = ix->buckets[hash & ix->mask]; id != DISK_NONE; id = ix->slots[id].hnext) {
    const disk_slot *s = &ix->slots[id];
    if (s->key_hash != hash || !kva_key_equal(&s->key, k)) continue;
    /* a DROPPED copy is preferred by UNLOCK: it was locked before any
     * VALID copy of the same key, and freeing it early is harmless */
    if (s->state == SLOT_DROPPED && dropped) return id;
    if (s->state == SLOT_VALID) found = id;
  }
  return found;
}

uint32_t disk_index_find(const disk_index *ix, const kva_key *k, uint64_t hash) {
  return find_state(ix, k, hash, false);
}

uint32_t disk_index_find_any(const disk_index *ix, const kva_key *k, uint64_t hash) {
  return find_state(ix, k, hash, true);
}

/* ---- LRU ---------------------------------------------------------------- */

static void lru_remove(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  if (s->prev != DISK_NONE)
    ix->slots[s->prev].next = s->next;
  else
    ix->lru_head = s->next;
  if (s->next != DISK_NONE)
    ix->slots[s->next].prev = s->prev;
  else
    ix->lru_tail = s->prev;
  s->prev = s->next = DISK_NONE;
  ix->nlru--;
}

static void lru_push(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  s->prev = ix->lru_tail;
  s->next = DISK_NONE;
  if (ix->lru_tail != DISK_NONE)
    ix->slots[ix->lru_tail].next = id;
  else
    ix->lru_head = id;
  ix->lru_tail = id;
  ix->nlru++;
}

/* ---- chains ------------------------------------------------------------- */

/* The VALID slot that id continues, or DISK_NONE. Matched on the chain id
 * alone (32 bits: a false match only reorders eviction); the buckets are
 * indexed by the hash's low bits (mask < 2^32), which the id keeps. */
static uint32_t parent_of(const disk_index *ix, uint32_t id) {
  uint32_t p = ix->slots[id].parent;
  if (p == 0) return DISK_NONE;
  for (uint32_t x = ix->buckets[p & ix->mask]; x != DISK_NONE; x = ix->slots[x].hnext)
    if (x != id && ix->slots[x].state == SLOT_VALID && disk_chain_id(ix->slots[x].key_hash) == p)
      return x;
  return DISK_NONE;
}

/* id (VALID, idle, in no list) becomes the most recently used, then each
 * idle slot before it in its chain, in order: a chain's prefix is always
 * more recent than its continuation. The walk stops at a slot it reached
 * already, so a cycle of wrong links ends. */
static void touch(disk_index *ix, uint32_t id) {
  uint32_t walk = ++ix->walks;
  lru_push(ix, id);
  ix->slots[id].walk = walk;
  for (uint32_t x = parent_of(ix, id); x != DISK_NONE && ix->slots[x].walk != walk;
       x = parent_of(ix, x)) {
    ix->slots[x].walk = walk;
    if (!disk_slot_idle(&ix->slots[x])) continue; /* joins the tail when it settles */
    lru_remove(ix, x);
    lru_push(ix, x);
  }
}

void disk_index_follows(disk_index *ix, uint32_t id, uint64_t key_hash, uint64_t prev) {
  uint32_t p = disk_chain_id(prev);
  if (p == disk_chain_id(key_hash)) return; /* a key repeated: no chain */
  if (id != DISK_NONE) {
    if (ix->slots[id].parent == 0) ix->slots[id].parent = p;
    return;
  }
  if (ix->hint) ix->hint[key_hash & (DISK_HINTS - 1)] = (disk_chain_hint){key_hash, p};
}

uint32_t disk_index_hinted(const disk_index *ix, uint64_t key_hash) {
  const disk_chain_hint *h = ix->hint ? &ix->hint[key_hash & (DISK_HINTS - 1)] : NULL;
  return h && h->key_hash == key_hash ? h->parent : 0;
}

/* ---- transitions -------------------------------------------------------- */

/* VALID → out of the lookup-visible set (the caller sets the new state). */
static void unlist_valid(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  if (disk_slot_idle(s)) lru_remove(ix, id);
  hash_remove(ix, id);
  ix->nvalid--;
  ix->bytes -= s->length;
}

uint32_t disk_index_take_free(disk_index *ix) {
  if (!ix->nfree) return DISK_NONE;
  uint32_t id = ix->free[--ix->nfree];
  ix->slots[id].state = SLOT_WRITING;
  return id;
}

uint32_t disk_index_evict(disk_index *ix) {
  uint32_t id = ix->lru_head;
  if (id == DISK_NONE) return DISK_NONE;
  unlist_valid(ix, id);
  ix->slots[id].state = SLOT_WRITING;
  ix->evictions++;
  return id;
}

void disk_index_begin_rewrite(disk_index *ix, uint32_t id) {
  assert(ix->slots[id].state == SLOT_VALID && disk_slot_idle(&ix->slots[id]));
  unlist_valid(ix, id);
  ix->slots[id].state = SLOT_WRITING;
}

void disk_index_release(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  assert(s->reads == 0);
  if (s->state == SLOT_FREE) return;
  if (s->state == SLOT_VALID) unlist_valid(ix, id);
  if (s->state == SLOT_DROPPED) hash_remove(ix, id);
  ix->locks -= s->locks;
  memset(s, 0, sizeof(*s));
  s->prev = s->next = s->hnext = DISK_NONE;
  ix->free[ix->nfree++] = id;
}

void disk_key_normal(const kva_key *in, kva_key *out) {
  memset(out, 0, sizeof(*out));
  /* valid keys only (checked by the callers): the model ends within 64 */
  memcpy(out->model, in->model, strnlen(in->model, sizeof(out->model) - 1));
  out->kv_rank = in->kv_rank;
  out->group = in->group;
  out->hash_len = in->hash_len;
  memcpy(out->hash, in->hash, in->hash_len <= sizeof(out->hash) ? in->hash_len : sizeof(out->hash));
}

static void make_valid(disk_index *ix, uint32_t id, const disk_slot_meta *m) {
  disk_slot *s = &ix->slots[id];
  disk_key_normal(m->key, &s->key);
  s->key_hash = m->key_hash;
  s->seq = m->seq;
  s->fingerprint = m->fingerprint;
  s->length = m->length;
  s->payload_sum = m->payload_sum;
  s->parent = m->parent;
  s->state = SLOT_VALID;
  s->locks = s->reads = 0;
  hash_insert(ix, id);
  touch(ix, id);
  ix->nvalid++;
  ix->bytes += m->length;
}

void disk_index_commit(disk_index *ix, uint32_t id, const disk_slot_meta *m) {
  uint32_t other = disk_index_find(ix, m->key, m->key_hash);
  if (other != DISK_NONE) {
    disk_slot *o = &ix->slots[other];
    if (!disk_slot_idle(o) || o->seq > m->seq) {
      disk_index_release(ix, id); /* the other copy serves the key */
      return;
    }
    disk_index_release(ix, other);
  }
  make_valid(ix, id, m);
}

void disk_index_drop(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  assert(s->state == SLOT_VALID);
  if (disk_slot_idle(s)) {
    disk_index_release(ix, id);
    return;
  }
  s->state = SLOT_DROPPED; /* not idle: not in the LRU list */
  ix->nvalid--;
  ix->bytes -= s->length;
}

/* After a lock or a read went away. */
static void settle(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  if (!disk_slot_idle(s)) return;
  if (s->state == SLOT_VALID)
    touch(ix, id);
  else if (s->state == SLOT_DROPPED)
    disk_index_release(ix, id);
}

void disk_index_lock(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  if (disk_slot_idle(s)) lru_remove(ix, id);
  s->locks++;
  ix->locks++;
}

void disk_index_unlock(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  if (!s->locks) return;
  s->locks--;
  ix->locks--;
  settle(ix, id);
}

void disk_index_read_begin(disk_index *ix, uint32_t id) {
  disk_slot *s = &ix->slots[id];
  if (disk_slot_idle(s)) lru_remove(ix, id);
  s->reads++;
}

void disk_index_read_end(disk_index *ix, uint32_t id) {
  ix->slots[id].reads--;
  settle(ix, id);
}

/* ---- recovery ----------------------------------------------------------- */

void disk_index_recover_begin(disk_index *ix) {
  ix->nfree = 0; /* rebuilt from the states by recover_end */
}

bool disk_index_restore(disk_index *ix, uint32_t id, const disk_slot_meta *m) {
  if (id >= ix->nslots || ix->slots[id].state != SLOT_FREE) return false;
  uint32_t other = disk_index_find(ix, m->key, m->key_hash);
  if (other != DISK_NONE) {
    if (ix->slots[other].seq >= m->seq) return false; /* an older copy: dropped */
    disk_index_release(ix, other);
  }
  make_valid(ix, id, m);
  return true;
}

static int by_seq(const void *a, const void *b, void *arg) {
  const disk_slot *s = arg;
  uint64_t x = s[*(const uint32_t *)a].seq, y = s[*(const uint32_t *)b].seq;
  return x < y ? -1 : x > y;
}

/* Every restored slot is idle, so all are in the LRU list: touched again
 * oldest store first, they end in store order with each chain's prefix
 * after its tail. Without memory for the order, the restore order stays. */
static void lru_by_seq(disk_index *ix) {
  uint32_t *ids = malloc((ix->nlru ? ix->nlru : 1) * sizeof(*ids)), n = 0;
  if (!ids) return;
  for (uint32_t id = ix->lru_head; id != DISK_NONE; id = ix->slots[id].next) ids[n++] = id;
  qsort_r(ids, n, sizeof(*ids), by_seq, ix->slots);
  for (uint32_t i = 0; i < n; i++) {
    lru_remove(ix, ids[i]);
    touch(ix, ids[i]);
  }
  free(ids);
}

void disk_index_recover_end(disk_index *ix) {
  ix->nfree = 0;
  for (uint32_t i = ix->nslots; i-- > 0;)
    if (ix->slots[i].state == SLOT_FREE) ix->free[ix->nfree++] = i;
  lru_by_seq(ix);
}
