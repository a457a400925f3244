/*
 * l2_client.c — helpers of the L2 suites (see l2_client.h). Requests to a
 * tier go from a port of the test's own, as the controllers would send
 * them; L1 state is read with L1_INSPECT, which changes nothing.
 */
#include "tests/support/l2_client.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "l1/l1_manager.h"
#include "storage/storage_internal.h"
#include "tests/support/fixture.h"

kva_runtime *l2_start(int workers, uint64_t l1_bytes, int ntiers, const char *mock_json, ...) {
  char tiers[2048] = "l2=[", *p = tiers + strlen(tiers);
  for (int i = 0; i < ntiers; i++)
    p += snprintf(p, sizeof(tiers) - (size_t)(p - tiers), "%s{\"type\":\"mock\"%s%s}", i ? "," : "",
                  mock_json && *mock_json ? "," : "", mock_json ? mock_json : "");
  snprintf(p, sizeof(tiers) - (size_t)(p - tiers), "]");
  const char *kv[16];
  size_t n = 0;
  va_list ap;
  va_start(ap, mock_json);
  for (const char *s; n < 15 && (s = va_arg(ap, const char *)) != NULL;) kv[n++] = s;
  va_end(ap);
  while (n < 15) kv[n++] = NULL;
  return fixture_storage(workers, l1_bytes, tiers, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5], kv[6],
                         kv[7], kv[8], kv[9], kv[10], kv[11], kv[12], kv[13], NULL);
}

kva_runtime *l2_start_no_writeback(int workers, int ntiers, const char *more) {
  return l2_start(workers, 64u << 20, ntiers, "", "prefetch_writeback=false", more, NULL);
}

kva_runtime *l2_start_slow_tier(uint64_t latency_us) {
  kva_runtime *rt = l2_start(0, 64u << 20, 1, "", NULL);
  l2_set_latency(kva_storage_of(rt), 0, latency_us);
  return rt;
}

kva_actor *l2_tier_actor(kva_storage *s, uint32_t tier) {
  ck_assert_uint_lt(tier, s->tiers.n);
  return s->tiers.t[tier].actor;
}

void l2_finish(kva_runtime *rt) {
  kva_storage *s = kva_storage_of(rt);
  l2_assert_accounted(s);
  l2_assert_unlocked(s);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}

int l2_try_start(const char *key, const char *value) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(kva_config_set(c, "runtime.workers", "1"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.size_bytes", "4194304"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.hugepages", "false"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.pinned", "false"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l2", "[{\"type\":\"mock\"}]"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, key, value), KVA_OK);
  static char sentinel; /* kva_runtime_start must overwrite it: NULL on failure */
  kva_runtime *rt = (kva_runtime *)&sentinel;
  int rc = kva_runtime_start(c, &rt);
  kva_config_free(c);
  if (rc == KVA_OK)
    kva_runtime_shutdown(rt);
  else
    ck_assert_ptr_null(rt);
  return rc;
}

/* Keys fixture_key(ids[i]), for the caller to free. */
static kva_key *keys_of(const uint64_t *ids, size_t n) {
  kva_key *k = calloc(n, sizeof(*k));
  ck_assert_ptr_nonnull(k);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  return k;
}

/* ids[i] = first + i; the range helpers' ids live on the stack. */
#define RANGE_MAX 256u
static void range_ids(uint64_t *ids, uint64_t first, size_t n) {
  ck_assert_uint_le(n, RANGE_MAX);
  for (size_t i = 0; i < n; i++) ids[i] = first + i;
}

void l2_fill(void *p, size_t len, uint64_t id, uint32_t v) {
  uint8_t *b = p;
  for (size_t o = 0; o < len; o++) b[o] = l2_pattern(id, v, o);
}

bool l2_matches(const void *p, size_t len, uint64_t id, uint32_t v) {
  const uint8_t *b = p;
  for (size_t o = 0; o < len; o++)
    if (b[o] != l2_pattern(id, v, o)) return false;
  return true;
}

/* Reserves keys ids[] (temporary ones through L1 itself: the facade has
 * no such flag), fills them with version v, finishes them. */
static void write_keys(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                       uint32_t v, kva_write_mode mode, bool temporary) {
  kva_key *k = keys_of(ids, n);
  kva_buf *b = calloc(n, sizeof(*b));
  int *st = calloc(n, sizeof(*st));
  ck_assert(b && st);
  if (temporary) {
    l1_req r = {
        .keys = k, .n = n, .layout = l, .mode = mode, .temporary = 1, .bufs = b, .status = st};
    ck_assert_int_eq(storage_call(s, L1_RESERVE_WRITE, &r), (int)n);
  } else {
    ck_assert_int_eq(kva_reserve_write(s, k, n, l, mode, b, st), (int)n);
  }
  for (size_t i = 0; i < n; i++) l2_fill(b[i].ptr, b[i].len, ids[i], v);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), (int)n);
  free(k);
  free(b);
  free(st);
}

void l2_write(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l, uint32_t v) {
  write_keys(s, ids, n, l, v, KVA_WRITE_NEW, false);
}

void l2_write_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l, uint32_t v) {
  uint64_t ids[RANGE_MAX];
  range_ids(ids, first, n);
  l2_write(s, ids, n, l, v);
}

void l2_rewrite(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l, uint32_t v) {
  write_keys(s, ids, n, l, v, KVA_WRITE_UPDATE, false);
}

void l2_flush(kva_storage *s) {
  ck_assert_int_eq(kva_flush(s, 10000), KVA_OK);
}

/* Sends one request pointer to a tier and waits for its reply. */
static void ask(kva_storage *s, uint32_t tier, uint32_t type, kva_l2_req *r) {
  kva_port *port = kva_port_open(s->rt, "l2_client");
  ck_assert_ptr_nonnull(port);
  ck_assert_int_eq(kva_send(l2_tier_actor(s, tier), type, &r, sizeof(r), kva_port_actor(port), 7),
                   0);
  kva_msg m = fixture_recv(port, NULL, 0, 10000);
  ck_assert_uint_eq(m.type, KVA_L2_DONE);
  ck_assert_uint_eq(m.tag, 7);
  kva_port_close(port);
}

void l2_seed(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n, const kva_layout *l,
             uint32_t v) {
  size_t bytes = kva_layout_bytes(l);
  kva_key *k = keys_of(ids, n);
  kva_buf *b = calloc(n, sizeof(*b));
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < n; i++) {
    b[i] = (kva_buf){malloc(bytes), bytes};
    ck_assert_ptr_nonnull(b[i].ptr);
    l2_fill(b[i].ptr, bytes, ids[i], v);
  }
  kva_l2_req r = {.keys = k, .n = n, .layout = l, .bufs = b};
  ask(s, tier, KVA_L2_STORE, &r);
  ck_assert_int_eq(r.result, KVA_OK);
  for (size_t i = 0; i < n; i++) free(b[i].ptr);
  free(k);
  free(b);
}

void l2_seed_range(kva_storage *s, uint32_t tier, uint64_t first, size_t n, const kva_layout *l) {
  uint64_t ids[RANGE_MAX];
  range_ids(ids, first, n);
  l2_seed(s, tier, ids, n, l, 0);
}

void l2_seed_tiers(kva_storage *s, uint32_t ntiers, const uint8_t *held, const kva_layout *l) {
  for (uint32_t t = 0; t < ntiers; t++)
    for (uint64_t i = 0; i < 8; i++) {
      if (!(held[t] >> i & 1)) continue;
      uint32_t lower = 0;
      for (uint32_t u = 0; u < t; u++) lower |= held[u];
      l2_seed(s, t, &i, 1, l, (lower >> i & 1) ? 9 : 0);
    }
}

kva_l2_stats l2_stats(kva_storage *s, uint32_t tier) {
  kva_l2_stats st;
  memset(&st, 0, sizeof(st));
  kva_l2_req r = {.stats = &st};
  ask(s, tier, KVA_L2_STATS, &r);
  ck_assert_int_eq(r.result, KVA_OK);
  return st;
}

void l2_control(kva_storage *s, uint32_t tier, const mock_control *c) {
  kva_port *port = kva_port_open(s->rt, "l2_client");
  ck_assert_ptr_nonnull(port);
  ck_assert_int_eq(
      kva_send(l2_tier_actor(s, tier), MOCK_CONTROL, c, sizeof(*c), kva_port_actor(port), 9), 0);
  kva_msg m = fixture_recv(port, NULL, 0, 10000);
  ck_assert_uint_eq(m.tag, 9);
  kva_port_close(port);
}

/* Sets the keys whose loads (or stores) fail; n = 0 clears the list. */
static void fail_keys(kva_storage *s, uint32_t tier, bool loads, const uint64_t *ids, size_t n) {
  mock_control c;
  memset(&c, 0, sizeof(c));
  ck_assert_uint_le(n, MOCK_FAIL_KEYS_MAX);
  c.set = loads ? MOCK_SET_FAIL_LOAD_KEYS : MOCK_SET_FAIL_STORE_KEYS;
  kva_key *k = loads ? c.fail_load : c.fail_store;
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  if (loads)
    c.nfail_load = (uint32_t)n;
  else
    c.nfail_store = (uint32_t)n;
  l2_control(s, tier, &c);
}

void l2_fail_loads(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n) {
  fail_keys(s, tier, true, ids, n);
}

void l2_set_down(kva_storage *s, uint32_t tier, bool down) {
  l2_control(s, tier, &(mock_control){.set = MOCK_SET_DOWN, .down = down});
}

/* Unlocks are fire and forget; a STATS request sent after them from a
 * port still may overtake the controllers' own UNLOCKs, so retry. */
void l2_assert_accounted(kva_storage *s) {
  l2_flush(s);
  for (uint32_t t = 0; t < s->tiers.n; t++) {
    kva_l2_tier_keys k;
    ck_assert_int_eq(kva_l2_get_tier_keys(s, s->tiers.t[t].name, &k), KVA_OK);
    uint64_t ended = k.stored + k.coalesced + k.bypassed + k.frozen + k.gone + k.unavailable +
                     k.failed + k.dropped;
    ck_assert_msg(k.written == ended,
                  "tier %s: %llu keys written, %llu accounted for (stored %llu, coalesced %llu, "
                  "bypassed %llu, frozen %llu, gone %llu, unavailable %llu, failed %llu, "
                  "dropped %llu)",
                  s->tiers.t[t].name, (unsigned long long)k.written, (unsigned long long)ended,
                  (unsigned long long)k.stored, (unsigned long long)k.coalesced,
                  (unsigned long long)k.bypassed, (unsigned long long)k.frozen,
                  (unsigned long long)k.gone, (unsigned long long)k.unavailable,
                  (unsigned long long)k.failed, (unsigned long long)k.dropped);
  }
}

void l2_assert_unlocked(kva_storage *s) {
  for (uint32_t t = 0; t < s->tiers.n; t++) {
    uint64_t deadline = fixture_now_ns() + 5000000000ull, locked;
    while ((locked = l2_stats(s, t).keys_locked) != 0 && fixture_now_ns() < deadline)
      if (kva_runtime_run_until_idle(s->rt) == KVA_ENOTSUP) l2_sleep_ms(1);
    ck_assert_msg(locked == 0, "tier %u holds %lu locks", t, (unsigned long)locked);
  }
}

size_t l2_prefetch(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                   uint32_t extra) {
  return l2_wait(s, l2_submit(s, ids, n, l, extra));
}

size_t l2_prefetch_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l) {
  uint64_t ids[RANGE_MAX];
  range_ids(ids, first, n);
  return l2_prefetch(s, ids, n, l, 0);
}

void l2_read_release(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, uint32_t extra) {
  kva_key *k = keys_of(ids, n);
  kva_buf *b = calloc(n, sizeof(*b));
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(kva_read_prefetched(s, k, n, b), KVA_OK);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(l2_matches(b[i].ptr, b[i].len, ids[i], v), "key %lu: wrong bytes",
                  (unsigned long)ids[i]);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, n, extra), (int)n);
  free(k);
  free(b);
}

void l2_read_release_range(kva_storage *s, uint64_t first, size_t n, uint32_t v) {
  uint64_t ids[RANGE_MAX];
  range_ids(ids, first, n);
  l2_read_release(s, ids, n, v, 0);
}

int l2_l1_state(kva_storage *s, uint64_t id) {
  kva_key k = fixture_key(id);
  int st = 0;
  l1_req r = {.keys = &k, .n = 1, .status = &st};
  ck_assert_int_eq(storage_call(s, L1_INSPECT, &r), KVA_OK);
  return st;
}

void l2_expect_states(kva_storage *s, uint64_t first, size_t n, int want) {
  for (uint64_t i = first; i < first + n; i++) {
    int st = l2_l1_state(s, i);
    ck_assert_msg(st == want, "key %lu: L1 state %#x, want %#x", (unsigned long)i, (unsigned)st,
                  (unsigned)want);
  }
}

kva_tier_hits l2_lookup_range(kva_storage *s, uint64_t first, size_t n, int pin) {
  kva_key k[16];
  ck_assert_uint_le(n, 16);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(first + i);
  kva_tier_hits h;
  ck_assert_int_eq(kva_lookup(s, k, n, pin, &h), KVA_OK);
  return h;
}

void l2_reserve(kva_storage *s, uint64_t id, const kva_layout *l) {
  kva_key k = fixture_key(id);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, l, KVA_WRITE_NEW, &b, &st), 1);
}

int l2_finish_one(kva_storage *s, uint64_t id) {
  kva_key k = fixture_key(id);
  int st = -1;
  int rc = kva_finish_write(s, &k, 1, &st);
  ck_assert_int_eq(rc, st == KVA_OK);
  return st;
}

int l2_delete_one(kva_storage *s, uint64_t id, int force) {
  kva_key k = fixture_key(id);
  int st = -1;
  int rc = kva_delete(s, &k, 1, force, &st);
  ck_assert_int_eq(rc, st == KVA_OK);
  return st;
}

/* ---- added for the store / lookup / modes suites ------------------------ */

void l2_fail_stores(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n) {
  fail_keys(s, tier, false, ids, n);
}

void l2_set_latency(kva_storage *s, uint32_t tier, uint64_t latency_us) {
  l2_control(s, tier, &(mock_control){.set = MOCK_SET_LATENCY, .latency_us = latency_us});
}

size_t l2_lock(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n) {
  kva_key *k = keys_of(ids, n);
  uint8_t *bits = calloc((n + 7) / 8, 1);
  ck_assert_ptr_nonnull(bits);
  kva_l2_req r = {.keys = k, .n = n, .bits = bits};
  ask(s, tier, KVA_L2_LOOKUP_AND_LOCK, &r);
  ck_assert_int_eq(r.result, KVA_OK);
  size_t found = 0;
  for (size_t i = 0; i < n; i++) found += (size_t)kva_bit_get(bits, i);
  free(k);
  free(bits);
  return found;
}

void l2_unlock(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n) {
  kva_key *k = keys_of(ids, n);
  ck_assert_int_eq(
      kva_send(l2_tier_actor(s, tier), KVA_L2_UNLOCK, k, (uint32_t)(n * sizeof(*k)), NULL, 0), 0);
  free(k);
}

void l2_write_temporary(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l) {
  write_keys(s, ids, n, l, 0, KVA_WRITE_NEW, true);
}

kva_storage_stats l2_storage_stats(kva_storage *s) {
  kva_storage_stats st;
  memset(&st, 0, sizeof(st));
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  return st;
}

bool l2_wait_until(bool (*pred)(kva_storage *s, void *arg), kva_storage *s, void *arg,
                   int timeout_ms) {
  uint64_t deadline = fixture_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  bool ok;
  while (!(ok = pred(s, arg)) && fixture_now_ns() < deadline) l2_sleep_ms(1);
  return ok;
}

void l2_sleep_ms(unsigned ms) {
  nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* ---- added for the prefetch suites --------------------------------------- */

void l2_write_l1_only(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                      uint32_t v) {
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  l2_write(s, ids, n, l, v);
  l2_flush(s); /* the store controller skipped them */
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
}

kva_prefetch *l2_submit(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                        uint32_t extra) {
  kva_key *k = keys_of(ids, n);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, l, extra, &h), KVA_OK);
  free(k);
  return h;
}

size_t l2_wait(kva_storage *s, kva_prefetch *h) {
  size_t hits = 0;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
  return hits;
}

int l2_readers(kva_storage *s, uint64_t id) {
  int st = l2_l1_state(s, id);
  return st == L1_ABSENT ? -1 : st & (L1_WRITE_LOCKED - 1);
}

/* ---- captured log lines ------------------------------------------------- */

#include <pthread.h>

#define LOG_CAP (64u * 1024u)

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[LOG_CAP];
static size_t log_len, log_lost;

/* Called under the library's log lock; log_mu orders it against readers
 * on the test thread while workers still run. */
static void log_capture(int level, const char *msg, void *arg) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  pthread_mutex_lock(&log_mu);
  int w = snprintf(log_buf + log_len, LOG_CAP - log_len, "%s: %s\n", names[level & 3], msg);
  if (w < 0 || (size_t)w >= LOG_CAP - log_len) {
    log_buf[log_len] = '\0';
    log_lost++;
  } else {
    log_len += (size_t)w;
  }
  pthread_mutex_unlock(&log_mu);
}

void l2_log_start(int max_level) {
  pthread_mutex_lock(&log_mu);
  log_len = log_lost = 0;
  log_buf[0] = '\0';
  pthread_mutex_unlock(&log_mu);
  kva_log_set(log_capture, NULL, max_level);
}

void l2_log_stop(void) {
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
}

size_t l2_log_count(const char *needle) {
  size_t n = 0;
  pthread_mutex_lock(&log_mu);
  for (const char *line = log_buf; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (!needle) {
      n++;
    } else {
      size_t nl = strlen(needle);
      for (size_t o = 0; o + nl <= len; o++)
        if (memcmp(line + o, needle, nl) == 0) {
          n++;
          break;
        }
    }
    line += len + (end ? 1 : 0);
  }
  pthread_mutex_unlock(&log_mu);
  return n;
}

const char *l2_log_text(void) {
  static char copy[LOG_CAP];
  pthread_mutex_lock(&log_mu);
  memcpy(copy, log_buf, log_len + 1);
  pthread_mutex_unlock(&log_mu);
  return copy;
}

size_t l2_log_lock_warnings(void) {
  static const char *needles[] = {
      "l1: stopping with",        /* L1 manager on_stop */
      "prefetch: stopping with",  /* prefetch controller on_stop */
      "store: stopping with",     /* store controller on_stop */
      "lookup locks still held",  /* mock on_stop */
      "locks stay",               /* storage_drain gave up */
      "stay locked",              /* an UNLOCK that could not be sent */
      "no session left to drain", /* storage_drain could not start */
  };
  size_t n = 0;
  for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++) n += l2_log_count(needles[i]);
  return n;
}

/* ---- added for the disk suites ------------------------------------------- */

static void disk_tiers(char *out, size_t cap, const char *disk_json) {
  snprintf(out, cap, "l2=[{\"type\":\"disk\"%s%s}]", disk_json && *disk_json ? "," : "",
           disk_json ? disk_json : "");
}

kva_runtime *l2_start_disk(int workers, uint64_t l1_bytes, const char *disk_json, ...) {
  char tiers[2048];
  disk_tiers(tiers, sizeof(tiers), disk_json);
  const char *kv[16];
  size_t n = 0;
  va_list ap;
  va_start(ap, disk_json);
  for (const char *s; n < 15 && (s = va_arg(ap, const char *)) != NULL;) kv[n++] = s;
  va_end(ap);
  while (n < 15) kv[n++] = NULL;
  return fixture_storage(workers, l1_bytes, tiers, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5], kv[6],
                         kv[7], kv[8], kv[9], kv[10], kv[11], kv[12], kv[13], NULL);
}

int l2_try_start_disk(int workers, const char *disk_json, kva_runtime **rt) {
  char tiers[2048], w[32];
  disk_tiers(tiers, sizeof(tiers), disk_json);
  snprintf(w, sizeof(w), "%d", workers);
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(kva_config_set(c, "runtime.workers", w), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.size_bytes", "16777216"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.hugepages", "false"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.pinned", "false"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l2", tiers + 3), KVA_OK);
  *rt = NULL;
  int rc = kva_runtime_start(c, rt);
  kva_config_free(c);
  if (rc != KVA_OK) ck_assert_ptr_null(*rt);
  return rc;
}

int l2_ask(kva_storage *s, uint32_t tier, uint32_t type, kva_l2_req *r) {
  ask(s, tier, type, r);
  return r->result;
}
