/*
 * l2_disk_test_util.c — helpers of the disk tier suites (l2_disk_test.h).
 */
#include "tests/l2/l2_disk_test.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/key.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

void dt_path(char *out, size_t cap, const char *name) {
  const char *dir = getenv("TEST_TMPDIR");
  snprintf(out, cap, "%s/%s", dir && *dir ? dir : "/tmp", name);
  unlink(out);
}

uint64_t dt_capacity(uint32_t nslots) {
  ck_assert_uint_le(nslots, 256);
  return 2 * DISK_BLOCK + (uint64_t)nslots * DT_SLOT; /* superblock, one index block */
}

const char *dt_json(const char *path, uint64_t capacity, const char *extra) {
  static char json[1024];
  snprintf(json, sizeof(json), "\"path\":\"%s\",\"capacity_bytes\":%llu,\"slot_bytes\":%u%s%s",
           path, (unsigned long long)capacity, DT_SLOT, *extra ? "," : "", extra);
  return json;
}

kva_layout dt_layout(void) {
  return fixture_layout_bytes(DT_LEN);
}

/* n buffers of len bytes, 4 KiB aligned or 1 byte past; freed by bufs_free. */
static kva_buf *bufs_new(size_t n, size_t len, bool aligned) {
  kva_buf *b = calloc(n, sizeof(*b));
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < n; i++) {
    void *p = NULL;
    ck_assert_int_eq(posix_memalign(&p, 4096, len + 4096), 0);
    memset(p, 0xee, len + 4096);
    b[i] = (kva_buf){(uint8_t *)p + (aligned ? 0 : 1), len};
  }
  return b;
}

static void bufs_free(kva_buf *b, size_t n, bool aligned) {
  for (size_t i = 0; i < n; i++) free((uint8_t *)b[i].ptr - (aligned ? 0 : 1));
  free(b);
}

static kva_key *keys_new(const uint64_t *ids, size_t n) {
  kva_key *k = calloc(n, sizeof(*k));
  ck_assert_ptr_nonnull(k);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  return k;
}

int dt_store(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, bool aligned) {
  kva_layout l = dt_layout();
  kva_key *k = keys_new(ids, n);
  kva_buf *b = bufs_new(n, DT_LEN, aligned);
  for (size_t i = 0; i < n; i++) l2_fill(b[i].ptr, DT_LEN, ids[i], v);
  kva_l2_req r = {.keys = k, .n = n, .layout = &l, .bufs = b};
  int rc = l2_ask(s, 0, KVA_L2_STORE, &r);
  bufs_free(b, n, aligned);
  free(k);
  return rc;
}

int dt_load(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, bool aligned, size_t len,
            uint8_t *bits) {
  kva_layout l = fixture_layout_bytes(len);
  kva_key *k = keys_new(ids, n);
  kva_buf *b = bufs_new(n, len, aligned);
  memset(bits, 0, (n + 7) / 8);
  kva_l2_req r = {.keys = k, .n = n, .layout = &l, .bufs = b, .bits = bits};
  int rc = l2_ask(s, 0, KVA_L2_LOAD, &r);
  for (size_t i = 0; i < n; i++)
    if (kva_bit_get(bits, i))
      ck_assert_msg(l2_matches(b[i].ptr, len, ids[i], v), "key %lu: loaded wrong bytes",
                    (unsigned long)ids[i]);
  bufs_free(b, n, aligned);
  free(k);
  return rc;
}

size_t dt_lock(kva_storage *s, const uint64_t *ids, size_t n, uint8_t *bits) {
  kva_key *k = keys_new(ids, n);
  memset(bits, 0, (n + 7) / 8);
  kva_l2_req r = {.keys = k, .n = n, .bits = bits};
  ck_assert_int_eq(l2_ask(s, 0, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_OK);
  size_t found = 0;
  for (size_t i = 0; i < n; i++) found += (size_t)kva_bit_get(bits, i);
  free(k);
  return found;
}

bool dt_has(kva_storage *s, uint64_t id) {
  uint8_t bits[1];
  bool has = dt_lock(s, &id, 1, bits) == 1;
  if (has) l2_unlock(s, 0, &id, 1);
  return has;
}

void dt_write_flush_clear(kva_storage *s, uint64_t first, size_t n, const kva_layout *l,
                          uint32_t v) {
  for (size_t done = 0; done < n; done += 128)
    l2_write_range(s, first + done, n - done < 128 ? n - done : 128, l, v);
  ck_assert_int_eq(kva_flush(s, 30000), KVA_OK);
  ck_assert_int_eq(kva_clear(s, 0), (int)n);
}

size_t dt_read_back(kva_storage *s, uint64_t first, size_t n, const kva_layout *l, uint32_t v) {
  size_t got = 0;
  for (uint64_t id = first; id < first + n; id++) {
    if (l2_prefetch(s, &id, 1, l, 0) != 1) continue;
    l2_read_release(s, &id, 1, v, 0);
    got++;
  }
  return got;
}

/* ---- the file ----------------------------------------------------------- */

static void pread_all(const char *path, void *buf, size_t len, uint64_t off) {
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
  close(fd);
}

static void pwrite_all(const char *path, const void *buf, size_t len, uint64_t off) {
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
  close(fd);
}

disk_super dt_super_read(const char *path) {
  disk_super s;
  pread_all(path, &s, sizeof(s), 0);
  return s;
}

void dt_super_write(const char *path, disk_super *s) {
  disk_super_seal(s);
  pwrite_all(path, s, sizeof(*s), 0);
}

uint64_t dt_slot_of(const char *path, uint64_t id) {
  disk_super s = dt_super_read(path);
  kva_key k = fixture_key(id);
  for (uint64_t i = 0; i < s.nslots; i++) {
    object_header h;
    uint64_t off = s.data_offset + i * s.slot_bytes;
    pread_all(path, &h, sizeof(h), off);
    if (object_header_valid(&h) && key_equal(&h.key, &k)) return off;
  }
  return 0;
}

void dt_flip_byte(const char *path, uint64_t off) {
  uint8_t b;
  pread_all(path, &b, 1, off);
  b ^= 0x5a;
  pwrite_all(path, &b, 1, off);
}
