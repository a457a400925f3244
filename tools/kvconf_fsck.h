/*
 * kvconf_fsck.h — `kvconf fsck PATH [--repair]`: checks (and repairs) a
 * disk tier file or block device (format: l2/disk_format.h).
 */
#ifndef KVA_TOOLS_KVCONF_FSCK_H
#define KVA_TOOLS_KVCONF_FSCK_H

#include <stdbool.h>

/* Exit status of `kvconf fsck`. */
enum {
  FSCK_CLEAN = 0,   /* nothing wrong, or everything wrong was repaired */
  FSCK_DAMAGED = 1, /* bad slots (or a stale index) found, not repaired */
  FSCK_FAILED = 2,  /* not checked: bad superblock, I/O error, in use */
};

/* Checks PATH, prints a line per bad slot and a summary on stdout (errors
 * on stderr); with repair, drops the bad slots and rebuilds the index. */
int kvconf_fsck(const char *path, bool repair);

#endif
