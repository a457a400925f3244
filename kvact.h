/*
 * kvact.h — the one public header of kvact, a multi-tier KV-cache store for
 * LLM serving engines, built as an actor runtime over lock-free mailboxes.
 *
 * Self-contained (standard headers only), C11. Every public name starts with
 * kva_ / KVA_. Everything is thread-safe unless marked otherwise.
 *
 * Return conventions: 0 (KVA_OK) on success, a positive per-key status, or a
 * negative KVA_E* error. Library code never aborts on bad input.
 */
#ifndef KVACT_H
#define KVACT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------ */
enum {
  KVA_OK = 0,
  /* per-key results (mirror LMCache L1Error) */
  KVA_KEY_NOT_EXIST = 1,
  KVA_KEY_NOT_READABLE = 2,
  KVA_KEY_NOT_WRITABLE = 3,
  KVA_KEY_WRONG_STATE = 4,
  KVA_KEY_LOCKED = 5,
  KVA_OUT_OF_MEMORY = 6,
  /* call-level errors */
  KVA_EINVAL = -1,
  KVA_ECONFIG = -2,
  KVA_EIO = -3,
  KVA_EAGAIN = -4,
  KVA_ETIMEDOUT = -5,
  KVA_ESHUTDOWN = -6,
  KVA_ENOTSUP = -7,
  KVA_ENOMEM = -8,
};
const char *kva_strerror(int status);

/* ------------------------------------------------------------------------
 * Config: msgpack map files, validated against one schema (see README,
 * "Configuration reference"). On a bad file the loaders return KVA_ECONFIG
 * and write "<path>: <problem>" into err.
 * ------------------------------------------------------------------------ */
typedef struct kva_config kva_config;
kva_config *kva_config_default(void); /* embedded default; NULL only on ENOMEM */
int kva_config_from_file(const char *path, kva_config **out, char *err, size_t errlen);
int kva_config_from_msgpack(const void *buf, size_t len, kva_config **out, char *err,
                            size_t errlen);
/* scalar in text form ("l1.size_bytes", "1073741824"), or JSON for a composite
 * value: kva_config_set(c, "l2", "[{\"type\":\"mock\",\"capacity_bytes\":1048576}]").
 * Returns KVA_ECONFIG (and leaves c unchanged) when the value does not validate. */
int kva_config_set(kva_config *c, const char *path, const char *value);
/* Same as kva_config_set, with the reason written into err. */
int kva_config_set_err(kva_config *c, const char *path, const char *value, char *err,
                       size_t errlen);
void kva_config_free(kva_config *c);
/* Typed reads of the effective value at a dotted path ("runtime.workers",
 * "l2[0].type"). KVA_EINVAL if the path does not exist or has another type. */
int kva_config_get_i64(const kva_config *c, const char *path, int64_t *out);
int kva_config_get_f64(const kva_config *c, const char *path, double *out);
int kva_config_get_bool(const kva_config *c, const char *path, int *out);
int kva_config_get_str(const kva_config *c, const char *path, const char **out);
/* The effective config (defaults filled in) as msgpack; *buf is malloc'd. */
int kva_config_to_msgpack(const kva_config *c, void **buf, size_t *len);

/* ------------------------------------------------------------------------
 * Runtime and actors (the spawn API)
 * ------------------------------------------------------------------------ */
typedef struct kva_runtime kva_runtime;
/* Starts the scheduler (runtime.workers threads; 0 = deterministic mode, see
 * kva_runtime_run_until_idle) and, unless l1.size_bytes is 0, every storage
 * actor. cfg may be NULL for the embedded default; it is copied. */
int kva_runtime_start(const kva_config *cfg, kva_runtime **out);
/* Stops timers and fd watches, lets queued messages drain, stops every actor
 * (newest first: queued messages, then on_stop), joins the threads, frees
 * everything. Sends made while it runs (from on_stop, say) to actors already
 * stopped return KVA_ESHUTDOWN. Must not be called from an actor. */
void kva_runtime_shutdown(kva_runtime *rt);

typedef struct kva_actor kva_actor;
typedef struct kva_msg {
  uint32_t type;    /* user types start at KVA_MSG_USER */
  uint32_t len;     /* payload bytes */
  kva_actor *from;  /* sender, may be NULL */
  uint64_t tag;     /* correlation id chosen by the sender */
  const void *data; /* payload; valid only during receive */
} kva_msg;
#define KVA_MSG_USER 1024u
#define KVA_MSG_INLINE_MAX 240u /* payloads up to this size never touch malloc */
#define KVA_MSG_MAX (64u << 20) /* largest payload kva_send accepts */
/* Runtime message types (< 16, refused from kva_send). KVA_MSG_STOP is the
 * request queued by kva_actor_stop: receive never sees it; on_stop runs once
 * the messages queued before it have been delivered. */
enum { KVA_MSG_FD_READY = 1, KVA_MSG_TIMER = 2, KVA_MSG_STOP = 3 };

/* Payload of KVA_MSG_FD_READY (tag = the watch's tag). Watches are
 * edge-triggered: read the fd until EAGAIN in receive. */
typedef struct kva_fd_event {
  int fd;
  uint32_t events; /* EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP ... */
} kva_fd_event;
/* Payload of KVA_MSG_TIMER (tag = the timer's tag). */
typedef struct kva_timer_event {
  int timer_id;
  uint64_t expirations; /* ticks since the last message, >= 1 */
} kva_timer_event;

typedef struct kva_behavior {
  const char *name; /* shown by kvinspect */
  void (*receive)(kva_actor *self, void *state, const kva_msg *m);
  void (*on_stop)(kva_actor *self, void *state); /* optional */
} kva_behavior;
typedef struct kva_spawn_opts {
  uint32_t mailbox_capacity; /* 0 = runtime default; rounded up to a power of two */
  int pinned;                /* 1 = runs on a dedicated thread (GPU, blocking I/O) */
} kva_spawn_opts;

/* NULL on bad arguments, after shutdown began, or when out of memory. */
kva_actor *kva_spawn(kva_runtime *rt, const kva_behavior *b, void *state, const kva_spawn_opts *o);
/* Never fails for a full mailbox and never drops: a thread that is not an
 * actor waits for room (back-pressure); an actor's message goes to the
 * receiver's overflow queue and the sender is muted after its current
 * receive until the receiver has caught up. KVA_EINVAL for a bad argument
 * or len > KVA_MSG_MAX, KVA_ESHUTDOWN when `to` is stopped. */
int kva_send(kva_actor *to, uint32_t type, const void *data, uint32_t len, kva_actor *from,
             uint64_t tag);
/* Already-queued messages are still delivered, then on_stop; later sends
 * return KVA_ESHUTDOWN. The actor's memory lives until runtime shutdown. */
void kva_actor_stop(kva_actor *a);
int kva_actor_eventfd(const kva_actor *a);
const char *kva_actor_name(const kva_actor *a);
kva_runtime *kva_actor_runtime(const kva_actor *a);
/* The three calls below are made by an actor for itself, from its receive. */
int kva_watch_fd(kva_actor *self, int fd, uint32_t epoll_events, uint64_t tag);
int kva_unwatch_fd(kva_actor *self, int fd);
/* Returns a timer id >= 0; period 0 = once. In deterministic mode delays are
 * in virtual time (see kva_runtime_advance). */
int kva_timer(kva_actor *self, uint64_t delay_ns, uint64_t period_ns, uint64_t tag);
int kva_timer_cancel(kva_actor *self, int timer_id);

/* Deterministic mode (runtime.workers = 0): nothing runs until the caller
 * drives it. run_until_idle delivers messages, one at a time, choosing the
 * next ready actor with a PRNG seeded by runtime.seed, until no actor is
 * ready; it returns the number of messages delivered. advance moves virtual
 * time forward, firing due timers in order and running until idle after
 * each. Both return KVA_ENOTSUP in threaded mode. Not thread-safe. */
int64_t kva_runtime_run_until_idle(kva_runtime *rt);
int64_t kva_runtime_advance(kva_runtime *rt, uint64_t ns);
uint64_t kva_runtime_now_ns(const kva_runtime *rt); /* virtual time in deterministic mode */

/* Counters of the whole runtime, for benchmarks and kvinspect. */
typedef struct kva_runtime_counters {
  uint64_t delivered;      /* messages handed to receive */
  uint64_t overflowed;     /* messages that went to an overflow queue */
  uint64_t blocked_sends;  /* sends from non-actor threads that waited for room */
  uint64_t mutes;          /* actor turns that ended muted */
  uint64_t eventfd_writes; /* doorbells rung (pinned actors, ports) */
  uint64_t worker_wakes;   /* sleeping workers woken (futex) */
  uint64_t worker_sleeps;  /* times a worker went to sleep */
} kva_runtime_counters;
void kva_runtime_get_counters(kva_runtime *rt, kva_runtime_counters *out);
/* Name of the shared-memory stats segment ("/kvact.<pid>.<n>"), or NULL. */
const char *kva_runtime_stats_name(const kva_runtime *rt);

/* Ports let a non-actor thread talk to actors. */
typedef struct kva_port kva_port;
kva_port *kva_port_open(kva_runtime *rt, const char *name);
kva_actor *kva_port_actor(kva_port *p); /* use as `from` / reply-to */
int kva_port_fd(const kva_port *p);     /* eventfd, readable while messages wait */
/* Copies the payload into buf (at most buflen bytes; out->len is the full
 * length) and sets out->data = buf; KVA_ETIMEDOUT when nothing arrives in
 * time (timeout_ms < 0 waits forever). In deterministic mode it runs the
 * scheduler until a message arrives or nothing is left to run. */
int kva_port_recv(kva_port *p, kva_msg *out, void *buf, uint32_t buflen, int timeout_ms);
void kva_port_close(kva_port *p); /* not thread-safe with respect to the same port */

/* ------------------------------------------------------------------------
 * Plug-ins: read-only view of one adapter's config map
 * ------------------------------------------------------------------------ */
typedef struct kva_config_node kva_config_node;
int kva_config_node_str(const kva_config_node *n, const char *key, const char **out);
int kva_config_node_u64(const kva_config_node *n, const char *key, uint64_t *out);

/* ------------------------------------------------------------------------
 * Logging: library code prints only through this. Default: warnings and
 * errors to stderr. A NULL fn restores the default.
 * ------------------------------------------------------------------------ */
enum { KVA_LOG_ERROR = 0, KVA_LOG_WARN = 1, KVA_LOG_INFO = 2, KVA_LOG_DEBUG = 3 };
typedef void (*kva_log_fn)(int level, const char *msg, void *arg);
void kva_log_set(kva_log_fn fn, void *arg, int max_level);

#ifdef __cplusplus
}
#endif
#endif /* KVACT_H */
