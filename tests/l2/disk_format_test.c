/*
 * disk_format_test.c — the disk tier's on-disk format (l2/disk_format.h):
 * magic bytes, slot geometry, superblock and slot header seal/check round
 * trips, every superblock rejection with its text, header mismatches.
 */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvact.h"
#include "common/key.h"
#include "l2/adapters/disk/disk_format.h"

#define MIB (1024u * 1024u)

static kva_key test_key(uint64_t i) {
  kva_key k;
  memset(&k, 0, sizeof k);
  strcpy(k.model, "disk_model");
  k.kv_rank = 3;
  k.group = 7;
  k.hash_len = 8;
  memcpy(k.hash, &i, sizeof i);
  return k;
}

/* A sealed superblock of 1 MiB slots in a 64 MiB file. */
static disk_super test_super(void) {
  disk_super s;
  ck_assert_int_eq(disk_super_init(&s, 64 * MIB, MIB), KVA_OK);
  return s;
}

static const char *super_why(const disk_super *s, uint64_t file_bytes) {
  static char why[256];
  why[0] = '\0';
  ck_assert_int_eq(disk_super_check(s, file_bytes, why, sizeof why), KVA_ECONFIG);
  return why;
}

/* ---- constants and geometry ---- */

START_TEST(magics_are_the_ascii_names_read_little_endian) {
  uint64_t m = DISK_MAGIC, sm = OBJECT_MAGIC;
  ck_assert_mem_eq(&m, "KVACTDSK", 8);
  ck_assert_mem_eq(&sm, "KVASLOT1", 8);
  disk_super s = test_super();
  ck_assert_mem_eq(&s, "KVACTDSK", 8); /* a hexdump of the file shows the name */
}
END_TEST

START_TEST(slot_bytes_add_a_header_block_to_the_rounded_payload) {
  ck_assert_uint_eq(disk_slot_bytes_for(0), DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_bytes_for(1), 2 * DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_bytes_for(DISK_BLOCK), 2 * DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_bytes_for(DISK_BLOCK + 1), 3 * DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_bytes_for(8 * MIB), 8 * MIB + DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_bytes_for(UINT64_MAX), 0);
  ck_assert_uint_eq(disk_slot_capacity(8 * MIB + DISK_BLOCK), 8 * MIB);
  ck_assert_uint_eq(disk_slot_capacity(100), 0);
}
END_TEST

/* The fewest bytes n slots need: superblock, rounded index, slots. */
static uint64_t bytes_needed(uint64_t n, uint64_t slot_bytes) {
  return DISK_INDEX_OFFSET + disk_index_bytes(n) + n * slot_bytes;
}

START_TEST(slot_count_is_the_most_slots_that_fit) {
  const uint64_t sizes[] = {DISK_BLOCK, 2 * DISK_BLOCK, 3 * DISK_BLOCK, 64 * 1024, MIB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint64_t sb = sizes[i];
    for (uint64_t cap = 0; cap < 300 * DISK_BLOCK + 5 * sb; cap += 1531) {
      uint64_t off = 1, n = disk_slot_count(cap, sb, &off);
      if (n == 0) {
        ck_assert_uint_eq(off, 0);
        ck_assert_uint_gt(bytes_needed(1, sb), cap);
        continue;
      }
      ck_assert_uint_le(bytes_needed(n, sb), cap);
      ck_assert_uint_gt(bytes_needed(n + 1, sb), cap);
      ck_assert_uint_eq(off, DISK_INDEX_OFFSET + disk_index_bytes(n));
      ck_assert_uint_eq(off % DISK_BLOCK, 0);
    }
  }
}
END_TEST

START_TEST(slot_count_crosses_an_index_block_boundary) {
  /* 256 entries fill one index block; the 257th needs a second block. */
  uint64_t sb = DISK_BLOCK, off;
  uint64_t cap = DISK_INDEX_OFFSET + DISK_BLOCK + 256 * sb;
  ck_assert_uint_eq(disk_slot_count(cap, sb, &off), 256);
  ck_assert_uint_eq(off, 2 * DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_count(cap + sb, sb, &off), 256); /* no room for index block 2 */
  ck_assert_uint_eq(disk_slot_count(cap + sb + DISK_BLOCK, sb, &off), 257);
  ck_assert_uint_eq(off, 3 * DISK_BLOCK);
}
END_TEST

START_TEST(slot_count_rejects_bad_slot_sizes_and_does_not_overflow) {
  uint64_t off = 1;
  ck_assert_uint_eq(disk_slot_count(64 * MIB, 0, &off), 0);
  ck_assert_uint_eq(off, 0);
  ck_assert_uint_eq(disk_slot_count(64 * MIB, DISK_BLOCK + 1, &off), 0);
  ck_assert_uint_eq(disk_slot_count(64 * MIB, 64 * MIB, &off), 0);
  ck_assert_uint_eq(disk_slot_count(3 * DISK_BLOCK, DISK_BLOCK, &off), 1);
  ck_assert_uint_eq(disk_slot_count(UINT64_MAX, UINT64_MAX - 4095, &off), 0);
  uint64_t n = disk_slot_count(UINT64_MAX, DISK_BLOCK, &off);
  ck_assert_uint_gt(n, 0);
  ck_assert_uint_le(n * DISK_BLOCK, UINT64_MAX - off);
  ck_assert_uint_eq(disk_index_bytes(UINT64_MAX), UINT64_MAX);
}
END_TEST

START_TEST(block_is_zero_sees_any_set_byte) {
  unsigned char b[DISK_BLOCK] = {0};
  ck_assert(disk_block_is_zero(b, sizeof b));
  b[DISK_BLOCK - 1] = 1;
  ck_assert(!disk_block_is_zero(b, sizeof b));
  b[DISK_BLOCK - 1] = 0, b[0] = 0x80;
  ck_assert(!disk_block_is_zero(b, sizeof b));
  ck_assert(disk_block_is_zero(b, 0));
}
END_TEST

/* ---- superblock ---- */

START_TEST(super_init_seals_a_superblock_that_checks) {
  disk_super s = test_super();
  ck_assert_uint_eq(s.magic, DISK_MAGIC);
  ck_assert_uint_eq(s.version, DISK_VERSION);
  ck_assert_uint_eq(s.clean, 0);
  ck_assert_uint_eq(s.nslots, 63);
  ck_assert_uint_eq(s.data_offset, 2 * DISK_BLOCK);
  ck_assert_uint_eq(disk_slot_offset(&s, 2), 2 * DISK_BLOCK + 2 * MIB);
  ck_assert_int_eq(disk_super_check(&s, 64 * MIB, NULL, 0), KVA_OK);
  s.clean = 1, s.seq = 99;
  disk_super_seal(&s);
  ck_assert_int_eq(disk_super_check(&s, 64 * MIB, NULL, 0), KVA_OK);
  disk_super none;
  ck_assert_int_eq(disk_super_init(&none, DISK_BLOCK, MIB), KVA_ECONFIG);
}
END_TEST

START_TEST(super_check_says_not_a_kvact_disk_tier) {
  disk_super s = test_super();
  s.magic = OBJECT_MAGIC;
  disk_super_seal(&s);
  ck_assert_str_eq(super_why(&s, 64 * MIB), "not a kvact disk tier");
  memset(&s, 0, sizeof s);
  ck_assert_str_eq(super_why(&s, 64 * MIB), "not a kvact disk tier");
}
END_TEST

START_TEST(super_check_names_the_version_it_reads) {
  disk_super s = test_super();
  s.version = 2;
  disk_super_seal(&s);
  ck_assert_str_eq(super_why(&s, 64 * MIB), "format version 2, this build reads 1");
}
END_TEST

START_TEST(super_checksum_covers_every_byte_before_it) {
  for (size_t i = 0; i < offsetof(disk_super, checksum); i++) {
    disk_super s = test_super();
    if (i < offsetof(disk_super, clean)) continue; /* magic and version: own messages */
    ((unsigned char *)&s)[i] ^= 0x01;
    ck_assert_str_eq(super_why(&s, 64 * MIB), "superblock checksum mismatch");
  }
  disk_super s = test_super();
  s.checksum ^= 1u << 20;
  ck_assert_str_eq(super_why(&s, 64 * MIB), "superblock checksum mismatch");
}
END_TEST

START_TEST(super_check_rejects_a_clean_flag_other_than_0_or_1) {
  disk_super s = test_super();
  s.clean = 2;
  disk_super_seal(&s);
  ck_assert_str_eq(super_why(&s, 64 * MIB), "superblock clean flag is 2, not 0 or 1");
}
END_TEST

/* A sequence number no writer issues would wrap the next store's below
 * the generation boundary: the superblock is damaged. */
START_TEST(super_check_rejects_a_sequence_number_no_writer_issues) {
  disk_super s = test_super();
  s.seq = DISK_SEQ_LIMIT - 1;
  disk_super_seal(&s);
  ck_assert_int_eq(disk_super_check(&s, 64 * MIB, NULL, 0), KVA_OK);
  s.seq = UINT64_MAX;
  disk_super_seal(&s);
  ck_assert_str_eq(super_why(&s, 64 * MIB),
                   "superblock sequence number 18446744073709551615 is past any a writer issues");
}
END_TEST

/* Seals s with one geometry field changed and returns the check's text. */
static const char *geometry_why(uint64_t nslots, uint64_t slot_bytes, uint64_t data_offset,
                                uint64_t file_bytes) {
  disk_super s = test_super();
  s.nslots = nslots, s.slot_bytes = slot_bytes, s.data_offset = data_offset;
  disk_super_seal(&s);
  return super_why(&s, file_bytes);
}

START_TEST(super_check_rejects_geometry_that_does_not_fit_the_file) {
  const uint64_t off = 2 * DISK_BLOCK;
  ck_assert_str_eq(geometry_why(63, MIB, off, 32 * MIB),
                   "geometry does not fit a file of 33554432 bytes "
                   "(nslots 63, slot_bytes 1048576, data_offset 8192)");
  ck_assert_str_eq(geometry_why(63, MIB, off, off + 63 * MIB - 1),
                   "geometry does not fit a file of 66068479 bytes "
                   "(nslots 63, slot_bytes 1048576, data_offset 8192)");
  ck_assert_int_eq(strncmp(geometry_why(0, MIB, off, 64 * MIB), "geometry does not fit", 21), 0);
  ck_assert_int_eq(strncmp(geometry_why(63, MIB + 1, off, 64 * MIB), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(63, 0, off, 64 * MIB), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(63, MIB, off + 1, 64 * MIB), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(63, MIB, DISK_BLOCK, 64 * MIB), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(257, DISK_BLOCK, off, 64 * MIB), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(UINT64_MAX, MIB, off, UINT64_MAX), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(2, UINT64_MAX - 4095, off, UINT64_MAX), "geometry", 8), 0);
  ck_assert_int_eq(strncmp(geometry_why(1, MIB, UINT64_MAX - 4095, UINT64_MAX), "geometry", 8), 0);
  disk_super s = test_super(); /* exactly full is fine, and so is a larger file */
  ck_assert_int_eq(disk_super_check(&s, off + 63 * MIB, NULL, 0), KVA_OK);
  ck_assert_int_eq(disk_super_check(&s, UINT64_MAX, NULL, 0), KVA_OK);
}
END_TEST

START_TEST(super_check_truncates_its_reason_to_the_buffer) {
  disk_super s = test_super();
  char why[8];
  s.version = 2;
  disk_super_seal(&s);
  ck_assert_int_eq(disk_super_check(&s, 64 * MIB, why, sizeof why), KVA_ECONFIG);
  ck_assert_str_eq(why, "format ");
}
END_TEST

/* ---- slot headers ---- */

static unsigned char payload[3 * DISK_BLOCK + 17];

static object_header test_header(void) {
  object_header h;
  kva_key k = test_key(42);
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)(i * 31 + 7);
  object_header_init(&h, &k, 0xf1f2f3f4u, payload, sizeof payload, 5);
  return h;
}

START_TEST(header_init_seals_a_header_that_matches_its_store) {
  object_header h = test_header();
  kva_key k = test_key(42);
  ck_assert(object_header_valid(&h));
  ck_assert_uint_eq(h.seq, 5);
  ck_assert_uint_eq(h.payload_sum, object_payload_sum(payload, sizeof payload));
  ck_assert(object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
  ck_assert_uint_eq(key_hash(&h.key), key_hash(&k));
}
END_TEST

START_TEST(header_seal_after_a_change_revalidates) {
  object_header h = test_header();
  h.seq = 6;
  ck_assert(!object_header_valid(&h));
  object_header_seal(&h);
  ck_assert(object_header_valid(&h));
}
END_TEST

START_TEST(header_checksum_covers_every_byte_before_it) {
  for (size_t i = 0; i <= offsetof(object_header, checksum) + 7; i++) {
    object_header h = test_header();
    ((unsigned char *)&h)[i] ^= 0x10;
    ck_assert_msg(!object_header_valid(&h), "byte %zu not covered", i);
  }
}
END_TEST

START_TEST(header_with_another_magic_or_version_is_not_valid) {
  object_header h = test_header();
  h.magic = DISK_MAGIC;
  object_header_seal(&h);
  ck_assert(!object_header_valid(&h));
  h = test_header();
  h.version = 2;
  object_header_seal(&h);
  ck_assert(!object_header_valid(&h));
  memset(&h, 0, sizeof h);
  ck_assert(!object_header_valid(&h));
}
END_TEST

START_TEST(header_does_not_match_another_key) {
  object_header h = test_header();
  kva_key k = test_key(43);
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
  k = test_key(42), k.kv_rank = 4;
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
  k = test_key(42), k.group = 8;
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
  k = test_key(42), strcpy(k.model, "disk_modem");
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
  k = test_key(42), k.hash_len = 9;
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
}
END_TEST

START_TEST(header_does_not_match_another_fingerprint_or_length) {
  object_header h = test_header();
  kva_key k = test_key(42);
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f5u, payload, sizeof payload));
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload - 1));
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, 0));
}
END_TEST

START_TEST(header_does_not_match_a_payload_with_one_byte_flipped) {
  object_header h = test_header();
  kva_key k = test_key(42);
  const size_t at[] = {0, DISK_BLOCK, sizeof payload - 1};
  for (size_t i = 0; i < 3; i++) {
    payload[at[i]] ^= 0x04;
    ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
    payload[at[i]] ^= 0x04;
    ck_assert(object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
  }
}
END_TEST

START_TEST(header_that_is_not_intact_matches_nothing) {
  object_header h = test_header();
  kva_key k = test_key(42);
  h.parent = 1; /* every field still describes the store, the checksum does not */
  ck_assert(!object_header_matches(&h, &k, 0xf1f2f3f4u, payload, sizeof payload));
}
END_TEST

START_TEST(header_bytes_ignore_the_insignificant_key_bytes) {
  kva_key a = test_key(9), b = test_key(9);
  memset(b.model + 11, 0xee, sizeof b.model - 11); /* past the NUL */
  memset(b.hash + 8, 0xdd, sizeof b.hash - 8);     /* past hash_len */
  object_header ha, hb;
  memset(&hb, 0xcc, sizeof hb); /* stack garbage must not reach the disk */
  object_header_init(&ha, &a, 1, "x", 1, 1);
  object_header_init(&hb, &b, 1, "x", 1, 1);
  ck_assert_mem_eq(&ha, &hb, sizeof ha);
  ck_assert(object_header_matches(&ha, &b, 1, "x", 1));
  ck_assert(object_header_valid(&ha));
}
END_TEST

START_TEST(empty_payload_has_a_sum_and_matches) {
  object_header h;
  kva_key k = test_key(1);
  object_header_init(&h, &k, 2, NULL, 0, 1);
  ck_assert(object_header_matches(&h, &k, 2, NULL, 0));
  ck_assert(!object_header_matches(&h, &k, 2, "a", 1));
}
END_TEST

static TCase *tcase_of(const char *name, const TTest **tests, size_t n) {
  TCase *tc = tcase_create(name);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  return tc;
}

Suite *kva_test_suite(void) {
  Suite *s = suite_create("disk_format");
  const TTest *geometry[] = {
      magics_are_the_ascii_names_read_little_endian,
      slot_bytes_add_a_header_block_to_the_rounded_payload,
      slot_count_is_the_most_slots_that_fit,
      slot_count_crosses_an_index_block_boundary,
      slot_count_rejects_bad_slot_sizes_and_does_not_overflow,
      block_is_zero_sees_any_set_byte,
  };
  const TTest *super[] = {
      super_init_seals_a_superblock_that_checks,
      super_check_says_not_a_kvact_disk_tier,
      super_check_names_the_version_it_reads,
      super_checksum_covers_every_byte_before_it,
      super_check_rejects_a_clean_flag_other_than_0_or_1,
      super_check_rejects_a_sequence_number_no_writer_issues,
      super_check_rejects_geometry_that_does_not_fit_the_file,
      super_check_truncates_its_reason_to_the_buffer,
  };
  const TTest *header[] = {
      header_init_seals_a_header_that_matches_its_store,
      header_seal_after_a_change_revalidates,
      header_checksum_covers_every_byte_before_it,
      header_with_another_magic_or_version_is_not_valid,
      header_does_not_match_another_key,
      header_does_not_match_another_fingerprint_or_length,
      header_does_not_match_a_payload_with_one_byte_flipped,
      header_that_is_not_intact_matches_nothing,
      header_bytes_ignore_the_insignificant_key_bytes,
      empty_payload_has_a_sum_and_matches,
  };
  suite_add_tcase(s, tcase_of("geometry", geometry, sizeof geometry / sizeof geometry[0]));
  suite_add_tcase(s, tcase_of("superblock", super, sizeof super / sizeof super[0]));
  suite_add_tcase(s, tcase_of("header", header, sizeof header / sizeof header[0]));
  return s;
}
