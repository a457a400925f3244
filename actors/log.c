/*
 * log.c — logger: warnings and errors to stderr unless the user installs a
 * function with kva_log_set. kva_log is the one way in, for the library
 * (actors/log.h's LOG_*) and for adapters (kvact.h's adapter kit).
 */
#include "actors/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static kva_log_fn log_fn;
static void *log_arg;
static int log_max = KVA_LOG_WARN;

/* In a child of fork() (actors/fork.c): the thread that held the lock
 * did not follow, so the lock starts afresh. */
void log_fork_child(void) {
  log_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

void kva_log_set(kva_log_fn fn, void *arg, int max_level) {
  pthread_mutex_lock(&log_lock);
  log_fn = fn;
  log_arg = arg;
  __atomic_store_n(&log_max, max_level, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&log_lock);
}

void kva_log(int level, const char *fmt, ...) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  /* a message below the level costs one load, not a format and a lock;
   * the check under the lock decides against a kva_log_set meanwhile */
  if (level > __atomic_load_n(&log_max, __ATOMIC_RELAXED)) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  if (level <= log_max) {
    if (log_fn)
      log_fn(level, buf, log_arg);
    else
      fprintf(stderr, "kvact %s: %s\n", names[level & 3], buf);
  }
  pthread_mutex_unlock(&log_lock);
}
