/*
 * chunk_keys.c — prefix-chained chunk keys (kva_chunk_keys).
 *
 * key[i].hash = XXH3-128(key[i-1].hash || tokens of chunk i), with key[-1]
 * = XXH3-128("kvact-chunk-v1" || salt): a chunk's key names the whole
 * prefix up to and including it, so equal keys mean equal prefixes (the
 * vLLM/LMCache rule), and two salts never share a key.
 */
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/key.h"

static void hash_out(XXH128_hash_t h, uint8_t out[16]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  memcpy(out, c.digest, 16);
}

static void chain_seed(const char *salt, uint8_t out[16]) {
  static const char tag[] = "kvact-chunk-v1";
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  XXH3_128bits_update(&st, tag, sizeof(tag));
  if (salt) XXH3_128bits_update(&st, salt, strlen(salt));
  hash_out(XXH3_128bits_digest(&st), out);
}

size_t kva_chunk_keys(const char *model, uint32_t kv_rank, const char *salt, const int32_t *tokens,
                      size_t ntokens, uint32_t chunk_tokens, int include_partial, kva_key *out,
                      size_t max) {
  if (!model || !out || chunk_tokens == 0 || (ntokens && !tokens)) return 0;
  kva_key proto;
  memset(&proto, 0, sizeof(proto));
  size_t mlen = strlen(model);
  if (mlen >= sizeof(proto.model)) return 0;
  memcpy(proto.model, model, mlen);
  proto.kv_rank = kv_rank;
  proto.hash_len = 16;
  if (!key_valid(&proto)) return 0;
  uint8_t prev[16];
  chain_seed(salt, prev);
  size_t nfull = ntokens / chunk_tokens, n = nfull + (include_partial && ntokens % chunk_tokens);
  if (n > max) n = max;
  for (size_t i = 0; i < n; i++) {
    size_t start = i * chunk_tokens, len = i < nfull ? chunk_tokens : ntokens - start;
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, prev, sizeof(prev));
    XXH3_128bits_update(&st, tokens + start, len * sizeof(int32_t));
    hash_out(XXH3_128bits_digest(&st), prev);
    out[i] = proto;
    memcpy(out[i].hash, prev, sizeof(prev));
  }
  return n;
}
