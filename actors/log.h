/*
 * log.h — the library's only way to print: LOG_* over kva_log (kvact.h),
 * which goes where kva_log_set chose (log.c).
 */
#ifndef KVA_ACTORS_LOG_H
#define KVA_ACTORS_LOG_H

#include "kvact.h"

#define LOG_ERROR(...) kva_log(KVA_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) kva_log(KVA_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) kva_log(KVA_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) kva_log(KVA_LOG_DEBUG, __VA_ARGS__)

/* the child of fork(): the logger's lock starts afresh (actors/fork.c) */
void log_fork_child(void);

#endif
