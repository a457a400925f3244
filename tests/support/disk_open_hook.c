/*
 * disk_open_hook.c — disk_open_fn, open(2) until a test replaces it
 * (disk_open_hook.h).
 */
#include "tests/support/disk_open_hook.h"

#include <fcntl.h>

static int plain_open(const char *path, int flags, mode_t mode) {
  return open(path, flags, mode);
}

int (*disk_open_fn)(const char *path, int flags, mode_t mode) = plain_open;
