/*
 * mailbox.c — ring + overflow queue (the FIFO argument is in mailbox.h).
 *
 * Memory ordering, in ck's model: ck_pr loads and stores order nothing by
 * themselves, so every ordering below is a ck_pr_fence_* next to the
 * access it orders (most compile to nothing on x86-TSO).
 *  - A slot's contents: the producer's stores to it, then ring_commit's
 *    store fence, then p_tail; ck's dequeue loads p_tail, a load fence,
 *    then reads the slot.
 *  - A slot's reuse: ck's dequeue copies the slot out, a store fence, then
 *    c_head (the copy's stores depend on its loads, so the read is done);
 *    a producer's reservation loads c_head, and its stores to the slot
 *    follow its CAS on p_head.
 *  - ovf_count: the acquire in mailbox_try_push pairs with the release in
 *    take_overflow (rules 1 and 2 of mailbox.h). The overflow queue itself
 *    is guarded by ovf_lock.
 *
 * What the TSan build announces (tsan.h), on each slot's own address, so
 * that TSan checks the production ring code's slot accesses:
 *  P1 a producer, after its reservation, before writing the slot: acquire
 *  P2 the producer, after writing it, before its commit:            release
 *  C1 the consumer, once it has seen p_tail past c_head:             acquire
 *  C2 the consumer, after ck's dequeue returned:                     release
 * P2 -> C1 (the message): the producer releases before it commits, and the
 *   consumer acquires only after it has seen that commit. ck's dequeue
 *   loads p_tail and reads the slot in one call, so the consumer looks at
 *   p_tail itself first; there is one consumer, so the dequeue then reads
 *   exactly the slot at c_head, which stays committed.
 * C2 -> P1 (the slot's next lap): ck's reservation keeps one slot empty
 *   (p_head - c_head < capacity - 1), so ticket t is handed out only once
 *   c_head has reached t - capacity + 2, i.e. after the consumer's *next*
 *   dequeue, which its release of this slot precedes in program order.
 * Nothing else is annotated: a change that wrote a slot after committing
 * it, or read one without having seen it committed, shows as a race.
 */
#include "mailbox/mailbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mailbox/backoff.h"
#include "mailbox/ring_commit.h"
#include "mailbox/tsan.h"

CK_RING_PROTOTYPE(env, mailbox_env)

static uint32_t round_pow2(uint32_t v) {
  uint32_t c = 4;
  while (c < v && c < (1u << 30)) c <<= 1;
  return c;
}

int mailbox_init(mailbox *mb, ck_ring_t *ring, uint32_t capacity) {
  memset(mb, 0, sizeof(*mb));
  mb->capacity = round_pow2(capacity);
  mb->slots = aligned_alloc(64, (size_t)mb->capacity * sizeof(mailbox_env));
  if (!mb->slots) return -ENOMEM;
  mb->ring = ring;
  ck_ring_init(ring, mb->capacity);
  pthread_spin_init(&mb->ovf_lock, PTHREAD_PROCESS_PRIVATE);
  return 0;
}

/* The overflow lock guards a few pointer moves. A mutex sleeps in the
 * kernel as soon as two workers meet on it (futex wait + wake per message
 * under fan-in); a spinlock that yields after a short spin does not, and
 * still lets a preempted holder run. */
static void ovf_lock_take(mailbox *mb) {
  for (unsigned i = 0; pthread_spin_trylock(&mb->ovf_lock) != 0; i++) backoff_wait(i, 0);
}

static void env_release(payload_pool *pool, mailbox_env *e) {
  if (e->len > MAILBOX_INLINE_BYTES) payload_pool_put(pool, e->u.heap);
}

void mailbox_destroy(mailbox *mb, payload_pool *pool) {
  mailbox_env e;
  bool drained;
  while (mailbox_pop(mb, &e, &drained)) env_release(pool, &e);
  ovf_node *lists[] = {mb->ovf_free, mb->own_used};
  for (int i = 0; i < 2; i++) {
    for (ovf_node *n = lists[i], *next; n; n = next) {
      next = n->next;
      free(n);
    }
  }
  pthread_spin_destroy(&mb->ovf_lock);
  free(mb->slots);
  mb->slots = NULL;
}

bool mailbox_try_push(mailbox *mb, const mailbox_env *e, uint32_t *depth) {
  uint32_t overflowing = ck_pr_load_32(&mb->ovf_count);
  /* acquire, pairs with the release in take_overflow: a sender that reads
   * 0 pushes to the ring only after the consumer moved the overflow queue
   * to its own list, which it empties before it reads the ring again */
  ck_pr_fence_acquire();
  if (overflowing != 0) return false;
  unsigned int ticket, size;
  mailbox_env *slot = ck_ring_enqueue_reserve_mpsc_size_env(mb->ring, mb->slots, &ticket, &size);
  if (!slot) return false;
  *depth = size + 1;  /* ck's size: reserved slots ahead of ours */
  TSAN_ACQUIRE(slot); /* P1: the consumer's read of the slot's last lap came first */
  *slot = *e;
  TSAN_RELEASE(slot); /* P2: the contents before the commit */
  /* commit waits for earlier producers, then publishes p_tail after a
   * store fence: the slot is complete before the consumer can see it */
  ring_commit(mb->ring, ticket);
  return true;
}

static ovf_node *node_get(mailbox *mb) {
  ovf_node *n = mb->ovf_free;
  if (n) {
    mb->ovf_free = n->next;
    return n;
  }
  return malloc(sizeof(*n));
}

int mailbox_push_overflow(mailbox *mb, const mailbox_env *e) {
  ovf_lock_take(mb);
  ovf_node *n = node_get(mb);
  if (!n) {
    pthread_spin_unlock(&mb->ovf_lock);
    return -ENOMEM;
  }
  n->env = *e;
  n->next = NULL;
  if (mb->ovf_tail)
    mb->ovf_tail->next = n;
  else
    mb->ovf_head = n;
  mb->ovf_tail = n;
  /* relaxed: the count is read without the lock by senders (rule 1) and
   * by the consumer's fast path, which then takes the lock; the unlock
   * below publishes the node itself */
  ck_pr_store_32(&mb->ovf_count, mb->ovf_count + 1);
  pthread_spin_unlock(&mb->ovf_lock);
  return 0;
}

#if defined(KVA_TSAN)
/* The slot the next dequeue reads, or NULL while the ring is empty. Only
 * the consumer moves c_head, so a slot seen committed here is the one ck's
 * dequeue takes next. */
static mailbox_env *next_slot(const mailbox *mb) {
  unsigned int c = ck_pr_load_uint(&mb->ring->c_head);
  if (c == ck_pr_load_uint(&mb->ring->p_tail)) return NULL;
  return &mb->slots[c & mb->ring->mask];
}

/* ck's dequeue, with the hand-off announced around it (C1, C2 above). */
static bool pop_ring(mailbox *mb, mailbox_env *out) {
  mailbox_env *slot = next_slot(mb);
  if (!slot) return false;
  TSAN_ACQUIRE(slot); /* C1: we have seen its commit */
  bool taken = ck_ring_dequeue_mpsc_env(mb->ring, mb->slots, out);
  TSAN_RELEASE(slot); /* C2: our read before the slot's next producer */
  return taken;
}
#else
static bool pop_ring(mailbox *mb, mailbox_env *out) {
  return ck_ring_dequeue_mpsc_env(mb->ring, mb->slots, out);
}
#endif

/* Under ovf_lock: the whole overflow queue becomes the consumer's list;
 * the nodes the consumer used since the last move go back to ovf_free. */
static void take_overflow(mailbox *mb) {
  mb->own_head = mb->ovf_head;
  ck_pr_store_32(&mb->own_count, mb->ovf_count);
  mb->ovf_head = mb->ovf_tail = NULL;
  while (mb->own_used) {
    ovf_node *n = mb->own_used;
    mb->own_used = n->next;
    n->next = mb->ovf_free;
    mb->ovf_free = n;
  }
  /* release, pairs with the acquire in mailbox_try_push: the moves above,
   * and the empty ring pop_overflow read, come before a sender reads 0 */
  ck_pr_fence_release();
  ck_pr_store_32(&mb->ovf_count, 0);
}

static bool pop_own(mailbox *mb, mailbox_env *out, bool *drained) {
  ovf_node *n = mb->own_head;
  if (!n) return false;
  mb->own_head = n->next;
  *out = n->env;
  n->next = mb->own_used;
  mb->own_used = n;
  uint32_t left = mb->own_count - 1;
  ck_pr_store_32(&mb->own_count, left);
  *drained = left == 0 && ck_pr_load_32(&mb->ovf_count) == 0;
  return true;
}

static bool pop_overflow(mailbox *mb, mailbox_env *out, bool *drained) {
  ovf_lock_take(mb);
  /* Rule 2: under the lock, an overflow message's predecessors from the
   * same sender are visible in the ring (the sender committed them before
   * it took the lock to append); take those first. */
  if (pop_ring(mb, out)) {
    pthread_spin_unlock(&mb->ovf_lock);
    return true;
  }
  take_overflow(mb);
  pthread_spin_unlock(&mb->ovf_lock);
  return pop_own(mb, out, drained);
}

bool mailbox_pop(mailbox *mb, mailbox_env *out, bool *overflow_drained) {
  *overflow_drained = false;
  if (pop_own(mb, out, overflow_drained)) return true;
  if (pop_ring(mb, out)) return true;
  if (ck_pr_load_32(&mb->ovf_count) == 0) return false;
  return pop_overflow(mb, out, overflow_drained);
}

uint32_t mailbox_overflow_depth(const mailbox *mb) {
  return ck_pr_load_32((uint32_t *)&mb->ovf_count) + ck_pr_load_32((uint32_t *)&mb->own_count);
}

bool mailbox_crowded(const mailbox *mb) {
  return ck_ring_size(mb->ring) >= mailbox_low_mark(mb) || mailbox_overflow_depth(mb) > 0;
}

bool mailbox_empty(const mailbox *mb) {
  return ck_ring_size(mb->ring) == 0 && mailbox_overflow_depth(mb) == 0;
}

uint32_t mailbox_depth(const mailbox *mb) {
  return ck_ring_size(mb->ring) + mailbox_overflow_depth(mb);
}
