"""The fixtures' files follow the schema the trainer's writer declares (run_file_schema.json): the same columns,
dtypes and units (taken from it), and every root attribute it names."""

import h5py

from runfile_writer import RunWriter, root_attributes
from t5scale_analyze import schema


def test_schema_is_the_readers():
    from t5scale_analyze import runfile
    assert (runfile.FORMAT, runfile.SCHEMA_VERSION) == (schema.FORMAT, schema.SCHEMA_VERSION)


def test_fixture_files_have_every_column_and_attribute_of_the_schema(tmp_path):
    attrs = root_attributes(nodes=2, gpus_per_node=2, tp=2)
    writer = RunWriter(tmp_path / "run.h5", attrs)
    writer.close()
    with h5py.File(tmp_path / "run.h5", "r") as f:
        # error and error_step are the writer's own, set when a run fails.
        missing = set(schema.root_attribute_names()) - set(f.attrs) - {"error", "error_step"}
        extra = set(f.attrs) - set(schema.root_attribute_names())
        assert not missing and not extra, f"missing {sorted(missing)}, not in the schema {sorted(extra)}"
        for group in ("steps", "eval"):
            want = {c["name"]: c for c in schema.columns(group)}
            assert set(f[group]) == set(want), group
            for name, column in want.items():
                ds = f[group][name]
                assert ds.dtype == schema.numpy_dtype(column), f"{group}/{name}: {ds.dtype}"
                assert ds.attrs["unit"].decode() == column["unit"], f"{group}/{name}: unit {ds.attrs['unit']!r}"
                assert ds.ndim == (2 if column["per_rank"] else 1), f"{group}/{name}: {ds.ndim} dimensions"
