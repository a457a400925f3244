/*
 * disk_io.h — the disk tier's I/O engine: one io_uring per adapter, every
 * read and write carrying an IORING_OP_LINK_TIMEOUT, completions signalled
 * on an eventfd the adapter watches (kva_watch_fd), and aligned bounce
 * buffers for what O_DIRECT cannot take straight from L1 memory.
 *
 * Never blocks on submission: at most `depth` operations are in the
 * kernel, later ones wait inside disk_io and go in as completions make
 * room. The only blocking call is disk_io_wait, for on_stop and
 * deterministic mode.
 *
 * Reads go first: loads are what an engine waits for, stores are
 * write-behind. Waiting operations sit in two FIFOs, reads and header
 * blocks in one, payload writes in the other; the first is always drained
 * first. Reads in the kernel hold at most DISK_IO_READ_BYTES (at least
 * one read): a device shares its bandwidth among what it is given, so
 * with every read of a turn's prefetches in at once they all end near the
 * end, while a budget lets them finish in the order asked for and the
 * engine copy the first chunks while the last are read (a 32 MiB read at
 * depth 1 already reaches the device's rate here: fio 1.4 GB/s at depth
 * 1 and 16 alike). While reads wait or run, payload writes hold at most
 * 1/DISK_IO_WRITE_SHARE of that budget (at least one write), so a store
 * batch cannot fill the device's queue ahead of a prefetch. Each
 * FIFO keeps its order; a read and a write are never of the same slot at
 * once (the index serves a slot only once its store is done, and never
 * rewrites a slot being loaded), so their order between them is free.
 *
 * Fixed buffers (io_uring_register_buffers over the L1 pool) are not used:
 * the pool belongs to the L1 manager, a registration is limited to 1 GiB
 * per buffer and by RLIMIT_MEMLOCK unless the pool is pinned, and the
 * adapter would need the pool's base to turn pointers into buffer indexes.
 * Plain readv/writev from the same addresses costs one page-table walk per
 * I/O, which at the 100 KiB..8 MiB objects of KV caches is noise.
 */
#ifndef KVA_L2_DISK_IO_H
#define KVA_L2_DISK_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <liburing.h>

#define DISK_IO_MAX_IOV 3                /* header block, L1 body, bounce tail */
#define DISK_IO_READ_BYTES (64ull << 20) /* reads in the kernel at most (bytes) */
#define DISK_IO_WRITE_SHARE 4            /* payload writes take 1/4 of that while reads wait */

/* One read or write. The caller owns it and leaves it alone from
 * disk_io_queue until its completion callback. */
typedef struct disk_op {
  bool write;
  bool small; /* a header block: counted apart from the depth of big I/Os */
  uint64_t off;
  struct iovec iov[DISK_IO_MAX_IOV];
  int niov;
  int res;              /* on completion: 0 = every byte moved, or -errno
                           (-ETIMEDOUT when the linked timeout fired) */
  void *ctx;            /* the caller's */
  struct disk_op *next; /* the pending FIFO, then the caller's free list */
} disk_op;

typedef void (*disk_io_done)(disk_op *op, void *arg);

typedef struct disk_io {
  struct io_uring ring;
  bool ring_ok;
  int fd;         /* the tier's file */
  int efd;        /* eventfd registered with the ring */
  unsigned depth; /* operations in the kernel at most (and
                     as many small ones besides) */
  unsigned inflight_small;
  unsigned inflight;        /* operations in the kernel now */
  unsigned inflight_writes; /* of which payload writes */
  unsigned inflight_reads;  /* of which reads */
  uint64_t inflight_read_bytes, inflight_write_bytes;
  uint64_t read_budget; /* DISK_IO_READ_BYTES (a test may lower it) */
  struct {
    disk_op *head, *tail;
  } pend[2];      /* waiting for room, in order: [0] reads and headers, [1] payload writes */
  unsigned npend; /* in both */
  struct __kernel_timespec timeout; /* copied by the kernel at submission */
  disk_io_done done;
  void *done_arg;
} disk_io;

/* A ring of 2 * depth entries (each operation is followed by its link
 * timeout) and a non-blocking eventfd registered with it. KVA_OK, or a
 * negative KVA_E* with why in err. */
int disk_io_init(disk_io *io, int fd, unsigned depth, uint32_t timeout_ms, disk_io_done done,
                 void *done_arg, char *err, size_t errlen);
/* Closes the ring and the eventfd; call once nothing is in flight. */
void disk_io_destroy(disk_io *io);

/* Queues op (never blocks); it reaches the kernel at the next submit. */
void disk_io_queue(disk_io *io, disk_op *op);
/* Queues op ahead of everything waiting: a store's header, which completes
 * the slot its payload already filled, must not wait behind the payloads
 * of the rest of the batch. */
void disk_io_queue_front(disk_io *io, disk_op *op);
/* Moves queued operations into the ring (up to depth in the kernel) and
 * submits them: KVA_OK, or KVA_EAGAIN when the kernel refused for now
 * (they stay queued: call again later). */
int disk_io_submit(disk_io *io);
/* Edge-triggered readiness: drains the eventfd, then every completion
 * (io_uring may fold many into one signal), calling done for each, then
 * submits what was waiting. Returns the completions handled. */
unsigned disk_io_reap(disk_io *io);
/* Blocks until at least one operation completes (or returns at once when
 * none is outstanding), then reaps. */
void disk_io_wait(disk_io *io);
/* Operations queued or in the kernel. */
static inline unsigned disk_io_busy(const disk_io *io) {
  return io->inflight + io->inflight_small + io->npend;
}

/* ---- aligned bounce buffers ------------------------------------------- */

/* Free lists of DISK_BLOCK-aligned buffers by power-of-two size class
 * (4 KiB .. 1 TiB), keeping up to DISK_BOUNCE_KEEP spares of 64 KiB or
 * less (header blocks, tails) and 4 of larger ones (misaligned senders),
 * so the steady state allocates nothing. */
#define DISK_BOUNCE_CLASSES 29
#define DISK_BOUNCE_KEEP 64
typedef struct disk_bounce {
  void *free[DISK_BOUNCE_CLASSES][DISK_BOUNCE_KEEP];
  unsigned nfree[DISK_BOUNCE_CLASSES];
} disk_bounce;

/* A buffer of at least `bytes` (a power of two >= 4 KiB, contents
 * undefined); NULL when out of memory. */
void *disk_bounce_get(disk_bounce *b, uint64_t bytes);
void disk_bounce_put(disk_bounce *b, void *p, uint64_t bytes); /* same bytes as get */
void disk_bounce_destroy(disk_bounce *b);

#endif
