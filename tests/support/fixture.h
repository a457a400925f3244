/*
 * fixture.h — shared helpers for the Check suites.
 */
#ifndef KVA_TESTS_FIXTURE_H
#define KVA_TESTS_FIXTURE_H

#include <check.h>
#include <stdint.h>

#include "kvact.h"

/* A runtime with `workers` workers (0 = deterministic), no storage actors,
 * and optional extra "key=value" settings (NULL-terminated). */
kva_runtime *fixture_runtime(int workers, ...);
/* Receives one message on p within timeout_ms, failing the test otherwise. */
kva_msg fixture_recv(kva_port *p, void *buf, uint32_t buflen, int timeout_ms);
uint64_t fixture_now_ns(void);

#endif
