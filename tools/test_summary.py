"""Add up the results of one tools/test run: logs ending in a line "N passed,
M failed[, K skipped]" (the C tests, tools/check-headers, tools/package, the
documentation build)
and pytest JUnit XML.

Prints one line per source and a final "total: N passed, N failed, N
skipped"; exits 1 if anything failed or nothing ran.
"""

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

C_LINE = re.compile(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?", re.M)


def main(reports: Path) -> int:
    passed = failed = skipped = 0
    for log in sorted(reports.glob("*.log")):
        p = f = s = 0
        for m in C_LINE.finditer(log.read_text()):
            p, f, s = p + int(m[1]), f + int(m[2]), s + int(m[3] or 0)
        print(f"{log.stem}: {p} passed, {f} failed, {s} skipped")
        passed, failed, skipped = passed + p, failed + f, skipped + s
    for xml in sorted(reports.glob("pytest-*.xml")):
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        t, e, f, s = (int(suite.get(k, 0)) for k in ("tests", "errors", "failures", "skipped"))
        print(f"{xml.stem}: {t - e - f - s} passed, {e + f} failed, {s} skipped")
        passed, failed, skipped = passed + t - e - f - s, failed + e + f, skipped + s
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
