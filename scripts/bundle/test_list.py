"""The bundle's list of tests, made from the build tree's ctest entries (ctest --show-only=json-v1).

    python3 test_list.py CTEST_JSON BUNDLED_TEST_BIN EXCLUDED_TESTS_FILE > tests.list

Keeps the entries that run a bundled gtest program, directly or under mpiexec, and writes one line per entry,
fields separated by tabs:  name  labels  ranks(0: no mpirun)  program  arguments  environment
Paths of the build tree in the environment are rewritten: its bin/ to @BUNDLE@/bin, anything else (outputs) to
@WORK@, a scratch folder of run-tests.sh. Left out, as lines "# name<TAB>labels<TAB>reason": entries that need a file a Python
fixture of the build tree makes, entries whose environment names the source tree, and the gtest suites of
EXCLUDED_TESTS_FILE (they read source files through paths compiled into the test program).
"""
import json
import os
import sys

MPI_LAUNCHERS = {"mpiexec", "mpirun", "orterun", "mpiexec.openmpi", "mpirun.openmpi"}


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


def main():
    ctest_json, bundled_bin, excluded_file = sys.argv[1:4]
    bundled = set(os.listdir(bundled_bin))
    excluded = read_excluded(excluded_file)
    tests = json.load(open(ctest_json))["tests"]
    out = []
    for test in tests:
        command = test.get("command") or []
        properties = {p["name"]: p["value"] for p in test.get("properties", [])}
        ranks = 0
        if command and os.path.basename(command[0]) in MPI_LAUNCHERS and len(command) > 3 \
                and command[1] in ("-n", "-np") and os.path.basename(command[3]) in bundled:
            ranks, program, arguments = int(command[2]), command[3], command[4:]
        elif command and os.path.basename(command[0]) in bundled:
            program, arguments = command[0], command[1:]
        else:
            continue
        name = test["name"]
        labels = ",".join(properties.get("LABELS", [])) or "-"  # never empty: read splits on runs of tabs
        build_dir = os.path.dirname(os.path.dirname(program))  # BUILD/tests/<program>
        if "FIXTURES_REQUIRED" in properties:
            out.append(f"# {name}\t{labels}\tneeds {', '.join(properties['FIXTURES_REQUIRED'])}, made in the build tree")
            continue
        environment = []
        source_path = None
        for assignment in properties.get("ENVIRONMENT", []):
            key, _, value = assignment.partition("=")
            if value.startswith(build_dir + "/bin/"):
                value = "@BUNDLE@/bin/" + value[len(build_dir + "/bin/"):]
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
        fields = [name, labels, str(ranks), os.path.basename(program), " ".join([gtest_filter] + rest),
                  " ".join(environment)]
        out.append("\t".join(fields))
    print("\n".join(out))


if __name__ == "__main__":
    main()
