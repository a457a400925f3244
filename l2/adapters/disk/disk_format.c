/*
 * disk_format.c — the disk tier's on-disk format (see disk_format.h):
 * geometry, superblock and slot header sealing and checking.
 *
 * Pure functions over bytes: no I/O, no allocation, no logging. Shared by
 * the disk adapter (l2/disk_adapter*.c) and `kvconf fsck`.
 */
#include "l2/adapters/disk/disk_format.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <xxh_x86dispatch.h>
#include <xxhash.h>

/* The layout on disk is the host struct layout: pin it, so a field added,
 * moved or resized (here or in kva_key) fails the build instead of
 * silently making old files unreadable. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the disk format is host structs: little-endian hosts only");
_Static_assert(DISK_MAGIC == 0x4b5344544341564bull, "DISK_MAGIC is \"KVACTDSK\"");
_Static_assert(sizeof(disk_super) == 64, "disk_super is 64 bytes on disk");
_Static_assert(offsetof(disk_super, checksum) == 56, "disk_super checksum at 56");
_Static_assert(offsetof(kva_key, kv_rank) == 64 && offsetof(kva_key, group) == 68 &&
                   offsetof(kva_key, hash_len) == 72 && offsetof(kva_key, hash) == 73,
               "kva_key field offsets");
_Static_assert(sizeof(disk_index_entry) == 16, "disk_index_entry is 16 bytes on disk");
_Static_assert(DISK_BLOCK % sizeof(disk_index_entry) == 0, "index entries tile a block");

static uint64_t round_block(uint64_t n) {
  return (n + DISK_BLOCK - 1) / DISK_BLOCK * DISK_BLOCK;
}

uint64_t disk_index_bytes(uint64_t nslots) {
  if (nslots > (UINT64_MAX - DISK_BLOCK) / sizeof(disk_index_entry)) return UINT64_MAX;
  return round_block(nslots * sizeof(disk_index_entry));
}

/* The largest n with INDEX_OFFSET + index_bytes(n) + n * slot_bytes <=
 * capacity. Without the rounding n0 = (capacity - INDEX_OFFSET) /
 * (slot_bytes + 16) is exact; the rounding adds under one block, and one
 * slot less frees at least a block, so the loop runs at most once. */
uint64_t disk_slot_count(uint64_t capacity_bytes, uint64_t slot_bytes, uint64_t *data_offset) {
  uint64_t n = 0;
  if (data_offset) *data_offset = 0;
  if (slot_bytes < DISK_BLOCK || slot_bytes % DISK_BLOCK || capacity_bytes <= DISK_INDEX_OFFSET)
    return 0;
  if (slot_bytes <= UINT64_MAX - sizeof(disk_index_entry))
    n = (capacity_bytes - DISK_INDEX_OFFSET) / (slot_bytes + sizeof(disk_index_entry));
  while (n > 0 && DISK_INDEX_OFFSET + disk_index_bytes(n) > capacity_bytes - n * slot_bytes) n--;
  if (n > 0 && data_offset) *data_offset = DISK_INDEX_OFFSET + disk_index_bytes(n);
  return n;
}

uint64_t disk_slot_bytes_for(uint64_t payload) {
  if (payload > UINT64_MAX - 2 * DISK_BLOCK) return 0;
  return DISK_BLOCK + round_block(payload);
}

uint64_t disk_slot_capacity(uint64_t slot_bytes) {
  return slot_bytes < DISK_BLOCK ? 0 : slot_bytes - DISK_BLOCK;
}

uint64_t disk_slot_offset(const disk_super *s, uint64_t slot) {
  return s->data_offset + slot * s->slot_bytes;
}

bool disk_block_is_zero(const void *buf, size_t len) {
  const unsigned char *p = buf;
  return len == 0 || (p[0] == 0 && memcmp(p, p + 1, len - 1) == 0);
}

/* ---- superblock ---- */

void disk_super_seal(disk_super *s) {
  s->checksum = XXH3_64bits(s, offsetof(disk_super, checksum));
}

int disk_super_init(disk_super *s, uint64_t capacity_bytes, uint64_t slot_bytes) {
  struct timespec ts;
  memset(s, 0, sizeof *s);
  s->magic = DISK_MAGIC;
  s->version = DISK_VERSION;
  s->slot_bytes = slot_bytes;
  s->nslots = disk_slot_count(capacity_bytes, slot_bytes, &s->data_offset);
  clock_gettime(CLOCK_REALTIME, &ts);
  s->created_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  disk_super_seal(s);
  return s->nslots > 0 ? KVA_OK : KVA_ECONFIG;
}

/* Whether the slots lie inside the file, after the superblock and an index
 * region big enough for them, all block aligned; nothing here overflows. */
static bool super_geometry_fits(const disk_super *s, uint64_t file_bytes) {
  if (s->slot_bytes < DISK_BLOCK || s->slot_bytes % DISK_BLOCK || s->nslots == 0) return false;
  if (s->data_offset % DISK_BLOCK || s->data_offset > file_bytes) return false;
  uint64_t index = disk_index_bytes(s->nslots);
  if (index > s->data_offset || s->data_offset - index < DISK_INDEX_OFFSET) return false;
  return s->nslots <= (file_bytes - s->data_offset) / s->slot_bytes;
}

int disk_super_check(const disk_super *s, uint64_t file_bytes, char *why, size_t len) {
  char buf[192];
  if (s->magic != DISK_MAGIC)
    snprintf(buf, sizeof buf, "not a kvact disk tier");
  else if (s->version != DISK_VERSION)
    snprintf(buf, sizeof buf, "format version %" PRIu32 ", this build reads %u", s->version,
             DISK_VERSION);
  else if (s->checksum != XXH3_64bits(s, offsetof(disk_super, checksum)))
    snprintf(buf, sizeof buf, "superblock checksum mismatch");
  else if (s->clean > 1)
    snprintf(buf, sizeof buf, "superblock clean flag is %" PRIu32 ", not 0 or 1", s->clean);
  else if (s->seq >= DISK_SEQ_LIMIT)
    snprintf(buf, sizeof buf, "superblock sequence number %" PRIu64 " is past any a writer issues",
             s->seq);
  else if (!super_geometry_fits(s, file_bytes))
    snprintf(buf, sizeof buf,
             "geometry does not fit a file of %" PRIu64 " bytes (nslots %" PRIu64
             ", slot_bytes %" PRIu64 ", data_offset %" PRIu64 ")",
             file_bytes, s->nslots, s->slot_bytes, s->data_offset);
  else
    return KVA_OK;
  if (why && len) snprintf(why, len, "%s", buf);
  return KVA_ECONFIG;
}

/* ---- slot headers ---- */

bool disk_entry_names(const disk_index_entry *e, const object_header *h) {
  return e->seq == h->seq && e->key_hash == kva_key_hash(&h->key);
}

_Static_assert(sizeof(object_header) <= DISK_BLOCK, "a slot header fits its 4 KiB block");
