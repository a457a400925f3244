"""kva_test: one Check suite, one cc_test, as every package under tests/ declares it."""

load("//:build_defs.bzl", "KVA_COPTS")

# What a Check suite links when it does not get it through //tests/support.
CHECK_LINKOPTS = [
    "-lcheck",
    "-lsubunit",
    "-lm",
    "-lrt",
    "-lpthread",
]

# The shared fixtures and main() of a Check suite (tests/support/).
_SUPPORT = "//tests/support"

def kva_test(name, srcs = None, deps = None, size = "small", **kwargs):
    """A cc_test of the suite NAME.c built with KVA_COPTS.

    Args:
      name: the target, and its one source NAME.c unless srcs says otherwise.
      srcs: the sources when there are several (one suite over many files).
      deps: what the suite links, in place of the default: //tests/support
        alone (fixtures and check_main.c). A suite that needs more lists
        //tests/support or the helper that brings it.
      size: Bazel's test size (timeout and resources); most suites are small.
      **kwargs: any other cc_test attribute (args, data, env, linkopts, tags),
        written out where the suite needs it.
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".c"],
        copts = KVA_COPTS,
        deps = deps if deps != None else [_SUPPORT],
        **kwargs
    )

def kva_disk_open_hooked_test(name, deps, size = "small", **kwargs):
    """A kva_test whose disk tiers open their file through disk_open_fn.

    For the suites that play a filesystem refusing O_DIRECT or O_TMPFILE
    (tests/support/disk_open_hook.h): l2/adapters/disk/disk_open.c is
    compiled into the test itself with DISK_OPEN_HOOK naming the pointer.
    Its object is linked before //l2/adapters/disk's archive (not
    alwayslink), so it stands in for the library's, which has no hook.

    Args:
      name: the target, and its one source NAME.c.
      deps: what the suite links besides //tests/support:disk_open_hook.
      size: Bazel's test size.
      **kwargs: any other cc_test attribute.
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = [name + ".c", "//l2/adapters/disk:disk_open.c"],
        copts = KVA_COPTS + ["-DDISK_OPEN_HOOK=disk_open_fn"],
        deps = deps + ["//tests/support:disk_open_hook"],
        **kwargs
    )
