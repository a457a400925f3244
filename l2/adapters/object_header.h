/*
 * object_header.h — the self-describing header every stored object of the
 * disk and redis tiers carries in front of its payload: what it is (magic,
 * version), whose it is (the full key, the layout's fingerprint), how long
 * it is and what it must hash to (xxh3-64 of the payload), which store
 * wrote it (seq) and the key it continues (parent, an eviction hint).
 *
 * A reader trusts a payload only when object_header_matches says so for
 * the key and layout it asked for: a torn write, a slot reused by another
 * key, a value overwritten by another writer or a flipped bit all read as
 * a miss, never as the wrong bytes.
 *
 * Layout: little-endian host struct, 168 bytes, sealed by the xxh3-64 of
 * the bytes before `checksum` (padding included: zero it first, as
 * object_header_init does). object_header.c pins the offsets at compile
 * time; both tiers' stored data depend on them.
 */
#ifndef KVA_L2_ADAPTERS_OBJECT_HEADER_H
#define KVA_L2_ADAPTERS_OBJECT_HEADER_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"

/* "KVASLOT1" read as a little-endian u64 = 0x31544f4c5341564b */
#define OBJECT_MAGIC UINT64_C(0x31544f4c5341564b)
#define OBJECT_VERSION 1u

typedef struct object_header {
  uint64_t magic;   /* OBJECT_MAGIC */
  uint32_t version; /* OBJECT_VERSION */
  /* The low 32 bits of kva_key_hash of the key before this one in its chain
   * (the chunk it continues), 0 when none is known. An eviction hint only
   * (l2/adapters/disk/disk_index.h): never checked against anything. Files written before
   * chains hold 0 here (the field was zeroed padding), so they read as
   * chains of one. */
  uint32_t parent;
  uint64_t seq;         /* store sequence number (> 0), unique per store */
  uint64_t fingerprint; /* kva_layout_fingerprint of the object's layout */
  uint64_t length;      /* payload bytes */
  uint64_t payload_sum; /* xxh3-64 of the payload's length bytes */
  kva_key key;          /* the full key */
  uint64_t checksum;    /* xxh3-64 of the fields above */
} object_header;

/* Sets only the checksum (magic and version are the caller's, so a test
 * can seal a wrong one). */
void object_header_seal(object_header *h);
/* Whether the header is intact (magic, version, own checksum). */
bool object_header_valid(const object_header *h);
/* A sealed header for a store of `length` payload bytes with sequence seq:
 * zeroed, then filled; only the key's significant bytes are copied (the
 * model up to its NUL, hash[0..hash_len)), so the bytes are deterministic. */
void object_header_init(object_header *h, const kva_key *k, uint64_t fingerprint,
                        const void *payload, uint64_t length, uint64_t seq);
/* Whether the header is intact and describes this key, layout and payload
 * bytes. It does not bound length: check it against the room the payload
 * has before reading that many bytes. */
bool object_header_matches(const object_header *h, const kva_key *k, uint64_t fingerprint,
                           const void *payload, uint64_t length);
/* xxh3-64 of the payload (the payload_sum field). */
uint64_t object_payload_sum(const void *payload, uint64_t length);

#endif
