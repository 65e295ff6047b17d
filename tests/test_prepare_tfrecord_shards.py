"""prepare_tfrecord_shards.py: the exact on-disk format, the content of the samples, and the guards."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from transformers import AutoTokenizer

from helpers import (COMPRESSORS, MAX_LENGTH, REPO, SHARD_LINES, VALIDATION_LINES, WIKITEXT, assert_entry_point_error,
                     check_held_out_splits, cut_parts, part_stream, read_shard, read_split, run_main, run_script,
                     write_compressed)
from shards import vocabulary_fingerprint


def shard_index(path):
    return int(re.match(r"dataset-(\d+)-\d+\.tfrecord$", path.name).group(1))


@pytest.mark.fast
@pytest.mark.parametrize("split,source,num_lines", [("train", "train.txt", SHARD_LINES),
                                                    ("validation", "validation.txt", VALIDATION_LINES)])
def test_samples_are_the_concatenated_tokens_cut_every_max_length(shards_dir, tokenizer_dir, split, source,
                                                                   num_lines):
    split_dir = shards_dir / split
    shards = sorted(split_dir.glob("*.tfrecord"), key=shard_index)
    assert [shard_index(shard) for shard in shards] == list(range(len(shards)))
    manifest = json.loads((split_dir / "manifest.json").read_text())

    samples = []
    for shard, listed in zip(shards, manifest["shards"]):
        rows = read_shard(shard)
        assert shard.name == listed["file"] == f"dataset-{shard_index(shard)}-{len(rows)}.tfrecord"
        assert listed["num_samples"] == len(rows) and listed["num_bytes"] == shard.stat().st_size
        assert len(rows) == 100 or shard == shards[-1]  # --shard_size 100; only the last shard is smaller.
        for input_ids, attention_mask in rows:
            assert len(input_ids) == MAX_LENGTH and attention_mask == [1] * MAX_LENGTH
            samples.extend(input_ids)

    # The same stream, built independently: tokenize each non-empty line, concatenate, cut.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    lines = [line for line in (WIKITEXT / source).read_text().split("\n")[:num_lines] if line.strip()]
    expected = [token for line in lines for token in tokenizer(line).input_ids]
    assert samples == expected[:len(samples)]
    assert len(expected) - len(samples) == manifest["dropped_tokens"] < MAX_LENGTH
    # Beside the shards, how many times each token id occurs in them.
    token_counts = json.loads((split_dir / "token_counts.json").read_text())
    assert token_counts == np.bincount(samples, minlength=1000).tolist()

    assert manifest == {
        "split": split, "max_length": MAX_LENGTH, "num_samples": len(samples) // MAX_LENGTH,
        "num_tokens": len(samples), "dropped_tokens": manifest["dropped_tokens"], "num_parts": 1,
        "num_texts": len(lines),
        "tokenizer": str(tokenizer_dir), "vocab_size": 1000, "shards": manifest["shards"],
        # What run_mlm.py computes from its AutoTokenizer: the same value as from the Tokenizer written with.
        "vocabulary_fingerprint": vocabulary_fingerprint(tokenizer.backend_tokenizer),
        "word_segmenter": None,  # No --word_segmenter: the records hold no word starts.
    }


@pytest.mark.fast
def test_only_complete_files_remain(shards_dir):
    for split in ("train", "validation"):
        names = sorted(path.name for path in (shards_dir / split).iterdir())
        assert "manifest.json" in names
        assert all(name in ("manifest.json", "token_counts.json") or name.endswith(".tfrecord") for name in names), \
            names


@pytest.mark.fast
def test_json_lines_input_and_summary(tmp_path, tokenizer_dir):
    lines = (WIKITEXT / "validation.txt").read_text().split("\n")[:400]
    (tmp_path / "valid.jsonl").write_text("\n".join(json.dumps({"content": line}) for line in lines))
    result = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                      "--validation_file", tmp_path / "valid.jsonl", "--text_column", "content",
                      "--max_length", 32, "--shard_size", 50, "--num_workers", 2, "--output_dir", tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "validation" / "manifest.json").read_text())
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["validation"]
    # What goes through 🤗 Datasets is one stream, written by one process: the script says so.
    assert "validation: written by one process, not --num_workers 2" in result.stderr and manifest["num_parts"] == 1
    assert manifest["num_texts"] == sum(1 for line in lines if line.strip())
    assert re.search(rf"Done in [\d.]+ s: {manifest['num_samples']} samples, {manifest['num_tokens']} tokens, "
                     rf"{len(manifest['shards'])} shards, \d+ tokens/s", result.stderr)


@pytest.mark.fast
def test_non_empty_output_dir_needs_overwrite_which_replaces_old_shards(tmp_path, tokenizer_dir):
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--train_file", WIKITEXT / "validation.txt",
            "--limit", 300, "--max_length", 32, "--output_dir", tmp_path / "out"]
    run_main("prepare_tfrecord_shards.py", *args, "--shard_size", 10)
    many_shards = sorted((tmp_path / "out" / "train").glob("*.tfrecord"))
    (tmp_path / "out" / "README.txt").write_text("mine")

    result = run_main("prepare_tfrecord_shards.py", *args, "--shard_size", 1000, expect_failure=True)
    assert "is not empty" in result.stderr and "--overwrite" in result.stderr
    assert sorted((tmp_path / "out" / "train").glob("*.tfrecord")) == many_shards

    run_main("prepare_tfrecord_shards.py", *args, "--shard_size", 1000, "--overwrite")
    manifest = json.loads((tmp_path / "out" / "train" / "manifest.json").read_text())
    remaining = sorted(path.name for path in (tmp_path / "out" / "train").glob("*.tfrecord"))
    assert remaining == sorted(shard["file"] for shard in manifest["shards"])  # No stale shard left behind.
    assert len(remaining) < len(many_shards)
    assert (tmp_path / "out" / "README.txt").read_text() == "mine"  # Only the split folders written are replaced.


@pytest.mark.fast
def test_too_little_text_for_one_sample_fails_clearly(tmp_path, tokenizer_dir):
    (tmp_path / "tiny.txt").write_text("just a few words\n\n")
    result = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                      "--train_file", tmp_path / "tiny.txt", "--output_dir", tmp_path / "out", expect_failure=True)
    assert "gave no sample of 128 tokens" in result.stderr and "lower --max_length" in result.stderr


@pytest.mark.fast
def test_bad_numbers_are_refused(tmp_path, tokenizer_dir):
    result = run_main("prepare_tfrecord_shards.py", "--train_file", WIKITEXT / "validation.txt",
                      "--max_length", 0, "--output_dir", tmp_path / "out", expect_failure=True)
    assert "argument --max_length: must be a positive number, got 0" in result.stderr


@pytest.mark.fast
def test_samples_too_short_to_mask_are_refused(tmp_path):
    result = run_main("prepare_tfrecord_shards.py", "--train_file", WIKITEXT / "validation.txt",
                      "--max_length", 2, "--output_dir", tmp_path / "out", expect_failure=True)
    assert "error: --max_length must be at least 16, got 2: shorter samples leave too few tokens to mask" \
        in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


# The records are serialized without TensorFlow (shards.RecordSerializer): they must be the very
# bytes TensorFlow writes. Token ids of every varint length are covered, up to 250,000 (the largest vocabularies),
# and beyond.
EDGE_IDS = [0, 1, 127, 128, 255, 16383, 16384, 250_000, 2**21 - 1, 2**21, 2**31 - 1, 2**35, 2**63 - 1]


@pytest.mark.fast
@pytest.mark.parametrize("with_word_starts", [False, True])
def test_records_are_byte_for_byte_those_of_tensorflow(tmp_path, with_word_starts):
    from shards import RecordSerializer

    max_length = len(EDGE_IDS)
    rng = np.random.default_rng(0)
    samples = np.stack([EDGE_IDS, EDGE_IDS[::-1], rng.integers(0, 250_001, max_length),
                        rng.integers(0, 128, max_length), np.full(max_length, 2**63 - 1)])
    word_starts = rng.integers(0, 2, samples.shape) if with_word_starts else None  # --word_segmenter's feature.
    path = tmp_path / "expected.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row, input_ids in enumerate(samples):
            features = {"input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=input_ids)),
                        "attention_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * max_length))}
            if with_word_starts:
                features["word_starts"] = tf.train.Feature(int64_list=tf.train.Int64List(value=word_starts[row]))
            example = tf.train.Example(features=tf.train.Features(feature=features))
            # Deterministic: map entries in key order. The plain call orders them by a hash seeded anew in every
            # process, so two runs of TensorFlow itself need not agree byte for byte.
            writer.write(example.SerializeToString(deterministic=True))
    assert RecordSerializer(max_length, with_word_starts)(samples, word_starts) == path.read_bytes()
    # One sample at a time, and the batch of all five, give the same bytes.
    serialize = RecordSerializer(max_length, with_word_starts)
    assert b"".join(serialize(samples[i:i + 1], None if word_starts is None else word_starts[i:i + 1])
                    for i in range(len(samples))) == path.read_bytes()


@pytest.mark.fast
def test_shard_writer_fills_shards_across_batches_and_chunks(tmp_path, monkeypatch):
    from shards import ShardWriter

    monkeypatch.setattr(ShardWriter, "CHUNK_SIZE", 4)  # Serialize in chunks smaller than a shard and a batch.
    samples = np.arange(23 * 3).reshape(23, 3)
    for part in (0, 5):
        names = [f"part-{part}-{index}.tfrecord.tmp" for index in range(3)]
        folder = tmp_path / str(part)
        folder.mkdir()
        writer = ShardWriter(str(folder), shard_size=10, max_length=3, part=part)
        for start, end in [(0, 1), (1, 14), (14, 20), (20, 23)]:
            writer.add(samples[start:end])
        writer.close()
        # Every shard keeps its temporary name until finish_split numbers the shards of all parts.
        assert [(shard["file"], shard["num_samples"]) for shard in writer.shards] == list(zip(names, [10, 10, 3]))
        assert all(shard["num_bytes"] == (folder / shard["file"]).stat().st_size for shard in writer.shards)
        assert sorted(path.name for path in folder.iterdir()) == sorted(names)
        rows = [row for shard in writer.shards for row in read_shard(folder / shard["file"])]
        assert rows == [(list(sample), [1, 1, 1]) for sample in samples.tolist()]


@pytest.mark.fast
def test_text_files_are_read_as_datasets_reads_them(tmp_path):
    import datasets

    from corpus import iter_text_batches, iter_text_file_batches

    (tmp_path / "a.txt").write_bytes(b"first line\r\n\r\n  \nsecond\rthird\t \n\n\xc3\xa9t\xc3\xa9 \xe2\x80\xa8 fin")
    (tmp_path / "b.txt").write_text(" \nother file\n")
    paths = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    dataset = datasets.load_dataset("text", data_files={"train": paths}, streaming=True)["train"]
    for batch_size, limit in [(2, None), (100, None), (2, 4), (3, 9)]:
        batches = list(iter_text_file_batches(paths, batch_size, limit))
        assert all(0 < len(batch) <= batch_size for batch in batches)
        # Batches may be cut elsewhere (🤗 Datasets counts empty lines in a batch), the texts are the same.
        expected = [text for batch in iter_text_batches(dataset, "text", batch_size, limit) for text in batch]
        assert [text for batch in batches for text in batch] == expected
    assert sum(map(len, iter_text_file_batches(paths, 100))) == 5  # "first line" to "other file"


@pytest.mark.fast
def test_fast_tokenizer_loading_matches_auto_tokenizer(tokenizer_dir):
    from models import load_backend_tokenizer

    tokenizer, vocab_size = load_backend_tokenizer(str(tokenizer_dir))
    reference = AutoTokenizer.from_pretrained(tokenizer_dir)
    texts = ["The <mask> was released in 2011 .", " Valkyria Chronicles III ", "é à <unk> ☃", ""]
    assert [encoding.ids for encoding in tokenizer.encode_batch_fast(texts)] == reference(texts).input_ids
    assert vocab_size == len(reference) == 1000


def test_local_text_to_local_shards_imports_neither_tensorflow_nor_datasets_nor_transformers(tmp_path, tokenizer_dir):
    # Their imports took seconds each, as long as tokenizing a small corpus: see prepare_tfrecord_shards.py.
    argv = ["prepare_tfrecord_shards.py", "--tokenizer_name_or_path", str(tokenizer_dir), "--train_file",
            str(WIKITEXT / "validation.txt"), "--limit", "300", "--max_length", "32", "--output_dir", str(tmp_path)]
    script = (f"import runpy, sys; sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__'); "
              "print([name for name in ('tensorflow', 'datasets', 'transformers') if name in sys.modules])")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"
    assert (tmp_path / "train" / "manifest.json").exists()


@pytest.mark.fast
def test_errors_in_the_tokenizing_thread_reach_the_user(tmp_path, tokenizer_dir):
    (tmp_path / "data.jsonl").write_text('{"content": "some text"}\n')
    result = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                      "--train_file", tmp_path / "data.jsonl", "--output_dir", tmp_path / "out",
                      expect_failure=True)
    assert "the data has no column 'text'" in result.stderr and "--text_column" in result.stderr
    result = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                      "--train_file", WIKITEXT / "validation.txt", "--text_column", "content",
                      "--output_dir", tmp_path / "out2", expect_failure=True)
    assert "the data has no column 'content'" in result.stderr


def test_shards_written_to_cloud_storage_are_those_written_locally(tmp_path, tokenizer_dir):
    from gcs_emulator import GcsEmulator

    # Two worker processes, each writing its own shards to the bucket; the main process renames and publishes them.
    options = ["--tokenizer_name_or_path", tokenizer_dir, "--train_file", WIKITEXT / "validation.txt",
               "--num_workers", 2, "--max_length", 32, "--shard_size", 50]
    run_script("prepare_tfrecord_shards.py", *options, "--output_dir", tmp_path)
    with GcsEmulator() as gcs:
        gcs.create_bucket("bucket")
        subprocess.run([sys.executable, str(REPO / "prepare_tfrecord_shards.py"), *map(str, options),
                        "--output_dir", "gs://bucket/shards"], env=gcs.env(), check=True, capture_output=True,
                       timeout=300)
        written = {blob.name: blob.download_as_bytes() for blob in gcs.client().list_blobs("bucket")
                   if not blob.name.endswith("/")}  # Leave out the objects that stand for folders.
        assert gcs.refused_connects() == []
    assert written == {f"shards/train/{path.name}": path.read_bytes() for path in (tmp_path / "train").iterdir()}


@pytest.mark.fast
def test_text_that_is_not_utf8_is_named_from_the_tokenizing_thread(tmp_path, tokenizer_dir):
    # The bad byte comes after thousands of good lines, read in the background thread that feeds the tokenizer.
    good = (WIKITEXT / "validation.txt").read_bytes()
    (tmp_path / "latin1.txt").write_bytes(good + b"na\xefve\n")
    result = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                      "--train_file", tmp_path / "latin1.txt", "--output_dir", tmp_path / "out",
                      expect_failure=True)
    line = good.count(b"\n") + 1
    assert f"is not UTF-8: the first invalid byte is at line {line}, byte offset {len(good) + 2} (byte 0xef)" \
        in result.stderr
    assert "iconv -f latin1 -t utf-8" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.fast
def test_output_dir_that_is_a_file_and_a_missing_tokenizer_are_named(tmp_path, tokenizer_dir):
    args = ["--train_file", WIKITEXT / "validation.txt", "--limit", 300, "--max_length", 32]
    (tmp_path / "out").write_text("a file")
    file_output = run_main("prepare_tfrecord_shards.py", *args, "--tokenizer_name_or_path", tokenizer_dir,
                           "--output_dir", tmp_path / "out", expect_failure=True)
    assert f"error: --output_dir '{tmp_path / 'out'}' is a file, not a folder" in file_output.stderr
    # A path, which cannot be a Hub id; and a plain name, neither a local folder nor on the (offline) Hub.
    missing_folder = run_main("prepare_tfrecord_shards.py", *args, "--tokenizer_name_or_path",
                              tmp_path / "no-tokenizer", "--output_dir", tmp_path / "shards", expect_failure=True)
    assert f"error: the tokenizer folder '{tmp_path / 'no-tokenizer'}' (--tokenizer_name_or_path) does not " \
           "exist" in missing_folder.stderr and "train_unigram.py --output_dir" in missing_folder.stderr
    unknown_name = run_main("prepare_tfrecord_shards.py", *args, "--tokenizer_name_or_path", "no-such-tokenizer",
                            "--output_dir", tmp_path / "shards", expect_failure=True)
    assert "error: cannot load the tokenizer 'no-such-tokenizer' (--tokenizer_name_or_path): there is no such " \
           "local folder, and it could not be loaded from the Hugging Face Hub" in unknown_name.stderr
    assert not any("Traceback" in result.stderr for result in (file_output, missing_folder, unknown_name))


# Several worker processes: the text files of a split cut into parts at line starts (plan_parts), each part
# tokenized, cut and written by a process of its own.


@pytest.mark.fast
def test_parts_hold_every_line_once_in_order(tmp_path):
    from corpus import iter_text_file_batches
    from shards import plan_parts

    # Line breaks of every kind, a line without a break at the end of a file, an empty file, non-ASCII text.
    (tmp_path / "a.txt").write_bytes(b"".join(b"line %d \xc3\xa9\xe2\x80\xa8 x\r\n\n  \nnext\rthird\n" % i
                                              for i in range(40)) + b"no break at the end")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "b.txt").write_bytes(b"\n".join(b"b%d" % i for i in range(50)) + b"\n")
    paths = [str(tmp_path / name) for name in ("a.txt", "empty.txt", "b.txt")]
    sizes = [(tmp_path / name).stat().st_size for name in ("a.txt", "empty.txt", "b.txt")]
    whole = [text for batch in iter_text_file_batches(paths, 7) for text in batch]
    for num_parts in (1, 2, 3, 7, 50, 10_000):
        parts = plan_parts(paths, sizes, num_parts)
        assert len(parts) == min(num_parts, sum(sizes))
        # Contiguous byte ranges that cover the files, of equal size (to a byte) but where a file ends.
        pieces = [piece for part in parts for piece in part]
        assert b"".join(open(path, "rb").read()[start:end] for path, start, end in pieces) == \
            b"".join(open(path, "rb").read() for path in paths)
        assert max(map(part_size, parts)) - min(map(part_size, parts)) <= 1
        # Read in order, the parts give every line once, whole, wherever they were cut.
        in_parts = [text for part in parts for batch in iter_text_file_batches(part, 7) for text in batch]
        assert in_parts == whole


def part_size(part):
    return sum(end - start for _, start, end in part)


def test_several_workers_write_each_part_as_its_own_stream(tmp_path, tokenizer_dir):
    from shards import plan_parts

    files = [str(WIKITEXT / "train.txt"), str(WIKITEXT / "validation.txt")]
    run_script("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file", *files,
               "--max_length", MAX_LENGTH, "--shard_size", 100, "--num_workers", 3, "--output_dir", tmp_path)
    manifest, samples = read_split(tmp_path / "train", vocab_size=1000)

    # The parts the script made (plan_parts is checked above), each tokenized independently and cut on its own.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    parts = plan_parts(files, [Path(file).stat().st_size for file in files], 3)
    expected, dropped, shard_sizes = cut_parts([part_stream(part, tokenizer) for part in parts], MAX_LENGTH, 100)
    assert samples == expected  # In the order of the text: the parts' samples one part after the other.
    assert [shard["num_samples"] for shard in manifest["shards"]] == shard_sizes
    assert manifest["num_parts"] == 3 and manifest["dropped_tokens"] == dropped

    # run_mlm.py takes them as it takes shards written by one process.
    from shards import find_shards

    shard_files, counts = find_shards(str(tmp_path / "train"), MAX_LENGTH, tokenizer, str(tokenizer_dir))
    assert sorted(counts) == sorted(shard["num_samples"] for shard in manifest["shards"])
    assert len(shard_files) == len(manifest["shards"])


@pytest.mark.fast
def test_a_failing_worker_fails_the_run_and_leaves_the_split_incomplete(tmp_path, tokenizer_dir):
    # Two parts: the second holds the end of train.txt and a file whose last line is not UTF-8.
    (tmp_path / "latin1.txt").write_bytes((WIKITEXT / "validation.txt").read_bytes() + b"na\xefve\n")
    result = run_script("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file",
                        WIKITEXT / "train.txt", tmp_path / "latin1.txt", "--max_length", MAX_LENGTH,
                        "--num_workers", 2, "--output_dir", tmp_path / "out", expect_failure=True)
    assert_entry_point_error(result, f"the text file '{tmp_path / 'latin1.txt'}' is not UTF-8")  # Status 1 too.
    names = {path.name for path in (tmp_path / "out" / "train").iterdir()}
    assert "INCOMPLETE" in names and "manifest.json" not in names and "token_counts.json" not in names


# --validation_share: a validation split held out of the training texts, each text's side chosen by its content.


@pytest.mark.fast
def test_each_text_is_held_out_or_not_by_its_content_alone():
    from corpus import LONG_TEXT_BYTES, LongText, holdout_side

    texts = [f"text number {i}" for i in range(600)]  # Texts a few characters apart.
    train, validation = holdout_side("train", 0.1), holdout_side("validation", 0.1)
    held_out = [text for text in texts if validation(text)]
    assert [text for text in texts if train(text)] == [text for text in texts if text not in held_out]
    assert 40 <= len(held_out) <= 80  # 60 expected.
    assert holdout_side("test", 0.1) is None and holdout_side("validation", None) is None  # Every text.
    # Texts longer than LONG_TEXT_BYTES (in UTF-8) stay in train, whatever the share; the others may go.
    almost_all = holdout_side("validation", 0.999)
    longest_held = "a" * LONG_TEXT_BYTES
    too_long = ["é" * (LONG_TEXT_BYTES // 2 + 1), LongText("not-read.txt", 0, LONG_TEXT_BYTES + 1, space_only=False)]
    assert almost_all(longest_held) and not any(map(almost_all, too_long))
    assert all(map(holdout_side("train", 0.999), too_long))


def test_validation_share_holds_out_the_same_texts_with_one_or_two_workers_and_with_limit(tmp_path, tokenizer_dir):
    from shards import plan_parts

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    path = str(WIKITEXT / "train.txt")
    size = Path(path).stat().st_size
    first_700_lines = len(b"".join(Path(path).read_bytes().splitlines(keepends=True)[:700]))
    runs = {"one": (["--num_workers", 1], [[(path, 0, size)]]),
            "two": (["--num_workers", 2], plan_parts([path], [size], 2)),
            "limit": (["--limit", 700], [[(path, 0, first_700_lines)]])}
    whole = {}
    for run, (flags, parts) in runs.items():
        run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file", path,
                 "--validation_share", 0.2, *flags, "--max_length", MAX_LENGTH, "--shard_size", 100,
                 "--output_dir", tmp_path / run)
        whole[run] = check_held_out_splits(tmp_path / run, parts, 0.2, tokenizer, shard_size=100)
        assert 0.1 < len(whole[run]["validation"]) / len(whole[run]["train"]) < 0.4
    # Read back from the shards: no text is a training text in one run and a validation text in another (the
    # workers are processes of their own: a hash salted in each process, as Python's hash(), would disagree).
    assert not any(whole[a]["train"] & whole[b]["validation"] for a in runs for b in runs)


@pytest.mark.fast
def test_validation_share_beside_a_validation_split_of_its_own_is_refused(tmp_path, tokenizer_dir):
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--output_dir", tmp_path / "out"]
    both = run_main("prepare_tfrecord_shards.py", *args, "--train_file", WIKITEXT / "train.txt", "--validation_file",
                    WIKITEXT / "validation.txt", "--validation_share", 0.01, expect_failure=True)
    assert "error: --validation_share holds a validation split out of --train_file, and --validation_file gives " \
           "one: pass one or the other." in both.stderr
    hub = run_main("prepare_tfrecord_shards.py", *args, "--validation_share", 0.01, expect_failure=True)
    assert "error: --validation_share holds a validation split out of the texts of --train_file: pass " \
           "--train_file" in hub.stderr
    none = run_main("prepare_tfrecord_shards.py", *args, "--train_file", WIKITEXT / "train.txt",
                    "--validation_share", 0, expect_failure=True)
    assert "argument --validation_share: must be in (0, 1), 0 and 1 excluded, got 0" in none.stderr
    assert not (tmp_path / "out").exists()


# Compressed text files (issue #65): read as they are, each whole, by one worker.


@pytest.mark.fast
@pytest.mark.parametrize("extension", COMPRESSORS)
def test_compressed_text_is_read_as_the_text_itself(tmp_path, extension):
    from corpus import iter_text_file_lines

    # Line breaks of every kind, non-ASCII text, thousands of lines, no line break at the end.
    text = (b"first line\r\n\r\n  \nsecond\rthird\t \n\xc3\xa9t\xc3\xa9 \xe2\x80\xa8 fin\n"
            + (WIKITEXT / "validation.txt").read_bytes() + b"no break at the end")
    (tmp_path / "text.txt").write_bytes(text)
    compressed = write_compressed(tmp_path / f"text.txt{extension}", text)
    expected = list(iter_text_file_lines([tmp_path / "text.txt"]))
    assert list(iter_text_file_lines([compressed])) == expected
    # As a part gives it, (0, its size): whole, although the range counts compressed bytes.
    assert list(iter_text_file_lines([(compressed, 0, compressed.stat().st_size)])) == expected


@pytest.mark.fast
def test_a_compressed_file_is_never_cut_and_the_parts_keep_the_order_of_the_text(tmp_path):
    from corpus import iter_text_file_lines
    from shards import plan_parts

    texts = [(WIKITEXT / name).read_bytes() for name in ("train.txt", "validation.txt")]
    paths = [write_compressed(tmp_path / "a.txt.gz", texts[0]), tmp_path / "b.txt",
             write_compressed(tmp_path / "c.txt.zst", texts[1]), write_compressed(tmp_path / "d.txt.xz", texts[0])]
    (tmp_path / "b.txt").write_bytes(texts[1])
    sizes = [path.stat().st_size for path in paths]
    whole = list(iter_text_file_lines(paths))
    for num_parts in (1, 2, 3, 5, 50):
        parts = plan_parts(paths, sizes, num_parts)
        assert 1 <= len(parts) <= num_parts
        ranges = [piece for part in parts for piece in part]
        # Each compressed file in one range, the whole file; the text file cut anywhere.
        assert [piece for piece in ranges if piece[0] != paths[1]] == [
            (path, 0, size) for path, size in zip(paths, sizes) if path != paths[1]]
        assert [text for part in parts for text in iter_text_file_lines(part)] == whole
    # Five compressed files of one size on two workers: contiguous groups of whole files, as even as they can be.
    names = [f"{index}.txt.gz" for index in range(5)]
    parts = plan_parts(names, [100] * 5, 2)
    assert [[name for name, _, _ in part] for part in parts] in ([names[:2], names[2:]], [names[:3], names[3:]])


@pytest.mark.fast
def test_shards_from_compressed_text_are_those_from_the_text(tmp_path, tokenizer_dir):
    compressed = write_compressed(tmp_path / "validation.txt.gz", (WIKITEXT / "validation.txt").read_bytes())
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--max_length", 32, "--shard_size", 50]
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", WIKITEXT / "validation.txt",
             "--output_dir", tmp_path / "from-text")
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", compressed, "--output_dir", tmp_path / "from-gz")
    written = {path.name: path.read_bytes() for path in (tmp_path / "from-text" / "train").iterdir()}
    assert len(written) > 3  # Shards, token counts, manifest.
    assert {path.name: path.read_bytes() for path in (tmp_path / "from-gz" / "train").iterdir()} == written


@pytest.mark.fast
def test_workers_read_each_compressed_file_whole(tmp_path, tokenizer_dir):
    plain = [WIKITEXT / "train.txt", WIKITEXT / "validation.txt"]
    files = [write_compressed(tmp_path / "train.txt.bz2", plain[0].read_bytes()),
             write_compressed(tmp_path / "validation.txt.zst", plain[1].read_bytes())]
    result = run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file", *files,
                      "--max_length", MAX_LENGTH, "--shard_size", 100, "--num_workers", 3, "--output_dir",
                      tmp_path / "out")
    manifest, samples = read_split(tmp_path / "out" / "train", vocab_size=1000)
    # Two parts, not three: each file whole, by one worker, tokenized independently here from the text itself.
    assert "train: 2 part(s) for 3 worker processes: a compressed file is never cut" in result.stderr
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    expected, dropped, shard_sizes = cut_parts([part_stream([(path, 0, path.stat().st_size)], tokenizer)
                                                for path in plain], MAX_LENGTH, 100)
    assert samples == expected
    assert [shard["num_samples"] for shard in manifest["shards"]] == shard_sizes
    assert manifest["num_parts"] == 2 and manifest["dropped_tokens"] == dropped


# Files named without their format's extension (issue #87): part-00000 and part-00001.gz, as data jobs name them.


@pytest.mark.fast
def test_files_named_without_their_format_are_read_in_the_one_file_format_says(tmp_path, tokenizer_dir):
    # Refused without --file_format, by a message that names it; with it, the shards of the same text named .txt and
    # .txt.gz, cut between two worker processes, one for each file (a compressed one by its compression's extension).
    lines = (WIKITEXT / "validation.txt").read_bytes().splitlines(keepends=True)
    halves = b"".join(lines[:len(lines) // 2]), b"".join(lines[len(lines) // 2:])
    (tmp_path / "named.txt").write_bytes(halves[0])
    (tmp_path / "part-00000").write_bytes(halves[0])
    named = [tmp_path / "named.txt", write_compressed(tmp_path / "named.txt.gz", halves[1])]
    unnamed = [tmp_path / "part-00000", write_compressed(tmp_path / "part-00001.gz", halves[1])]
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--max_length", 32, "--shard_size", 50, "--num_workers", 2]
    refused = run_main("prepare_tfrecord_shards.py", *args, "--train_file", *unnamed, "--output_dir", tmp_path / "a",
                       expect_failure=True)
    assert f"error: cannot read '{unnamed[0]}': no extension of its format. Use files of one of these: .txt, " \
           in refused.stderr
    assert ", or pass --file_format (text, jsonl, parquet) for files whose names do not tell their format " \
           "(part-00000, part-00000.gz)." in refused.stderr and not (tmp_path / "a").exists()
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", *named, "--output_dir", tmp_path / "named")
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", *unnamed, "--file_format", "text",
             "--output_dir", tmp_path / "unnamed")
    written = {path.name: path.read_bytes() for path in (tmp_path / "named" / "train").iterdir()}
    assert json.loads(written["manifest.json"])["num_parts"] == 2
    assert {path.name: path.read_bytes() for path in (tmp_path / "unnamed" / "train").iterdir()} == written


@pytest.mark.fast
def test_a_glob_in_quotes_stands_for_the_files_it_matches_in_order(tmp_path, tokenizer_dir):
    # A data job's output passed as "part-*", expanded by the script, not the shell: the shards of its files listed
    # one by one, cut between two worker processes, which plan their parts from the sizes of the files matched.
    lines = (WIKITEXT / "validation.txt").read_bytes().splitlines(keepends=True)
    parts = [tmp_path / "part-00000", tmp_path / "part-00001"]
    parts[0].write_bytes(b"".join(lines[:len(lines) // 2]))
    parts[1].write_bytes(b"".join(lines[len(lines) // 2:]))
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--max_length", 32, "--shard_size", 50, "--num_workers", 2,
            "--file_format", "text"]
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", *parts, "--output_dir", tmp_path / "listed")
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", tmp_path / "part-*", "--output_dir",
             tmp_path / "globbed")
    written = {path.name: path.read_bytes() for path in (tmp_path / "listed" / "train").iterdir()}
    assert json.loads(written["manifest.json"])["num_parts"] == 2
    assert {path.name: path.read_bytes() for path in (tmp_path / "globbed" / "train").iterdir()} == written
    refused = run_main("prepare_tfrecord_shards.py", *args, "--train_file", tmp_path / "nothing-*", "--output_dir",
                       tmp_path / "none", expect_failure=True)
    assert f"error: no train file matches '{tmp_path / 'nothing-*'}'" in refused.stderr
