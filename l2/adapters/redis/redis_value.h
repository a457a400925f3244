/*
 * redis_value.h — the redis tier's value format: [object_header]
 * [payload] (l2/adapters/object_header.h), checked here over the bytes a GET gave
 * back. Pure: no I/O, no allocation, no logging, so the adapter
 * (redis_ops.c) and its fuzzer (tests/fuzz/fuzz_redis_value.c) run the same
 * check.
 */
#ifndef KVA_L2_REDIS_VALUE_H
#define KVA_L2_REDIS_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/adapters/object_header.h"

#define REDIS_VALUE_HDR sizeof(object_header)

/* The payload inside `value` (value_len bytes from the server, any
 * alignment) when it is the value stored for key k with layout
 * fingerprint fp and exactly len payload bytes: the right length, an
 * intact header naming k, fp and len, and a payload whose xxh3-64 is the
 * header's. Otherwise NULL, and *why (when why is not NULL) says what
 * did not match. Reads no byte outside [value, value + value_len). */
const void *redis_value_check(const void *value, size_t value_len, const kva_key *k, uint64_t fp,
                              uint64_t len, const char **why);

#endif
