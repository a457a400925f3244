/*
 * mailbox.h — an actor's message queue: a bounded ck_ring (MPSC) of 64-byte
 * envelopes plus an unbounded overflow queue that keeps back-pressure from
 * ever dropping or reordering a sender's messages.
 *
 * Ordering rules (why per-sender FIFO holds):
 *  1. A sender uses the ring only while the overflow queue is empty
 *     (ovf_count == 0); otherwise it appends to the overflow queue.
 *  2. The consumer takes from the overflow queue only when, holding
 *     ovf_lock, it finds the ring empty; it then moves the whole queue to a
 *     list of its own (one lock per drain, not per message) and consumes
 *     that list before anything else.
 *  So if a sender's message m1 is in the ring and its later m2 in the
 *  overflow queue, m1 was committed before m2 was appended under ovf_lock;
 *  the consumer that sees m2 under ovf_lock sees m1 in the ring and takes it
 *  first. If m1 is in the overflow queue, ovf_count > 0 until m1 is moved
 *  to the consumer's list, so m2 is appended behind it (rule 1), or, if
 *  sent after the move, goes to the ring, which the consumer reads only
 *  once its own list is empty.
 *
 * Back-pressure marks (used by the scheduler's muting, actors/sched.c): a
 * push reports the ring's depth including its message; a sender whose
 * message lands at or above the high mark (3/4 of the ring) is muted, and a
 * mailbox is "crowded" while its ring holds at least the low mark (1/4) or
 * its overflow queue is in use. Between the two marks the ring absorbs the
 * senders' in-flight bursts, so the overflow queue is rarely needed.
 *
 * The mailbox knows nothing about scheduling: it only stores messages.
 */
#ifndef KVA_MAILBOX_H
#define KVA_MAILBOX_H

#include <ck_ring.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "mailbox/payload_pool.h"

#define MAILBOX_INLINE_BYTES 40u

struct kva_actor;

/* One message as it sits in a ring slot: exactly one cache line. */
struct mailbox_env {
  uint32_t type;
  uint32_t len;
  struct kva_actor *from;
  uint64_t tag;
  union {
    uint8_t inl[MAILBOX_INLINE_BYTES]; /* len <= MAILBOX_INLINE_BYTES */
    void *heap;                        /* else a payload_pool block */
  } u;
};
typedef struct mailbox_env mailbox_env;
_Static_assert(sizeof(mailbox_env) == 64, "an envelope is one cache line");

typedef struct ovf_node {
  struct ovf_node *next;
  mailbox_env env;
} ovf_node;

typedef struct mailbox {
  ck_ring_t *ring;             /* counters (may live in the shared stats segment) */
  mailbox_env *slots;          /* ring storage, capacity entries */
  uint32_t capacity;           /* power of two >= 4; holds capacity - 1 messages */
  uint32_t ovf_count;          /* atomic: messages in the overflow queue */
  pthread_spinlock_t ovf_lock; /* tiny critical sections: see ovf_lock_take */
  ovf_node *ovf_head;          /* oldest overflow message (under ovf_lock) */
  ovf_node *ovf_tail;
  ovf_node *ovf_free; /* recycled nodes: no malloc in steady state */
  /* consumer-owned: messages moved out of the overflow queue, and the
   * nodes they leave behind (returned to ovf_free at the next move) */
  ovf_node *own_head;
  ovf_node *own_used;
  uint32_t own_count; /* atomic store by the consumer, read by anyone */
} mailbox;

/* capacity is rounded up to a power of two >= 4. ring points to zeroed
 * storage for the ck_ring counters. Returns 0 or -ENOMEM. */
int mailbox_init(mailbox *mb, ck_ring_t *ring, uint32_t capacity);
/* Frees the storage and the payloads of messages never delivered. */
void mailbox_destroy(mailbox *mb, payload_pool *pool);

/* Ring fast path; fails when the ring is full or the overflow queue is in
 * use (rule 1). On success *depth is the ring's depth counting this message
 * and every reserved one (an upper bound of what the consumer will see).
 * Safe from any number of threads. */
bool mailbox_try_push(mailbox *mb, const mailbox_env *e, uint32_t *depth);
/* Always keeps the message (unless out of memory: -ENOMEM). */
int mailbox_push_overflow(mailbox *mb, const mailbox_env *e);
/* Single consumer. *overflow_drained is set when this pop took the last
 * overflow message (muted senders may be released). */
bool mailbox_pop(mailbox *mb, mailbox_env *out, bool *overflow_drained);
/* Racy snapshots, exact when called by the consumer with no producer. */
bool mailbox_empty(const mailbox *mb);
uint32_t mailbox_depth(const mailbox *mb);
uint32_t mailbox_overflow_depth(const mailbox *mb);
/* Ring at or above the low mark, or overflow queue in use. Racy like the
 * snapshots above; a full fence orders it against the caller's writes. */
bool mailbox_crowded(const mailbox *mb);

static inline uint32_t mailbox_high_mark(const mailbox *mb) {
  return mb->capacity - mb->capacity / 4;
}
static inline uint32_t mailbox_low_mark(const mailbox *mb) {
  return mb->capacity / 4;
}

#endif
