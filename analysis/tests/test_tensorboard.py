"""`t5scale-analyze tensorboard`: the event files it writes, read back with TensorBoard's own reader
(EventAccumulator) and compared with the run files read directly with h5py."""

import json

import h5py
import numpy as np
import pytest

import runfile_writer as w
from tensorboard.backend.event_processing import event_accumulator  # scripts/requirements-venv.txt

from t5scale_analyze.cli import main

GIB = 1024 ** 3


def read_events(folder):
    accumulator = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def scalars(accumulator, tag):
    events = accumulator.Scalars(tag)
    return np.array([e.step for e in events]), np.array([e.value for e in events]), np.array([e.wall_time for e in events])


@pytest.fixture()
def results(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    # a 2-GPU run with power and two evaluations, and a CPU-like run measuring no power
    w.synthetic_run(folder / "gpu.h5", n_steps=30, step_time_s=0.5, evals=[(15, 0.25, 2.5), (30, 0.35, 2.1)],
                    gpu_power_w=250.0, run_id="gpu", study="tb", nodes=1, gpus_per_node=2, global_batch=16)
    w.synthetic_run(folder / "cpu.h5", n_steps=12, step_time_s=1.5, evals=[(12, 0.2, 3.0)], gpu_power_w=float("nan"),
                    run_id="cpu", study="tb", nodes=1, gpus_per_node=1, global_batch=8)
    with open(folder / "gpu.eval.jsonl", "w") as f:
        for step in (15, 30):
            for index in range(7):
                f.write(json.dumps({"step": step, "index": index, "source": f"doc {index}",
                                    "prediction": f"pred {step}/{index}", "reference": f"ref | {index}"}) + "\n")
        f.write('{"step": 30, "index": 8, "source": "cut')  # a line a killed job left half written
    return folder


def test_the_export_reads_back_with_tensorboard_equal_to_the_run_files(results, tmp_path, capsys):
    out = tmp_path / "tb"
    assert main(["tensorboard", str(results), "--out", str(out)]) == 0
    assert "2 run(s) exported" in capsys.readouterr().out
    for run_id in ("gpu", "cpu"):
        events = read_events(out / "tb" / run_id)
        with h5py.File(results / f"{run_id}.h5", "r") as f:
            steps = f["steps/step"][:]
            step, loss, wall = scalars(events, "train/loss")
            assert list(step) == list(steps)
            np.testing.assert_allclose(loss, f["steps/loss"][:], rtol=1e-6)  # float32 in the event file
            assert np.all(np.diff(wall) > 0)
            _, lr, _ = scalars(events, "train/lr")
            np.testing.assert_allclose(lr, f["steps/lr"][:], rtol=1e-6)
            _, step_time, _ = scalars(events, "time/step_time_s")
            np.testing.assert_allclose(step_time, f["steps/step_time_s"][:], rtol=1e-6)
            _, peak, _ = scalars(events, "memory/device_peak_gib")
            np.testing.assert_allclose(peak, f["steps/memory_peak_bytes"][:].max(axis=1) / GIB, rtol=1e-6)
            eval_step, rouge, _ = scalars(events, "eval/rougeL")
            assert list(eval_step) == list(f["eval/step"][:])
            np.testing.assert_allclose(rouge, f["eval/rougeL"][:], rtol=1e-6)
            tags = events.Tags()["scalars"]
            if run_id == "gpu":
                _, power, _ = scalars(events, "power/gpu_w")
                np.testing.assert_allclose(power, f["steps/gpu_power_w"][:].sum(axis=1), rtol=1e-6)
                assert np.allclose(power, 500.0)
            else:
                assert "power/gpu_w" not in tags  # never measured: no series of NaN
            assert "time/comm_exposed_time_s" not in tags and "eval/accuracy" not in tags
        assert "config/yaml" in events.Tags()["tensors"]


def test_generations_are_text_at_their_evaluation_steps(results, tmp_path):
    out = tmp_path / "tb"
    assert main(["tensorboard", str(results), "--out", str(out)]) == 0
    events = read_events(out / "tb" / "gpu")
    generations = events.Tensors("eval/generations")
    assert [e.step for e in generations] == [15, 30]
    text = generations[1].tensor_proto.string_val[0].decode()
    assert "pred 30/0" in text and "pred 30/4" in text and "pred 30/5" not in text  # the first five
    assert "ref \\| 0" in text  # a | inside a cell is escaped
    assert "eval/generations" not in read_events(out / "tb" / "cpu").Tags()["tensors"]


def test_exporting_again_replaces_the_runs_event_files(results, tmp_path):
    out = tmp_path / "tb"
    keep = out / "tb" / "gpu" / "notes.txt"
    keep.parent.mkdir(parents=True)
    keep.write_text("mine")
    assert main(["tensorboard", str(results), "--out", str(out)]) == 0
    assert main(["tensorboard", str(results), "--out", str(out)]) == 0
    assert len(list((out / "tb" / "gpu").glob("events.out.tfevents.*"))) == 1
    assert len(scalars(read_events(out / "tb" / "gpu"), "train/loss")[0]) == 30
    assert keep.read_text() == "mine"


def test_bad_input_is_named(tmp_path, capsys):
    assert main(["tensorboard", str(tmp_path / "missing"), "--out", str(tmp_path / "tb")]) == 2
    assert "missing" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["tensorboard", str(tmp_path / "empty"), "--out", str(tmp_path / "tb")]) == 2
    assert "no t5scale run files" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tensorboard", str(tmp_path / "empty")])  # --out is required
