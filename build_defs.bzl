"""Shared compiler flags for kvact's own code."""

KVA_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

# The library's own code (everything linked into libkvact.so): symbols are
# hidden unless kvact.h marks them KVA_API, so the shared library exports
# the API alone (tests/repo/exports_test.sh). Tests and tools keep KVA_COPTS:
# kvbench interposes malloc, which a hidden definition could not do.
KVA_LIB_COPTS = KVA_COPTS + ["-fvisibility=hidden"]

def kva_sources():
    """The package's own C sources and headers as :sources, for the repo-wide
    checks of //tests/repo (actor tables, the adapters' includes)."""
    native.filegroup(
        name = "sources",
        srcs = native.glob([
            "*.c",
            "*.h",
        ]),
        visibility = ["//tests/repo:__pkg__"],
    )
