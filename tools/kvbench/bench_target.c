/*
 * bench_target.c — every figure with its target: a suite's line says
 * `target=>=X ok=yes|no` (or `target=none` where no target was set), and
 * a second target on the same line is named after its figure
 * (`mallocs_per_msg_target=<=1e-05 mallocs_per_msg_ok=yes`), and
 * the suite ends with one line naming the measures below target:
 *
 *   suite=l1 below_target=cycle-2MiB,prefetch-rtt     (or below_target=none)
 *
 * A figure that could not be measured (an anchor missing, say) counts as
 * below target: a summary must not read "none" over a hole.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tools/kvbench/bench.h"

static char misses[2048]; /* "a,b,c" of the current suite */

static void remember(const char *measure) {
  size_t len = strlen(misses), m = strlen(measure);
  /* once per measure: a line with two targets may miss both */
  for (const char *p = misses; (p = strstr(p, measure)); p += m)
    if ((p == misses || p[-1] == ',') && (p[m] == ',' || p[m] == 0)) return;
  if (len + m + 2 > sizeof(misses)) return;
  if (len) misses[len++] = ',';
  memcpy(misses + len, measure, m + 1);
}

bool bench_target(const char *measure, const char *label, double value, const char *op,
                  double target) {
  bool ok = !isnan(value) && (strcmp(op, "<=") == 0 ? value <= target : value >= target);
  if (label)
    printf(" %s_target=%s%.4g %s_ok=%s", label, op, target, label, ok ? "yes" : "no");
  else
    printf(" target=%s%.4g ok=%s", op, target, ok ? "yes" : "no");
  if (!ok) remember(measure);
  return ok;
}

void bench_no_target(void) {
  printf(" target=none");
}

void bench_missed(const char *measure) {
  remember(measure);
}

void bench_suite_end(const char *suite) {
  printf("suite=%s below_target=%s\n", suite, misses[0] ? misses : "none");
  fflush(stdout);
  misses[0] = 0;
}
