/*
 * protocol_samples.h — frames of every type for the protocol's suite
 * (tests/wire/protocol_test.c) and the fuzzer's seeds (tests/fuzz/
 * fuzz_seeds.c): keys and layouts whose every byte is distinctive (bytes
 * past a NUL or past hash_len included, since they travel too), a request
 * and a reply of each type, and random valid ones from a seeded generator.
 */
#ifndef KVA_TESTS_WIRE_PROTOCOL_SAMPLES_H
#define KVA_TESTS_WIRE_PROTOCOL_SAMPLES_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/protocol.h"

#define SAMPLE_POOL_BYTES (UINT64_C(1) << 30) /* the pool the sample spans point into */
#define SAMPLE_MAX_N 64u                      /* keys of a sample or random request */
#define SAMPLE_STATS_U64 20u                  /* kva_storage_stats' u64 fields before l1_pinned */
#define SAMPLE_TIER_STATS_U64 17u             /* kva_l2_tier_stats' (adapter's included) */
#define SAMPLE_TIER_KEYS_U64 11u              /* kva_l2_tier_keys' */
#define SAMPLE_NODES_CAP 4u                   /* TIER_NODES: the entries a sample asks */

/* Key i: model "model-<i>" (junk after its NUL), kv_rank and group
 * derived from i, hash_len 1 + i % 32 (junk past it). Valid. */
kva_key sample_key(uint32_t i);
/* Two tensors, [4, 2, 16] bf16 and [3] f32, junk in the unused dims and
 * tensors. Valid. */
kva_layout sample_layout(void);
/* Whether two layouts are alike field by field (what the wire carries). */
bool sample_layout_alike(const kva_layout *a, const kva_layout *b);

/* Whether requests of type t send u32 n and n keys. */
bool sample_sends_n(uint16_t t);
/* A request of type t over keys[0..n) (L2_CONTAINS: keys[0]), every field
 * its type sends set to a distinctive valid value, the others 0. */
proto_req sample_req(uint16_t t, const kva_key *keys, uint32_t n);

/* A reply and the storage its pointers point into. */
typedef struct sample_rep {
  proto_rep r;
  int32_t status[SAMPLE_MAX_N];
  proto_span spans[SAMPLE_MAX_N];
  kva_layout layouts[SAMPLE_MAX_N];
  kva_tier_hits lookup;
  kva_storage_stats stats;
  kva_l2_tier_stats tier_stats;
  kva_l2_tier_keys tier_keys;
  kva_l2_node_stats nodes[SAMPLE_NODES_CAP];
  kva_memcheck_report memcheck;
  char text[PROTO_MAX_TEXT + 1];
} sample_rep;

/* A reply to a request of type (or P_REFUSED) over n keys, with result;
 * every field set, distinctive and valid (spans inside SAMPLE_POOL_BYTES,
 * one of them empty; 8 LOOKUP tiers; 5 nodes, of which SAMPLE_NODES_CAP
 * were asked for; a text of text_len bytes). A READ's request asked for
 * no layouts. */
void sample_rep_fill(sample_rep *s, uint16_t type, uint32_t n, int32_t result, uint32_t text_len);
/* The reply to a READ of n keys that asked for layouts (PROTO_READ_LAYOUTS):
 * key i's layout is one of three (sample_layout and two others, junk in
 * what they do not use) in runs of two keys, its span that layout's
 * bytes. */
void sample_rep_read_layouts(sample_rep *s, uint32_t n, int32_t result);
/* s ready to decode the reply to a request of type over n keys (and of
 * SAMPLE_NODES_CAP nodes; a READ without layouts): r->type, r->n,
 * nodes_cap, layouts_asked and text_cap set, its pointers on its own
 * storage; every other byte of s is 0xee (to see what decoding writes and
 * what it leaves). */
void sample_rep_expect(sample_rep *s, uint16_t type, uint32_t n);

/* The u64 fields in declaration order (the order on the wire). */
void sample_stats_fields(kva_storage_stats *s, uint64_t *f[SAMPLE_STATS_U64]);
void sample_tier_stats_fields(kva_l2_tier_stats *s, uint64_t *f[SAMPLE_TIER_STATS_U64]);
void sample_tier_keys_fields(kva_l2_tier_keys *k, uint64_t *f[SAMPLE_TIER_KEYS_U64]);

/* ---- random ------------------------------------------------------------ */
typedef struct sample_rng {
  uint64_t state;
} sample_rng;

uint64_t sample_rand(sample_rng *g);              /* splitmix64 */
uint32_t sample_below(sample_rng *g, uint32_t n); /* 0..n-1 */
/* A random valid key, and layout (junk in what kva_layout_bytes ignores). */
kva_key sample_rand_key(sample_rng *g);
kva_layout sample_rand_layout(sample_rng *g);
/* A random valid request of any type over keys (SAMPLE_MAX_N of room). */
proto_req sample_rand_req(sample_rng *g, kva_key *keys);
/* A random valid reply (any type, P_REFUSED included), in s. */
void sample_rand_rep(sample_rng *g, sample_rep *s);

#endif
