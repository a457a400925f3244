/*
 * fork.c — what a runtime is in a child made by fork().
 *
 * fork() copies the caller's memory but only the calling thread: in the
 * child, the runtime's workers, poller, pinned threads and a client's
 * connection reader do not exist, locks may be held by threads that are
 * gone, and the fds (a client's socket to kvactd, the pool's memfd, the
 * disk tier's file) are shared with the parent. A call that went ahead
 * would wait for threads that never answer, or write a frame on the
 * parent's socket whose reply the parent's reader takes ("a reply to no
 * request"), leaving the parent's locks unreleasable. So every runtime
 * remembers the fork generation it started in, and a pthread_atfork child
 * handler bumps the generation: in the child, each call on an inherited
 * runtime sees it at once and is refused (KVA_ESHUTDOWN, logged once);
 * kva_runtime_shutdown there returns without touching anything shared.
 *
 * Why atfork and not a pid check on each call: glibc no longer caches
 * getpid() (2.25), so a pid check would be a syscall per call; the handler
 * costs one load per call and runs before fork() returns in the child. A
 * raw clone() without CLONE_VM skips atfork handlers: that is not fork(),
 * and is not supported. A child starts a runtime of its own, which works
 * as in any process.
 */
#include <pthread.h>
#include <unistd.h>

#include <ck_pr.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"

static uint32_t fork_gen;  /* atomic: bumped in every child */
static uint32_t fork_said; /* atomic: the child was told once */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) {
  log_fork_child();
  ck_pr_inc_32(&fork_gen);
  ck_pr_store_32(&fork_said, 0);
}

static void fork_register(void) {
  pthread_atfork(NULL, NULL, on_fork_child);
}

uint32_t runtime_fork_gen(void) {
  pthread_once(&fork_once, fork_register);
  return ck_pr_load_32(&fork_gen);
}

bool runtime_forked(const kva_runtime *rt) {
  if (ck_pr_load_32(&fork_gen) == rt->fork_gen) return false;
  if (ck_pr_fas_32(&fork_said, 1) == 0)
    LOG_ERROR("kvact: this runtime was started by pid %d; process %d, made by fork(), must start "
              "its own (its calls on the inherited one return KVA_ESHUTDOWN)",
              rt->pid, (int)getpid());
  return true;
}
