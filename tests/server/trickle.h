/*
 * trickle.h — slow HTTP peers for the metrics suites: TCP connections
 * that send a request one byte at a time and never finish it (a
 * "slowloris"), each byte sooner than any inactivity timeout, so only a
 * deadline on the whole request or a limit on connections gets rid of
 * them.
 */
#ifndef KVA_TESTS_TRICKLE_H
#define KVA_TESTS_TRICKLE_H

typedef struct trickle trickle;

/* n connections to 127.0.0.1:port, from the source address src (an IPv4
 * literal; NULL = the kernel's choice, 127.0.0.1), each sending
 * "GET /metrics HTTP/1.1\r\nX-Trickle: aaaa..." one byte every period_ms
 * from a thread of their own until trickle_stop. Connects without
 * waiting (a connection the server has not accepted yet still trickles
 * into its socket buffer). Fails the test when a socket cannot be made. */
trickle *trickle_start(const char *src, int port, int n, int period_ms);
/* How many of them the server has closed so far (EOF or reset). */
int trickle_closed(trickle *t);
/* Stops the thread, closes the connections, frees t. */
void trickle_stop(trickle *t);

#endif
