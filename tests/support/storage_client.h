/*
 * storage_client.h — helpers shared by the suites that drive the storage
 * facade (kvact.h "Storage manager") with keys fixture_key(id).
 */
#ifndef KVA_TESTS_STORAGE_CLIENT_H
#define KVA_TESTS_STORAGE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#ifndef MiB
#define MiB (1024ull * 1024ull)
#endif
#define SENTINEL 0x5a5a /* a status value no call writes */

/* A 2-worker runtime with a 64 MiB L1. */
kva_runtime *start_store(void);
/* keys[i] = fixture_key(ids[i]); keys[i] = fixture_key(first + i) */
void keys_of(kva_key *k, const uint64_t *ids, size_t n);
void key_range(kva_key *k, uint64_t first, size_t n);
/* A stats snapshot; two snapshots that must agree in every field. */
kva_storage_stats stats_of(kva_storage *s);
void assert_same_stats(const kva_storage_stats *a, const kva_storage_stats *b);
/* Fill a status array with SENTINEL; assert no call wrote into it. */
void fill_status(int *st, size_t n);
void assert_status_untouched(const int *st, size_t n);
/* submit + wait (layout l, or the basic layout); returns the hit count. */
size_t prefetch_l(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l, uint32_t extra);
size_t prefetch(kva_storage *s, const kva_key *k, size_t n, uint32_t extra);
/* LMCache's "update-mode reserve_write returns k entries": reserves with
 * KVA_WRITE_UPDATE, finishes what it got, returns how many keys it got. */
int update_count(kva_storage *s, const kva_key *k, size_t n);
/* Demand-eviction helpers (keys fixture_key(i), objects of one u8 tensor):
 * whether key i is in L1 (a prefetch of it alone, released at once, so it
 * counts as an access); one reserve_write(NEW) of keys [first, first + n)
 * of `bytes` each (n <= 64), finishing the keys that got a buffer, returning
 * how many did, statuses in st; one read lock on key i (a prefetch that
 * must hit) and its release. */
int present(kva_storage *s, uint64_t i);
int write_batch(kva_storage *s, uint64_t first, size_t n, uint64_t bytes, int *st);
void lock_key(kva_storage *s, uint64_t i);
void unlock_key(kva_storage *s, uint64_t i);

#endif
