#!/usr/bin/env python3
"""Prints the slowest tests of a CTest JUnit report (ctest --output-junit FILE).

Usage: slowest_tests.py REPORT.xml [N]
"""
import sys
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    n = int(sys.argv[2]) if len(sys.argv) == 3 else 20
    root = ET.parse(sys.argv[1]).getroot()
    cases = [(float(c.get("time", "0")), c.get("name", "?"),
              "failed" if c.find("failure") is not None else
              "skipped" if c.find("skipped") is not None or c.get("status") == "notrun" else "")
             for c in root.iter("testcase")]
    cases.sort(reverse=True)
    total = sum(t for t, _, _ in cases)
    print(f"slowest {min(n, len(cases))} of {len(cases)} tests in {sys.argv[1]} "
          f"(sum of test times {total:.0f} s):")
    for t, name, state in cases[:n]:
        print(f"  {t:8.1f} s  {name}" + (f"  [{state}]" if state else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
