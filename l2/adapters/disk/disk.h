/*
 * disk.h — the disk L2 adapter ("disk"): one preallocated file or a block
 * device cut into fixed slots, io_uring with O_DIRECT, checksummed
 * self-describing slots (l2/disk_format.h), the index saved at a clean
 * stop and rebuilt at start (after a crash by checksumming every slot).
 *
 * What it counts in kva_l2_stats (since start unless said otherwise):
 *   objects, bytes       valid slots and their payload bytes (now)
 *   capacity_bytes       slots × payload bytes per slot (0 until the first
 *                        store formats a fresh tier)
 *   keys_locked          lookup locks held (now)
 *   stores / failures    STORE tasks / those answered with result < 0
 *   loads / failures     keys asked for by LOAD / keys left clear
 *   lookups              keys asked for by LOOKUP_AND_LOCK
 *   evictions            valid slots taken for other keys (LRU)
 *
 * Results: STORE fails with KVA_EIO (an I/O error), KVA_ETIMEDOUT (an I/O
 * past timeout_ms), KVA_EAGAIN (a key of the task is locked or being
 * loaded: nothing was written), KVA_ENOMEM (not enough free or unlocked
 * slots, or an object larger than a slot: nothing was written).
 * LOOKUP_AND_LOCK never fails (the index is in memory). LOAD answers
 * KVA_EIO / KVA_ETIMEDOUT when an I/O failed, else KVA_OK; a key whose
 * bytes do not verify is clear either way and its slot is dropped.
 */
#ifndef KVA_L2_DISK_H
#define KVA_L2_DISK_H

#include <stddef.h>

#include "kvact.h"

/* The factory registered as "disk" (kva_l2_factory). Opens, checks or
 * formats and recovers the file before it returns; the errors of a bad
 * path, permissions, size or format come back in err. */
kva_actor *disk_adapter_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                              size_t errlen);

#endif
