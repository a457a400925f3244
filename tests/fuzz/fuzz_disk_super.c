/*
 * fuzz_disk_super.c — libFuzzer target for the disk tier's superblock
 * (l2/disk_format.c): the reader, disk_super_check, against an oracle
 * written here in 128-bit arithmetic, and the writer, disk_super_init,
 * whose every superblock the reader must accept.
 *
 * Input: [flags][file_bytes: u64][superblock: 64 bytes], zeros past the
 * end. Flag 1 seals the superblock first and flag 2 sets its magic and
 * version, so the fuzzer gets past them to the geometry. Checked:
 *  - the check says OK exactly when the oracle does (magic, version,
 *    checksum, clean 0 or 1, slots block aligned and inside the file after
 *    an index region big enough for them), and a refusal always says why,
 *    terminated, in a buffer of any size;
 *  - disk_super_init over (file_bytes, slot_bytes) gives a superblock the
 *    check accepts, with as many slots as fit and not one more.
 *
 * Build: bazel build //tests/fuzz:fuzz_disk_super; run: tests/fuzz/run_fuzz.sh.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <xxhash.h>

#include "kvact.h"
#include "l2/adapters/disk/disk_format.h"
#include "tests/fuzz/fuzz.h"

typedef unsigned __int128 u128;

enum { SEAL = 1, MAGIC = 2 };

/* Whether n slots of slot_bytes fit a file of file_bytes: superblock,
 * index region rounded up to a block, then the slots at data_offset. */
static bool oracle_fits(u128 n, u128 slot_bytes, u128 data_offset, u128 file_bytes) {
  u128 index = (n * sizeof(disk_index_entry) + DISK_BLOCK - 1) / DISK_BLOCK * DISK_BLOCK;
  return DISK_INDEX_OFFSET + index <= data_offset && data_offset + n * slot_bytes <= file_bytes;
}

static bool oracle_super(const disk_super *s, uint64_t file_bytes) {
  if (s->magic != DISK_MAGIC || s->version != DISK_VERSION || s->clean > 1) return false;
  if (s->seq >= (UINT64_C(1) << 62)) return false;
  if (s->checksum != XXH3_64bits(s, offsetof(disk_super, checksum))) return false;
  if (s->slot_bytes < DISK_BLOCK || s->slot_bytes % DISK_BLOCK || s->data_offset % DISK_BLOCK)
    return false;
  return s->nslots > 0 && oracle_fits(s->nslots, s->slot_bytes, s->data_offset, file_bytes);
}

static void check_reader(const disk_super *s, uint64_t file_bytes) {
  char why[256], tiny[1] = {'x'};
  memset(why, 'x', sizeof why);
  int rc = disk_super_check(s, file_bytes, why, sizeof why);
  FUZZ_CHECK(rc == KVA_OK || rc == KVA_ECONFIG);
  FUZZ_CHECK((rc == KVA_OK) == oracle_super(s, file_bytes));
  FUZZ_CHECK(disk_super_check(s, file_bytes, NULL, 0) == rc);
  FUZZ_CHECK(disk_super_check(s, file_bytes, tiny, sizeof tiny) == rc);
  if (rc == KVA_OK) return;
  FUZZ_CHECK(memchr(why, '\0', sizeof why) != NULL && why[0] != '\0');
  FUZZ_CHECK(tiny[0] == '\0');
}

static void check_writer(uint64_t capacity, uint64_t slot_bytes) {
  disk_super s;
  uint64_t data_offset;
  uint64_t n = disk_slot_count(capacity, slot_bytes, &data_offset);
  int rc = disk_super_init(&s, capacity, slot_bytes);
  FUZZ_CHECK((rc == KVA_OK) == (n > 0) && s.nslots == n);
  bool valid = slot_bytes >= DISK_BLOCK && slot_bytes % DISK_BLOCK == 0;
  if (n > 0) {
    FUZZ_CHECK(valid && s.data_offset == data_offset);
    FUZZ_CHECK(data_offset == DISK_INDEX_OFFSET + disk_index_bytes(n));
    FUZZ_CHECK(disk_super_check(&s, capacity, NULL, 0) == KVA_OK);
  }
  if (valid) { /* one slot more (and the index it needs) does not fit */
    u128 more = (u128)n + 1;
    u128 index = (more * sizeof(disk_index_entry) + DISK_BLOCK - 1) / DISK_BLOCK * DISK_BLOCK;
    FUZZ_CHECK(!oracle_fits(more, slot_bytes, DISK_INDEX_OFFSET + index, capacity));
  }
}

static void check_slot_bytes(uint64_t payload) {
  uint64_t b = disk_slot_bytes_for(payload);
  if (b == 0) return; /* too big to have a slot */
  FUZZ_CHECK(b % DISK_BLOCK == 0 && b >= DISK_BLOCK);
  FUZZ_CHECK(disk_slot_capacity(b) >= payload && disk_slot_capacity(b) - payload < DISK_BLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size};
  uint8_t flags = fuzz_u8(&in);
  uint64_t file_bytes = fuzz_u64(&in);
  disk_super s;
  fuzz_take(&in, &s, sizeof s);
  if (flags & MAGIC) {
    s.magic = DISK_MAGIC;
    s.version = DISK_VERSION;
  }
  if (flags & SEAL) disk_super_seal(&s);
  check_reader(&s, file_bytes);
  check_writer(file_bytes, s.slot_bytes);
  check_slot_bytes(s.nslots);
  return 0;
}
