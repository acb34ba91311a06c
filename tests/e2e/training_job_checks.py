"""End-to-end checks of t5scale-train as a batch job, driven the way Slurm drives it, judged from the run files.

  resume        prep -> train on a tp 2 x dp 2 grid -> SIGKILL every rank after a checkpoint -> the killed run file
                opens (h5py, swmr=True, no h5clear) -> run again: it resumes, and its loss trajectory equals an
                uninterrupted run's bit for bit (the killed and resumed run with its optimizer state in host
                memory, parallel.offload_optimizer; the uninterrupted one without); the run files' datasets and
                attributes are checked
  signal        SIGUSR1 to one rank: every rank checkpoints the same step, the run file says preempted, the exit
                code is the requeue code (75); the next start resumes from that checkpoint and completes
  early_stop    early stopping on eval_loss with a min_delta no run can reach stops after `patience` evaluations
  refuse        bad configs are refused before any compute, naming the key
  prep_to_train a dialogue/summary JSONL through t5scale-prep (recipe, trained tokenizer) into training with ROUGE
  diverge       a loss that overflows stops the job (status diverged, exit 3) with its last good checkpoint
  eval_only     evaluation alone of an exported Hugging Face folder gives the trained run's validation loss
  vocab_beyond  a model whose embedding has more rows than the tokenizer has ids (as T5's): generated ids beyond the
                tokenizer are decoded as <id_N> and counted in the eval row; the CPU run's card reports host memory
  checkpointing_auto
                activation_checkpointing: auto on a tp 2 grid: with the host's memory it chooses none; with a
                parallel.device_memory_gib that the run without checkpointing does not fit it chooses every k-th
                block, says so, records k in the run file, and trains as the run configured with that k does, loss
                for loss; the predictions recorded are the cost model's for each
  resume_replicated
                the same without ZeRO-1 (optimizer state replicated over DP): only DP rank 0 writes it, and the
                resumed run still equals the uninterrupted one bit for bit
  reshard       a checkpoint of a tp 2 x dp 2 AdamW job with ZeRO-1 continues on 1 rank, on tp 1 x dp 4 without
                ZeRO-1, on tp 4 x dp 1 and on its own grid with ZeRO-2 (as saved), each loss for loss as the job continued on its own grid (fp32: 1e-6
                relative; without dropout, whose masks depend on the TP size); an Adafactor job's checkpoint
                (tp 2 x dp 2) continues on tp 1 x dp 2 likewise; t5scale-ckpt inspects that checkpoint, reshards it
                offline (a job resumes it as saved, equal to resharding while loading), exports it (equal to the
                job's own export) and refuses a tp that does not divide the model, an existing step, a non-empty
                export folder and a damaged shard
  plan_matches_job
                t5scale-study renders a study of four runs (epochs with a scaled LR and warmup ratio; tp 2 with
                ZeRO-1 and checkpointing auto on a small device; tp 2 x dp 2 packing a token budget; a linear LR
                rule at max_steps) and every run is trained from its rendered config: each field the plan predicts
                (batch split, LR, warmup, steps, steps per epoch, model, parameters, checkpointing, memory, FLOPs)
                equals what the job records in its run file
  failures      a bad id in the evaluation split is refused at start-up; the job goes down through each failure path
                (an exception on rank 1 mid-run, rank 0 unable to write its generations, a stalled rank): the run
                file says failed with the error and the step where rank 0 could write it, and rank 1's failure
                note says it where rank 0 could not; the analysis reads both; an error outside the model is
                preceded by a checkpoint, from which the run resumes
  trust         damaged checkpoints refuse the start, nothing changed; one job per run (lock, stale lock); a config
                change on resume refused unless allowed, then recorded; a planned world; a folder as --config
  bounds        an absurd config.json; a model too large refused before allocation; a failed allocation reported;
                a manifest naming a file outside its checkpoint refused by t5scale-ckpt; a recipe and a study spec
                naming files outside their folders refused by t5scale-prep and t5scale-study
  one_tokenizer text metrics decoded with the run's one tokenizer (the dataset's file, else init_from's own when it
                made the dataset); a model of another tokenizer, and ROUGE without any tokenizer, refused at start
  export_whole  t5scale-ckpt export of a run with a trained SentencePiece tokenizer: transformers' AutoTokenizer and
                AutoModelForSeq2SeqLM load the folder, encode as the dataset and generate the run's own greedy text;
                a synthetic run's export holds the model alone and says why
  disk_full     the disk fills at the first checkpoint, or under the run file while the job trains (1 and 2 ranks):
                the job exits 2 and the failure is on record, in the run file or in a whole failure note

usage: training_job_checks.py SCENARIO --bin BUILD/bin --mpirun MPIEXEC --work DIR
"""
import argparse
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import h5py
import numpy as np

REQUEUE_EXIT_CODE = 75


def fail(message):
    print("FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Job:
    def __init__(self, args):
        self.bin = args.bin
        self.mpirun = args.mpirun
        self.work = args.work
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.dataset = os.path.join(self.work, "synthetic.h5")

    def prep(self):
        subprocess.run([os.path.join(self.bin, "t5scale-prep"), "synthetic", "--out", self.dataset, "--examples",
                        "2048", "--vocab-size", "48", "--seed", "7"], check=True)

    def command(self, ranks, name, *sets):
        base = ["--set", f"data.dataset={self.dataset}", "--set", "precision=fp32", "--set", "train.global_batch=8",
                "--set", "train.log_every=1", "--set", f"run.output_dir={self.work}", "--set", f"run.name={name}",
                "--set", "eval.every_steps=0", "--set", "eval.at_end=false", "--set", "model.dropout_rate=0.1"]
        for s in sets:
            base += ["--set", s]
        return [self.mpirun, "-np", str(ranks), os.path.join(self.bin, "t5scale-train")] + base

    def run(self, ranks, name, *sets, expect=0):
        log_path = os.path.join(self.work, f"{name}.log")
        with open(log_path, "a") as log:
            code = subprocess.run(self.command(ranks, name, *sets), stdout=log, stderr=subprocess.STDOUT).returncode
        if code != expect:
            with open(log_path) as f:
                tail = f.read()[-4000:]
            fail(f"{name}: exit code {code}, expected {expect}; log tail:\n{tail}")
        return log_path

    def run_file(self, name):
        return os.path.join(self.work, f"{name}.h5")

    def exit_code_file(self, name):
        """What <name>.exit_code holds: the job's own exit code as it ended, or "started" (rank 0 writes both)."""
        with open(os.path.join(self.work, f"{name}.exit_code")) as f:
            return f.read()


def read_steps(path):
    with h5py.File(path, "r", swmr=True) as f:
        steps = f["steps"]
        n = min(len(steps[k]) for k in steps)
        table = {k: steps[k][:n] for k in steps}
        keep = table["step"] >= 0
        return {k: v[keep] for k, v in table.items()}, dict(f.attrs)


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def scenario_resume(job):
    # The killed and resumed run keeps its optimizer state in host memory (parallel.offload_optimizer): it must
    # continue the uninterrupted run without it, bit for bit, across the resume.
    resume_after_kill(job, ["parallel.tp=2", "train.grad_accumulation=2", "parallel.zero1=true"],
                      killed_only=["parallel.offload_optimizer=true"])


def scenario_resume_replicated(job):
    # Without ZeRO-1 the optimizer state is replicated over DP: DP rank 0 of each TP rank writes it, the other
    # DP ranks write their RNG streams only, and read the state back from DP rank 0's file.
    resume_after_kill(job, ["parallel.tp=2", "train.grad_accumulation=2", "parallel.zero1=false"])
    checkpoint = os.path.join(job.work, "killed.ckpt", "step_00000060")
    sizes = {name: os.path.getsize(os.path.join(checkpoint, name)) for name in os.listdir(checkpoint)
             if name.endswith(".safetensors")}
    for tp in (0, 1):
        holder, other = sizes[f"rank_tp{tp}_dp0.safetensors"], sizes[f"rank_tp{tp}_dp1.safetensors"]
        check(other * 100 < holder, f"TP rank {tp}: DP rank 1 wrote {other} bytes beside DP rank 0's {holder}: "
                                    "the replicated optimizer state twice")
    print(f"resume_replicated: shard sizes {sizes}")


def scenario_reshard(job):
    job.prep()
    common = ["train.max_steps=16", "checkpoint.every_steps=8", "telemetry.flush_every_steps=1",
              "data.sampling=sortish", "model.dropout_rate=0", "checkpoint.keep_last=2"]
    cases = {"adamw": (["parallel.tp=2", "parallel.zero1=true", "train.grad_accumulation=2"],
                       [(1, ["parallel.tp=1", "parallel.zero1=false", "train.grad_accumulation=4"]),
                        (4, ["parallel.tp=1", "parallel.zero1=false"]),
                        (4, ["parallel.tp=4", "parallel.zero1=true"]),
                        (4, ["parallel.tp=2", "parallel.zero1=true", "parallel.zero2=true",
                             "train.grad_accumulation=2"])]),
             "adafactor": (["parallel.tp=2", "optimizer.name=adafactor"],
                           [(2, ["parallel.tp=1", "optimizer.name=adafactor"])])}
    for optimizer, (source_layout, targets) in cases.items():
        source = f"{optimizer}_source"
        job.run(4, source, *source_layout, *common)
        want, _ = read_steps(job.run_file(source))
        check(np.array_equal(want["step"], np.arange(1, 17)), f"{source} steps: {want['step']}")
        for ranks, layout in targets:
            name = f"{optimizer}_on_{ranks}_ranks_" + "_".join(s.split("=")[1] for s in layout)
            folder = os.path.join(job.work, f"{name}.ckpt")
            shutil.copytree(os.path.join(job.work, f"{source}.ckpt"), folder)
            shutil.rmtree(os.path.join(folder, "step_00000016"))  # resume from step 8
            if ranks != 4:  # the source's run file, with a column per rank of 4: kept aside, a new one started
                shutil.copy(job.run_file(source), job.run_file(name))
            log_path = job.run(ranks, name, *layout, *common, f"checkpoint.dir={folder}")
            if ranks != 4:
                aside = [f for f in os.listdir(job.work) if f.startswith(f"{name}.h5.world4.")]
                check(len(aside) == 1, f"{name}: the 4-rank run file was not kept aside: {os.listdir(job.work)}")
            with open(log_path) as f:
                log = f.read()
            resharded = "optimizer state resharded from tp 2 x dp 2" in log
            # ZeRO-2 keeps ZeRO-1's optimizer layout: on the writer's grid it reads the state as saved.
            check(resharded != ("parallel.zero2=true" in layout), f"{name}: the log says resharded: {resharded}")
            got, attrs = read_steps(job.run_file(name))
            check(np.array_equal(got["step"], np.arange(9, 17)), f"{name} steps: {got['step']}")
            check(int(attrs["resumed_from_step"]) == 8, f"{name}: resumed_from_step {attrs['resumed_from_step']}")
            for column in ("loss", "grad_norm"):
                reference = want[column][8:]
                error = np.max(np.abs(got[column] - reference) / np.abs(reference))
                check(error <= 1e-6, f"{name}: {column} differs from the source's own continuation by {error:.3g} "
                                     f"(relative): {got[column]} vs {reference}")
            check(np.array_equal(got["samples"], want["samples"][8:]) and
                  np.array_equal(got["target_tokens"], want["target_tokens"][8:]), f"{name}: other global batches")
            print(f"reshard: {optimizer} tp 2 x dp 2 -> {ranks} rank(s) {' '.join(layout)}: steps 9-16 equal, "
                  f"worst loss error {np.max(np.abs(got['loss'] - want['loss'][8:]) / want['loss'][8:]):.2g}")
    check_checkpoint_tool(job)


def ckpt_tool(job, *arguments, expect=0):
    result = subprocess.run([os.path.join(job.bin, "t5scale-ckpt"), *arguments], capture_output=True, text=True)
    check(result.returncode == expect, f"t5scale-ckpt {' '.join(arguments)}: exit {result.returncode}, expected "
                                       f"{expect}:\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def check_checkpoint_tool(job):
    # t5scale-ckpt on the AdamW source's checkpoints: inspect; reshard offline to tp 1 x dp 4 without ZeRO-1, which a
    # job then resumes as saved (no resharding) with exactly the losses of the job that resharded while loading;
    # export equal to the job's own export; bad input refused, naming the file or flag, leaving everything as it is.
    source = os.path.join(job.work, "adamw_source.ckpt")
    text = ckpt_tool(job, "inspect", source)
    for expected in ("step_00000016", "tp 2 x dp 2, ZeRO-1; optimizer adamw", "every size and checksum verified",
                     "rank_tp1_dp1.safetensors"):
        check(expected in text, f"inspect does not say {expected!r}:\n{text}")

    offline = os.path.join(job.work, "offline.ckpt")
    text = ckpt_tool(job, "reshard", os.path.join(source, "step_00000008"), "--tp", "1", "--dp", "4", "--zero1",
                     "false", "--out", offline)
    check("wrote" in text and "peak resident memory" in text, f"reshard says:\n{text}")
    print("reshard offline: " + text.strip())
    text = ckpt_tool(job, "inspect", offline)
    check("tp 1 x dp 4, no ZeRO" in text, f"the offline checkpoint's grid:\n{text}")
    common = ["train.max_steps=16", "telemetry.flush_every_steps=1", "data.sampling=sortish", "model.dropout_rate=0",
              "checkpoint.every_steps=0"]
    log_path = job.run(4, "offline", "parallel.tp=1", "parallel.zero1=false", *common, f"checkpoint.dir={offline}")
    with open(log_path) as f:
        log = f.read()
    check("optimizer state as saved" in log, "the job resharded the offline checkpoint again")
    online, _ = read_steps(job.run_file("adamw_on_4_ranks_1_false"))
    got, _ = read_steps(job.run_file("offline"))
    for column in ("step", "loss", "grad_norm"):
        check(np.array_equal(got[column], online[column]),
              f"{column}: offline resharding {got[column]} vs resharding while loading {online[column]}")

    exported = os.path.join(job.work, "exported")
    ckpt_tool(job, "export", source, "--hf", exported)
    job.run(4, "with_export", "parallel.tp=2", "parallel.zero1=true", "train.grad_accumulation=2", *common,
            "checkpoint.resume=never", f"export.hf_dir={os.path.join(job.work, 'job_export')}")
    from safetensors.numpy import load_file
    ours = load_file(os.path.join(exported, "model.safetensors"))
    theirs = load_file(os.path.join(job.work, "job_export", "model.safetensors"))
    check(sorted(ours) == sorted(theirs), "exported tensor names differ from the job's export")
    for name in theirs:
        check(np.array_equal(ours[name], theirs[name]), f"exported {name} differs from the job's export")
    print(f"export: {len(ours)} tensors equal to the job's own export at step 16")

    # Bad input.
    text = ckpt_tool(job, "reshard", source, "--tp", "3", "--dp", "1", "--out", os.path.join(job.work, "x"), expect=2)
    check("--tp 3" in text and "not divisible" in text, f"tp 3 refusal:\n{text}")
    check(not os.path.exists(os.path.join(job.work, "x")), "a refused reshard left a folder")
    text = ckpt_tool(job, "reshard", os.path.join(source, "step_00000008"), "--tp", "1", "--dp", "4", "--out",
                     offline, expect=2)
    check("exists" in text, f"resharding over an existing step:\n{text}")
    text = ckpt_tool(job, "export", source, "--hf", exported, expect=2)
    check("not empty" in text, f"export over a folder:\n{text}")
    damaged = os.path.join(job.work, "damaged.ckpt")
    shutil.copytree(source, damaged)
    shard = os.path.join(damaged, "step_00000016", "rank_tp1_dp0.safetensors")
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) - 4)
        f.write(b"\xff\xff\xff\xff")
    text = ckpt_tool(job, "inspect", damaged, expect=2)
    check("rank_tp1_dp0.safetensors checksum" in text and "differs from the manifest" in text,
          f"a damaged shard:\n{text}")
    print("t5scale-ckpt: inspect, reshard, export and four refusals as expected")


def resume_after_kill(job, layout, killed_only=()):
    """killed_only: settings of the killed and resumed run alone (ones that must not change its losses)."""
    job.prep()
    grid = layout + ["train.max_steps=60", "checkpoint.every_steps=10", "telemetry.flush_every_steps=1",
                     "data.sampling=sortish"]
    job.run(4, "uninterrupted", *grid)
    grid = grid + list(killed_only)

    # The same run, killed with SIGKILL (every rank and mpirun) once its first checkpoint is on disk.
    log_path = os.path.join(job.work, "killed.log")
    with open(log_path, "w") as log:
        process = subprocess.Popen(job.command(4, "killed", *grid), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    manifest = os.path.join(job.work, "killed.ckpt", "step_00000010", "manifest.json")
    deadline = time.time() + 240
    while not os.path.exists(manifest):
        check(process.poll() is None, f"the run ended (exit {process.returncode}) before its first checkpoint")
        check(time.time() < deadline, "no checkpoint within 240 s")
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    subprocess.run(["pkill", "-9", "-f", f"run.name=killed"], check=False)

    steps, attrs = read_steps(job.run_file("killed"))  # opens without h5clear
    check(text(attrs["status"]) == "running", f"a killed run's file says {text(attrs['status'])!r}")
    check(len(steps["step"]) >= 10, f"the killed file holds {len(steps['step'])} steps; 10 were flushed before "
                                     "the checkpoint")
    check(steps["step"].max() < 60, "the run was not killed before its end: make the run longer")
    print(f"killed after step {int(steps['step'].max())}; its file opens with {len(steps['step'])} steps")
    # What a launcher wrapper reads (the rendered sbatch scripts): the ranks had all started, and the job never
    # ended by its own hand; so the start-up retry leaves this launch alone.
    recorded = job.exit_code_file("killed")
    check(recorded == "started\n", f"a killed run's exit code file says {recorded!r}, not 'started'")

    job.run(4, "killed", *grid)  # resumes from the checkpoint
    recorded = job.exit_code_file("killed")
    check(recorded == "0\n", f"the resumed and completed run's exit code file says {recorded!r}")
    full, full_attrs = read_steps(job.run_file("uninterrupted"))
    resumed, resumed_attrs = read_steps(job.run_file("killed"))
    check(np.array_equal(full["step"], np.arange(1, 61)), f"uninterrupted steps: {full['step']}")
    check(np.array_equal(resumed["step"], np.arange(1, 61)), f"resumed steps: {resumed['step']}")
    for column in ("loss", "grad_norm", "lr", "samples", "target_tokens", "source_tokens"):
        if not np.array_equal(full[column], resumed[column]):
            bad = np.nonzero(full[column] != resumed[column])[0]
            fail(f"{column} differs from step {int(full['step'][bad[0]])}: {full[column][bad[0]]!r} vs "
                 f"{resumed[column][bad[0]]!r}")
    check(int(resumed_attrs["attempt"]) == 1 and int(resumed_attrs["resumed_from_step"]) == 10,
          f"attempt {resumed_attrs['attempt']}, resumed_from_step {resumed_attrs['resumed_from_step']}")
    for attrs in (full_attrs, resumed_attrs):
        check(text(attrs["status"]) == "completed", f"status {text(attrs['status'])}")
        check(int(attrs["world_size"]) == 4 and int(attrs["tp"]) == 2 and int(attrs["dp"]) == 2, "grid attributes")
        check(int(attrs["global_batch"]) == 8 and int(attrs["grad_accumulation"]) == 2 and
              int(attrs["micro_batch"]) == 2, "batch attributes")
        check("parallel:" in text(attrs["config_yaml"]), "config_yaml attribute")
    with h5py.File(job.run_file("killed"), "r") as f:  # finished: opens without SWMR too
        summary = dict(f["summary"].attrs)
        check(int(summary["steps_completed"]) == 60, f"summary steps_completed {summary['steps_completed']}")
        check(f["steps/memory_allocated_bytes"].shape[1] == 4, "per-rank columns: one per rank")
        check(np.all(f["steps/host_memory_bytes"][:] > 0), "host memory of every rank measured")
        check(np.all(np.isfinite(f["steps/tokens_per_s"][:])), "tokens/s on every row")
        for name, ds in f["steps"].items():
            check("unit" in ds.attrs, f"/steps/{name} has no unit attribute")
    # The resource card counts every attempt's steps: the resumed run's card shows what the uninterrupted one does
    # (the same steps and FLOPs; its time per step is the machine's, not the kill's).
    card_full = resource_card(os.path.join(job.work, "uninterrupted.log"))
    card_resumed = resource_card(os.path.join(job.work, "killed.log"))
    check(card_full["steps"] == 60 and card_resumed["steps"] == 60,
          f"resource cards count {card_full['steps']} and {card_resumed['steps']} steps, not 60")
    check(math.isclose(card_resumed["flops"], card_full["flops"], rel_tol=1e-3),
          f"model FLOPs on the cards: {card_resumed['flops']:.3e} resumed, {card_full['flops']:.3e} uninterrupted")
    ratio = card_resumed["s_per_step"] / card_full["s_per_step"]
    check(0.5 < ratio < 2.0, f"seconds per step on the cards: {card_resumed['s_per_step']} resumed, "
                             f"{card_full['s_per_step']} uninterrupted")
    print(f"resume: 60 steps, losses equal bit for bit; final loss {full['loss'][-1]:.6f}; the cards agree")


def resource_card(log_path):
    """The figures of the last resource card in a log: steps, seconds per step and total model FLOPs."""
    with open(log_path) as f:
        text = f.read()
    at = text.rfind("---- resource card:")
    check(at >= 0, f"no resource card in {log_path}")
    card = text[at:]
    throughput = re.search(r"throughput +\S+ samples/s, \S+ tokens/s, ([0-9.]+) s per step \((\d+) steps\)", card)
    flops = re.search(r"FLOPs +([0-9.e+-]+) model FLOPs in total", card)
    check(throughput is not None and flops is not None, f"the card in {log_path} lacks its figures:\n{card}")
    return {"s_per_step": float(throughput.group(1)), "steps": int(throughput.group(2)),
            "flops": float(flops.group(1))}


def scenario_signal(job):
    job.prep()
    settings = ["parallel.tp=2", "train.max_steps=120", "checkpoint.every_steps=0", "checkpoint.at_end=true"]
    log_path = os.path.join(job.work, "preempted.log")
    with open(log_path, "w") as log:
        process = subprocess.Popen(job.command(4, "preempted", *settings), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    deadline = time.time() + 240
    while True:  # wait for training to run, then signal one rank as Slurm's --signal would
        check(process.poll() is None, f"the run ended (exit {process.returncode}) before it was signalled")
        check(time.time() < deadline, "training did not start within 240 s")
        with open(log_path) as f:
            if "step 5/120" in f.read():
                break
        time.sleep(0.05)
    # The ranks stand still while the last one is signalled, so the run cannot reach its end before the signal
    # is seen, however slowly this process gets the CPU: 120 steps leave room for this loop's reaction alone.
    ranks = rank_pids(process.pid)
    check(sorted(ranks) == [0, 1, 2, 3], f"found the ranks {ranks}, expected 4")
    for pid in ranks.values():
        os.kill(pid, signal.SIGSTOP)
    os.kill(ranks[3], signal.SIGUSR1)
    for pid in ranks.values():
        os.kill(pid, signal.SIGCONT)
    code = process.wait(timeout=240)
    with open(log_path) as f:
        log = f.read()
    check(code == REQUEUE_EXIT_CODE, f"exit code {code}, expected {REQUEUE_EXIT_CODE}; log tail:\n{log[-3000:]}")
    check("preemption signal" in log, "the log does not say why the job stopped")
    checkpoints = sorted(os.listdir(os.path.join(job.work, "preempted.ckpt")))
    check(len(checkpoints) == 1, f"checkpoints {checkpoints}")
    stopped_at = int(checkpoints[0].split("_")[1])
    steps, attrs = read_steps(job.run_file("preempted"))
    check(text(attrs["status"]) == "preempted", f"status {text(attrs['status'])}")
    check(int(steps["step"].max()) == stopped_at, f"run file ends at {steps['step'].max()}, checkpoint {stopped_at}")
    print(f"signal: stopped at step {stopped_at} with exit code {code}")
    # The requeued job logs by the clock alone (a line every 0.3 s, and its first step's), as slow steps would.
    started = time.time()
    requeued_log = job.run(4, "preempted", *settings, "train.log_every=1000", "train.log_every_s=0.3")
    elapsed_s = time.time() - started
    steps, attrs = read_steps(job.run_file("preempted"))
    check(text(attrs["status"]) == "completed" and int(attrs["resumed_from_step"]) == stopped_at,
          f"after the requeue: status {text(attrs['status'])}, resumed from {attrs['resumed_from_step']}")
    check(np.array_equal(steps["step"], np.arange(1, 121)), "steps after the requeue")
    with open(requeued_log) as f:
        requeued = f.read().split("preemption signal")[-1]
    lines = re.findall(r"^step (\d+)/120 .*\| ETA \d+:\d\d:\d\d", requeued, re.M)
    logged = [int(step) for step in lines]
    check(logged[:1] == [stopped_at + 1], f"the requeued job's first step was not logged as it came: {logged}")
    by_clock = [step for step in logged[1:] if step != 120]
    check(len(by_clock) >= 1 and len(logged) <= elapsed_s / 0.3 + 3,
          f"step lines by the clock (every 0.3 s of a {elapsed_s:.1f} s job): {logged}")
    print(f"signal: the requeued job logged steps {logged} by the clock, each with the time left")


def scenario_early_stop(job):
    job.prep()
    job.run(2, "early", "train.max_steps=100", "eval.every_steps=4", "eval.max_examples=32",
            "eval.metrics=loss", "early_stopping.metric=eval_loss", "early_stopping.patience=2",
            "early_stopping.min_delta=100")
    steps, attrs = read_steps(job.run_file("early"))
    # The first evaluation sets the best; two more without an improvement of 100 nats stop the run.
    check(int(steps["step"].max()) == 12, f"stopped after step {steps['step'].max()}, expected 12")
    check(text(attrs["status"]) == "completed", f"status {text(attrs['status'])}")
    with h5py.File(job.run_file("early"), "r") as f:
        check(list(f["eval/step"][:]) == [4, 8, 12], f"evaluations at {list(f['eval/step'][:])}")
        check(np.all(np.isfinite(f["eval/loss"][:])), "eval losses")
    print("early stopping: stopped at step 12 after 3 evaluations")


def scenario_diverge(job):
    """A learning rate that overflows the weights: the job stops with status diverged and exit 3, keeping the last
    good checkpoint (none is written at or after the bad step)."""
    job.prep()
    job.run(2, "diverged", "train.max_steps=50", "optimizer.lr=1e30", "train.max_grad_norm=0",
            "checkpoint.every_steps=1", expect=3)
    steps, attrs = read_steps(job.run_file("diverged"))
    check(text(attrs["status"]) == "diverged", f"status {text(attrs['status'])}")
    last_good = int(steps["step"].max())
    check(np.all(np.isfinite(steps["loss"])), "a non-finite loss was recorded as a step")
    checkpoints = sorted(os.listdir(os.path.join(job.work, "diverged.ckpt")))
    check(checkpoints and int(checkpoints[-1].split("_")[1]) == last_good,
          f"checkpoints {checkpoints}, last good step {last_good}")
    print(f"diverge: stopped after step {last_good} with exit code 3, its checkpoint kept")


def scenario_refuse(job):
    cases = [
        (["train.max_step=5"], "did you mean 'train.max_steps'"),
        (["train.max_steps=5", "parallel.tp=3"], "parallel.tp: model tiny: num_heads 4 is not divisible by tp 3"),
        (["train.max_steps=5", "parallel.tp=4"],
         "parallel.tp: world size 2 (2 processes were started) is not divisible by tp 4: start a multiple of 4"),
        (["train.max_steps=5", "data.dataset=/nonexistent/data.h5"], "data.dataset"),
        (["train.max_steps=5", "optimizer.name=adafactor", "parallel.zero1=true"], "optimizer.name"),
        (["train.max_steps=5", "lr_schedule.warmup_steps=10"], "lr_schedule.warmup_steps: 10 is longer than the run"),
    ]
    for sets, expected in cases:
        result = subprocess.run(job.command(2, "refused", *sets), capture_output=True, text=True)
        output = result.stdout + result.stderr
        check(result.returncode != 0, f"{sets} was accepted")
        check(expected in output, f"{sets}: the message does not name {expected!r}:\n{output[-2000:]}")
        # Every rank meets the error; the job prints it once.
        printed = output.count("t5scale-train: error:")
        check(printed == 1, f"{sets}: the error is printed {printed} times:\n{output[-2000:]}")
        check(not os.path.exists(job.run_file("refused")), f"{sets}: a run file was written before refusing")
        # What the config, the world and the files show comes first, not after the resolved config's hundred lines.
        check("resolved config" not in output, f"{sets}: the resolved config was printed before the refusal:\n"
              f"{output[:2000]}")
    # Problems of the config, the world and the files, in one list.
    sets = ["train.max_steps=5", "parallel.tp=4", "model.num_heads=3", "data.dataset=/nonexistent/data.h5"]
    result = subprocess.run(job.command(2, "refused", *sets), capture_output=True, text=True)
    output = result.stdout + result.stderr
    for expected in ["(3 problems)", "parallel.tp: world size 2", "num_heads 3", "data.dataset"]:
        check(expected in output, f"{sets}: the one list of problems does not hold {expected!r}:\n{output[-2000:]}")
    print(f"refuse: {len(cases) + 1} bad configs refused before any compute, before the resolved config")


SENTENCES = ["the meeting moved to friday at noon", "anna will bring the slides and the coffee",
             "the train was late because of the snow", "tom forgot his keys at the office again",
             "we booked a table for six people", "the report is due next monday morning",
             "sara asked whether the budget was approved", "the printer on the third floor is broken"]


def prep_dialogues(job, pieces):
    """A dialogue/summary JSONL through t5scale-prep (SAMSum recipe, a tokenizer of `pieces` pieces trained on it)
    into job.dataset; returns the tokenizer's path."""
    import json
    import random
    rng = random.Random(3)
    data = os.path.join(job.work, "dialogues.jsonl")
    with open(data, "w") as f:
        for i in range(400):
            a, b = rng.sample(SENTENCES, 2)
            f.write(json.dumps({"id": f"d{i}", "dialogue": f"Anna: {a}.\nTom: {b}?", "summary": a}) + "\n")
    recipe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data_prep", "recipes",
                          "samsum.yaml")
    tokenizer = os.path.join(job.work, "spiece.model")
    subprocess.run([os.path.join(job.bin, "t5scale-prep"), "--recipe", recipe, "--input", data, "--out",
                    job.dataset, "--train-tokenizer", "--tokenizer-out", tokenizer, "--vocab-size", str(pieces),
                    "--split-ratio", "train=0.8", "--split-ratio", "validation=0.2", "--progress", "none"],
                   check=True)
    return tokenizer


def scenario_prep_to_train(job):
    """A dialogue/summary JSONL through t5scale-prep (recipe, trained tokenizer) into the trainer, with ROUGE."""
    import json
    tokenizer = prep_dialogues(job, pieces=60)
    job.run(2, "prepped", "train.max_steps=30", "parallel.tp=2", f"data.tokenizer={tokenizer}",
            "optimizer.lr=3e-3", "eval.every_steps=15", "eval.max_examples=24", "eval.metrics=loss,rouge",
            "eval.max_new_tokens=16", "model.dropout_rate=0.0", f"export.hf_dir={os.path.join(job.work, 'prepped_hf')}")
    # The job's own export holds the tokenizer beside the model (the run's spiece.model byte for byte).
    exported = sorted(os.listdir(os.path.join(job.work, "prepped_hf")))
    check(exported == ["config.json", "model.safetensors", "special_tokens_map.json", "spiece.model",
                       "tokenizer_config.json"], f"the job's export holds {exported}")
    with open(tokenizer, "rb") as a, open(os.path.join(job.work, "prepped_hf", "spiece.model"), "rb") as b:
        check(a.read() == b.read(), "the exported spiece.model is not the run's tokenizer")
    with h5py.File(job.run_file("prepped"), "r") as f:
        check(list(f["eval/step"][:]) == [15, 30], f"evaluations at {list(f['eval/step'][:])}")
        rouge = f["eval/rouge1"][:]
        check(np.all(np.isfinite(rouge)) and np.all((rouge >= 0) & (rouge <= 1)), f"rouge1 {rouge}")
        check(int(f.attrs["parameter_count"]) > 0, "parameter count")
    generations = os.path.join(job.work, "prepped.eval.jsonl")
    with open(generations) as f:
        rows = [json.loads(line) for line in f]
    check(len(rows) == 48 and all(r["reference"] for r in rows), f"{len(rows)} generations written")
    check(any("anna" in r["source"].lower() for r in rows), "generations hold the decoded source text")
    print(f"prep to train: rouge1 {rouge[0]:.3f} -> {rouge[1]:.3f}; {len(rows)} generations decoded")


def tiny_hf_model(job, folder, vocab_size, spiece=None):
    """A randomly initialised T5 saved by transformers into `folder`, with `spiece` copied in as its spiece.model."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(vocab_size=vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                num_heads=4, decoder_start_token_id=0, pad_token_id=0,
                                                eos_token_id=1))
    model.save_pretrained(folder, safe_serialization=True)
    if spiece:
        shutil.copyfile(spiece, os.path.join(folder, "spiece.model"))
    return folder


def scenario_one_tokenizer(job):
    """Text metrics on text, with the run's one tokenizer. Without data.tokenizer the job decodes with the file the
    dataset names (t5scale-prep recorded it), else with model.init_from's spiece.model when the dataset was made with
    it; with none of them, a run that asks for ROUGE is refused at start; a model whose own tokenizer did not make the
    dataset is refused naming both files."""
    import json
    tokenizer = prep_dialogues(job, pieces=60)
    with h5py.File(job.dataset, "r") as f:
        data_vocab = int(f.attrs["vocab_size"])
    evaluate = ["eval.only=true", "eval.max_examples=8", "eval.metrics=loss,rouge", "eval.max_new_tokens=4"]

    def decoded(name):
        with open(os.path.join(job.work, f"{name}.eval.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        # Token ids written as numbers would be digits and spaces alone; the dialogues are words.
        return rows and all(re.search(r"[a-z]{3}", r["source"].lower()) for r in rows)

    log = job.run(1, "dataset_names_it", "train.max_steps=2", "eval.at_end=true", *evaluate[1:])
    with open(log) as f:
        said = f.read()
    check(f"tokenizer {tokenizer} (the dataset's tokenizer_file; the tokenizer that made {job.dataset})" in said,
          f"the job does not say which tokenizer it decodes with:\n{said[-2000:]}")
    check(decoded("dataset_names_it"), "generations not decoded with the dataset's tokenizer")

    same = tiny_hf_model(job, os.path.join(job.work, "model_same"), 256, spiece=tokenizer)
    other_corpus = os.path.join(job.work, "other.txt")
    with open(other_corpus, "w") as f:
        f.write("\n".join(f"completely other words number {i} for another vocabulary" for i in range(300)))
    other_prefix = os.path.join(job.work, "other")
    subprocess.run(["spm_train", f"--input={other_corpus}", f"--model_prefix={other_prefix}", "--vocab_size=40",
                    "--character_coverage=1.0", "--minloglevel=2"], check=True, capture_output=True)
    other = tiny_hf_model(job, os.path.join(job.work, "model_other"), 256, spiece=other_prefix + ".model")

    # The model's tokenizer is not the dataset's: refused at start, naming both, before any run file.
    result = subprocess.run(job.command(1, "mismatch", *evaluate, f"model.init_from={other}"), capture_output=True,
                            text=True)
    output = result.stdout + result.stderr
    check(result.returncode != 0, "a model of another tokenizer was accepted")
    for part in (f"model.init_from {other} has its own tokenizer {other}/spiece.model", f"data.dataset {job.dataset}",
                 f"was made with another one, {tokenizer}", "would mean other words"):
        check(part in output, f"the refusal does not say {part!r}:\n{output[-2000:]}")
    check(not os.path.exists(job.run_file("mismatch")), "a run file was written before refusing")

    # The dataset's file gone: the model's own spiece.model (the same file, by hash) decodes.
    hidden = tokenizer + ".moved"
    os.rename(tokenizer, hidden)
    log = job.run(1, "model_has_it", *evaluate, f"model.init_from={same}")
    with open(log) as f:
        said = f.read()
    check(f"tokenizer {same}/spiece.model (model.init_from's spiece.model; the tokenizer that made" in said,
          f"the job does not decode with the model's tokenizer:\n{said[-2000:]}")
    check(decoded("model_has_it"), "generations not decoded with the model's tokenizer")

    # No tokenizer at all: ROUGE is refused at start with the reason; the loss alone still runs.
    result = subprocess.run(job.command(1, "no_tokenizer", *evaluate), capture_output=True, text=True)
    output = result.stdout + result.stderr
    check(result.returncode != 0, "ROUGE without a tokenizer was accepted")
    for part in ("eval.metrics: rouge score(s) text, and this run has no tokenizer", f"{tokenizer} (the dataset's "
                 "tokenizer_file): no such file", "Set data.tokenizer to the SentencePiece model that made"):
        check(part in output, f"the refusal does not say {part!r}:\n{output[-2000:]}")
    job.run(1, "loss_alone", "eval.only=true", "eval.max_examples=8", "eval.metrics=loss")
    os.rename(hidden, tokenizer)
    print(f"one tokenizer: decoded with the dataset's file ({data_vocab} ids) and with the model's; a model of "
          f"another tokenizer and ROUGE without a tokenizer refused at start")


def scenario_export_whole(job):
    """t5scale-ckpt export writes the run's tokenizer beside the model: transformers' AutoTokenizer (fast, converted
    from spiece.model, and slow) and AutoModelForSeq2SeqLM load the folder, the tokenizer encodes the evaluation
    sources to the dataset's ids and the model generates (greedy) the text that the run generated itself; its
    tokenizer files are T5Tokenizer.save_pretrained's. A run on synthetic data exports the model alone and says so."""
    import json
    import torch
    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, T5Tokenizer
    max_new_tokens = 16
    tokenizer_file = prep_dialogues(job, pieces=60)
    job.run(1, "whole", "train.max_steps=60", "optimizer.lr=3e-3", "model.dropout_rate=0",
            f"data.tokenizer={tokenizer_file}", "checkpoint.every_steps=60", "eval.at_end=true",
            "eval.max_examples=8", "eval.metrics=loss,rouge", f"eval.max_new_tokens={max_new_tokens}")
    with open(os.path.join(job.work, "whole.eval.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    check(len(rows) == 8, f"{len(rows)} generations written")

    exported = os.path.join(job.work, "exported")
    text = ckpt_tool(job, "export", os.path.join(job.work, "whole.ckpt"), "--hf", exported)
    check(f"tokenizer: {tokenizer_file} (data.tokenizer; the tokenizer that made {job.dataset})" in text,
          f"export says:\n{text}")
    for name in ("config.json", "model.safetensors", "spiece.model", "tokenizer_config.json",
                 "special_tokens_map.json"):
        check(os.path.exists(os.path.join(exported, name)), f"the export has no {name}: {os.listdir(exported)}")

    # The files T5Tokenizer itself writes for this spiece.model, less the two keys the export leaves at their
    # defaults.
    reference = os.path.join(job.work, "t5tokenizer_saved")
    T5Tokenizer(os.path.join(exported, "spiece.model"), extra_ids=100, legacy=True).save_pretrained(reference)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(exported, name)) as f:
            ours = json.load(f)
        with open(os.path.join(reference, name)) as f:
            theirs = {k: v for k, v in json.load(f).items() if k not in ("model_max_length", "extra_special_tokens")}
        differing = [k for k in ours if k in theirs and ours[k] != theirs[k]]
        check(ours == theirs, f"{name} differs from T5Tokenizer.save_pretrained's: keys only in the export "
                              f"{sorted(set(ours) - set(theirs))}, only in T5Tokenizer's "
                              f"{sorted(set(theirs) - set(ours))}, other values {differing}")

    model = AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    with h5py.File(job.dataset, "r") as f:
        offsets = f["validation/source_offsets"][:]
        tokens = f["validation/source_tokens"]
        sources = [list(tokens[offsets[r["index"]]:offsets[r["index"] + 1]]) for r in rows]
    trailing_space = 0
    for use_fast in (True, False):
        tokenizer = AutoTokenizer.from_pretrained(exported, use_fast=use_fast)
        kind = type(tokenizer).__name__
        for row, source in zip(rows, sources):
            ids = tokenizer(row["source"]).input_ids
            check(ids == source, f"{kind} encodes {row['source']!r} to {ids}, the dataset holds {source}")
            with torch.no_grad():
                generated = model.generate(input_ids=torch.tensor([ids]), do_sample=False, num_beams=1,
                                           max_new_tokens=max_new_tokens, min_length=0)[0].tolist()
            # t5scale's decode skips pad (the decoder start) and eos, and writes sentinels as text.
            pieces = [t for t in generated if t not in (0, 1)]
            words = tokenizer.decode(pieces, skip_special_tokens=False)
            # A generation cut after a lone "▁" piece: SentencePiece and T5Tokenizer drop that space, as t5scale
            # does; the fast tokenizer's Metaspace decoder keeps it (transformers' own slow/fast difference).
            if use_fast and words == row["prediction"] + " " and tokenizer.convert_ids_to_tokens(pieces[-1]) == "▁":
                trailing_space += 1
                words = words[:-1]
            check(words == row["prediction"], f"{kind}, example {row['index']}: transformers generates {words!r}, "
                                              f"t5scale generated {row['prediction']!r}")
    print(f"export whole: transformers {transformers.__version__} loads the export; T5TokenizerFast and T5Tokenizer "
          f"encode {len(rows)} sources to the dataset's ids and the model generates t5scale's text for each "
          f"(the fast tokenizer with a trailing space after a final '▁' in {trailing_space}), e.g. "
          f"{rows[0]['prediction']!r}")

    job.prep()  # a synthetic dataset file in place of the dialogues
    job.run(1, "on_synthetic", "train.max_steps=2", "checkpoint.every_steps=2")
    alone = os.path.join(job.work, "synthetic_export")
    text = ckpt_tool(job, "export", os.path.join(job.work, "on_synthetic.ckpt"), "--hf", alone)
    check("tokenizer: no tokenizer written: the run's dataset" in text and "holds synthetic ids" in text,
          f"a synthetic run's export says:\n{text}")
    check(sorted(os.listdir(alone)) == ["config.json", "model.safetensors"], f"synthetic export: {os.listdir(alone)}")
    print("export whole: a synthetic run's export holds the model alone and says why")


def scenario_eval_only(job):
    """Train, export to Hugging Face's layout, then evaluate that folder alone (what users run before fine-tuning)."""
    job.prep()
    export = os.path.join(job.work, "hf")
    job.run(2, "trained", "train.max_steps=40", "optimizer.lr=3e-3", f"export.hf_dir={export}",
            "eval.at_end=true", "eval.max_examples=64", "eval.metrics=loss,squad")
    check(os.path.exists(os.path.join(export, "config.json")), "no config.json exported")
    job.run(2, "evaluated", "eval.only=true", f"model.init_from={export}", "eval.max_examples=64",
            "eval.metrics=loss,squad", "parallel.tp=2")
    with h5py.File(job.run_file("trained"), "r") as f:
        trained_loss = float(f["eval/loss"][-1])
    with h5py.File(job.run_file("evaluated"), "r") as f:
        check(len(f["steps/step"]) == 0, "an evaluation-only run has no training steps")
        check(len(f["eval/step"]) == 1, "one evaluation row")
        evaluated_loss = float(f["eval/loss"][0])
    # The same weights on another grid (tp 2 instead of dp 2): the same loss up to fp32 reduction order.
    check(abs(evaluated_loss - trained_loss) <= 1e-5 * abs(trained_loss),
          f"eval loss of the export {evaluated_loss} differs from the trained model's {trained_loss}")
    print(f"eval only: the exported model's eval loss {evaluated_loss:.6f} equals the trained run's")


def scenario_vocab_beyond(job):
    """T5's arrangement: a 32,128-row embedding with a 32,100-id tokenizer. Here a Hugging Face model of 256 rows
    (made by transformers) evaluates data of a tokenizer with fewer ids; its embedding rows beyond the tokenizer are
    scaled up so that greedy generation picks them, as a weak early model may."""
    import json
    import re
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    tokenizer = prep_dialogues(job, pieces=60)
    with h5py.File(job.dataset, "r") as f:
        data_vocab = int(f.attrs["vocab_size"])
    model_vocab = 256
    check(data_vocab < model_vocab, f"the data's vocabulary {data_vocab} is not below the model's {model_vocab}")
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(vocab_size=model_vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                num_heads=4, decoder_start_token_id=0, pad_token_id=0,
                                                eos_token_id=1))
    with torch.no_grad():
        model.shared.weight[data_vocab:] *= 20.0
    hf = os.path.join(job.work, "hf")
    model.save_pretrained(hf, safe_serialization=True)
    log = job.run(2, "beyond", "eval.only=true", f"model.init_from={hf}", f"data.tokenizer={tokenizer}",
                  "eval.max_examples=16", "eval.metrics=loss,rouge", "eval.max_new_tokens=8")
    with h5py.File(job.run_file("beyond"), "r") as f:
        check(text(f.attrs["status"]) == "completed", f"status {text(f.attrs['status'])}")
        check(len(f["eval/step"]) == 1, "no eval row")
        counted = int(f["eval/generated_ids_beyond_vocab"][0])
        check(np.isfinite(f["eval/rouge1"][0]), "no rouge1 in the eval row")
        host_peak = float(f["summary"].attrs["peak_host_memory_bytes"])
    with open(os.path.join(job.work, "beyond.eval.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    check(len(rows) == 16, f"{len(rows)} generations written")
    shown = [int(m) for r in rows for m in re.findall(r"<id_(\d+)>", r["prediction"])]
    check(counted > 0 and counted == len(shown), f"{counted} ids counted, {len(shown)} placeholders in the generations")
    check(all(data_vocab <= i < model_vocab for i in shown), f"placeholder ids {sorted(set(shown))}")
    # The resource card of a CPU run without steps: the host's peak, not "0.00 GiB", and no GPU.
    with open(log) as f:
        card = f.read()
    memory = re.search(r"memory +host peak resident set ([0-9.]+) GiB \(max over 2 CPU ranks", card)
    check(memory and float(memory.group(1)) > 0.01, "the card's memory line:\n" + card[-1500:])
    check("2 CPU ranks = tp 1 x dp 2" in card, "the card's grid line does not say CPU ranks")
    check(abs(host_peak / 2**30 - float(memory.group(1))) < 0.01, f"summary peak_host_memory_bytes {host_peak}")
    print(f"vocab beyond: {counted} generated ids in [{data_vocab}, {model_vocab}) shown as <id_N> and counted; "
          f"host peak {memory.group(1)} GiB")


def rank_pids(mpirun_pid):
    """{world rank: pid} of the ranks mpirun started (its children, by OMPI_COMM_WORLD_RANK)."""
    pids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != mpirun_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except (OSError, IndexError, ValueError):
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            pids[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return pids


def corrupt_validation_example(job, example):
    """Puts an id outside the vocabulary into the source of one validation example. A job started afterwards refuses
    the split at start-up; a job already training meets it at its next evaluation, on the rank that evaluates that
    example (the job holds the file open: HDF5's file lock is not taken for this write)."""
    os.environ["HDF5_USE_FILE_LOCKING"] = "FALSE"
    with h5py.File(job.dataset, "r+") as f:
        start = int(f["validation/source_offsets"][example])
        f["validation/source_tokens"][start] = int(f.attrs["vocab_size"]) + 5


def read_failure(job, name):
    """(root attributes, the failure note or None, the analysis' Run) of a failed run."""
    import json
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis"))
    from t5scale_analyze.runfile import read_run
    with h5py.File(job.run_file(name), "r", swmr=True) as f:
        attrs = {k: (text(v) if isinstance(v, (bytes, np.bytes_, str)) else v) for k, v in f.attrs.items()}
        summary_status = text(f["summary"].attrs["status"])
        check(summary_status in ("failed", "running") and text(f["summary"].attrs["end_time_utc"]) == "",
              f"a failed run's /summary says {summary_status!r}: not the flushed figures of a run that did not end")
    note_path = os.path.join(job.work, f"{name}.failed.json")
    note = json.load(open(note_path)) if os.path.exists(note_path) else None
    return attrs, note, read_run(job.run_file(name))


def scenario_failures(job):
    evaluate = ["eval.every_steps=3", "eval.max_examples=8", "eval.metrics=loss", "train.max_steps=6",
                "telemetry.flush_every_steps=1"]

    # A bad id in the evaluation split is found at start-up, before the first step, naming the split.
    job.prep()
    corrupt_validation_example(job, 1)
    code, output = run_output(job, 2, "bad_eval_split", *evaluate)
    check(code == 2 and "validation" in output and "outside the vocabulary" in output,
          f"a bad evaluation split: exit {code}:\n{output[-3000:]}")
    check(not os.path.exists(job.run_file("bad_eval_split")), "a run file was written before the refusal")

    # An exception on rank 1 alone mid-run (its evaluation example gets a bad id while the job trains): rank 0 waits
    # in a collective and is killed by the abort, so rank 1 leaves the note and the file stays "running".
    job.prep()
    log_path = os.path.join(job.work, "rank1_throws.log")
    with open(log_path, "w") as log:
        process = subprocess.Popen(job.command(2, "rank1_throws", "eval.every_steps=150", "eval.max_examples=8",
                                               "eval.metrics=loss", "train.max_steps=300",
                                               "telemetry.flush_every_steps=1"),
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while "step 2/" not in open(log_path).read():
            check(process.poll() is None and time.time() < deadline, "the job did not start training")
            time.sleep(0.02)
        corrupt_validation_example(job, 1)  # after the start-up check; rank 1 has not read it yet
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    check(code == 2, f"exit {code}")
    attrs, note, run = read_failure(job, "rank1_throws")
    check(attrs["status"] == "running", f"status {attrs['status']}: rank 0 wrote a status it could not know")
    check(note is not None and note["rank"] == 1 and note["step"] == 150 and "outside the vocabulary" in note["error"],
          f"failure note {note}")
    check(run.status == "failed" and "outside the vocabulary" in run.summary["error"], f"analysis: {run.status}")
    check(len(run.steps) == 150, f"{len(run.steps)} steps readable, 150 were flushed")
    log = open(log_path).read()
    check(log.count("t5scale-train: error:") == 1, "the error is not printed exactly once:\n" + log[-3000:])
    # Rank 1's reserved space became its note; rank 0, killed by the abort, could not give its own back (the next
    # start of the run removes it).
    check("rank1_throws.failed.json.reserve.1" not in os.listdir(job.work), f"files: {os.listdir(job.work)}")

    # Rank 0 cannot write the generations (an error outside the model, met after the evaluation's collectives):
    # every rank writes the checkpoint of that step, then the job fails, rank 0 recording it in the run file; once
    # the cause is gone the run resumes from that checkpoint, losing no step.
    job.prep()
    generations = os.path.join(job.work, "rank0_cannot_write.eval.jsonl")
    os.makedirs(generations)  # a folder where the file should go
    write = ["eval.generate=true", "eval.write_generations=true", "eval.max_new_tokens=4", "eval.metrics=loss,rouge"]
    job.run(2, "rank0_cannot_write", *evaluate, *write, expect=2)
    attrs, note, run = read_failure(job, "rank0_cannot_write")
    check(attrs["status"] == "failed" and attrs["error_step"] == 3 and "cannot write the generations" in attrs["error"],
          f"status {attrs['status']}, error_step {attrs['error_step']}, error {attrs['error']!r}")
    check(note is None, "rank 0 recorded the failure in the file: no note expected")
    check(run.status == "failed" and run.summary["error_step"] == 3, f"analysis: {run.status}")
    check(os.path.exists(os.path.join(job.work, "rank0_cannot_write.ckpt", "step_00000003", "manifest.json")),
          "no checkpoint was written before the job failed")
    os.rmdir(generations)
    log = job.run(2, "rank0_cannot_write", *evaluate, *write)
    check("resumed from" in open(log).read() and "at step 3" in open(log).read(), "the rerun did not resume at step 3")

    # A stalled rank (stopped by a signal): rank 0's collective times out, and it records that.
    job.prep()
    log_path = os.path.join(job.work, "stalled.log")
    with open(log_path, "w") as log:
        process = subprocess.Popen(job.command(2, "stalled", "train.max_steps=100000",
                                               "parallel.collective_timeout_s=5"),
                                   stdout=log, stderr=subprocess.STDOUT)
    stopped = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and process.poll() is None:
            with open(log_path) as f:
                if "step 3/" in f.read():
                    stopped = rank_pids(process.pid).get(1)
                    break
            time.sleep(0.5)
        check(stopped is not None, "the job did not reach step 3, or rank 1 was not found")
        os.kill(stopped, signal.SIGSTOP)
        code = process.wait(timeout=120)
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process.poll() is None:
            process.kill()
            process.wait()
    check(code != 0, "the stalled job exited 0")
    attrs, note, run = read_failure(job, "stalled")
    check(attrs["status"] == "failed" and "timed out after 5 s" in attrs["error"] and attrs["error_step"] >= 3,
          f"status {attrs['status']}, error {attrs['error']!r}, error_step {attrs['error_step']}")
    # The stopped rank does not answer the liveness pings: it is named, with its host.
    silent = f"world rank 1 on {socket.gethostname()} does not answer"
    check(silent in attrs["error"], f"the error does not say {silent!r}: {attrs['error']!r}")
    check(run.status == "failed", f"analysis: {run.status}")
    print(f"failures: rank 1's exception noted beside the file, rank 0's bad data and a stall recorded in it "
          f"(stalled after step {attrs['error_step']})")


def scenario_checkpointing_auto(job):
    job.prep()
    common = ["parallel.tp=2", "train.max_steps=6", "model.name=tiny"]
    roomy_log = job.run(2, "auto_roomy", *common, "parallel.activation_checkpointing=auto")
    roomy, roomy_attrs = read_steps(job.run_file("auto_roomy"))
    check(int(roomy_attrs["checkpoint_every_blocks"]) == 0,
          f"auto with the host's memory chose checkpoint_every_blocks {roomy_attrs['checkpoint_every_blocks']}, "
          "expected 0 (none)")
    with open(roomy_log) as f:
        roomy_text = f.read()
    check("activation checkpointing (auto): none (predicted" in roomy_text, "the roomy run does not say its choice")
    # The attention kernel is chosen once and recorded: explicit on the CPU.
    kernels = roomy_attrs["attention_kernels"]
    kernels = kernels.decode() if isinstance(kernels, bytes) else str(kernels)
    check(kernels == "explicit", f"attention_kernels {kernels!r}")
    check("[t5scale] attention: explicit" in roomy_text, "the log does not say which attention kernel runs")

    # A budget the run without checkpointing misses by 10%: auto must choose some checkpointing.
    none_bytes = int(roomy_attrs["predicted_memory_bytes_per_device"])
    budget_gib = none_bytes * 0.9 / 0.95 / 2**30
    tight_log = job.run(2, "auto_tight", *common, "parallel.activation_checkpointing=auto",
                        f"parallel.device_memory_gib={budget_gib!r}")
    tight, tight_attrs = read_steps(job.run_file("auto_tight"))
    every = int(tight_attrs["checkpoint_every_blocks"])
    check(every >= 1, f"auto with {budget_gib:.6f} GiB chose checkpoint_every_blocks {every}, expected at least 1")
    check(int(tight_attrs["predicted_memory_bytes_per_device"]) < none_bytes,
          "the chosen checkpointing predicts no less memory than none")
    with open(tight_log) as f:
        log = f.read()
    said = [line for line in log.splitlines() if "activation checkpointing (auto):" in line]
    check(len(said) == 1 and ("every block" in said[0] or f"every {every}" in said[0]),
          f"the tight run's log says {said!r} for checkpoint_every_blocks {every}")

    # The same k, asked for by hand: the same predictions, the same losses bit for bit.
    job.run(2, "explicit", *common, "parallel.activation_checkpointing=true", f"parallel.checkpoint_every_blocks={every}")
    explicit, explicit_attrs = read_steps(job.run_file("explicit"))
    check(int(explicit_attrs["checkpoint_every_blocks"]) == every, "the explicit run records another k")
    check(int(explicit_attrs["predicted_memory_bytes_per_device"]) ==
          int(tight_attrs["predicted_memory_bytes_per_device"]), "auto and explicit predict different memory")
    for column in ("loss", "grad_norm"):
        check(np.array_equal(tight[column], explicit[column]),
              f"{column}: auto {tight[column]} vs explicit k={every} {explicit[column]}")
    print(f"checkpointing_auto: none with the host's memory ({none_bytes / 2**20:.1f} MiB predicted); "
          f"every {every} block(s) with {budget_gib * 1024:.1f} MiB ({said[0].split(': ', 1)[1]}); "
          f"losses equal to the explicit run")


PLAN_STUDY = """
study: plan-vs-job
base:
  model: {{name: tiny}}
  data: {{dataset: {dataset}, max_source_length: 24, max_target_length: 20}}
  precision: fp32
  parallel: {{backend: mpi}}
  train: {{epochs: 1, global_batch: 32, log_every: 4}}
  optimizer: {{name: adamw, lr: 1.0e-3}}
  lr_schedule: {{warmup_ratio: 0.1, decay: linear}}
  lr_scaling: {{rule: sqrt, reference_global_batch: 8}}
  eval: {{every_steps: 0, at_end: false}}
  checkpoint: {{every_steps: 0, at_end: false}}
axes:
  case:
    - {{label: epochs-sqrt, gpus_per_node: 1, parallel.tp: 1}}
    - {{label: tp2-zero1-auto, gpus_per_node: 2, parallel.tp: 2, parallel.zero1: true, train.grad_accumulation: 2,
       parallel.activation_checkpointing: auto, parallel.device_memory_gib: {tight_gib!r}}}
    - {{label: tp2-dp2-tokens, gpus_per_node: 4, parallel.tp: 2, data.max_tokens_per_micro_batch: 160,
       data.sampling: sortish}}
    - {{label: steps-linear, gpus_per_node: 2, parallel.tp: 1, train.epochs: 0, train.max_steps: 12,
       lr_scaling.rule: linear, lr_schedule.warmup_steps: 3, lr_schedule.warmup_ratio: 0}}
slurm: {{gpu: none, time_limit: "00:10:00"}}
"""

# runs.csv column -> the run file's root attribute, and how to read both.
PLAN_FIELDS = [("dp", "dp", int), ("micro_batch", "micro_batch", int), ("grad_accumulation", "grad_accumulation", int),
               ("global_batch", "global_batch", int), ("effective_lr", "effective_lr", float),
               ("warmup_steps", "warmup_steps", int), ("total_steps", "max_steps", int),
               ("steps_per_epoch", "steps_per_epoch", int), ("model_name", "model_name", text),
               ("parameter_count", "parameter_count", int), ("checkpoint_every_blocks", "checkpoint_every_blocks", int),
               ("predicted_memory_bytes_per_device", "predicted_memory_bytes_per_device", int),
               ("predicted_flops_per_step", "predicted_flops_per_step", float)]


def scenario_plan_matches_job(job):
    import csv
    job.prep()
    # A device budget that the tp 2 run without checkpointing does not fit: auto must choose some in both programs.
    spec = os.path.join(job.work, "plan-vs-job.yaml")
    with open(spec, "w") as f:
        # The tp 2 run predicts about 8 MiB without checkpointing and 5 MiB with every block checkpointed.
        f.write(PLAN_STUDY.format(dataset=job.dataset, tight_gib=0.0068))
    out = os.path.join(job.work, "rendered")
    results = os.path.join(job.work, "results")
    subprocess.run([os.path.join(job.bin, "t5scale-study"), "render", spec, "--out", out, "--results-dir", results,
                    "--bin", job.bin], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "runs.csv")) as f:
        plans = list(csv.DictReader(f))
    check(len(plans) == 4, f"the study planned {len(plans)} runs, expected 4")
    chosen = set()
    for plan in plans:
        name, world = plan["run"], int(plan["world"])
        log_path = os.path.join(job.work, f"{name}.log")
        with open(log_path, "w") as log:
            code = subprocess.run([job.mpirun, "-np", str(world), os.path.join(job.bin, "t5scale-train"), "--config",
                                   os.path.join(out, f"{name}.yaml")], stdout=log, stderr=subprocess.STDOUT).returncode
        if code != 0:
            with open(log_path) as f:
                fail(f"{name}: exit code {code}; log tail:\n{f.read()[-4000:]}")
        _, attrs = read_steps(os.path.join(results, f"{name}.h5"))
        for column, attribute, read in PLAN_FIELDS:
            check(plan[column] != "", f"{name}: the plan leaves {column} unknown")
            planned, recorded = read(plan[column]), read(attrs[attribute])
            check(planned == recorded, f"{name}: {column} planned {planned!r}, the job recorded {recorded!r}")
        chosen.add(int(plan["checkpoint_every_blocks"]))
        print(f"{name}: {len(PLAN_FIELDS)} fields equal (steps {plan['total_steps']}, memory "
              f"{int(plan['predicted_memory_bytes_per_device']) / 2**20:.1f} MiB, checkpointing every "
              f"{plan['checkpoint_every_blocks']})")
    check(len(chosen) > 1, f"no run chose activation checkpointing ({chosen}): the auto case tests nothing")


def file_digests(folder):
    """{relative path: (size, sha256)} of every file under `folder`: what 'nothing was changed' compares."""
    import hashlib
    digests = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digests[os.path.relpath(path, folder)] = (os.path.getsize(path), hashlib.sha256(f.read()).hexdigest())
    return digests


def run_output(job, ranks, name, *sets, config=None):
    command = job.command(ranks, name, *sets)
    if config is not None:
        command[4:4] = ["--config", config]
    result = subprocess.run(command, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def scenario_trust(job):
    """A run's record can be trusted: damaged checkpoints stop the job instead of a silent restart; one job owns a
    run at a time; a resume that changes the config is refused unless allowed, and then recorded; a study's config
    runs on its planned world only; a folder given as --config is refused; messages carry no internal check text."""
    job.prep()
    short = ["train.max_steps=8", "checkpoint.every_steps=4", "telemetry.flush_every_steps=1"]
    job.run(1, "damaged", *short)
    checkpoints = os.path.join(job.work, "damaged.ckpt")
    steps = sorted(os.listdir(checkpoints))
    check(steps == ["step_00000004", "step_00000008"], f"checkpoints {steps}")
    # Every checkpoint damaged: a shard truncated in one, the manifest's files pointing outside in the other.
    shard = os.path.join(checkpoints, "step_00000008", "rank_tp0_dp0.safetensors")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    import json
    manifest_path = os.path.join(checkpoints, "step_00000004", "manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["files"] = {"../../../../etc/hostname": manifest["files"]["rank_tp0_dp0.safetensors"]}
    json.dump(manifest, open(manifest_path, "w"))
    before = file_digests(job.work)
    code, output = run_output(job, 1, "damaged", "train.max_steps=12", "checkpoint.every_steps=4")
    check(code == 2, f"a run whose checkpoints are all damaged exited {code}:\n{output[-3000:]}")
    for expected in ("found 2 checkpoint(s)", "rank_tp0_dp0.safetensors has", "bytes, the manifest says",
                     "'../../../../etc/hostname', which is not a plain file name", "checkpoint.resume=never"):
        check(expected in output, f"the refusal does not say {expected!r}:\n{output[-3000:]}")
    check("[check '" not in output and "failed at" not in output, f"internal check text shown:\n{output[-3000:]}")
    after = file_digests(job.work)
    # The log, and the exit code of the latest attempt (this refused one's: 2), change by design.
    for name in ("damaged.log", "damaged.exit_code"):
        after.pop(name, None), before.pop(name, None)
    check(after == before, f"files changed by a refused job: {set(after.items()) ^ set(before.items())}")
    # Told to start over: it trains from step 0 and keeps the old run file and checkpoints aside.
    job.run(1, "damaged", "train.max_steps=4", "checkpoint.resume=never")
    kept = sorted(name for name in os.listdir(job.work) if ".previous." in name)
    check(any(n.startswith("damaged.h5.previous.") for n in kept) and
          any(n.startswith("damaged.ckpt.previous.") for n in kept), f"kept aside: {kept}")
    old_run = [n for n in kept if n.startswith("damaged.h5.previous.")][0]
    old_steps, _ = read_steps(os.path.join(job.work, old_run))
    check(len(old_steps["step"]) == 8, f"the earlier run file kept {len(old_steps['step'])} of its 8 steps")
    print(f"trust: all checkpoints damaged -> refused, nothing changed; started over with {kept} kept aside")

    # A checkpoint folder without its manifest is named, not passed over in silence.
    job.run(1, "no_manifest", *short)
    os.remove(os.path.join(job.work, "no_manifest.ckpt", "step_00000008", "manifest.json"))
    log = job.run(1, "no_manifest", *short)
    log_text = open(log).read()
    check("step_00000008 skipped:" in log_text and "has no manifest.json" in log_text and
          "resumed from" in log_text and "step_00000004 at step 4" in log_text,
          "the step folder without a manifest is not reported, or the job did not resume from step 4:\n" +
          log_text[-3000:])

    # One job at a time: a second job with the same run name and folder is refused, naming the first.
    log_path = os.path.join(job.work, "owned.log")
    with open(log_path, "w") as log:
        first = subprocess.Popen(job.command(1, "owned", "train.max_steps=100000"), stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while "step 2/" not in open(log_path).read():
            check(first.poll() is None and time.time() < deadline, "the first job did not start training")
            time.sleep(0.2)
        ckpt_before = file_digests(job.work)
        code, output = run_output(job, 1, "owned", "train.max_steps=4")
        check(code == 2, f"a second job on the same run exited {code}:\n{output[-3000:]}")
        for expected in ("run 'owned' is owned by another job", f"host {socket.gethostname()}", "owned.lock"):
            check(expected in output, f"the refusal does not say {expected!r}:\n{output[-3000:]}")
        check(first.poll() is None, "the first job ended when the second was refused")
        check(os.path.exists(job.run_file("owned")), "the first job's run file is gone")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # mpirun and its rank, as a node failure would
        first.wait()
        subprocess.run(["pkill", "-9", "-f", "run.name=owned"], check=False)
        deadline = time.time() + 30
        while subprocess.run(["pgrep", "-f", "run.name=owned"], capture_output=True).returncode == 0:
            check(time.time() < deadline, "the killed job's processes are still there after 30 s")
            time.sleep(0.1)
    # The first job was killed: its lock names a process that is gone, and the next job takes it over.
    check(os.path.exists(os.path.join(job.work, "owned.lock")), "a killed job's lock was removed")
    log = job.run(1, "owned", "train.max_steps=4", "checkpoint.resume=never")
    check("took over the stale lock" in open(log).read(), "the stale lock was not reported as taken over")
    check(not os.path.exists(os.path.join(job.work, "owned.lock")), "a completed job left its lock behind")
    print("trust: a second job on a running run refused, naming its owner; a dead owner's lock taken over")

    # A run file cut short (a copy interrupted, a full disk): the resume sets it aside and goes on, in seconds,
    # instead of waiting in HDF5's SWMR retries while the other ranks wait in a collective.
    cut_sets = ["train.max_steps=8", "checkpoint.every_steps=4", "checkpoint.at_end=false"]
    job.run(2, "cut", *cut_sets)
    whole = os.path.getsize(job.run_file("cut"))
    os.truncate(job.run_file("cut"), whole // 2)
    started = time.monotonic()
    log = job.run(2, "cut", "train.max_steps=12", *cut_sets[1:], "checkpoint.allow_config_change=true")
    took_s = time.monotonic() - started
    said = open(log).read()
    check(f"truncated: {whole // 2} bytes, but its superblock says the file ends at byte {whole}" in said and
          "cut.h5.unreadable." in said, f"the resume does not set the truncated run file aside:\n{said[-3000:]}")
    check(took_s < 60, f"the resume onto a truncated run file took {took_s:.0f} s")
    steps, attrs = read_steps(job.run_file("cut"))
    check(text(attrs["status"]) == "completed" and list(steps["step"]) == [9, 10, 11, 12],
          f"after the set-aside: status {text(attrs['status'])}, steps {list(steps['step'])}")
    print(f"trust: a run file cut to half is set aside on resume ({took_s:.1f} s) and the run goes on")

    # A resume with a changed config: refused for what changes the data order or the record; allowed on request,
    # and recorded with its step; free keys (evaluation, checkpoints) pass and are recorded too.
    job.run(1, "changed", "train.max_steps=8", "checkpoint.every_steps=4", "checkpoint.at_end=false")
    shutil.copy(os.path.join(job.work, "changed.h5"), os.path.join(job.work, "changed.h5.orig"))
    # The finished run started again unchanged: it says it is complete, and nothing changes.
    files_before = file_digests(job.work)
    code, output = run_output(job, 1, "changed", "train.max_steps=8", "checkpoint.every_steps=4",
                              "checkpoint.at_end=false")
    check(code == 0 and "run changed is complete:" in output and "Nothing was done and nothing was changed" in output
          and "run.name=changed-2" in output, f"an unchanged rerun of a finished run: exit {code}:\n{output[-3000:]}")
    files_after = file_digests(job.work)
    changed_files = sorted(k for k in set(files_before) | set(files_after) if files_before.get(k) != files_after.get(k))
    check(not changed_files, f"an unchanged rerun of a finished run changed {changed_files}")
    code, output = run_output(job, 1, "changed", "train.max_steps=8", "checkpoint.every_steps=4",
                              "train.global_batch=16", "optimizer.lr=0.01")
    check(code == 2, f"a resume with another global batch exited {code}:\n{output[-3000:]}")
    for expected in ("train.global_batch: 8 in the checkpoint, 16 now", "optimizer.lr:",
                     "checkpoint.allow_config_change=true"):
        check(expected in output, f"the refusal does not say {expected!r}:\n{output[-3000:]}")
    # The usual intent, a new run, is offered first: its own name, or this run started over.
    new_run, continue_run = output.find("run.name=changed-2"), output.find("checkpoint.allow_config_change=true")
    check(0 <= new_run < continue_run and "checkpoint.resume=never" in output[:continue_run],
          f"the refusal does not offer a new run before continuing the old one:\n{output[-3000:]}")
    check(open(job.run_file("changed"), "rb").read() == open(job.run_file("changed") + ".orig", "rb").read(),
          "the refused resume changed the run file")
    job.run(1, "changed", "train.max_steps=12", "checkpoint.every_steps=4", "checkpoint.at_end=false",
            "checkpoint.allow_config_change=true", "checkpoint.keep_last=3")
    _, attrs = read_steps(job.run_file("changed"))
    changes = text(attrs["config_changes"]).splitlines()
    check(changes == ["step 8: train.max_steps: 8 -> 12", "step 8: checkpoint.keep_last: 2 -> 3",
                      "step 8: checkpoint.allow_config_change: false -> true"], f"config_changes {changes}")
    # fixed_micro on another grid: no key differs, but the global batch does (4 per replica x 2 replicas).
    micro = ["train.batch_mode=fixed_micro", "train.micro_batch=4", "train.max_steps=8", "checkpoint.every_steps=4",
             "checkpoint.at_end=false"]
    job.run(1, "regrid", *micro)
    code, output = run_output(job, 2, "regrid", *micro)
    check(code == 2 and "the global batch: 4 in the checkpoint (tp 1 x dp 1), 8 on this grid" in output,
          f"a fixed_micro resume on twice the replicas: exit {code}:\n{output[-3000:]}")
    print(f"trust: a changed global batch refused on resume (by key and on another grid); allowed changes "
          f"recorded: {changes}")

    # SIGTERM to mpirun itself: mpirun exits 1 whatever its rank did; the job's own code (75, after the
    # preemption checkpoint) is in <run>.exit_code, which the rendered sbatch scripts read.
    log_path = os.path.join(job.work, "terminated.log")
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(job.command(1, "terminated", "train.max_steps=100000"), stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while "step 2/" not in open(log_path).read():
            check(launcher.poll() is None and time.time() < deadline, "the job did not start training")
            time.sleep(0.1)
        launcher.send_signal(signal.SIGTERM)
        code = launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    recorded = job.exit_code_file("terminated").strip()
    _, attrs = read_steps(job.run_file("terminated"))
    check(recorded == str(REQUEUE_EXIT_CODE) and text(attrs["status"]) == "preempted",
          f"mpirun exited {code}; terminated.exit_code says {recorded!r}, the run file {text(attrs['status'])!r}")
    print(f"trust: SIGTERM to mpirun: mpirun exited {code}, the job's exit code file says {recorded}")

    # A study's config on another world, and a folder as --config.
    code, output = run_output(job, 1, "planned", "train.max_steps=2", "run.planned_world_size=2")
    check(code == 2 and "run.planned_world_size: this config was planned (t5scale-study) for 2 processes and was "
                        "started with 1" in output, f"exit {code}:\n{output[-3000:]}")
    code, output = run_output(job, 1, "folder", "train.max_steps=2", config=job.work)
    check(code == 2 and f"cannot read the run config '{job.work}': it is a folder" in output,
          f"exit {code}:\n{output[-3000:]}")
    check(output.count("MPI_ABORT") == 0, f"one process refused with the launcher's abort banner:\n{output}")
    print("trust: a planned world and a folder as --config refused")


def run_on_small_disk(job, name, ranks, size, sets, fill_after_bytes=None):
    """Runs a job whose run folder is a tmpfs of `size` in a mount namespace of its own; with `fill_after_bytes`, the
    rest of that disk is filled once the run file has grown past it, so the next write of the run file fails. What
    the folder holds at the end is copied out; returns (exit code, output, the copy's folder)."""
    import shlex
    full = os.path.join(job.work, name)
    kept = os.path.join(job.work, name + ".kept")
    os.makedirs(full)
    os.makedirs(kept)
    train = job.command(ranks, name, *sets, f"run.output_dir={full}")
    q = shlex.quote
    script = f"mount -t tmpfs -o size={size} tmpfs {q(full)} || exit 97; "
    if fill_after_bytes is None:
        script += f"{' '.join(q(word) for word in train)}; rc=$?; "
    else:
        run_file = q(os.path.join(full, name + ".h5"))
        script += (f"{' '.join(q(word) for word in train)} & pid=$!; "
                   f"for i in $(seq 1200); do [ $(stat -c %s {run_file} 2>/dev/null || echo 0) -gt {fill_after_bytes} ]"
                   f" && break; sleep 0.05; done; "
                   f"dd if=/dev/zero of={q(os.path.join(full, 'filler'))} bs=4k 2>/dev/null; "
                   f"wait $pid; rc=$?; rm -f {q(os.path.join(full, 'filler'))}; ")
    script += f"cp -a {q(full)}/. {q(kept)}/; exit $rc"
    result = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True)
    output = result.stdout + result.stderr
    check(result.returncode != 97, f"no tmpfs could be mounted for the test:\n{output[-2000:]}")
    return result.returncode, output, kept


def failure_on_record(kept, name, ranks):
    """The failure as the run folder keeps it: (how, text). The run file says failed with the error, or else a
    whole failure note beside it does (an empty or cut note fails here); nothing half-written is left."""
    import json
    names = sorted(os.listdir(kept))
    check(not any(n.endswith(".tmp") or ".reserve." in n for n in names), f"half-written files left: {names}")
    with h5py.File(os.path.join(kept, f"{name}.h5"), "r", swmr=True) as f:
        status, error = text(f.attrs["status"]), text(f.attrs["error"]).rstrip("\x00")
    if status == "failed":
        return "the run file", error
    note_path = os.path.join(kept, f"{name}.failed.json")
    check(os.path.exists(note_path), f"run file status {status!r} and no failure note: the failure is lost ({names})")
    check(os.path.getsize(note_path) > 0, "an empty failure note")
    with open(note_path) as f:
        note = json.load(f)  # whole, or this fails
    check(set(note) >= {"rank", "error", "step", "host", "time_utc"} and 0 <= note["rank"] < ranks,
          f"the note lacks fields: {note}")
    return f"rank {note['rank']}'s note (run file {status!r}, step {note['step']})", note["error"]


def scenario_disk_full(job):
    """A disk that fills up: the job fails (exit 2) and its failure is on record, in the run file or in a whole
    failure note whose space was reserved at the start, never lost with an empty note."""
    job.prep()
    # 1. At the first checkpoint: a 1 MiB disk holds the run file (about 100 kB) and the reserved notes, not the
    # checkpoint (2.4 MB).
    for ranks in (1, 2):
        name = f"ckpt{ranks}"
        code, output, kept = run_on_small_disk(job, name, ranks, "1m", [
            "train.max_steps=8", "checkpoint.every_steps=4", "telemetry.flush_every_steps=1"])
        check(code == 2, f"a job whose disk filled up at its checkpoint exited {code}:\n{output[-3000:]}")
        how, recorded = failure_on_record(kept, name, ranks)
        check("No space left on device" in recorded, f"the record does not say the disk is full: {recorded!r}")
        print(f"disk_full: {ranks} rank(s), the checkpoint fills the disk: in {how}: {recorded[:160]!r}")
    # 2. Under the run file itself: the disk is filled while the job trains, so rank 0 can no longer write the run
    # file; the failure goes into the note written into the space reserved at the start.
    for ranks in (1, 2):
        name = f"runfile{ranks}"
        code, output, kept = run_on_small_disk(job, name, ranks, "4m", [
            "train.max_steps=100000", "checkpoint.every_steps=0", "telemetry.flush_every_steps=1"],
            fill_after_bytes=60000)
        check(code == 2, f"a job whose disk filled up under its run file exited {code}:\n{output[-3000:]}")
        how, recorded = failure_on_record(kept, name, ranks)
        check("No space left on device" in recorded, f"the record does not say the disk is full: {recorded!r}")
        check(" failed at " not in recorded and ".cpp:" not in recorded, f"internal check text in the record: {recorded!r}")
        print(f"disk_full: {ranks} rank(s), the run file's disk fills: in {how}: {recorded[:200]!r}")


def write_hf_folder(folder, **config):
    os.makedirs(folder, exist_ok=True)
    import json
    base = {"model_type": "t5", "vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1,
            "num_heads": 4, "feed_forward_proj": "relu", "tie_word_embeddings": True}
    base.update(config)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(base, f)
    return folder


def scenario_bounds(job):
    """Files from elsewhere stay in their bounds: an absurd config.json is refused naming its key; a model that
    cannot fit is refused before anything is allocated, with the prediction and what would make it fit; an
    allocation that still fails is an error of ours with the tensor's shape, never an abort; a manifest naming a
    file outside its checkpoint is refused before any file is opened."""
    job.prep()
    absurd = write_hf_folder(os.path.join(job.work, "absurd"), vocab_size=10 ** 12)
    code, output = run_output(job, 1, "absurd", "train.max_steps=2", f"model.init_from={absurd}")
    check(code == 2 and "vocab_size: 1000000000000 is beyond any T5" in output and "Exception raised from" not in output,
          f"an absurd config.json: exit {code}:\n{output[-3000:]}")

    # In bounds, but far beyond the host: refused with the prediction, before any allocation.
    huge = write_hf_folder(os.path.join(job.work, "huge"), vocab_size=4 * 1024 * 1024, d_model=32768, d_kv=128,
                           num_heads=256, d_ff=65536)
    code, output = run_output(job, 1, "huge", "train.max_steps=2", f"model.init_from={huge}")
    for expected in ("parallel: predicted memory per rank weights", "does not fit the", "nothing was allocated",
                     "Predicted per rank with each change: parallel.activation_checkpointing=true with "
                     "parallel.checkpoint_every_blocks=1: ", "GiB, does not fit", "None of them fits: more processes"):
        check(expected in output, f"the memory refusal does not say {expected!r} (exit {code}):\n{output[-3000:]}")
    check(code == 2, f"exit {code}")
    # Told that the device is larger than it is: the allocation fails, reported with the tensor and the figures.
    code, output = run_output(job, 1, "huge", "train.max_steps=2", f"model.init_from={huge}",
                              "parallel.device_memory_gib=100000000")
    for expected in ("out of memory building the model and the optimizer", "cannot allocate",
                     "of shape (4194304, 32768) float on cpu", "more than this host's", "predicted per rank:", "cpu holds"):
        check(expected in output, f"the allocation failure does not say {expected!r} (exit {code}):\n{output[-3000:]}")
    check(code == 2 and "Exception raised from" not in output, f"exit {code}:\n{output[-3000:]}")
    print("bounds: absurd config refused; too large refused before allocation; a failed allocation reported")

    # A manifest naming a file outside its step folder: t5scale-ckpt inspect refuses it before opening anything.
    job.run(1, "escape", "train.max_steps=2", "checkpoint.every_steps=2")
    import json
    step = os.path.join(job.work, "escape.ckpt", "step_00000002")
    manifest = json.load(open(os.path.join(step, "manifest.json")))
    outside = os.path.join(job.work, "outside.safetensors")
    shutil.copy(os.path.join(step, "rank_tp0_dp0.safetensors"), outside)
    manifest["files"] = {"../../outside.safetensors": manifest["files"]["rank_tp0_dp0.safetensors"]}
    json.dump(manifest, open(os.path.join(step, "manifest.json"), "w"))
    output = ckpt_tool(job, "inspect", step, expect=2)
    check("'../../outside.safetensors', which is not a plain file name" in output, output)
    print("bounds: a manifest naming ../../outside.safetensors refused by t5scale-ckpt inspect")

    # A recipe and a study spec naming files outside their folders: refused by the programs, naming the key.
    travelled = os.path.join(job.work, "travelled")
    os.makedirs(travelled, exist_ok=True)
    with open(os.path.join(travelled, "recipe.yaml"), "w") as f:
        f.write('source_template: "{x}"\ntarget_template: "{y}"\nsplit_files: {train: ../../../../etc/hostname}\n')
    prep = subprocess.run([os.path.join(job.bin, "t5scale-prep"), "--recipe", os.path.join(travelled, "recipe.yaml"),
                           "--out", os.path.join(travelled, "d.h5"), "--train-tokenizer", "--tokenizer-out",
                           os.path.join(travelled, "t.model")], capture_output=True, text=True)
    check(prep.returncode == 2 and "key 'split_files.train': '../../../../etc/hostname' is not a path inside the "
                                   "recipe's folder" in prep.stderr, f"exit {prep.returncode}: {prep.stderr}")
    check(not os.path.exists(os.path.join(travelled, "d.h5")), "t5scale-prep wrote a dataset")
    with open(os.path.join(travelled, "spec.yaml"), "w") as f:
        f.write(f"study: travelled\nbase_config: {job.work}/../../etc/hostname\n")
    study = subprocess.run([os.path.join(job.bin, "t5scale-study"), "plan", os.path.join(travelled, "spec.yaml")],
                           capture_output=True, text=True)
    check(study.returncode == 2 and "spec.yaml:2: base_config: '" in study.stderr and
          "is not a path inside the spec's folder (it is an absolute path)" in study.stderr,
          f"exit {study.returncode}: {study.stderr}")
    print("bounds: a recipe's split_files and a spec's base_config outside their folders refused")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["resume", "signal", "early_stop", "refuse", "prep_to_train", "eval_only",
                                             "diverge", "vocab_beyond", "failures", "checkpointing_auto",
                                             "resume_replicated", "reshard", "plan_matches_job", "trust",
                                             "bounds", "disk_full", "export_whole", "one_tokenizer"])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    job = Job(args)
    globals()["scenario_" + args.scenario](job)


if __name__ == "__main__":
    main()
