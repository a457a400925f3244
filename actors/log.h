/*
 * log.h — the library's only way to print (kva_log_set chooses where).
 */
#ifndef KVA_ACTORS_LOG_H
#define KVA_ACTORS_LOG_H

#include "kvact.h"

void kva_logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LOG_ERROR(...) kva_logf(KVA_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) kva_logf(KVA_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) kva_logf(KVA_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) kva_logf(KVA_LOG_DEBUG, __VA_ARGS__)

#endif
