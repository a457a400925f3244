/*
 * key.h — object keys and layouts: validation, hashing, sizes.
 */
#ifndef KVA_COMMON_KEY_H
#define KVA_COMMON_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define KEY_HASH_MAX 32u
#define LAYOUT_TENSOR_ALIGN 64u /* each tensor of an object starts on this boundary */

/* A key the store accepts: model NUL-terminated within 64 bytes, not empty,
 * no '@' (the separator of the printed form), hash_len 1..32. */
bool key_valid(const kva_key *k);
/* 64-bit hash of the significant bytes (bytes past the model's NUL and past
 * hash_len are ignored, so callers need not zero them). */
uint64_t key_hash(const kva_key *k);
bool key_equal(const kva_key *a, const kva_key *b);
/* Whether a key appears twice in k[0..n): 0 when every key is distinct;
 * 1 with *first < *second the indexes of the first repeat found; KVA_ENOMEM
 * when the scratch table (n > KEY_REPEAT_STACK) cannot be allocated. Every
 * call that takes a key array refuses a repeat (kvact.h, "Batched calls"). */
#define KEY_REPEAT_STACK 64u /* keys checked without allocating */
int key_find_repeat(const kva_key *k, size_t n, size_t *first, size_t *second);
/* KVA_OK when k[0..n) names no key twice; else KVA_EINVAL with the message
 * the caller logs in buf ("<call>: keys[i] and keys[j] are the same key
 * ..."), or KVA_ENOMEM. */
int key_repeat_problem(const kva_key *k, size_t n, const char *call, char *buf, size_t cap);
/* "<model>@<kv_rank hex>@<group>@<hash hex>" into buf (always terminated). */
void key_format(const kva_key *k, char *buf, size_t cap);

/* bytes of one object, 0 if the layout is invalid or overflows */
uint64_t layout_bytes(const kva_layout *l);
/* hash of the significant fields: two layouts with the same fingerprint
 * are the same layout for grouping and for L2 headers */
uint64_t layout_fingerprint(const kva_layout *l);
uint32_t dtype_size(kva_dtype d); /* 0 for an unknown dtype */

#endif
