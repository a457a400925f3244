/*
 * status.c — the status strings of the public API (kva_strerror).
 */
#include "kvact.h"

const char *kva_strerror(int status) {
  switch (status) {
  case KVA_OK:
    return "ok";
  case KVA_KEY_NOT_EXIST:
    return "key does not exist";
  case KVA_KEY_NOT_READABLE:
    return "key is not readable";
  case KVA_KEY_NOT_WRITABLE:
    return "key is not writable";
  case KVA_KEY_WRONG_STATE:
    return "key is in the wrong state";
  case KVA_KEY_LOCKED:
    return "key is locked";
  case KVA_OUT_OF_MEMORY:
    return "out of memory in the tier";
  case KVA_EINVAL:
    return "invalid argument";
  case KVA_ECONFIG:
    return "invalid configuration";
  case KVA_EIO:
    return "I/O error";
  case KVA_EAGAIN:
    return "try again";
  case KVA_ETIMEDOUT:
    return "timed out";
  case KVA_ESHUTDOWN:
    return "runtime is shut down";
  case KVA_ENOTSUP:
    return "not supported";
  case KVA_ENOMEM:
    return "out of memory";
  case KVA_EUNAVAIL:
    return "part of the tier is unavailable";
  default:
    return "unknown status";
  }
}
