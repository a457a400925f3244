/*
 * disk_open_hook.h — how the disk tier opens its file in the tests that
 * play a filesystem refusing O_DIRECT or O_TMPFILE: through disk_open_fn,
 * open(2) until the test puts its own function there.
 *
 * The library has no such hook. These tests compile
 * l2/adapters/disk/disk_open.c into themselves with
 * -DDISK_OPEN_HOOK=disk_open_fn (tests/defs.bzl, kva_disk_open_hooked_test);
 * their copy is linked before //l2/adapters/disk's archive and stands in
 * for the library's disk_open.o.
 */
#ifndef KVA_TESTS_DISK_OPEN_HOOK_H
#define KVA_TESTS_DISK_OPEN_HOOK_H

#include <sys/types.h>

extern int (*disk_open_fn)(const char *path, int flags, mode_t mode);

#endif
