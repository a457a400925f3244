/*
 * uring_anchor.h — the raw io_uring O_DIRECT loop that kvbench --suite disk
 * puts next to the disk tier: what the file can do at a given block size and
 * queue depth with nothing but liburing between the program and the kernel.
 *
 * The loop owns a region [offset, offset + bytes) of a file it opens with
 * O_DIRECT (creating it if needed) and preallocates with fallocate. It moves
 * `nobj` objects of `block` bytes, keeping `depth` objects in flight, from
 * and into `depth` page-aligned buffers (posix_memalign, huge-page advised
 * like the L1 pool), and comes in two shapes:
 *
 *   URING_ANCHOR_PURE  object i is one I/O of `block` bytes at
 *                      offset + i * block (what fio does with --bs=block);
 *   URING_ANCHOR_SLOT  object i is a slot of kvact's disk format at
 *                      offset + i * (4096 + block): a 4 KiB header block,
 *                      then the payload. A write is the payload write and
 *                      the header write after it, linked (IOSQE_IO_LINK, the
 *                      order l2/disk_format.h prescribes); a read is one
 *                      readv of [header, payload], both being contiguous.
 *
 * The first pass over a fresh region converts ext4's unwritten extents and
 * is slower; callers run a warm-up pass. No fixed buffers, no SQPOLL: the
 * defaults of fio's io_uring engine. Unlike fio's, the buffers are huge
 * pages, as L1's are: on a virtio disk that alone makes 8 MiB O_DIRECT I/O
 * about 2.7 times faster (fewer, larger requests; fewer pages to pin).
 */
#ifndef KVA_TOOLS_URING_ANCHOR_H
#define KVA_TOOLS_URING_ANCHOR_H

#include <stdint.h>

#define URING_ANCHOR_HEADER 4096u /* bytes of a slot's header block */

typedef enum uring_anchor_shape { URING_ANCHOR_PURE, URING_ANCHOR_SLOT } uring_anchor_shape;

typedef struct uring_anchor uring_anchor;

/* Opens path (O_CREAT | O_DIRECT), preallocates [offset, offset + region)
 * and allocates the buffers. block and offset must be multiples of 4096,
 * depth >= 1. 0, or a negative errno. */
int uring_anchor_open(uring_anchor **out, const char *path, uint64_t offset, uint64_t block,
                      unsigned nobj, unsigned depth);
/* Writes (write != 0) or reads the nobj objects once in the given shape;
 * *secs = wall time from the first submit to the last completion. 0, or a
 * negative errno (-EIO for a short transfer). */
int uring_anchor_run(uring_anchor *a, uring_anchor_shape shape, int write, double *secs);
void uring_anchor_close(uring_anchor *a);

#endif
