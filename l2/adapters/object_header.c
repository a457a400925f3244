/*
 * object_header.c — sealing and checking the stored objects' header
 * (object_header.h). Pure functions over bytes: no I/O, no allocation.
 */
#include "l2/adapters/object_header.h"

#include <stddef.h>
#include <string.h>

#include <xxh_x86dispatch.h>
#include <xxhash.h>

/* The stored layout is the host struct layout: pin it, so a field added,
 * moved or resized (here or in kva_key) fails the build instead of
 * silently making stored objects unreadable. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "stored headers are host structs: little-endian hosts only");
_Static_assert(sizeof(kva_key) == 108, "kva_key is 108 bytes inside an object header");
_Static_assert(offsetof(object_header, parent) == 12 && offsetof(object_header, seq) == 16 &&
                   offsetof(object_header, key) == 48,
               "object_header field offsets");
_Static_assert(offsetof(object_header, checksum) == 160, "object_header checksum at 160");
_Static_assert(sizeof(object_header) == 168, "object_header is 168 bytes on disk");

/* Through libxxhash's run-time dispatch (AVX2/AVX-512 when the CPU has
 * them: ~25 GB/s here against ~19 for the baseline build): the same value
 * as XXH3_64bits, at the speed a store's checksums need to keep pace with
 * the disk. */
uint64_t object_payload_sum(const void *payload, uint64_t length) {
  return XXH3_64bits_dispatch(payload, (size_t)length);
}

void object_header_seal(object_header *h) {
  h->checksum = XXH3_64bits(h, offsetof(object_header, checksum));
}

bool object_header_valid(const object_header *h) {
  return h->magic == OBJECT_MAGIC && h->version == OBJECT_VERSION &&
         h->checksum == XXH3_64bits(h, offsetof(object_header, checksum));
}

/* Copies the significant bytes only (what kva_key_equal and kva_key_hash read). */
static void key_copy(kva_key *dst, const kva_key *src) {
  size_t model = strnlen(src->model, sizeof src->model);
  size_t hash = src->hash_len < sizeof src->hash ? src->hash_len : sizeof src->hash;
  memcpy(dst->model, src->model, model);
  dst->kv_rank = src->kv_rank;
  dst->group = src->group;
  dst->hash_len = src->hash_len;
  memcpy(dst->hash, src->hash, hash);
}

void object_header_init(object_header *h, const kva_key *k, uint64_t fingerprint,
                        const void *payload, uint64_t length, uint64_t seq) {
  memset(h, 0, sizeof *h);
  h->magic = OBJECT_MAGIC;
  h->version = OBJECT_VERSION;
  h->seq = seq;
  h->fingerprint = fingerprint;
  h->length = length;
  h->payload_sum = object_payload_sum(payload, length);
  key_copy(&h->key, k);
  object_header_seal(h);
}

bool object_header_matches(const object_header *h, const kva_key *k, uint64_t fingerprint,
                           const void *payload, uint64_t length) {
  return object_header_valid(h) && h->fingerprint == fingerprint && h->length == length &&
         kva_key_equal(&h->key, k) && h->payload_sum == object_payload_sum(payload, length);
}
