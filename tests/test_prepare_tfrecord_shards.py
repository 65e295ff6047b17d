"""prepare_tfrecord_shards.py: the exact on-disk format, the content of the samples, and the guards."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf
from transformers import AutoTokenizer

from conftest import MAX_LENGTH, SHARD_LINES
from helpers import WIKITEXT, run_script


def read_shard(path):
    """(input_ids, attention_mask) rows of a shard, parsed with nothing but the protobuf definition."""
    rows = []
    for record in tf.data.TFRecordDataset(str(path)):
        features = tf.train.Example.FromString(record.numpy()).features.feature
        assert sorted(features) == ["attention_mask", "input_ids"]
        rows.append((list(features["input_ids"].int64_list.value), list(features["attention_mask"].int64_list.value)))
    return rows


def shard_index(path):
    return int(re.match(r"dataset-(\d+)-\d+\.tfrecord$", path.name).group(1))


@pytest.mark.parametrize("split,source", [("train", "train.txt"), ("validation", "validation.txt")])
def test_samples_are_the_concatenated_tokens_cut_every_max_length(shards_dir, tokenizer_dir, split, source):
    split_dir = shards_dir / split
    shards = sorted(split_dir.glob("*.tfrecord"), key=shard_index)
    assert [shard_index(shard) for shard in shards] == list(range(len(shards)))
    manifest = json.loads((split_dir / "manifest.json").read_text())

    samples = []
    for shard, listed in zip(shards, manifest["shards"]):
        rows = read_shard(shard)
        assert shard.name == listed["file"] == f"dataset-{shard_index(shard)}-{len(rows)}.tfrecord"
        assert listed["num_samples"] == len(rows)
        assert len(rows) == 100 or shard == shards[-1]  # --shard_size 100; only the last shard is smaller.
        for input_ids, attention_mask in rows:
            assert len(input_ids) == MAX_LENGTH and attention_mask == [1] * MAX_LENGTH
            samples.extend(input_ids)

    # The same stream, built independently: tokenize each non-empty line, concatenate, cut.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    lines = [line for line in (WIKITEXT / source).read_text().split("\n")[:SHARD_LINES] if line.strip()]
    expected = [token for line in lines for token in tokenizer(line).input_ids]
    assert samples == expected[:len(samples)]
    assert len(expected) - len(samples) == manifest["dropped_tokens"] < MAX_LENGTH

    assert manifest == {
        "split": split, "max_length": MAX_LENGTH, "num_samples": len(samples) // MAX_LENGTH,
        "num_tokens": len(samples), "dropped_tokens": manifest["dropped_tokens"], "num_texts": len(lines),
        "tokenizer": str(tokenizer_dir), "vocab_size": 1000, "shards": manifest["shards"],
    }


def test_only_complete_files_remain(shards_dir):
    for split in ("train", "validation"):
        names = sorted(path.name for path in (shards_dir / split).iterdir())
        assert "manifest.json" in names
        assert all(name == "manifest.json" or name.endswith(".tfrecord") for name in names), names


def test_json_lines_input_and_summary(tmp_path, tokenizer_dir):
    lines = (WIKITEXT / "validation.txt").read_text().split("\n")[:400]
    (tmp_path / "valid.jsonl").write_text("\n".join(json.dumps({"content": line}) for line in lines))
    result = run_script("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                        "--validation_file", tmp_path / "valid.jsonl", "--text_column", "content",
                        "--max_length", 32, "--shard_size", 50, "--output_dir", tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "validation" / "manifest.json").read_text())
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["validation"]
    assert manifest["num_texts"] == sum(1 for line in lines if line.strip())
    assert re.search(rf"Done in [\d.]+ s: {manifest['num_samples']} samples, {manifest['num_tokens']} tokens, "
                     rf"{len(manifest['shards'])} shards, \d+ tokens/s", result.stderr)


def test_non_empty_output_dir_needs_overwrite_which_replaces_old_shards(tmp_path, tokenizer_dir):
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--train_file", WIKITEXT / "validation.txt",
            "--limit", 300, "--max_length", 32, "--output_dir", tmp_path / "out"]
    run_script("prepare_tfrecord_shards.py", *args, "--shard_size", 10)
    many_shards = sorted((tmp_path / "out" / "train").glob("*.tfrecord"))
    (tmp_path / "out" / "README.txt").write_text("mine")

    result = run_script("prepare_tfrecord_shards.py", *args, "--shard_size", 1000, expect_failure=True)
    assert "is not empty" in result.stderr and "--overwrite" in result.stderr
    assert sorted((tmp_path / "out" / "train").glob("*.tfrecord")) == many_shards

    run_script("prepare_tfrecord_shards.py", *args, "--shard_size", 1000, "--overwrite")
    manifest = json.loads((tmp_path / "out" / "train" / "manifest.json").read_text())
    remaining = sorted(path.name for path in (tmp_path / "out" / "train").glob("*.tfrecord"))
    assert remaining == sorted(shard["file"] for shard in manifest["shards"])  # No stale shard left behind.
    assert len(remaining) < len(many_shards)
    assert (tmp_path / "out" / "README.txt").read_text() == "mine"  # Only the split folders written are replaced.


def test_too_little_text_for_one_sample_fails_clearly(tmp_path, tokenizer_dir):
    (tmp_path / "tiny.txt").write_text("just a few words\n\n")
    result = run_script("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                        "--train_file", tmp_path / "tiny.txt", "--output_dir", tmp_path / "out", expect_failure=True)
    assert "gave no sample of 128 tokens" in result.stderr and "lower --max_length" in result.stderr


def test_bad_numbers_are_refused(tmp_path, tokenizer_dir):
    result = run_script("prepare_tfrecord_shards.py", "--train_file", WIKITEXT / "validation.txt",
                        "--max_length", 0, "--output_dir", tmp_path / "out", expect_failure=True)
    assert "--max_length must be a positive number" in result.stderr
