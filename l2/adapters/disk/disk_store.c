/*
 * disk_store.c — STORE on the disk tier (disk_internal.h).
 *
 * All or nothing before any I/O: the task is refused (nothing changes) if
 * a key is locked or being loaded (KVA_EAGAIN) or if its keys do not fit
 * in free plus evictable slots (KVA_ENOMEM). Then per distinct key: take
 * its own slot (rewrite in place), a free one, or the LRU idle one; it is
 * WRITING, so lookups miss it. The payload is written first; its checksum
 * is computed meanwhile (from the L1 bytes, read-locked by the sender
 * until the reply), every other key's by the disk_hasher actor on another
 * core (disk_hasher.c), and once both the write completed and the sum is
 * known the sealed header is written. A process killed in between leaves
 * no header matching the payload, so the slot is dropped at recovery. The
 * header is not linked to the payload in the ring: issuing it after the
 * payload's completion keeps every submission one op + its link timeout,
 * so a full ring never splits a chain, and the order on disk is the same.
 *
 * A STORE's keys are taken as a chain in order (a request's consecutive
 * chunks): each key continues the one before it, the first the key a
 * lookup saw before it (disk_index_follows). The header records it, so
 * eviction takes a chain's end before its prefix (disk_index.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/disk/disk_internal.h"

/* ---- planning ----------------------------------------------------------- */

/* Marks later copies of a key (slot = DISK_NONE, seq = 0) so each key is
 * written once; an open-addressing table of key indexes over key_hash. */
static int dedup(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  size_t cap = 16;
  while (cap < 2 * r->n) cap <<= 1;
  if (cap > d->dedup_cap) {
    uint32_t *p = realloc(d->dedup, cap * sizeof(*p));
    if (!p) return KVA_ENOMEM;
    d->dedup = p;
    d->dedup_cap = cap;
  }
  memset(d->dedup, 0xff, cap * sizeof(*d->dedup));
  for (size_t i = 0; i < r->n; i++) {
    size_t h = (size_t)kva_key_hash(&r->keys[i]) & (cap - 1);
    t->k[i].seq = 1; /* first copy, to write */
    for (; d->dedup[h] != UINT32_MAX; h = (h + 1) & (cap - 1))
      if (kva_key_equal(&r->keys[d->dedup[h]], &r->keys[i])) {
        t->k[i].seq = 0;
        break;
      }
    if (t->k[i].seq) d->dedup[h] = (uint32_t)i;
  }
  return KVA_OK;
}

/* Formats a fresh tier for the first objects it sees; checks sizes. */
static int check_room(disk *d, const kva_l2_req *r) {
  uint64_t biggest = 0;
  for (size_t i = 0; i < r->n; i++)
    if (r->bufs[i].len > biggest) biggest = r->bufs[i].len;
  if (!d->formatted) {
    uint64_t slot = d->cfg.slot_bytes ? d->cfg.slot_bytes : disk_slot_bytes_for(biggest);
    int rc = disk_format(d, slot);
    if (rc == KVA_ENOMEM)
      kva_log(KVA_LOG_WARN, "%s: %llu bytes hold no slot of %llu bytes: nothing can be stored",
              d->cfg.name, (unsigned long long)d->file_bytes, (unsigned long long)slot);
    if (rc != KVA_OK) return rc;
    kva_log(KVA_LOG_INFO, "%s: %s formatted: %llu slots of %llu bytes", d->cfg.name, d->cfg.path,
            (unsigned long long)d->super.nslots, (unsigned long long)slot);
  }
  if (biggest > d->super.slot_bytes - DISK_BLOCK) {
    if (!d->warned_size)
      kva_log(KVA_LOG_WARN,
              "%s: an object of %llu bytes does not fit slots of %llu bytes: not stored "
              "(set slot_bytes, or use a new file)",
              d->cfg.name, (unsigned long long)biggest, (unsigned long long)d->super.slot_bytes);
    d->warned_size = true;
    return KVA_ENOMEM;
  }
  return KVA_OK;
}

/* Refuses the task (changing nothing) when a key is busy or the keys that
 * need a new slot outnumber free plus evictable slots. */
static int check_slots(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  uint64_t rewrite = 0, fresh = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (!t->k[i].seq) continue;
    uint32_t id = disk_index_find_any(&d->ix, &r->keys[i], kva_key_hash(&r->keys[i]));
    if (id == DISK_NONE)
      fresh++;
    else if (d->ix.slots[id].state != SLOT_VALID || !disk_slot_idle(&d->ix.slots[id]))
      return KVA_EAGAIN;
    else
      rewrite++;
  }
  /* the rewritten slots are idle VALID ones, so they are in the LRU count */
  return fresh > d->ix.nfree + (d->ix.nlru - rewrite) ? KVA_ENOMEM : KVA_OK;
}

/* The chain id of the key key i continues (see the top), 0 for none. */
static uint32_t chain_parent(const disk *d, const kva_l2_req *r, size_t i) {
  uint64_t h = kva_key_hash(&r->keys[i]);
  uint32_t p = i ? disk_chain_id(kva_key_hash(&r->keys[i - 1])) : disk_index_hinted(&d->ix, h);
  return p == disk_chain_id(h) ? 0 : p; /* a key repeated is not its own prefix */
}

/* Takes a slot for every key to write: its own first (so eviction below
 * cannot take a slot of this task), then free ones, then the LRU. */
static void take_slots(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  for (size_t i = 0; i < r->n; i++) {
    t->k[i].slot = DISK_NONE;
    if (!t->k[i].seq) continue;
    t->k[i].parent = chain_parent(d, r, i);
    uint32_t id = disk_index_find(&d->ix, &r->keys[i], kva_key_hash(&r->keys[i]));
    if (id != DISK_NONE) disk_index_begin_rewrite(&d->ix, id);
    t->k[i].slot = id;
  }
  for (size_t i = 0; i < r->n; i++) {
    if (!t->k[i].seq || t->k[i].slot != DISK_NONE) continue;
    uint32_t id = disk_index_take_free(&d->ix);
    if (id == DISK_NONE) id = disk_index_evict(&d->ix);
    t->k[i].slot = id; /* check_slots made sure there is one */
  }
}

/* ---- I/O ---------------------------------------------------------------- */

static void issue_payload(disk *d, disk_task *t, size_t i) {
  const kva_buf *b = &t->req->bufs[i];
  disk_tkey *k = &t->k[i];
  k->seq = ++d->super.seq;
  disk_xop *x = disk_xop_get(d, t, i, XOP_PAYLOAD);
  if (!x || !disk_payload_iov(d, x, 0, b, true)) {
    if (x) disk_xop_put(d, x);
    k->err = -ENOMEM;
    return;
  }
  x->op.write = true;
  x->op.off = disk_slot_off(d, k->slot) + DISK_BLOCK;
  t->pending++;
  disk_io_queue(&d->io, &x->op);
}

/* The payload of key i is on disk and its sum known: the header that
 * makes the slot valid. */
static void issue_header(disk *d, disk_task *t, size_t i) {
  disk_tkey *k = &t->k[i];
  const kva_l2_req *r = t->req;
  disk_xop *x = disk_xop_get(d, t, i, XOP_HEADER);
  if (x) x->hdr = disk_bounce_get(&d->bounce, DISK_BLOCK);
  if (!x || !x->hdr) {
    if (x) disk_xop_put(d, x);
    k->err = -ENOMEM;
    return;
  }
  memset(x->hdr, 0, DISK_BLOCK);
  object_header *h = x->hdr;
  h->magic = OBJECT_MAGIC;
  h->version = DISK_VERSION;
  h->parent = k->parent;
  h->seq = k->seq;
  h->fingerprint = t->fp;
  h->length = r->bufs[i].len;
  h->payload_sum = k->sum;
  disk_key_normal(&r->keys[i], &h->key);
  object_header_seal(h);
  x->op.write = true;
  x->op.small = true;
  x->op.off = disk_slot_off(d, k->slot);
  x->op.iov[0] = (struct iovec){x->hdr, DISK_BLOCK};
  x->op.niov = 1;
  t->pending++;
  disk_io_queue_front(&d->io, &x->op);
}

/* Every I/O of the task completed: failed keys' slots go back to the free
 * stack, stored ones become VALID. */
static void store_finish(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  int result = KVA_OK;
  for (size_t i = 0; i < r->n; i++) {
    disk_tkey *k = &t->k[i];
    if (k->slot == DISK_NONE) continue;
    if (k->err) {
      disk_index_release(&d->ix, k->slot);
      if (result != KVA_ETIMEDOUT) result = k->err == -ETIMEDOUT ? KVA_ETIMEDOUT : KVA_EIO;
      continue;
    }
    disk_slot_meta m = {.key = &r->keys[i],
                        .key_hash = kva_key_hash(&r->keys[i]),
                        .seq = k->seq,
                        .fingerprint = t->fp,
                        .length = r->bufs[i].len,
                        .payload_sum = k->sum,
                        .parent = k->parent};
    disk_index_commit(&d->ix, k->slot, &m);
  }
  if (result != KVA_OK) d->stats.store_failures++;
  disk_task_finish(d, t, result);
}

/* Sums up to n more payloads in issue order (those in flight first), so
 * the CPU work overlaps the writes and a header can follow its payload at
 * once. */
static void hash_ahead(disk_task *t, size_t n) {
  const kva_l2_req *r = t->req;
  for (; n && t->next_hash < r->n; t->next_hash++) {
    disk_tkey *k = &t->k[t->next_hash];
    if (k->slot == DISK_NONE || k->hashed || k->job || k->err) continue;
    k->sum = object_payload_sum(r->bufs[t->next_hash].ptr, r->bufs[t->next_hash].len);
    k->hashed = true;
    n--;
  }
}

/* The hasher's share of the sums, asked for in issue order (up to the
 * jobs it may have out; each answer asks for more): it works through them
 * while the writes fly. A key hash_ahead reached first is summed here. */
static void share_hashes(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  for (; t->next_share < r->n; t->next_share++) {
    size_t i = t->next_share;
    const disk_tkey *k = &t->k[i];
    if (k->slot == DISK_NONE || k->err || k->hashed || !disk_hash_share(d, i)) continue;
    if (!disk_hash_send(d, t, i, r->bufs[i].ptr, r->bufs[i].len)) return;
  }
}

void disk_store_start(disk *d, disk_task *t) {
  d->stats.stores++;
  int rc = check_room(d, t->req);
  if (rc == KVA_OK) rc = dedup(d, t);
  if (rc == KVA_OK) rc = check_slots(d, t);
  if (rc != KVA_OK) {
    for (size_t i = 0; i < t->req->n; i++) t->k[i].slot = DISK_NONE;
    d->stats.store_failures++;
    disk_task_finish(d, t, rc);
    return;
  }
  take_slots(d, t);
  for (size_t i = 0; i < t->req->n; i++)
    if (t->k[i].slot != DISK_NONE) issue_payload(d, t, i);
  t->next_hash = t->next_share = 0;
  disk_io_submit(&d->io); /* the writes go first, their checksums while they fly */
  share_hashes(d, t);
  hash_ahead(t, d->io.depth);
  if (disk_task_idle(t)) store_finish(d, t);
}

void disk_store_done(disk *d, disk_xop *x) {
  disk_task *t = x->task;
  size_t i = x->key;
  disk_tkey *k = &t->k[i];
  t->pending--;
  if (x->op.res && !k->err) k->err = x->op.res;
  bool payload = x->stage == XOP_PAYLOAD;
  disk_xop_put(d, x); /* payload buffers back: the header needs its own */
  if (payload && !k->err) {
    /* summed while the writes fly (hash_ahead, the hasher), never before
     * the first write is out: the sender keeps the L1 bytes read-locked
     * (unchanged) until the reply */
    k->done = true;
    const kva_buf *b = &t->req->bufs[i];
    if (!k->hashed && !k->job) {
      k->sum = object_payload_sum(b->ptr, b->len);
      k->hashed = true;
    }
    if (k->hashed) issue_header(d, t, i); /* else when the hasher answers */
    hash_ahead(t, 1);
  }
  if (disk_task_idle(t)) store_finish(d, t);
}

void disk_store_hashed(disk *d, disk_task *t, size_t i) {
  disk_tkey *k = &t->k[i];
  if (k->done && !k->err) issue_header(d, t, i);
  share_hashes(d, t);
  if (disk_task_idle(t)) store_finish(d, t);
}
