"""The parts' arrows, three ways: the arrows docs/ARCHITECTURE.md documents (its ```arrows block) are exactly the
ones the libraries link (build/part_arrows.txt, written by src/CMakeLists.txt from target_link_libraries), and every
#include "<part>/..." in src/ follows an arrow, directly or through the parts linked: a header-only use across a
forbidden arrow compiles and links, so it is caught here. apps may include any part its programs link.

usage: check_part_arrows.py SRC_DIR PART_ARROWS_TXT ARCHITECTURE_MD
"""
import re
import sys
from pathlib import Path


def documented_arrows(path):
    """{part: parts it links} from the ```arrows block of the architecture page ("part -> a, b" per line)."""
    block = re.search(r"^```arrows\n(.*?)^```", path.read_text(), re.M | re.S)
    if block is None:
        raise SystemExit(f"FAILED: {path} has no ```arrows block")
    arrows = {}
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        part, arrow, linked = line.partition("->")
        if not arrow:
            raise SystemExit(f"FAILED: {path}: '{line}' is not 'part -> parts'")
        arrows[part.strip()] = {p.strip() for p in linked.split(",") if p.strip()}
    return arrows


def main():
    src, arrows_path, architecture = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    direct = {}
    for line in arrows_path.read_text().splitlines():
        part, _, linked = line.partition(":")
        direct[part.strip()] = set(linked.split())

    problems = []
    documented = documented_arrows(architecture)
    for part in sorted(set(direct) | set(documented)):
        if part not in documented:
            problems.append(f"part '{part}' is built but {architecture.name} does not draw it")
        elif part not in direct:
            problems.append(f"{architecture.name} draws part '{part}', which src/CMakeLists.txt does not build")
        elif direct[part] != documented[part]:
            problems.append(f"{part}: links {', '.join(sorted(direct[part])) or 'nothing'}; {architecture.name} "
                            f"draws {', '.join(sorted(documented[part])) or 'nothing'}")

    def reachable(part):
        seen, todo = set(), [part]
        while todo:
            for linked in direct.get(todo.pop(), ()):
                if linked not in seen:
                    seen.add(linked)
                    todo.append(linked)
        return seen | {part}

    include = re.compile(r'^#include "([a-z_]+)/[^"]+"', re.M)
    checked = 0
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
    print(f"{len(documented)} documented parts equal to the link graph; {checked} includes across {len(direct)} "
          "parts checked against it")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
