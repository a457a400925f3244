/*
 * disk_recover.c — the disk tier's index across restarts (disk_internal.h),
 * by the generation rule of disk_format.h.
 *
 * Clean stop: the index region lists (seq, key_hash) per slot, then the
 * superblock says clean = 1. Start after a clean stop: every listed slot's
 * header block is re-read and must be intact with the same seq and key
 * hash; its payload checksum is trusted here because every LOAD checks it
 * again; an unlisted slot is free, whatever its header says. Start after a
 * crash (clean = 0): every slot's header is read; one at or below
 * super.seq that the index does not list is dead (superseded, evicted or
 * discarded before the last clean stop), every other one has its payload
 * checksummed, and one that does not match its header (killed mid-store:
 * the header is written only after the payload, so the old header now
 * describes other bytes) is dropped. When a key is found twice the higher
 * sequence number wins. After a crash scan the index region is rewritten
 * before the superblock raises super.seq over what the scan found, so the
 * rule holds for the next start too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/disk/disk_internal.h"

/* Bytes of the index region for the current geometry. */
static uint64_t index_bytes(const disk *d) {
  return disk_index_bytes(d->super.nslots);
}

static void *aligned(uint64_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, DISK_BLOCK, (size_t)disk_round_up(bytes)) != 0) return NULL;
  memset(p, 0, (size_t)disk_round_up(bytes));
  return p;
}

/* A header that can describe a slot of this tier at all. */
static bool header_usable(const disk *d, const object_header *h) {
  return object_header_valid(h) && kva_key_valid(&h->key) && h->seq > 0 &&
         h->seq < DISK_SEQ_LIMIT && h->length > 0 &&
         h->length <= disk_slot_capacity(d->super.slot_bytes);
}

/* Restores a slot that verified; false when a newer copy of its key won. */
static bool restore(disk *d, uint32_t id, const object_header *h) {
  disk_slot_meta m = {.key = &h->key,
                      .key_hash = kva_key_hash(&h->key),
                      .seq = h->seq,
                      .fingerprint = h->fingerprint,
                      .length = h->length,
                      .payload_sum = h->payload_sum,
                      .parent = h->parent};
  return disk_index_restore(&d->ix, id, &m);
}

/* What a start found besides the objects it restored. */
typedef struct recover_counts {
  uint64_t dropped;    /* did not verify */
  uint64_t superseded; /* a newer copy of the key won, or dead by the generation rule */
} recover_counts;

/* Clean: each listed header verified. */
static int recover_clean(disk *d, const disk_index_entry *e, object_header *h, recover_counts *c) {
  int rc = 0;
  for (uint32_t id = 0; rc == 0 && id < d->super.nslots; id++) {
    if (e[id].seq == 0) continue;
    rc = disk_pread(d, h, DISK_BLOCK, disk_slot_off(d, id));
    bool ok = rc == 0 && header_usable(d, h) && disk_entry_names(&e[id], h);
    if (ok && h->seq > d->super.seq) d->super.seq = h->seq; /* never reissue a seq */
    if (ok && !restore(d, id, h))
      c->superseded++;
    else if (!ok)
      c->dropped++;
    if (rc == -EIO) rc = 0; /* a bad block loses its slot, not the tier */
  }
  return rc;
}

/* Crash: every header read; the slots the generation rule may keep
 * checksummed. super.seq ends at the highest seq of any intact header. */
static int recover_scan(disk *d, const disk_index_entry *e, object_header *h, recover_counts *c) {
  uint64_t cap = disk_slot_capacity(d->super.slot_bytes), floor = d->super.seq;
  uint8_t *payload = aligned(cap);
  if (!payload) return -ENOMEM;
  int rc = 0;
  for (uint32_t id = 0; rc == 0 && id < d->super.nslots; id++) {
    uint64_t off = disk_slot_off(d, id);
    rc = disk_pread(d, h, DISK_BLOCK, off);
    if (rc == 0 && !header_usable(d, h)) continue; /* free, torn or never written */
    if (rc == 0 && h->seq > d->super.seq) d->super.seq = h->seq;
    if (rc == 0 && h->seq <= floor && !disk_entry_names(&e[id], h)) {
      c->superseded++; /* dead before the last clean stop */
      continue;
    }
    if (rc == 0) rc = disk_pread(d, payload, disk_round_up(h->length), off + DISK_BLOCK);
    bool ok = rc == 0 && object_payload_sum(payload, h->length) == h->payload_sum;
    if (ok && !restore(d, id, h))
      c->superseded++;
    else if (!ok)
      c->dropped++;
    if (rc == -EIO) rc = 0;
  }
  free(payload);
  return rc;
}

/* After a crash scan: the index of what it found, durable before the
 * superblock raises super.seq (disk_open.c writes it next). */
static int save_scanned(disk *d) {
  int rc = disk_save_index(d, true);
  if (rc == 0 && fdatasync(d->fd) != 0) rc = -errno;
  return rc;
}

int disk_recover(disk *d, char *err, size_t errlen) {
  object_header *h = aligned(DISK_BLOCK);
  disk_index_entry *e = aligned(index_bytes(d));
  recover_counts c = {0, 0};
  bool clean = d->super.clean == 1;
  int rc = h && e ? disk_pread(d, e, index_bytes(d), DISK_INDEX_OFFSET) : -ENOMEM;
  disk_index_recover_begin(&d->ix);
  if (rc == 0) rc = clean ? recover_clean(d, e, h, &c) : recover_scan(d, e, h, &c);
  disk_index_recover_end(&d->ix);
  const char *what = clean ? "read the saved index" : "read the slots";
  if (rc == 0 && !clean && (rc = save_scanned(d)) != 0) what = "write the index";
  free(h);
  free(e);
  if (rc != 0) {
    snprintf(err, errlen, "path %s: cannot %s: %s", d->cfg.path, what, strerror(-rc));
    return rc == -ENOMEM ? KVA_ENOMEM : KVA_ECONFIG;
  }
  if (c.dropped)
    kva_log(KVA_LOG_WARN, "%s: %s: %llu slots did not verify and were dropped", d->cfg.name,
            d->cfg.path, (unsigned long long)c.dropped);
  if (c.superseded)
    kva_log(KVA_LOG_INFO, "%s: %s: %llu superseded copies left as free space", d->cfg.name,
            d->cfg.path, (unsigned long long)c.superseded);
  kva_log(KVA_LOG_INFO, "%s: %s: %s; %llu objects recovered", d->cfg.name, d->cfg.path,
          clean ? "closed cleanly" : "not closed cleanly: every slot checked",
          (unsigned long long)d->ix.nvalid);
  return KVA_OK;
}

int disk_save_index(disk *d, bool keep) {
  disk_index_entry *e = aligned(index_bytes(d));
  if (!e) return -ENOMEM;
  for (uint32_t id = 0; keep && id < d->ix.nslots; id++) {
    const disk_slot *s = &d->ix.slots[id];
    if (s->state != SLOT_VALID) continue; /* free, dropped: seq 0 */
    e[id].seq = s->seq;
    e[id].key_hash = s->key_hash;
  }
  int rc = disk_pwrite(d, e, index_bytes(d), DISK_INDEX_OFFSET);
  free(e);
  return rc;
}
