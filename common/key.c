/*
 * key.c — object keys and layouts. The kva_key_* and kva_layout_* calls
 * are kvact.h's adapter kit over the same code: adapters cannot include
 * key.h, and the library's own callers keep the hidden names (no PLT).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/key.h"

bool key_valid(const kva_key *k) {
  const char *nul = memchr(k->model, '\0', sizeof(k->model));
  if (!nul || nul == k->model) return false;
  if (memchr(k->model, '@', (size_t)(nul - k->model))) return false;
  return k->hash_len >= 1 && k->hash_len <= KEY_HASH_MAX;
}

/* The hashed image of a key: its significant bytes only, packed. */
static size_t key_pack(const kva_key *k, uint8_t *out) {
  size_t m = strnlen(k->model, sizeof(k->model));
  memcpy(out, k->model, m);
  size_t o = m;
  out[o++] = 0;
  memcpy(out + o, &k->kv_rank, 4);
  memcpy(out + o + 4, &k->group, 4);
  o += 8;
  uint8_t hl = k->hash_len > KEY_HASH_MAX ? KEY_HASH_MAX : k->hash_len;
  out[o++] = hl;
  memcpy(out + o, k->hash, hl);
  return o + hl;
}

uint64_t key_hash(const kva_key *k) {
  uint8_t buf[sizeof(kva_key) + 8];
  return XXH3_64bits(buf, key_pack(k, buf));
}

bool key_equal(const kva_key *a, const kva_key *b) {
  if (a->kv_rank != b->kv_rank || a->group != b->group || a->hash_len != b->hash_len) return false;
  if (memcmp(a->hash, b->hash, a->hash_len > KEY_HASH_MAX ? KEY_HASH_MAX : a->hash_len))
    return false;
  return strncmp(a->model, b->model, sizeof(a->model)) == 0;
}

/* One entry of key_find_repeat's open-addressing table. */
typedef struct seen_key {
  uint64_t hash;
  size_t index; /* SIZE_MAX = empty */
} seen_key;

int key_find_repeat(const kva_key *k, size_t n, size_t *first, size_t *second) {
  if (n < 2) return 0;
  seen_key stack[2 * KEY_REPEAT_STACK];
  size_t cap = 4;
  while (cap < 2 * n) cap <<= 1; /* load at most 1/2 */
  seen_key *t = cap <= 2 * KEY_REPEAT_STACK ? stack : malloc(cap * sizeof(*t));
  if (!t) return KVA_ENOMEM;
  for (size_t i = 0; i < cap; i++) t[i].index = SIZE_MAX;
  int found = 0;
  for (size_t i = 0; i < n && !found; i++) {
    uint64_t h = key_hash(&k[i]);
    size_t j = (size_t)h & (cap - 1);
    for (; t[j].index != SIZE_MAX && !found; j = (j + 1) & (cap - 1)) {
      if (t[j].hash != h || !key_equal(&k[t[j].index], &k[i])) continue;
      *first = t[j].index;
      *second = i;
      found = 1;
    }
    if (!found) t[j] = (seen_key){h, i};
  }
  if (t != stack) free(t);
  return found;
}

int key_repeat_problem(const kva_key *k, size_t n, const char *call, char *buf, size_t cap) {
  size_t a = 0, b = 0;
  int rc = key_find_repeat(k, n, &a, &b);
  if (rc == 1) {
    char text[KVA_KEY_TEXT_MAX];
    key_format(&k[a], text, sizeof(text));
    snprintf(buf, cap,
             "%s: keys[%zu] and keys[%zu] are the same key (%s); a call names each key at most "
             "once: refused (KVA_EINVAL), nothing done",
             call, a, b, text);
    return KVA_EINVAL;
  }
  return rc == 0 ? KVA_OK : rc;
}

int kva_key_valid(const kva_key *k) {
  return k && key_valid(k);
}

int kva_key_equal(const kva_key *a, const kva_key *b) {
  return a && b && key_equal(a, b);
}

uint64_t kva_key_hash(const kva_key *k) {
  return k ? key_hash(k) : 0;
}

void key_format(const kva_key *k, char *buf, size_t cap) {
  if (!cap) return;
  int o = snprintf(buf, cap, "%.*s@%x@%u@", (int)strnlen(k->model, sizeof(k->model)), k->model,
                   k->kv_rank, k->group);
  for (unsigned i = 0; i < k->hash_len && i < KEY_HASH_MAX && o >= 0 && (size_t)o + 3 <= cap; i++)
    o += snprintf(buf + o, cap - (size_t)o, "%02x", k->hash[i]);
}

void kva_key_format(const kva_key *k, char *buf, size_t cap) {
  if (!buf || !cap) return;
  if (k)
    key_format(k, buf, cap);
  else
    buf[0] = '\0';
}

uint32_t dtype_size(kva_dtype d) {
  switch (d) {
  case KVA_DT_U8:
  case KVA_DT_FP8_E4M3:
  case KVA_DT_FP8_E5M2:
    return 1;
  case KVA_DT_F16:
  case KVA_DT_BF16:
    return 2;
  case KVA_DT_F32:
    return 4;
  }
  return 0;
}

/* Bytes of one tensor, 0 when invalid or when the product overflows. */
static uint64_t tensor_bytes(uint32_t ndim, const uint64_t *shape, kva_dtype dt) {
  uint64_t b = dtype_size(dt);
  if (!b || ndim > 6) return 0;
  for (uint32_t d = 0; d < ndim; d++)
    if (shape[d] == 0 || __builtin_mul_overflow(b, shape[d], &b)) return 0;
  return b;
}

uint64_t layout_bytes(const kva_layout *l) {
  if (!l || l->ntensors < 1 || l->ntensors > 4) return 0;
  uint64_t total = 0;
  for (uint32_t t = 0; t < l->ntensors; t++) {
    uint64_t b = tensor_bytes(l->tensor[t].ndim, l->tensor[t].shape, l->tensor[t].dtype);
    if (!b) return 0;
    uint64_t aligned = (total + LAYOUT_TENSOR_ALIGN - 1) & ~(uint64_t)(LAYOUT_TENSOR_ALIGN - 1);
    if (aligned < total || __builtin_add_overflow(aligned, b, &total)) return 0;
  }
  /* keep far from the top so that rounding to pool units cannot wrap */
  return total > (UINT64_MAX >> 2) ? 0 : total;
}

size_t kva_layout_bytes(const kva_layout *l) {
  uint64_t b = layout_bytes(l);
  return b > SIZE_MAX ? 0 : (size_t)b;
}

uint64_t layout_fingerprint(const kva_layout *l) {
  uint64_t img[1 + 4 * 8];
  size_t o = 0;
  img[o++] = l->ntensors;
  for (uint32_t t = 0; t < l->ntensors && t < 4; t++) {
    img[o++] = ((uint64_t)l->tensor[t].ndim << 32) | (uint32_t)l->tensor[t].dtype;
    for (uint32_t d = 0; d < l->tensor[t].ndim && d < 6; d++) img[o++] = l->tensor[t].shape[d];
  }
  return XXH3_64bits(img, o * sizeof(img[0]));
}

uint64_t kva_layout_fingerprint(const kva_layout *l) {
  return l ? layout_fingerprint(l) : 0;
}
