/*
 * cli.c — see cli.h.
 */
#include "tests/support/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

int cli_run(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st), "did not run: %s", cmd);
  return WEXITSTATUS(st);
}

const char *cli_slurp(const char *path) {
  static char buf[2][65536];
  static int which;
  char *b = buf[which ^= 1];
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot read %s", path);
  b[fread(b, 1, sizeof buf[0] - 1, f)] = '\0';
  fclose(f);
  return b;
}
