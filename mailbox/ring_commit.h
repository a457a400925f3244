/*
 * ring_commit.h — ck_ring's multi-producer commit, made polite.
 *
 * A multi-producer ck_ring enqueue is reserve (CAS on p_head) + copy +
 * commit, and commit waits until every earlier ticket has committed. ck
 * waits with `pause` only: when the producer holding the earliest ticket is
 * preempted (more threads than cores — the engine's threads, the workers),
 * every later producer burns its whole time slice waiting for it, and the
 * convoy can last seconds. This commit is ck's (same fence, same store) but
 * yields the CPU after a short spin, so the preempted producer gets to run.
 */
#ifndef KVA_MAILBOX_RING_COMMIT_H
#define KVA_MAILBOX_RING_COMMIT_H

#include <ck_pr.h>
#include <ck_ring.h>

#include "mailbox/backoff.h"

static inline void ring_commit(ck_ring_t *r, unsigned int ticket) {
  /* never sleeps: the earlier producer is mid-copy, only preemption delays it */
  for (unsigned int i = 0; ck_pr_load_uint(&r->p_tail) != ticket; i++) backoff_wait(i, 0);
  /* store fence, as ck's commit: the slot was only stored to, so ordering
   * those stores before the new p_tail is all the consumer's load fence
   * after reading p_tail pairs with */
  ck_pr_fence_store();
  ck_pr_store_uint(&r->p_tail, ticket + 1);
}

#endif
