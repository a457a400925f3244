/*
 * disk_format.h — the on-disk format of the disk tier (l2/disk_*.c) and of
 * `kvconf fsck`. Everything is little-endian, every block 4 KiB aligned.
 *
 *   offset 0                 superblock (one 4 KiB block)
 *   DISK_INDEX_OFFSET        index region: nslots disk_index_entry, rounded
 *                            up to 4 KiB (written at a clean stop, after a
 *                            crash scan at start, and empty at format)
 *   data_offset              slot 0, slot 1, ... (slot_bytes each)
 *
 * A slot is [one 4 KiB header block][payload, rounded up to 4 KiB]. A
 * store writes the payload first and the header after it (linked), so a
 * process killed mid-store leaves either the old header (whose checksum no
 * longer matches the payload) or no valid header: either way the slot is
 * never served. A load checks the header's magic, version, key, layout
 * fingerprint, length, sequence and the payload's xxh3-64 before it says
 * "loaded"; any mismatch is a miss and the slot is dropped.
 *
 * Generations. Every store takes the next sequence number of the tier
 * (super.seq counts them; a store's header carries its own), so a slot's
 * seq says which of two copies of a key is newer, and super.seq on disk
 * is a generation boundary. The index region is the authority at or below
 * it: an intact slot whose seq is at most super.seq is live only when the
 * index lists it (its seq and key hash, at its slot); one it does not list
 * is dead — superseded by a newer copy of its key, evicted, or discarded
 * (persist = false) — free space, never served, not damage. A slot above
 * super.seq was written by a run that did not stop cleanly: it is live
 * when its payload verifies. Among live copies of a key the highest seq
 * wins. The adapter (disk_recover.c) and `kvconf fsck` apply the same
 * rule, and every writer keeps it true by writing (and syncing) the index
 * region before a superblock that raises super.seq: a clean stop, the save
 * after a crash scan at start, a format (an empty index), fsck --repair.
 *
 * Checksums. A struct's checksum field is the xxh3-64 of the struct's bytes
 * before that field, padding included (the key's 3 bytes after hash[] and
 * the 4 before the header's checksum). Zero a struct before filling it
 * (disk_super_init / object_header_init do), so the bytes written are a
 * function of the fields alone: no stack garbage on disk, identical files
 * for identical contents. The structs are written as host structs, so the
 * format is little-endian hosts only; disk_format.c asserts the sizes and
 * offsets at compile time, so the layout cannot drift silently.
 */
#ifndef KVA_L2_DISK_FORMAT_H
#define KVA_L2_DISK_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/object_header.h"

#define DISK_BLOCK 4096u
/* Eight ASCII bytes read as a little-endian u64: the first byte is the
 * least significant, so the file starts with the text itself. */
#define DISK_ASCII8(a, b, c, d, e, f, g, h)                                                        \
  ((uint64_t)(a) | (uint64_t)(b) << 8 | (uint64_t)(c) << 16 | (uint64_t)(d) << 24 |                \
   (uint64_t)(e) << 32 | (uint64_t)(f) << 40 | (uint64_t)(g) << 48 | (uint64_t)(h) << 56)
/* "KVACTDSK" = 4b 56 41 43 54 44 53 4b = 0x4b5344544341564b */
#define DISK_MAGIC DISK_ASCII8('K', 'V', 'A', 'C', 'T', 'D', 'S', 'K')
#define DISK_VERSION 1u
#define DISK_INDEX_OFFSET DISK_BLOCK

/* Sequence numbers a writer can have issued: one per store, so never near
 * 2^62. A superblock or header past it is damage, checksum intact or not:
 * taking it would make the next store's number wrap below the superblock's
 * generation boundary. */
#define DISK_SEQ_LIMIT (UINT64_C(1) << 62)

typedef struct disk_super {
  uint64_t magic;      /* DISK_MAGIC */
  uint32_t version;    /* DISK_VERSION */
  uint32_t clean;      /* 1 = closed cleanly: the index region is current */
  uint64_t slot_bytes; /* header block + payload capacity, multiple of 4 KiB */
  uint64_t nslots;
  uint64_t data_offset; /* first slot, multiple of 4 KiB */
  uint64_t seq;         /* highest slot sequence number issued so far (< DISK_SEQ_LIMIT) */
  uint64_t created_ns;  /* CLOCK_REALTIME at format, for humans */
  uint64_t checksum;    /* xxh3-64 of the fields above */
} disk_super;

/* One per slot in the index region (seq 0 = free). */
typedef struct disk_index_entry {
  uint64_t seq;
  uint64_t key_hash; /* kva_key_hash of the slot's key */
} disk_index_entry;

/* Layout of a tier of capacity_bytes with slots of slot_bytes (0 when they
 * do not leave room for one slot). */
uint64_t disk_slot_count(uint64_t capacity_bytes, uint64_t slot_bytes, uint64_t *data_offset);
/* slot_bytes for objects of `payload` bytes: a header block plus the
 * payload rounded up to 4 KiB. */
uint64_t disk_slot_bytes_for(uint64_t payload);

/* The seal functions set only the checksum (magic and version are the
 * caller's, so a test can seal a wrong one). */
void disk_super_seal(disk_super *s);
/* KVA_OK, or KVA_ECONFIG with why (wrong magic = "not a kvact disk tier",
 * another version, a bad checksum, inconsistent geometry). */
int disk_super_check(const disk_super *s, uint64_t file_bytes, char *why, size_t len);

/* Whether an index entry names exactly this header's store (its seq and
 * key): at or below the superblock's seq, the only way a slot is live. */
bool disk_entry_names(const disk_index_entry *e, const object_header *h);

/* ---- helpers (added with disk_format.c) ---- */

/* Bytes of the index region for nslots (rounded up to 4 KiB; UINT64_MAX
 * when it overflows). */
uint64_t disk_index_bytes(uint64_t nslots);
/* File offset of slot i's header block (s already checked). */
uint64_t disk_slot_offset(const disk_super *s, uint64_t slot);
/* Payload bytes a slot of slot_bytes holds (slot_bytes less the header
 * block; 0 for less than one block). */
uint64_t disk_slot_capacity(uint64_t slot_bytes);
/* A fresh, sealed superblock for a tier of capacity_bytes with slots of
 * slot_bytes: zeroed, magic, version, geometry (disk_slot_count), clean 0,
 * seq 0, created_ns now. KVA_ECONFIG when not even one slot fits. */
int disk_super_init(disk_super *s, uint64_t capacity_bytes, uint64_t slot_bytes);
/* Whether all len bytes are zero (a never-written or cleared header block). */
bool disk_block_is_zero(const void *buf, size_t len);

#endif
