#!/usr/bin/env python3
"""actor_tables_test.py — every actor file's Accepts/Sends table is true.

An actor file is a C file of l1/, l2/ or gpu/ that spawns a behaviour
(`.receive = ...`; actors/ is the runtime itself, whose only behaviour is a
port's, an actor without a receive). Its
table is the block comment at the top of the file, or of the header of the
same name. The test fails when a file has no table (no "Accepts" in it),
or when a `case X:` label of the file names a message the table does not
mention. Labels that are enumerators of an enum declared in the file itself
(a state machine's states) are not messages and are skipped.

Usage: actor_tables_test.py ROOT  (the source tree: l1/ l2/ gpu/)
"""
import os
import re
import sys

CASE = re.compile(r"\bcase\s+([A-Z][A-Z0-9_]*)\s*:")
ENUM = re.compile(r"\benum\b[^{;]*\{([^}]*)\}", re.S)
IDENT = re.compile(r"\b([A-Z][A-Z0-9_]*)\b")


def top_comment(path):
    """The first block comment of a file, or ''."""
    if not os.path.exists(path):
        return ""
    text = open(path, encoding="utf-8").read()
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def local_enumerators(text):
    names = set()
    for body in ENUM.findall(text):
        for item in body.split(","):
            m = IDENT.match(item.strip())
            if m:
                names.add(m.group(1))
    return names


def check(path):
    text = open(path, encoding="utf-8").read()
    if ".receive = " not in text:
        return []
    table = top_comment(path) + top_comment(path[:-2] + ".h")
    if "Accepts" not in table:
        return [f"{path}: an actor file without an Accepts/Sends table"]
    words = set(IDENT.findall(table))
    skip = local_enumerators(text)
    return [f"{path}: handles {label}, which its table does not list"
            for label in sorted(set(CASE.findall(text)) - skip) if label not in words]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems, actors = [], 0
    for pkg in ("l1", "l2", "gpu"):
        for dirpath, _, files in os.walk(os.path.join(root, pkg)):
            for f in sorted(files):
                if f.endswith(".c"):
                    p = os.path.join(dirpath, f)
                    actors += ".receive = " in open(p, encoding="utf-8").read()
                    problems += check(p)
    for p in problems:
        print(p)
    if actors == 0:
        print("no actor file found under", root)
        return 1
    print(f"{actors} actor files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
