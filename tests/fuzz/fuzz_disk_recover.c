/*
 * fuzz_disk_recover.c — libFuzzer target for a disk tier's whole file as a
 * start reads it back (l2/disk_open.c, l2/disk_recover.c, l2/disk_index.c):
 * the superblock, the index region saved at a clean stop, every slot's
 * header and payload.
 *
 * Input: [flags][block heads]: 256 bytes of input are the first 256 bytes
 * of each 4 KiB block of the file, the rest of each block zeros (a file of
 * 8 KiB slots holding payloads of at most 256 bytes loses nothing; see
 * tests/fuzz/fuzz_seeds.c, which writes the seeds with the real tier). Flags
 * before the file is opened: 1 sets the payload_sum of every slot header
 * that lies in the file to its payload's, 2 seals those headers, 4 seals
 * the superblock (so the fuzzer gets past the checksums), 8 opens with
 * persist = false, 16 with slot_bytes = 8192 in the config.
 *
 * The file is a memfd, opened by the tier through /proc/self/fd. Checked:
 *  1. the start either refuses with a message, or gives an index whose
 *     every slot is free or valid and consistent (hash table, LRU list,
 *     free stack, counters), each valid slot an intact header on disk for
 *     a valid key (and, after a crash scan, a payload that verifies), no
 *     key twice, no sequence number above the superblock's;
 *  2. a clean stop then a start gives back the very same index;
 *  3. a crash after that (clean flag cleared) then a start scans every
 *     slot, keeps the checks of 1, and loses no key the clean start had
 *     whose payload verifies.
 *
 * Build: bazel build //tests/fuzz:fuzz_disk_recover; run: tests/fuzz/run_fuzz.sh.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvact.h"
#include "common/key.h"
#include "l2/adapters/disk/disk_internal.h"
#include "tests/fuzz/fuzz.h"

#define HEAD 256u      /* input bytes per 4 KiB block */
#define MAX_BLOCKS 64u /* a 256 KiB file at most */
#define MAX_SLOTS 128u /* MAX_BLOCKS * 4096 / 8192, the smallest slot */

enum { FIX_SUMS = 1, SEAL_HEADERS = 2, SEAL_SUPER = 4, NO_PERSIST = 8, CFG_SLOT = 16 };

static int memfd = -1;
static uint8_t image[MAX_BLOCKS * DISK_BLOCK];

static void quiet(int level, const char *msg, void *arg) {
  (void)level, (void)msg, (void)arg;
}

/* ---- the file ----------------------------------------------------------- */

static uint64_t build_image(fuzz_in *in) {
  uint64_t nblocks = (in->n + HEAD - 1) / HEAD;
  if (nblocks > MAX_BLOCKS) nblocks = MAX_BLOCKS;
  memset(image, 0, sizeof image);
  for (uint64_t b = 0; b < nblocks; b++) fuzz_take(in, image + b * DISK_BLOCK, HEAD);
  return nblocks * DISK_BLOCK;
}

/* Each slot header inside the file (geometry as the superblock says, as
 * far as it is plausible), fixed up as the flags ask. */
static void fix_headers(uint64_t file_bytes, uint8_t flags) {
  disk_super s;
  memcpy(&s, image, sizeof s);
  if (s.slot_bytes < 2 * DISK_BLOCK || s.slot_bytes % DISK_BLOCK || s.data_offset % DISK_BLOCK)
    return;
  for (uint64_t i = 0; i < MAX_SLOTS && s.data_offset < file_bytes; i++) {
    uint64_t off = s.data_offset + i * s.slot_bytes;
    if (off >= file_bytes || s.slot_bytes > file_bytes - off) break;
    object_header h;
    memcpy(&h, image + off, sizeof h);
    uint64_t cap = disk_slot_capacity(s.slot_bytes);
    if (flags & FIX_SUMS)
      h.payload_sum = object_payload_sum(image + off + DISK_BLOCK, h.length < cap ? h.length : cap);
    if (flags & SEAL_HEADERS) object_header_seal(&h);
    memcpy(image + off, &h, sizeof h);
  }
}

static void write_image(uint64_t file_bytes) {
  FUZZ_CHECK(ftruncate(memfd, 0) == 0 && ftruncate(memfd, (off_t)file_bytes) == 0);
  FUZZ_CHECK(pwrite(memfd, image, file_bytes, 0) == (ssize_t)file_bytes);
}

static void pread_all(void *buf, size_t len, uint64_t off) {
  FUZZ_CHECK(pread(memfd, buf, len, (off_t)off) == (ssize_t)len);
}

/* A crash from now on: the superblock says "not closed cleanly". */
static void mark_crashed(void) {
  disk_super s;
  pread_all(&s, sizeof s, 0);
  s.clean = 0;
  disk_super_seal(&s);
  FUZZ_CHECK(pwrite(memfd, &s, sizeof s, 0) == (ssize_t)sizeof s);
}

/* ---- the tier ----------------------------------------------------------- */

static int open_tier(disk *d, uint8_t flags) {
  char err[512] = "";
  memset(d, 0, sizeof *d);
  d->fd = d->retry_timer = -1;
  snprintf(d->cfg.name, sizeof d->cfg.name, "fuzz");
  snprintf(d->cfg.path, sizeof d->cfg.path, "/proc/self/fd/%d", memfd);
  d->cfg.persist = !(flags & NO_PERSIST);
  d->cfg.slot_bytes = flags & CFG_SLOT ? 2 * DISK_BLOCK : 0;
  int rc = disk_open(d, err, sizeof err);
  if (rc != KVA_OK) {
    FUZZ_CHECK(rc == KVA_ECONFIG || rc == KVA_ENOMEM);
    FUZZ_CHECK(err[0] != '\0');
    if (d->fd >= 0) close(d->fd);
    disk_index_destroy(&d->ix);
  }
  return rc;
}

static void close_tier(disk *d) {
  disk_close(d);
  disk_index_destroy(&d->ix);
}

static bool payload_verifies(const disk *d, uint32_t id, uint64_t length, uint64_t sum) {
  static uint8_t payload[MAX_BLOCKS * DISK_BLOCK];
  pread_all(payload, length, disk_slot_off(d, id) + DISK_BLOCK);
  return object_payload_sum(payload, length) == sum;
}

/* A valid slot: an intact header on disk that says what the index says. */
static void check_slot(const disk *d, uint32_t id, bool scanned) {
  const disk_slot *s = &d->ix.slots[id];
  object_header h;
  FUZZ_CHECK(key_valid(&s->key) && s->key_hash == key_hash(&s->key));
  FUZZ_CHECK(disk_index_find(&d->ix, &s->key, s->key_hash) == id); /* the key's only copy */
  FUZZ_CHECK(s->seq > 0 && s->seq <= d->super.seq);
  FUZZ_CHECK(s->length > 0 && s->length <= disk_slot_capacity(d->super.slot_bytes));
  pread_all(&h, sizeof h, disk_slot_off(d, id));
  FUZZ_CHECK(object_header_valid(&h) && h.seq == s->seq && key_equal(&h.key, &s->key));
  FUZZ_CHECK(h.fingerprint == s->fingerprint && h.length == s->length);
  FUZZ_CHECK(h.payload_sum == s->payload_sum);
  if (scanned) FUZZ_CHECK(payload_verifies(d, id, s->length, s->payload_sum));
}

static void check_lists(const disk_index *ix, uint64_t nvalid) {
  static uint8_t seen[MAX_SLOTS];
  uint64_t n = 0;
  uint32_t prev = DISK_NONE;
  for (uint32_t id = ix->lru_head; id != DISK_NONE; prev = id, id = ix->slots[id].next) {
    FUZZ_CHECK(id < ix->nslots && ++n <= nvalid);
    FUZZ_CHECK(ix->slots[id].state == SLOT_VALID && ix->slots[id].prev == prev);
  }
  FUZZ_CHECK(n == nvalid && ix->nlru == nvalid && ix->lru_tail == prev);
  memset(seen, 0, sizeof seen);
  FUZZ_CHECK(ix->nfree + nvalid == ix->nslots);
  for (uint32_t i = 0; i < ix->nfree; i++) {
    uint32_t id = ix->free[i];
    FUZZ_CHECK(id < ix->nslots && !seen[id] && ix->slots[id].state == SLOT_FREE);
    seen[id] = 1;
  }
}

static void check_index(const disk *d, bool scanned) {
  const disk_index *ix = &d->ix;
  uint64_t nvalid = 0, bytes = 0;
  FUZZ_CHECK(d->formatted && disk_super_check(&d->super, d->file_bytes, NULL, 0) == KVA_OK);
  FUZZ_CHECK(ix->nslots == d->super.nslots && ix->nslots <= MAX_SLOTS);
  FUZZ_CHECK(ix->locks == 0 && ix->evictions == 0);
  for (uint32_t id = 0; id < ix->nslots; id++) {
    const disk_slot *s = &ix->slots[id];
    FUZZ_CHECK(s->state == SLOT_FREE || s->state == SLOT_VALID);
    FUZZ_CHECK(s->locks == 0 && s->reads == 0);
    if (s->state == SLOT_FREE) continue;
    check_slot(d, id, scanned);
    nvalid++;
    bytes += s->length;
  }
  FUZZ_CHECK(nvalid == ix->nvalid && bytes == ix->bytes);
  check_lists(ix, nvalid);
}

/* ---- the cycle ---------------------------------------------------------- */

typedef struct snapshot {
  uint32_t nslots;
  struct {
    uint32_t state;
    uint64_t seq, key_hash, length, payload_sum;
  } s[MAX_SLOTS];
} snapshot;

static void take(const disk *d, snapshot *sn) {
  memset(sn, 0, sizeof *sn);
  sn->nslots = d->ix.nslots;
  for (uint32_t id = 0; id < d->ix.nslots; id++) {
    const disk_slot *s = &d->ix.slots[id];
    sn->s[id].state = s->state;
    sn->s[id].seq = s->seq;
    sn->s[id].key_hash = s->key_hash;
    sn->s[id].length = s->length;
    sn->s[id].payload_sum = s->payload_sum;
  }
}

/* After a crash scan: every key the clean start had whose payload
 * verifies is there, in that version or a later one. */
static void check_nothing_lost(const disk *crashed, const disk *clean) {
  for (uint32_t id = 0; id < clean->ix.nslots; id++) {
    const disk_slot *s = &clean->ix.slots[id];
    if (s->state != SLOT_VALID || !payload_verifies(clean, id, s->length, s->payload_sum)) continue;
    uint32_t c = disk_index_find(&crashed->ix, &s->key, s->key_hash);
    FUZZ_CHECK(c != DISK_NONE && crashed->ix.slots[c].seq >= s->seq);
  }
}

static void cycle(uint8_t flags) {
  static disk a, b, c;
  static snapshot sa, sb;
  disk_super s;
  memcpy(&s, image, sizeof s);
  bool scanned = s.clean != 1 && !(flags & NO_PERSIST);
  if (open_tier(&a, flags) != KVA_OK) return;
  if (!a.formatted) { /* a blank file: formatted by the first store */
    FUZZ_CHECK(a.ix.nslots == 0 && disk_block_is_zero(image, DISK_BLOCK));
    close_tier(&a);
    return;
  }
  check_index(&a, scanned);
  take(&a, &sa);
  close_tier(&a);
  FUZZ_CHECK(open_tier(&b, flags) == KVA_OK); /* a file we closed cleanly */
  check_index(&b, false);
  take(&b, &sb);
  FUZZ_CHECK(memcmp(&sa, &sb, sizeof sa) == 0);
  disk_close(&b); /* clean again; b's index kept to compare with */
  mark_crashed();
  FUZZ_CHECK(open_tier(&c, flags) == KVA_OK);
  check_index(&c, !(flags & NO_PERSIST));
  check_nothing_lost(&c, &b);
  disk_index_destroy(&b.ix);
  close_tier(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memfd < 0) {
    kva_log_set(quiet, NULL, KVA_LOG_DEBUG);
    memfd = memfd_create("kvact-fuzz-disk", 0);
    FUZZ_CHECK(memfd >= 0);
  }
  fuzz_in in = {data, size};
  uint8_t flags = fuzz_u8(&in);
  uint64_t file_bytes = build_image(&in);
  fix_headers(file_bytes, flags);
  if (flags & SEAL_SUPER) disk_super_seal((disk_super *)image);
  write_image(file_bytes);
  cycle(flags);
  return 0;
}
