/*
 * tsan.h — ThreadSanitizer annotations for the hand-offs TSan cannot see.
 *
 * ck orders its rings with inline-asm fences that TSan does not model, so a
 * message written by a producer and read by the consumer looks like a race.
 * The mailbox announces each hand-off explicitly: the producer releases the
 * slot before committing it, the consumer acquires it after taking it.
 * Outside TSan builds these are no-ops.
 */
#ifndef KVA_MAILBOX_TSAN_H
#define KVA_MAILBOX_TSAN_H

#if defined(KVA_TSAN)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define TSAN_RELEASE(p) __tsan_release((void *)(p))
#define TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define TSAN_RELEASE(p) ((void)0)
#define TSAN_ACQUIRE(p) ((void)0)
#endif

#endif
