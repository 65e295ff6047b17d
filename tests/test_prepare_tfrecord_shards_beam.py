"""prepare_tfrecord_shards.py --runner: the shards written by an Apache Beam pipeline, on this machine.

The pipeline runs on FnApiRunner, Beam's runner in Python: DirectRunner first tries Prism, a Go program that it
downloads from GitHub, and the tests run offline (it would fall back to FnApiRunner after the failed download).
"""

import importlib.util
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from helpers import (MAX_LENGTH, WIKITEXT, assert_entry_point_error, check_held_out_splits, cut_parts, part_stream,
                     read_split, run_main, run_script, tiny_mlm_args, write_compressed)

# Looked up, not imported: importing Beam takes seconds, paid only where a test needs it.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("apache_beam") is None,
                                reason="Apache Beam is not installed: pip install -r requirements-beam.txt")

RUNNER = ["--runner", "FnApiRunner"]
# Both files of the slice, through a glob, each cut into parts of at most 100 KiB.
GLOB_ARGS = ["--max_length", MAX_LENGTH, "--shard_size", 100, "--part_size_mb", 0.1]
GLOB_FILES = [(str(WIKITEXT / name), (WIKITEXT / name).stat().st_size) for name in ("train.txt", "validation.txt")]


def glob_parts():
    """The parts of the files that GLOB_ARGS' runs read, as the pipeline cuts them."""
    from beam_pipeline import beam_parts

    return beam_parts(GLOB_FILES, 100 * 2**10, file_format=None)


@pytest.fixture(scope="module")
def beam_shards(tokenizer_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("beam") / "shards"
    run_script("prepare_tfrecord_shards.py", *RUNNER, "--tokenizer_name_or_path", tokenizer_dir,
               "--train_file", WIKITEXT / "*.txt", *GLOB_ARGS, "--output_dir", output_dir)
    return output_dir


def test_each_part_of_each_file_is_cut_on_its_own_and_run_mlm_trains_on_it(beam_shards, tmp_path, tokenizer_dir,
                                                                           tiny_config_dir):
    manifest, samples = read_split(beam_shards / "train", vocab_size=1000)

    parts = glob_parts()
    assert [len({path for path, _, _ in part}) for part in parts] == [1] * len(parts)  # Each within one file.
    assert manifest["num_parts"] == len(parts) == 5 + 2  # 447,834 and 127,107 bytes.
    # Every sample is max_length consecutive tokens of one part of one file, tokenized independently here; they
    # come in the order of the parts, the parts in the order of the files.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    expected, dropped, shard_sizes = cut_parts([part_stream(part, tokenizer) for part in parts], MAX_LENGTH, 100)
    assert samples == expected
    assert [shard["num_samples"] for shard in manifest["shards"]] == shard_sizes
    assert manifest["dropped_tokens"] == dropped and manifest["num_texts"] == sum(
        1 for path, _ in GLOB_FILES for line in Path(path).read_text().split("\n") if line.strip())

    # run_mlm.py reads and trains on them as on the local script's.
    result = run_main("run_mlm.py", *tiny_mlm_args(beam_shards, tokenizer_dir, tiny_config_dir, tmp_path / "model"),
                      "--max_steps", 3)
    assert f"Training: {len(samples)} samples in {len(manifest['shards'])} shards" in result.stderr
    assert "Trained 3 steps" in result.stderr and (tmp_path / "model" / "tf_model.h5").exists()


def test_json_lines_parquet_and_compressed_files_give_the_samples_of_their_texts(tmp_path, tokenizer_dir):
    import pyarrow
    import pyarrow.parquet

    lines = (WIKITEXT / "validation.txt").read_text().split("\n")
    json_lines = "".join(json.dumps({"content": line, "id": i}) + "\n" for i, line in enumerate(lines))
    (tmp_path / "valid.jsonl").write_text(json_lines)
    pyarrow.parquet.write_table(pyarrow.table({"content": lines}), tmp_path / "valid.parquet", row_group_size=100)
    write_compressed(tmp_path / "valid.jsonl.zst", json_lines.encode())
    run_script("prepare_tfrecord_shards.py", *RUNNER, "--tokenizer_name_or_path", tokenizer_dir,
               "--train_file", tmp_path / "valid.jsonl", "--validation_file", tmp_path / "valid.parquet",
               "--test_file", tmp_path / "valid.jsonl.zst", "--text_column", "content", "--max_length", MAX_LENGTH,
               "--output_dir", tmp_path / "shards")
    # One part per file (smaller than --part_size_mb; a Parquet or compressed file is one part whatever its size):
    # one stream.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    expected, dropped, _ = cut_parts([[token for line in lines if line.strip()
                                       for token in tokenizer(line).input_ids]], MAX_LENGTH, 1000)
    for split in ("train", "validation", "test"):
        manifest, samples = read_split(tmp_path / "shards" / split, vocab_size=1000)
        assert samples == expected and manifest["dropped_tokens"] == dropped and manifest["num_parts"] == 1


def test_validation_share_holds_out_a_split_of_each_part(tmp_path, tokenizer_dir):
    run_script("prepare_tfrecord_shards.py", *RUNNER, "--tokenizer_name_or_path", tokenizer_dir,
               "--train_file", WIKITEXT / "*.txt", "--validation_share", 0.2, *GLOB_ARGS, "--output_dir", tmp_path)
    check_held_out_splits(tmp_path, glob_parts(), 0.2, AutoTokenizer.from_pretrained(tokenizer_dir), shard_size=100)


@pytest.mark.fast
def test_a_compressed_file_is_one_part_read_whole(tmp_path):
    from beam_pipeline import beam_parts, part_texts

    text = (WIKITEXT / "train.txt").read_bytes()
    (tmp_path / "train.txt").write_bytes(text)
    compressed = write_compressed(tmp_path / "train.txt.xz", text)
    files = [(str(path), path.stat().st_size) for path in (tmp_path / "train.txt", compressed)]
    plain_parts, compressed_parts = beam_parts(files[:1], 10_000, None), beam_parts(files[1:], 10_000, None)
    assert len(plain_parts) > 10 and compressed_parts == [[(str(compressed), 0, compressed.stat().st_size)]]
    assert list(part_texts(compressed_parts[0], "text", None)) == [text for part in plain_parts
                                                                   for text in part_texts(part, "text", None)]


@pytest.mark.fast
def test_files_named_without_their_format_are_read_in_the_one_file_format_says(tmp_path, tokenizer_dir):
    from beam_pipeline import beam_parts, part_texts

    # A data job's JSON lines, plain and gzip-compressed: cut and read as the same lines named .jsonl, by
    # --file_format; refused without it, before the pipeline runs, by a message that names it.
    lines = (WIKITEXT / "validation.txt").read_text().splitlines()
    records = "".join(json.dumps({"text": line}) + "\n" for line in lines).encode()
    named, plain = tmp_path / "named.jsonl", tmp_path / "part-00000"
    for path in (named, plain):
        path.write_bytes(records)
    compressed = write_compressed(tmp_path / "part-00001.gz", records)
    named_parts = beam_parts([(str(named), len(records))], 10_000, None)
    plain_parts = beam_parts([(str(plain), len(records))], 10_000, "jsonl")
    assert len(named_parts) > 10 and [[start_end for _, *start_end in part] for part in plain_parts] == [
        [start_end for _, *start_end in part] for part in named_parts]
    size = compressed.stat().st_size
    assert beam_parts([(str(compressed), size)], 10_000, "jsonl") == [[(str(compressed), 0, size)]]
    texts = [text for part in named_parts for text in part_texts(part, "text", None)]
    assert [text for part in plain_parts for text in part_texts(part, "text", "jsonl")] == texts
    assert list(part_texts([(str(compressed), 0, size)], "text", "jsonl")) == texts
    refused = run_main("prepare_tfrecord_shards.py", *RUNNER, "--tokenizer_name_or_path", tokenizer_dir,
                       "--train_file", tmp_path / "part-*", "--output_dir", tmp_path / "out", expect_failure=True)
    assert "; files whose names do not tell their format (part-00000, part-00000.gz) with --file_format: got " \
           in refused.stderr and not (tmp_path / "out").exists()


@pytest.mark.fast
def test_bad_input_is_named_before_the_pipeline_runs(tmp_path, tokenizer_dir):
    args = [*RUNNER, "--tokenizer_name_or_path", tokenizer_dir, "--max_length", MAX_LENGTH]
    hub = run_main("prepare_tfrecord_shards.py", *args, "--output_dir", tmp_path / "a", expect_failure=True)
    assert "with --runner, pass input files (--train_file" in hub.stderr
    missing = run_main("prepare_tfrecord_shards.py", *args, "--train_file", tmp_path / "nothing-*.txt",
                       "--output_dir", tmp_path / "b", expect_failure=True)
    assert f"error: no train file matches '{tmp_path / 'nothing-*.txt'}'" in missing.stderr
    remote = run_main("prepare_tfrecord_shards.py", "--runner", "DataflowRunner", "--project", "p",
                      "--tokenizer_name_or_path", tokenizer_dir, "--train_file", WIKITEXT / "train.txt",
                      "--output_dir", tmp_path / "c", expect_failure=True)
    assert "with --runner DataflowRunner, the workers run on other machines" in remote.stderr
    unknown = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file",
                       WIKITEXT / "train.txt", "--project", "p", "--output_dir", tmp_path / "d", expect_failure=True)
    assert "unrecognized arguments: --project p" in unknown.stderr
    # Found by a worker: the pipeline fails with it, and leaves the split INCOMPLETE.
    (tmp_path / "bad.jsonl").write_text('{"text": "a line"}\n[1, 2]\n')
    not_json_lines = run_script("prepare_tfrecord_shards.py", *args, "--train_file", tmp_path / "bad.jsonl",
                                "--output_dir", tmp_path / "e", expect_failure=True)
    assert_entry_point_error(not_json_lines, f"'{tmp_path / 'bad.jsonl'}' is not a JSON-lines file (one JSON object "
                                             "per line): '[1, 2]'")
    assert sorted(path.name for path in (tmp_path / "e" / "train").iterdir()) == ["INCOMPLETE"]
    assert not any("Traceback" in result.stderr for result in (hub, missing, remote, unknown, not_json_lines))


def test_cloud_storage_input_and_output_give_the_same_bytes(beam_shards, tmp_path, tokenizer_dir):
    from gcs_emulator import GcsEmulator
    from test_cloud_storage import objects, run_traced

    with GcsEmulator() as gcs:
        bucket = gcs.create_bucket("corpus")
        for name in ("train.txt", "validation.txt"):
            bucket.blob(f"data/{name}").upload_from_filename(str(WIKITEXT / name))
        # The emulator needs no credentials: --no_auth keeps Beam from looking for them.
        run_traced(tmp_path, "prepare_tfrecord_shards.py", *RUNNER, "--no_auth", "--tokenizer_name_or_path",
                   tokenizer_dir, "--train_file", "gs://corpus/data/*.txt", *GLOB_ARGS,
                   "--output_dir", "gs://corpus/shards", env=gcs.env())
        written = objects(gcs, "corpus", "shards/train/")
    assert written == {path.name: path.read_bytes() for path in (beam_shards / "train").iterdir()}
