#!/usr/bin/env python
"""Step 2 of 3: tokenize a corpus and write it as fixed-length samples in TFRecord shards.

Each split (train, validation, ...) is streamed in batches of texts. Empty and whitespace-only texts are skipped;
every other text is tokenized (the tokenizer of step 1 wraps it in <s> ... </s>), and the tokens of all texts
are concatenated into one stream that is cut into samples of exactly --max_length tokens. Cutting a stream
rather than padding or truncating each text keeps every token and wastes no compute on padding; the tokens left
over at the very end of a split (fewer than --max_length) are dropped and counted in the summary.

Samples are written --shard_size at a time to {output_dir}/{split}/. Many shards let run_mlm.py read files in
parallel and give each host of a multi-host job its own files. Memory stays bounded by about one shard plus one
batch of texts, whatever the size of the corpus.

On-disk format, per split folder:

    dataset-{index}-{num_samples}.tfrecord   index = 0, 1, 2, ...; num_samples = records in the file
    manifest.json                            written last, once every shard is complete

Each record is a serialized tf.train.Example with two int64 features, each a list of exactly max_length values:
    input_ids       token ids
    attention_mask  all ones (samples are never padded); kept so that readers of the original format work

A shard is written under a temporary name (".tfrecord.tmp" suffix) and renamed once complete, so a file named
*.tfrecord is never half-written. The manifest holds: split, max_length, num_samples, num_tokens, dropped_tokens,
tokenizer, vocab_size, and shards (a list of {"file", "num_samples"}).

Example:
    python prepare_tfrecord_shards.py --tokenizer_name_or_path unigram-tokenizer \\
        --train_file data/train.txt --validation_file data/validation.txt --output_dir tfrecords
"""

import argparse
import json
import logging
import os
import time

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from utils import MANIFEST_NAME, SHARD_NAME, check_output_dir, iter_text_batches, load_text_splits

logger = logging.getLogger("prepare_tfrecord_shards")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data (a Hub dataset by default, or local files with --*_file)")
    data.add_argument("--dataset_name", default="Salesforce/wikitext",
                      help="Dataset on the Hugging Face Hub (default: %(default)s).")
    data.add_argument("--dataset_config", default="wikitext-103-raw-v1",
                      help="Configuration of the Hub dataset (default: %(default)s).")
    data.add_argument("--split", nargs="+",
                      help="Splits of the Hub dataset to process (default: all of them).")
    for split in ("train", "validation", "test"):
        data.add_argument(f"--{split}_file", nargs="+",
                          help=f"Local text, JSON-lines or Parquet files for the {split} split, instead of the "
                               "Hub dataset. Each of --train_file, --validation_file, --test_file is optional.")
    data.add_argument("--text_column", default="text",
                      help="Column holding the text, for Hub datasets and JSON/Parquet files (default: %(default)s).")
    data.add_argument("--limit", type=int, help="Read only the first LIMIT records of each split (default: all).")
    data.add_argument("--trust_remote_code", action="store_true",
                      help="Allow a Hub dataset to run its own loading script (off by default).")
    parser.add_argument("--tokenizer_name_or_path", default="unigram-tokenizer",
                        help="Folder written by train_unigram.py, or a Hub tokenizer id (default: %(default)s).")
    parser.add_argument("--max_length", type=int, default=128,
                        help="Tokens per sample (default: %(default)s).")
    parser.add_argument("--shard_size", type=int, default=1000,
                        help="Samples per shard (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=1000,
                        help="Texts tokenized at a time (default: %(default)s).")
    parser.add_argument("--output_dir", default="tfrecords",
                        help="Folder that receives one sub-folder of shards per split (default: %(default)s).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Write into a non-empty --output_dir, replacing the shards of the splits written.")
    args = parser.parse_args()
    for flag in ("max_length", "shard_size", "batch_size", "limit"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag} must be a positive number, got {value}.")
    return args


def tokenize(tokenizer, texts):
    """Token ids of a batch of texts, concatenated in one array. Runs on all cores inside 🤗 Tokenizers."""
    encodings = tokenizer.backend_tokenizer.encode_batch_fast(texts)
    return np.concatenate([encoding.ids for encoding in encodings]).astype(np.int64)


def serialize_sample(input_ids, attention_mask_feature):
    """One sample as a serialized tf.train.Example (the format in the module docstring)."""
    example = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=input_ids)),
        "attention_mask": attention_mask_feature,
    }))
    return example.SerializeToString()


class ShardWriter:
    """Collects samples and writes them to shards of `shard_size` samples, each under a temporary name first."""

    def __init__(self, split_dir, shard_size, max_length):
        self.split_dir = split_dir
        self.shard_size = shard_size
        self.attention_mask_feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * max_length))
        self.pending = []  # Arrays of samples not yet written, fewer than shard_size samples in all.
        self.num_pending = 0
        self.shards = []  # {"file", "num_samples"} of every complete shard, in order.

    def add(self, samples):
        self.pending.append(samples)
        self.num_pending += len(samples)
        while self.num_pending >= self.shard_size:
            buffered = np.concatenate(self.pending)
            self._write(buffered[:self.shard_size])
            self.pending = [buffered[self.shard_size:]]
            self.num_pending = len(self.pending[0])

    def close(self):
        if self.num_pending:
            self._write(np.concatenate(self.pending))
        self.pending, self.num_pending = [], 0

    def _write(self, samples):
        name = SHARD_NAME.format(index=len(self.shards), num_samples=len(samples))
        path = os.path.join(self.split_dir, name)
        with tf.io.TFRecordWriter(path + ".tmp") as writer:
            for input_ids in samples:
                writer.write(serialize_sample(input_ids, self.attention_mask_feature))
        tf.io.gfile.rename(path + ".tmp", path, overwrite=False)
        self.shards.append({"file": name, "num_samples": len(samples)})


def write_split(split, dataset, tokenizer, args):
    """Tokenizes one split and writes its shards and manifest; returns the manifest."""
    split_dir = os.path.join(args.output_dir, split)
    if tf.io.gfile.exists(split_dir):  # Only reached with --overwrite: replace this split's old files.
        tf.io.gfile.rmtree(split_dir)
    tf.io.gfile.makedirs(split_dir)

    writer = ShardWriter(split_dir, args.shard_size, args.max_length)
    leftover = np.zeros(0, dtype=np.int64)  # Tokens that do not fill a sample yet; they begin the next one.
    num_texts = 0
    with tqdm(desc=f"{split}: tokenizing", unit=" texts") as text_bar, \
            tqdm(desc=f"{split}: writing", unit=" samples") as sample_bar:
        for texts in iter_text_batches(dataset, args.text_column, args.batch_size, args.limit):
            stream = np.concatenate([leftover, tokenize(tokenizer, texts)])
            num_samples = len(stream) // args.max_length
            writer.add(stream[:num_samples * args.max_length].reshape(num_samples, args.max_length))
            leftover = stream[num_samples * args.max_length:]
            num_texts += len(texts)
            text_bar.update(len(texts))
            sample_bar.update(num_samples)
        writer.close()

    num_samples = sum(shard["num_samples"] for shard in writer.shards)
    if num_samples == 0:
        raise SystemExit(f"error: the {split} split gave no sample of {args.max_length} tokens ({num_texts} "
                         f"non-empty texts, {len(leftover)} tokens). Give it more text, or lower --max_length.")
    manifest = {
        "split": split,
        "max_length": args.max_length,
        "num_samples": num_samples,
        "num_tokens": num_samples * args.max_length,
        "dropped_tokens": len(leftover),
        "num_texts": num_texts,
        "tokenizer": args.tokenizer_name_or_path,
        "vocab_size": len(tokenizer),
        "shards": writer.shards,
    }
    manifest_path = os.path.join(split_dir, MANIFEST_NAME)
    with tf.io.gfile.GFile(manifest_path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2)
    tf.io.gfile.rename(manifest_path + ".tmp", manifest_path, overwrite=True)
    return manifest


def main():
    args = parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    start = time.perf_counter()

    data_files = {split: getattr(args, f"{split}_file") for split in ("train", "validation", "test")
                  if getattr(args, f"{split}_file")}
    check_output_dir(args.output_dir, args.overwrite)  # Fail before the long part, not after it.
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name_or_path)
    if not tokenizer.is_fast:
        raise SystemExit(f"error: {args.tokenizer_name_or_path!r} has no fast (🤗 Tokenizers) version; "
                         "train one with train_unigram.py.")
    if data_files:
        splits = load_text_splits(data_files=data_files)
    else:
        splits = load_text_splits(dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                                  splits=args.split, trust_remote_code=args.trust_remote_code)

    manifests = [write_split(split, dataset, tokenizer, args) for split, dataset in splits.items()]

    seconds = time.perf_counter() - start
    num_tokens = sum(m["num_tokens"] for m in manifests)
    for m in manifests:
        logger.info("%s: %d samples (%d tokens, %d dropped at the end) in %d shards", m["split"],
                    m["num_samples"], m["num_tokens"], m["dropped_tokens"], len(m["shards"]))
    logger.info("Done in %.1f s: %d samples, %d tokens, %d shards, %.0f tokens/s, written to %s",
                seconds, sum(m["num_samples"] for m in manifests), num_tokens,
                sum(len(m["shards"]) for m in manifests), num_tokens / seconds, args.output_dir)


if __name__ == "__main__":
    main()
