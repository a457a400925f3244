"""libFuzzer targets for kvact's parsers of outside bytes (tests/fuzz/fuzz_*.c)."""

load("//:build_defs.bzl", "KVA_COPTS")

_CLANG = ("clang -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined " +
          "-g -O1 -std=gnu11 -D_GNU_SOURCE -I. ")

def kva_fuzzer(name, c_srcs, hdrs, libs, deps):
    """Two targets for the harness tests/fuzz/fuzz_<name>.c.

    fuzz_<name>: bazel-bin/tests/fuzz/fuzz_<name>_bin, the harness and c_srcs
    (the code under test, instrumented) built by clang with libFuzzer in a
    genrule, since Bazel's toolchain is gcc. tests/fuzz/run_fuzz.sh runs it.

    fuzz_<name>_corpus_test: the same harness built by the toolchain
    against deps, replaying every file of tests/fuzz/fuzz_corpus/<name>/ (the
    seeds and every input that once failed), so `bazel test` and its
    sanitizer configs check the corpus too.

    Args:
      name: the harness, tests/fuzz/fuzz_<name>.c.
      c_srcs: labels of the C sources the fuzzer binary compiles.
      hdrs: labels of every header they and the harness include.
      libs: linker flags of the fuzzer binary.
      deps: cc_library targets of the replay test.
    """
    harness = "fuzz_%s.c" % name
    native.genrule(
        name = "fuzz_" + name,
        srcs = [harness, "fuzz.h"] + c_srcs + hdrs,
        outs = ["fuzz_%s_bin" % name],
        cmd = _CLANG + " ".join(["$(locations %s)" % s for s in [harness] + c_srcs]) +
              " " + " ".join(libs) + " -o $@",
        executable = True,
    )
    native.cc_test(
        name = "fuzz_%s_corpus_test" % name,
        size = "small",
        srcs = [harness, "fuzz.h", "corpus_replay.c"],
        args = ["%s/fuzz_corpus/%s" % (native.package_name(), name)],
        copts = KVA_COPTS,
        data = native.glob(["fuzz_corpus/%s/*" % name]),
        deps = deps,
    )
