/*
 * l1_client.h — the L1 suites' way to talk to the L1 manager: one request
 * per call through storage_call, keys fixture_key(id), and the
 * observations LMCache's L1 manager tests make, in kvact's terms.
 *
 * Mapping of LMCache's observations onto what kvact lets a caller see:
 *  - unsafe_read           -> L1_READ. kvact's L1_READ is all or nothing:
 *    on a problem it releases one read lock of each good key. A one-key
 *    L1_READ of a key that is not read-locked therefore changes nothing, so
 *    is_read_locked() below is a pure probe.
 *  - get_object_state None -> !is_present() (L1_TOUCH counts keys present).
 *  - available_for_read    -> is_readable(): a read lock can be taken (it is
 *    given back at once). Never used on an unlocked temporary object, which
 *    the give-back would free.
 *  - available_for_write   -> is_writable(): reserve_write(UPDATE) succeeds
 *    (and finish_write gives the lock back).
 *  - is_key_evictable      -> is_evictable(): present, not read-locked and
 *    readable, i.e. a non-forced delete would succeed (confirmed by a real
 *    delete where that is harmless).
 *  - close()               -> kva_runtime_shutdown (ASan checks the frees).
 *  - extra_count x         -> readers = 1 + x.
 * LMCache's TTLs (write_ttl 600 s, read_ttl 300 s, "an expired lock counts as
 * unlocked") have no kvact analogue: kvact's locks never expire
 * (locks_never_expire_in_virtual_time checks that instead).
 */
#ifndef KVA_TESTS_L1_CLIENT_H
#define KVA_TESTS_L1_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define MiB (1024ull * 1024ull)
#define BASIC_BYTES 204800u /* fixture_layout_basic, a whole number of pages */
#define L1_CLIENT_WORKERS 2 /* threaded runtime for the single-caller scenarios */

/* One request for the keys fixture_key(ids[i]); returns its result. */
int req_reserve_write(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                      kva_write_mode mode, int temporary, kva_buf *b, int *st);
int req_finish_write(kva_storage *s, const uint64_t *ids, size_t n, int *st);
int req_fwarr(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, kva_buf *b, int *st);
int req_reserve_read(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, kva_buf *b,
                     int *st);
int req_finish_read(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, int *st);
int req_delete(kva_storage *s, const uint64_t *ids, size_t n, int force, int *st);
int req_read(kva_storage *s, const uint64_t *ids, size_t n, kva_buf *b);
int req_prefetch(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, size_t *hits);
int req_touch(kva_storage *s, const uint64_t *ids, size_t n);
int req_clear(kva_storage *s, int force);
/* One-key forms: the key's status (layout: fixture_layout_basic). */
int reserve_write1(kva_storage *s, uint64_t id, kva_write_mode mode, int temp, kva_buf *b);
int finish_write1(kva_storage *s, uint64_t id);
int fwarr1(kva_storage *s, uint64_t id, uint32_t readers, kva_buf *b);
int reserve_read1(kva_storage *s, uint64_t id, uint32_t readers, kva_buf *b);
int finish_read1(kva_storage *s, uint64_t id, uint32_t readers);
int delete1(kva_storage *s, uint64_t id, int force);
int read1(kva_storage *s, uint64_t id, kva_buf *b);
/* LMCache's ready(k) / temp-ready(k), and a key left write-locked. */
void put_ready(kva_storage *s, uint64_t id, int temp);
void put_write_locked(kva_storage *s, uint64_t id);
/* Observations (see the mapping above). */
bool is_present(kva_storage *s, uint64_t id);
bool is_read_locked(kva_storage *s, uint64_t id);
bool is_readable(kva_storage *s, uint64_t id);
bool is_writable(kva_storage *s, uint64_t id);
bool is_evictable(kva_storage *s, uint64_t id);
/* Assertions on stats, memcheck reports and buffers. */
void expect_stats(kva_storage *s, uint64_t objects, uint64_t wl, uint64_t rl, uint64_t temp);
void expect_memcheck_locked(kva_storage *s, const char *what);
void expect_buf(kva_buf b);
void expect_no_buf(kva_buf b);
/* A 2-worker runtime with a 128 MiB L1; stop_storage asserts memcheck is
 * clean and shuts it down. */
kva_runtime *start_storage(kva_storage **s);
void stop_storage(kva_runtime *rt);

#endif
