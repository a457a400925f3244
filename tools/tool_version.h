/*
 * tool_version.h — the --version line of every kvact binary, on stdout:
 * "<tool> <version> (libkvact <version>)". The first is the kvact.h the
 * tool was compiled with, the second what the library it runs with says
 * (kva_version()); a packaged install shows both, so a mismatch is visible.
 */
#ifndef KVA_TOOLS_TOOL_VERSION_H
#define KVA_TOOLS_TOOL_VERSION_H

#include <stdio.h>

#include "kvact.h"

/* Prints the line; returns the exit status of `tool --version` (0). */
static inline int tool_version(const char *tool) {
  printf("%s %s (libkvact %s)\n", tool, KVA_VERSION_STRING, kva_version());
  return 0;
}

#endif
