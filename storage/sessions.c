/*
 * sessions.c — the pool of sessions (reply ports) the facade's calls
 * borrow, the process-wide table that prefetch handles index, and the
 * request/reply helpers every call is built on.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "client/connection.h"
#include "common/key.h"
#include "storage/storage_internal.h"

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

void session_forget(session *ss) {
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
  /* a client's replies cross the socket: spinning for them only takes the
   * CPU the daemon and the reader need */
  if (ss->port && s->client) port_set_spin(ss->port, 0);
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

/* The calling thread serves its own request (port_send_lent): the
 * receiver's turn, and for a call that waits the turns that one makes
 * ready, up to LENT_TURNS, run here until the reply is in; then, and for a
 * prefetch submit (which does not wait: the L1 manager's turn answers
 * resident keys, an L2 load goes on without us), only turns cheaper here
 * than waking a worker for them. */
#define LENT_TURNS 64u

static int send_lent(session *ss, kva_actor *to, uint32_t type, const void *ptr, bool receiving) {
  kva_storage *s = ss->s;
  if (s->client && to == s->l1) /* a client's: the frame leaves from this thread */
    return client_conn_send(s->client, type, ptr, kva_port_actor(ss->port), ss->tag);
  return port_send_lent(ss->port, to, type, &ptr, ptr ? sizeof(ptr) : 0, ss->tag, LENT_TURNS,
                        receiving);
}

int session_send(session *ss, kva_actor *to, uint32_t type, const void *ptr) {
  return send_lent(ss, to, type, ptr, false);
}

int session_ask(session *ss, kva_actor *to, uint32_t type, const void *ptr, int timeout_ms) {
  ss->tag++;
  int rc = send_lent(ss, to, type, ptr, true);
  return rc == KVA_OK ? session_await(ss, timeout_ms) : rc;
}

int storage_with_session(kva_storage *s, int (*fn)(kva_storage *, session *, void *), void *arg) {
  /* a pooled actor that waited here would hold the worker its reply may
   * need (the L1 manager it made ready is in that worker's next slot); a
   * client's replies come through the connection's reader thread */
  if (s && !s->client && actor_in_pooled_turn()) return KVA_EINVAL;
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

static int remote(kva_storage *s, session *ss, void *arg) {
  client_call *c = arg;
  int rc = session_ask(ss, s->l1, CL_CALL, c, -1); /* answered within client.timeout_ms */
  return rc == KVA_OK ? c->result : rc;
}

int storage_remote(kva_storage *s, client_call *c) {
  return storage_with_session(s, remote, c);
}

int storage_check_keys(const kva_storage *s, const kva_key *k, size_t n, const char *call) {
  if (!s || !k || n == 0 || n > INT32_MAX) return KVA_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!key_valid(&k[i])) return KVA_EINVAL;
  char why[KVA_KEY_TEXT_MAX + 160];
  int rc = key_repeat_problem(k, n, call, why, sizeof(why));
  if (rc == KVA_EINVAL) LOG_WARN("%s", why);
  return rc;
}
