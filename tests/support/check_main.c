/*
 * check_main.c — main() for a Check suite: runs the suite named by the
 * test target (one suite per binary), prints Check's summary line, exits
 * non-zero on any failure. The target's args are kept for fixture_arg.
 */
#include <check.h>
#include <stdlib.h>

#include "tests/support/fixture.h"

Suite *kva_test_suite(void);

static int arg_count;
static char **args;

const char *fixture_arg(int i) {
  return i >= 0 && i < arg_count ? args[i] : NULL;
}

int main(int argc, char **argv) {
  arg_count = argc;
  args = argv;
  SRunner *sr = srunner_create(kva_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
