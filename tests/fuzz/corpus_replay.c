/*
 * corpus_replay.c — main() for a libFuzzer harness built as a test by the
 * toolchain (tests/fuzz/fuzz.bzl): feeds LLVMFuzzerTestOneInput every file of
 * the directories given as arguments, in name order, each in a buffer of
 * exactly its size. A harness check that fails aborts, so the test fails
 * on the first input that does; the file's name is printed before it runs.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

/* The file's bytes (malloc'd, exactly *len of them; 1 byte when empty). */
static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f || fseek(f, 0, SEEK_END) != 0) return NULL;
  long n = ftell(f);
  uint8_t *buf = n >= 0 ? malloc(n ? (size_t)n : 1) : NULL;
  if (buf && (fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static int replay_dir(const char *dir) {
  struct dirent **names;
  int n = scandir(dir, &names, NULL, by_name), done = 0;
  if (n < 0) {
    perror(dir);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    uint8_t *buf = names[i]->d_name[0] == '.' ? NULL : slurp(path, &len);
    if (buf) {
      fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
      LLVMFuzzerTestOneInput(buf, len);
      free(buf);
      done++;
    }
    free(names[i]);
  }
  free(names);
  return done;
}

int main(int argc, char **argv) {
  int total = 0;
  for (int i = 1; i < argc; i++) {
    int n = replay_dir(argv[i]);
    if (n <= 0) {
      fprintf(stderr, "%s: no input to replay\n", argv[i]);
      return EXIT_FAILURE;
    }
    total += n;
  }
  printf("replayed %d inputs\n", total);
  return total > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
