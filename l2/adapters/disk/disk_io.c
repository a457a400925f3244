/*
 * disk_io.c — io_uring with linked timeouts and an eventfd, plus aligned
 * bounce buffers (disk_io.h).
 *
 * Each operation goes in as two SQEs: the readv/writev with IOSQE_IO_LINK,
 * then an IORING_OP_LINK_TIMEOUT. The operation's CQE carries the op
 * pointer as user_data; the timeout's CQE carries 0 and is skipped. When
 * the timeout fires the operation completes with -ECANCELED, reported as
 * -ETIMEDOUT. A request the block layer already started cannot be
 * cancelled: its CQE then comes when the device answers, and only then is
 * the buffer given back (the kernel may write into it until that CQE).
 */
#include "l2/adapters/disk/disk_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kvact.h"
#include "l2/adapters/disk/disk_format.h"

#define TIMEOUT_UD 0 /* user_data of the link timeouts: never an op pointer */

int disk_io_init(disk_io *io, int fd, unsigned depth, uint32_t timeout_ms, disk_io_done done,
                 void *done_arg, char *err, size_t errlen) {
  memset(io, 0, sizeof(*io));
  io->fd = fd;
  io->efd = -1;
  io->depth = depth ? depth : 1;
  io->read_budget = DISK_IO_READ_BYTES;
  io->done = done;
  io->done_arg = done_arg;
  io->timeout.tv_sec = timeout_ms / 1000;
  io->timeout.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
  int rc = io_uring_queue_init(4 * io->depth, &io->ring, 0);
  if (rc < 0) {
    snprintf(err, errlen, "io_uring_queue_init(%u): %s", 4 * io->depth, strerror(-rc));
    return KVA_EIO;
  }
  io->ring_ok = true;
  io->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (io->efd < 0 || (rc = io_uring_register_eventfd(&io->ring, io->efd)) < 0) {
    snprintf(err, errlen, "io_uring eventfd: %s", strerror(io->efd < 0 ? errno : -rc));
    disk_io_destroy(io);
    return KVA_EIO;
  }
  return KVA_OK;
}

void disk_io_destroy(disk_io *io) {
  if (io->ring_ok) io_uring_queue_exit(&io->ring);
  io->ring_ok = false;
  if (io->efd >= 0) close(io->efd);
  io->efd = -1;
}

/* Payload writes wait in pend[1], reads and header blocks in pend[0]. */
static int pend_class(const disk_op *op) {
  return op->write && !op->small;
}

void disk_io_queue(disk_io *io, disk_op *op) {
  int c = pend_class(op);
  op->next = NULL;
  if (io->pend[c].tail)
    io->pend[c].tail->next = op;
  else
    io->pend[c].head = op;
  io->pend[c].tail = op;
  io->npend++;
}

void disk_io_queue_front(disk_io *io, disk_op *op) {
  int c = pend_class(op);
  op->next = io->pend[c].head;
  io->pend[c].head = op;
  if (!io->pend[c].tail) io->pend[c].tail = op;
  io->npend++;
}

/* Two SQEs for op; false when the ring has no room. */
static bool prep_one(disk_io *io, disk_op *op) {
  if (io_uring_sq_space_left(&io->ring) < 2) return false;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
  if (op->write)
    io_uring_prep_writev(sqe, io->fd, op->iov, (unsigned)op->niov, op->off);
  else
    io_uring_prep_readv(sqe, io->fd, op->iov, (unsigned)op->niov, op->off);
  io_uring_sqe_set_data(sqe, op);
  sqe->flags |= IOSQE_IO_LINK;
  sqe = io_uring_get_sqe(&io->ring);
  io_uring_prep_link_timeout(sqe, &io->timeout, 0);
  io_uring_sqe_set_data64(sqe, TIMEOUT_UD);
  return true;
}

static uint64_t iov_bytes(const disk_op *op) {
  uint64_t n = 0;
  for (int i = 0; i < op->niov; i++) n += op->iov[i].iov_len;
  return n;
}

/* Whether the head of pend[c] may go into the kernel now: reads up to
 * read_budget bytes in flight, so that they finish in the order they were
 * asked for; payload writes as the depth allows while no read waits or
 * runs, else up to 1/DISK_IO_WRITE_SHARE of the read budget. At least one
 * of each may always run. */
static bool may_start(const disk_io *io, int c) {
  const disk_op *op = io->pend[c].head;
  if (!op) return false;
  if (op->small) return io->inflight_small < io->depth;
  if (io->inflight >= io->depth) return false;
  uint64_t b = iov_bytes(op);
  if (c == 0) return !io->inflight_reads || io->inflight_read_bytes + b <= io->read_budget;
  if (!io->pend[0].head && !io->inflight_reads) return true;
  return !io->inflight_writes ||
         io->inflight_write_bytes + b <= io->read_budget / DISK_IO_WRITE_SHARE;
}

static void count_start(disk_io *io, const disk_op *op, int delta) {
  if (op->small) {
    io->inflight_small += (unsigned)delta;
    return;
  }
  io->inflight += (unsigned)delta;
  uint64_t b = iov_bytes(op);
  if (op->write) {
    io->inflight_writes += (unsigned)delta;
    io->inflight_write_bytes =
        delta > 0 ? io->inflight_write_bytes + b : io->inflight_write_bytes - b;
  } else {
    io->inflight_reads += (unsigned)delta;
    io->inflight_read_bytes = delta > 0 ? io->inflight_read_bytes + b : io->inflight_read_bytes - b;
  }
}

int disk_io_submit(disk_io *io) {
  unsigned added = 0;
  for (int c = 0; c < 2; c++)
    while (may_start(io, c) && prep_one(io, io->pend[c].head)) {
      disk_op *op = io->pend[c].head;
      io->pend[c].head = op->next;
      if (!io->pend[c].head) io->pend[c].tail = NULL;
      io->npend--;
      count_start(io, op, 1);
      added++;
    }
  if (!added && !io_uring_sq_ready(&io->ring)) return KVA_OK;
  /* SQEs the kernel did not take stay in the ring for the next call */
  int rc = io_uring_submit(&io->ring);
  return rc < 0 && rc != -EINTR ? KVA_EAGAIN : KVA_OK;
}

/* The op's outcome: a short transfer is an error (the file never ends
 * inside a slot), a cancel is the link timeout. */
static int op_result(const disk_op *op, int res) {
  if (res == -ECANCELED) return -ETIMEDOUT;
  if (res < 0) return res;
  return (uint64_t)res == iov_bytes(op) ? 0 : -EIO;
}

#define REAP_BATCH 64

/* Takes up to REAP_BATCH completed ops off the CQ ring (their results set). */
static unsigned take_cqes(disk_io *io, disk_op **done) {
  struct io_uring_cqe *cqe;
  unsigned n = 0;
  while (n < REAP_BATCH && io_uring_peek_cqe(&io->ring, &cqe) == 0) {
    disk_op *op = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&io->ring, cqe);
    if (!op) continue; /* a link timeout's own CQE */
    count_start(io, op, -1);
    op->res = op_result(op, res);
    done[n++] = op;
  }
  return n;
}

unsigned disk_io_reap(disk_io *io) {
  uint64_t v;
  /* drain first: a completion posted after this read rings again */
  while (read(io->efd, &v, sizeof(v)) == sizeof(v)) {
  }
  disk_op *done[REAP_BATCH];
  unsigned total = 0, n;
  while ((n = take_cqes(io, done)) > 0) {
    /* refill the device before the callbacks' CPU work (checksums) */
    disk_io_submit(io);
    for (unsigned i = 0; i < n; i++) io->done(done[i], io->done_arg);
    total += n;
  }
  disk_io_submit(io); /* what the callbacks queued */
  return total;
}

void disk_io_wait(disk_io *io) {
  if (!disk_io_busy(io)) return;
  disk_io_submit(io); /* moves queued ops into the ring */
  /* submits what the kernel has not taken yet, then waits for one CQE (or
   * returns at once with an error: the caller loops) */
  if (io->inflight + io->inflight_small) io_uring_submit_and_wait(&io->ring, 1);
  disk_io_reap(io);
}

/* ---- bounce buffers ---------------------------------------------------- */

static unsigned size_class(uint64_t bytes) {
  unsigned c = 0;
  while (c + 1 < DISK_BOUNCE_CLASSES && ((uint64_t)DISK_BLOCK << c) < bytes) c++;
  return c;
}

void *disk_bounce_get(disk_bounce *b, uint64_t bytes) {
  unsigned c = size_class(bytes);
  if (((uint64_t)DISK_BLOCK << c) < bytes) return NULL; /* beyond the last class */
  if (b->nfree[c]) return b->free[c][--b->nfree[c]];
  void *p = NULL;
  if (posix_memalign(&p, DISK_BLOCK, (size_t)DISK_BLOCK << c) != 0) return NULL;
  return p;
}

void disk_bounce_put(disk_bounce *b, void *p, uint64_t bytes) {
  if (!p) return;
  unsigned c = size_class(bytes);
  /* many spare header and tail blocks, few spare big buffers (only
   * misaligned senders need those) */
  unsigned keep = ((uint64_t)DISK_BLOCK << c) <= (64u << 10) ? DISK_BOUNCE_KEEP : 4;
  if (b->nfree[c] < keep)
    b->free[c][b->nfree[c]++] = p;
  else
    free(p);
}

void disk_bounce_destroy(disk_bounce *b) {
  for (unsigned c = 0; c < DISK_BOUNCE_CLASSES; c++)
    while (b->nfree[c]) free(b->free[c][--b->nfree[c]]);
}
