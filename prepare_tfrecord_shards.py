#!/usr/bin/env python
"""Step 2 of 3: tokenize a corpus and write it as fixed-length samples in TFRecord shards.

Each split (train, validation, ...) is streamed in batches of texts. Empty and whitespace-only texts are skipped;
every other text is tokenized (the tokenizer of step 1 wraps it in <s> ... </s>), and the tokens of all texts
are concatenated into one stream that is cut into samples of exactly --max_length tokens. Cutting a stream
rather than padding or truncating each text keeps every token and wastes no compute on padding; the tokens left
over at the very end of the stream (fewer than --max_length) are dropped and counted in the summary.

Several workers: a split of text files read whole (no --limit) is cut into contiguous parts of whole lines, one
per worker process (--num_workers; by default one per core, but at most one per 16 MiB of text, so a small corpus
is one part written by this process). Each worker tokenizes its part as one stream, cuts it and writes its own
shards. So what changes with more than one part: the tokens left over are dropped at the end of each part, not
only at the end of the split (at most max_length - 1 tokens per part), and no sample spans two parts. What does
not: samples keep the order of the text, part after part; every sample is max_length consecutive tokens of the
text; the shards are numbered across the parts in that order; the manifest counts them exactly. Hub datasets and
JSON-lines or Parquet files (read through 🤗 Datasets, as one stream) are written by this process alone.

Many machines: with --runner, the same per-part work runs as an Apache Beam pipeline, on this machine
(DirectRunner) or on Dataflow (DataflowRunner), over text, JSON-lines or Parquet files (local or gs://, globs
allowed), each text or JSON-lines file cut into parts of --part_size_mb, each Parquet file one part. The output is
the same format, with a manifest written last (see run_beam_pipeline and the README).

Samples are written --shard_size at a time to {output_dir}/{split}/. Many shards let run_mlm.py read files in
parallel and give each host of a multi-host job its own files. Memory stays bounded by a few batches of texts
and their tokens in each process, whatever the size of the corpus and of the shards: samples go to disk as they
are made.

On-disk format, per split folder:

    INCOMPLETE                               written first, deleted once the manifest is written
    dataset-{index}-{num_samples}.tfrecord   index = 0, 1, 2, ...; num_samples = records in the file
    token_counts.json                        how many times each token id occurs in the samples, a JSON list
    manifest.json                            written last, once every shard is complete

Each record is a serialized tf.train.Example with two int64 features, each a list of exactly max_length values:
    input_ids       token ids
    attention_mask  all ones (samples are never padded); kept so that readers of the original format work

A shard is written under a temporary name (part-{part}-{i}.tfrecord.tmp) and renamed once complete (those of the
first part at once; the others' once every part is written, when their index is known), so a file named *.tfrecord
is never half-written; a split folder that still holds INCOMPLETE (or *.tfrecord.tmp files) was left by an
interrupted or failed run, and run_mlm.py refuses it. The manifest holds: split, max_length, num_samples,
num_tokens, dropped_tokens, num_parts, tokenizer, vocab_size, vocabulary_fingerprint (a hash of every token and its
id, which run_mlm.py compares with its tokenizer's), and shards (a list of {"file", "num_samples", "num_bytes"};
run_mlm.py checks the sizes, so that a truncated shard is found before training).

Speed: the tokenizer sets the pace (benchmarks/shard_preparation.py measures it). In each process it tokenizes in
a background thread (on all cores with one process; on cores / workers threads each with several), while the main
thread serializes and writes the samples of the previous batch. For text
files, local output and a tokenizer from train_unigram.py, nothing slow to import is imported: not TensorFlow
(slower to import than a small corpus is to tokenize), nor 🤗 Datasets or 🤗 Transformers (over a second
each). The records are serialized here, with numpy, into the very bytes that tf.io.TFRecordWriter writes for
tf.train.Example(...).SerializeToString(deterministic=True) (see RecordSerializer; a test checks it); text files
are read directly; such a tokenizer is loaded with 🤗 Tokenizers alone. TensorFlow's file layer comes in for gs://
output only, 🤗 Datasets for Hub datasets and JSON-lines or Parquet files, 🤗 Transformers for other tokenizers.

Google Cloud Storage: text files, the tokenizer folder and --output_dir may all be gs:// paths; each is checked
(credentials, bucket, permissions) before anything is tokenized.

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
import queue
import shutil
import struct
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

import google_crc32c
import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from utils import (ATTENTION_MASK, INCOMPLETE_MARKER_NAME, INPUT_IDS, MANIFEST_NAME, MIN_MAX_LENGTH, SHARD_NAME,
                   TOKEN_COUNTS_NAME, Manifest, add_corpus_arguments, check_gcs_path, check_output_dir,
                   data_files_format, gcs_client, is_gcs_path, iter_text_file_batches, load_auto_tokenizer,
                   local_copy, split_gcs_path, text_batches, vocabulary_fingerprint)

logger = logging.getLogger("prepare_tfrecord_shards")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data (a Hub dataset by default, or files with --*_file)")
    add_corpus_arguments(data)
    data.add_argument("--split", nargs="+",
                      help="Splits of the Hub dataset to process (default: all of them).")
    for split in ("train", "validation", "test"):
        data.add_argument(f"--{split}_file", nargs="+",
                          help=f"Text files (local or gs://), or local JSON-lines or Parquet files, for the {split} "
                               "split, instead of the Hub dataset (with --runner: all three on gs:// too, and globs "
                               "in quotes). Each of --train_file, --validation_file, --test_file is optional.")
    parser.add_argument("--tokenizer_name_or_path", default="unigram-tokenizer",
                        help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id "
                             "(default: %(default)s).")
    parser.add_argument("--max_length", type=int, default=128,
                        help=f"Tokens per sample, at least {MIN_MAX_LENGTH}: a sample may hold a document bound "
                             "(</s> <s>), and a masked token needs context around it (default: %(default)s).")
    parser.add_argument("--shard_size", type=int, default=1000,
                        help="Samples per shard (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=1000,
                        help="Texts tokenized at a time (default: %(default)s).")
    parser.add_argument("--num_workers", type=int,
                        help="Processes that tokenize and write a split of text files side by side, each its own "
                             "contiguous part of the text (default: one per core, but at most one per "
                             f"{MIN_BYTES_PER_WORKER // 2**20} MiB of text, so one for small corpora). Hub datasets, "
                             "JSON-lines and Parquet files, and --limit, are read by one process.")
    parser.add_argument("--output_dir", default="tfrecords",
                        help="Folder that receives one sub-folder of shards per split, local or gs://bucket/folder "
                             "(default: %(default)s).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Write into a non-empty --output_dir, replacing the shards of the splits written.")
    beam = parser.add_argument_group(
        "Apache Beam (pip install -r requirements-beam.txt): the same shards, written by a Beam pipeline")
    beam.add_argument("--runner",
                      help="Write the shards with an Apache Beam pipeline on this runner: DirectRunner (this "
                           "machine) or DataflowRunner (Google Cloud), for input files only (--train_file ..., "
                           "globs allowed). Beam's own pipeline options follow on the command line and are passed "
                           "to it (Dataflow: --project, --region, --temp_location, --worker_machine_type, "
                           "--max_num_workers, --requirements_file, --setup_file, --sdk_container_image, ...); "
                           "--num_workers, if given, "
                           "is passed too (Dataflow: its initial number of machines).")
    beam.add_argument("--part_size_mb", type=float, default=DEFAULT_PART_SIZE_MB,
                      help="With --runner: each text or JSON-lines file is cut into parts of at most this many "
                           "MiB, each written by one worker core; a Parquet file is one part (default: "
                           "%(default)s).")
    args, args.beam_args = parser.parse_known_args()
    if args.beam_args and not args.runner:
        parser.error(f"unrecognized arguments: {' '.join(args.beam_args)}")
    for flag in ("max_length", "shard_size", "batch_size", "limit", "num_workers", "part_size_mb"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            parser.error(f"--{flag} must be a positive number, got {value}.")
    if args.max_length < MIN_MAX_LENGTH:
        parser.error(f"--max_length must be at least {MIN_MAX_LENGTH}, got {args.max_length}: shorter samples "
                     "leave too few tokens to mask, with too little context. Pass --max_length 128, or at least "
                     f"{MIN_MAX_LENGTH}.")
    return args


# ----------------------------------------------------------------------------------------------------------------
# Reading and tokenizing


def load_tokenizer(name_or_path):
    """The 🤗 Tokenizers tokenizer that `AutoTokenizer.from_pretrained(name_or_path)` wraps, and its vocabulary size
    (added tokens included, as `len(tokenizer)` counts it).

    A folder written by train_unigram.py holds a plain PreTrainedTokenizerFast, which wraps its tokenizer.json as
    it is: loading that file directly gives the same tokens without importing 🤗 Transformers. Anything else (a
    Hub id, a model-specific tokenizer class that may adjust its tokenizer when loaded) goes through AutoTokenizer.
    """
    local_path = local_copy(name_or_path)
    tokenizer_file = os.path.join(local_path, "tokenizer.json")
    config_file = os.path.join(local_path, "tokenizer_config.json")
    if os.path.isfile(tokenizer_file) and os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
        # The settings with which PreTrainedTokenizerFast would change the tokenizer it loads.
        if config.get("tokenizer_class") == "PreTrainedTokenizerFast" and not any(
                config.get(setting) for setting in ("split_special_tokens", "add_prefix_space")):
            tokenizer = Tokenizer.from_file(tokenizer_file)
            return tokenizer, tokenizer.get_vocab_size(with_added_tokens=True)

    tokenizer = load_auto_tokenizer(local_path, name_or_path, "--tokenizer_name_or_path")
    if not tokenizer.is_fast:
        raise SystemExit(f"error: {name_or_path!r} has no fast (🤗 Tokenizers) version; "
                         "train one with train_unigram.py.")
    return tokenizer.backend_tokenizer, len(tokenizer)


def tokenize(tokenizer, texts):
    """Token ids of a batch of texts, concatenated in one array. Runs on all cores inside 🤗 Tokenizers."""
    encodings = tokenizer.encode_batch_fast(texts)  # encode_batch without character offsets, which we never use.
    return np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), np.int64)


def in_background(items, depth=2):
    """Yields the items of the iterator `items`, computed in a background thread up to `depth` items ahead.

    An exception raised by `items` is raised here, in the caller's thread. Work that releases Python's lock, such
    as 🤗 Tokenizers' encoding, then overlaps with the caller's own work on the previous items.
    """
    done = object()
    results = queue.Queue(maxsize=depth)

    def produce():
        try:
            for item in items:
                results.put((item, None))
        except BaseException as error:  # SystemExit included: the caller re-raises it.
            results.put((None, error))
        results.put((done, None))

    threading.Thread(target=produce, daemon=True).start()  # A daemon: it never keeps a failed run alive.
    while True:
        item, error = results.get()
        if error is not None:
            raise error
        if item is done:
            return
        yield item


# ----------------------------------------------------------------------------------------------------------------
# Serializing: tf.train.Example records in TFRecord files, without TensorFlow
#
# Protobuf wire format (https://protobuf.dev/programming-guides/encoding/). A field is a tag, (field number << 3)
# | wire type, followed by its value; every field here has wire type 2, "length-delimited": the tag, then the
# value's length in bytes as a varint, then the value's bytes. A varint is 7 bits per byte, lowest bits first,
# with the top bit set on every byte but the last (300 = 0b10_0101100 -> 0xAC 0x02). The messages involved
# (tensorflow/core/example/example.proto and feature.proto):
#
#   Example   { Features features = 1; }
#   Features  { map<string, Feature> feature = 1; }   each entry a message { string key = 1; Feature value = 2; }
#   Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
#   Int64List { repeated int64 value = 1 [packed = true]; }   packed: one length-delimited field of varints
#
# So one sample serializes as
#
#   0x0A len(Features)                                                    Example.features
#     0x0A len(entry) 0x0A 14 "attention_mask" 0x12 len(Feature)          Features.feature, map entry
#       0x1A len(Int64List) 0x0A len(varints) varint(1) * max_length       Feature.int64_list, Int64List.value
#     0x0A len(entry) 0x0A 9 "input_ids" 0x12 len(Feature)
#       0x1A len(Int64List) 0x0A len(varints) varint(id) for each id
#
# with the map entries in key order, as protobuf's deterministic serialization orders them. An int64 is the
# varint of its 64-bit two's complement (a negative one takes 10 bytes); token ids are never negative.
#
# TFRecord framing (tensorflow/core/lib/io/record_writer.cc), per record:
#
#   uint64 length, little-endian | uint32 masked_crc32c(those 8 bytes) | data | uint32 masked_crc32c(data)
#
# where masked_crc32c(x) = ((crc >> 15 | crc << 17) + 0xA282EAD8) mod 2**32, with crc the CRC-32C of x.


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
    """What precedes the packed varints (`values_size` bytes) of int64 feature `name` in a Features message."""
    int64_list = field_header(1, values_size)  # Int64List.value
    feature = field_header(3, len(int64_list) + values_size)  # Feature.int64_list
    feature_size = len(feature) + len(int64_list) + values_size
    key = field_header(1, len(name.encode())) + name.encode()  # map entry key
    value = field_header(2, feature_size)  # map entry value
    entry_size = len(key) + len(value) + feature_size
    return field_header(1, entry_size) + key + value + feature + int64_list  # Features.feature


def packed_varints(rows):
    """The varints of each row of a 2-D integer array, concatenated; and how many bytes each row takes.

    Vectorized: every value is split into 7-bit groups at once, and only the groups that the value needs are
    kept, each with its continuation bit.
    """
    values = np.asarray(rows, np.int64).view(np.uint64)  # A negative int64 is encoded as its two's complement.
    width = len(varint(int(values.max())))  # Bytes of the longest varint here.
    sizes = np.ones(values.shape, np.int64)
    for group in range(1, width):
        sizes += values >= np.uint64(1 << 7 * group)
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = (values[..., np.newaxis] >> shifts & np.uint64(0x7F)).astype(np.uint8)
    positions = np.arange(width)
    groups |= (positions < sizes[..., np.newaxis] - 1).astype(np.uint8) << 7  # Continuation bits.
    return groups[positions < sizes[..., np.newaxis]].tobytes(), sizes.sum(axis=1)


def masked_crc32c(data):
    crc = google_crc32c.value(data)
    return ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF


class RecordSerializer:
    """Turns samples of token ids into TFRecord-framed tf.train.Example records, as bytes ready to be written.

    The bytes that tf.io.TFRecordWriter writes for `tf.train.Example(features=tf.train.Features(feature={
    "input_ids": ..., "attention_mask": ...})).SerializeToString(deterministic=True)`, sample after sample, in a
    third of the time (0.2 s against 0.7 s for WikiText-2), and without importing TensorFlow: the varints of a
    batch of samples are computed at once with numpy, and the bytes around them depend only on their length, so
    they are computed once per length.
    """

    def __init__(self, max_length):
        ones_size = max_length  # The varint of 1 is one byte.
        self.attention_mask_entry = int64_feature_entry_prefix(ATTENTION_MASK, ones_size) + b"\x01" * ones_size
        self.prefixes = {}  # Size of a sample's input_ids varints -> the bytes of its record that precede them.
        self.length_headers = {}  # Size of a record -> its TFRecord length field and that field's CRC.

    def __call__(self, samples):
        values, sizes = packed_varints(samples)
        records = []
        start = 0
        for end in np.cumsum(sizes).tolist():
            record = self._prefix(end - start) + values[start:end]
            records += [self._length_header(len(record)), record, struct.pack("<I", masked_crc32c(record))]
            start = end
        return b"".join(records)

    def _prefix(self, values_size):
        if values_size not in self.prefixes:
            input_ids_entry = int64_feature_entry_prefix(INPUT_IDS, values_size)
            features_size = len(self.attention_mask_entry) + len(input_ids_entry) + values_size
            self.prefixes[values_size] = (field_header(1, features_size) + self.attention_mask_entry
                                          + input_ids_entry)
        return self.prefixes[values_size]

    def _length_header(self, size):
        if size not in self.length_headers:
            length = struct.pack("<Q", size)
            self.length_headers[size] = length + struct.pack("<I", masked_crc32c(length))
        return self.length_headers[size]


# ----------------------------------------------------------------------------------------------------------------
# Files: local paths with the standard library, gs:// paths with TensorFlow's file layer (imported only then)


def gfile():
    import tensorflow as tf  # Only for gs:// paths: it takes seconds to import.

    return tf.io.gfile


def open_for_writing(path, mode="wb"):
    return gfile().GFile(path, mode) if is_gcs_path(path) else open(path, mode)


def rename(source, destination):
    """Moves `source` to `destination`, replacing it if it exists (atomic on local file systems)."""
    if is_gcs_path(source):
        gfile().rename(source, destination, overwrite=True)
    else:
        os.replace(source, destination)


def exists(path):
    return gfile().exists(path) if is_gcs_path(path) else os.path.exists(path)


def publish(temporary, final):
    """Renames a complete shard to its final name. Run again after an interruption (as Beam retries a failed step),
    it skips a shard renamed by the run before, and only such a one: a shard missing under both names is an error.
    """
    if exists(temporary) or not exists(final):
        rename(temporary, final)


def remove(path):
    if is_gcs_path(path):
        gfile().remove(path)
    else:
        os.remove(path)


def recreate_folder(path):
    """Makes `path` an empty folder, deleting what it held."""
    if is_gcs_path(path):
        if gfile().exists(path):
            gfile().rmtree(path)
        gfile().makedirs(path)
    else:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)


# ----------------------------------------------------------------------------------------------------------------
# Writing


class ShardWriter:
    """Writes the samples of one part of a split to shards of `shard_size` samples as they come, each under a
    temporary name, part-{part}-{i}.tfrecord.tmp, until complete.

    The shards of the first part (part 0) are numbered from 0, so each takes its final name,
    dataset-{i}-{num_samples}.tfrecord, as soon as it is complete: a split written as one part is published shard by
    shard. Those of the other parts keep their temporary names: finish_split numbers them after the shards of the
    parts before, once every part is written.
    """

    # Samples serialized at a time: bounds the memory of the serializer's arrays whatever the batch size.
    CHUNK_SIZE = 1024

    def __init__(self, split_dir, shard_size, max_length, part):
        self.split_dir = split_dir
        self.shard_size = shard_size
        self.part = part
        self.serialize = RecordSerializer(max_length)
        self.file = None  # The open shard, if any, and its number of samples so far.
        self.num_in_file = 0
        self.bytes_in_file = 0
        self.shards = []  # {"file", "num_samples", "num_bytes"} of every complete shard, in order.

    def add(self, samples):
        while len(samples):
            if self.file is None:
                self.file = open_for_writing(os.path.join(self.split_dir, self._temporary_name()))
            count = min(len(samples), self.shard_size - self.num_in_file, self.CHUNK_SIZE)
            records = self.serialize(samples[:count])
            self.file.write(records)
            self.num_in_file += count
            self.bytes_in_file += len(records)
            samples = samples[count:]
            if self.num_in_file == self.shard_size:
                self._finish_shard()

    def close(self):
        if self.file is not None:
            self._finish_shard()

    def _temporary_name(self):
        return f"part-{self.part}-{len(self.shards)}.tfrecord.tmp"

    def _finish_shard(self):
        self.file.close()
        name = self._temporary_name()
        if self.part == 0:
            final_name = SHARD_NAME.format(index=len(self.shards), num_samples=self.num_in_file)
            rename(os.path.join(self.split_dir, name), os.path.join(self.split_dir, final_name))
            name = final_name
        self.shards.append({"file": name, "num_samples": self.num_in_file, "num_bytes": self.bytes_in_file})
        self.file, self.num_in_file, self.bytes_in_file = None, 0, 0


def write_part(part, batches, tokenizer, vocab_size, split_dir, args, progress):
    """Writes part number `part` of a split: tokenizes its texts (`batches`, an iterator of lists of texts),
    concatenates the tokens, cuts them every args.max_length tokens and writes the samples to shards in `split_dir`
    (see ShardWriter). The tokens left at the end of the part, fewer than max_length, are dropped.

    Calls progress(texts, samples) after each batch. Returns what finish_split needs: {"shards", "num_texts",
    "dropped_tokens", "token_counts"}. Memory stays at a few batches, whatever the size of the part.
    """
    writer = ShardWriter(split_dir, args.shard_size, args.max_length, part)
    leftover = np.zeros(0, dtype=np.int64)  # Tokens that do not fill a sample yet; they begin the next one.
    token_counts = np.zeros(vocab_size, dtype=np.int64)  # Of the tokens written, for run_mlm.py's baseline.
    num_texts = 0
    for batch_texts, tokens in in_background((len(texts), tokenize(tokenizer, texts)) for texts in batches):
        stream = np.concatenate([leftover, tokens])
        num_samples = len(stream) // args.max_length
        samples = stream[:num_samples * args.max_length]
        writer.add(samples.reshape(num_samples, args.max_length))
        token_counts += np.bincount(samples, minlength=vocab_size)
        leftover = stream[num_samples * args.max_length:]
        num_texts += batch_texts
        progress(batch_texts, num_samples)
    writer.close()
    return {"shards": writer.shards, "num_texts": num_texts, "dropped_tokens": len(leftover),
            "token_counts": token_counts}


def start_split(split_dir):
    """Makes `split_dir` an empty folder that says it is being written: INCOMPLETE, until finish_split."""
    recreate_folder(split_dir)  # Only holds files with --overwrite: replace this split's old shards.
    # Until the manifest is written, the folder says that it holds part of the split at most (see run_mlm.py).
    with open_for_writing(os.path.join(split_dir, INCOMPLETE_MARKER_NAME), "w") as f:
        f.write("prepare_tfrecord_shards.py has not finished writing this split: if it is not running, it was "
                "interrupted, and these shards are not the whole split. Run it again (with --overwrite).\n")


def finish_split(split, split_dir, parts, token_counts, tokenizer, vocab_size, args):
    """Publishes a split once every one of its `parts` (what write_part returned, in the order of the text) is
    written: names their shards dataset-{index}-{num_samples}.tfrecord, numbered across the parts in that order,
    writes `token_counts` (the sum of the parts') to token_counts.json, then the manifest, and only then deletes
    INCOMPLETE. Returns the manifest."""
    num_samples = sum(shard["num_samples"] for part in parts for shard in part["shards"])
    num_texts = sum(part["num_texts"] for part in parts)
    dropped_tokens = sum(part["dropped_tokens"] for part in parts)
    if num_samples == 0:
        raise SystemExit(f"error: the {split} split gave no sample of {args.max_length} tokens ({num_texts} "
                         f"non-empty texts, {dropped_tokens} tokens). Give it more text, or lower --max_length.")
    shards = []
    for part in parts:
        for shard in part["shards"]:
            name = SHARD_NAME.format(index=len(shards), num_samples=shard["num_samples"])
            if shard["file"] != name:  # The first part's shards have their final names already.
                publish(os.path.join(split_dir, shard["file"]), os.path.join(split_dir, name))
            shards.append({**shard, "file": name})
    manifest = Manifest(split=split, max_length=args.max_length, num_samples=num_samples,
                        num_tokens=num_samples * args.max_length, dropped_tokens=dropped_tokens,
                        num_parts=len(parts), num_texts=num_texts, tokenizer=args.tokenizer_name_or_path,
                        vocab_size=vocab_size, vocabulary_fingerprint=vocabulary_fingerprint(tokenizer),
                        shards=shards)
    with open_for_writing(os.path.join(split_dir, TOKEN_COUNTS_NAME), "w") as f:
        json.dump(token_counts.tolist(), f)
    manifest_path = os.path.join(split_dir, MANIFEST_NAME)  # Last: a split with a manifest is complete.
    with open_for_writing(manifest_path + ".tmp", "w") as f:
        f.write(manifest.to_json())
    rename(manifest_path + ".tmp", manifest_path)
    remove(os.path.join(split_dir, INCOMPLETE_MARKER_NAME))
    return manifest


def write_split(split, batches, text_files, tokenizer, vocab_size, args):
    """Tokenizes one split and writes its shards and manifest; returns the manifest.

    `batches` iterates over its batches of texts. When the split is a list of text files (`text_files`) read
    whole (no --limit), it is cut into parts, one per worker process (see plan_parts); otherwise, or with one
    worker, this process writes it, as one part, from `batches`.
    """
    split_dir = os.path.join(args.output_dir, split)
    start_split(split_dir)
    parts = [None]  # One part: the whole split, from `batches`.
    if text_files and args.limit is None:  # Parts of equal size: they take about the same time.
        sizes = [file_size(path) for path in text_files]
        num_workers = args.num_workers or max(1, min(available_cores(), sum(sizes) // MIN_BYTES_PER_WORKER))
        parts = plan_parts(text_files, sizes, num_workers)
    elif args.num_workers and args.num_workers > 1:
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
    token_counts = sum(part["token_counts"] for part in written)
    return finish_split(split, split_dir, written, token_counts, tokenizer, vocab_size, args)


def write_splits_here(data_files, args):
    """Writes every split with this machine's processes (see write_split); returns the manifests."""
    tokenizer, vocab_size = load_tokenizer(args.tokenizer_name_or_path)
    splits = text_batches(data_files=data_files, dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                          splits=args.split, trust_remote_code=args.trust_remote_code, text_column=args.text_column,
                          batch_size=args.batch_size, limit=args.limit)
    # Text files can be cut into parts for several workers; what goes through 🤗 Datasets is read as one stream.
    text_files = data_files if data_files and data_files_format(data_files) == "text" else {}
    return [write_split(split, batches, text_files.get(split), tokenizer, vocab_size, args)
            for split, batches in splits.items()]


# ----------------------------------------------------------------------------------------------------------------
# Several worker processes: a split of text files cut into contiguous parts, each tokenized, cut into samples and
# written by a process of its own.
#
# One process cannot go faster than about 3 million tokens per second, however many cores tokenize: its one Python
# thread turns token ids into arrays, serializes and writes, under Python's global lock. Processes have a lock
# each, so their throughput adds up with the cores.

# The least text worth a worker of its own. A worker takes a few tenths of a second to start (a new Python, the
# imports, the tokenizer) and drops up to max_length - 1 tokens at the end of its part: beside 16 MiB of text, 6 to
# 8 seconds of tokenizing for one core, both are negligible. With less text per worker, start-up takes a growing
# share, while one process, every core tokenizing for it, writes a small corpus in about the same time.
MIN_BYTES_PER_WORKER = 16 * 2**20


def available_cores():
    """Cores this process may run on: those of its CPU affinity (set by taskset, or a container's cpuset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def file_size(path):
    if is_gcs_path(path):
        bucket, name = split_gcs_path(path)
        return gcs_client().bucket(bucket).get_blob(name).size
    return os.path.getsize(path)


def plan_parts(paths, sizes, num_parts):
    """Cuts text files (`sizes` bytes each), taken one after the other, into `num_parts` contiguous parts of equal
    size (or one per byte, for fewer bytes), each a list of (path, start, end) byte ranges.

    The cuts fall anywhere: reading a byte range gives the lines that begin in it (see utils.open_text), so the
    parts, read in order, give every line of the files once, in order, and each line whole.
    """
    file_starts = list(itertools.accumulate(sizes, initial=0))  # Position of each file in the concatenation.
    total = file_starts.pop()
    cuts = sorted({total * k // num_parts for k in range(num_parts + 1)})
    return [[(path, max(start, first) - first, min(end, first + size) - first)
             for path, first, size in zip(paths, file_starts, sizes) if max(start, first) < min(end, first + size)]
            for start, end in zip(cuts, cuts[1:])]


def write_parts_in_processes(split, parts, tokenizer, vocab_size, split_dir, args):
    """Runs write_part on each part of a split of text files, each in a worker process of its own; returns their
    results, in the order of the parts. If a worker fails, the others stop at their next batch, and its error ends
    the run (the split folder keeps its INCOMPLETE marker)."""
    # Processes started afresh ("spawn"), not copies of this one ("fork"): this process may already run the
    # threads of 🤗 Tokenizers or TensorFlow, which a forked copy would inherit in whatever state they were.
    context = multiprocessing.get_context("spawn")
    counters = context.Value("q", 0), context.Value("q", 0)  # Texts and samples written by all workers so far.
    stop = context.Event()
    # Each worker tokenizes with cores / workers threads: workers × threads = cores. More threads than cores would
    # only make them wait for one another, and each process also runs a thread that serializes and writes.
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
            raise SystemExit(f"error: a worker process writing the {split} split ended abruptly (killed, or out of "
                             "memory?); the split is left INCOMPLETE. Run again with --overwrite (with fewer "
                             "--num_workers if memory ran out).") from error
        finally:
            stop.set()  # After a failure (or Ctrl-C), the other workers stop at their next batch; else a no-op.
    return results


# What each worker process keeps from start_worker: the counters of texts and samples, and the stop signal.
worker_state = {}


def start_worker(threads, counters, stop):
    """Runs first in each worker process."""
    # 🤗 Tokenizers' thread pool (Rust's rayon) reads its size from RAYON_NUM_THREADS when it starts, at the first
    # batch: set before it, this bounds the threads of this process (see write_parts_in_processes). Whether it uses
    # threads at all (TOKENIZERS_PARALLELISM) is left as the user set it: what that variable guards against, a
    # pool inherited from a parent by fork, cannot happen in a spawned process.
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    worker_state.update(counters=counters, stop=stop)


def report_progress(num_texts, num_samples):
    """write_part's progress callback in a worker process: adds to the shared counters, and stops the part when the
    main process says so."""
    for counter, count in zip(worker_state["counters"], (num_texts, num_samples)):
        with counter.get_lock():
            counter.value += count
    if worker_state["stop"].is_set():
        raise SystemExit("stopped: another worker failed")


def write_text_part(part, files, tokenizer, vocab_size, split_dir, args):
    """write_part for a part of text files (byte ranges, see plan_parts), in a worker process."""
    batches = iter_text_file_batches(files, args.batch_size)
    return write_part(part, batches, tokenizer, vocab_size, split_dir, args, report_progress)


# Text per part with --runner, by default: a file is cut into parts of at most this size (Parquet files are one part
# each). A part is a unit of work for one worker core: 256 MiB are a few minutes of tokenizing, long beside the
# seconds a worker takes to start a part, short enough that thousands of parts spread a large corpus over many
# workers; the tokens dropped at the end of each part (< max_length) are a few in 70 million.
DEFAULT_PART_SIZE_MB = 256


def main():
    args = parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    start = time.perf_counter()

    data_files = {split: getattr(args, f"{split}_file") for split in ("train", "validation", "test")
                  if getattr(args, f"{split}_file")}
    # Fail before the long part, not after it.
    for path in [args.tokenizer_name_or_path, *(path for paths in data_files.values() for path in paths)]:
        check_gcs_path(path)
    check_gcs_path(args.output_dir, write=True)
    check_output_dir(args.output_dir, args.overwrite)
    if args.runner:
        if not data_files:
            raise SystemExit("error: with --runner, pass input files (--train_file, --validation_file, --test_file; "
                             "globs allowed): the Beam pipeline does not read Hub datasets.")
        from beam_pipeline import run_beam_pipeline  # Only here: Beam is installed for --runner alone.

        manifests = run_beam_pipeline(data_files, args)
    else:
        manifests = write_splits_here(data_files, args)

    seconds = time.perf_counter() - start
    num_tokens = sum(m.num_tokens for m in manifests)
    for m in manifests:
        logger.info("%s: %d samples (%d tokens, %d dropped at the ends of %d part(s)) in %d shards", m.split,
                    m.num_samples, m.num_tokens, m.dropped_tokens, m.num_parts, len(m.shards))
    logger.info("Done in %.1f s: %d samples, %d tokens, %d shards, %.0f tokens/s, written to %s",
                seconds, sum(m.num_samples for m in manifests), num_tokens,
                sum(len(m.shards) for m in manifests), num_tokens / seconds, args.output_dir)


if __name__ == "__main__":
    main()
