/*
 * poller.c — fd watches and timers: one epoll set per runtime, served by
 * one poller thread that turns readiness into KVA_MSG_FD_READY and timerfd
 * expirations into KVA_MSG_TIMER messages.
 *
 * Watches and timers live in a table indexed by id; epoll carries
 * (id << 32 | generation), so an event that raced with a cancel (the
 * poller may hold an event for an entry that was just removed) finds a
 * different generation and is dropped instead of reaching freed memory.
 * The table is guarded by `lock`; it is touched only on registration and
 * on events, never on the message hot path.
 *
 * Deterministic mode: timers are entries with a virtual deadline and no
 * timerfd; fd watches are polled with a zero timeout when nothing is ready.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <ck_pr.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "common/array.h"

enum { ENTRY_FREE = 0, ENTRY_FD = 1, ENTRY_TIMER = 2 };
#define WAKE_KEY UINT64_MAX

typedef struct poll_entry {
  uint32_t kind;
  uint32_t gen;
  kva_actor *owner;
  int fd; /* watched fd, or the timerfd (-1 in deterministic mode) */
  uint64_t tag;
  uint64_t deadline, period; /* deterministic mode */
  int next_free;
} poll_entry;

struct poller {
  kva_runtime *rt;
  int epfd;
  int wake_efd;
  pthread_t thread;
  int has_thread;
  pthread_mutex_t lock;
  poll_entry *e;
  int n, cap;
  int free_head;
};

static uint64_t entry_key(const poller *p, int id) {
  return ((uint64_t)(uint32_t)id << 32) | p->e[id].gen;
}

static int entry_alloc(poller *p) {
  if (p->free_head >= 0) {
    int id = p->free_head;
    p->free_head = p->e[id].next_free;
    return id;
  }
  if (p->n == p->cap) {
    size_t cap = (size_t)p->cap;
    if (p->n == INT_MAX || !ARRAY_GROW(p->e, &cap, (size_t)p->n + 1)) return -1;
    p->cap = cap > INT_MAX ? INT_MAX : (int)cap; /* ids are ints */
  }
  memset(&p->e[p->n], 0, sizeof(poll_entry));
  return p->n++;
}

/* Under the lock. Closes a timerfd; a watched fd belongs to the user. */
static void entry_free(poller *p, int id) {
  poll_entry *en = &p->e[id];
  if (en->fd >= 0 && p->epfd >= 0) epoll_ctl(p->epfd, EPOLL_CTL_DEL, en->fd, NULL);
  if (en->kind == ENTRY_TIMER && en->fd >= 0) close(en->fd);
  en->kind = ENTRY_FREE;
  en->gen++;
  en->owner = NULL;
  en->fd = -1;
  en->next_free = p->free_head;
  p->free_head = id;
}

/* Poller thread: read under the lock so a concurrent cancel cannot close
 * the timerfd in between; the send happens after unlocking. */
static void handle_event(poller *p, struct epoll_event *ev) {
  int id = (int)(ev->data.u64 >> 32);
  pthread_mutex_lock(&p->lock);
  if (id >= p->n || p->e[id].kind == ENTRY_FREE || entry_key(p, id) != ev->data.u64) {
    pthread_mutex_unlock(&p->lock);
    return;
  }
  poll_entry en = p->e[id];
  uint64_t expirations = 0;
  if (en.kind == ENTRY_TIMER) {
    if (read(en.fd, &expirations, sizeof(expirations)) != sizeof(expirations)) expirations = 0;
    if (expirations && en.period == 0) entry_free(p, id);
  }
  /* the owner may stop (poller_forget_actor) once we unlock: a listed
   * entry means it has not yet, and our reference keeps it for the send */
  actor_ref(en.owner);
  pthread_mutex_unlock(&p->lock);
  if (en.kind == ENTRY_FD) {
    kva_fd_event fe = {.fd = en.fd, .events = ev->events};
    actor_send_internal(en.owner, KVA_MSG_FD_READY, &fe, sizeof(fe), en.tag);
  } else if (expirations) {
    kva_timer_event te = {.timer_id = id, .expirations = expirations};
    actor_send_internal(en.owner, KVA_MSG_TIMER, &te, sizeof(te), en.tag);
  }
  actor_unref(en.owner);
}

static void *poller_main(void *arg) {
  poller *p = arg;
  rt_internal_thread = 1;
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(p->epfd, evs, 64, -1);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == WAKE_KEY) return NULL;
      handle_event(p, &evs[i]);
    }
  }
  return NULL;
}

int poller_create(kva_runtime *rt) {
  poller *p = calloc(1, sizeof(*p));
  if (!p) return KVA_ENOMEM;
  p->rt = rt;
  p->free_head = -1;
  pthread_mutex_init(&p->lock, NULL);
  p->epfd = epoll_create1(EPOLL_CLOEXEC);
  p->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  rt->poll = p;
  if (p->epfd < 0 || p->wake_efd < 0) return KVA_EIO;
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WAKE_KEY};
  if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->wake_efd, &ev) != 0) return KVA_EIO;
  if (rt->det) return KVA_OK;
  if (pthread_create(&p->thread, NULL, poller_main, p) != 0) return KVA_ENOMEM;
  p->has_thread = 1;
  return KVA_OK;
}

void poller_stop(kva_runtime *rt) {
  poller *p = rt->poll;
  if (!p) return;
  if (p->has_thread) {
    uint64_t one = 1;
    if (write(p->wake_efd, &one, sizeof(one)) < 0) LOG_WARN("poller wake: %s", strerror(errno));
    pthread_join(p->thread, NULL);
    p->has_thread = 0;
  }
  pthread_mutex_lock(&p->lock);
  for (int id = 0; id < p->n; id++)
    if (p->e[id].kind != ENTRY_FREE) entry_free(p, id);
  pthread_mutex_unlock(&p->lock);
}

void poller_destroy(kva_runtime *rt) {
  poller *p = rt->poll;
  if (!p) return;
  poller_stop(rt);
  if (p->epfd >= 0) close(p->epfd);
  if (p->wake_efd >= 0) close(p->wake_efd);
  pthread_mutex_destroy(&p->lock);
  free(p->e);
  free(p);
  rt->poll = NULL;
}

void poller_forget_actor(kva_runtime *rt, kva_actor *a) {
  poller *p = rt->poll;
  pthread_mutex_lock(&p->lock);
  for (int id = 0; id < p->n; id++)
    if (p->e[id].kind != ENTRY_FREE && p->e[id].owner == a) entry_free(p, id);
  pthread_mutex_unlock(&p->lock);
}

int kva_watch_fd(kva_actor *self, int fd, uint32_t epoll_events, uint64_t tag) {
  if (!self || fd < 0) return KVA_EINVAL;
  poller *p = self->rt->poll;
  pthread_mutex_lock(&p->lock);
  int id = entry_alloc(p), rc = KVA_OK;
  if (id < 0) {
    rc = KVA_ENOMEM;
  } else {
    p->e[id] = (poll_entry){.kind = ENTRY_FD,
                            .gen = p->e[id].gen,
                            .owner = self,
                            .fd = fd,
                            .tag = tag,
                            .next_free = -1};
    /* edge-triggered: one message per readiness edge, the actor reads
     * until EAGAIN (no syscall to re-arm after every event) */
    struct epoll_event ev = {.events = epoll_events | EPOLLET, .data.u64 = entry_key(p, id)};
    if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      rc = errno == ENOMEM ? KVA_ENOMEM : KVA_EINVAL;
      p->e[id].fd = -1;
      entry_free(p, id);
    }
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

int kva_unwatch_fd(kva_actor *self, int fd) {
  if (!self) return KVA_EINVAL;
  poller *p = self->rt->poll;
  int rc = KVA_EINVAL;
  pthread_mutex_lock(&p->lock);
  for (int id = 0; id < p->n; id++) {
    poll_entry *en = &p->e[id];
    if (en->kind == ENTRY_FD && en->fd == fd && en->owner == self) {
      entry_free(p, id);
      rc = KVA_OK;
      break;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

static int timer_arm(poller *p, poll_entry *en, int id, uint64_t delay_ns, uint64_t period_ns) {
  if (p->rt->det) {
    en->fd = -1;
    en->deadline = kva_runtime_now_ns(p->rt) + delay_ns;
    en->period = period_ns;
    return KVA_OK;
  }
  en->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (en->fd < 0) return KVA_EIO;
  if (delay_ns == 0) delay_ns = 1; /* 0 would disarm */
  struct itimerspec its = {
      .it_value = {(time_t)(delay_ns / 1000000000ull), (long)(delay_ns % 1000000000ull)},
      .it_interval = {(time_t)(period_ns / 1000000000ull), (long)(period_ns % 1000000000ull)}};
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = entry_key(p, id)};
  if (timerfd_settime(en->fd, 0, &its, NULL) != 0 ||
      epoll_ctl(p->epfd, EPOLL_CTL_ADD, en->fd, &ev) != 0)
    return KVA_EIO;
  return KVA_OK;
}

int kva_timer(kva_actor *self, uint64_t delay_ns, uint64_t period_ns, uint64_t tag) {
  if (!self) return KVA_EINVAL;
  poller *p = self->rt->poll;
  pthread_mutex_lock(&p->lock);
  int id = entry_alloc(p), rc;
  if (id < 0) {
    rc = KVA_ENOMEM;
  } else {
    p->e[id] = (poll_entry){.kind = ENTRY_TIMER,
                            .gen = p->e[id].gen,
                            .owner = self,
                            .tag = tag,
                            .period = period_ns,
                            .next_free = -1};
    rc = timer_arm(p, &p->e[id], id, delay_ns, period_ns);
    if (rc != KVA_OK)
      entry_free(p, id);
    else
      rc = id;
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

int kva_timer_cancel(kva_actor *self, int timer_id) {
  if (!self) return KVA_EINVAL;
  poller *p = self->rt->poll;
  int rc = KVA_EINVAL;
  pthread_mutex_lock(&p->lock);
  if (timer_id >= 0 && timer_id < p->n && p->e[timer_id].kind == ENTRY_TIMER &&
      p->e[timer_id].owner == self) {
    entry_free(p, timer_id);
    rc = KVA_OK;
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

/* ---- deterministic mode (single thread: the lock is uncontended) ---- */

static int earliest_timer(poller *p) {
  int best = -1;
  for (int id = 0; id < p->n; id++) {
    poll_entry *en = &p->e[id];
    if (en->kind == ENTRY_TIMER && (best < 0 || en->deadline < p->e[best].deadline)) best = id;
  }
  return best;
}

bool poller_det_next_timer(kva_runtime *rt, uint64_t *deadline) {
  int id = earliest_timer(rt->poll);
  if (id < 0) return false;
  *deadline = rt->poll->e[id].deadline;
  return true;
}

bool poller_det_fire_due(kva_runtime *rt, uint64_t now) {
  poller *p = rt->poll;
  int id = earliest_timer(p);
  if (id < 0 || p->e[id].deadline > now) return false;
  poll_entry en = p->e[id];
  if (en.period) {
    p->e[id].deadline += en.period;
  } else {
    entry_free(p, id);
  }
  kva_timer_event te = {.timer_id = id, .expirations = 1};
  actor_send_internal(en.owner, KVA_MSG_TIMER, &te, sizeof(te), en.tag);
  return true;
}

bool poller_det_poll(kva_runtime *rt) {
  poller *p = rt->poll;
  struct epoll_event evs[64];
  int n = epoll_wait(p->epfd, evs, 64, 0);
  bool any = false;
  for (int i = 0; i < n; i++) {
    if (evs[i].data.u64 == WAKE_KEY) continue;
    handle_event(p, &evs[i]);
    any = true;
  }
  return any;
}
