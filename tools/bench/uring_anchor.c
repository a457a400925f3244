/*
 * uring_anchor.c — the raw io_uring O_DIRECT loop (see uring_anchor.h).
 *
 * One ring of 2 * depth entries (a slot write takes two SQEs), one buffer
 * per object in flight. The loop fills the SQ while a buffer is free,
 * submits and waits for at least one completion in one syscall
 * (io_uring_submit_and_wait), reaps every CQE there is, and repeats; an
 * object's buffer is free again when its last CQE arrives (for a linked
 * slot write, the header's, which completes after the payload's).
 *
 * user_data packs the buffer index (bits 0-15), a last-CQE-of-the-object
 * flag (bit 16) and the bytes the CQE must report (bits 32-63), so a short
 * transfer is caught without a per-request table.
 */
#include "tools/bench/uring_anchor.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define LAST_CQE (1ull << 16)
#define BUF_ALIGN (2u << 20) /* huge-page aligned, as the L1 pool is */

struct uring_anchor {
  int fd;                 /* O_DIRECT */
  struct io_uring ring;   /* 2 * depth SQ entries */
  uint64_t offset, block; /* region start; payload bytes per object */
  unsigned nobj, depth;
  char **bufs;         /* depth payload buffers of block bytes */
  char *hdrs;          /* depth header blocks, 4 KiB each */
  struct iovec *iov;   /* 2 per buffer: [header, payload] for slot reads */
  unsigned *free_bufs; /* stack of idle buffer indexes */
  unsigned nfree;
  uint64_t pending; /* SQEs submitted whose CQE has not been seen */
  int err;          /* first error of the current run */
};

/* Bytes of the region a loop of nobj objects of block bytes needs (the
 * larger of the two shapes). */
static uint64_t uring_anchor_region_bytes(uint64_t block, unsigned nobj) {
  return (uint64_t)nobj * (block + URING_ANCHOR_HEADER);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- setup ------------------------------------------------------------------ */

/* Preallocates the region; a filesystem without fallocate gets the file
 * extended instead. */
static int prealloc(int fd, uint64_t offset, uint64_t bytes) {
  if (fallocate(fd, 0, (off_t)offset, (off_t)bytes) == 0) return 0;
  if (errno != EOPNOTSUPP) return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  if ((uint64_t)st.st_size >= offset + bytes) return 0;
  return ftruncate(fd, (off_t)(offset + bytes)) == 0 ? 0 : -errno;
}

/* One payload buffer, faulted in so no run pays for its page faults. */
static char *alloc_buf(uint64_t bytes, int fill) {
  void *p = NULL;
  if (posix_memalign(&p, BUF_ALIGN, bytes) != 0) return NULL;
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, fill, bytes);
  return p;
}

static int alloc_bufs(uring_anchor *a) {
  a->bufs = calloc(a->depth, sizeof(*a->bufs));
  a->iov = calloc(2 * (size_t)a->depth, sizeof(*a->iov));
  a->free_bufs = calloc(a->depth, sizeof(*a->free_bufs));
  a->hdrs = alloc_buf((uint64_t)a->depth * URING_ANCHOR_HEADER, 0x48);
  if (!a->bufs || !a->iov || !a->free_bufs || !a->hdrs) return -ENOMEM;
  for (unsigned b = 0; b < a->depth; b++) {
    if (!(a->bufs[b] = alloc_buf(a->block, 0x5a + (int)b))) return -ENOMEM;
    a->iov[2 * b] = (struct iovec){a->hdrs + (size_t)b * URING_ANCHOR_HEADER, URING_ANCHOR_HEADER};
    a->iov[2 * b + 1] = (struct iovec){a->bufs[b], a->block};
  }
  return 0;
}

int uring_anchor_open(uring_anchor **out, const char *path, uint64_t offset, uint64_t block,
                      unsigned nobj, unsigned depth) {
  if (!out || !path || !block || !nobj || !depth || depth > 0xffff || block % 4096 ||
      offset % 4096 || block + URING_ANCHOR_HEADER > UINT32_MAX)
    return -EINVAL;
  uring_anchor *a = calloc(1, sizeof(*a));
  if (!a) return -ENOMEM;
  *a = (uring_anchor){.fd = -1, .offset = offset, .block = block, .nobj = nobj, .depth = depth};
  int rc = io_uring_queue_init(2 * depth, &a->ring, 0);
  if (rc < 0) {
    free(a);
    return rc;
  }
  a->fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  rc = a->fd < 0 ? -errno : prealloc(a->fd, offset, uring_anchor_region_bytes(block, nobj));
  if (rc == 0) rc = alloc_bufs(a);
  if (rc < 0) {
    uring_anchor_close(a);
    return rc;
  }
  *out = a;
  return 0;
}

void uring_anchor_close(uring_anchor *a) {
  if (!a) return;
  io_uring_queue_exit(&a->ring);
  if (a->fd >= 0) close(a->fd);
  for (unsigned b = 0; a->bufs && b < a->depth; b++) free(a->bufs[b]);
  free(a->bufs);
  free(a->hdrs);
  free(a->iov);
  free(a->free_bufs);
  free(a);
}

/* ---- the loop --------------------------------------------------------------- */

static struct io_uring_sqe *next_sqe(uring_anchor *a) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring); /* never NULL: 2 per buffer fit */
  a->pending++;
  return sqe;
}

static uint64_t tag(unsigned buf, uint64_t bytes, int last) {
  return (uint64_t)buf | (last ? LAST_CQE : 0) | (bytes << 32);
}

/* Queues object i on buffer b. */
static void queue_object(uring_anchor *a, uring_anchor_shape shape, int write, unsigned i,
                         unsigned b) {
  struct io_uring_sqe *sqe;
  if (shape == URING_ANCHOR_PURE) {
    uint64_t off = a->offset + (uint64_t)i * a->block;
    sqe = next_sqe(a);
    if (write)
      io_uring_prep_write(sqe, a->fd, a->bufs[b], (unsigned)a->block, off);
    else
      io_uring_prep_read(sqe, a->fd, a->bufs[b], (unsigned)a->block, off);
    io_uring_sqe_set_data64(sqe, tag(b, a->block, 1));
    return;
  }
  uint64_t slot = a->offset + (uint64_t)i * (a->block + URING_ANCHOR_HEADER);
  sqe = next_sqe(a);
  if (!write) {
    io_uring_prep_readv(sqe, a->fd, &a->iov[2 * b], 2, slot);
    io_uring_sqe_set_data64(sqe, tag(b, a->block + URING_ANCHOR_HEADER, 1));
    return;
  }
  io_uring_prep_write(sqe, a->fd, a->bufs[b], (unsigned)a->block, slot + URING_ANCHOR_HEADER);
  io_uring_sqe_set_flags(sqe, IOSQE_IO_LINK); /* the header only after the payload */
  io_uring_sqe_set_data64(sqe, tag(b, a->block, 0));
  sqe = next_sqe(a);
  io_uring_prep_write(sqe, a->fd, a->iov[2 * b].iov_base, URING_ANCHOR_HEADER, slot);
  io_uring_sqe_set_data64(sqe, tag(b, URING_ANCHOR_HEADER, 1));
}

/* Reaps every CQE there is; returns the objects finished. */
static unsigned reap(uring_anchor *a) {
  struct io_uring_cqe *cqe;
  unsigned head, seen = 0, finished = 0;
  io_uring_for_each_cqe(&a->ring, head, cqe) {
    uint64_t d = io_uring_cqe_get_data64(cqe);
    if (cqe->res < 0 && !a->err) a->err = cqe->res;
    if (cqe->res >= 0 && (uint64_t)cqe->res != d >> 32 && !a->err) a->err = -EIO;
    if (d & LAST_CQE) {
      a->free_bufs[a->nfree++] = (unsigned)(d & 0xffff);
      finished++;
    }
    seen++;
  }
  io_uring_cq_advance(&a->ring, seen);
  a->pending -= seen;
  return finished;
}

/* Submits what is queued and waits for a completion; after an error, only
 * waits (SQEs the kernel refused are dropped from the count: they never
 * complete). */
static void submit_or_wait(uring_anchor *a) {
  struct io_uring_cqe *cqe;
  if (a->err) {
    io_uring_wait_cqe(&a->ring, &cqe);
    return;
  }
  int rc = io_uring_submit_and_wait(&a->ring, 1);
  if (rc >= 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) return;
  a->err = rc;
  a->pending -= io_uring_sq_ready(&a->ring);
}

int uring_anchor_run(uring_anchor *a, uring_anchor_shape shape, int write, double *secs) {
  unsigned next = 0, done = 0;
  a->nfree = 0;
  for (unsigned b = a->depth; b-- > 0;) a->free_bufs[a->nfree++] = b;
  a->pending = 0;
  a->err = 0;
  double t0 = now_s();
  /* On an error nothing more is queued, but every SQE in flight is still
   * waited for: the kernel may be using the buffers. */
  while (a->err ? a->pending > 0 : done < a->nobj) {
    while (!a->err && next < a->nobj && a->nfree > 0)
      queue_object(a, shape, write, next++, a->free_bufs[--a->nfree]);
    submit_or_wait(a);
    done += reap(a);
  }
  *secs = now_s() - t0;
  return a->err;
}
