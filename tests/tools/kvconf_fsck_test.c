/*
 * kvconf_fsck_test.c — `kvconf fsck PATH [--repair]` on disk tiers built by
 * hand with l2/disk_format.h: a clean tier, torn and mismatched slots, a
 * stale index, bad superblocks; repair leaves a tier a second fsck passes.
 * Then on tiers a runtime wrote: a clean stop fscks clean although keys
 * stored twice left superseded copies (and with persist = false), damage
 * still counts, and a repair holds across the next start and stop.
 * Usage: kvconf_fsck_test KVCONF
 */
#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvact.h"
#include "common/key.h"
#include "l2/adapters/disk/disk_format.h"
#include "tests/l2/l2_disk_test.h"
#include "tests/support/cli.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define PAYLOAD (3 * DISK_BLOCK + 100) /* 5-block slots: 20480 bytes */
#define SLOTS 16
#define STORED 10 /* slots 0..9 hold key i with seq i + 1; 10..15 are free */

static const char *kvconf;
static char tier[512], out_path[512], err_path[512];

/* kvconf fsck [--repair] on the tier; stdout and stderr to out/err. */
static int fsck(const char *extra) {
  return cli_run("%s fsck %s %s > %s 2> %s", kvconf, tier, extra, out_path, err_path);
}

#define assert_out_has(s) CLI_ASSERT_HAS(out_path, s)
#define assert_err_has(s) CLI_ASSERT_HAS(err_path, s)

static kva_key key_of(uint64_t i) {
  kva_key k;
  memset(&k, 0, sizeof k);
  strcpy(k.model, "fsck_model");
  k.hash_len = 8;
  memcpy(k.hash, &i, sizeof i);
  return k;
}

static void pwrite_all(int fd, const void *buf, size_t len, uint64_t off) {
  ck_assert_int_eq(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
}

static void pread_all(int fd, void *buf, size_t len, uint64_t off) {
  ck_assert_int_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
}

static disk_super read_super(int fd) {
  disk_super s;
  pread_all(fd, &s, sizeof s, 0);
  return s;
}

static void write_super(int fd, disk_super *s) {
  disk_super_seal(s);
  pwrite_all(fd, s, sizeof *s, 0);
}

/* A clean tier of SLOTS slots under TEST_TMPDIR/name, slots [0, STORED)
 * stored, index and seq current; returns it open read-write. */
/* tier, out_path and err_path for a test called name. */
static void set_paths(const char *name) {
  const char *d = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  snprintf(tier, sizeof tier, "%s/%s.tier", d, name);
  snprintf(out_path, sizeof out_path, "%s/%s.out", d, name);
  snprintf(err_path, sizeof err_path, "%s/%s.err", d, name);
}

static int build_tier(const char *name) {
  set_paths(name);
  uint64_t sb = disk_slot_bytes_for(PAYLOAD), off;
  uint64_t cap = DISK_INDEX_OFFSET + DISK_BLOCK + SLOTS * sb;
  ck_assert_uint_eq(disk_slot_count(cap, sb, &off), SLOTS);
  int fd = open(tier, O_RDWR | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)cap), 0);
  disk_super s;
  ck_assert_int_eq(disk_super_init(&s, cap, sb), KVA_OK);
  disk_index_entry index[SLOTS] = {{0, 0}};
  static unsigned char payload[PAYLOAD];
  for (uint64_t i = 0; i < STORED; i++) {
    object_header h;
    kva_key k = key_of(i);
    memset(payload, (int)i + 1, sizeof payload);
    object_header_init(&h, &k, 77, payload, sizeof payload, i + 1);
    pwrite_all(fd, payload, sizeof payload, disk_slot_offset(&s, i) + DISK_BLOCK);
    pwrite_all(fd, &h, sizeof h, disk_slot_offset(&s, i));
    index[i] = (disk_index_entry){i + 1, key_hash(&k)};
  }
  pwrite_all(fd, index, sizeof index, DISK_INDEX_OFFSET);
  s.seq = STORED, s.clean = 1;
  write_super(fd, &s);
  return fd;
}

static void flip(int fd, uint64_t off) {
  unsigned char b;
  pread_all(fd, &b, 1, off);
  b ^= 0x40;
  pwrite_all(fd, &b, 1, off);
}

/* Repairs, expecting `dropped` lines, then a second fsck finds it clean. */
static void repair_then_clean(int fd, const char *dropped, const char *summary) {
  ck_assert_int_eq(fsck("--repair"), 0);
  assert_out_has(dropped);
  assert_out_has("repaired: dropped 1 slots, index rebuilt from 9 valid slots, seq 10, clean");
  ck_assert_int_eq(fsck(""), 0);
  assert_out_has(summary);
  disk_super s = read_super(fd);
  ck_assert_int_eq(disk_super_check(&s, (uint64_t)lseek(fd, 0, SEEK_END), NULL, 0), KVA_OK);
  ck_assert_uint_eq(s.clean, 1);
  ck_assert_uint_eq(s.seq, STORED);
}

START_TEST(clean_tier_passes_with_its_counts) {
  int fd = build_tier("clean");
  ck_assert_int_eq(fsck(""), 0);
  assert_out_has("valid 10 superseded 0 torn 0 mismatched 0 free 6 (slots 16, slot_bytes 20480)\n");
  ck_assert_str_eq(cli_slurp(err_path), "");
  close(fd);
}
END_TEST

START_TEST(torn_slot_is_reported_and_repair_drops_it) {
  int fd = build_tier("torn");
  disk_super s = read_super(fd);
  flip(fd, disk_slot_offset(&s, 3) + DISK_BLOCK + PAYLOAD - 1);
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has(
      "slot 3: torn (payload checksum mismatch) seq 4 key fsck_model@0@0@0300000000000000\n");
  assert_out_has("valid 9 superseded 0 torn 1 mismatched 0 free 6 (slots 16, slot_bytes 20480)\n");
  repair_then_clean(fd, "dropped slot 3: torn", "valid 9 superseded 0 torn 0 mismatched 0 free 7 ");
  unsigned char block[DISK_BLOCK];
  pread_all(fd, block, sizeof block, disk_slot_offset(&s, 3));
  ck_assert(disk_block_is_zero(block, sizeof block));
  disk_index_entry e[SLOTS];
  pread_all(fd, e, sizeof e, DISK_INDEX_OFFSET);
  ck_assert_uint_eq(e[3].seq, 0);
  ck_assert_uint_eq(e[3].key_hash, 0);
  ck_assert_uint_eq(e[4].seq, 5);
}
END_TEST

START_TEST(corrupted_header_is_mismatched_and_repair_drops_it) {
  int fd = build_tier("header");
  disk_super s = read_super(fd);
  flip(fd, disk_slot_offset(&s, 5) + offsetof(object_header, key) + 2);
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has("slot 5: mismatched (header checksum mismatch)\n");
  assert_out_has("valid 9 superseded 0 torn 0 mismatched 1 free 6 ");
  repair_then_clean(fd, "dropped slot 5: mismatched",
                    "valid 9 superseded 0 torn 0 mismatched 0 free 7 ");
}
END_TEST

START_TEST(sealed_header_with_nonsense_fields_is_mismatched) {
  int fd = build_tier("nonsense");
  disk_super s = read_super(fd);
  object_header h;
  pread_all(fd, &h, sizeof h, disk_slot_offset(&s, 1));
  h.length = s.slot_bytes; /* one block more than the slot holds */
  object_header_seal(&h);
  pwrite_all(fd, &h, sizeof h, disk_slot_offset(&s, 1));
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has("slot 1: mismatched (length 20480 over the slot's 16384)\n");
  pread_all(fd, &h, sizeof h, disk_slot_offset(&s, 2));
  h.seq = 0;
  object_header_seal(&h);
  pwrite_all(fd, &h, sizeof h, disk_slot_offset(&s, 2));
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has("slot 2: mismatched (seq 0)\n");
  assert_out_has("valid 8 superseded 0 torn 0 mismatched 2 free 6 ");
  ck_assert_ptr_null(strstr(cli_slurp(out_path), "index:")); /* bad slots are not counted twice */
  close(fd);
}
END_TEST

START_TEST(garbage_without_the_slot_magic_is_free) {
  int fd = build_tier("garbage");
  disk_super s = read_super(fd);
  pwrite_all(fd, "leftover bytes", 14, disk_slot_offset(&s, 12));
  ck_assert_int_eq(fsck(""), 0);
  assert_out_has("valid 10 superseded 0 torn 0 mismatched 0 free 6 ");
  close(fd);
}
END_TEST

START_TEST(stale_index_of_a_clean_tier_is_damage_and_repair_rebuilds_it) {
  int fd = build_tier("stale");
  disk_index_entry e = {99, 1234};
  pwrite_all(fd, &e, sizeof e, DISK_INDEX_OFFSET + 12 * sizeof e);
  disk_super s = read_super(fd);
  s.seq = 3; /* below the slots' 10: the adapter would reuse seqs */
  write_super(fd, &s);
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has("index: 1 of 16 entries disagree with the slots (superblock says clean)\n");
  assert_out_has("superblock: seq 3 is below slot seq 10 (superblock says clean)\n");
  ck_assert_int_eq(fsck("--repair"), 0);
  ck_assert_int_eq(fsck(""), 0);
  ck_assert_uint_eq(read_super(fd).seq, STORED);
  pread_all(fd, &e, sizeof e, DISK_INDEX_OFFSET + 12 * sizeof e);
  ck_assert_uint_eq(e.seq, 0);
  close(fd);
}
END_TEST

START_TEST(index_of_an_unclean_tier_is_not_judged_and_repair_marks_it_clean) {
  int fd = build_tier("unclean");
  disk_index_entry zero[SLOTS] = {{0, 0}};
  pwrite_all(fd, zero, sizeof zero, DISK_INDEX_OFFSET);
  disk_super s = read_super(fd);
  s.clean = 0, s.seq = 0;
  write_super(fd, &s);
  ck_assert_int_eq(fsck(""), 0);
  ck_assert_int_eq(fsck("--repair"), 0);
  s = read_super(fd);
  ck_assert_uint_eq(s.clean, 1);
  ck_assert_uint_eq(s.seq, STORED);
  disk_index_entry e[SLOTS];
  kva_key k = key_of(7);
  pread_all(fd, e, sizeof e, DISK_INDEX_OFFSET);
  ck_assert_uint_eq(e[7].seq, 8);
  ck_assert_uint_eq(e[7].key_hash, key_hash(&k));
  close(fd);
}
END_TEST

/* Rewrites the superblock with `edit` applied (resealed unless `raw`) and
 * expects fsck and fsck --repair to exit 2 with `why`, file untouched. */
static void bad_super(const char *name, void (*edit)(disk_super *), int raw, const char *why) {
  int fd = build_tier(name);
  disk_super s = read_super(fd);
  edit(&s);
  if (!raw) disk_super_seal(&s);
  pwrite_all(fd, &s, sizeof s, 0);
  ck_assert_int_eq(fsck(""), 2);
  assert_err_has(why);
  ck_assert_int_eq(fsck("--repair"), 2);
  assert_err_has(why);
  disk_super after = read_super(fd);
  ck_assert_mem_eq(&after, &s, sizeof s);
  close(fd);
}

static void set_magic(disk_super *s) {
  s->magic = 0x1234;
}
static void set_version(disk_super *s) {
  s->version = 2;
}
static void set_seq(disk_super *s) {
  s->seq = 12345;
}
static void grow_nslots(disk_super *s) {
  s->nslots = SLOTS + 1;
}

START_TEST(bad_superblocks_exit_2_with_the_reason) {
  bad_super("magic", set_magic, 0, "not a kvact disk tier\n");
  bad_super("version", set_version, 0, "format version 2, this build reads 1\n");
  bad_super("sum", set_seq, 1, "superblock checksum mismatch\n");
  bad_super("geometry", grow_nslots, 0, "geometry does not fit a file of 335872 bytes");
}
END_TEST

START_TEST(short_or_missing_files_exit_2) {
  int fd = build_tier("short");
  ck_assert_int_eq(ftruncate(fd, 100), 0);
  ck_assert_int_eq(fsck(""), 2);
  assert_err_has("not a kvact disk tier (100 bytes)");
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  ck_assert_int_eq(fsck(""), 2);
  close(fd);
  unlink(tier);
  ck_assert_int_eq(fsck(""), 2);
  assert_err_has("No such file or directory");
}
END_TEST

START_TEST(repair_refuses_a_tier_in_use) {
  int fd = build_tier("locked");
  disk_super s = read_super(fd);
  flip(fd, disk_slot_offset(&s, 0) + DISK_BLOCK);
  ck_assert_int_eq(flock(fd, LOCK_EX), 0);
  ck_assert_int_eq(fsck("--repair"), 2);
  assert_err_has("in use");
  ck_assert_int_eq(fsck(""), 1); /* a read-only check still runs */
  close(fd);
}
END_TEST

/* Slot i of a tier of header-only (empty payload) slots, stored with seq. */
static void store_empty(int fd, const disk_super *s, disk_index_entry *index, uint64_t i,
                        uint64_t seq) {
  object_header h;
  kva_key k = key_of(i);
  object_header_init(&h, &k, 1, NULL, 0, seq);
  pwrite_all(fd, &h, sizeof h, disk_slot_offset(s, i));
  index[i] = (disk_index_entry){seq, key_hash(&k)};
}

START_TEST(index_windows_are_checked_and_rewritten_past_the_first) {
  enum { N = 9000 }; /* over two windows of 4096 index entries */
  static disk_index_entry index[N];
  uint64_t cap = DISK_INDEX_OFFSET + disk_index_bytes(N) + (uint64_t)N * DISK_BLOCK;
  int fd = build_tier("windows");
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)cap), 0); /* sparse: free slots read as zero */
  disk_super s;
  ck_assert_int_eq(disk_super_init(&s, cap, DISK_BLOCK), KVA_OK);
  ck_assert_uint_eq(s.nslots, N);
  const uint64_t at[] = {0, 4095, 4096, 8191, 8192, N - 1};
  for (uint64_t i = 0; i < 6; i++) store_empty(fd, &s, index, at[i], i + 1);
  pwrite_all(fd, index, sizeof index, DISK_INDEX_OFFSET);
  s.clean = 1, s.seq = 6;
  write_super(fd, &s);
  ck_assert_int_eq(fsck(""), 0);
  assert_out_has(
      "valid 6 superseded 0 torn 0 mismatched 0 free 8994 (slots 9000, slot_bytes 4096)\n");
  flip(fd, disk_slot_offset(&s, 8192) + 20);   /* inside seq: header checksum */
  index[N - 2] = (disk_index_entry){77, 1234}; /* an entry for a free slot */
  pwrite_all(fd, index, sizeof index, DISK_INDEX_OFFSET);
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has("slot 8192: mismatched (header checksum mismatch)\n");
  assert_out_has("index: 1 of 9000 entries disagree");
  ck_assert_int_eq(fsck("--repair"), 0);
  ck_assert_int_eq(fsck(""), 0);
  assert_out_has("valid 5 superseded 0 torn 0 mismatched 0 free 8995 ");
  disk_index_entry e[2];
  pread_all(fd, e, sizeof e, DISK_INDEX_OFFSET + (N - 2) * sizeof e[0]);
  ck_assert_uint_eq(e[0].seq, 0);
  ck_assert_uint_eq(e[1].seq, 6);
  close(fd);
}
END_TEST

/* ---- tiers a runtime wrote ---------------------------------------------- */

#define TWICE 16 /* keys stored twice at once */

/* A runtime on the tier of test `name` (a new file when fresh), 32 slots
 * of DT_SLOT. */
static kva_runtime *tier_start(const char *name, bool fresh, const char *extra) {
  set_paths(name);
  if (fresh) unlink(tier);
  return l2_start_disk(2, DT_L1, dt_json(tier, dt_capacity(32), extra), NULL);
}

/* Keys 0..TWICE-1 each stored by two STOREs sent together: the second
 * arrives while the first is in flight, so each key lands in two slots
 * and the older copy is superseded. */
static void store_each_twice(kva_runtime *rt) {
  kva_storage *s = kva_storage_of(rt);
  static uint8_t bytes[2][TWICE][DT_LEN];
  kva_layout l = dt_layout();
  kva_key keys[TWICE];
  kva_buf bufs[2][TWICE];
  kva_l2_req req[2][TWICE];
  kva_port *p = kva_port_open(rt, "twice");
  ck_assert_ptr_nonnull(p);
  for (int i = 0; i < TWICE; i++) {
    keys[i] = fixture_key((uint64_t)i);
    for (int v = 0; v < 2; v++) {
      l2_fill(bytes[v][i], DT_LEN, (uint64_t)i, (uint32_t)v);
      bufs[v][i] = (kva_buf){bytes[v][i], DT_LEN};
      req[v][i] = (kva_l2_req){.keys = &keys[i], .n = 1, .layout = &l, .bufs = &bufs[v][i]};
      kva_l2_req *r = &req[v][i];
      ck_assert_int_eq(kva_send(l2_tier_actor(s, 0), KVA_L2_STORE, &r, sizeof r, kva_port_actor(p),
                                (uint64_t)(2 * i + v)),
                       KVA_OK);
    }
  }
  for (int i = 0; i < 2 * TWICE; i++) fixture_recv(p, NULL, 0, 10000);
  for (int i = 0; i < TWICE; i++)
    ck_assert(req[0][i].result == KVA_OK && req[1][i].result == KVA_OK);
  kva_port_close(p);
}

/* The number after `what` in the last fsck's summary. */
static uint64_t summary_count(const char *what) {
  const char *at = strstr(cli_slurp(out_path), what);
  ck_assert_msg(at, "no \"%s\" in:\n%s", what, cli_slurp(out_path));
  return strtoull(at + strlen(what), NULL, 10);
}

/* The file offset of the slot the index lists for key id (0: none). */
static uint64_t listed_slot(int fd, uint64_t id) {
  disk_super s = read_super(fd);
  kva_key k = fixture_key(id);
  for (uint64_t i = 0; i < s.nslots; i++) {
    disk_index_entry e;
    pread_all(fd, &e, sizeof e, DISK_INDEX_OFFSET + i * sizeof e);
    if (e.seq && e.key_hash == key_hash(&k)) return disk_slot_offset(&s, i);
  }
  return 0;
}

START_TEST(a_clean_stop_fscks_clean_after_keys_stored_twice) {
  kva_runtime *rt = tier_start("twice", true, "");
  store_each_twice(rt);
  l2_finish(rt);
  ck_assert_int_eq(fsck(""), 0);
  ck_assert_uint_eq(summary_count("valid "), TWICE);
  ck_assert_uint_gt(summary_count("superseded "), 0); /* the scenario happened */
  ck_assert_ptr_null(strstr(cli_slurp(out_path), "--repair"));
}
END_TEST

START_TEST(damage_still_counts_and_a_repair_holds_across_a_restart) {
  kva_runtime *rt = tier_start("repair_holds", true, "");
  store_each_twice(rt);
  l2_finish(rt);
  int fd = open(tier, O_RDWR);
  ck_assert_int_ge(fd, 0);
  uint64_t off = listed_slot(fd, 3);
  ck_assert_uint_ne(off, 0);
  flip(fd, off + DISK_BLOCK + 17); /* the live copy's payload */
  ck_assert_int_eq(fsck(""), 1);
  assert_out_has("torn (payload checksum mismatch)");
  ck_assert_int_eq(fsck("--repair"), 0);
  ck_assert_int_eq(fsck(""), 0);
  ck_assert_uint_eq(summary_count("valid "), TWICE - 1);
  rt = tier_start("repair_holds", false, ""); /* start and stop: still repaired */
  ck_assert_uint_eq(l2_stats(kva_storage_of(rt), 0).objects, TWICE - 1);
  l2_finish(rt);
  ck_assert_int_eq(fsck(""), 0);
  ck_assert_uint_eq(summary_count("valid "), TWICE - 1);
  ck_assert_uint_eq(summary_count("torn "), 0);
  close(fd);
}
END_TEST

START_TEST(a_clean_stop_with_persist_false_fscks_clean) {
  kva_runtime *rt = tier_start("nopersist", true, "\"persist\":false");
  store_each_twice(rt);
  l2_finish(rt);
  ck_assert_int_eq(fsck(""), 0);
  ck_assert_uint_eq(summary_count("valid "), 0); /* discarded at stop */
  ck_assert_uint_ge(summary_count("superseded "), TWICE);
}
END_TEST

START_TEST(usage_errors_exit_2) {
  ck_assert_int_eq(cli_run("%s fsck > /dev/null 2>&1", kvconf), 2);
  ck_assert_int_eq(cli_run("%s fsck --repair > /dev/null 2>&1", kvconf), 2);
  ck_assert_int_eq(cli_run("%s fsck a b > /dev/null 2>&1", kvconf), 2);
  ck_assert_int_eq(cli_run("%s fsck a --force > /dev/null 2>&1", kvconf), 2);
  ck_assert_int_eq(cli_run("%s --help | grep -q 'kvconf fsck PATH'", kvconf), 0);
}
END_TEST

Suite *kva_test_suite(void) {
  if (!(kvconf = fixture_arg(1))) {
    fprintf(stderr, "usage: kvconf_fsck_test KVCONF\n");
    exit(2);
  }
  Suite *s = suite_create("kvconf_fsck");
  TCase *tc = tcase_create("fsck");
  tcase_add_test(tc, clean_tier_passes_with_its_counts);
  tcase_add_test(tc, torn_slot_is_reported_and_repair_drops_it);
  tcase_add_test(tc, corrupted_header_is_mismatched_and_repair_drops_it);
  tcase_add_test(tc, sealed_header_with_nonsense_fields_is_mismatched);
  tcase_add_test(tc, garbage_without_the_slot_magic_is_free);
  tcase_add_test(tc, stale_index_of_a_clean_tier_is_damage_and_repair_rebuilds_it);
  tcase_add_test(tc, index_of_an_unclean_tier_is_not_judged_and_repair_marks_it_clean);
  tcase_add_test(tc, bad_superblocks_exit_2_with_the_reason);
  tcase_add_test(tc, short_or_missing_files_exit_2);
  tcase_add_test(tc, repair_refuses_a_tier_in_use);
  tcase_add_test(tc, index_windows_are_checked_and_rewritten_past_the_first);
  tcase_add_test(tc, usage_errors_exit_2);
  tcase_add_test(tc, a_clean_stop_fscks_clean_after_keys_stored_twice);
  tcase_add_test(tc, damage_still_counts_and_a_repair_holds_across_a_restart);
  tcase_add_test(tc, a_clean_stop_with_persist_false_fscks_clean);
  suite_add_tcase(s, tc);
  return s;
}
