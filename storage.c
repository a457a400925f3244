/*
 * storage.c — the storage manager's life with the runtime, and the pool of
 * sessions (reply ports) its calls borrow.
 *
 * Start: the L1 manager, then the eviction controller (newer actors stop
 * first, so the controller is gone before the manager frees the pool).
 * Shutdown: refuse new calls, wait for the calls already past that check
 * (each is waiting for a reply the manager will still send), then the
 * runtime stops the actors, then the sessions are freed.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "config/config_internal.h"
#include "gpu/copy_actor.h"
#include "l1/eviction_controller.h"
#include "l1/key.h"
#include "storage_internal.h"

static int start_l1(kva_storage *s, const kva_config *c) {
  char err[256] = "";
  l1_manager_opts o = {.size_bytes = (uint64_t)config_i64_or(c, "l1.size_bytes", 1 << 30),
                       .reserve_bytes = (uint64_t)config_i64_or(c, "l1.reserve_bytes", 0),
                       .align_bytes = (uint64_t)config_i64_or(c, "l1.align_bytes", 4096),
                       .numa_node = (int)config_i64_or(c, "l1.numa_node", -1),
                       .pinned = config_bool_or(c, "l1.pinned", -1), /* "auto" = -1 */
                       .hugepages = config_bool_or(c, "l1.hugepages", 1),
                       .prefault = config_bool_or(c, "l1.prefault", 0)};
  s->l1m = l1_manager_spawn(s->rt, &o, err, sizeof(err));
  if (!s->l1m) {
    LOG_ERROR("storage: %s", err[0] ? err : "cannot start the L1 manager");
    return KVA_ECONFIG;
  }
  s->l1 = l1_manager_actor(s->l1m);
  return KVA_OK;
}

static int start_evictor(kva_storage *s, const kva_config *c) {
  char err[256] = "";
  eviction_opts o = {.policy = config_str_or(c, "eviction.policy", "lru"),
                     .watermark = config_f64_or(c, "eviction.trigger_watermark", 0.8),
                     .ratio = config_f64_or(c, "eviction.ratio", 0.2),
                     .interval_ns =
                         (uint64_t)config_i64_or(c, "eviction.interval_ms", 1000) * 1000000u};
  s->evictor = eviction_controller_spawn(s->rt, s->l1, &o, err, sizeof(err));
  if (!s->evictor) {
    LOG_ERROR("storage: %s", err);
    return KVA_ECONFIG;
  }
  l1_manager_set_evictor(s->l1m, s->evictor);
  return KVA_OK;
}

static void storage_free(kva_storage *s);

static int storage_start(kva_runtime *rt, kva_storage **out) {
  kva_storage *s = calloc(1, sizeof(*s));
  if (!s) return KVA_ENOMEM;
  s->rt = rt;
  pthread_mutex_init(&s->lock, NULL);
  int rc = start_l1(s, rt->cfg);
  if (rc == KVA_OK) rc = start_evictor(s, rt->cfg);
  if (rc == KVA_OK) rc = storage_start_l2(s, rt->cfg);
  if (rc != KVA_OK) {
    /* actors already spawned are stopped and freed by the runtime */
    storage_free(s);
    return rc;
  }
  *out = s;
  return KVA_OK;
}

static void table_remove(session *ss);

int storage_enter(kva_storage *s) {
  /* seq_cst increment, then the closed check: storage_close stores closed,
   * then reads inflight, so one of the two sees the other (Dekker) */
  __atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&s->closed, __ATOMIC_SEQ_CST)) {
    storage_leave(s);
    return KVA_ESHUTDOWN;
  }
  return KVA_OK;
}

void storage_leave(kva_storage *s) {
  __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_RELEASE);
}

/* Refuses new calls, waits for those running. */
static void storage_close(kva_storage *s) {
  __atomic_store_n(&s->closed, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST)) sched_yield();
  storage_drain(s);
  gpu_drain(s->rt); /* GPU copies in flight end in L1 while it still runs */
}

/* After the runtime has stopped the actors. */
static void storage_free(kva_storage *s) {
  for (session *ss = s->all, *next; ss; ss = next) {
    next = ss->next_all;
    table_remove(ss);
    free(ss->keys);
    free(ss); /* its port is freed with the runtime */
  }
  prober_free(s->prober);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Every session of the process has an index in one table, and a prefetch
 * handle names its session by index and generation, never by address: a
 * made-up or stale handle is looked up, not dereferenced. */
#define TABLE_SIZE (1u << 16)
static session *table[TABLE_SIZE]; /* atomic pointers */
static uint32_t table_free[TABLE_SIZE], table_nfree, table_next;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static bool table_add(session *ss) {
  pthread_mutex_lock(&table_lock);
  bool ok = table_nfree > 0 || table_next < TABLE_SIZE;
  if (ok) ss->index = table_nfree ? table_free[--table_nfree] : table_next++;
  pthread_mutex_unlock(&table_lock);
  /* release: a reader that finds the pointer sees the session's fields */
  if (ok) __atomic_store_n(&table[ss->index], ss, __ATOMIC_RELEASE);
  return ok;
}

static void table_remove(session *ss) {
  __atomic_store_n(&table[ss->index], NULL, __ATOMIC_RELEASE);
  pthread_mutex_lock(&table_lock);
  table_free[table_nfree++] = ss->index;
  pthread_mutex_unlock(&table_lock);
}

session *session_at(uint32_t index) {
  return index < TABLE_SIZE ? __atomic_load_n(&table[index], __ATOMIC_ACQUIRE) : NULL;
}

/* A new session with its own small reply port (one reply at a time). */
static session *session_new(kva_storage *s) {
  session *ss = calloc(1, sizeof(*ss));
  if (!ss) return NULL;
  ss->s = s;
  ss->gen = 1;
  ss->port = port_open_with(s->rt, "storage_port", 4);
  if (!ss->port || !table_add(ss)) {
    if (ss->port) kva_port_close(ss->port);
    free(ss);
    return NULL;
  }
  return ss;
}

/* Sessions are reused oldest-freed first, so a stale prefetch handle meets
 * a changed generation long before its session could be handed out with
 * the same one. */
session *session_take(kva_storage *s) {
  pthread_mutex_lock(&s->lock);
  session *ss = s->free_head;
  if (ss) {
    s->free_head = ss->next_free;
    if (!s->free_head) s->free_tail = NULL;
  } else if (s->nsessions < MAX_SESSIONS && (ss = session_new(s))) {
    ss->next_all = s->all;
    s->all = ss;
    s->nsessions++;
  }
  pthread_mutex_unlock(&s->lock);
  if (ss) __atomic_store_n(&ss->state, SESSION_CALL, __ATOMIC_RELAXED);
  return ss;
}

void session_put(session *ss) {
  kva_storage *s = ss->s;
  /* release: a thread validating a stale handle sees the new generation */
  __atomic_store_n(&ss->gen, ss->gen + 1, __ATOMIC_RELEASE);
  __atomic_store_n(&ss->state, SESSION_FREE, __ATOMIC_RELEASE);
  pthread_mutex_lock(&s->lock);
  ss->next_free = NULL;
  if (s->free_tail)
    s->free_tail->next_free = ss;
  else
    s->free_head = ss;
  s->free_tail = ss;
  pthread_mutex_unlock(&s->lock);
}

/* Replies to earlier requests that timed out carry older tags: skipped. */
int session_await(session *ss, int timeout_ms) {
  for (;;) {
    kva_msg m;
    int rc = kva_port_recv(ss->port, &m, NULL, 0, timeout_ms);
    if (rc != KVA_OK) return rc;
    if (m.tag == ss->tag) return KVA_OK;
  }
}

int session_ask(session *ss, kva_actor *to, uint32_t type, const void *ptr, int timeout_ms) {
  ss->tag++;
  int rc = kva_send(to, type, &ptr, ptr ? sizeof(ptr) : 0, kva_port_actor(ss->port), ss->tag);
  return rc == KVA_OK ? session_await(ss, timeout_ms) : rc;
}

int storage_with_session(kva_storage *s, int (*fn)(kva_storage *, session *, void *), void *arg) {
  int rc = storage_enter(s);
  if (rc != KVA_OK) return rc;
  session *ss = session_take(s);
  if (!ss) {
    storage_leave(s);
    return KVA_EAGAIN;
  }
  rc = fn(s, ss, arg);
  session_put(ss);
  storage_leave(s);
  return rc;
}

typedef struct call_args {
  uint32_t type;
  l1_req *r;
} call_args;

static int call_l1(kva_storage *s, session *ss, void *arg) {
  call_args *a = arg;
  int rc = session_ask(ss, s->l1, a->type, a->r, -1);
  return rc == KVA_OK ? a->r->result : rc;
}

int storage_call(kva_storage *s, uint32_t type, l1_req *r) {
  return storage_with_session(s, call_l1, &(call_args){type, r});
}

int storage_check_keys(const kva_storage *s, const kva_key *k, size_t n) {
  if (!s || !k || n == 0 || n > INT32_MAX) return KVA_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!key_valid(&k[i])) return KVA_EINVAL;
  return KVA_OK;
}

/* ---- the runtime with its storage --------------------------------------- */

int kva_runtime_start(const kva_config *cfg, kva_runtime **out) {
  int rc = runtime_create(cfg, out);
  if (rc != KVA_OK) return rc;
  kva_runtime *rt = *out;
  if (config_i64_or(rt->cfg, "l1.size_bytes", 1 << 30) == 0) return KVA_OK;
  kva_storage *s = NULL;
  rc = storage_start(rt, &s);
  if (rc != KVA_OK) {
    runtime_destroy(rt);
    *out = NULL;
    return rc;
  }
  rt->storage = s;
  return KVA_OK;
}

void kva_runtime_shutdown(kva_runtime *rt) {
  if (!rt) return;
  kva_storage *s = rt->storage;
  if (s) storage_close(s);
  runtime_destroy(rt);
  if (s) storage_free(s);
}

kva_storage *kva_storage_of(kva_runtime *rt) {
  return rt ? rt->storage : NULL;
}
