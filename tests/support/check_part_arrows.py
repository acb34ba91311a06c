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


def documented_layers(path):
    """{part: layer} from the ```layers block ("layer N   part, part   what they hold" per line)."""
    block = re.search(r"^```layers\n(.*?)^```", path.read_text(), re.M | re.S)
    if not block:
        raise SystemExit(f"FAILED: {path} has no ```layers block")
    layers = {}
    for line in block.group(1).splitlines():
        found = re.match(r"layer (\d+)\s+([a-z_]+(?:, [a-z_]+)*)(\s{2,}|$)", line)
        if not found:
            raise SystemExit(f"FAILED: {path}: layers line '{line}' is not 'layer N   part, part   what they hold'")
        for part in found.group(2).split(", "):
            if part in layers:
                raise SystemExit(f"FAILED: {path}: part '{part}' is drawn at layers {layers[part]} and {found.group(1)}")
            layers[part] = int(found.group(1))
    return layers


def longest_chain(part, direct, seen=()):
    """Arrows on the longest path from part down to a part that links nothing."""
    if part in seen:
        raise SystemExit(f"FAILED: the arrows have a cycle through {part}")
    return max((1 + longest_chain(p, direct, seen + (part,)) for p in direct.get(part, ())), default=0)


def drawing_problems(direct, drawn, where, differs):
    """What a drawing of the parts gets wrong against the build: a part it leaves out, a part it holds that is not
    built, and for a part in both, differs(part): a message, or False where the drawing is right."""
    problems = []
    for part in sorted(set(direct) | set(drawn)):
        if part not in drawn:
            problems.append(f"part '{part}' is built but {where} leave it out")
        elif part not in direct:
            problems.append(f"{where} hold part '{part}', which src/CMakeLists.txt does not build")
        elif differs(part):
            problems.append(differs(part))
    return problems


def main():
    src, arrows_path, architecture = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    direct = {}
    for line in arrows_path.read_text().splitlines():
        part, _, linked = line.partition(":")
        direct[part.strip()] = set(linked.split())

    documented = documented_arrows(architecture)
    problems = drawing_problems(direct, documented, f"the arrows of {architecture.name}", lambda part: (
        direct[part] != documented[part] and
        f"{part}: links {', '.join(sorted(direct[part])) or 'nothing'}; {architecture.name} "
        f"draws {', '.join(sorted(documented[part])) or 'nothing'}"))
    # The layer picture: every part once, at the layer its longest chain of arrows gives.
    layers = documented_layers(architecture)
    problems += drawing_problems(direct, layers, f"the layers of {architecture.name}", lambda part: (
        layers[part] != longest_chain(part, direct) and
        f"{part}: drawn at layer {layers[part]}; its longest chain of arrows to core is {longest_chain(part, direct)}"))

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
    print(f"{len(documented)} documented parts equal to the link graph and drawn at their layers; {checked} includes "
          f"across {len(direct)} "
          "parts checked against it")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
