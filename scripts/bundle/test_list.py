"""The bundle's list of tests, made from the build tree's ctest entries (ctest --show-only=json-v1).

    python3 test_list.py CTEST_JSON BUNDLED_TEST_BIN EXCLUDED_TESTS_FILE REFERENCES_DIR [SOURCE_DIR SCRIPTS_DIR] > tests.list

Keeps the entries that run a bundled gtest program, directly or under mpiexec, and writes one line per entry,
fields separated by tabs:  name  labels  ranks(0: no mpirun)  skip_code(-: none)  program  arguments  environment
(skip_code: the exit code that means "skipped", ctest's SKIP_RETURN_CODE). Paths of the build tree in the
environment are rewritten: its bin/ to @BUNDLE@/bin, anything else to @WORK@, the scratch folder of run-tests.sh.

Entries of the labels in SCRIPT_LABELS (the `gpu` label: the watchdog and the training program are scripts around
the GPU test program) are kept whole when every word of their command can move with the bundle: the program field
is then @COMMAND@ and the arguments field the whole command, its words separated by the unit separator (0x1f, as
words may hold spaces). Their words are rewritten as their environment is, and besides: a bundled test program to
@BUNDLE@/tests/bin/NAME, the build's Python interpreter to @PYTHON@ (run-tests.sh's --python), and a script of the
source tree is copied to SCRIPTS_DIR and named @BUNDLE@/tests/scripts/NAME.

Reference files that a Python fixture (transformers, rouge-score, ...) wrote into the build tree when ctest ran
there are copied to REFERENCES_DIR under the same relative path; run-tests.sh copies them into @WORK@, where the
rewritten environment finds them. So the bundle compares with the references of the build machine and needs no
Python packages. Left out, as lines "# name<TAB>labels<TAB>reason": entries whose fixture has not been made in the
build tree, entries whose environment names the source tree, and the gtest suites of EXCLUDED_TESTS_FILE (they
read the clone through paths compiled into the test program).
"""
import json
import os
import shutil
import sys

MPI_LAUNCHERS = {"mpiexec", "mpirun", "orterun", "mpiexec.openmpi", "mpirun.openmpi"}
SCRIPT_LABELS = {"gpu"}
WORD_SEPARATOR = "\x1f"


def read_excluded(path):
    """Pattern -> reason, from lines 'Suite.* reason'."""
    excluded = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                pattern, _, reason = line.partition(" ")
                excluded[pattern] = reason.strip()
    return excluded


def split_filter(arguments):
    """(positive patterns, negative patterns, other arguments) of a gtest command line."""
    positive, negative, rest = ["*"], [], []
    for argument in arguments:
        if argument.startswith("--gtest_filter="):
            value = argument[len("--gtest_filter="):]
            pos, _, neg = value.partition("-")
            positive = pos.split(":") if pos else ["*"]
            negative = neg.split(":") if neg else []
        else:
            rest.append(argument)
    return positive, negative, rest


def covers(positive, pattern):
    """Whether a positive gtest pattern may select tests of the excluded pattern (same suite, or a wildcard)."""
    suite = positive.split(".")[0]
    return "*" in suite or "?" in suite or suite == pattern.split(".")[0]


def gtest_command(command, bundled):
    """(ranks, program, arguments) of an entry that runs a bundled program, or None."""
    if len(command) > 3 and os.path.basename(command[0]) in MPI_LAUNCHERS and command[1] in ("-n", "-np") \
            and os.path.basename(command[3]) in bundled:
        return int(command[2]), command[3], command[4:]
    if command and os.path.basename(command[0]) in bundled:
        return 0, command[0], command[1:]
    return None


def reference_files(fixture, setups, bundled, build_dir):
    """The build-tree files or folders that the fixture's setup entries (reference makers, not bundled programs)
    wrote: their arguments inside the build tree. None when a setup is a bundled program or its outputs are missing
    (ctest has not run it in the build tree)."""
    paths = []
    for setup in setups.get(fixture, []):
        command = setup.get("command") or []
        outputs = [a for a in command[1:] if a.startswith(build_dir + "/")]
        if gtest_command(command, bundled) or not outputs or not all(os.path.exists(p) for p in outputs):
            return None
        paths += outputs
    return paths or None


def script_command(command, bundled, build_dir, source_dir, scripts_dir):
    """The words of a script entry with every path moved with the bundle, or (None, the path that cannot move)."""
    words = []
    for word in command:
        name = os.path.basename(word)
        if not word.startswith("/"):
            words.append(word)
        elif word == build_dir + "/bin" or word.startswith(build_dir + "/bin/"):
            words.append("@BUNDLE@/bin" + word[len(build_dir + "/bin"):])
        elif word.startswith(build_dir + "/") and name in bundled and os.path.isfile(word):
            words.append("@BUNDLE@/tests/bin/" + name)
        elif word.startswith(build_dir + "/"):
            words.append("@WORK@/" + word[len(build_dir + "/"):])
        elif name.startswith("python") and os.access(word, os.X_OK) and not os.path.isdir(word):
            words.append("@PYTHON@")
        elif source_dir and word.startswith(source_dir + "/tests/") and os.path.isfile(word):
            os.makedirs(scripts_dir, exist_ok=True)
            shutil.copy2(word, os.path.join(scripts_dir, name))
            words.append("@BUNDLE@/tests/scripts/" + name)
        else:
            return None, word
    return words, None


def script_entry(test, properties, bundled, source_dir, scripts_dir):
    """The tests.list line of a script entry (or its left-out line)."""
    name = test["name"]
    labels = ",".join(properties.get("LABELS", [])) or "-"
    command = test.get("command") or []
    # The build tree is where the bundled test programs were found.
    programs = [w for w in command if os.path.basename(w) in bundled and os.path.isfile(w)]
    if not programs:
        return f"# {name}\t{labels}\truns no bundled test program"
    build_dir = os.path.dirname(os.path.dirname(programs[0]))
    words, stuck = script_command(command, bundled, build_dir, source_dir, scripts_dir)
    if words is None:
        return f"# {name}\t{labels}\treads {stuck} of the build machine"
    environment = []
    for assignment in properties.get("ENVIRONMENT", []):
        key, _, value = assignment.partition("=")
        moved, stuck = script_command([value], bundled, build_dir, source_dir, scripts_dir)
        if moved is None:
            return f"# {name}\t{labels}\treads {stuck} of the build machine"
        environment.append(f"{key}={moved[0]}")
    skip_code = str(int(properties["SKIP_RETURN_CODE"])) if "SKIP_RETURN_CODE" in properties else "-"
    return "\t".join([name, labels, "0", skip_code, "@COMMAND@", WORD_SEPARATOR.join(words), " ".join(environment)])


def main():
    ctest_json, bundled_bin, excluded_file, references_dir = sys.argv[1:5]
    source_dir = os.path.realpath(sys.argv[5]) if len(sys.argv) > 5 else ""
    scripts_dir = sys.argv[6] if len(sys.argv) > 6 else ""
    bundled = set(os.listdir(bundled_bin))
    excluded = read_excluded(excluded_file)
    tests = json.load(open(ctest_json))["tests"]
    properties_of = {t["name"]: {p["name"]: p["value"] for p in t.get("properties", [])} for t in tests}
    setups = {}
    for test in tests:
        for fixture in properties_of[test["name"]].get("FIXTURES_SETUP", []):
            setups.setdefault(fixture, []).append(test)
    out = []
    for test in tests:
        found = gtest_command(test.get("command") or [], bundled)
        labels_of_test = properties_of[test["name"]].get("LABELS", [])
        if not found and source_dir and SCRIPT_LABELS.intersection(labels_of_test):
            out.append(script_entry(test, properties_of[test["name"]], bundled, source_dir, scripts_dir))
            continue
        if not found:
            continue
        ranks, program, arguments = found
        name = test["name"]
        properties = properties_of[name]
        labels = ",".join(properties.get("LABELS", [])) or "-"  # never empty: read splits on runs of tabs
        build_dir = os.path.dirname(os.path.dirname(program))  # BUILD/tests/<program>
        references = {f: reference_files(f, setups, bundled, build_dir) for f in properties.get("FIXTURES_REQUIRED", [])}
        missing = [f for f, paths in references.items() if paths is None]
        if missing:
            out.append(f"# {name}\t{labels}\tneeds {', '.join(missing)}, which ctest had not made in the build tree")
            continue
        environment = []
        source_path = None
        for assignment in properties.get("ENVIRONMENT", []):
            key, _, value = assignment.partition("=")
            if value == build_dir + "/bin" or value.startswith(build_dir + "/bin/"):
                value = "@BUNDLE@/bin" + value[len(build_dir + "/bin"):]
            elif value.startswith(build_dir + "/"):
                value = "@WORK@/" + value[len(build_dir + "/"):]
            elif value.startswith("/") and os.path.exists(value):
                source_path = value
            environment.append(f"{key}={value}")
        if source_path:
            out.append(f"# {name}\t{labels}\treads {source_path} of the build machine")
            continue
        positive, negative, rest = split_filter(arguments)
        left_out = [p for p in positive if p in excluded]
        if left_out and len(left_out) == len(positive):
            out.append(f"# {name}\t{labels}\t{'; '.join(excluded[p] for p in left_out)}")
            continue
        positive = [p for p in positive if p not in excluded]
        negative += [p for p in excluded if p not in negative and any(covers(q, p) for q in positive)]
        gtest_filter = "--gtest_filter=" + ":".join(positive) + ("-" + ":".join(negative) if negative else "")
        for path in sum(references.values(), []):
            target = os.path.join(references_dir, os.path.relpath(path, build_dir))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(path):
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target)
        skip_code = str(int(properties["SKIP_RETURN_CODE"])) if "SKIP_RETURN_CODE" in properties else "-"
        fields = [name, labels, str(ranks), skip_code, os.path.basename(program), " ".join([gtest_filter] + rest),
                  " ".join(environment)]
        out.append("\t".join(fields))
    print("\n".join(out))


if __name__ == "__main__":
    main()
