"""Every #include "<part>/..." in src/ follows an arrow the libraries link (build/part_arrows.txt, written by
src/CMakeLists.txt from target_link_libraries), directly or through the parts linked: a header-only use across a
forbidden arrow compiles and links, so it is caught here. apps may include any part its programs link.

usage: check_part_arrows.py SRC_DIR PART_ARROWS_TXT
"""
import re
import sys
from pathlib import Path


def main():
    src, arrows_path = Path(sys.argv[1]), Path(sys.argv[2])
    direct = {}
    for line in arrows_path.read_text().splitlines():
        part, _, linked = line.partition(":")
        direct[part.strip()] = set(linked.split())

    def reachable(part):
        seen, todo = set(), [part]
        while todo:
            for linked in direct.get(todo.pop(), ()):
                if linked not in seen:
                    seen.add(linked)
                    todo.append(linked)
        return seen | {part}

    include = re.compile(r'^#include "([a-z_]+)/[^"]+"', re.M)
    problems, checked = [], 0
    for path in sorted(src.glob("*/*")):
        part = path.parent.name
        if path.suffix not in (".h", ".cpp") or part == "apps":
            continue
        if part not in direct:
            problems.append(f"{path.relative_to(src)}: folder '{part}' is no library of src/CMakeLists.txt")
            continue
        allowed = reachable(part)
        for target in include.findall(path.read_text()):
            checked += 1
            if target not in allowed:
                problems.append(f"{path.relative_to(src)} includes {target}/: t5scale_{part} does not link "
                                f"t5scale_{target} (it reaches {', '.join(sorted(allowed))})")
    for problem in problems:
        print("FAILED:", problem)
    print(f"{checked} includes across {len(direct)} parts checked against the link graph")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
