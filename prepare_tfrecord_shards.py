#!/usr/bin/env python
"""Step 2 of 3: tokenize a corpus and write it as fixed-length samples in TFRecord shards.

Each split (train, validation, ...) is streamed in batches of texts. Empty and whitespace-only texts are skipped;
every other text is tokenized (the tokenizer of step 1 wraps it in <s> ... </s>), and the tokens of all texts
are concatenated into one stream that is cut into samples of exactly --max_length tokens. Cutting a stream
rather than padding or truncating each text keeps every token and wastes no compute on padding; the tokens left
over at the very end of a split (fewer than --max_length) are dropped and counted in the summary.

Samples are written --shard_size at a time to {output_dir}/{split}/. Many shards let run_mlm.py read files in
parallel and give each host of a multi-host job its own files. Memory stays bounded by a few batches of texts
and their tokens, whatever the size of the corpus and of the shards: samples go to disk as they are made.

On-disk format, per split folder:

    INCOMPLETE                               written first, deleted once the manifest is written
    dataset-{index}-{num_samples}.tfrecord   index = 0, 1, 2, ...; num_samples = records in the file
    token_counts.json                        how many times each token id occurs in the samples, a JSON list
    manifest.json                            written last, once every shard is complete

Each record is a serialized tf.train.Example with two int64 features, each a list of exactly max_length values:
    input_ids       token ids
    attention_mask  all ones (samples are never padded); kept so that readers of the original format work

A shard is written under a temporary name (".tfrecord.tmp" suffix) and renamed once complete, so a file named
*.tfrecord is never half-written; a split folder that still holds INCOMPLETE (or *.tfrecord.tmp files) was left by
an interrupted run, and run_mlm.py refuses it. The manifest holds: split, max_length, num_samples, num_tokens,
dropped_tokens, tokenizer, vocab_size, vocabulary_fingerprint (a hash of every token and its id, which run_mlm.py
compares with its tokenizer's), and shards (a list of {"file", "num_samples", "num_bytes"}; run_mlm.py checks the
sizes, so that a truncated shard is found before training).

Speed: the tokenizer sets the pace (benchmarks/shard_preparation.py measures it). It tokenizes on all cores, in
a background thread, while the main thread serializes and writes the samples of the previous batch. For text
files, local output and a tokenizer from train_unigram.py, nothing slow to import is imported: not TensorFlow
(3.7 s here, longer than tokenizing all of WikiText-2 takes), nor 🤗 Datasets or 🤗 Transformers (over a second
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
import os
import queue
import shutil
import struct
import threading
import time

import google_crc32c
import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from utils import (ATTENTION_MASK, INCOMPLETE_MARKER_NAME, INPUT_IDS, MANIFEST_NAME, SHARD_NAME, TOKEN_COUNTS_NAME,
                   Manifest, add_corpus_arguments,
                   check_gcs_path, check_output_dir, is_gcs_path, load_auto_tokenizer, local_copy, text_batches,
                   vocabulary_fingerprint)

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
                               "split, instead of the Hub dataset. Each of --train_file, --validation_file, "
                               "--test_file is optional.")
    parser.add_argument("--tokenizer_name_or_path", default="unigram-tokenizer",
                        help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id "
                             "(default: %(default)s).")
    parser.add_argument("--max_length", type=int, default=128,
                        help="Tokens per sample (default: %(default)s).")
    parser.add_argument("--shard_size", type=int, default=1000,
                        help="Samples per shard (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=1000,
                        help="Texts tokenized at a time (default: %(default)s).")
    parser.add_argument("--output_dir", default="tfrecords",
                        help="Folder that receives one sub-folder of shards per split, local or gs://bucket/folder "
                             "(default: %(default)s).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Write into a non-empty --output_dir, replacing the shards of the splits written.")
    args = parser.parse_args()
    for flag in ("max_length", "shard_size", "batch_size", "limit"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag} must be a positive number, got {value}.")
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
    """Writes samples to shards of `shard_size` samples as they come, each under a temporary name until complete."""

    # Samples serialized at a time: bounds the memory of the serializer's arrays whatever the batch size.
    CHUNK_SIZE = 1024

    def __init__(self, split_dir, shard_size, max_length):
        self.split_dir = split_dir
        self.shard_size = shard_size
        self.serialize = RecordSerializer(max_length)
        self.file = None  # The open shard, if any, and its number of samples so far.
        self.num_in_file = 0
        self.bytes_in_file = 0
        self.shards = []  # {"file", "num_samples", "num_bytes"} of every complete shard, in order.

    def add(self, samples):
        while len(samples):
            if self.file is None:
                self.file = open_for_writing(self._temporary_path())
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

    def _temporary_path(self):
        return os.path.join(self.split_dir, f"dataset-{len(self.shards)}.tfrecord.tmp")

    def _finish_shard(self):
        self.file.close()
        name = SHARD_NAME.format(index=len(self.shards), num_samples=self.num_in_file)
        rename(self._temporary_path(), os.path.join(self.split_dir, name))
        self.shards.append({"file": name, "num_samples": self.num_in_file, "num_bytes": self.bytes_in_file})
        self.file, self.num_in_file, self.bytes_in_file = None, 0, 0


def write_split(split, batches, tokenizer, vocab_size, args):
    """Tokenizes one split (an iterator of batches of texts), writes its shards and manifest; returns the manifest."""
    split_dir = os.path.join(args.output_dir, split)
    recreate_folder(split_dir)  # Only holds files with --overwrite: replace this split's old shards.
    # Until the manifest is written, the folder says that it holds part of the split at most (see run_mlm.py).
    marker_path = os.path.join(split_dir, INCOMPLETE_MARKER_NAME)
    with open_for_writing(marker_path, "w") as f:
        f.write("prepare_tfrecord_shards.py has not finished writing this split: if it is not running, it was "
                "interrupted, and these shards are not the whole split. Run it again (with --overwrite).\n")

    writer = ShardWriter(split_dir, args.shard_size, args.max_length)
    leftover = np.zeros(0, dtype=np.int64)  # Tokens that do not fill a sample yet; they begin the next one.
    token_counts = np.zeros(vocab_size, dtype=np.int64)  # Of the tokens written, for run_mlm.py's baseline.
    num_texts = 0
    tokenized = in_background((len(texts), tokenize(tokenizer, texts)) for texts in batches)
    with tqdm(desc=f"{split}: tokenizing", unit=" texts") as text_bar, \
            tqdm(desc=f"{split}: writing", unit=" samples") as sample_bar:
        for batch_texts, tokens in tokenized:
            stream = np.concatenate([leftover, tokens])
            num_samples = len(stream) // args.max_length
            samples = stream[:num_samples * args.max_length]
            writer.add(samples.reshape(num_samples, args.max_length))
            token_counts += np.bincount(samples, minlength=vocab_size)
            leftover = stream[num_samples * args.max_length:]
            num_texts += batch_texts
            text_bar.update(batch_texts)
            sample_bar.update(num_samples)
        writer.close()

    num_samples = sum(shard["num_samples"] for shard in writer.shards)
    if num_samples == 0:
        raise SystemExit(f"error: the {split} split gave no sample of {args.max_length} tokens ({num_texts} "
                         f"non-empty texts, {len(leftover)} tokens). Give it more text, or lower --max_length.")
    manifest = Manifest(split=split, max_length=args.max_length, num_samples=num_samples,
                        num_tokens=num_samples * args.max_length, dropped_tokens=len(leftover), num_texts=num_texts,
                        tokenizer=args.tokenizer_name_or_path, vocab_size=vocab_size,
                        vocabulary_fingerprint=vocabulary_fingerprint(tokenizer), shards=writer.shards)
    with open_for_writing(os.path.join(split_dir, TOKEN_COUNTS_NAME), "w") as f:
        json.dump(token_counts.tolist(), f)
    manifest_path = os.path.join(split_dir, MANIFEST_NAME)  # Last: a split with a manifest is complete.
    with open_for_writing(manifest_path + ".tmp", "w") as f:
        f.write(manifest.to_json())
    rename(manifest_path + ".tmp", manifest_path)
    remove(marker_path)
    return manifest


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
    tokenizer, vocab_size = load_tokenizer(args.tokenizer_name_or_path)
    splits = text_batches(data_files=data_files, dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                          splits=args.split, trust_remote_code=args.trust_remote_code, text_column=args.text_column,
                          batch_size=args.batch_size, limit=args.limit)

    manifests = [write_split(split, batches, tokenizer, vocab_size, args) for split, batches in splits.items()]

    seconds = time.perf_counter() - start
    num_tokens = sum(m.num_tokens for m in manifests)
    for m in manifests:
        logger.info("%s: %d samples (%d tokens, %d dropped at the end) in %d shards", m.split,
                    m.num_samples, m.num_tokens, m.dropped_tokens, len(m.shards))
    logger.info("Done in %.1f s: %d samples, %d tokens, %d shards, %.0f tokens/s, written to %s",
                seconds, sum(m.num_samples for m in manifests), num_tokens,
                sum(len(m.shards) for m in manifests), num_tokens / seconds, args.output_dir)


if __name__ == "__main__":
    main()
