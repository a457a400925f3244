/*
 * check_main.c — main() for a Check suite: runs the suite named by the
 * test target (one suite per binary), prints Check's summary line, exits
 * non-zero on any failure.
 */
#include <check.h>
#include <stdlib.h>

Suite *kva_test_suite(void);

int main(void) {
  SRunner *sr = srunner_create(kva_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
