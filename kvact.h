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

/* KVA_API marks what libkvact.so exports. The library is built with
 * -fvisibility=hidden and a version script that keeps kva_* only, so its
 * internal names (pool_create, config_get, ...) never meet a user's own. */
#if defined(__GNUC__) || defined(__clang__)
#define KVA_API __attribute__((visibility("default")))
#define KVA_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define KVA_API
#define KVA_PRINTF(fmt, first)
#endif

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
  KVA_EUNAVAIL = -9, /* part of an L2 tier (a node, a shard) is down; the rest served */
};
KVA_API const char *kva_strerror(int status);

/* ------------------------------------------------------------------------
 * Version. The macros are the header's version, kva_version() the loaded
 * library's ("0.2.0"): a program can compare the two at run time. Within a
 * major version the ABI only grows (docs/api.md, "Version and ABI").
 * ------------------------------------------------------------------------ */
#define KVA_VERSION_MAJOR 0
#define KVA_VERSION_MINOR 2
#define KVA_VERSION_PATCH 0
#define KVA_VERSION_STRING "0.2.0"
KVA_API const char *kva_version(void);

/* ------------------------------------------------------------------------
 * Config: msgpack map files, validated against one schema (see README,
 * "Configuration reference"). On a bad file the loaders return KVA_ECONFIG
 * and write "<path>: <problem>" into err. A config may be shared by
 * threads: set, the gets, to_msgpack and kva_runtime_start each see or make
 * one whole version (a lock inside); only kva_config_free must come after
 * every other use.
 * ------------------------------------------------------------------------ */
typedef struct kva_config kva_config;
KVA_API kva_config *kva_config_default(void); /* embedded default; NULL only on ENOMEM */
KVA_API int kva_config_from_file(const char *path, kva_config **out, char *err, size_t errlen);
KVA_API int kva_config_from_msgpack(const void *buf, size_t len, kva_config **out, char *err,
                                    size_t errlen);
/* scalar in text form ("l1.size_bytes", "1073741824"), or JSON for a composite
 * value: kva_config_set(c, "l2", "[{\"type\":\"mock\",\"capacity_bytes\":1048576}]").
 * Returns KVA_ECONFIG (and leaves c unchanged) when the value does not validate. */
KVA_API int kva_config_set(kva_config *c, const char *path, const char *value);
/* Same as kva_config_set, with the reason written into err. */
KVA_API int kva_config_set_err(kva_config *c, const char *path, const char *value, char *err,
                               size_t errlen);
KVA_API void kva_config_free(kva_config *c);
/* Typed reads of the effective value at a dotted path ("runtime.workers",
 * "l2[0].type"). KVA_EINVAL if the path does not exist or has another type. */
KVA_API int kva_config_get_i64(const kva_config *c, const char *path, int64_t *out);
KVA_API int kva_config_get_f64(const kva_config *c, const char *path, double *out);
KVA_API int kva_config_get_bool(const kva_config *c, const char *path, int *out);
/* *out stays valid until kva_config_free, whatever is set meanwhile. */
KVA_API int kva_config_get_str(const kva_config *c, const char *path, const char **out);
/* The effective config (defaults filled in) as msgpack; *buf is malloc'd. */
KVA_API int kva_config_to_msgpack(const kva_config *c, void **buf, size_t *len);

/* ------------------------------------------------------------------------
 * Runtime and actors (the spawn API)
 * ------------------------------------------------------------------------ */
typedef struct kva_runtime kva_runtime;
/* Starts the scheduler (runtime.workers threads; 0 = deterministic mode, see
 * kva_runtime_run_until_idle) and, unless l1.size_bytes is 0, every storage
 * actor. cfg may be NULL for the embedded default; it is copied.
 *
 * fork(): a runtime belongs to the process that started it. In a child
 * made by fork() (which gets none of its threads), every call on an
 * inherited runtime or its storage returns KVA_ESHUTDOWN at once (said once
 * in the log; kva_spawn and kva_port_open return NULL), and its
 * kva_runtime_shutdown returns without touching anything, so the parent's
 * connection to kvactd, its locks, its stats segment and files are
 * unaffected. The child starts a runtime of its own if it needs one.
 * Buffers the parent was given stay mapped in the child: they are the
 * parent's, and a child must not write them. */
KVA_API int kva_runtime_start(const kva_config *cfg, kva_runtime **out);
/* Stops timers and fd watches, lets queued messages drain, stops every actor
 * (newest first: queued messages, then on_stop), joins the threads, frees
 * everything. Sends made while it runs (from on_stop, say) to actors already
 * stopped return KVA_ESHUTDOWN. Must not be called from an actor. */
KVA_API void kva_runtime_shutdown(kva_runtime *rt);

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
KVA_API kva_actor *kva_spawn(kva_runtime *rt, const kva_behavior *b, void *state,
                             const kva_spawn_opts *o);
/* Never fails for a full mailbox and never drops: a thread that is not an
 * actor waits for room (back-pressure); an actor's message goes to the
 * receiver's overflow queue and the sender is muted after its current
 * receive until the receiver has caught up. KVA_EINVAL for a bad argument
 * or len > KVA_MSG_MAX, KVA_ESHUTDOWN when `to` is stopped. */
KVA_API int kva_send(kva_actor *to, uint32_t type, const void *data, uint32_t len, kva_actor *from,
                     uint64_t tag);
/* Already-queued messages are still delivered, then on_stop; later sends
 * return KVA_ESHUTDOWN. Once on_stop has run and no send to it is in
 * progress, the actor gives back everything it held (its memory, eventfd,
 * mailbox and stats slot): spawning and stopping actors forever stays
 * flat. So a kva_actor pointer is valid until its actor has stopped: a
 * send that races with the stop fails cleanly, but one made after the
 * caller knows on_stop ran (it ran it, or was told by it) uses freed
 * memory. Keep a reply-to address only while the actor is known to live.
 * Calling this twice is harmless while the actor has not stopped. */
KVA_API void kva_actor_stop(kva_actor *a);
/* A reference of the caller's: the actor's record (not its mailbox or
 * eventfd once stopped) outlives its stop until kva_actor_release, so that
 * a sender that may race with the stop gets KVA_ESHUTDOWN, never freed
 * memory. Call hold while the actor is known to live. Runtime shutdown
 * holds every actor until it returns. */
KVA_API void kva_actor_hold(kva_actor *a);
KVA_API void kva_actor_release(kva_actor *a);
KVA_API int kva_actor_eventfd(const kva_actor *a);
KVA_API const char *kva_actor_name(const kva_actor *a);
KVA_API kva_runtime *kva_actor_runtime(const kva_actor *a);
/* What kvinspect shows of an actor besides its mailbox: a label (cut to
 * 31 bytes) and up to 4 gauges named by gauge_names, separated by spaces
 * (cut to 63 bytes); gauge 0 counts up (kvinspect shows its rate too), the
 * others are levels. Called by the actor itself, from its receive (one
 * writer per slot): a gauge is one relaxed store. NULL self, or an actor
 * without a stats slot, is ignored; a gauge index past 3 too. */
KVA_API void kva_actor_label(kva_actor *self, const char *label, const char *gauge_names);
KVA_API void kva_actor_gauge(kva_actor *self, unsigned i, uint64_t v);
/* The three calls below are made by an actor for itself, from its receive. */
KVA_API int kva_watch_fd(kva_actor *self, int fd, uint32_t epoll_events, uint64_t tag);
KVA_API int kva_unwatch_fd(kva_actor *self, int fd);
/* Returns a timer id >= 0; period 0 = once. In deterministic mode delays are
 * in virtual time (see kva_runtime_advance). */
KVA_API int kva_timer(kva_actor *self, uint64_t delay_ns, uint64_t period_ns, uint64_t tag);
/* A tick the poller had already queued when the timer is cancelled still
 * arrives (its timer_id no longer names a timer of yours). */
KVA_API int kva_timer_cancel(kva_actor *self, int timer_id);

/* Deterministic mode (runtime.workers = 0): nothing runs until the caller
 * drives it. run_until_idle delivers messages, one at a time, choosing the
 * next ready actor with a PRNG seeded by runtime.seed, until no actor is
 * ready; it returns the number of messages delivered. advance moves virtual
 * time forward, firing due timers in order and running until idle after
 * each. Both return KVA_ENOTSUP in threaded mode. Not thread-safe. */
KVA_API int64_t kva_runtime_run_until_idle(kva_runtime *rt);
KVA_API int64_t kva_runtime_advance(kva_runtime *rt, uint64_t ns);
KVA_API uint64_t kva_runtime_now_ns(const kva_runtime *rt); /* virtual time in deterministic mode */

/* Counters of the whole runtime, for benchmarks and kvinspect. */
typedef struct kva_runtime_counters {
  uint64_t delivered;      /* messages handed to receive */
  uint64_t overflowed;     /* messages that went to an overflow queue */
  uint64_t blocked_sends;  /* sends from non-actor threads that waited for room */
  uint64_t mutes;          /* actor turns that ended muted */
  uint64_t eventfd_writes; /* doorbells rung (pinned actors, ports) */
  uint64_t worker_wakes;   /* sleeping workers woken (futex) */
  uint64_t worker_sleeps;  /* times a worker went to sleep */
  uint64_t actors;         /* actors and ports not yet freed (stopped ones go) */
} kva_runtime_counters;
KVA_API void kva_runtime_get_counters(kva_runtime *rt, kva_runtime_counters *out);
/* Name of the shared-memory stats segment ("/kvact.<pid>.<n>"), or NULL. */
KVA_API const char *kva_runtime_stats_name(const kva_runtime *rt);

/* Ports let a non-actor thread talk to actors. */
typedef struct kva_port kva_port;
KVA_API kva_port *kva_port_open(kva_runtime *rt, const char *name);
KVA_API kva_actor *kva_port_actor(kva_port *p); /* use as `from` / reply-to */
KVA_API int kva_port_fd(const kva_port *p);     /* eventfd, readable while messages wait */
/* Copies the payload into buf (at most buflen bytes; out->len is the full
 * length) and sets out->data = buf; KVA_ETIMEDOUT when nothing arrives in
 * time (timeout_ms < 0 waits forever). In deterministic mode it runs the
 * scheduler until a message arrives or nothing is left to run. */
KVA_API int kva_port_recv(kva_port *p, kva_msg *out, void *buf, uint32_t buflen, int timeout_ms);
/* Not thread-safe with respect to the same port. The port and its actor
 * are freed once no send to it is in progress (later sends must not use
 * kva_port_actor's pointer). */
KVA_API void kva_port_close(kva_port *p);

/* ------------------------------------------------------------------------
 * Storage manager: the engine-facing calls (seeds 004 and 002). Started by
 * kva_runtime_start unless l1.size_bytes is 0. Every call may be made from
 * many threads at once; each blocking call waits for one reply from the L1
 * manager actor on a port taken from a pool (no allocation, no thread-local
 * state). Embedded, the calling thread serves its own request when the
 * storage actors it needs are idle: it runs their turns (the L1 manager's,
 * the eviction, store and prefetch controllers', eviction policies
 * included; never an L2 adapter's, which run on the runtime's threads
 * only), one message at a time, until its reply is in. From the receive of
 * a pooled actor (not pinned, deterministic mode aside), a call of an
 * embedded storage that would wait for a storage actor (all but
 * kva_submit_prefetch, kva_query_prefetch, kva_wait_prefetch with timeout
 * 0 and pure helpers such as kva_chunk_keys), and kva_op_wait or
 * kva_op_wait_layer with a timeout other than 0, return KVA_EINVAL at
 * once: that worker may be the one the reply needs. kva_kv_unregister
 * must not be called there.
 * Calls racing with kva_runtime_shutdown return KVA_ESHUTDOWN; after
 * it returns, the storage pointer is gone like the runtime.
 * ------------------------------------------------------------------------ */
typedef struct kva_key {
  char model[64]; /* NUL-terminated, no '@', at most 63 bytes */
  uint32_t kv_rank;
  uint32_t group;   /* object group id */
  uint8_t hash_len; /* 1..32 */
  uint8_t hash[32];
} kva_key;
typedef enum {
  KVA_DT_U8,
  KVA_DT_F16,
  KVA_DT_BF16,
  KVA_DT_F32,
  KVA_DT_FP8_E4M3,
  KVA_DT_FP8_E5M2
} kva_dtype;
typedef struct kva_layout {
  uint32_t ntensors; /* 1..4 */
  struct {
    uint32_t ndim; /* 0..6; 0 = a scalar */
    uint64_t shape[6];
    kva_dtype dtype;
  } tensor[4];
} kva_layout;
/* Bytes of one object of this layout (tensors back to back, each starting
 * on a 64-byte boundary); 0 for an invalid layout or one whose size
 * overflows. */
KVA_API size_t kva_layout_bytes(const kva_layout *l);
typedef struct kva_buf {
  void *ptr;
  size_t len;
} kva_buf; /* one object's bytes */
typedef enum { KVA_WRITE_NEW, KVA_WRITE_UPDATE, KVA_WRITE_ALL } kva_write_mode;

typedef struct kva_storage kva_storage;
/* The runtime's storage manager, or NULL when it has none. */
KVA_API kva_storage *kva_storage_of(kva_runtime *rt);

/*
 * Batched calls and per-key status. Each call is one message to the L1
 * manager, so each batch is atomic with respect to every other call. The
 * per-key result goes to status[i] (KVA_OK or a positive KVA_KEY_* /
 * KVA_OUT_OF_MEMORY); the return value is the number of keys that
 * succeeded, or a negative error when the call itself is refused (then
 * nothing changed and status is untouched): KVA_EINVAL for a NULL pointer,
 * n = 0, an invalid key (empty model, a model with '@' or without its NUL
 * in 64 bytes, hash_len 0 or > 32) or layout; KVA_ESHUTDOWN while the
 * runtime shuts down.
 *
 * Repeated keys: every call that takes a key array (these, the prefetch
 * and read calls, kva_touch, kva_lookup, kva_unpin, kva_kv_store,
 * kva_kv_load) refuses a key named twice: KVA_EINVAL, nothing changed (no
 * lock taken or released, status and buffers untouched, no prefetch
 * handle), and one warning through kva_log names the call, both indexes
 * and the key. The same through kvactd (docs/invariants.md I-L1-11 says
 * why: "each occurrence counts" means nothing for a write or a read, and
 * "the first counts" cannot be told apart in calls that return a count).
 */
/* Write path. New objects are write-locked; bufs[i] receives the memory to
 * fill (NULL/0 for a key that failed). NEW rejects existing keys, UPDATE
 * rejects missing keys, ALL accepts both (rejections are
 * KVA_KEY_NOT_WRITABLE, as in LMCache); an existing object is reused (same
 * memory, write-locked again) only when it is unlocked, not temporary and
 * of the same layout, else KVA_KEY_NOT_WRITABLE. The new keys of one call are allocated all or
 * nothing, after demand eviction of unlocked objects: if they do not fit,
 * each gets KVA_OUT_OF_MEMORY and nothing resident is lost. */
KVA_API int kva_reserve_write(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                              kva_write_mode mode, kva_buf *bufs, int *status);
/* write-locked -> ready (KVA_KEY_WRONG_STATE otherwise; KVA_KEY_NOT_EXIST). */
KVA_API int kva_finish_write(kva_storage *s, const kva_key *k, size_t n, int *status);
/* A write reservation given back unwritten (LMCache's abort_write): each
 * write-locked object of k is removed at once, never readable, never
 * stored to L2, its memory free, and the key can be reserved as new again
 * (an object that UPDATE or ALL had reserved again goes too: its bytes may
 * be half written). status[i]: KVA_OK, KVA_KEY_NOT_EXIST, or
 * KVA_KEY_WRONG_STATE when not write-locked (in a client of kvactd: not
 * write-locked by this client). Returns how many were aborted. */
KVA_API int kva_abort_write(kva_storage *s, const kva_key *k, size_t n, int *status);
/* Removes objects; a locked one gets KVA_KEY_LOCKED unless force, a pinned
 * one (kva_lookup with pin) KVA_KEY_LOCKED even with force: a pin is a
 * promise to a lookup that its load will find the object, and it goes with
 * kva_unpin or with the client connection that took it. A forced
 * delete of a locked object takes it out of L1 at once (lookups, touches
 * and prefetches miss it) but keeps its memory until its holders let go: a
 * reader still reads the bytes it locked and releases them with
 * kva_finish_read_prefetched; a writer's kva_finish_write answers
 * KVA_KEY_NOT_EXIST and frees the buffer (never readable). Memory is never
 * reused under a holder, and a call by key never reaches an object its
 * caller did not lock: until the engine's holders of the deleted object
 * have let go, the key is not writable (KVA_KEY_NOT_WRITABLE) and a
 * prefetch of it misses; kvact's own store tasks do not hold it up. */
KVA_API int kva_delete(kva_storage *s, const kva_key *k, size_t n, int force, int *status);

/* Prefetch/read path. submit read-locks the contiguous L1 prefix of k[]
 * (1 + extra_readers locks each, extra_readers <= 127), the rest is looked
 * up in L2 when L2 tiers exist. The handle is polled, waited on, or its
 * eventfd watched; the result (the contiguous prefix hit count) is read
 * exactly once, which frees the handle; a handle used after that, or any
 * value that is not a live handle, gets KVA_EINVAL. l may be NULL for an L1
 * lookup (loads from L2 need it). At most 16384 handles and blocking calls
 * per storage at once (KVA_EAGAIN beyond). */
typedef struct kva_prefetch kva_prefetch;
KVA_API int kva_submit_prefetch(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                                uint32_t extra_readers, kva_prefetch **h);
/* kva_submit_prefetch with options (API.md's third wave; o NULL or all
 * zero = kva_submit_prefetch's defaults).
 *  warm = 1 (LMCache's NO_LOCK prefetch): the keys are brought into L1 and
 *    the result counts them as usual, but no read lock is left for the
 *    caller: the prefix's locks are given back as the result is read
 *    (query or wait), so there is nothing to read or release afterwards.
 *    What it loaded stays in L1 as long as L1 keeps it (with
 *    prefetch_writeback false, loaded objects are temporary: they go with
 *    the locks).
 *  sparse = 1 (load and lock every key found, found[i] saying which): not
 *    built yet, KVA_ENOTSUP.
 *  flags: KVA_PREFETCH_AS_PLANNED = the caller judged these keys worth
 *    loading already (kva_plan_load), so the load_or_recompute policy does
 *    not judge them again (a request prefetched in several parts would have
 *    each part judged as if it began the request).
 * kva_submit_prefetch_with is the same call (its earlier name). */
#define KVA_PREFETCH_AS_PLANNED 1u
typedef struct kva_prefetch_opts {
  uint32_t extra_readers; /* as kva_submit_prefetch's */
  int warm;               /* 1: bring into L1, lock nothing for the caller */
  int sparse;             /* 1: every key found, not only the prefix (not built yet) */
  uint8_t *found;         /* sparse: the caller's n flags, filled when it completes */
  uint32_t flags;         /* KVA_PREFETCH_AS_PLANNED */
} kva_prefetch_opts;
KVA_API int kva_submit_prefetch_opts(kva_storage *s, const kva_key *k, size_t n,
                                     const kva_layout *l, const kva_prefetch_opts *o,
                                     kva_prefetch **h);
KVA_API int kva_submit_prefetch_with(kva_storage *s, const kva_key *k, size_t n,
                                     const kva_layout *l, const kva_prefetch_opts *o,
                                     kva_prefetch **h);
/* Not done yet: query answers KVA_EAGAIN; wait answers KVA_ETIMEDOUT once
 * timeout_ms (-1: forever; 0: at once, as a query would) has passed. Both
 * keep h. Done: its result (KVA_OK and *hits, or the error) frees h. */
KVA_API int kva_query_prefetch(kva_storage *s, kva_prefetch *h, size_t *hits);
KVA_API int kva_wait_prefetch(kva_storage *s, kva_prefetch *h, int timeout_ms, size_t *hits);
KVA_API int kva_prefetch_eventfd(const kva_prefetch *h); /* readable when done */
/* All keys present and read-locked -> bufs, KVA_OK. Otherwise releases
 * one read lock of each of those keys that holds one and returns the
 * first key's problem (KVA_KEY_NOT_EXIST / KVA_KEY_NOT_READABLE). In a
 * client of kvactd, locks are this process's own: a key it holds no read
 * lock of is KVA_KEY_NOT_READABLE (when the daemon has it), and only its
 * own locks are released. */
KVA_API int kva_read_prefetched(kva_storage *s, const kva_key *k, size_t n, kva_buf *bufs);
/* kva_read_prefetched, and the layout each object was written with (as
 * LMCache's read results carry their shape and dtype): on KVA_OK
 * layouts[i] is keys[i]'s, so kva_layout_bytes(&layouts[i]) ==
 * bufs[i].len; on a key's problem bufs and layouts are zeroed and the
 * locks released as kva_read_prefetched's; a refused call (negative)
 * touches neither. layouts NULL: KVA_EINVAL. The same through kvactd. */
KVA_API int kva_read_prefetched_layouts(kva_storage *s, const kva_key *k, size_t n, kva_buf *bufs,
                                        kva_layout *layouts);
/* Releases 1 + extra_readers read locks of each key; a key holding fewer
 * (a client: fewer of its own) releases none. A temporary object is freed
 * at its last release. Returns the number of keys released. */
KVA_API int kva_finish_read_prefetched(kva_storage *s, const kva_key *k, size_t n,
                                       uint32_t extra_readers);
/* Marks keys as used (eviction order: suffix chunks before their prefix). */
KVA_API int kva_touch(kva_storage *s, const kva_key *k, size_t n);

/* Maintenance and introspection */
KVA_API int kva_clear(kva_storage *s, int force); /* L1 only; returns objects removed (force: as
                                              kva_delete's force; pinned objects stay) */
/* 0 = no lock held (no L1 read, write or pin lock, no L2 lookup lock) and
 * the pool accounting is consistent; otherwise KVA_EIO and a report naming
 * the first locked objects, the tier holding locks, or the problem. The
 * report tells the read locks of kvact's own store-behind (the L1->L2
 * stores kva_finish_write queues, which read-lock each object until its
 * tier answers) from the callers'; kva_memcheck_with can wait for the
 * former, or leave them out. */
KVA_API int kva_memcheck(kva_storage *s, char *report, size_t len);
typedef struct kva_memcheck_opts {
  /* First wait, as kva_flush, up to this long (< 0: as long as it takes)
   * for the L1->L2 stores queued before the call; 0: do not wait. A wait
   * that times out is not an error: the check then sees what is left. */
  int wait_stores_ms;
  /* 1: read locks of kvact's store-behind are counted and reported but do
   * not fail the check (a caller checking its own locks while other
   * writers keep the tiers busy). */
  int callers_only;
} kva_memcheck_opts;
/* What the check found, in objects (an object can count in two fields):
 * locks and pins held by callers (engines, clients of kvactd, their
 * prefetches in flight), read locks of the store-behind, and lookup locks
 * held in the L2 tiers (by prefetches in flight), over all tiers. */
typedef struct kva_memcheck_report {
  uint64_t caller_write_locked, caller_read_locked, caller_pinned;
  uint64_t store_read_locked;
  uint64_t l2_keys_locked;
} kva_memcheck_report;
/* kva_memcheck with options (o NULL: none) and the counts (out may be
 * NULL). Returns as kva_memcheck does; KVA_EINVAL for a NULL storage or a
 * NULL report with len > 0. In a client of kvactd it checks the daemon's
 * storage as a whole, as kva_memcheck does. */
KVA_API int kva_memcheck_with(kva_storage *s, const kva_memcheck_opts *o, kva_memcheck_report *out,
                              char *report, size_t len);
typedef struct kva_storage_stats {
  uint64_t l1_capacity_bytes, l1_used_bytes, l1_objects;
  uint64_t l1_write_locked, l1_read_locked, l1_temporary;
  uint64_t reserved, finished, hits, misses, evicted, evicted_on_demand, out_of_memory;
  /* L2 (since start): store tasks run (one per batch, layout and tier),
   * keys stored, failed tasks, keys not stored (gone from L1 first,
   * frozen, shutdown), prefetches handed to L2, keys loaded, keys whose
   * load failed */
  uint64_t l2_store_tasks, l2_stored_keys, l2_store_failures, l2_store_skipped;
  uint64_t l2_prefetches, l2_loaded_keys, l2_load_failures;
  int l1_pinned;    /* page-locked for DMA */
  int l1_numa_node; /* -1 if not bound */
  /* keys found in L2 but left to the engine to recompute, as slower to
   * load than to compute (prefetch_policy load_or_recompute) */
  uint64_t l2_skipped_slow_keys;
} kva_storage_stats;
KVA_API int kva_storage_get_stats(kva_storage *s, kva_storage_stats *out);

/* v1 lookups and modes (docs/invariants.md I-FA-2). kva_lookup walks the
 * tiers in order (L1, then l2[] in config order) and reports, per tier, how
 * many keys of the contiguous prefix it holds: L1 gets k[0..), each L2 tier
 * the keys after the hits of the tiers before it; total is their sum.
 * Bypassed tiers are skipped (hits 0); while frozen only L1 is asked. pin
 * keeps the L1 hits from eviction (they stay readable by others) until
 * kva_unpin. */
typedef struct kva_tier_hits {
  size_t total;
  uint32_t ntiers;
  struct {
    char name[32];
    size_t hits;
  } tier[8]; /* tier 0 is "L1", then l2[] in order (the first 7; an
                eighth tier's hits count in total only) */
} kva_tier_hits;
KVA_API int kva_lookup(kva_storage *s, const kva_key *k, size_t n, int pin, kva_tier_hits *out);
/* Load or recompute (docs/load-plan.md): kva_lookup, then how much of the
 * found prefix is worth loading: chunk objects of layout l whose bytes,
 * at each tier's measured rate behind what is queued on it, arrive before
 * the engine could compute them (the prefill rate of k[0].model:
 * kva_report_prefill, else config load_plan.*). worth counts from k[0],
 * L1 hits included (they are always worth it); skipped[i] counts the keys
 * of found.tier[i] past worth. The times are predictions for the found
 * prefix: loading [0, worth), computing it all, and the split (compute
 * [0, split_at) while loading [split_at, found.total) from the back, for
 * an engine that controls its compute order). A tier whose lookup could
 * not pay for itself (too slow for any chunk, or a round trip longer
 * than all it could save) is not asked: its bit in not_asked is set and
 * it counts hits 0. flags: KVA_PLAN_PIN pins the L1 hits as kva_lookup's
 * pin; KVA_PLAN_SPLIT says the caller can split (a tier slower than the
 * compute is still worth asking then). Not in a client of kvactd
 * (KVA_ENOTSUP): its prefetch policy decides there. */
#define KVA_PLAN_PIN 1u
#define KVA_PLAN_SPLIT 2u
typedef struct kva_load_plan {
  kva_tier_hits found;
  size_t worth;
  size_t skipped[8];
  double load_s, recompute_s, split_s;
  size_t split_at;
  uint32_t not_asked; /* bit i: found.tier[i] was not asked */
} kva_load_plan;
KVA_API int kva_plan_load(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                          unsigned flags, kva_load_plan *out);
/* An engine of model computed a prefill of tokens in ns (chunk_tokens per
 * chunk object; 0 = as configured): refines the rate the load plan
 * assumes for that model (an average over reports). KVA_EINVAL for a bad
 * model name or a zero count or time. */
KVA_API int kva_report_prefill(kva_storage *s, const char *model, uint32_t chunk_tokens,
                               uint64_t tokens, uint64_t ns);
/* Drops one pin of each key; returns the number of keys unpinned. */
KVA_API int kva_unpin(kva_storage *s, const kva_key *k, size_t n);
/* Freeze: nothing is stored to L2 and prefetches do not consult L2. */
KVA_API int kva_set_freeze(kva_storage *s, int on);
/* Bypass: the named L2 tier is skipped for store, lookup and load until
 * turned off. A tier whose operations fail l2_bypass_failures times in a
 * row is bypassed automatically and probed every l2_probe_interval_ms; the
 * first probe it answers clears that automatic bypass (a manual one stays
 * until turned off). KVA_EINVAL for an unknown tier or "L1". */
KVA_API int kva_set_tier_bypass(kva_storage *s, const char *tier, int on);
/* 1 = bypassed (manually or automatically), 0 = not, or KVA_EINVAL. */
KVA_API int kva_tier_bypassed(kva_storage *s, const char *tier);
/* Waits until every L1->L2 store queued before the call is done (stored or
 * failed); KVA_ETIMEDOUT after timeout_ms (< 0 waits forever). */
KVA_API int kva_flush(kva_storage *s, int timeout_ms);
/* Whether the named L2 tier holds the key: 1, 0, or a negative error
 * (KVA_EINVAL for an unknown tier, KVA_EIO when the tier fails). */
KVA_API int kva_l2_contains(kva_storage *s, const char *tier, const kva_key *k);

/* Prefix-chained chunk keys: key i depends on tokens [0, (i+1)*chunk_tokens)
 * and on salt (may be NULL), through xxh3-128. A trailing partial chunk
 * gets a key only when include_partial. Returns the number of keys written
 * (at most max); 0 for bad arguments. */
KVA_API size_t kva_chunk_keys(const char *model, uint32_t kv_rank, const char *salt,
                              const int32_t *tokens, size_t ntokens, uint32_t chunk_tokens,
                              int include_partial, kva_key *out, size_t max);

/* ------------------------------------------------------------------------
 * Plug-ins: read-only view of one adapter's config map
 * ------------------------------------------------------------------------ */
/* A factory's node is effective: a built-in type's entry holds every key of
 * its type, at the schema default when the config did not set it, and
 * every value passed the schema's checks; a plug-in type's entry holds its
 * keys as given (plus type and name). Each read is KVA_EINVAL when the key
 * is missing or holds another type; strings live as long as the node. */
typedef struct kva_config_node kva_config_node;
KVA_API int kva_config_node_str(const kva_config_node *n, const char *key, const char **out);
KVA_API int kva_config_node_u64(const kva_config_node *n, const char *key, uint64_t *out);
KVA_API int kva_config_node_f64(const kva_config_node *n, const char *key, double *out);
KVA_API int kva_config_node_bool(const kva_config_node *n, const char *key, int *out);
/* Element i of an array of strings (redis's "addrs"): KVA_EINVAL also when
 * i is past its end or element i is not a string, so a loop reads until
 * the first KVA_EINVAL. */
KVA_API int kva_config_node_str_at(const kva_config_node *n, const char *key, size_t i,
                                   const char **out);
/* The effective node of a built-in type's l2 entry that set nothing but
 * its type: every key at its schema default, name = type ("mock"). What a
 * built-in factory reads when spawned with cfg NULL (a test spawning an
 * adapter by hand), so that defaults live in the schema alone. NULL for a
 * type the schema does not describe (a plug-in's) or out of memory. Made
 * once per type; lives until the process exits. */
KVA_API const kva_config_node *kva_config_node_default(const char *type);

/* ------------------------------------------------------------------------
 * L2 adapters: the message protocol (docs/invariants.md I-L2-1 to I-L2-6)
 *
 * An L2 adapter is an ordinary actor. The store and prefetch controllers
 * (and the facade, for kva_lookup and kva_l2_contains) send it requests;
 * a request's payload is one pointer to a kva_l2_req that the sender owns
 * and keeps unchanged until the reply:
 *
 *   kva_send(adapter, KVA_L2_LOAD, &req_ptr, sizeof req_ptr, self, tag);
 *
 * The adapter answers every STORE, LOOKUP_AND_LOCK, LOAD and STATS exactly
 * once with KVA_L2_DONE to msg->from, the same tag, and the same pointer as
 * payload, and does not touch the request after that. Replies may come in
 * any order; the sender matches them by tag (task ids are per sender and
 * per adapter, never global). Results:
 *
 *  STORE            keys[i] <- bufs[i] (the bytes of an L1 object of
 *                   `layout`, read-locked in L1 until the reply: read them,
 *                   never write them). All or nothing: result KVA_OK = every
 *                   key stored, a negative error = the task failed (what it
 *                   stored may stay, but must not be served as another
 *                   key's bytes). Storing a key that exists replaces it,
 *                   unless it is locked (then the task may fail). The one
 *                   exception is KVA_EUNAVAIL, below: then, when the sender
 *                   gave `bits`, bit i = keys[i] was stored.
 *  LOOKUP_AND_LOCK  bit i of `bits` = keys[i] is present and now locked:
 *                   the adapter keeps it (no eviction, no replacement) until
 *                   as many UNLOCKs as LOCKs arrived. result < 0 = the tier
 *                   failed (bits still tell what was locked).
 *  LOAD             bufs[i] <- keys[i] for keys the sender holds locks on;
 *                   bit i = bufs[i] now holds exactly the bytes stored under
 *                   keys[i] with this layout (a size or layout mismatch, a
 *                   checksum error or an I/O error leaves the bit clear:
 *                   never wrong bytes). bufs are L1 memory, write-locked by
 *                   the sender until the reply.
 *  UNLOCK           payload = kva_key[n] copied into the message (len =
 *                   n * sizeof(kva_key)), no reply: one lock of each key is
 *                   released. Fire and forget: the adapter must make it
 *                   succeed eventually (retrying inside); the sender never
 *                   retries. Keys not locked are ignored.
 *  STATS            *stats is filled; result KVA_OK.
 *  NODES            up to nodes_cap servers of the tier into nodes,
 *                   nodes_n = how many it has (may exceed the cap),
 *                   map_age_s = seconds since its map of keys to servers
 *                   was read (-1: none); result KVA_OK. Optional: a tier
 *                   of one server answers KVA_ENOTSUP (mock, disk); a
 *                   sender waits 1 s for an adapter that does not know it.
 *
 * KVA_EUNAVAIL: a tier made of several servers (a Redis Cluster's
 * masters, the shards of a plug-in) answers it when some keys' server is
 * down and every other key was served: for LOOKUP_AND_LOCK and LOAD the
 * bits tell what was found or loaded, the unserved keys' bits are clear;
 * for STORE the bits (when given) tell what was stored. It is not a failure
 * of the tier: its health (l2_bypass_failures) counts it as neither a
 * failure nor a success, so one dead server never bypasses the others.
 * An adapter with a single server answers KVA_EIO as before.
 *
 * `bits` has (n + 7) / 8 bytes, zeroed by the sender; use kva_bit_*.
 * Adapters stop after the controllers (newest actors stop first), so every
 * UNLOCK a controller sends while shutting down reaches its adapter.
 * ------------------------------------------------------------------------ */
enum {
  KVA_L2_STORE = 256,
  KVA_L2_LOOKUP_AND_LOCK = 257,
  KVA_L2_LOAD = 258,
  KVA_L2_UNLOCK = 259,
  KVA_L2_STATS = 260,
  KVA_L2_NODES = 261, /* optional: the servers of a tier of several */
  KVA_L2_DONE = 271,  /* the reply to every request but UNLOCK */
  /* An adapter's messages to itself (a start, a tick of its own) take ids
   * from KVA_L2_ADAPTER_MSG up to below KVA_L2_ADAPTER_MSG_END, never one
   * of the protocol's. */
  KVA_L2_ADAPTER_MSG = 272,
  KVA_L2_ADAPTER_MSG_END = 320,
};
typedef struct kva_l2_stats {
  uint64_t objects, bytes, capacity_bytes; /* held now; capacity 0 = unbounded */
  uint64_t keys_locked;                    /* lookup locks held now (must be 0 when idle) */
  /* since start: stores and store_failures count tasks; loads, load_failures
   * and lookups count keys; evictions count objects dropped for room (not
   * replaced ones) */
  uint64_t stores, store_failures, loads, load_failures, lookups, evictions;
} kva_l2_stats;
/* What moved through one L2 tier since start (keys and bytes stored by the
 * store controller, loaded by prefetches), whether it is bypassed, and the
 * adapter's own answer to KVA_L2_STATS. KVA_EINVAL for an unknown tier;
 * KVA_EIO when the adapter cannot answer (adapter is then zero, the rest
 * filled). */
typedef struct kva_l2_tier_stats {
  uint64_t stored_keys, stored_bytes, loaded_keys, loaded_bytes;
  int bypassed;         /* as kva_tier_bypassed */
  kva_l2_stats adapter; /* objects and bytes held now, locks, its own counters */
  /* The load plan's view of the tier (docs/load-plan.md): keys found here
   * and left to recompute, the bytes sent to it and not yet answered, its
   * throughput while busy (bytes/s: of loads once one was measured, else
   * of loads and stores; 0 = not measured yet), its lookup round trip (s),
   * and the prefetches that did not ask it, as its lookup could not pay */
  uint64_t skipped_slow_keys, queued_bytes;
  double bytes_per_s, latency_s;
  uint64_t lookups_skipped;
} kva_l2_tier_stats;
KVA_API int kva_l2_get_tier_stats(kva_storage *s, const char *tier, kva_l2_tier_stats *out);
/* What became of every key written toward one L2 tier since start: each
 * write of a key that the store policy sends to the tier ends in exactly
 * one of these, so once kva_flush has returned (and no write runs)
 *
 *   written = stored + coalesced + bypassed + frozen + gone + unavailable
 *             + failed + dropped
 *
 * stored: reached the tier. coalesced: joined a store of the same key
 * already queued, which carries the newest version. bypassed: not sent,
 * the tier was bypassed (kva_set_tier_bypass, or automatically after
 * failures). frozen: not sent, kva_set_freeze. gone: no longer in L1 as
 * written when its store began (evicted, deleted, or written again with
 * another layout, whose own store follows). unavailable: the server of
 * its key was down (KVA_EUNAVAIL: a Redis Cluster master without a
 * replica to take over). failed: the store failed. dropped: not stored
 * for want of memory, or left queued at shutdown.
 * absent_now is how many keys are marked absent from the tier now: their
 * newest version did not reach it, so its older copy, if any, is not
 * served until a store of them succeeds (absent_overflowed counts the
 * marks past the bound, l2_absent_keys; see the README's redis section).
 * KVA_EINVAL for an unknown tier or NULL out. In a client of kvactd, the
 * daemon's counts (KVA_ENOTSUP from a daemon of another protocol). */
typedef struct kva_l2_tier_keys {
  uint64_t written, stored, coalesced, bypassed, frozen, gone, unavailable, failed, dropped;
  uint64_t absent_now, absent_overflowed;
} kva_l2_tier_keys;
KVA_API int kva_l2_get_tier_keys(kva_storage *s, const char *tier, kva_l2_tier_keys *out);
/* One server of an L2 tier (KVA_L2_NODES, kva_l2_get_tier_nodes). */
enum { KVA_L2_NODE_OK = 0, KVA_L2_NODE_FAILED = 1, KVA_L2_NODE_BYPASSED = 2 };
typedef struct kva_l2_node_stats {
  char addr[272];       /* "host:port" */
  int state;            /* KVA_L2_NODE_*: FAILED = failing, still tried; BYPASSED = its
                           keys fail at once (KVA_EUNAVAIL) until it answers a probe */
  uint32_t slots;       /* hash slots the tier's map gives it now (cluster; else 0) */
  double failed_s;      /* seconds since it left OK; 0 when OK */
  uint64_t outages;     /* times it left OK, since start */
  uint64_t failures;    /* failures in a row now (toward its bypass) */
  uint64_t failed_cmds; /* commands failed because it was down, since start */
} kva_l2_node_stats;
/* The servers of one L2 tier (a Redis Cluster's masters and every node it
 * met; a single redis server): up to cap of them into out, *n = how many
 * there are, *map_age_s (may be NULL) = seconds since the tier last read
 * its slot map (-1: it has none). KVA_ENOTSUP for a tier of no servers
 * (mock, disk), an adapter that does not answer KVA_L2_NODES within 1 s,
 * or a kvactd of another protocol (a client gets the daemon's tier, at most
 * 1024 entries of it; *n counts them all);
 * KVA_EINVAL for an unknown tier or n NULL (out may be NULL when cap is 0). */
KVA_API int kva_l2_get_tier_nodes(kva_storage *s, const char *tier, kva_l2_node_stats *out,
                                  size_t cap, size_t *n, double *map_age_s);
typedef struct kva_l2_req {
  const kva_key *keys;
  size_t n;
  const kva_layout *layout; /* STORE, LOAD: the layout of every object */
  kva_buf *bufs;            /* STORE: bytes to store; LOAD: L1 buffers to fill */
  uint8_t *bits;            /* LOOKUP_AND_LOCK, LOAD: out, per key */
  kva_l2_stats *stats;      /* STATS: out */
  int result;               /* out: KVA_OK or a negative error */
  /* LOOKUP_AND_LOCK: the key before keys[0] in its chain (the last one
   * L1 held), or NULL; a hint for tiers that evict chains from their end
   * (keys[i] continues keys[i - 1] in every request). */
  const kva_key *prev;
  /* NODES: out (see above). Appended: an adapter built against an older
   * kvact.h never reads them. */
  kva_l2_node_stats *nodes;
  size_t nodes_cap, nodes_n;
  double map_age_s;
} kva_l2_req;
static inline int kva_bit_get(const uint8_t *bits, size_t i) {
  return (bits[i >> 3] >> (i & 7)) & 1;
}
static inline void kva_bit_set(uint8_t *bits, size_t i) {
  bits[i >> 3] = (uint8_t)(bits[i >> 3] | (1u << (i & 7)));
}

/* Adapter types by name. A factory spawns the adapter actor for one l2[]
 * entry (cfg: its map, defaults filled in); NULL with err set on failure.
 * The built-in types are registered first and cannot be replaced; `kvconf
 * schema` lists every registered one. KVA_EINVAL for a bad name, a NULL
 * factory or a name already registered; KVA_ENOMEM when the registry is
 * full.
 * Register before kva_runtime_start. */
typedef kva_actor *(*kva_l2_factory)(kva_runtime *rt, const kva_config_node *cfg, char *err,
                                     size_t errlen);
KVA_API int kva_l2_register(const char *type, kva_l2_factory f);

/* The adapter kit: what an adapter needs of kvact besides the actor API.
 * The built-in adapters (l2/adapters/) are built against kvact.h alone,
 * so a plug-in has exactly what they have: these calls, the config node
 * reads above (kva_config_node_*) and kva_log (Logging, below). */
/* The request pointer of a STORE, LOOKUP_AND_LOCK, LOAD or STATS message,
 * or NULL when the payload is not one pointer (len != sizeof(kva_l2_req *))
 * or the pointer is NULL. */
KVA_API kva_l2_req *kva_l2_req_of(const kva_msg *m);
/* Why a request of that type cannot be served, or NULL when it is well
 * formed: r NULL, a type that is no request, no keys, more than 1 << 24
 * keys, no bits (LOOKUP_AND_LOCK, LOAD), no bufs or no valid layout
 * (STORE, LOAD: kva_layout_bytes 0), an invalid key (kva_key_valid), an
 * empty STORE buffer, a NULL LOAD buffer of nonzero length; for STATS, no
 * stats. The built-in adapters answer such a request at once with result
 * KVA_EINVAL and log the reason as a warning. */
KVA_API const char *kva_l2_req_problem(uint32_t type, const kva_l2_req *r);
/* 1 for a key the store accepts (see the batched calls: model NUL-ended
 * within 64 bytes, not empty, no '@'; hash_len 1..32), else 0. */
KVA_API int kva_key_valid(const kva_key *k);
/* 1 when a and b are the same key: the same model (up to its NUL),
 * kv_rank, group, hash_len and first hash_len bytes of hash; the bytes
 * past those are ignored, so keys need not be zeroed. Else 0. */
KVA_API int kva_key_equal(const kva_key *a, const kva_key *b);
/* A 64-bit hash of what kva_key_equal compares: equal keys hash equal.
 * Stable across processes and builds (the disk tier keeps it on disk). */
KVA_API uint64_t kva_key_hash(const kva_key *k);
/* "<model>@<kv_rank, hex>@<group>@<hash, hex>" into buf, always
 * NUL-terminated (cut to cap - 1 bytes); KVA_KEY_TEXT_MAX bytes hold any
 * key. The redis tier names its values with it. */
#define KVA_KEY_TEXT_MAX 160u
KVA_API void kva_key_format(const kva_key *k, char *buf, size_t cap);
/* A 64-bit hash of a layout's significant fields (ntensors; each tensor's
 * dtype, ndim and first ndim dims): equal for layouts that are the same,
 * stable across processes and builds. The disk and redis tiers keep it in
 * each object's header to refuse a LOAD with another layout. */
KVA_API uint64_t kva_layout_fingerprint(const kva_layout *l);
/* 1 when rt runs in deterministic mode (runtime.workers = 0), else 0 (NULL
 * too). There every actor runs on the thread that drives the runtime and
 * fds are polled only when no actor is ready, so an adapter with I/O of
 * its own waits for that I/O inside the message (as disk and redis do):
 * its replies then depend on the order of messages alone, as replays
 * need. */
KVA_API int kva_runtime_deterministic(const kva_runtime *rt);
/* 1 on the runtime's own threads (workers, pinned actors): they run with
 * SIGPIPE blocked for good, so a write to a socket whose peer is gone
 * fails with EPIPE and a raised SIGPIPE goes with the thread. 0 on any
 * other thread (a factory runs on the one calling kva_runtime_start,
 * deterministic mode on the one driving it): an adapter writing to a
 * socket there blocks SIGPIPE around the write itself. */
KVA_API int kva_thread_sigpipe_blocked(void);

/* Store policies (config store_policy): which tiers store which keys, and
 * which keys leave L1 once stored. Built in: "default" (every key to every
 * tier, nothing deleted) and "skip_l1" (every key to every tier, deleted
 * from L1 once a tier stored it). targets[i] is a bit mask of tier indexes
 * (bit t = l2[t]), zeroed by the caller; del[i] = 1 deletes keys[i]. */
typedef struct kva_store_policy {
  const char *name;
  void (*select_targets)(void *arg, const kva_key *keys, size_t n, uint32_t ntiers,
                         uint8_t *targets);
  void (*select_l1_deletions)(void *arg, uint32_t tier, const kva_key *keys, size_t n,
                              uint8_t *del);
  void *arg;
} kva_store_policy;
/* Prefetch policies (config prefetch_policy): given found[t] (tier t's
 * lookup bitmap over the n keys), choose at most one tier per key:
 * plan[i] = tier index, or -1 = not loaded. Built in: "default" (the
 * lowest-index tier that has the key). */
typedef struct kva_prefetch_policy {
  const char *name;
  void (*select_load_plan)(void *arg, size_t n, uint32_t ntiers, const uint8_t *const *found,
                           int8_t *plan);
  void *arg;
} kva_prefetch_policy;
/* Eviction policies (config eviction.policy) order L1's objects for
 * eviction. The policy sees no lock state (L1 skips locked objects itself)
 * and is fed by the eviction controller actor, one call at a time:
 * on_created (a new object, `bytes` in the pool), on_touched (an access),
 * on_removed. Objects are named by 64-bit ids (low 32 bits a reused slot,
 * high 32 bits a generation). candidates writes up to max ids (and their
 * bytes) in eviction order starting after `after` (0, or an id no longer
 * tracked = from the start), without side effects. The built-in
 * policies: `kvconf schema` (eviction.policy). */
typedef struct kva_policy_state kva_policy_state; /* the policy's own */
typedef struct kva_eviction_policy {
  const char *name;
  kva_policy_state *(*create)(void);
  void (*destroy)(kva_policy_state *p);
  void (*on_created)(kva_policy_state *p, uint64_t id, uint64_t bytes);
  void (*on_touched)(kva_policy_state *p, uint64_t id);
  void (*on_removed)(kva_policy_state *p, uint64_t id);
  size_t (*candidates)(const kva_policy_state *p, uint64_t after, uint64_t *ids, uint64_t *bytes,
                       size_t max);
  size_t (*count)(const kva_policy_state *p);
} kva_eviction_policy;
/* The struct is copied (name up to 31 bytes). KVA_EINVAL for a bad or
 * taken name (built-ins included) or a missing function, KVA_ENOMEM when
 * the registry is full. Register before kva_runtime_start. */
KVA_API int kva_store_policy_register(const kva_store_policy *p);
KVA_API int kva_prefetch_policy_register(const kva_prefetch_policy *p);
KVA_API int kva_eviction_policy_register(const kva_eviction_policy *p);

/* ------------------------------------------------------------------------
 * GPU copy (gpu/): moving KV between an engine's paged cache and L1.
 *
 * One copy actor per device, on its own thread, gathers a request's tokens
 * out of the paged cache into L1 chunk objects (store) and scatters
 * prefetched chunks back (load). Chunk objects are KV_2LTD: one tensor
 * [2, layers, tokens, heads * head_dim] of the cache's dtype, or KV_PAGES
 * for KVA_KV_PAGES (whole pages; see kva_kv_chunk_layout). Copies are
 * bytewise, so any dtype of the right element size round-trips exactly.
 *
 * KVA_DEVICE_HOST is a device whose "device memory" is host memory: the
 * same gather/scatter on CPU threads, the same completion path. A CUDA
 * ordinal needs a CUDA device and a page-locked L1 (l1.pinned); without
 * them kva_kv_register answers KVA_ENOTSUP (and logs why). Threaded
 * runtimes only (runtime.workers > 0).
 * ------------------------------------------------------------------------ */
enum { KVA_DEVICE_HOST = -1 };
typedef enum {
  KVA_KV_FLASH,      /* per layer [2, blocks, block_size, heads, head_dim] */
  KVA_KV_FLASHINFER, /* per layer [blocks, 2, block_size, heads, head_dim] */
  KVA_KV_PAGES       /* per layer num_blocks opaque pages (see below) */
} kva_kv_format;
/* KVA_KV_PAGES: block b of layer l is the page_bytes contiguous bytes at
 * layers[l] + b * block_stride, whatever they hold (vLLM 0.33's fused
 * [heads, block_size, K|V] pages, whose K|V split depends on the attention
 * backend). Strided blocks cover blocks-first caches, where one block
 * holds every layer's page (block_stride = layers * page_bytes); pages
 * must not overlap (block_stride >= page_bytes). Copies move whole pages:
 * chunk_tokens must be a multiple of block_size, and the slots of each
 * block of a chunk a run block * block_size + 0, 1, ... (or all -1: the
 * page is skipped, as a -1 token is in the other formats). num_heads and
 * head_dim are not read; page_bytes must be a multiple of the dtype's
 * size. Chunk objects are KV_PAGES (see kva_kv_chunk_layout). */
typedef struct kva_paged_kv {
  int device; /* CUDA ordinal or KVA_DEVICE_HOST */
  kva_kv_format format;
  kva_dtype dtype;
  uint32_t num_layers, num_blocks, block_size, num_heads, head_dim;
  void *const *layers;   /* num_layers base pointers (device or host memory) */
  uint64_t block_stride; /* KVA_KV_PAGES: bytes from a layer's block b to b + 1 */
  uint64_t page_bytes;   /* KVA_KV_PAGES: bytes of one block of one layer */
} kva_paged_kv;
typedef struct kva_kv kva_kv;
typedef struct kva_op kva_op;
/* Copies *d (and the layer pointers). KVA_EINVAL for a bad shape,
 * KVA_ENOTSUP for a device that cannot be served. kva_runtime_shutdown
 * lets every op in flight finish first (its chunks finished or released
 * in L1; kva_op_wait then gives its status; calls after the shutdown began
 * return KVA_ESHUTDOWN); unregistering after the shutdown only frees the
 * kv. */
KVA_API int kva_kv_register(kva_storage *s, const kva_paged_kv *d, kva_kv **out);
KVA_API void kva_kv_unregister(kva_kv *kv); /* waits for the kv's ops still copying */
/* The layout of a chunk of chunk_tokens tokens (ntensors 0 if invalid):
 * KV_2LTD [2, layers, tokens, heads * head_dim] for the token formats;
 * KV_PAGES [layers, ceil(tokens / block_size), page_bytes / dtype size]
 * for KVA_KV_PAGES (a page of each of the chunk's blocks, per layer). */
KVA_API kva_layout kva_kv_chunk_layout(const kva_kv *kv, uint32_t chunk_tokens);
/* Chunk i of k[] holds tokens [i * chunk_tokens, min((i + 1) * chunk_tokens,
 * ntokens)): ntokens must be in ((nchunks - 1) * chunk_tokens, nchunks *
 * chunk_tokens], so only the last chunk may be partial (its object has the
 * layout of its own token count). slot_mapping[t] = block * block_size +
 * offset; -1 = skip this token (stored as zeros in its chunk, not written
 * to the cache on load). slot_mapping is host
 * memory, copied by the call. KVA_KV_PAGES copies whole pages: KVA_EINVAL
 * unless chunk_tokens is a multiple of block_size and each block's slots
 * in a chunk are a block-aligned run or all -1; a partial last block
 * moves its whole page (the slots past ntokens in it too).
 *
 * kva_kv_store: reserve_write(NEW) + gather + finish_write. Keys already
 * present are skipped, not an error. Op status: KVA_OK, or KVA_ENOMEM when
 * some chunks had no room (the others are stored), or KVA_EIO when the copy
 * failed (nothing of it is stored). */
KVA_API int kva_kv_store(kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks,
                         uint32_t chunk_tokens, const int64_t *slot_mapping, size_t ntokens,
                         kva_op **op);
/* kva_kv_load: the keys must have been prefetched (read-locked, e.g. by
 * kva_submit_prefetch); scatters them layer by layer, then releases one
 * read lock of each. A key not read-locked, or whose object does not have
 * the chunk layout: the call fails (KVA_KEY_NOT_EXIST / NOT_READABLE /
 * KVA_EINVAL), writes nothing and releases the locks it was given. */
KVA_API int kva_kv_load(kva_storage *s, kva_kv *kv, const kva_key *k, size_t nchunks,
                        uint32_t chunk_tokens, const int64_t *slot_mapping, size_t ntokens,
                        kva_op **op);
/* KVA_OK with *status = the op's result once it is complete (locks
 * released), then frees op; KVA_ETIMEDOUT (op still live) after timeout_ms
 * (< 0: forever). */
KVA_API int kva_op_wait(kva_op *op, int timeout_ms, int *status);
/* KVA_OK once layer `layer` of a load is in the paged cache (a store's
 * layers land together, when its copy is done); KVA_ETIMEDOUT; KVA_EINVAL
 * for a layer out of range. Does not free op. */
KVA_API int kva_op_wait_layer(kva_op *op, uint32_t layer, int timeout_ms);
KVA_API int kva_op_eventfd(const kva_op *op); /* readable once the op is complete */

/* ------------------------------------------------------------------------
 * Logging: library code prints only through this. Default: warnings and
 * errors to stderr. A NULL fn restores the default.
 * ------------------------------------------------------------------------ */
enum { KVA_LOG_ERROR = 0, KVA_LOG_WARN = 1, KVA_LOG_INFO = 2, KVA_LOG_DEBUG = 3 };
typedef void (*kva_log_fn)(int level, const char *msg, void *arg);
KVA_API void kva_log_set(kva_log_fn fn, void *arg, int max_level);
/* One message (printf-style, cut to 511 bytes) to what kva_log_set chose,
 * when level <= its max_level. Library code and adapters, built-in or
 * plug-in, print through this alone; messages start with the tier's name
 * by convention ("disk0: ..."). */
KVA_API void kva_log(int level, const char *fmt, ...) KVA_PRINTF(2, 3);

#ifdef __cplusplus
}
#endif
#endif /* KVACT_H */
