/*
 * opt.h — kvbench's command line as one table. Each row is a setting:
 * its option name (NULL: a size with no option, set by default and by
 * --quick alone), its kind, where its value goes (an offset into the
 * caller's struct), the modes that take it, its default, its --quick value
 * and its help. The getopt_long array, the usage text and the checks all
 * come from the rows; main.c holds the table.
 */
#ifndef KVA_TOOLS_KVBENCH_OPT_H
#define KVA_TOOLS_KVBENCH_OPT_H

#include <stddef.h>
#include <stdio.h>

typedef enum opt_kind {
  OPT_FLAG,     /* no argument: the int becomes 1 */
  OPT_QUICK,    /* a flag that also puts in the quick value of every row not given */
  OPT_INT,      /* int, 0 or more */
  OPT_UNSIGNED, /* unsigned, 0 or more */
  OPT_U64,      /* uint64_t */
  OPT_DOUBLE,   /* double, above 0 */
  OPT_STR,      /* const char *: the argument itself */
  OPT_LIST,     /* opt_list: repeatable, each argument appended */
} opt_kind;

/* The modes: what a row is for. */
#define OPT_SIM 1u   /* the simulation (no --suite) */
#define OPT_SUITE 2u /* --suite */
#define OPT_BOTH (OPT_SIM | OPT_SUITE)

typedef struct opt_list {
  char **v; /* as given on the command line, argc entries of room */
  int n;
} opt_list;

typedef struct opt_spec {
  const char *name; /* "reps" for --reps, "o" for -o; NULL: no option */
  const char *arg;  /* the argument's name in the usage ("N"); NULL for flags */
  opt_kind kind;
  size_t off;        /* of the field in the caller's struct */
  unsigned mode;     /* OPT_SIM, OPT_SUITE or both */
  int positive;      /* 0 is refused (counts and sizes) */
  const char *def;   /* the default, parsed as an argument; NULL: left as it is */
  const char *quick; /* with --quick when not given; NULL: the default stays */
  const char *help;  /* lines after the first indented to the help column */
} opt_spec;

/* Parses argv for `mode` into base: the defaults of the mode's rows, the
 * options, then --quick's values. 0, or 2 after saying why on stderr
 * (getopt's own message for an unknown option). opt_list fields get
 * argc entries of room: free their v. */
int opt_parse(const opt_spec *t, size_t n, unsigned mode, int argc, char **argv, void *base);
/* The options of the rows whose mode is `mode` (OPT_BOTH: those of both
 * alone), one per line (or more, as their help says). */
void opt_usage(FILE *f, const opt_spec *t, size_t n, unsigned mode);

#endif
