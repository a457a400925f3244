/*
 * fuzz_disk_header.c — libFuzzer target for the disk tier's slot header
 * (l2/disk_format.c), which the redis tier's values carry too, and for the
 * key functions every header's key goes through once it is read back
 * (l1/key.c: printed in warnings and by `kvconf fsck`, hashed, compared).
 *
 * Input: [flags][header: 168 bytes][payload: the rest]. Flag 1 makes the
 * header describe the payload (length, payload_sum), flag 2 sets magic and
 * version, flag 4 seals it: together they take the fuzzer past the
 * checksums. Checked, for any bytes:
 *  - object_header_valid is exactly magic + version + own checksum;
 *  - object_header_matches the header's own key, layout and payload (all of
 *    it, or all but its last byte) exactly when it is valid, names that
 *    length and the payload's xxh3-64 is its payload_sum; never another
 *    key (kv_rank changed);
 *  - key_format stays inside buffers of any size and terminates them; a
 *    key equals itself; a valid key's normal form (disk_key_normal) equals
 *    it and hashes the same, and is what object_header_init writes;
 *  - a header written by object_header_init for a valid key matches it.
 *
 * Build: bazel build //tests/fuzz:fuzz_disk_header; run: tests/fuzz/run_fuzz.sh.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <xxhash.h>

#include "kvact.h"
#include "common/key.h"
#include "l2/adapters/disk/disk_format.h"
#include "l2/adapters/disk/disk_index.h"
#include "tests/fuzz/fuzz.h"

enum { DESCRIBE = 1, MAGIC = 2, SEAL = 4 };

static void check_format(const kva_key *k) {
  static const size_t caps[] = {1, 2, 8, 70, 80, 160, 200};
  char buf[208];
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
    memset(buf, 'x', sizeof buf);
    key_format(k, buf, caps[i]);
    FUZZ_CHECK(memchr(buf, '\0', caps[i]) != NULL);
    FUZZ_CHECK(buf[caps[i]] == 'x');
  }
  key_format(k, buf, 0); /* writes nothing */
}

static void check_key(const kva_key *k) {
  check_format(k);
  FUZZ_CHECK(key_equal(k, k));
  (void)key_hash(k);
  if (!key_valid(k)) return;
  kva_key n;
  disk_key_normal(k, &n);
  FUZZ_CHECK(key_valid(&n) && key_equal(&n, k) && key_hash(&n) == key_hash(k));
}

static void check_header(const object_header *h, const uint8_t *payload, size_t plen) {
  bool valid = object_header_valid(h);
  FUZZ_CHECK(valid == (h->magic == OBJECT_MAGIC && h->version == OBJECT_VERSION &&
                       h->checksum == XXH3_64bits(h, offsetof(object_header, checksum))));
  for (size_t len = plen > 0 ? plen - 1 : 0; len <= plen; len++) { /* this length, one less */
    bool same = valid && h->length == len && h->payload_sum == XXH3_64bits(payload, len);
    FUZZ_CHECK(object_header_matches(h, &h->key, h->fingerprint, payload, len) == same);
  }
  kva_key other = h->key;
  other.kv_rank ^= 1;
  FUZZ_CHECK(!object_header_matches(h, &other, h->fingerprint, payload, plen));
}

/* What the writer makes of the header's key, fingerprint and the payload. */
static void check_writer(const object_header *h, const uint8_t *payload, size_t plen) {
  if (!key_valid(&h->key)) return;
  object_header g;
  kva_key n;
  object_header_init(&g, &h->key, h->fingerprint, payload, plen, h->seq);
  disk_key_normal(&h->key, &n);
  FUZZ_CHECK(memcmp(&g.key, &n, sizeof n) == 0);
  FUZZ_CHECK(object_header_valid(&g) && g.seq == h->seq && g.length == plen);
  FUZZ_CHECK(object_header_matches(&g, &h->key, h->fingerprint, payload, plen));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size};
  uint8_t flags = fuzz_u8(&in);
  object_header h;
  fuzz_take(&in, &h, sizeof h);
  const uint8_t *payload = in.p;
  size_t plen = in.n;
  if (flags & DESCRIBE) {
    h.length = plen;
    h.payload_sum = object_payload_sum(payload, plen);
  }
  if (flags & MAGIC) {
    h.magic = OBJECT_MAGIC;
    h.version = OBJECT_VERSION;
  }
  if (flags & SEAL) object_header_seal(&h);
  check_key(&h.key);
  check_header(&h, payload, plen);
  check_writer(&h, payload, plen);
  return 0;
}
