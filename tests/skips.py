#!/usr/bin/env python3
"""skips.py JUNIT_XML: why tests were skipped, after ctest.

CTest prints only "Skipped" beside a test that skipped itself (exit 77: no GPU, a GPU the step is
not built for, no compute-sanitizer, no python3 package). This reads the JUnit file ctest writes
(the test preset's outputJUnitFile, build/junit.xml; or ctest --output-junit FILE) and prints each
distinct reason, the test's "SKIPPED: ..." line, with the number of tests that gave it, most
frequent first. Tests not run for another reason (a failed fixture, a missing executable) are
counted under CTest's own message. Exit 0 unless the file cannot be read.

  cmake --workflow --preset test; python3 tests/skips.py build/junit.xml
"""
import collections
import sys
import xml.etree.ElementTree as ET


def reasons(junit_path):
    """(number of tests, Counter of skip reason -> tests) from a CTest JUnit file."""
    root = ET.parse(junit_path).getroot()
    cases = root.iter("testcase")
    total, why = 0, collections.Counter()
    for case in cases:
        total += 1
        skipped = case.find("skipped")
        if skipped is None and case.get("status") != "notrun":
            continue
        out = case.findtext("system-out") or ""
        line = next((l for l in out.splitlines() if l.startswith("SKIPPED: ")), None)
        if line:
            why[line[len("SKIPPED: "):].strip()] += 1
        else:
            message = skipped.get("message", "") if skipped is not None else ""
            why[f"(no SKIPPED line; CTest: {message or 'not run'})"] += 1
    return total, why


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        total, why = reasons(argv[1])
    except (OSError, ET.ParseError) as e:
        print(f"skips.py: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    n = sum(why.values())
    print(f"skipped: {n} of {total} tests" + (":" if n else ""))
    for reason, count in sorted(why.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{count:6d}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
