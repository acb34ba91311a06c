#!/usr/bin/env python3
"""Each run's measured median step time against the step-time model's prediction, on this machine, after
`t5scale-bench --calibrate`: the demo's grids on one node, or the study across nodes on the local Slurm cluster.

  bench/step_time_check.py demo [--build build] [--rounds 3] [--steps 200] [--out DIR]
  bench/step_time_check.py nodes --cluster STATE_DIR [--build build] [--rounds 3] [--steps 200] [--out DIR]

demo: w1, w2-dp2, w2-tp2, w4-dp4 and w4-tp2-dp2 with mpirun over shared memory. nodes: on a running 4-node local
cluster (slurm/local/start.sh --nodes 4 STATE_DIR), n1, n2 and n4 with one rank per node and n1-tp2 and n2-tp2
with two, by `srun --mpi=pmix` over TCP on the cluster's bridge (tests/multinode/run_study_across_nodes.sh's grids).
Every run is the demo's config (jobs/demo/run.yaml) for --steps steps without evaluation or checkpoints.

A round calibrates afresh into its own rates file (one process, then the links: mpirun with 2 and 4 ranks; on the
cluster srun with 2 ranks on one node and one rank on 2 and on 4 nodes) and runs every grid with that file
(telemetry.machine_rates), the grids in a rotated order each round. This machine's speed moves by a third over
seconds (the time per dispatched operator doubles for a while and comes back), so one round says little: the table
gives per run the median over the rounds of measured / predicted, and the spread of the single-rank run's measured
step over the rounds (how far the machine repeats itself). The measured median is over steps 3 on (rank 0's
step_time_s); the prediction is the run file's predicted_step_time_s. Results: OUT/results.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEMO_GRIDS = [  # name, ranks, tp
    ("w1", 1, 1), ("w2-dp2", 2, 1), ("w2-tp2", 2, 2), ("w4-dp4", 4, 1), ("w4-tp2-dp2", 4, 2)]
NODE_GRIDS = [  # name, nodes, ranks per node, tp
    ("n1", 1, 1, 1), ("n2", 2, 1, 1), ("n4", 4, 1, 1), ("n1-tp2", 1, 2, 2), ("n2-tp2", 2, 2, 2)]


def run(command, log_path, env):
    with open(log_path, "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=600)
    if done.returncode != 0:
        with open(log_path) as log:
            tail = log.read()[-2000:]
        sys.exit(f"step_time_check: {' '.join(command)} failed (exit {done.returncode}); {log_path}:\n{tail}")


def environment(args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    if args.mode == "demo":
        env["OMPI_MCA_btl"] = "self,vader"
        return env
    subnet = None
    with open(os.path.join(args.cluster, "network")) as f:
        for line in f:
            if line.startswith("subnet "):
                subnet = line.split()[1]
    if subnet is None:
        sys.exit(f"step_time_check: {args.cluster}/network names no subnet: no multi-node cluster runs there")
    env.update(SLURM_CONF=os.path.join(args.cluster, "slurm.conf"), OMPI_MCA_btl="tcp,self",
               OMPI_MCA_btl_tcp_if_include=subnet, OMPI_MCA_oob_tcp_if_include=subnet)
    return env


def launchers(args):
    """(name, launcher prefix, tp) per grid, and the calibration's launcher prefixes (the first one process)."""
    if args.mode == "demo":
        grids = [(name, ["mpirun", "-n", str(ranks)], tp) for name, ranks, tp in DEMO_GRIDS]
        calibrations = [[], ["mpirun", "-n", "2"], ["mpirun", "-n", "4"]]
        return grids, calibrations

    def srun(nodes, per_node):
        return ["srun", f"--nodes={nodes}", f"--ntasks={nodes * per_node}", f"--ntasks-per-node={per_node}",
                "--mpi=pmix", "--time=10"]
    grids = [(name, srun(nodes, per_node), tp) for name, nodes, per_node, tp in NODE_GRIDS]
    calibrations = [srun(1, 1), srun(1, 2), srun(2, 1), srun(4, 1)]
    return grids, calibrations


def measured_and_predicted(path):
    with h5py.File(path, "r") as f:
        predicted_s = float(f.attrs["predicted_step_time_s"])
        step_s = np.asarray(f["steps/step_time_s"], dtype=float)
    return float(np.median(step_s[2:])), predicted_s


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["demo", "nodes"])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--cluster", help="nodes: the state folder of a running 4-node local cluster")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.mode == "nodes" and not args.cluster:
        parser.error("nodes needs --cluster STATE_DIR (slurm/local/start.sh --nodes 4 STATE_DIR)")
    out = os.path.abspath(args.out or f"step-time-check-{args.mode}")
    os.makedirs(out, exist_ok=True)
    bench, train = os.path.join(args.build, "bin", "t5scale-bench"), os.path.join(args.build, "bin", "t5scale-train")
    env = environment(args)
    grids, calibrations = launchers(args)

    results = {name: [] for name, _, _ in grids}  # per round: (measured_s, predicted_s)
    for round_index in range(args.rounds):
        rates = os.path.join(out, f"rates-round{round_index + 1}.json")
        if os.path.exists(rates):
            os.remove(rates)
        for i, launcher in enumerate(calibrations):
            run(launcher + [bench, "--calibrate", rates], os.path.join(out, f"calibrate-round{round_index + 1}-{i}.log"), env)
        shift = round_index % len(grids)
        for name, launcher, tp in grids[shift:] + grids[:shift]:
            run_name = f"{name}-round{round_index + 1}"
            run(launcher + [train, "--config", os.path.join(ROOT, "jobs/demo/run.yaml"), "--set", f"run.output_dir={out}",
                            "--set", f"run.name={run_name}", "--set", f"parallel.tp={tp}",
                            "--set", f"telemetry.machine_rates={rates}", "--set", f"train.max_steps={args.steps}",
                            "--set", "eval.every_steps=0", "--set", "eval.at_end=false",
                            "--set", "checkpoint.every_steps=0"], os.path.join(out, f"{run_name}.log"), env)
            measured_s, predicted_s = measured_and_predicted(os.path.join(out, f"{run_name}.h5"))
            results[name].append((measured_s, predicted_s))
            print(f"round {round_index + 1} {name:12s} measured {measured_s * 1e3:7.2f} ms  predicted "
                  f"{predicted_s * 1e3:7.2f} ms  measured / predicted {measured_s / predicted_s:.2f}", flush=True)

    first = grids[0][0]
    first_measured = [m for m, _ in results[first]]
    print(f"\n{args.mode}: {args.rounds} rounds of {args.steps} steps, {time.strftime('%Y-%m-%d')}; {first}'s measured "
          f"median step over the rounds: {min(first_measured) * 1e3:.2f} to {max(first_measured) * 1e3:.2f} ms\n")
    print("| run | measured median step (median over rounds) | predicted (median over rounds) | measured / predicted "
          "(median over rounds) | per round |")
    print("| --- | --- | --- | --- | --- |")
    table = {}
    for name, _, _ in grids:
        ratios = [m / p for m, p in results[name]]
        row = {"measured_s": statistics.median(m for m, _ in results[name]),
               "predicted_s": statistics.median(p for _, p in results[name]),
               "ratio": statistics.median(ratios), "rounds": results[name]}
        table[name] = row
        print(f"| {name} | {row['measured_s'] * 1e3:.2f} ms | {row['predicted_s'] * 1e3:.2f} ms | {row['ratio']:.2f} | "
              f"{', '.join(f'{r:.2f}' for r in ratios)} |")
    within = sum(1 for row in table.values() if 0.8 <= row["ratio"] <= 1.2)
    print(f"\n{within} of {len(table)} runs within 20% of their prediction (median over the rounds)")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"mode": args.mode, "rounds": args.rounds, "steps": args.steps, "runs": table}, f, indent=1)


if __name__ == "__main__":
    main()
