/*
 * host_device.c — KVA_DEVICE_HOST: the copy device of machines without a
 * GPU (and of CI), with the semantics of a CUDA device.
 *
 * Each "stream" is a thread with a FIFO of jobs, so a job runs after the
 * jobs queued on its stream before it, as on a CUDA stream; jobs go to the
 * streams round-robin. The stream thread calls the job's callbacks itself,
 * which is where CUDA's callback thread would call them: the copy actor
 * sees one completion path for both devices.
 */
#include <pthread.h>
#include <stdlib.h>

#include "actors/log.h"
#include "gpu/backend.h"
#include "kvact.h"

typedef struct host_stream {
  pthread_t thread;
  pthread_mutex_t lock; /* head, tail, stop */
  pthread_cond_t wake;
  copy_job *head, *tail;
  int stop;
} host_stream;

typedef struct host_device {
  gpu_backend base; /* first: the backend pointer is the device pointer */
  uint32_t nstreams;
  uint32_t next; /* round-robin cursor; only the copy actor's thread submits */
  host_stream *streams;
} host_device;

/* Runs one job: a scatter reports every layer as it lands (layer-wise
 * loads); a gather's layers are only useful together. */
static void host_run(copy_job *j) {
  for (uint32_t l = 0; l < j->g.num_layers; l++) {
    host_copy_layer(j, l);
    if (j->dir == COPY_SCATTER && j->layer_done) j->layer_done(j, l);
  }
  j->done(j, KVA_OK);
}

/* Takes the next job, or NULL once stopped and drained. */
static copy_job *host_stream_pop(host_stream *st) {
  pthread_mutex_lock(&st->lock);
  while (!st->head && !st->stop) pthread_cond_wait(&st->wake, &st->lock);
  copy_job *j = st->head;
  if (j) {
    st->head = j->next;
    if (!st->head) st->tail = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  return j;
}

static void *host_stream_main(void *arg) {
  host_stream *st = arg;
  copy_job *j;
  while ((j = host_stream_pop(st))) host_run(j);
  return NULL;
}

static int host_submit(gpu_backend *b, copy_job *j) {
  host_device *d = (host_device *)b;
  host_stream *st = &d->streams[d->next++ % d->nstreams];
  j->next = NULL;
  pthread_mutex_lock(&st->lock);
  if (st->tail)
    st->tail->next = j;
  else
    st->head = j;
  st->tail = j;
  pthread_cond_signal(&st->wake);
  pthread_mutex_unlock(&st->lock);
  return KVA_OK;
}

/* Stops streams [0, n): each drains its queue first (destroy promises
 * every submitted job its callbacks). */
static void host_stop_streams(host_device *d, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    host_stream *st = &d->streams[i];
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    pthread_cond_destroy(&st->wake);
    pthread_mutex_destroy(&st->lock);
  }
  free(d->streams);
  free(d);
}

static void host_destroy(gpu_backend *b) {
  host_device *d = (host_device *)b;
  host_stop_streams(d, d->nstreams);
}

gpu_backend *host_device_create(uint32_t streams) {
  host_device *d = calloc(1, sizeof(*d));
  if (!d || !(d->streams = calloc(streams ? streams : 1, sizeof(host_stream)))) {
    free(d);
    return NULL;
  }
  d->base = (gpu_backend){.name = "host", .submit = host_submit, .destroy = host_destroy};
  d->nstreams = streams ? streams : 1;
  for (uint32_t i = 0; i < d->nstreams; i++) {
    host_stream *st = &d->streams[i];
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->wake, NULL);
    if (pthread_create(&st->thread, NULL, host_stream_main, st) != 0) {
      LOG_ERROR("gpu: cannot start host copy thread %u", i);
      pthread_cond_destroy(&st->wake);
      pthread_mutex_destroy(&st->lock);
      host_stop_streams(d, i);
      return NULL;
    }
  }
  return &d->base;
}
