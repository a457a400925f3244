/*
 * tsan.h — ThreadSanitizer annotations for the hand-offs TSan cannot see.
 *
 * ck's atomics and fences are inline asm, which TSan does not instrument:
 * it sees neither the counters of a ck_ring nor the ordering they carry,
 * only the plain accesses to the slots. The production ring code runs
 * unchanged under TSan; the callers announce each hand-off it performs
 * (mailbox.c states the happens-before argument, sched.c the run queue's).
 * Only the --config=tsan build (KVA_TSAN) compiles them; elsewhere they
 * are no-ops.
 *
 *   TSAN_RELEASE(p) / TSAN_ACQUIRE(p): a release on p happens before every
 *     later acquire on p (TSan's sync objects accumulate releases).
 *   TSAN_IGNORE_BEGIN() / TSAN_IGNORE_END(): the calling thread's memory
 *     accesses in between are not checked (synchronization still counts);
 *     used for exactly one call whose racy read is harmless by a CAS TSan
 *     cannot see (runq_pop in sched.c).
 */
#ifndef KVA_MAILBOX_TSAN_H
#define KVA_MAILBOX_TSAN_H

#if defined(KVA_TSAN)
#include <sanitizer/tsan_interface.h>
/* exported by libtsan, not declared by gcc 12's tsan_interface.h */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define TSAN_RELEASE(p) __tsan_release((void *)(p))
#define TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define TSAN_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define TSAN_IGNORE_END() __tsan_ignore_thread_end()
#else
#define TSAN_RELEASE(p) ((void)0)
#define TSAN_ACQUIRE(p) ((void)0)
#define TSAN_IGNORE_BEGIN() ((void)0)
#define TSAN_IGNORE_END() ((void)0)
#endif

#endif
