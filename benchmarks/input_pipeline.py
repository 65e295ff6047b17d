#!/usr/bin/env python
"""Benchmark of run_mlm.py's input pipeline alone, against what a TPU would consume.

The pipeline is masked_lm.make_dataset, as training uses it: read the shards (32 files at a time), shuffle in a
buffer of 10,000 samples, batch, parse, mask (with the gathered head's masked positions). It runs on this
machine's CPU cores and feeds nothing: batches are pulled by a TensorFlow loop, with no Python per batch, after a
warm-up that fills the shuffle buffer. Shards come from the corpus (--train_file: WikiText-2 train), written by
prepare_tfrecord_shards.py at each sequence length; lengths are measured in turn, round after round, so that a busy
machine disturbs them alike. With --gcs_latency_ms, the shards are read over gs:// from the tests' Cloud Storage
emulator on 127.0.0.1 (tests/gcs_emulator.py: the test environment, `make test`, installs it), which holds back
each read by a latency drawn at random, as Cloud Storage's vary: its proxy shares the CPU with the pipeline, so
that speed is a lower bound.

The second table is what a TPU would consume training RoBERTa-base, at its published peak: samples/s = peak
FLOP/s / training FLOPs per sample (common.training_flops_per_sample, with the LM head at the default
--max_predictions_per_seq positions, or at every position). A real run reaches a fraction of peak, so these are
upper bounds: the input pipeline must deliver at least that much, per host.

    python benchmarks/input_pipeline.py      # the slice of WikiText-2 train in tests/data: a quick check only
    python benchmarks/input_pipeline.py --train_file ../shared/data/wikitext-2-v1/train.txt   # the README's figures
"""

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from common import (DEFAULT_TRAIN_FILE, REPO, SPECIAL_TOKEN_IDS, TRAIN_FILE_HELP, describe_machine, load_average,
                    median, print_table, train_tokenizer, training_flops_per_sample)

import tensorflow as tf  # noqa: E402  (after common, which quiets TensorFlow)
from transformers import RobertaConfig  # noqa: E402

from devices import TPU_PEAK_FLOPS  # noqa: E402
from masked_lm import default_max_predictions, make_dataset  # noqa: E402
from utils import non_negative_float  # noqa: E402

# A v3-8 or a v4-8 is one host with 4 chips (8 TensorCores); run_mlm.py has each chip's published peak.
TPU_HOSTS = {"TPU v3-8": 4 * TPU_PEAK_FLOPS["v3"], "TPU v4-8": 4 * TPU_PEAK_FLOPS["v4"]}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_file", default=str(DEFAULT_TRAIN_FILE), help=TRAIN_FILE_HELP)
    parser.add_argument("--tokenizer", help="Tokenizer folder (default: train one of 10,000 tokens on the corpus).")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512],
                        help="Sequence lengths (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=32,
                        help="Samples per batch, i.e. per replica (default: %(default)s).")
    parser.add_argument("--batches", type=int, default=2000, help="Batches timed per round (default: %(default)s).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of measurements (default: %(default)s).")
    parser.add_argument("--model_config", default=str(REPO / "configs" / "roberta-base.json"),
                        help="Model whose training a TPU would run (default: %(default)s).")
    parser.add_argument("--gcs_latency_ms", type=non_negative_float, default=0,
                        help="Read the shards from a Cloud Storage emulator whose reads each wait a latency of this "
                             "median, in milliseconds (default: %(default)s, local files).")
    parser.add_argument("--gcs_latency_sigma", type=non_negative_float, default=1.0,
                        help="The spread of those latencies: the sigma of their log-normal distribution (1: one "
                             "read in 100 waits over 10 times the median) (default: %(default)s).")
    return parser.parse_args()


def write_shards(train_file, tokenizer, length, output_dir):
    """WikiText shards of `length` tokens per sample, about 500 KB each whatever the length (as in a real run, the
    pipeline reads many files); returns the files and the vocabulary size."""
    subprocess.run([sys.executable, str(REPO / "prepare_tfrecord_shards.py"), "--tokenizer_name_or_path", tokenizer,
                    "--train_file", train_file, "--max_length", str(length), "--shard_size",
                    str(128_000 // length), "--output_dir", output_dir], check=True, capture_output=True)
    with open(os.path.join(output_dir, "train", "manifest.json")) as f:
        manifest = json.load(f)
    return [os.path.join(output_dir, "train", shard["file"]) for shard in manifest["shards"]], manifest["vocab_size"]


def upload_to_emulator(stack, shards, args):
    """The shards (write_shards' per length) uploaded to a Cloud Storage emulator that lives as long as `stack`,
    whose reads each wait a log-normal latency (--gcs_latency_ms, --gcs_latency_sigma); returns them as gs:// paths.
    This process reads gs:// through it from now on."""
    sys.path.insert(0, str(REPO / "tests"))
    from gcs_emulator import GcsEmulator

    mu = math.log(args.gcs_latency_ms / 1000)
    gcs = stack.enter_context(GcsEmulator(log_level="error",
                                          read_delay=lambda: random.lognormvariate(mu, args.gcs_latency_sigma)))
    bucket = gcs.create_bucket("shards")
    # The environment the emulator gives a subprocess, for this process: TensorFlow reads it at its first gs://
    # access, still to come here.
    environment = gcs.env()
    os.environ.clear()
    os.environ.update(environment)
    uploaded = {}
    for length, (files, vocab_size) in shards.items():
        for file in files:
            bucket.blob(f"{length}/{os.path.basename(file)}").upload_from_filename(file)
        uploaded[length] = [f"gs://shards/{length}/{os.path.basename(file)}" for file in files], vocab_size
    return uploaded


@tf.function
def pull(iterator, num_batches):
    """Takes `num_batches` batches from the iterator inside TensorFlow: no Python runs per batch."""
    checksum = tf.constant(0, tf.int64)
    for _ in tf.range(num_batches):
        batch = next(iterator)
        checksum += tf.cast(batch["input_ids"][0, 0] + batch["masked_positions"][0, 0], tf.int64)
    return checksum


def pipeline_speed(files, vocab_size, length, args):
    """Samples per second of make_dataset at this length, after a warm-up that fills the shuffle buffer."""
    masking = dict(mask_token_id=4, special_token_ids=SPECIAL_TOKEN_IDS, vocab_size=vocab_size,
                   mlm_probability=0.15, max_predictions=default_max_predictions(0.15, length))
    dataset = make_dataset(files, tf.distribute.InputContext(), batch_size=args.batch_size, max_length=length,
                           masking=masking, seed=0, training=True, shuffle_buffer_size=10_000)
    iterator = iter(dataset)
    pull(iterator, tf.constant(20_000 // args.batch_size + 50))  # Fill the buffer, let tf.data tune itself.
    start = time.perf_counter()
    pull(iterator, tf.constant(args.batches))
    return args.batches * args.batch_size / (time.perf_counter() - start)


def main():
    args = parse_args()
    config = RobertaConfig.from_json_file(args.model_config)
    with tempfile.TemporaryDirectory(prefix="pipeline-benchmark-") as scratch, contextlib.ExitStack() as stack:
        tokenizer = args.tokenizer
        if not tokenizer:
            tokenizer = os.path.join(scratch, "tokenizer")
            train_tokenizer(args.train_file, tokenizer)
        shards = {length: write_shards(args.train_file, tokenizer, length, os.path.join(scratch, str(length)))
                  for length in args.lengths}
        if args.gcs_latency_ms:
            shards = upload_to_emulator(stack, shards, args)
        speeds = {length: [] for length in args.lengths}
        loads = [load_average()]
        for round_number in range(args.rounds):
            for length in args.lengths:
                speeds[length].append(pipeline_speed(*shards[length], length, args))
            loads.append(load_average())
            print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)

    print(f"Machine: {describe_machine()}; TensorFlow {tf.__version__}; load average during the run "
          f"{min(loads):.1f} to {max(loads):.1f}")
    print(f"Pipeline: masked_lm.make_dataset(training=True), shards of {args.train_file}, batches of {args.batch_size}, "
          f"shuffle buffer 10,000, masking 15 %; {args.batches} batches timed, median of {args.rounds} rounds")
    if args.gcs_latency_ms:
        p99 = args.gcs_latency_ms * math.exp(statistics.NormalDist().inv_cdf(0.99) * args.gcs_latency_sigma)
        print(f"Read over gs:// from an emulator on 127.0.0.1, each read waiting a log-normal latency: median "
              f"{args.gcs_latency_ms:g} ms, 99th percentile {p99:,.0f} ms")
    print()
    print_table(["length", "samples/s", "range", "tokens/s"],
                [[length, f"{median(s):,.0f}", f"{min(s):,.0f} to {max(s):,.0f}", f"{median(s) * length:,.0f}"]
                 for length, s in speeds.items()])

    print(f"What a TPU would consume at peak, training {os.path.basename(args.model_config)} (hidden "
          f"{config.hidden_size}, {config.num_hidden_layers} layers, intermediate {config.intermediate_size}, "
          f"vocabulary {config.vocab_size}); K = default --max_predictions_per_seq:\n")
    rows = []
    for length in args.lengths:
        flops = {}
        for head, positions in (("K", default_max_predictions(0.15, length)), ("all", length)):
            flops[head] = training_flops_per_sample(config.hidden_size, config.num_hidden_layers,
                                                    config.intermediate_size, config.vocab_size, length, positions)
        for tpu, peak in TPU_HOSTS.items():
            consumed = peak / flops["K"]
            rows.append([tpu, length, f"{peak / 1e12:.0f}", f"{default_max_predictions(0.15, length)}",
                         f"{flops['K'] / 1e9:.1f}", f"{consumed:,.0f}", f"{flops['all'] / 1e9:.1f}",
                         f"{peak / flops['all']:,.0f}", f"{median(speeds[length]) / consumed:.1f}"])
    print_table(["TPU", "length", "peak TFLOP/s", "K", "GFLOP/sample, head at K", "samples/s at peak",
                 "GFLOP/sample, full head", "samples/s at peak, full head", "pipeline / TPU (head at K)"], rows)


if __name__ == "__main__":
    main()
