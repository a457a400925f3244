/*
 * version.c — kva_version: the version this library was built as, which
 * a program compares with the KVA_VERSION_* macros of the header it was
 * compiled against.
 */
#include "kvact.h"

const char *kva_version(void) {
  return KVA_VERSION_STRING;
}
