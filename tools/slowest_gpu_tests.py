#!/usr/bin/env python3
"""The slowest tests of a GPU suite run, from the gtest JSON reports device/run_gpu_tests.sh writes when
DUET_GPU_TEST_TIMES=DIR is set (one file a suite): what to make cheaper when the suite outgrows a device call.
  usage: tools/slowest_gpu_tests.py DIR [COUNT=15]"""
import json
import pathlib
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = pathlib.Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    tests = []  # (seconds, name)
    for report in sorted(folder.glob("*.json")):
        try:
            data = json.loads(report.read_text())
        except (OSError, json.JSONDecodeError) as error:  # a suite cut by a time limit leaves no report, or half of one
            print(f"{report.name}: unreadable ({error})")
            continue
        for suite in data.get("testsuites", []):
            for test in suite.get("testsuite", []):
                seconds = float(str(test.get("time", "0s")).rstrip("s") or 0)
                tests.append((seconds, f"{suite.get('name', '?')}.{test.get('name', '?')}"))
    total = sum(seconds for seconds, _ in tests)
    print(f"{len(tests)} tests, {total:.1f} s in all; the slowest {min(count, len(tests))}:")
    for seconds, name in sorted(tests, reverse=True)[:count]:
        print(f"  {seconds:8.2f} s  {100 * seconds / total if total else 0:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
