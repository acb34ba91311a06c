"""The numbers of the analysis on the "scale" study of conftest.STUDY, against values worked out by hand.

Per run: world = nodes x GPUs per node, global batch 8 x world, 640 / global steps, two evaluations of 2 s.
  run      world nodes steps step  train  wall   samples/s  GPU energy          cost (12 USD/node-hour)
  none-w1  1     1     80    1.0   80 s   84 s   8          300 W x 1 x 80 s    12 x 1 x 84 / 3600 = 0.28
  none-w2  2     1     40    1.0   40     44     16         300 x 2 x 40        12 x 44 / 3600     = 0.146667
  none-w4  4     1     20    1.25  25     29     25.6       300 x 4 x 25        12 x 29 / 3600     = 0.096667
  none-w8  8     2     10    1.6   16     20     40         300 x 8 x 16        12 x 2 x 20 / 3600 = 0.133333
  sqrt-wN as none-wN.
GPU energy 24, 24, 30, 38.4 kJ; none-w1 also has 50 W of CPU over 80 s = 4 kJ. energy_kwh = J / 3.6e6 x 1.2,
co2_kg = energy_kwh x 475 / 1000.
"""

import math

import h5py
import numpy as np
import pandas as pd
import pytest
import runfile_writer as w

from t5scale_analyze import analyze
from t5scale_analyze.cards import card_markdown, format_duration
from t5scale_analyze.pareto import non_dominated

HAND = {  # run_id: (cost_usd, energy_kwh, samples_per_s)
    "none-w1": (0.28, 28000 / 3.6e6 * 1.2, 8.0),
    "none-w2": (12 * 44 / 3600, 24000 / 3.6e6 * 1.2, 16.0),
    "none-w4": (12 * 29 / 3600, 30000 / 3.6e6 * 1.2, 25.6),
    "none-w8": (12 * 2 * 20 / 3600, 38400 / 3.6e6 * 1.2, 40.0),
    "sqrt-w1": (0.28, 24000 / 3.6e6 * 1.2, 8.0),
    "sqrt-w4": (12 * 29 / 3600, 30000 / 3.6e6 * 1.2, 25.6),
    "sqrt-w8": (12 * 2 * 20 / 3600, 38400 / 3.6e6 * 1.2, 40.0),
}


@pytest.fixture(scope="module")
def analysis(study_dir):
    return analyze(study_dir)


def by_run(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_index("run_id")


def test_runs_table_cost_energy_and_co2(analysis):
    runs = by_run(analysis.table)
    assert sorted(runs.index) == sorted(HAND)
    for run_id, (cost, energy, samples_per_s) in HAND.items():
        row = runs.loc[run_id]
        assert row["cost_usd"] == pytest.approx(cost, rel=1e-12)
        assert row["energy_kwh"] == pytest.approx(energy, rel=1e-12)
        assert row["co2_kg"] == pytest.approx(energy * 475 / 1000, rel=1e-12)
        assert row["samples_per_s"] == pytest.approx(samples_per_s, rel=1e-12)
        # low priority: 3 USD per node-hour
        assert row["cost_low_priority_usd"] == pytest.approx(cost / 4, rel=1e-12)
    assert runs.loc["none-w8", "gpu_energy_kj"] == pytest.approx(38.4)
    assert runs.loc["none-w1", "cpu_energy_kwh"] == pytest.approx(4000 / 3.6e6)
    assert math.isnan(runs.loc["sqrt-w1", "cpu_energy_kwh"])


def test_runs_table_has_every_attribute_config_key_and_summary_figure(analysis):
    table = analysis.table
    for column in ("run_id", "hosts", "device_names", "energy_source_gpu", "predicted_flops_per_step",
                   "cfg.train.global_batch", "cfg.cost.low_priority_price_per_node_hour_usd", "cfg.precision",
                   "cfg.lr_scaling.rule", "wall_time_s", "tokens_total", "mean_memory_allocated_bytes",
                   "final_rougeL", "best_rougeL_step", "final_loss"):
        assert column in table, column
    assert "config_yaml" not in table
    assert list(by_run(table).loc[["none-w1", "none-w8"], "cfg.train.global_batch"]) == [8, 64]


def test_a_global_batch_that_grows_with_the_ranks_has_no_speedup(analysis):
    # The "scale" study keeps 8 samples per GPU: each world size trains another global batch (8 x world), another
    # problem, so no run is another's on fewer GPUs. Its throughput is there; speedup and efficiency are unknown.
    scaling = by_run(analysis.scaling)
    for run_id, (_, _, samples_per_s) in HAND.items():
        assert scaling.loc[run_id, "samples_per_s"] == pytest.approx(samples_per_s, rel=1e-12), run_id
        for column in ("speedup", "parallel_efficiency", "base_world_size"):
            assert math.isnan(scaling.loc[run_id, column]), (run_id, column)
    assert "global_batch=32" in scaling.loc["none-w4", "series"]
    assert scaling.loc["none-w4", "series"] != scaling.loc["none-w8", "series"]
    assert scaling.loc["none-w8", "mean_step_time_s"] == pytest.approx(1.6)


def test_speedup_is_against_the_same_problem_on_the_fewest_devices(tmp_path):
    """The same global batch (32) and step count on 1 and 2 GPUs, split by DP or by TP: one series, against the one
    GPU. A run of 30 steps is another setting and another problem, never averaged into the 400-step one; a global
    batch of 64 is compared with nothing."""
    folder = tmp_path / "strong"
    folder.mkdir()
    # (run_id, gpus, tp, steps, step time s, global batch): samples/s = global batch / step time
    runs = [("one", 1, 1, 400, 1.0, 32), ("one-s1", 1, 1, 400, 1.0 / 1.1, 32),  # two seeds: 32 and 35.2 samples/s
            ("dp2", 2, 1, 400, 0.5, 32), ("tp2", 2, 2, 400, 0.625, 32),
            ("short", 1, 1, 30, 2.0, 32), ("gb64", 4, 1, 400, 0.5, 64)]
    for run_id, gpus, tp, steps, step_time_s, batch in runs:
        w.synthetic_run(folder / f"{run_id}.h5", n_steps=steps, step_time_s=step_time_s, run_id=run_id, study="strong",
                        gpus_per_node=gpus, tp=tp, global_batch=batch, micro_batch=batch // (gpus // tp),
                        batch_mode="fixed_global", flush_every=400)
    table = analyze(folder).scaling
    table = by_run(table)
    base = (32.0 + 35.2) / 2  # the 400-step setting on one GPU: its two seeds' mean, not the 30-step run's
    assert table.loc["one", "setting"] == table.loc["one-s1", "setting"] == "one"
    assert table.loc["dp2", "speedup"] == pytest.approx(64.0 / base, rel=1e-12)
    assert table.loc["dp2", "parallel_efficiency"] == pytest.approx(64.0 / base / 2, rel=1e-12)
    assert table.loc["tp2", "speedup"] == pytest.approx(51.2 / base, rel=1e-12)  # TP 2 is no series of its own
    assert table.loc["tp2", "series"] == table.loc["dp2", "series"] == table.loc["one", "series"]
    assert table.loc["one", "speedup"] == pytest.approx(32.0 / base, rel=1e-12)
    assert set(table.loc[["one", "dp2", "tp2"], "base_world_size"]) == {1}
    assert set(table.loc[["one", "dp2", "tp2"], "reference_setting"]) == {"one"}
    for run_id in ("short", "gb64"):
        assert table.loc[run_id, "series"] != table.loc["one", "series"], run_id
        assert math.isnan(table.loc[run_id, "speedup"]) and math.isnan(table.loc[run_id, "parallel_efficiency"])


def test_speedup_reference_is_the_mean_of_the_repeats_at_the_smallest_world():
    from t5scale_analyze.scaling import scaling_table
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "study": ["s"] * 3, "status": ["completed"] * 3,
                         "world_size": [2, 2, 8], "nodes": [1, 1, 1], "samples_per_s": [9.0, 11.0, 30.0]})
    table = by_run(scaling_table(runs))
    assert table.loc["c", "speedup"] == pytest.approx(3.0)  # 30 / mean(9, 11)
    assert table.loc["c", "parallel_efficiency"] == pytest.approx(0.75)  # 3 / (8 / 2)
    assert table.loc["a", "speedup"] == pytest.approx(0.9)


def by_setting(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_index("setting")


def wilson(q, n):
    """Wilson's score interval at z = 1, written out: (q + 1/2n -+ sqrt(q (1 - q) / n + 1/4n^2)) / (1 + 1/n)."""
    half = math.sqrt(q * (1 - q) / n + 1 / (4 * n * n))
    return (q + 1 / (2 * n) - half) / (1 + 1 / n), (q + 1 / (2 * n) + half) / (1 + 1 / n)


def test_an_accuracy_of_1_on_56_examples_has_an_interval_not_a_point():
    # q +- sqrt(q (1 - q) / n) is the single point 1 at q = 1; Wilson's interval at one standard error is
    # n/(n + 1) ... 1 there (and 0 ... 1/(n + 1) at q = 0)
    from t5scale_analyze.pareto import pareto_table, sampling_interval, wilson_interval
    assert sampling_interval("accuracy", 1.0, 56) == pytest.approx((56 / 57, 1.0))
    assert sampling_interval("exact_match", 0.0, 56) == pytest.approx((0.0, 1 / 57))
    assert wilson_interval(0.5, 100) == pytest.approx(wilson(0.5, 100))
    assert sampling_interval("loss", 0.3, 56) == (0.3, 0.3)  # not a score in [0, 1]: no sampling interval
    # two settings, both at accuracy 1.0 on 56 examples, one cheaper: the dearer one is not better beyond the noise
    runs = pd.DataFrame({"run_id": ["a", "b"], "study": ["s"] * 2, "status": ["completed"] * 2,
                         "price_per_node_hour_usd": [1.0] * 2, "cost_usd": [1.0, 2.0], "node_hours": [1.0, 2.0],
                         "best_accuracy": [1.0, 1.0], "eval_examples": [56.0, 56.0], "cfg.run.name": ["a", "b"],
                         "cfg.run.seed": [1, 1], "cfg.train.global_batch": [8, 16]})
    table = by_setting(pareto_table(runs, "accuracy"))
    assert table.loc["a", "quality_low"] == pytest.approx(56 / 57) and table.loc["a", "quality_high"] == 1.0
    assert list(table["on_front"]) == [True, False] and table.loc["b", "dominated_by"] == "a"


def test_pareto_front_of_cost_against_best_rougeL_does_not_rank_within_the_noise(analysis):
    # cost, best rougeL: none-w4 0.0967 0.35, sqrt-w4 0.0967 0.39, none-w8 0.1333 0.31, sqrt-w8 0.1333 0.37,
    # none-w2 0.1467 0.395, none-w1 0.28 0.40, sqrt-w1 0.28 0.41, each run once, each evaluated on 64 examples:
    # Wilson's interval at one standard error is about +-0.059 at 0.35 ... +-0.061 at 0.41, so every two runs are
    # within the noise of each other, and the two cheapest (w4) are as good as any: they alone are on the front.
    pareto = by_setting(analysis.pareto)
    assert set(pareto.index[pareto["on_front"]]) == {"none-w4", "sqrt-w4"}
    low, high = wilson(0.35, 64)
    assert low == pytest.approx(0.2931, abs=1e-4) and high == pytest.approx(0.4115, abs=1e-4)
    assert pareto.loc["none-w4", ["sampling_low", "sampling_high"]].tolist() == pytest.approx([low, high])
    assert pareto.loc["none-w4", "quality_low"] == pytest.approx(low)
    assert set(pareto.loc["sqrt-w1", "dominated_by"].split(",")) == {"none-w4", "sqrt-w4", "none-w8", "sqrt-w8", "none-w2"}
    assert set(pareto["cost_axis"]) == {"cost_usd"} and set(pareto["runs"]) == {1}
    assert pareto.loc["none-w8", "best_metric"] == pytest.approx(0.31)  # best (after step 5), not final (0.30)


def test_pareto_front_with_eval_loss_lower_is_better(study_dir):
    # eval loss = 2 - rougeL at every evaluation, which has no sampling error of a score in [0, 1]: the runs are
    # exact points, and the plain front: sqrt-w4 dominates none-w4 (same cost, lower loss) and both w8 runs
    # (cheaper, lower loss); none-w2 beats every cheaper run; sqrt-w1 dominates none-w1.
    pareto = by_setting(analyze(study_dir, "eval_loss").pareto)
    assert set(pareto.index[pareto["on_front"]]) == {"sqrt-w4", "none-w2", "sqrt-w1"}
    assert pareto.loc["none-w8", "best_metric"] == pytest.approx(1.69)
    assert (pareto["sampling_low"] == pareto["best_metric"]).all()
    assert (pareto["sampling_high"] == pareto["best_metric"]).all()


def test_non_dominated_with_ties_and_missing_values():
    cost = [1.0, 1.0, 2.0, 3.0, np.nan, 0.5]
    quality = [0.5, 0.5, 0.7, 0.6, 0.9, np.nan]
    # the two identical points dominate neither each other; (3, 0.6) is dominated by (2, 0.7); NaNs are out
    assert list(non_dominated(cost, quality)) == [True, True, True, False, False, False]
    # as good and cheaper dominates; as cheap and better dominates
    assert list(non_dominated([1.0, 2.0, 1.0], [0.5, 0.5, 0.4])) == [True, False, False]
    # lower is better: (2, 0.3) costs more and is worse than (1, 0.2); (3, 0.1) is better for its cost
    assert list(non_dominated([1.0, 2.0, 3.0], [0.2, 0.3, 0.1], higher_is_better=False)) == [True, False, True]


def strategies_runs(rows):
    """A runs table of strategies: (run_id, strategy config, seed, cost_usd, best_f1), 1000 eval examples."""
    return pd.DataFrame({"run_id": [r[0] for r in rows], "study": ["s"] * len(rows), "status": ["completed"] * len(rows),
                         "price_per_node_hour_usd": [1.0] * len(rows), "cost_usd": [r[3] for r in rows],
                         "node_hours": [r[3] for r in rows], "best_f1": [r[4] for r in rows],
                         "eval_examples": [1000.0] * len(rows), "cfg.run.name": [r[0] for r in rows],
                         "cfg.run.seed": [r[2] for r in rows], "cfg.data.sampling": [r[1] for r in rows]})


def test_pareto_groups_the_repeats_of_a_setting_and_ranks_only_beyond_the_noise():
    from t5scale_analyze.pareto import pareto_table
    runs = strategies_runs([
        ("baseline-s0", "random", 1, 10.0, 0.800), ("baseline-s1", "random", 2, 11.0, 0.820),
        ("sortish-s0", "sortish", 1, 7.0, 0.790), ("sortish-s1", "sortish", 2, 8.0, 0.812),
        ("sequential-s0", "sequential", 1, 12.0, 0.940), ("sequential-s1", "sequential", 2, 12.5, 0.965),
    ])
    table = by_setting(pareto_table(runs, "f1"))
    assert list(table.index) == ["sortish", "baseline", "sequential"]  # by mean cost
    assert table.loc["baseline", "runs"] == 2 and table.loc["baseline", "run_ids"] == "baseline-s0,baseline-s1"
    assert table.loc["baseline", "cost"] == pytest.approx(10.5)
    assert table.loc["baseline", "best_metric"] == pytest.approx(0.81)
    # the sampling interval, about 0.81 +- 0.0124 (one standard error), reaches beyond the seeds' range (0.80 ... 0.82)
    low, high = wilson(0.81, 1000)
    assert low == pytest.approx(0.7973, abs=1e-4) and high == pytest.approx(0.8221, abs=1e-4)
    assert table.loc["baseline", "quality_low"] == pytest.approx(low)
    assert table.loc["baseline", "quality_high"] == pytest.approx(high)
    assert table.loc["sequential", "quality_low"] == pytest.approx(0.94)  # there the seeds' range is wider
    # sortish: cheaper beyond the noise (7 ... 8 against 10 ... 11), its F1 within it: it dominates the baseline
    # although its mean F1 is lower; sequential is better beyond the noise, and stays on the front
    assert list(table["on_front"]) == [True, False, True]
    assert table.loc["baseline", "dominated_by"] == "sortish"
    # costs that overlap and F1 within the noise: neither dominates
    runs = strategies_runs([("a-s0", "random", 1, 10.0, 0.80), ("a-s1", "random", 2, 11.0, 0.82),
                            ("b-s0", "sortish", 1, 10.5, 0.79), ("b-s1", "sortish", 2, 12.0, 0.81)])
    assert list(pareto_table(runs, "f1")["on_front"]) == [True, True]


def test_pareto_uses_node_hours_when_no_price_is_set_and_only_completed_runs():
    from t5scale_analyze.pareto import pareto_table
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "study": ["s"] * 3,
                         "status": ["completed", "completed", "incomplete"], "price_per_node_hour_usd": [0.0] * 3,
                         "cost_usd": [math.nan] * 3, "node_hours": [2.0, 1.0, 0.1], "best_f1": [0.9, 0.8, 0.95],
                         "world_size": [1, 1, 1], "global_batch": [8] * 3, "lr_scaling_rule": ["none"] * 3,
                         "cfg.train.global_batch": [8, 16, 32]})
    table = by_setting(pareto_table(runs, "f1"))  # no eval example count: exact points
    assert list(table.index) == ["b", "a"] and list(table["on_front"]) == [True, True]
    assert set(table["cost_axis"]) == {"node_hours"}


def test_lr_scaling_table(analysis):
    lr = analysis.lr_scaling
    assert analysis.metric == "rougeL"
    sqrt = lr[lr["lr_scaling_rule"] == "sqrt"]
    assert list(sqrt["global_batch"]) == [8, 32, 64]
    assert list(sqrt["effective_lr"]) == pytest.approx([1e-3, 2e-3, 1e-3 * math.sqrt(8)])
    assert list(sqrt["final_rougeL"]) == pytest.approx([0.41, 0.39, 0.37])
    none = lr[lr["lr_scaling_rule"] == "none"]
    assert list(none["best_rougeL"]) == pytest.approx([0.40, 0.395, 0.35, 0.31])
    assert list(none["best_rougeL_step"]) == [80, 40, 20, 5]


def test_resource_card_as_in_the_seed(analysis):
    row = by_run(analysis.table).loc["none-w1"].copy()
    row["run_id"] = "none-w1"
    card = card_markdown(row, "rougeL")
    assert "| Run Duration | 1m 24.00s (training 1m 20.00s, evaluation 4.00s) |" in card
    assert "| Compute Cost (LowPriority/Dedicated) | $0.07/$0.28 (USD) at 3/12 USD per node-hour" in card
    assert "| GPU Memory Usage (Avg/Peak) | 2.00/3.00 (GiB;" in card
    assert "| Total GPU Energy Usage | 24.00 (kJ) from nvml_energy_counter |" in card
    assert "| Emissions | 0.004433 (kg CO2eq at 475 g/kWh) |" in card
    assert "| Throughput | 8.00 samples/s, 320 tokens/s |" in card
    assert "| Total FLOPs | 6.4e+14 |" in card  # 80 steps x 8e12
    assert "| rougeL (final/best) | 0.4 / 0.4 (best at step 80) |" in card


def test_a_run_on_part_of_a_node_is_charged_its_share(tmp_path):
    """1 of a node's 4 GPUs for 10 steps of 1 s (wall 10 s) at 36 USD per node-hour: a quarter of the node, 0.025 USD
    (the whole node would be 0.1); at 8 USD low priority, 0.025 x 8 / 36. At 3 USD per GPU-hour: 1 GPU, 0.0083."""
    w.synthetic_run(tmp_path / "quarter.h5", n_steps=10, step_time_s=1.0, run_id="quarter", study="share",
                    gpus_per_node=1, node_share=0.25, price=36.0, low_priority_price=8.0)
    w.synthetic_run(tmp_path / "per-gpu.h5", n_steps=10, step_time_s=1.0, run_id="per-gpu", study="share",
                    gpus_per_node=1, node_share=0.25, price=0.0, gpu_price=3.0)
    runs = by_run(analyze(tmp_path).table)
    quarter = runs.loc["quarter"]
    assert quarter["node_share_fraction"] == 0.25
    assert quarter["cost_usd"] == pytest.approx(36.0 * 0.25 * 10 / 3600, rel=1e-12)
    assert quarter["charged_node_hours"] == pytest.approx(0.25 * 10 / 3600, rel=1e-12)
    assert quarter["cost_low_priority_usd"] == pytest.approx(8.0 * 0.25 * 10 / 3600, rel=1e-12)
    assert runs.loc["per-gpu", "cost_usd"] == pytest.approx(3.0 * 1 * 10 / 3600, rel=1e-12)
    row = quarter.copy()
    row["run_id"] = "quarter"
    card = card_markdown(row, None)
    assert ("| Compute Cost (LowPriority/Dedicated) | $0.01/$0.03 (USD) at 8/36 USD per node-hour x 1 node(s) x 0.25 "
            "of each (1 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML)) = 0.0006944 node-hours |") in card


def test_an_unpriced_run_costs_unknown_never_zero(tmp_path):
    """No price: /summary's cost is NaN, and so is every cost the analysis shows. A file from before that rule
    (its /summary says 0, it has no price per GPU-hour) reads the same."""
    w.synthetic_run(tmp_path / "new.h5", n_steps=4, step_time_s=1.0, run_id="new", study="free", price=0.0)
    w.synthetic_run(tmp_path / "old.h5", n_steps=4, step_time_s=1.0, run_id="old", study="free", price=0.0)
    with h5py.File(tmp_path / "old.h5", "r+") as f:
        f["summary"].attrs["cost_usd"] = 0.0
        for name in ("price_per_gpu_hour_usd", "node_share_fraction", "node_share_basis", "allocated_gpus_per_node"):
            del f.attrs[name]
    analysis = analyze(tmp_path)
    runs = by_run(analysis.table)
    assert math.isnan(runs.loc["new", "cost_usd"]) and math.isnan(runs.loc["old", "cost_usd"])
    assert runs["cost_low_priority_usd"].isna().all()
    assert by_run(analysis.scaling)["cost_usd"].isna().all()
    row = runs.loc["old"].copy()
    row["run_id"] = "old"
    assert "| Compute Cost (LowPriority/Dedicated) | not priced/not priced (USD)" in card_markdown(row, None)


def test_resource_card_of_a_cpu_run_counts_ranks_and_host_memory():
    row = pd.Series({"run_id": "cpu", "status": "completed", "nodes": 1, "gpus_per_node": 4, "world_size": 4,
                     "tp": 2, "dp": 2, "device_names": "cpu,cpu,cpu,cpu", "peak_host_memory_bytes": 0.75 * 2**30,
                     "mean_memory_allocated_bytes": math.nan, "peak_memory_bytes": math.nan})
    card = card_markdown(row, None)
    assert "| Hardware | 1 node(s) x 4 CPU rank(s) = 4 ranks (tp 2 x dp 2); cpu |" in card
    assert "| Device Memory | none (CPU ranks) |" in card
    assert "| Host Memory (Peak) | 0.75 (GiB; peak resident set, max over ranks) |" in card
    assert "GPU Memory" not in card and "GPU(s)" not in card


def test_format_duration():
    assert format_duration(2631.05) == "43m 51.05s"
    assert format_duration(3723.0) == "1h 02m 03.00s"
    assert format_duration(7.25) == "7.25s"
    assert format_duration(59.999) == "1m 00.00s"
    assert format_duration(float("nan")) == "unknown"


def test_rule_points_and_recovery_over_seeds():
    from t5scale_analyze.lr_scaling import rule_points, rule_recovery
    rows = [  # (rule, global batch, batch mode, final macro_f1) x seeds; reference batch 8
        ("none", 8, "fixed_micro", 0.80), ("none", 8, "fixed_micro", 0.84),
        ("none", 32, "fixed_micro", 0.70), ("none", 32, "fixed_micro", 0.74),
        ("sqrt", 32, "fixed_micro", 0.78), ("sqrt", 32, "fixed_micro", 0.82),
        ("linear", 32, "fixed_micro", 0.60), ("linear", 32, "fixed_micro", 0.62),
        ("none", 32, "fixed_global", 0.75),
    ]
    runs = pd.DataFrame({"study": ["s"] * len(rows), "run_id": [f"r{i}" for i in range(len(rows))],
                         "lr_scaling_rule": [r[0] for r in rows], "global_batch": [r[1] for r in rows],
                         "cfg.train.batch_mode": [r[2] for r in rows], "final_macro_f1": [r[3] for r in rows],
                         "reference_global_batch": [8] * len(rows), "effective_lr": [1e-3] * len(rows)})
    points = rule_points(runs, "macro_f1").set_index(["batch_mode", "lr_scaling_rule", "global_batch"])
    # the k = 1 runs are a point of every rule's curve
    for rule in ("none", "sqrt", "linear"):
        assert points.loc[("fixed_micro", rule, 8), "runs"] == 2
        assert points.loc[("fixed_micro", rule, 8), "mean"] == pytest.approx(0.82)
    none32, sqrt32 = points.loc[("fixed_micro", "none", 32)], points.loc[("fixed_micro", "sqrt", 32)]
    assert none32["k"] == 4.0 and none32["delta_vs_k1"] == pytest.approx(-0.10)
    assert none32["within_noise"] is False or none32["within_noise"] == False  # noqa: E712 (numpy bool)
    assert sqrt32["delta_vs_k1"] == pytest.approx(-0.02) and sqrt32["within_noise"] == True  # noqa: E712
    # a fixed global batch is its own series, with no k = 1 run of its own
    assert points.loc[("fixed_global", "none", 32), "within_noise"] is None
    recovery = rule_recovery(rule_points(runs, "macro_f1"))
    assert len(recovery) == 1
    row = recovery.iloc[0]
    assert row["global_batch"] == 32 and row["gap_none_vs_k1"] == pytest.approx(-0.10)
    assert row["sqrt_recovered_pct"] == pytest.approx(80.0)
    assert row["linear_recovered_pct"] == pytest.approx(-110.0)
    assert row["none_worse_beyond_noise"]
    # no gap to close where rule none is as good as k = 1, or better: no share is given
    better = runs.copy()
    none32 = ((better["lr_scaling_rule"] == "none") & (better["global_batch"] == 32)
              & (better["cfg.train.batch_mode"] == "fixed_micro"))
    better.loc[none32, "final_macro_f1"] = [0.90, 0.92]
    row = rule_recovery(rule_points(better, "macro_f1")).iloc[0]
    assert not row["none_worse_beyond_noise"] and math.isnan(row["sqrt_recovered_pct"])
    # for a loss, higher is worse
    loss = rule_recovery(rule_points(better.rename(columns={"final_macro_f1": "final_loss"}), "loss"),
                         lower_is_better=True).iloc[0]
    assert loss["none_worse_beyond_noise"] and loss["sqrt_recovered_pct"] == pytest.approx((0.80 - 0.91) / (0.82 - 0.91) * 100)


def test_rule_points_do_not_average_runs_of_other_step_counts():
    """Two seeds of 400 steps and one of 30 steps at the same rule and global batch: two variants, each its own
    point against its own k = 1 runs, never one mean."""
    from t5scale_analyze.lr_scaling import rule_points
    rows = [(8, 400, 0.80), (8, 400, 0.84), (32, 400, 0.70), (32, 400, 0.74), (8, 30, 0.40), (32, 30, 0.20)]
    runs = pd.DataFrame({"study": ["s"] * len(rows), "run_id": [f"r{i}" for i in range(len(rows))],
                         "lr_scaling_rule": ["none"] * len(rows), "global_batch": [r[0] for r in rows],
                         "cfg.train.max_steps": [r[1] for r in rows], "cfg.train.batch_mode": ["fixed_micro"] * 6,
                         "final_accuracy": [r[2] for r in rows], "reference_global_batch": [8] * len(rows),
                         "effective_lr": [1e-3] * len(rows)})
    points = rule_points(runs, "accuracy").set_index(["variant", "global_batch"])
    long, short = "train.max_steps=400", "train.max_steps=30"
    assert points.loc[(long, 32), "runs"] == 2 and points.loc[(long, 32), "mean"] == pytest.approx(0.72)
    assert points.loc[(long, 32), "k1_mean"] == pytest.approx(0.82)
    assert points.loc[(short, 32), "runs"] == 1 and points.loc[(short, 32), "k1_mean"] == pytest.approx(0.40)
