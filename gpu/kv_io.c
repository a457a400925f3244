/*
 * kv_io.c — kva_kv_store and kva_kv_load (kvact.h "GPU copy"): the L1 side
 * of a copy, done on the caller's thread before the op goes to the copy
 * actor.
 *
 * Store: reserve_write(NEW) of the chunks (two calls when the last chunk
 * is partial: it has a layout of its own); keys that exist are skipped.
 * Load: kva_read_prefetched checks every key is read-locked and gives its
 * bytes; nothing is copied unless every chunk has the expected layout's
 * size. Either way the copy actor ends the op in L1 (finish, abort or
 * release) and only then completes it.
 */
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "common/key.h"
#include "gpu/copy_actor.h"
#include "gpu/kv_internal.h"
#include "gpu/op.h"
#include "gpu/storage_link.h"

/* KVA_KV_PAGES moves whole pages: chunks of whole blocks, and the slots
 * of each block a run block * block_size + 0, 1, ... (cut short by the
 * request's end) or all -1, a page skipped. */
static int kv_check_pages(const kv_geom *g, uint32_t ct, const int64_t *slots, size_t ntokens,
                          const char *call) {
  uint32_t bs = g->block_size;
  if (ct % bs) {
    LOG_WARN("%s: chunk_tokens %u is not a multiple of block_size %u", call, ct, bs);
    return KVA_EINVAL;
  }
  for (size_t t0 = 0; t0 < ntokens; t0 += bs) {
    int64_t s0 = slots[t0];
    size_t run = ntokens - t0 < bs ? ntokens - t0 : bs;
    int ok = s0 < 0 || s0 % bs == 0;
    for (size_t o = 1; ok && o < run; o++) ok = slots[t0 + o] == (s0 < 0 ? -1 : s0 + (int64_t)o);
    if (!ok) {
      LOG_WARN("%s: tokens %zu..%zu are not one whole block's slots in order", call, t0,
               t0 + run - 1);
      return KVA_EINVAL;
    }
  }
  return KVA_OK;
}

/* The request's shape: tokens split into nchunks chunks of chunk_tokens,
 * only the last one partial, every slot -1 or inside the cache (whole
 * blocks for pages: kv_check_pages); no chunk
 * key named twice (a store reserves a partial last chunk in a call of its
 * own, so the facade's check of each call would not see it repeat an
 * earlier chunk). */
static int kv_check_request(kva_storage *s, const kva_kv *kv, const kva_key *k, size_t nchunks,
                            uint32_t ct, const int64_t *slots, size_t ntokens, kva_op **op,
                            const char *call) {
  if (!s || !kv || kv->s != s || !k || !nchunks || !ct || !slots || !op) return KVA_EINVAL;
  if (nchunks > UINT32_MAX / 2 || ntokens > (uint64_t)nchunks * ct ||
      ntokens <= (uint64_t)(nchunks - 1) * ct)
    return KVA_EINVAL;
  uint64_t limit = geom_slots(&kv->g);
  for (size_t t = 0; t < ntokens; t++)
    if (slots[t] < -1 || (slots[t] >= 0 && (uint64_t)slots[t] >= limit)) return KVA_EINVAL;
  if (kv->g.format == GEOM_PAGES && kv_check_pages(&kv->g, ct, slots, ntokens, call) != KVA_OK)
    return KVA_EINVAL;
  char why[KVA_KEY_TEXT_MAX + 160];
  int rc = key_repeat_problem(k, nchunks, call, why, sizeof(why));
  if (rc == KVA_EINVAL) LOG_WARN("%s", why);
  return rc;
}

/* An op of kv for this request, from its pool: slots copied, job
 * described, no chunk. */
static kva_op *kv_op_new(kva_kv *kv, int kind, size_t nchunks, const int64_t *slots,
                         size_t ntokens) {
  kva_op *op = op_take(kv, kind, nchunks, ntokens);
  if (!op) return NULL;
  memcpy(op->slots, slots, ntokens * sizeof(*slots));
  op->job = (copy_job){.dir = kind == OP_STORE ? COPY_GATHER : COPY_SCATTER,
                       .g = kv->g,
                       .layers = kv->layers,
                       .chunks = op->chunks,
                       .slots = op->slots,
                       .ntokens = ntokens};
  return op;
}

/* Adds chunk c (key k, L1 bytes buf) to the op's job. */
static void kv_op_add(kva_op *op, uint32_t ct, size_t c, const kva_key *k, void *buf) {
  uint32_t tokens = geom_chunk_tokens(ct, op->job.ntokens, (uint32_t)c);
  uint32_t i = op->job.nchunks++;
  op->chunks[i] = (copy_chunk){.buf = buf, .first = (uint64_t)c * ct, .tokens = tokens};
  op->keys[i] = *k;
  if (tokens > op->job.max_tokens) op->job.max_tokens = tokens;
}

/* Hands op to the copy actor, or completes it at once when it copies
 * nothing. KVA_ESHUTDOWN: op untouched, still the caller's. */
static int kv_op_start(kva_kv *kv, kva_op *op, int status) {
  op->result_if_copied = status;
  kv_op_started(kv);
  if (op->job.nchunks == 0) {
    op_complete(op, status);
    return KVA_OK;
  }
  int rc = copy_actor_submit(kv->dev, op);
  if (rc != KVA_OK) kv_op_finished(kv);
  return rc;
}

/* reserve_write(NEW) of the full chunks, then of a partial last one.
 * Returns KVA_OK (st[] per chunk) or the error of a refused call. */
static int kv_reserve(kva_storage *s, const kva_kv *kv, const kva_key *k, size_t n, uint32_t ct,
                      size_t ntokens, kva_buf *bufs, int *st) {
  size_t full = ntokens == (uint64_t)n * ct ? n : n - 1;
  kva_layout l = kva_kv_chunk_layout(kv, ct);
  int rc = full ? kva_reserve_write(s, k, full, &l, KVA_WRITE_NEW, bufs, st) : 0;
  if (rc < 0 || full == n) return rc < 0 ? rc : KVA_OK;
  l = kva_kv_chunk_layout(kv, (uint32_t)(ntokens - full * ct));
  rc = kva_reserve_write(s, &k[full], 1, &l, KVA_WRITE_NEW, &bufs[full], &st[full]);
  if (rc >= 0) return KVA_OK;
  /* the full chunks were reserved: drop them unseen */
  storage_link_abort_write(s, k, full, st);
  return rc;
}

/* Picks the reserved chunks; the op's status is KVA_ENOMEM when a chunk
 * found no room (present keys are just skipped). */
static int kv_store_chunks(kva_op *op, const kva_key *k, size_t n, uint32_t ct, const kva_buf *bufs,
                           const int *st) {
  int status = KVA_OK;
  for (size_t c = 0; c < n; c++) {
    if (st[c] == KVA_OK) {
      kv_op_add(op, ct, c, &k[c], bufs[c].ptr);
    } else if (st[c] == KVA_OUT_OF_MEMORY) {
      status = KVA_ENOMEM;
      op->no_room++;
    } else {
      op->present++;
    }
  }
  return status;
}

static int kv_store(kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks,
                    uint32_t chunk_tokens, const int64_t *slot_mapping, size_t ntokens,
                    kva_op **out) {
  kva_op *op = kv_op_new(kv, OP_STORE, nchunks, slot_mapping, ntokens);
  if (!op) return KVA_ENOMEM;
  /* op->st holds the reservation's status per chunk until
   * kv_store_chunks has read it, then the finishing request's */
  int rc = kv_reserve(s, kv, k, nchunks, chunk_tokens, ntokens, op->bufs, op->st);
  if (rc == KVA_OK) {
    rc = kv_op_start(kv, op, kv_store_chunks(op, k, nchunks, chunk_tokens, op->bufs, op->st));
    if (rc != KVA_OK) { /* the actor is gone: drop the reservations unseen */
      storage_link_abort_write(s, op->keys, op->job.nchunks, op->st);
    }
  }
  if (rc != KVA_OK) {
    op_return(op);
    return rc;
  }
  *out = op;
  return KVA_OK;
}

/* Every prefetched chunk must be an object of its chunk layout. */
static int kv_load_chunks(kva_op *op, const kva_kv *kv, const kva_key *k, size_t n, uint32_t ct,
                          const kva_buf *bufs) {
  for (size_t c = 0; c < n; c++) {
    kva_layout l = kva_kv_chunk_layout(kv, geom_chunk_tokens(ct, op->job.ntokens, (uint32_t)c));
    if (bufs[c].len != kva_layout_bytes(&l)) return KVA_EINVAL;
    kv_op_add(op, ct, c, &k[c], bufs[c].ptr);
  }
  return KVA_OK;
}

static int kv_load(kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks,
                   uint32_t chunk_tokens, const int64_t *slot_mapping, size_t ntokens,
                   kva_op **out) {
  kva_op *op = kv_op_new(kv, OP_LOAD, nchunks, slot_mapping, ntokens);
  if (!op) return KVA_ENOMEM;
  /* on failure it released the locks it found */
  int rc = kva_read_prefetched(s, k, nchunks, op->bufs);
  int locked = rc == KVA_OK;
  if (rc == KVA_OK) rc = kv_load_chunks(op, kv, k, nchunks, chunk_tokens, op->bufs);
  if (rc == KVA_OK) rc = kv_op_start(kv, op, KVA_OK);
  if (rc != KVA_OK) {
    if (locked) kva_finish_read_prefetched(s, k, nchunks, 0);
    op_return(op);
    return rc;
  }
  *out = op;
  return KVA_OK;
}

/* Either call, as one facade call (storage_enter .. leave) from its checks
 * to the hand-over, so the facade's close, which waits for calls in
 * progress and then for the copy actors (gpu_drain), never misses an op. */
static int kv_call(int kind, kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks,
                   uint32_t ct, const int64_t *slots, size_t ntokens, kva_op **out) {
  int rc = kv_check_request(s, kv, k, nchunks, ct, slots, ntokens, out,
                            kind == OP_STORE ? "kva_kv_store" : "kva_kv_load");
  if (rc != KVA_OK || (rc = storage_link_enter(s)) != KVA_OK) return rc;
  rc = kind == OP_STORE ? kv_store(s, kv, k, nchunks, ct, slots, ntokens, out)
                        : kv_load(s, kv, k, nchunks, ct, slots, ntokens, out);
  storage_link_leave(s);
  return rc;
}

int kva_kv_store(kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks,
                 uint32_t chunk_tokens, const int64_t *slot_mapping, size_t ntokens, kva_op **out) {
  return kv_call(OP_STORE, s, kv, k, nchunks, chunk_tokens, slot_mapping, ntokens, out);
}

int kva_kv_load(kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks, uint32_t chunk_tokens,
                const int64_t *slot_mapping, size_t ntokens, kva_op **out) {
  return kv_call(OP_LOAD, s, kv, k, nchunks, chunk_tokens, slot_mapping, ntokens, out);
}
