/*
 * disk_load.c — LOAD on the disk tier, and the payload iovecs shared with
 * STORE (disk_internal.h).
 *
 * One readv per key: [header block][payload] straight into the L1 buffer
 * (its 4 KiB-aligned body; the last partial block through a bounce block
 * and a memcpy, since O_DIRECT moves whole blocks and the L1 buffer ends
 * at len). Then the bytes in L1 are checked against the header read in
 * the same I/O: intact, same seq as the index, same key, layout, length
 * and payload checksum (every other key's summed by the disk_hasher actor
 * on another core, disk_hasher.c, the read's buffers held until its sum
 * comes back). Only then is the bit set. A slot that fails that
 * check, or whose read failed or timed out, is dropped: never served
 * again, freed once its holders unlocked it.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "l2/adapters/disk/disk_internal.h"

bool disk_payload_iov(disk *d, disk_xop *x, int first, const kva_buf *buf, bool write) {
  int n = first;
  uint8_t *p = buf->ptr;
  uint64_t len = buf->len;
  if (!d->direct) { /* the page cache takes any address and length */
    x->op.iov[n++] = (struct iovec){p, len};
  } else if ((uintptr_t)p % DISK_BLOCK == 0) {
    uint64_t body = len & ~(uint64_t)(DISK_BLOCK - 1), tail = len - body;
    if (body) x->op.iov[n++] = (struct iovec){p, body};
    if (tail) {
      if (!(x->tail = disk_bounce_get(&d->bounce, DISK_BLOCK))) return false;
      if (write) {
        memcpy(x->tail, p + body, tail);
        memset((uint8_t *)x->tail + tail, 0, DISK_BLOCK - tail);
      }
      x->op.iov[n++] = (struct iovec){x->tail, DISK_BLOCK};
    }
  } else { /* misaligned (not L1 memory): all of it through one bounce buffer */
    x->big_bytes = disk_round_up(len);
    if (!(x->big = disk_bounce_get(&d->bounce, x->big_bytes))) return false;
    if (write) {
      memcpy(x->big, p, len);
      memset((uint8_t *)x->big + len, 0, x->big_bytes - len);
    }
    x->op.iov[n++] = (struct iovec){x->big, x->big_bytes};
  }
  x->op.niov = n;
  return true;
}

/* Starts the read of key i, or returns false for a miss without I/O (the
 * key is not here, or not with this layout and size: the slot is fine). */
static bool issue_read(disk *d, disk_task *t, size_t i) {
  const kva_l2_req *r = t->req;
  uint32_t id = disk_index_find(&d->ix, &r->keys[i], kva_key_hash(&r->keys[i]));
  if (id == DISK_NONE) return false;
  const disk_slot *s = &d->ix.slots[id];
  if (s->fingerprint != t->fp || s->length != r->bufs[i].len) return false;
  disk_xop *x = disk_xop_get(d, t, i, XOP_LOAD);
  if (x) x->hdr = disk_bounce_get(&d->bounce, DISK_BLOCK);
  if (!x || !x->hdr || !disk_payload_iov(d, x, 1, &r->bufs[i], false)) {
    if (x) disk_xop_put(d, x);
    return false;
  }
  x->op.iov[0] = (struct iovec){x->hdr, DISK_BLOCK};
  x->op.write = false;
  x->op.off = disk_slot_off(d, id);
  disk_index_read_begin(&d->ix, id); /* neither evicted nor rewritten under the read */
  t->k[i] = (disk_tkey){.slot = id, .seq = s->seq};
  t->pending++;
  disk_io_queue(&d->io, &x->op);
  return true;
}

static void load_finish(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  int result = KVA_OK;
  for (size_t i = 0; i < r->n; i++) {
    if (!kva_bit_get(r->bits, i)) d->stats.load_failures++;
    if (t->k[i].err == -ETIMEDOUT)
      result = KVA_ETIMEDOUT;
    else if (t->k[i].err && result == KVA_OK)
      result = KVA_EIO;
  }
  disk_task_finish(d, t, result);
}

void disk_load_start(disk *d, disk_task *t) {
  const kva_l2_req *r = t->req;
  d->stats.loads += r->n;
  for (size_t i = 0; i < r->n; i++) {
    t->k[i] = (disk_tkey){.slot = DISK_NONE};
    if (d->formatted) issue_read(d, t, i);
  }
  if (disk_task_idle(t)) load_finish(d, t);
}

/* The bounce copies into L1: the checksum is of the bytes the caller
 * will read. */
static void copy_in(disk_xop *x) {
  const kva_buf *b = &x->task->req->bufs[x->key];
  if (x->big) memcpy(b->ptr, x->big, b->len);
  if (x->tail) {
    uint64_t body = b->len & ~(uint64_t)(DISK_BLOCK - 1);
    memcpy((uint8_t *)b->ptr + body, x->tail, b->len - body);
  }
}

/* The header read with the payload against the index and the request,
 * and its payload_sum against the sum of the bytes now in L1. */
static bool verify(const disk_xop *x, uint64_t sum) {
  const disk_task *t = x->task;
  const kva_l2_req *r = t->req;
  const object_header *h = x->hdr;
  return object_header_valid(h) && h->seq == t->k[x->key].seq && h->fingerprint == t->fp &&
         h->length == r->bufs[x->key].len && kva_key_equal(&h->key, &r->keys[x->key]) &&
         h->payload_sum == sum;
}

static void drop(disk *d, uint32_t id, int res) {
  char key[160];
  kva_key_format(&d->ix.slots[id].key, key, sizeof(key));
  kva_log(KVA_LOG_WARN, "%s: slot %u (%s) dropped: %s", d->cfg.name, id, key,
          res ? strerror(-res) : "its bytes do not match its header");
  disk_index_drop(&d->ix, id);
}

/* Key x->key is decided: served (its bit set) or, unless another load
 * dropped it already, its slot dropped. */
static void settle(disk *d, disk_xop *x, bool ok) {
  disk_task *t = x->task;
  disk_tkey *k = &t->k[x->key];
  const disk_slot *s = &d->ix.slots[k->slot];
  bool mine = s->state == SLOT_VALID && s->seq == k->seq; /* not dropped by another load */
  disk_index_read_end(&d->ix, k->slot);
  if (ok)
    kva_bit_set(t->req->bits, x->key);
  else if (mine)
    drop(d, k->slot, k->err);
  disk_xop_put(d, x);
  if (disk_task_idle(t)) load_finish(d, t);
}

void disk_load_done(disk *d, disk_xop *x) {
  disk_task *t = x->task;
  disk_tkey *k = &t->k[x->key];
  const kva_buf *b = &t->req->bufs[x->key];
  t->pending--;
  k->err = x->op.res;
  k->done = true;
  if (k->err) {
    settle(d, x, false);
    return;
  }
  copy_in(x);
  if (disk_hash_share(d, x->key) && disk_hash_send(d, t, x->key, b->ptr, b->len)) {
    k->held = x; /* verified when the sum comes (disk_load_hashed) */
    return;
  }
  settle(d, x, verify(x, object_payload_sum(b->ptr, b->len)));
}

void disk_load_hashed(disk *d, disk_task *t, size_t i) {
  disk_xop *x = t->k[i].held;
  t->k[i].held = NULL;
  settle(d, x, verify(x, t->k[i].sum));
}
