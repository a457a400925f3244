/*
 * l2_disk_test.h — helpers of the disk tier suites (l2_disk_test.c,
 * l2_disk_recovery_test.c, l2_disk_errors_test.c): files under
 * $TEST_TMPDIR, direct requests to the tier with aligned or misaligned
 * buffers, and reading or damaging a tier's file while no runtime has it.
 */
#ifndef KVA_TESTS_L2_DISK_TEST_H
#define KVA_TESTS_L2_DISK_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/disk/disk_format.h"

#define DT_LEN 10000u     /* object bytes: two whole blocks and a partial one */
#define DT_SLOT 16384u    /* slot_bytes for DT_LEN: header block + 3 blocks */
#define DT_L1 (32u << 20) /* L1 bytes of the suites' runtimes */

/* $TEST_TMPDIR/name (or /tmp), with any file of that name removed. */
void dt_path(char *out, size_t cap, const char *name);
/* Bytes of a tier of exactly nslots slots of DT_SLOT (nslots <= 256). */
uint64_t dt_capacity(uint32_t nslots);
/* JSON members of a disk tier on path with slots of DT_SLOT, then extra
 * members (may be ""). */
const char *dt_json(const char *path, uint64_t capacity, const char *extra);
kva_layout dt_layout(void); /* one u8 tensor of DT_LEN bytes */

/* STORE of keys fixture_key(ids[i]) with version-v bytes from buffers that
 * are 4 KiB aligned (aligned) or start 1 byte past it; returns the result. */
int dt_store(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, bool aligned);
/* LOAD into fresh buffers (aligned or not) of `len` bytes; bits out;
 * asserts every set bit's buffer holds version v exactly; returns the
 * result. */
int dt_load(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, bool aligned, size_t len,
            uint8_t *bits);
/* LOOKUP_AND_LOCK; bits out; returns the keys found. */
size_t dt_lock(kva_storage *s, const uint64_t *ids, size_t n, uint8_t *bits);
/* Whether each key is there (locks and unlocks it again). */
bool dt_has(kva_storage *s, uint64_t id);

/* Through the whole stack: L1 write of [first, first + n) version v,
 * kva_flush, kva_clear, then prefetch and read back each key; returns how
 * many came back (each one asserted byte-exact). */
void dt_write_flush_clear(kva_storage *s, uint64_t first, size_t n, const kva_layout *l,
                          uint32_t v);
size_t dt_read_back(kva_storage *s, uint64_t first, size_t n, const kva_layout *l, uint32_t v);

/* The file while no runtime has it open: superblock, and the file offset
 * of key id's slot header (0 when no intact header names it). */
disk_super dt_super_read(const char *path);
void dt_super_write(const char *path, disk_super *s); /* seals it */
uint64_t dt_slot_of(const char *path, uint64_t id);
void dt_flip_byte(const char *path, uint64_t off);

#endif
