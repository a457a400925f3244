/*
 * l1_manager.c — the L1 manager actor: owns the host pool and the object
 * table; every batched request is one message, so each batch is atomic.
 *
 * Accepts                               | Sends
 * --------------------------------------+---------------------------------
 * requests (l1_req *):                  | L1_REPLY to the sender (same tag)
 *   L1_RESERVE_WRITE, L1_FINISH_WRITE,  |   when the request is complete
 *   L1_RESERVE_READ,                    |
 *   L1_FINISH_READ, L1_DELETE,          |
 *   L1_FINISH_WRITE_AND_RESERVE_READ,   |
 *   L1_TOUCH, L1_CLEAR, L1_READ,        |
 *   L1_MEMCHECK, L1_STATS, L1_LOOKUP,   |
 *   L1_UNPIN, L1_INSPECT,               |
 *   L1_ABORT_WRITE                      |
 * L1_PREFETCH (l1_req *)                | L1_REPLY, or with the l2 flag and
 *                                       |   a partial L1 hit L1_HANDOFF to
 *                                       |   the prefetch controller, which
 *                                       |   replies in our place
 *                                       | L1_WRITTEN to the store
 *                                       |   controller after a request that
 *                                       |   finished writes of ordinary
 *                                       |   objects
 * L1_EVICT (evict_list, from EC)        | EC_EVICT_DONE to EC
 * L1_CANDIDATES (evict_list, from EC)   | EC_DEMAND to EC (demand eviction)
 *                                       | EC_NOTE to EC after each request
 *                                       |   that changed anything
 *
 * Invariants:
 *  - an object is write-locked xor readable; a write-locked object has no
 *    readers; a temporary object is removed when its last reader leaves;
 *  - locked or pinned objects are never evicted (demand or watermark);
 *  - notifications leave in the order the changes happened, one message per
 *    request, after the request is complete: the eviction controller's view
 *    is exactly the manager's state as of the last note it received;
 *  - while a demand eviction waits for candidates, every other message is
 *    deferred (kept in arrival order), so the state the candidates were
 *    chosen from is the state they are applied to, and the reservation stays
 *    atomic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "common/array.h"
#include "common/key.h"
#include "l1/l1_internal.h"

/* ---- notifications ------------------------------------------------------ */

/* Appends one change to the current request's note (dropped on ENOMEM: the
 * policy then misses it, which costs eviction quality, never correctness). */
void l1_note(struct l1_manager *m, uint32_t op, uint32_t slot, uint64_t bytes) {
  if (!m->evictor) return;
  evict_note *n = m->note;
  if (!n || n->n == m->note_cap) {
    size_t cap = array_next_cap(m->note_cap, m->note_cap + 1, sizeof(n->e[0]));
    void *grown = m->note;
    if (cap == 0 || !array_resize(&grown, sizeof(*n) + cap * sizeof(n->e[0]), 1)) return;
    n = grown;
    if (!m->note) n->n = 0;
    m->note = n;
    m->note_cap = cap;
  }
  evict_note_entry *e = &n->e[n->n++];
  e->id = object_id(&m->t, slot);
  e->bytes = bytes;
  e->op = op;
  e->pad = 0;
}

/* Sends the changes of the request just handled, with the pool's usage. */
void l1_note_flush(struct l1_manager *m) {
  evict_note *n = m->note;
  if (!m->evictor || !n || n->n == 0) return;
  n->used = pool_used(m->pool);
  n->capacity = pool_capacity(m->pool);
  uint32_t len = (uint32_t)(sizeof(*n) + n->n * sizeof(n->e[0]));
  if (kva_send(m->evictor, EC_NOTE, n, len, m->self, 0) != KVA_OK) m->evictor = NULL;
  n->n = 0;
}

/* Appends one finished write: the layouts of a request are listed once
 * each (a request usually has one), the keys after them. Dropped on ENOMEM
 * with a warning: that object is then not stored to L2, nothing else. */
void l1_written_add(struct l1_manager *m, uint32_t slot) {
  if (!m->store) return;
  l1_obj *o = object_at(&m->t, slot);
  size_t need = m->written_len + sizeof(kva_layout) + sizeof(l1_written_entry);
  if (m->written_len == 0) need += sizeof(l1_written);
  if (!ARRAY_GROW(m->written, &m->written_cap, need)) {
    LOG_WARN("l1: out of memory: a finished write is not stored to L2");
    return;
  }
  if (m->written_len == 0) {
    memset(m->written, 0, sizeof(l1_written));
    m->written_len = sizeof(l1_written);
  }
  /* keys are appended at the end, layouts are kept in front of them: a
   * new layout shifts the keys (rare: one layout per request is usual) */
  l1_written *h = (l1_written *)m->written;
  kva_layout *lay = (kva_layout *)(m->written + sizeof(*h));
  l1_written_entry *e = (l1_written_entry *)(lay + h->nlayouts);
  uint32_t li = 0;
  while (li < h->nlayouts && memcmp(&lay[li], &o->layout, sizeof(kva_layout)) != 0) li++;
  if (li == h->nlayouts) {
    memmove((uint8_t *)e + sizeof(kva_layout), e, h->n * sizeof(*e));
    lay[li] = o->layout;
    h->nlayouts++;
    e = (l1_written_entry *)(lay + h->nlayouts);
  }
  memset(&e[h->n], 0, sizeof(e[h->n]));
  e[h->n].key = o->key;
  e[h->n].layout = li;
  h->n++;
  m->written_len = sizeof(*h) + h->nlayouts * sizeof(kva_layout) + h->n * sizeof(*e);
}

static void l1_written_flush(struct l1_manager *m) {
  if (!m->store || m->written_len == 0) return;
  if (kva_send(m->store, L1_WRITTEN, m->written, (uint32_t)m->written_len, m->self, 0) != KVA_OK)
    m->store = NULL;
  m->written_len = 0;
}

void l1_reply(struct l1_manager *m, kva_actor *to, uint64_t tag) {
  if (to) kva_send(to, L1_REPLY, NULL, 0, m->self, tag);
}

/* ---- scratch ------------------------------------------------------------ */

static int scratch_reserve(scratch *s, size_t n) {
  if (n <= s->cap) return KVA_OK;
  /* one capacity for all: the largest entries are seen's two uint32_t */
  size_t cap = array_next_cap(s->cap, n, 2 * sizeof(*s->seen));
  if (cap == 0) return KVA_ENOMEM;
  /* each array that grows is kept; the capacity moves once all have */
  bool ok = ARRAY_RESIZE(s->slot, cap);
  ok = ARRAY_RESIZE(s->fresh, cap) && ok;
  ok = ARRAY_RESIZE(s->bytes, cap) && ok;
  ok = ARRAY_RESIZE(s->ptrs, cap) && ok;
  ok = ARRAY_RESIZE(s->owner, cap) && ok;
  ok = ARRAY_RESIZE(s->hash, cap) && ok;
  if (ARRAY_RESIZE(s->seen, 2 * cap))
    s->seen_cap = 2 * cap;
  else
    ok = false;
  if (!ok) return KVA_ENOMEM;
  s->cap = cap;
  return KVA_OK;
}

/* Hashes the request's keys into sc.hash; returns whether a key repeats
 * (the request is then refused: docs/invariants.md I-L1-11), or -1 on
 * ENOMEM. */
static int l1_scan_keys(struct l1_manager *m, const l1_req *r) {
  scratch *s = &m->sc;
  if (scratch_reserve(s, r->n) != KVA_OK) return -1;
  size_t mask = 1;
  while (mask < 2 * r->n) mask <<= 1;
  mask--; /* a power of two at least twice n, within seen_cap */
  if (r->n > 1) memset(s->seen, 0xff, (mask + 1) * sizeof(*s->seen));
  for (size_t i = 0; i < r->n; i++) {
    uint64_t h = key_hash(&r->keys[i]);
    s->hash[i] = h;
    if (r->n == 1) break;
    size_t j = h & mask;
    for (; s->seen[j] != UINT32_MAX; j = (j + 1) & mask) {
      uint32_t e = s->seen[j];
      if (s->hash[e] == h && key_equal(&r->keys[e], &r->keys[i])) return 1;
    }
    s->seen[j] = (uint32_t)i;
  }
  return 0;
}

static void scratch_free(scratch *s) {
  free(s->hash);
  free(s->seen);
  free(s->slot);
  free(s->fresh);
  free(s->bytes);
  free(s->ptrs);
  free(s->owner);
}

/* ---- deferral ----------------------------------------------------------- */

/* Keeps a message for later (a demand eviction is waiting). */
static void defer(struct l1_manager *m, const kva_msg *msg) {
  deferred_msg *d = malloc(sizeof(*d) + msg->len);
  if (!d) {
    LOG_ERROR("l1: cannot defer a message of %u bytes: out of memory", msg->len);
    if (msg->len == sizeof(l1_req *)) {
      l1_req *r = *(l1_req *const *)msg->data;
      r->result = KVA_ENOMEM;
      l1_reply(m, msg->from, msg->tag);
    }
    return;
  }
  d->m = *msg;
  if (msg->len) memcpy(d->data, msg->data, msg->len);
  d->m.data = d->data;
  d->next = NULL;
  if (m->dq_tail)
    m->dq_tail->next = d;
  else
    m->dq_head = d;
  m->dq_tail = d;
}

static void l1_dispatch(struct l1_manager *m, const kva_msg *msg);

/* Replays deferred messages in order until one starts a new demand. */
static void drain_deferred(struct l1_manager *m) {
  while (m->dq_head && !m->dem.active) {
    deferred_msg *d = m->dq_head;
    m->dq_head = d->next;
    if (!m->dq_head) m->dq_tail = NULL;
    l1_dispatch(m, &d->m);
    free(d);
  }
}

/* ---- receive ------------------------------------------------------------ */

static l1_req *req_of(const kva_msg *msg) {
  if (msg->len != sizeof(l1_req *)) return NULL;
  l1_req *r;
  memcpy(&r, msg->data, sizeof(r));
  return r;
}

/* A prefetch that missed in L1 and may be found in L2 goes on to the
 * prefetch controller, which replies in our place. */
static bool handoff(struct l1_manager *m, const kva_msg *msg, l1_req *r) {
  if (!r->l2 || !m->prefetcher || r->result != KVA_OK || r->hits == r->n) return false;
  l1_handoff h = {.r = r, .reply_to = msg->from, .tag = msg->tag};
  return kva_send(m->prefetcher, L1_HANDOFF, &h, sizeof(h), m->self, 0) == KVA_OK;
}

/* Handles one request whose reply is sent at once. */
static void dispatch_req(struct l1_manager *m, const kva_msg *msg, l1_req *r) {
  switch (msg->type) {
  case L1_FINISH_WRITE:
    l1_finish_write(m, r, false);
    break;
  case L1_FINISH_WRITE_AND_RESERVE_READ:
    l1_finish_write(m, r, true);
    break;
  case L1_RESERVE_READ:
    l1_reserve_read(m, r);
    break;
  case L1_FINISH_READ:
    l1_finish_read(m, r);
    break;
  case L1_PREFETCH:
    l1_prefetch(m, r);
    break;
  case L1_READ:
    l1_read(m, r);
    break;
  case L1_TOUCH:
    l1_touch(m, r);
    break;
  case L1_DELETE:
    l1_delete(m, r);
    break;
  case L1_CLEAR:
    l1_clear(m, r);
    break;
  case L1_MEMCHECK:
    l1_memcheck(m, r);
    break;
  case L1_STATS:
    l1_stats(m, r);
    break;
  case L1_LOOKUP:
    l1_lookup(m, r);
    break;
  case L1_UNPIN:
    l1_unpin(m, r);
    break;
  case L1_INSPECT:
    l1_inspect(m, r);
    break;
  case L1_ABORT_WRITE:
    l1_abort_write(m, r);
    break;
  default:
    r->result = KVA_EINVAL;
    break;
  }
  l1_note_flush(m);
  l1_written_flush(m);
  if (msg->type == L1_PREFETCH && handoff(m, msg, r)) return;
  l1_reply(m, msg->from, msg->tag);
}

/* An evict_list whose ids all lie inside the payload. */
static bool evict_list_ok(const kva_msg *msg) {
  if (msg->len < sizeof(evict_list)) return false;
  const evict_list *l = msg->data;
  return (msg->len - sizeof(evict_list)) / sizeof(l->ids[0]) >= l->n;
}

static bool uses_readers(uint32_t type) {
  return type == L1_RESERVE_READ || type == L1_FINISH_READ || type == L1_PREFETCH ||
         type == L1_FINISH_WRITE_AND_RESERVE_READ;
}

static void l1_dispatch(struct l1_manager *m, const kva_msg *msg) {
  if (msg->type == L1_EVICT) {
    if (evict_list_ok(msg)) l1_evict(m, msg->data); /* flushes its own notes */
    return;
  }
  l1_req *r = req_of(msg);
  if (!r) {
    LOG_WARN("l1: dropped message type %u (%u bytes)", msg->type, msg->len);
    return;
  }
  m->stamp++;
  if (uses_readers(msg->type) && (r->readers == 0 || r->readers > L1_MAX_READERS)) {
    r->result = KVA_EINVAL; /* the facade never sends these: a protocol error */
    l1_reply(m, msg->from, msg->tag);
    return;
  }
  int repeat = r->n && r->keys ? l1_scan_keys(m, r) : 0;
  if (repeat != 0) {
    /* the facade and kvactd's sessions refuse such calls before they get
     * here; any other sender's is refused the same way, nothing changed */
    if (repeat > 0) LOG_WARN("l1: refused a request (type %u) naming a key twice", msg->type);
    r->result = repeat > 0 ? KVA_EINVAL : KVA_ENOMEM;
    l1_reply(m, msg->from, msg->tag);
    return;
  }
  if (msg->type == L1_RESERVE_WRITE)
    l1_reserve_write(m, r, msg->from, msg->tag); /* replies itself */
  else
    dispatch_req(m, msg, r);
}

static void l1_receive(kva_actor *self, void *state, const kva_msg *msg) {
  struct l1_manager *m = state;
  if (msg->type == L1_CANDIDATES) {
    if (m->dem.active && evict_list_ok(msg)) l1_demand_candidates(m, msg->data);
    drain_deferred(m);
    return;
  }
  if (m->dem.active) {
    defer(m, msg);
    return;
  }
  l1_dispatch(m, msg);
  drain_deferred(m);
}

/* Frees everything: the objects' memory goes with the pool. Locks still
 * held here were never released by their owners; say so once. */
static void l1_on_stop(kva_actor *self, void *state) {
  struct l1_manager *m = state;
  if (m->n_write_locked || m->n_read_locked)
    LOG_WARN("l1: stopping with %lu write-locked and %lu read-locked objects",
             (unsigned long)m->n_write_locked, (unsigned long)m->n_read_locked);
  while (m->dq_head) {
    deferred_msg *d = m->dq_head;
    m->dq_head = d->next;
    free(d);
  }
  object_table_destroy(&m->t);
  pool_destroy(m->pool);
  scratch_free(&m->sc);
  free(m->dem.plan);
  free(m->note);
  free(m->written);
  free(m);
}

static const kva_behavior l1_behavior = {
    .name = "l1_manager",
    .receive = l1_receive,
    .on_stop = l1_on_stop,
};

l1_manager *l1_manager_spawn(kva_runtime *rt, const l1_manager_opts *o, char *err, size_t errlen) {
  struct l1_manager *m = calloc(1, sizeof(*m));
  if (!m) return NULL;
  pool_opts po = {.size_bytes = o->size_bytes,
                  .reserve_bytes = o->reserve_bytes,
                  .align_bytes = o->align_bytes,
                  .numa_node = o->numa_node,
                  .hugepages = o->hugepages,
                  .prefault = o->prefault,
                  .pinned = o->pinned,
                  .shared = o->shared};
  if (pool_create(&po, &m->pool, err, errlen) != KVA_OK || object_table_init(&m->t) != KVA_OK) {
    pool_destroy(m->pool);
    object_table_destroy(&m->t);
    free(m);
    return NULL;
  }
  m->st.l1_capacity_bytes = pool_capacity(m->pool);
  m->self = kva_spawn(rt, &l1_behavior, m, NULL);
  if (!m->self) {
    snprintf(err, errlen, "l1: cannot spawn the L1 manager actor");
    object_table_destroy(&m->t);
    pool_destroy(m->pool);
    free(m);
    return NULL;
  }
  return m;
}

kva_actor *l1_manager_actor(l1_manager *m) {
  return m->self;
}

const pool *l1_manager_pool(const l1_manager *m) {
  return m->pool;
}
void l1_manager_set_evictor(l1_manager *m, kva_actor *evictor) {
  m->evictor = evictor;
}
void l1_manager_set_store(l1_manager *m, kva_actor *store) {
  m->store = store;
}
void l1_manager_set_prefetcher(l1_manager *m, kva_actor *prefetcher) {
  m->prefetcher = prefetcher;
}
