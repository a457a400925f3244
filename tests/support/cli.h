/*
 * cli.h — helpers of the suites that run a tool binary (kvconf fsck,
 * kvinspect): run a command line, capture its output into files, read
 * them back, assert on their text.
 */
#ifndef KVA_TESTS_CLI_H
#define KVA_TESTS_CLI_H

#include <check.h>
#include <string.h>

/* Runs a shell command line (printf-style); fails the test when it could
 * not run or did not exit; returns its exit status. */
int cli_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The file's text (NUL-terminated, truncated at 64 KiB); two buffers
 * alternate, so two results can be used at once. */
const char *cli_slurp(const char *path);

#define CLI_ASSERT_HAS(path, s)                                                                    \
  ck_assert_msg(strstr(cli_slurp(path), s), "%s lacks \"%s\":\n%s", path, s, cli_slurp(path))

#endif
