/*
 * l2_client.h — helpers of the L2 suites: a storage runtime with mock
 * tiers, direct requests to a tier (seed it, read its counters, steer its
 * faults), byte patterns that name their key, and checks that an object is
 * served with exactly the bytes written for it.
 */
#ifndef KVA_TESTS_L2_CLIENT_H
#define KVA_TESTS_L2_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/mock/mock.h"

/* A storage runtime (l1_bytes of L1) with `ntiers` mock tiers named
 * mock0.., each with the given extra JSON members (may be "" or NULL),
 * plus the NULL-terminated "k=v" settings. */
kva_runtime *l2_start(int workers, uint64_t l1_bytes, int ntiers, const char *mock_json, ...);
/* l2_start with 64 MiB of L1 and prefetch_writeback=false (LMCache's
 * prefetched objects are temporary), plus one setting `more` (or NULL). */
kva_runtime *l2_start_no_writeback(int workers, int ntiers, const char *more);
/* A deterministic runtime (64 MiB of L1) with one mock tier whose every
 * request takes latency_us of virtual time: a store holds its lock until
 * the test moves the clock. */
kva_runtime *l2_start_slow_tier(uint64_t latency_us);
kva_actor *l2_tier_actor(kva_storage *s, uint32_t tier);
/* Every facade test ends here: waits until no tier holds a lock
 * (l2_assert_unlocked), asserts kva_memcheck is clean, shuts down. */
void l2_finish(kva_runtime *rt);
/* kva_runtime_start with one mock tier and setting key=value: its result.
 * A runtime that starts is shut down at once; one that does not must
 * leave *rt NULL. */
int l2_try_start(const char *key, const char *value);

/* The byte at offset o of the object written for key id, version v. */
static inline uint8_t l2_pattern(uint64_t id, uint32_t v, size_t o) {
  return (uint8_t)(id * 131u + v * 29u + o * 7u + (o >> 12));
}
void l2_fill(void *p, size_t len, uint64_t id, uint32_t v);
bool l2_matches(const void *p, size_t len, uint64_t id, uint32_t v);

/* Writes keys fixture_key(ids[i]) into L1 with version v bytes, finishes
 * them (so the store controller copies them to L2), asserts all succeed. */
void l2_write(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l, uint32_t v);
void l2_write_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l, uint32_t v);
/* Like l2_write, but of keys already in L1 (KVA_WRITE_UPDATE). */
void l2_rewrite(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l, uint32_t v);
/* kva_flush (10 s), asserting success: every store task has answered. */
void l2_flush(kva_storage *s);
/* Stores keys straight into one tier (bypassing L1), version v bytes. */
void l2_seed(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n, const kva_layout *l,
             uint32_t v);
void l2_seed_range(kva_storage *s, uint32_t tier, uint64_t first, size_t n, const kva_layout *l);
/* Seeds each tier t < ntiers with the keys i whose bit i of held[t] is set,
 * version 0, except that a copy a lower tier holds too is version 9: other
 * bytes, so a read tells which tier served the key. */
void l2_seed_tiers(kva_storage *s, uint32_t ntiers, const uint8_t *held, const kva_layout *l);

kva_l2_stats l2_stats(kva_storage *s, uint32_t tier);
/* Sends a MOCK_CONTROL and waits until it is in effect. */
void l2_control(kva_storage *s, uint32_t tier, const mock_control *c);
void l2_fail_loads(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n);
void l2_set_down(kva_storage *s, uint32_t tier, bool down);
/* kva_flush, then every tier's keys accounted for: written = stored +
 * coalesced + bypassed + frozen + gone + unavailable + failed + dropped
 * (kva_l2_tier_keys). l2_finish checks it. */
void l2_assert_accounted(kva_storage *s);
/* Waits (up to 5 s) until every tier holds no lock, and asserts it. */
void l2_assert_unlocked(kva_storage *s);

/* submit + wait; returns the hit count. */
size_t l2_prefetch(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                   uint32_t extra);
size_t l2_prefetch_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l);
/* Reads the prefetched keys, checks their bytes are version v, releases. */
void l2_read_release(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, uint32_t extra);
void l2_read_release_range(kva_storage *s, uint64_t first, size_t n, uint32_t v);

/* L1's view of key id: L1_ABSENT, or its read-lock count | L1_WRITE_LOCKED
 * | L1_TEMPORARY | L1_PINNED (l1/l1_manager.h). */
int l2_l1_state(kva_storage *s, uint64_t id);
/* Asserts l2_l1_state(s, i) == want for every key of [first, first + n). */
void l2_expect_states(kva_storage *s, uint64_t first, size_t n, int want);
/* kva_lookup of keys [first, first + n) (n <= 16), asserting success. */
kva_tier_hits l2_lookup_range(kva_storage *s, uint64_t first, size_t n, int pin);

/* Single-key calls that return the key's status (KVA_OK or KVA_KEY_*),
 * asserting that the call's count agrees with it. l2_reserve leaves key id
 * write-locked (KVA_WRITE_NEW) until l2_finish_one. */
void l2_reserve(kva_storage *s, uint64_t id, const kva_layout *l);
int l2_finish_one(kva_storage *s, uint64_t id);
int l2_delete_one(kva_storage *s, uint64_t id, int force);

/* ---- added for the store / lookup / modes suites ------------------------ */

/* Makes tier's STOREs that hold one of keys ids[] fail (n = 0 clears). */
void l2_fail_stores(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n);
/* Adds latency_us to every STORE, LOAD and LOOKUP of the tier. */
void l2_set_latency(kva_storage *s, uint32_t tier, uint64_t latency_us);
/* A raw LOOKUP_AND_LOCK of keys ids[] sent to the tier from a port of the
 * test's own; returns how many were found (and are now locked). */
size_t l2_lock(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n);
/* A raw UNLOCK of keys ids[] (fire and forget, as the controllers do). */
void l2_unlock(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n);
/* Like l2_write, but the objects are temporary (as prefetched objects are
 * without write-back): reserved with the internal temporary flag, then
 * finished through kva_finish_write. */
void l2_write_temporary(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l);
/* kva_storage_get_stats, asserting success. */
kva_storage_stats l2_storage_stats(kva_storage *s);
/* Polls pred(arg) every millisecond (threaded mode) until it holds or
 * timeout_ms passed; returns its last value. */
bool l2_wait_until(bool (*pred)(kva_storage *s, void *arg), kva_storage *s, void *arg,
                   int timeout_ms);
void l2_sleep_ms(unsigned ms);

/* ---- added for the prefetch suites --------------------------------------- */

/* Like l2_write, but with L2 frozen until the store controller has seen
 * the keys, so they are in L1 only. */
void l2_write_l1_only(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                      uint32_t v);
/* kva_submit_prefetch of keys fixture_key(ids[i]), asserting success. */
kva_prefetch *l2_submit(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                        uint32_t extra);
/* kva_wait_prefetch (10 s), asserting success; returns the hit count. */
size_t l2_wait(kva_storage *s, kva_prefetch *h);
/* Read-lock count of key id in L1, or -1 when L1 does not hold it. */
int l2_readers(kva_storage *s, uint64_t id);

/* ---- captured log lines (shutdown and randomized suites) ---------------- */

/* Routes every library log line of level <= max_level into a buffer (lines
 * past its end are counted, not kept) until l2_log_stop, which restores
 * the default logger. */
void l2_log_start(int max_level);
void l2_log_stop(void);
/* Captured lines that contain needle (NULL: every line). */
size_t l2_log_count(const char *needle);
/* The captured lines, one per line, for failure messages. */
const char *l2_log_text(void);
/* Captured lines that say a lock outlived shutdown: the L1 manager's, a
 * controller's or a mock's on_stop warning, or a drain that gave up. */
size_t l2_log_lock_warnings(void);

/* ---- added for the disk suites ------------------------------------------- */

/* A storage runtime (l1_bytes of L1) with one disk tier named disk0 whose
 * extra JSON members are disk_json ("" = schema defaults: a temporary
 * file), plus the NULL-terminated "k=v" settings; asserts it starts. */
kva_runtime *l2_start_disk(int workers, uint64_t l1_bytes, const char *disk_json, ...);
/* The same with 16 MiB of L1, returning kva_runtime_start's result (*rt
 * is NULL when it fails). */
int l2_try_start_disk(int workers, const char *disk_json, kva_runtime **rt);
/* Sends one request straight to a tier from a port of the test's own,
 * waits for its KVA_L2_DONE and returns r->result. */
int l2_ask(kva_storage *s, uint32_t tier, uint32_t type, kva_l2_req *r);

#endif
