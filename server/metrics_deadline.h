/*
 * metrics_deadline.h — a deadline on every request of the metrics
 * endpoint (metrics.c's reader only).
 *
 * libmicrohttpd's own timeout counts inactivity: a peer that sends one
 * byte of its request every few seconds keeps its connection for ever,
 * and server.metrics_max_connections of them lock every scraper out. Here
 * each connection must send its request and be answered within
 * timeout_ms of its accept, or of its previous answer (keep-alive); past
 * that a thread of ours shuts its socket down, and libmicrohttpd, seeing
 * the end of the stream, closes it.
 */
#ifndef KVA_SERVER_METRICS_DEADLINE_H
#define KVA_SERVER_METRICS_DEADLINE_H

#include <microhttpd.h>
#include <stdint.h>

typedef struct metrics_deadline metrics_deadline;

/* Room for max connections (libmicrohttpd's connection limit); starts
 * the thread that enforces timeout_ms. NULL when out of memory or
 * threads. */
metrics_deadline *metrics_deadline_start(uint32_t max, uint32_t timeout_ms);
/* Stops the thread (before MHD_stop_daemon, whose closes still call
 * metrics_deadline_notify), then, after MHD_stop_daemon, metrics_deadline_free. */
void metrics_deadline_stop(metrics_deadline *d);
void metrics_deadline_free(metrics_deadline *d);

/* libmicrohttpd's callbacks, cls = d: MHD_OPTION_NOTIFY_CONNECTION (a
 * connection's clock starts at its accept; closed, it is forgotten
 * before libmicrohttpd closes its socket) and MHD_OPTION_NOTIFY_COMPLETED
 * (answered: its clock starts again for the next request). */
void metrics_deadline_notify(void *cls, struct MHD_Connection *c, void **ctx,
                             enum MHD_ConnectionNotificationCode code);
void metrics_deadline_answered(void *cls, struct MHD_Connection *c, void **request,
                               enum MHD_RequestTerminationCode why);

#endif
