#!/usr/bin/env python
"""Step 2: tokenize a corpus and write it as fixed-length samples in TFRecord shards.

Each split (train, validation, ...) is streamed in batches of texts; empty and whitespace-only texts are skipped,
every other one is tokenized (the tokenizer of step 1 wraps it in <s> ... </s>), and the tokens of all texts are
concatenated into one stream, cut into samples of exactly --max_length tokens. Cutting a stream rather than padding
or truncating each text keeps every token and wastes no compute on padding; the tokens left at the end (fewer than
--max_length) are dropped and counted. Memory stays at a few batches, whatever the corpus size.

A split of text files read whole (no --limit) is cut into contiguous parts of whole lines, one per worker process
(--num_workers; by default one per core, at most one per 16 MiB of text), each tokenized, cut and written on its
own: the tokens left over are dropped at the end of each part, and no sample spans two parts; the samples keep the
order of the text and the shards are numbered across the parts. With --runner, the same per-part work runs as an
Apache Beam pipeline (beam_pipeline.py), on this machine or on Dataflow. Hub datasets and JSON-lines or Parquet
files are read through 🤗 Datasets as one stream, by this process.

Each split folder, {output_dir}/{split}/, holds the files of utils.py's shard contract: INCOMPLETE while it is
written; the shards, dataset-{index}-{num_samples}.tfrecord, --shard_size samples each, each written under a
temporary name (*.tfrecord.tmp) and renamed once every part is complete; token_counts.json; then manifest.json,
written last. A record is a tf.train.Example of two int64 features of max_length values each:

    input_ids       the token ids of the sample
    attention_mask  all ones (samples are never padded), for readers of the original example's format

For text files, local output and a tokenizer of train_unigram.py, nothing slow to import is imported: not
TensorFlow (RecordSerializer writes the bytes of its records), 🤗 Datasets or 🤗 Transformers. Every path may be
gs://, checked before anything is tokenized.

Example:
    python prepare_tfrecord_shards.py --tokenizer_name_or_path unigram-tokenizer \\
        --train_file data/train.txt --validation_file data/validation.txt --output_dir tfrecords
"""

import argparse
import itertools
import json
import logging
import multiprocessing
import os
import struct
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

import google_crc32c
import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from utils import (INCOMPLETE_MARKER_NAME, MANIFEST_NAME, MIN_MAX_LENGTH, SHARD_NAME, TOKEN_COUNTS_NAME, Manifest,
                   UserError, add_corpus_arguments, check_gcs_path, check_output_dir, data_files_format, delete,
                   exists, file_size, is_gcs_path, iter_text_file_batches, local_copy, open_file, positive_int,
                   rename, text_batches, vocabulary_fingerprint)
from utils import load_tokenizer as load_auto_tokenizer

logger = logging.getLogger("prepare_tfrecord_shards")

# The least text worth a worker process of its own: its start (a new Python, the imports, the tokenizer) and the
# tokens dropped at the end of its part are negligible beside 16 MiB, seconds of tokenizing for a core.
MIN_BYTES_PER_WORKER = 16 * 2**20
# With --runner, a file is cut into parts of at most this size: minutes of work for a core, long beside a
# worker's start, short enough that a large corpus spreads over many workers.
DEFAULT_PART_SIZE_MB = 256


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data (a Hub dataset by default, or files with --*_file)")
    add_corpus_arguments(data)
    data.add_argument("--split", nargs="+", help="Splits of the Hub dataset to write (default: all of them).")
    for split in ("train", "validation", "test"):
        data.add_argument(f"--{split}_file", nargs="+",
                          help=f"Text files (local or gs://), or local JSON-lines or Parquet files, for the {split} "
                               "split, instead of the Hub dataset (with --runner: all on gs:// too, and globs in "
                               "quotes).")
    parser.add_argument("--tokenizer_name_or_path", default="unigram-tokenizer",
                        help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id "
                             "(default: %(default)s).")
    parser.add_argument("--max_length", type=positive_int, default=128,
                        help=f"Tokens per sample, at least {MIN_MAX_LENGTH}: a sample may hold a document bound "
                             "(</s> <s>), and a masked token needs context (default: %(default)s).")
    parser.add_argument("--shard_size", type=positive_int, default=1000,
                        help="Samples per shard (default: %(default)s).")
    parser.add_argument("--batch_size", type=positive_int, default=1000,
                        help="Texts tokenized at a time (default: %(default)s).")
    parser.add_argument("--num_workers", type=positive_int,
                        help="Processes that write a split of text files side by side, each its own part of the "
                             "text (default: one per core, at most one per "
                             f"{MIN_BYTES_PER_WORKER // 2**20} MiB of text).")
    parser.add_argument("--output_dir", default="tfrecords",
                        help="Folder that receives a folder of shards per split, local or gs:// (default: "
                             "%(default)s).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Write into a non-empty --output_dir, replacing the folders of the splits written.")
    beam = parser.add_argument_group("Apache Beam (pip install -r requirements-beam.txt)")
    beam.add_argument("--runner",
                      help="Write the shards with an Apache Beam pipeline on this runner: DirectRunner (this "
                           "machine) or DataflowRunner, from input files only (globs allowed). Beam's own options "
                           "follow and are passed to it (Dataflow: --project, --region, --temp_location, "
                           "--worker_machine_type, --max_num_workers, --requirements_file, --setup_file, ...), and "
                           "--num_workers, if given (Dataflow: its initial number of machines).")
    beam.add_argument("--part_size_mb", type=float, default=DEFAULT_PART_SIZE_MB,
                      help="With --runner: each text or JSON-lines file is cut into parts of at most this many MiB, "
                           "each written by one worker core; a Parquet file is one part (default: %(default)s).")
    args, args.beam_args = parser.parse_known_args()
    if args.beam_args and not args.runner:
        parser.error(f"unrecognized arguments: {' '.join(args.beam_args)}")
    if args.max_length < MIN_MAX_LENGTH:
        parser.error(f"--max_length must be at least {MIN_MAX_LENGTH}, got {args.max_length}: shorter samples "
                     "leave too few tokens to mask, with too little context. Pass --max_length 128, or at least "
                     f"{MIN_MAX_LENGTH}.")
    if args.part_size_mb <= 0:
        parser.error(f"--part_size_mb must be a positive number, got {args.part_size_mb}.")
    return args


def main():
    args = parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    start = time.perf_counter()
    data_files = {split: getattr(args, f"{split}_file") for split in ("train", "validation", "test")
                  if getattr(args, f"{split}_file")}
    for path in [args.tokenizer_name_or_path, *itertools.chain(*data_files.values())]:  # Fail before the long part.
        check_gcs_path(path)
    check_gcs_path(args.output_dir, write=True)
    check_output_dir(args.output_dir, args.overwrite)
    if args.runner:
        if not data_files:
            raise UserError("with --runner, pass input files (--train_file, --validation_file, --test_file; "
                            "globs allowed): the Beam pipeline does not read Hub datasets.")
        from beam_pipeline import run_beam_pipeline  # Only here: Beam is installed for --runner alone.

        manifests = run_beam_pipeline(data_files, args)
    else:
        manifests = write_splits_here(data_files, args)

    seconds, num_tokens = time.perf_counter() - start, sum(m.num_tokens for m in manifests)
    for m in manifests:
        logger.info("%s: %d samples (%d tokens, %d dropped at the ends of %d part(s)) in %d shards", m.split,
                    m.num_samples, m.num_tokens, m.dropped_tokens, m.num_parts, len(m.shards))
    logger.info("Done in %.1f s: %d samples, %d tokens, %d shards, %.0f tokens/s, written to %s", seconds,
                sum(m.num_samples for m in manifests), num_tokens, sum(len(m.shards) for m in manifests),
                num_tokens / seconds, args.output_dir)


def write_splits_here(data_files, args):
    """Writes every split with this machine's processes; returns the manifests."""
    tokenizer, vocab_size = load_tokenizer(args.tokenizer_name_or_path)
    splits = text_batches(data_files=data_files, dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                          splits=args.split, trust_remote_code=args.trust_remote_code, text_column=args.text_column,
                          batch_size=args.batch_size, limit=args.limit)
    # Text files can be cut into parts; what goes through 🤗 Datasets is one stream.
    text_files = data_files if data_files and data_files_format(data_files) == "text" else {}
    return [write_split(split, batches, text_files.get(split), tokenizer, vocab_size, args)
            for split, batches in splits.items()]


def write_split(split, batches, text_files, tokenizer, vocab_size, args):
    """Writes one split, from `batches` of texts, or in parts when it is `text_files` read whole; returns the
    manifest."""
    split_dir = os.path.join(args.output_dir, split)
    start_split(split_dir)
    parts = [None]  # One part, from `batches`.
    if text_files and args.limit is None:  # Parts of equal size: they take about the same time.
        sizes = [file_size(path) for path in text_files]
        num_workers = args.num_workers or max(1, min(available_cores(), sum(sizes) // MIN_BYTES_PER_WORKER))
        parts = plan_parts(text_files, sizes, num_workers)
    elif (args.num_workers or 1) > 1:
        logger.warning("%s: written by one process, not --num_workers %d: only text files read whole (without "
                       "--limit) are split between workers.", split, args.num_workers)
    if len(parts) > 1:
        written = write_parts_in_processes(split, parts, tokenizer, vocab_size, split_dir, args)
    else:
        with tqdm(desc=f"{split}: tokenizing", unit=" texts") as text_bar, \
                tqdm(desc=f"{split}: writing", unit=" samples") as sample_bar:
            def progress(num_texts, num_samples):
                text_bar.update(num_texts)
                sample_bar.update(num_samples)

            written = [write_part(0, batches, tokenizer, vocab_size, split_dir, args, progress)]
    return finish_split(split, split_dir, written, sum(part["token_counts"] for part in written), tokenizer,
                        vocab_size, args)


# ----------------------------------------------------------------------------------------------------------------
# Tokenizing


def load_tokenizer(name_or_path):
    """The 🤗 Tokenizers tokenizer that AutoTokenizer.from_pretrained(name_or_path) wraps, and its vocabulary size
    (added tokens included). A folder of train_unigram.py holds a plain PreTrainedTokenizerFast, which wraps its
    tokenizer.json as it is: loaded directly, it gives the same tokens without importing 🤗 Transformers. Anything
    else (a Hub id, a class that may adjust its tokenizer when it loads) goes through AutoTokenizer."""
    local_path = local_copy(name_or_path)
    tokenizer_file, config_file = (os.path.join(local_path, name) for name in ("tokenizer.json",
                                                                               "tokenizer_config.json"))
    if os.path.isfile(tokenizer_file) and os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
        # The settings with which PreTrainedTokenizerFast would change the tokenizer it loads.
        if config.get("tokenizer_class") == "PreTrainedTokenizerFast" and not any(
                config.get(setting) for setting in ("split_special_tokens", "add_prefix_space")):
            tokenizer = Tokenizer.from_file(tokenizer_file)
            return tokenizer, tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer = load_auto_tokenizer(name_or_path, "--tokenizer_name_or_path")
    if not tokenizer.is_fast:
        raise UserError(f"{name_or_path!r} has no fast (🤗 Tokenizers) version; train one with "
                        "train_unigram.py.")
    return tokenizer.backend_tokenizer, len(tokenizer)


def tokenize(tokenizer, texts):
    """The token ids of a batch of texts, concatenated, tokenized on all cores inside 🤗 Tokenizers (without the
    character offsets of encode_batch, which nothing here uses)."""
    encodings = tokenizer.encode_batch_fast(texts)
    return np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), np.int64)


def in_background(items):
    """The items of the iterator `items`, each computed in a thread while the caller works on the one before: 🤗
    Tokenizers releases Python's lock while it encodes. An error raised by `items` is raised here."""
    with ThreadPoolExecutor(1) as thread:
        future = thread.submit(next, items, None)
        while (item := future.result()) is not None:
            future = thread.submit(next, items, None)
            yield item


# ----------------------------------------------------------------------------------------------------------------
# The records, serialized without TensorFlow: the bytes that tf.io.TFRecordWriter writes for
# tf.train.Example(...).SerializeToString(deterministic=True), in a third of the time (benchmarks/README.md).
#
# Protobuf (https://protobuf.dev/programming-guides/encoding/): every field here is a tag, (field number << 3) | 2,
# then the length of its value as a varint, then the value; a varint is 7 bits per byte, lowest first, the top bit
# set on every byte but the last. The messages (tensorflow/core/example/example.proto and feature.proto):
#
#   Example   { Features features = 1; }
#   Features  { map<string, Feature> feature = 1; }   each entry { string key = 1; Feature value = 2; }, in key order
#   Feature   { Int64List int64_list = 3; ... }
#   Int64List { repeated int64 value = 1 [packed = true]; }   one field holding the varints
#
# TFRecord framing (tensorflow/core/lib/io/record_writer.cc), per record: uint64 length, little-endian; uint32
# masked_crc32c of those 8 bytes; the data; uint32 masked_crc32c of the data.


def varint(value):
    """The protobuf varint of a non-negative Python int."""
    encoded = bytearray()
    while value >= 0x80:
        encoded.append(value & 0x7F | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


def field_header(field_number, size):
    """Tag and length of a length-delimited protobuf field whose value takes `size` bytes."""
    return varint(field_number << 3 | 2) + varint(size)


def int64_feature_entry_prefix(name, values_size):
    """What precedes the packed varints (`values_size` bytes) of the int64 feature `name` in a Features message."""
    int64_list = field_header(1, values_size)  # Int64List.value
    feature = field_header(3, len(int64_list) + values_size)  # Feature.int64_list
    key = field_header(1, len(name.encode())) + name.encode()  # The map entry's key...
    value = field_header(2, len(feature) + len(int64_list) + values_size)  # ...and value.
    return field_header(1, len(key) + len(value) + len(feature) + len(int64_list) + values_size) + key + value \
        + feature + int64_list


def packed_varints(rows):
    """The varints of each row of a 2-D integer array, concatenated, and how many bytes each row takes: every value
    split into 7-bit groups at once, keeping the groups it needs, each with its continuation bit."""
    values = np.asarray(rows, np.int64).view(np.uint64)  # A negative int64 is encoded as its two's complement.
    width = len(varint(int(values.max())))
    sizes = np.ones(values.shape, np.int64)
    for group in range(1, width):
        sizes += values >= np.uint64(1 << 7 * group)
    groups = (values[..., np.newaxis] >> np.arange(width, dtype=np.uint64) * np.uint64(7) & np.uint64(0x7F))
    groups = groups.astype(np.uint8)
    positions = np.arange(width)
    groups |= (positions < sizes[..., np.newaxis] - 1).astype(np.uint8) << 7  # Continuation bits.
    return groups[positions < sizes[..., np.newaxis]].tobytes(), sizes.sum(axis=1)


def masked_crc32c(data):
    crc = google_crc32c.value(data)
    return ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF


class RecordSerializer:
    """Turns samples of token ids into TFRecord-framed tf.train.Example records, as bytes ready to be written: the
    varints of a batch at once with numpy; the bytes around them depend only on their size, computed once each."""

    def __init__(self, max_length):
        self.attention_mask_entry = int64_feature_entry_prefix("attention_mask", max_length) + b"\x01" * max_length
        self.prefixes = {}  # Size of a sample's input_ids varints -> the bytes of its record before them.
        self.length_headers = {}  # Size of a record -> its TFRecord length field and that field's CRC.

    def __call__(self, samples):
        values, sizes = packed_varints(samples)
        records, start = [], 0
        for end in np.cumsum(sizes).tolist():
            record = self.prefix(end - start) + values[start:end]
            records += [self.length_header(len(record)), record, struct.pack("<I", masked_crc32c(record))]
            start = end
        return b"".join(records)

    def prefix(self, values_size):
        if values_size not in self.prefixes:  # Entries in key order: "attention_mask" before "input_ids".
            input_ids_entry = int64_feature_entry_prefix("input_ids", values_size)
            features_size = len(self.attention_mask_entry) + len(input_ids_entry) + values_size
            self.prefixes[values_size] = field_header(1, features_size) + self.attention_mask_entry + input_ids_entry
        return self.prefixes[values_size]

    def length_header(self, size):
        if size not in self.length_headers:
            length = struct.pack("<Q", size)
            self.length_headers[size] = length + struct.pack("<I", masked_crc32c(length))
        return self.length_headers[size]


# ----------------------------------------------------------------------------------------------------------------
# Writing a split, part by part


class ShardWriter:
    """Writes the samples of one part of a split to shards of `shard_size` samples as they come, each under a
    temporary name, part-{part}-{i}.tfrecord.tmp: finish_split names them once every part is written."""

    CHUNK_SIZE = 1024  # Samples serialized at a time: bounds the serializer's memory whatever the batch size.

    def __init__(self, split_dir, shard_size, max_length, part):
        self.split_dir, self.shard_size, self.part = split_dir, shard_size, part
        self.serialize = RecordSerializer(max_length)
        self.file, self.num_in_file, self.bytes_in_file = None, 0, 0  # The open shard.
        self.shards = []  # {"file", "num_samples", "num_bytes"} of every complete shard, in order.

    def add(self, samples):
        while len(samples):
            if self.file is None:
                self.file = open_file(os.path.join(self.split_dir, f"part-{self.part}-{len(self.shards)}.tfrecord.tmp"),
                                      "wb")
            count = min(len(samples), self.shard_size - self.num_in_file, self.CHUNK_SIZE)
            records = self.serialize(samples[:count])
            self.file.write(records)
            self.num_in_file, self.bytes_in_file, samples = (self.num_in_file + count,
                                                             self.bytes_in_file + len(records), samples[count:])
            if self.num_in_file == self.shard_size:
                self.close()

    def close(self):
        if self.file is not None:
            self.file.close()
            self.shards.append({"file": f"part-{self.part}-{len(self.shards)}.tfrecord.tmp",
                                "num_samples": self.num_in_file, "num_bytes": self.bytes_in_file})
            self.file, self.num_in_file, self.bytes_in_file = None, 0, 0


def write_part(part, batches, tokenizer, vocab_size, split_dir, args, progress):
    """Writes part number `part` of a split: tokenizes its `batches` of texts, concatenates the tokens, cuts them
    every max_length tokens, writes the samples (see ShardWriter) and drops the tokens left at the end. Calls
    progress(texts, samples) after each batch. Returns what finish_split needs."""
    writer = ShardWriter(split_dir, args.shard_size, args.max_length, part)
    leftover = np.zeros(0, dtype=np.int64)  # Tokens that do not fill a sample yet: they begin the next one.
    token_counts = np.zeros(vocab_size, dtype=np.int64)  # Of the tokens written, for run_mlm.py's baseline.
    num_texts = 0
    for batch_texts, tokens in in_background((len(texts), tokenize(tokenizer, texts)) for texts in batches):
        stream = np.concatenate([leftover, tokens])
        num_samples = len(stream) // args.max_length
        samples, leftover = np.split(stream, [num_samples * args.max_length])
        writer.add(samples.reshape(num_samples, args.max_length))
        token_counts += np.bincount(samples, minlength=vocab_size)
        num_texts += batch_texts
        progress(batch_texts, num_samples)
    writer.close()
    return {"shards": writer.shards, "num_texts": num_texts, "dropped_tokens": len(leftover),
            "token_counts": token_counts}


def start_split(split_dir):
    """Makes `split_dir` an empty folder (with --overwrite, the split's old shards go) that says it is being
    written: INCOMPLETE, until finish_split."""
    delete(split_dir)
    if not is_gcs_path(split_dir):  # Cloud Storage has no folders: a name's prefix is one.
        os.makedirs(split_dir)
    with open_file(os.path.join(split_dir, INCOMPLETE_MARKER_NAME), "w") as f:
        f.write("prepare_tfrecord_shards.py has not finished writing this split: if it is not running, it was "
                "interrupted, and these shards are not the whole split. Run it again (with --overwrite).\n")


def finish_split(split, split_dir, parts, token_counts, tokenizer, vocab_size, args):
    """Publishes a split once all its `parts` (what write_part returned, in the order of the text) are written:
    names their shards dataset-{index}-{num_samples}.tfrecord, numbered across the parts, writes `token_counts` and
    the manifest, and only then deletes INCOMPLETE. Run again after an interruption (Beam retries a failed step), it
    skips the shards renamed before. Returns the manifest."""
    num_samples = sum(shard["num_samples"] for part in parts for shard in part["shards"])
    num_texts, dropped_tokens = (sum(part[name] for part in parts) for name in ("num_texts", "dropped_tokens"))
    if num_samples == 0:
        raise UserError(f"the {split} split gave no sample of {args.max_length} tokens ({num_texts} "
                        f"non-empty texts, {dropped_tokens} tokens). Give it more text, or lower --max_length.")
    shards = []
    for shard in (shard for part in parts for shard in part["shards"]):
        name = SHARD_NAME.format(index=len(shards), num_samples=shard["num_samples"])
        temporary, final = (os.path.join(split_dir, file) for file in (shard["file"], name))
        if exists(temporary) or not exists(final):  # A shard missing under both names is an error.
            rename(temporary, final)
        shards.append({**shard, "file": name})
    manifest = Manifest(split=split, max_length=args.max_length, num_samples=num_samples,
                        num_tokens=num_samples * args.max_length, dropped_tokens=dropped_tokens,
                        num_parts=len(parts), num_texts=num_texts, tokenizer=args.tokenizer_name_or_path,
                        vocab_size=vocab_size, vocabulary_fingerprint=vocabulary_fingerprint(tokenizer),
                        shards=shards)
    with open_file(os.path.join(split_dir, TOKEN_COUNTS_NAME), "w") as f:
        json.dump(token_counts.tolist(), f)
    manifest_path = os.path.join(split_dir, MANIFEST_NAME)  # Last: a split with a manifest is complete.
    with open_file(manifest_path + ".tmp", "w") as f:
        f.write(manifest.to_json())
    rename(manifest_path + ".tmp", manifest_path)
    delete(os.path.join(split_dir, INCOMPLETE_MARKER_NAME))
    return manifest


# ----------------------------------------------------------------------------------------------------------------
# Worker processes: a split of text files cut into contiguous parts, each written by a process of its own. However
# many cores tokenize for it, one process is held back by its one Python thread, which serializes and writes under
# Python's global lock (benchmarks/README.md); processes have a lock each.


def available_cores():
    """Cores this process may run on: its CPU affinity (set by taskset, or a container's cpuset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def plan_parts(paths, sizes, num_parts):
    """Cuts text files (`sizes` bytes each), one after the other, into `num_parts` contiguous parts of equal size
    (or one per byte, for fewer bytes), each a list of (path, start, end) byte ranges. The cuts fall anywhere:
    reading a byte range gives the lines that begin in it (utils.iter_text_file_lines), so the parts, read in
    order, give every line once, whole, in order."""
    file_starts = list(itertools.accumulate(sizes, initial=0))  # Where each file starts in the concatenation.
    total = file_starts.pop()
    cuts = sorted({total * k // num_parts for k in range(num_parts + 1)})
    return [[(path, max(start, first) - first, min(end, first + size) - first)
             for path, first, size in zip(paths, file_starts, sizes) if max(start, first) < min(end, first + size)]
            for start, end in zip(cuts, cuts[1:])]


def write_parts_in_processes(split, parts, tokenizer, vocab_size, split_dir, args):
    """write_part for each part of a split of text files, each in a process of its own; their results, in the order
    of the parts. If a worker fails, the others stop at their next batch, and its error ends the run (the split
    keeps its INCOMPLETE marker)."""
    # Processes started afresh ("spawn"), not forked: a forked copy would inherit the threads of 🤗 Tokenizers or
    # TensorFlow in whatever state they were.
    context = multiprocessing.get_context("spawn")
    counters = context.Value("q", 0), context.Value("q", 0)  # Texts and samples written by all workers so far.
    stop = context.Event()
    # Tokenizer threads per worker: workers x threads = cores; more would only wait for one another.
    threads = max(1, available_cores() // len(parts))
    logger.info("%s: %d worker processes, %d tokenizer thread(s) each, %.1f MiB of text each", split, len(parts),
                threads, sum(end - start for part in parts for _, start, end in part) / len(parts) / 2**20)
    results = [None] * len(parts)
    with ProcessPoolExecutor(len(parts), mp_context=context, initializer=start_worker,
                             initargs=(threads, counters, stop)) as workers, \
            tqdm(desc=f"{split}: tokenizing", unit=" texts") as text_bar, \
            tqdm(desc=f"{split}: writing", unit=" samples") as sample_bar:
        futures = {workers.submit(write_text_part, index, part, tokenizer, vocab_size, split_dir, args): index
                   for index, part in enumerate(parts)}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=1, return_when=FIRST_EXCEPTION)
                text_bar.update(counters[0].value - text_bar.n)
                sample_bar.update(counters[1].value - sample_bar.n)
                for future in done:
                    results[futures[future]] = future.result()  # Raises the worker's error, if any.
        except BrokenProcessPool as error:
            raise UserError(f"a worker process writing the {split} split ended abruptly (killed, or out of "
                            "memory?); the split is left INCOMPLETE. Run again with --overwrite (with fewer "
                            "--num_workers if memory ran out).") from error
        finally:
            stop.set()  # After a failure (or Ctrl-C), the other workers stop at their next batch.
    return results


worker_state = {}  # In each worker process: the shared counters and the stop signal.


def start_worker(threads, counters, stop):
    # 🤗 Tokenizers sizes its thread pool from RAYON_NUM_THREADS when it starts, at the first batch.
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    worker_state.update(counters=counters, stop=stop)


def report_progress(num_texts, num_samples):
    """write_part's progress in a worker: adds to the shared counters; stops when the main process says so."""
    for counter, count in zip(worker_state["counters"], (num_texts, num_samples)):
        with counter.get_lock():
            counter.value += count
    if worker_state["stop"].is_set():
        raise SystemExit("stopped: another worker failed")


def write_text_part(part, files, tokenizer, vocab_size, split_dir, args):
    """write_part for a part of text files (byte ranges, see plan_parts), in a worker process."""
    return write_part(part, iter_text_file_batches(files, args.batch_size), tokenizer, vocab_size, split_dir, args,
                      report_progress)


if __name__ == "__main__":
    try:
        main()
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
