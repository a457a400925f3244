/*
 * disk_recover.c — the disk tier's index across restarts (disk_internal.h).
 *
 * Clean stop: the index region lists (seq, key_hash) per slot, then the
 * superblock says clean = 1. Start after a clean stop: every listed slot's
 * header block is re-read and must be intact with the same seq and key
 * hash; its payload checksum is trusted here because every LOAD checks it
 * again. Start after a crash (clean = 0): every slot's header is read and
 * every payload checksummed; a slot whose payload does not match its
 * header (killed mid-store: the header is written only after the payload,
 * so the old header now describes other bytes) is dropped. When a key is
 * found twice the higher sequence number wins.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "l1/key.h"
#include "l2/disk_internal.h"

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
static bool header_usable(const disk *d, const disk_slot_header *h) {
  return disk_header_valid(h) && key_valid(&h->key) && h->seq > 0 && h->length > 0 &&
         h->length <= disk_slot_capacity(d->super.slot_bytes);
}

static bool restore(disk *d, uint32_t id, const disk_slot_header *h) {
  disk_slot_meta m = {.key = &h->key,
                      .key_hash = key_hash(&h->key),
                      .seq = h->seq,
                      .fingerprint = h->fingerprint,
                      .length = h->length,
                      .payload_sum = h->payload_sum};
  if (h->seq > d->super.seq) d->super.seq = h->seq; /* a crash left super.seq behind */
  return disk_index_restore(&d->ix, id, &m);
}

/* Clean: the saved index, each listed header verified. */
static int recover_clean(disk *d, disk_slot_header *h, uint64_t *dropped) {
  disk_index_entry *e = aligned(index_bytes(d));
  if (!e) return -ENOMEM;
  int rc = disk_pread(d, e, index_bytes(d), DISK_INDEX_OFFSET);
  for (uint32_t id = 0; rc == 0 && id < d->super.nslots; id++) {
    if (e[id].seq == 0) continue;
    rc = disk_pread(d, h, DISK_BLOCK, disk_slot_off(d, id));
    bool ok = rc == 0 && header_usable(d, h) && h->seq == e[id].seq &&
              key_hash(&h->key) == e[id].key_hash && restore(d, id, h);
    *dropped += !ok;
    if (rc == -EIO) rc = 0; /* a bad block loses its slot, not the tier */
  }
  free(e);
  return rc;
}

/* Crash: every slot read and checksummed. */
static int recover_scan(disk *d, disk_slot_header *h, uint64_t *dropped) {
  uint64_t cap = disk_slot_capacity(d->super.slot_bytes);
  uint8_t *payload = aligned(cap);
  if (!payload) return -ENOMEM;
  int rc = 0;
  for (uint32_t id = 0; rc == 0 && id < d->super.nslots; id++) {
    uint64_t off = disk_slot_off(d, id);
    rc = disk_pread(d, h, DISK_BLOCK, off);
    if (rc == 0 && !header_usable(d, h)) continue; /* free, torn or never written */
    if (rc == 0) rc = disk_pread(d, payload, disk_round_up(h->length), off + DISK_BLOCK);
    bool ok =
        rc == 0 && disk_payload_sum(payload, h->length) == h->payload_sum && restore(d, id, h);
    *dropped += !ok;
    if (rc == -EIO) rc = 0;
  }
  free(payload);
  return rc;
}

int disk_recover(disk *d, char *err, size_t errlen) {
  disk_slot_header *h = aligned(DISK_BLOCK);
  if (!h) return KVA_ENOMEM;
  uint64_t dropped = 0;
  bool clean = d->super.clean == 1;
  disk_index_recover_begin(&d->ix);
  int rc = clean ? recover_clean(d, h, &dropped) : recover_scan(d, h, &dropped);
  disk_index_recover_end(&d->ix);
  free(h);
  if (rc != 0) {
    snprintf(err, errlen, "path %s: cannot read the %s: %s", d->cfg.path,
             clean ? "saved index" : "slots", strerror(-rc));
    return KVA_ECONFIG;
  }
  if (dropped)
    LOG_WARN("%s: %s: %llu slots did not verify and were dropped", d->cfg.name, d->cfg.path,
             (unsigned long long)dropped);
  LOG_INFO("%s: %s: %s; %llu objects recovered", d->cfg.name, d->cfg.path,
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
