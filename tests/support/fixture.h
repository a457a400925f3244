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
/* Argument i of the test binary (the target's args; 0 is the binary), or
 * NULL. */
const char *fixture_arg(int i);

/* A runtime with storage actors: an L1 pool of l1_bytes (plain memory, no
 * huge pages), then optional "key=value" settings (NULL-terminated). */
kva_runtime *fixture_storage(int workers, uint64_t l1_bytes, ...);
/* Key i of model "test_model" (hash = the 8 bytes of i). */
kva_key fixture_key(uint64_t i);
/* One tensor [100, 2, 512] bf16 = 204,800 bytes (LMCache's basic layout). */
kva_layout fixture_layout_basic(void);
/* One tensor [2048, 1024] f32 = 8 MiB (LMCache's large layout). */
kva_layout fixture_layout_large(void);
/* One u8 tensor of `bytes` bytes. */
kva_layout fixture_layout_bytes(uint64_t bytes);
/* Two tensors: K and V of [16, 8, 64] bf16, then [16] f32 scales. */
kva_layout fixture_layout_two(void);
/* got is want, field by field (the unused dims and tensors too). */
void fixture_assert_layout_eq(const kva_layout *got, const kva_layout *want);
/* reserve_write(NEW) + finish_write of keys [first, first + n), asserting
 * success. */
void fixture_write(kva_storage *s, uint64_t first, size_t n, const kva_layout *l);
/* Asserts that kva_memcheck reports no lock held and consistent accounting,
 * once the L1->L2 stores queued so far have ended (10 s at most). */
void fixture_memcheck_clean(kva_storage *s);
/* kva_memcheck_with(s, o) into report[len], asserting it returns want_rc:
 * the counts it filled in. */
kva_memcheck_report fixture_memcheck_counts(kva_storage *s, const kva_memcheck_opts *o, int want_rc,
                                            char *report, size_t len);

#endif
