"""What a training checkpoint costs, per grid, on this machine: size on disk, time to write, time to verify and read
it back on the same grid and on one rank (resharded while loading), and the peak memory of resharding it offline
with t5scale-ckpt. Each grid trains one step of the model on the synthetic task (fp32, AdamW) and checkpoints at the
end; the figures are read from the jobs' own log lines.

usage: python bench/checkpoint_cost.py BUILD WORK [--model t5-base] [--grids 1x1,2x1,1x2z,2x2z]
  a grid is TPxDP, with a trailing z for ZeRO-1; MPI settings as in the tests (shared memory, root allowed)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader", "OMP_NUM_THREADS": "1"}


def run(command, log_path):
    with open(log_path, "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **MPI_ENV}).returncode
    text = open(log_path).read()
    if code != 0:
        sys.exit(f"{' '.join(command)}: exit {code}; log tail:\n{text[-3000:]}")
    return text


def seconds(pattern, text, what):
    found = re.search(pattern, text)
    if not found:
        sys.exit(f"no '{what}' line in the log")
    return float(found.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("work")
    parser.add_argument("--model", default="t5-base")
    parser.add_argument("--grids", default="1x1,2x1,1x2z,2x2z")
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    dataset = os.path.join(args.work, "synthetic.h5")
    subprocess.run([os.path.join(bin_dir, "t5scale-prep"), "synthetic", "--out", dataset, "--examples", "256",
                    "--vocab-size", "48", "--seed", "7"], check=True, capture_output=True)

    def train(ranks, name, *sets):
        command = ["mpirun", "-np", str(ranks), os.path.join(bin_dir, "t5scale-train")]
        for s in ["data.dataset=" + dataset, "model.name=" + args.model, "precision=fp32", "train.global_batch=4",
                  "eval.every_steps=0", "eval.at_end=false", "run.output_dir=" + args.work, "run.name=" + name,
                  "data.max_source_length=32", "data.max_target_length=8", *sets]:
            command += ["--set", s]
        return run(command, os.path.join(args.work, name + ".log"))

    rows = []
    for grid in args.grids.split(","):
        zero1 = grid.endswith("z")
        tp, dp = (int(x) for x in grid.rstrip("z").split("x"))
        name = f"g{tp}x{dp}{'z' if zero1 else ''}"
        layout = [f"parallel.tp={tp}", f"parallel.zero1={'true' if zero1 else 'false'}"]
        log = train(tp * dp, name, *layout, "train.max_steps=1", "checkpoint.at_end=true")
        write_s = seconds(r"checkpoint \S+ written in ([0-9.]+) s", log, "written in")
        folder = os.path.join(args.work, name + ".ckpt", "step_00000001")
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        log = train(tp * dp, name, *layout, "train.max_steps=2", "checkpoint.at_end=false")
        read_s = seconds(r"as saved; checkpoint verified and read in ([0-9.]+) s", log, "as saved")
        log = train(1, name + "_on_1", "parallel.tp=1", "parallel.zero1=false", "train.max_steps=2",
                    "checkpoint.at_end=false", "checkpoint.dir=" + os.path.join(args.work, name + ".ckpt"))
        reshard_read_s = seconds(r"resharded from .*; checkpoint verified and read in ([0-9.]+) s", log, "resharded") \
            if (tp, dp) != (1, 1) else read_s
        out = os.path.join(args.work, name + ".offline")
        result = subprocess.run(["/usr/bin/time", "-f", "%M", os.path.join(bin_dir, "t5scale-ckpt"), "reshard", folder,
                                 "--tp", "1", "--dp", "1", "--out", out], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"t5scale-ckpt reshard: {result.stdout}{result.stderr}")
        peak_mib = int(result.stderr.strip().splitlines()[-1]) / 1024
        rows.append((grid, size / 2**20, write_s, read_s, reshard_read_s, peak_mib))
        print(f"{grid}: done", flush=True)

    print(f"\n{args.model}, fp32 AdamW, after one step; this machine ({os.cpu_count()} cores)")
    print("| grid | checkpoint MiB | write s | read s (same grid) | read s (on 1 rank, resharded) | "
          "offline reshard to 1x1: peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for grid, mib, write_s, read_s, reshard_s, peak in rows:
        print(f"| {grid} | {mib:.0f} | {write_s:.2f} | {read_s:.2f} | {reshard_s:.2f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
