/*
 * prefetch.c — prefetch handles and reading prefetched objects.
 *
 * A handle is not an address: it encodes its session's index in the
 * process-wide session table and the session's generation (bumped at every
 * release), (gen << 32) | (index + 1). A handle used after its result was
 * read, one of another runtime, or a made-up value is looked up, found
 * stale, and refused with KVA_EINVAL; nothing is dereferenced. A handle
 * belongs to one thread at a time.
 */
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "common/array.h"
#include "common/key.h"
#include "storage/storage_internal.h"

static kva_prefetch *handle_of(session *ss) {
  return (kva_prefetch *)(uintptr_t)(((uint64_t)ss->gen << 32) | (ss->index + 1u));
}

/* The session of a live handle, or NULL. */
static session *session_of(const kva_prefetch *h) {
  uint64_t v = (uint64_t)(uintptr_t)h;
  uint32_t low = (uint32_t)v;
  if (low == 0) return NULL;
  session *ss = session_at(low - 1);
  /* acquire: pairs with session_put's release of gen */
  if (!ss || __atomic_load_n(&ss->gen, __ATOMIC_ACQUIRE) != (uint32_t)(v >> 32)) return NULL;
  if (__atomic_load_n(&ss->state, __ATOMIC_ACQUIRE) != SESSION_PREFETCH) return NULL;
  return ss;
}

static int copy_keys(session *ss, const kva_key *k, size_t n) {
  if (!ARRAY_GROW(ss->keys, &ss->keys_cap, n)) return KVA_ENOMEM;
  memcpy(ss->keys, k, n * sizeof(*k));
  return KVA_OK;
}

int kva_submit_prefetch(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                        uint32_t extra_readers, kva_prefetch **h) {
  return kva_submit_prefetch_with(s, k, n, l, &(kva_prefetch_opts){.extra_readers = extra_readers},
                                  h);
}

int kva_submit_prefetch_with(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                             const kva_prefetch_opts *o, kva_prefetch **h) {
  return kva_submit_prefetch_opts(s, k, n, l, o, h);
}

int kva_submit_prefetch_opts(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                             const kva_prefetch_opts *o, kva_prefetch **h) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  kva_prefetch_opts none = {0};
  if (!o) o = &none;
  uint32_t extra_readers = o->extra_readers;
  if (!h || extra_readers > 127 || (o->flags & ~KVA_PREFETCH_AS_PLANNED) ||
      (o->warm != 0 && o->warm != 1) || (o->sparse != 0 && o->sparse != 1) ||
      (l && layout_bytes(l) == 0))
    return KVA_EINVAL;
  if (o->sparse) return KVA_ENOTSUP; /* not built yet (issue 36) */
  if ((rc = storage_enter(s)) != KVA_OK) return rc;
  session *ss = session_take(s);
  if (!ss) {
    storage_leave(s);
    return KVA_EAGAIN;
  }
  rc = copy_keys(ss, k, n);
  if (rc == KVA_OK) {
    if (l) ss->layout = *l;
    ss->req = (l1_req){.keys = ss->keys,
                       .n = n,
                       .layout = l ? &ss->layout : NULL,
                       .readers = 1 + extra_readers,
                       .l2 = l && s->prefetcher && !l2_frozen(&s->tiers),
                       .as_planned = (o->flags & KVA_PREFETCH_AS_PLANNED) != 0};
    ss->warm = o->warm != 0;
    ss->tag++;
    __atomic_store_n(&ss->state, SESSION_PREFETCH, __ATOMIC_RELEASE);
    rc = session_send(ss, s->l1, L1_PREFETCH, &ss->req);
  }
  if (rc == KVA_OK)
    *h = handle_of(ss);
  else
    session_put(ss);
  storage_leave(s);
  return rc;
}

/* Takes the result if it has arrived within timeout_ms (-1: forever).
 * Not there yet: `pending` (a query's KVA_EAGAIN, a wait's KVA_ETIMEDOUT
 * whatever its timeout, 0 included), the handle kept. */
static int prefetch_result(kva_storage *s, kva_prefetch *h, int timeout_ms, int pending,
                           size_t *hits) {
  if (!s || (timeout_ms != 0 && !s->client && actor_in_pooled_turn()))
    return KVA_EINVAL;       /* see storage_with_session */
  int rc = storage_enter(s); /* shutdown waits for us, then owns the handles */
  if (rc != KVA_OK) return rc;
  session *ss = session_of(h);
  if (!ss || ss->s != s) {
    storage_leave(s);
    return KVA_EINVAL;
  }
  rc = session_await(ss, timeout_ms);
  if (rc != KVA_OK) {
    storage_leave(s);
    return rc == KVA_ETIMEDOUT ? pending : rc;
  }
  int result = ss->req.result;
  size_t n = result == KVA_OK ? ss->req.hits : 0;
  if (hits) *hits = n;
  if (n && ss->warm) { /* KVA_PREFETCH_WARM: nothing is left to the caller */
    l1_req r = {.keys = ss->keys, .n = n, .readers = ss->req.readers};
    int rc2 = storage_call(s, L1_FINISH_READ, &r);
    if (rc2 < 0)
      LOG_WARN("prefetch: a warm prefetch's read locks not given back: %s", kva_strerror(rc2));
  }
  session_put(ss);
  storage_leave(s);
  return result;
}

int kva_query_prefetch(kva_storage *s, kva_prefetch *h, size_t *hits) {
  return prefetch_result(s, h, 0, KVA_EAGAIN, hits);
}

int kva_wait_prefetch(kva_storage *s, kva_prefetch *h, int timeout_ms, size_t *hits) {
  return prefetch_result(s, h, timeout_ms < 0 ? -1 : timeout_ms, KVA_ETIMEDOUT, hits);
}

int kva_prefetch_eventfd(const kva_prefetch *h) {
  session *ss = session_of(h);
  return ss ? kva_port_fd(ss->port) : KVA_EINVAL;
}

int kva_read_prefetched(kva_storage *s, const kva_key *k, size_t n, kva_buf *bufs) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!bufs) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .bufs = bufs};
  return storage_call(s, L1_READ, &r);
}

int kva_read_prefetched_layouts(kva_storage *s, const kva_key *k, size_t n, kva_buf *bufs,
                                kva_layout *layouts) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (!bufs || !layouts) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .bufs = bufs, .layouts = layouts};
  return storage_call(s, L1_READ, &r);
}

int kva_finish_read_prefetched(kva_storage *s, const kva_key *k, size_t n, uint32_t extra_readers) {
  int rc = storage_check_keys(s, k, n, __func__);
  if (rc != KVA_OK) return rc;
  if (extra_readers > 127) return KVA_EINVAL;
  l1_req r = {.keys = k, .n = n, .readers = 1 + extra_readers};
  return storage_call(s, L1_FINISH_READ, &r);
}
