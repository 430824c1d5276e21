#!/usr/bin/env python3
"""Fails when a C function in csrc/ is longer than MAX_LINES lines (signature to closing brace).

A function starts at a line that begins in column 0 with neither '{', '}', '#', whitespace nor a
comment, and whose body opens with a '{' in column 0; it ends at the next '}' in column 0. Run by
`make test`."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 120


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if start is None and line.startswith("{") and i > 0:
            j = i - 1  # walk back to the first line of the signature
            while j > 0 and lines[j - 1].strip() and not re.match(r"[}#/ ]|\s*$|.*[;{}]\s*$|.*\*/\s*$", lines[j - 1]):
                j -= 1
            if re.match(r"[A-Za-z_]", lines[j]) and "=" not in lines[j].split("(")[0]:
                start = j
        elif start is not None and line.startswith("}"):
            name = re.search(r"(\w+)\s*\(", " ".join(lines[start:i]))
            yield (name.group(1) if name else "?"), start + 1, i + 1 - start
            start = None


def main():
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else MAX_LINES
    long = []
    for path in sorted(glob.glob(os.path.join(ROOT, "csrc", "**", "*.[ch]"), recursive=True)):
        for name, line, n in functions(path):
            if n > limit:
                long.append((n, "%s:%d %s" % (os.path.relpath(path, ROOT), line, name)))
    for n, where in sorted(long, reverse=True):
        print("%4d lines  %s" % (n, where))
    if long:
        print("check_function_length: %d function(s) over %d lines" % (len(long), limit))
        return 1
    print("check_function_length: every C function is at most %d lines" % limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
