#!/usr/bin/env python
"""Step 3 of 3: pre-train a masked language model from scratch on the TFRecord shards of step 2.

The model is a 🤗 Transformers TF…ForMaskedLM (RoBERTa by default) built from a config, never from pretrained
weights, trained with Keras `model.fit` under a tf.distribute strategy:

    TPUStrategy                    on a TPU VM (its chips are found in sysfs), or a TPU Node or pod slice
                                   (--tpu_name NAME)
    MultiWorkerMirroredStrategy    when TF_CONFIG describes a multi-host GPU / CPU cluster
    MirroredStrategy               over several GPUs (or --num_cpu_replicas CPU devices)
    OneDeviceStrategy              on one GPU, or the CPU (--no_tpu, or no TPU)

Everything that runs per batch obeys the rules of XLA, the compiler behind TPUs (used here on GPUs too): no Python
`if` on tensor values, no shape that depends on values, one input shape. So batches always hold the same number of
samples of exactly max_length tokens, and the loss is a sum over masked positions divided by their count, never a
boolean selection of them.

The input pipeline is TensorFlow ops only, so that it also runs on a TPU Node, whose host cannot run Python for it.
It masks on the fly ("dynamic masking"): each epoch sees new masks. Evaluation batches are masked from a fixed
seed, so that evaluation figures compare across epochs and runs. Metrics count masked positions only: loss (mean
cross-entropy per masked token), masked_accuracy and perplexity; they also go to TensorBoard, {output_dir}/logs.

Checkpoints go to {output_dir}/checkpoints every --checkpoint_every_steps; the same command run again resumes from
the last one (export_model.py makes a model folder of it). At the end, the model and tokenizer are saved with
save_pretrained to --output_dir, ready for `pipeline("fill-mask", model=output_dir, framework="tf")`, and a copy
for 🤗 Transformers 5 with PyTorch to {output_dir}/pytorch. Every path may be gs://bucket/folder, as a TPU Node and
the hosts of a pod slice need; each is checked (credentials, bucket, permission) before anything else starts.

Example (a small model on a CPU):
    python run_mlm.py --train_dataset tfrecords/train --eval_dataset tfrecords/validation \\
        --tokenizer unigram-tokenizer --config_overrides hidden_size=256,num_hidden_layers=4,... --no_tpu
"""

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import signal
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
# 🤗 Transformers' TF models are Keras 2 models. Since TensorFlow 2.16, Keras 2 is the separate tf-keras package,
# and `tf.keras` is Keras 3: every Keras object here must come from tf_keras.
import tf_keras as keras
from transformers import AutoConfig, TFAutoModelForMaskedLM, create_optimizer

from utils import (ATTENTION_MASK, INCOMPLETE_MARKER_NAME, INPUT_IDS, MANIFEST_NAME, MIN_MAX_LENGTH,
                   SHARD_NAME_PATTERN, TOKEN_COUNTS_NAME, Manifest, add_hardware_arguments, clear_run_state,
                   count_hosts, host_addresses, is_gcs_path, load_auto_tokenizer, local_copy, model_card_usage,
                   model_name, position_offset, refuse_a_file, save_final_folder, save_pytorch_copy, set_up_training,
                   strategy_name, vocabulary_fingerprint)

logger = logging.getLogger("run_mlm")
def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hardware_arguments(parser)

    data = parser.add_argument_group("data")
    data.add_argument("--train_dataset", default="tfrecords/train",
                      help="Folder of training shards, or a glob such as gs://bucket/train/*.tfrecord "
                           "(default: %(default)s).")
    data.add_argument("--eval_dataset", help="Folder or glob of evaluation shards (default: no evaluation).")
    data.add_argument("--shards_on_every_host", action="store_true",
                      help="On a TPU pod slice, accept local shard paths: you copied the shards to the same path on "
                           "every host. Without it, a pod slice needs gs:// shards, since each host reads its own.")
    data.add_argument("--max_length", type=int, default=128,
                      help=f"Tokens per sample; must match the shards, and be at least {MIN_MAX_LENGTH} "
                           "(default: %(default)s).")
    data.add_argument("--shuffle_buffer_size", type=int, default=10_000,
                      help="Samples held in the shuffle buffer; larger mixes better, costs host memory "
                           "(default: %(default)s).")
    data.add_argument("--mlm_probability", type=float, default=0.15,
                      help="Fraction of the non-special tokens to mask (default: %(default)s).")
    data.add_argument("--max_predictions_per_seq", type=int,
                      help="Masked positions per sequence at most: the LM head computes vocabulary logits there only "
                           "(0: at every position). Default: mlm_probability x max_length plus a margin, e.g. 32 "
                           "for 0.15 x 128.")

    model = parser.add_argument_group("model")
    model.add_argument("--tokenizer", default="unigram-tokenizer",
                       help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id "
                            "(default: %(default)s).")
    model.add_argument("--pretrained_model_config", default="FacebookAI/roberta-base",
                       help="Architecture to train from scratch: a Hub model id, a folder holding config.json, or a "
                            "config file (local or gs://). Only the config is read, never weights "
                            "(default: %(default)s).")
    model.add_argument("--config_overrides",
                       help="Comma-separated changes to the config, e.g. "
                            "hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024.")
    model.add_argument("--output_bias", choices=["frequencies", "zeros"], default="frequencies",
                       help="Initial bias of the LM head's output layer: `frequencies`, each token's log-frequency "
                            "in the training shards (their token_counts.json), so that the first steps need not "
                            "learn it; `zeros`, as 🤗 Transformers initialises it (default: %(default)s).")

    training = parser.add_argument_group("training")
    training.add_argument("--per_replica_batch_size", type=int, default=8,
                          help="Samples per replica and step; the global batch is this times the number of "
                               "replicas times --gradient_accumulation_steps (default: %(default)s).")
    training.add_argument("--gradient_accumulation_steps", type=int, default=1,
                          help="Micro-batches per replica and step, their gradients added up before one optimizer "
                               "step: a larger batch in the same memory (default: %(default)s).")
    training.add_argument("--learning_rate", type=float, default=1e-4, help="Peak learning rate (default: %(default)s).")
    training.add_argument("--weight_decay_rate", type=float, default=1e-3,
                          help="Decoupled weight decay (AdamW); LayerNorm weights and biases are never decayed "
                               "(default: %(default)s).")
    warmup = training.add_mutually_exclusive_group()
    warmup.add_argument("--warmup_steps", type=int, help="Steps of linear warmup before the linear decay.")
    warmup.add_argument("--warmup_ratio", type=float, default=0.05,
                        help="Warmup as a fraction of all steps, when --warmup_steps is not given (default: %(default)s).")
    length = training.add_mutually_exclusive_group()
    length.add_argument("--num_epochs", type=int, default=1, help="Passes over the training data (default: %(default)s).")
    length.add_argument("--max_steps", type=int, help="Optimizer steps to train for, instead of --num_epochs.")
    training.add_argument("--eval_every_steps", type=int,
                          help="Evaluate (and log to TensorBoard) every this many steps (default: once per epoch).")
    training.add_argument("--checkpoint_every_steps", type=int, default=1000,
                          help="Save a checkpoint to resume from every this many steps (default: %(default)s).")
    training.add_argument("--seed", type=int, default=42,
                          help="Seed for weights, data order and masks (default: %(default)s).")

    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", default="mlm-model",
                        help="Folder for checkpoints, TensorBoard logs and the final model, local or "
                             "gs://bucket/folder; on a TPU pod slice or a multi-host job, a gs:// folder "
                             "(default: %(default)s).")
    output.add_argument("--overwrite", action="store_true",
                        help="Start from scratch even if --output_dir holds checkpoints or other files.")
    output.add_argument("--hub_model_id", help="Push the final model and tokenizer to this Hub repository.")
    args = parser.parse_args()

    for flag in ("num_cpu_replicas", "max_length", "shuffle_buffer_size", "per_replica_batch_size",
                 "gradient_accumulation_steps", "num_epochs", "max_steps", "steps_per_execution",
                 "eval_every_steps", "checkpoint_every_steps", "warmup_steps"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "warmup_steps" else 1):
            parser.error(f"--{flag} must be {'non-negative' if flag == 'warmup_steps' else 'positive'}, got {value}.")
    if args.max_length < MIN_MAX_LENGTH:
        parser.error(f"--max_length must be at least {MIN_MAX_LENGTH}, got {args.max_length}: shorter samples leave "
                     "too few tokens to mask, with too little context. Write shards of 128 tokens, or at least "
                     f"{MIN_MAX_LENGTH}, with prepare_tfrecord_shards.py.")
    if not 0 < args.mlm_probability < 1:
        parser.error(f"--mlm_probability must be between 0 and 1, got {args.mlm_probability}.")
    if not 0 <= args.warmup_ratio < 1:
        parser.error(f"--warmup_ratio must be in [0, 1), got {args.warmup_ratio}.")
    if args.max_predictions_per_seq is None:
        args.max_predictions_per_seq = default_max_predictions(args.mlm_probability, args.max_length)
    if not 0 <= args.max_predictions_per_seq <= args.max_length:
        parser.error(f"--max_predictions_per_seq must be between 0 and --max_length, got {args.max_predictions_per_seq}.")
    return args


def main(args):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    strategy, on_tpu, jit_compile = set_up_training(
        args, input_paths=(args.train_dataset, args.eval_dataset, args.tokenizer, args.pretrained_model_config))

    # Check the data and the config before building anything, so that mistakes cost seconds, not minutes.
    tokenizer = load_tokenizer(args)
    train_files, train_sizes = find_shards(args.train_dataset, args.max_length, tokenizer, args.tokenizer)
    eval_files, eval_sizes = find_shards(args.eval_dataset, args.max_length, tokenizer, args.tokenizer) \
        if args.eval_dataset else (None, None)
    config = load_config(args, tokenizer)
    plan = plan_training(args, strategy, train_sizes, eval_sizes)
    if on_tpu:
        check_paths_for_pod(args, plan.num_hosts)
    log_plan(args, strategy, plan, on_tpu, jit_compile, train_files, eval_files)

    run = TrainingRun(args, strategy)
    if run.is_complete(plan.total_steps):
        return
    run.prepare_output_dir()
    run.refuse_to_resume_with_another_plan(plan, args)
    run.save_config(config, tokenizer)
    with strategy.scope():
        trainer, learning_rate = build_trainer(args, config, tokenizer, plan, jit_compile, train_files)
        run.restore(trainer.mlm, trainer.optimizer)
    run.record_batch(plan, args)
    logger.info("Model: %s with %.1fM parameters", config.model_type, trainer.mlm.count_params() / 1e6)

    data = MaskedLMData(args, strategy, plan, tokenizer, train_files, eval_files)
    tensorboard = TensorBoardLogger(run.log_dir, learning_rate)
    if run.start_step == 0 and eval_files:
        with damaged_shards_named(eval_files):
            metrics = trainer.evaluate(data.evaluation(), steps=plan.eval_steps, return_dict=True, verbose=0)
        logger.info("Evaluation before training: %s", format_metrics(metrics))
        tensorboard.write("eval", metrics, step=0)
        run.record("step_0_eval", metrics)

    train(trainer, run, data, plan, callbacks=[run, tensorboard])
    run.finish()  # Exits here after a stop signal or a NaN loss.
    logger.info("Weights fingerprint: %s", weights_fingerprint(trainer.mlm))
    warn_if_nothing_learned_from_context(run.results)
    if run.is_chief:
        save_model(args, trainer, tokenizer, config, run, plan)


def load_tokenizer(args):
    tokenizer = load_auto_tokenizer(local_copy(args.tokenizer), args.tokenizer, "--tokenizer")
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise SystemExit(f"error: the tokenizer {args.tokenizer!r} has no mask or pad token; "
                         "train one with train_unigram.py.")
    return tokenizer


def log_plan(args, strategy, plan, on_tpu, jit_compile, train_files, eval_files):
    """What will run where: a user reads here whether the hardware, batch and steps are the ones meant."""
    logger.info("Strategy: %s with %d replica(s) on %d host(s); global batch %d (%d per replica x %d replicas x %d "
                "accumulation steps); XLA %s; %s", strategy_name(strategy), strategy.num_replicas_in_sync,
                plan.num_hosts, plan.global_batch_size, args.per_replica_batch_size, strategy.num_replicas_in_sync,
                args.gradient_accumulation_steps, "implicit (TPU)" if on_tpu else "on" if jit_compile else "off",
                "bfloat16 mixed precision" if args.bfloat16 else "float32")
    if plan.num_hosts > 1:
        logger.info("Hosts, each with an input pipeline of its own: %s", ", ".join(host_addresses(strategy)))
    logger.info("Training: %d samples in %d shards, %d steps per epoch, %d steps in all; evaluation: %s; "
                "LM head at %s", plan.train_samples, len(train_files), plan.steps_per_epoch, plan.total_steps,
                f"{plan.eval_samples} samples, {plan.eval_steps} steps" if eval_files else "none",
                f"{args.max_predictions_per_seq} positions per sequence" if args.max_predictions_per_seq
                else "every position")


def train(trainer, run, data, plan, callbacks):
    """Trains from run.start_step to plan.total_steps in rounds (Keras epochs) of plan.eval_every steps, each ending
    with an evaluation (see fit_calls). Each fit call's dataset is seeded by its first step, so that a resumed run
    does not replay the data and masks that the interrupted run began with."""
    start_time = time.perf_counter()
    for first, round_steps, num_rounds in fit_calls(run.start_step, plan.total_steps, plan.eval_every):
        logger.info("Steps %d to %d of %d, in %d round(s) of %d steps, each ending with an evaluation", first + 1,
                    first + round_steps * num_rounds, plan.total_steps, num_rounds, round_steps)
        with damaged_shards_named(data.train_files + (data.eval_files or [])):
            trainer.fit(data.training(first_step=first), steps_per_epoch=round_steps,
                        # Epochs numbered from the run's start, so that Keras' progress lines count rounds of the run.
                        initial_epoch=first // plan.eval_every, epochs=first // plan.eval_every + num_rounds,
                        validation_data=data.evaluation(), validation_steps=plan.eval_steps, callbacks=callbacks,
                        verbose=1 if sys.stdout.isatty() else 2)
        if run.stopping:
            return
    steps = int(trainer.optimizer.iterations.numpy()) - run.start_step
    if steps:
        seconds = time.perf_counter() - start_time
        logger.info("Trained %d steps in %.0f s (%.1f samples/s)", steps, seconds,
                    steps * plan.global_batch_size / seconds)


def warn_if_nothing_learned_from_context(results):
    """Below a tenth of a nat, the model has learned token frequencies and next to nothing from the context."""
    beyond_frequency = results.get("final_eval", {}).get("nats_beyond_frequency")
    if beyond_frequency is not None and beyond_frequency < 0.1:
        logger.warning("At <mask> positions, the model predicts tokens %s a table of token frequencies does "
                       "(%+.3f nats): it has learned next to nothing from the context yet. Train longer, or with "
                       "another recipe (learning rate, batch size, masking rate).",
                       "worse than" if beyond_frequency < 0 else "barely better than", beyond_frequency)


# ----------------------------------------------------------------------------------------------------------------
# Data


def find_shards(path, max_length, tokenizer=None, tokenizer_name=None):
    """The shard files of a folder or glob and their sample counts, checked against max_length and, when given,
    the `tokenizer` (which the user named `tokenizer_name`). Counts come from manifest.json or, for shards of the
    original Transformers example, from the file names. The checks read the manifest, the file list and at most
    one record: cheap, before anything is built."""
    is_folder = tf.io.gfile.isdir(path)
    files = sorted(tf.io.gfile.glob(os.path.join(path, "*.tfrecord") if is_folder else path))
    folder = os.path.dirname(files[0]) if files else path if is_folder else None
    manifest_path = folder and os.path.join(folder, MANIFEST_NAME)
    has_manifest = folder is not None and tf.io.gfile.exists(manifest_path)
    if folder is not None and not has_manifest:
        refuse_interrupted_split(folder)
    if not files:
        raise SystemExit(f"error: no .tfrecord shard found at {path!r}. Check the path, or write shards there "
                         "with prepare_tfrecord_shards.py.")
    if has_manifest:
        with tf.io.gfile.GFile(manifest_path, "rb") as f:
            manifest = Manifest.from_json(f.read(), manifest_path)
        listed = {shard["file"]: shard for shard in manifest.shards}
        unlisted = [file for file in files if os.path.basename(file) not in listed]
        if unlisted:
            raise SystemExit(f"error: {unlisted[0]!r} is not listed in {manifest_path!r}: the folder mixes shards "
                             "of different runs. Write the shards again into an empty folder.")
        sizes = [listed[os.path.basename(file)]["num_samples"] for file in files]
        shard_max_length = manifest.max_length
        refuse_shards_of_the_wrong_size(files, listed, manifest_path)
        if tokenizer is not None:
            refuse_another_vocabulary(path, manifest, tokenizer, tokenizer_name)
    else:
        logger.warning("The shards at %r have no %s, so this script cannot check that they are the whole split, "
                       "nor that they were written with the tokenizer --tokenizer names (shards of the original "
                       "Transformers example have none). Shards written by prepare_tfrecord_shards.py always "
                       "have one: write them again with it to have these checks.", path, MANIFEST_NAME)
        matches = [SHARD_NAME_PATTERN.search(os.path.basename(file)) for file in files]
        if not all(matches):
            raise SystemExit(f"error: cannot count the samples of the shards at {path!r}: there is no "
                             f"{MANIFEST_NAME}, and not every file is named dataset-INDEX-NUM_SAMPLES.tfrecord.")
        sizes = [int(match.group(2)) for match in matches]
        with damaged_shards_named(files[:1]):
            first_record = next(iter(tf.data.TFRecordDataset(files[0]).take(1))).numpy()
        shard_max_length = len(tf.train.Example.FromString(first_record).features.feature[INPUT_IDS].int64_list.value)
    if shard_max_length != max_length:
        raise SystemExit(f"error: the shards at {path!r} hold samples of {shard_max_length} tokens, but "
                         f"--max_length is {max_length}. Pass --max_length {shard_max_length}, or write new shards.")
    return files, sizes


def check_paths_for_pod(args, num_hosts):
    """Refuses paths that the hosts of a TPU pod slice cannot all reach. One process on worker 0 drives them all,
    but each host runs its own input pipeline and saves its own part of each checkpoint: a local path means each
    host's own disk."""
    if num_hosts == 1:
        return
    local_shards = [path for path in (args.train_dataset, args.eval_dataset) if path and not is_gcs_path(path)]
    if local_shards and not args.shards_on_every_host:
        raise SystemExit(
            f"error: this TPU has {num_hosts} hosts, and each reads its own shards, but {local_shards[0]!r} is a "
            "local path, which the other hosts cannot see. Copy the shards to a bucket (`gcloud storage cp -r "
            f"{local_shards[0]} gs://BUCKET/...`) and pass the gs:// path; or, if you copied them to this same path "
            "on every host, pass --shards_on_every_host.")
    if not is_gcs_path(args.output_dir):
        raise SystemExit(f"error: this TPU has {num_hosts} hosts, and each saves its own part of every checkpoint, "
                         f"but --output_dir {args.output_dir!r} is a local path. Pass a gs:// folder.")


def read_frequency_table(files, tokenizer):
    """frequency_log_probs of the token counts beside the training shards; None for older or foreign shards
    without them, which leaves the frequency baseline out of the metrics."""
    path = os.path.join(os.path.dirname(files[0]), TOKEN_COUNTS_NAME)
    if not tf.io.gfile.exists(path):
        logger.warning("No %s beside the training shards: the metrics leave out the token-frequency baseline. "
                       "Write the shards again with prepare_tfrecord_shards.py to have it.", TOKEN_COUNTS_NAME)
        return None
    with tf.io.gfile.GFile(path) as f:  # One count per token id: find_shards has checked the vocabulary.
        return frequency_log_probs(json.load(f), tokenizer.all_special_ids)


def refuse_interrupted_split(folder):
    """Stops when `folder`, which has no manifest, holds what an interrupted prepare_tfrecord_shards.py leaves: its
    INCOMPLETE marker, or a shard still under its temporary name."""
    leftovers = [name for name in (INCOMPLETE_MARKER_NAME, "*.tfrecord.tmp")
                 if tf.io.gfile.glob(os.path.join(folder, name))]
    if leftovers:
        raise SystemExit(
            f"error: the shards at {folder!r} are incomplete: prepare_tfrecord_shards.py was interrupted while "
            f"writing them (the folder holds {' and '.join(leftovers)}, and no {MANIFEST_NAME}). Run "
            "prepare_tfrecord_shards.py again, with --overwrite, and let it finish.")


def refuse_shards_of_the_wrong_size(files, listed, manifest_path):
    """Stops when a shard's size differs from the manifest's (a truncated copy, or another shard): one stat per
    shard. Older manifests record no sizes: their shards are checked when read."""
    wrong = []
    for file in files:
        expected = listed[os.path.basename(file)].get("num_bytes")
        size = tf.io.gfile.stat(file).length if expected is not None else None
        if size != expected:
            wrong.append(f"{file} ({size} bytes, {expected} expected)")
    if wrong:
        raise SystemExit(f"error: {len(wrong)} shard(s) do not have the size that {manifest_path!r} records, so "
                         f"they are truncated or damaged (an interrupted copy?): {', '.join(wrong)}. Copy the "
                         "shards again, or write them again with prepare_tfrecord_shards.py (with --overwrite).")


def refuse_another_vocabulary(path, manifest, tokenizer, tokenizer_name):
    """Stops when the shards were written with another vocabulary than `tokenizer`'s: their ids would mean other
    tokens, or lie beyond the embedding table (read as zeros on a TPU, silently; a NaN loss elsewhere). Older
    manifests have no fingerprint: only the vocabulary size is compared then."""
    if manifest.vocab_size == len(tokenizer) and manifest.vocabulary_fingerprint in (
            None, vocabulary_fingerprint(tokenizer.backend_tokenizer)):
        return
    difference = (f"a vocabulary of {manifest.vocab_size} tokens, but --tokenizer {tokenizer_name!r} has "
                  f"{len(tokenizer)}" if manifest.vocab_size != len(tokenizer) else
                  f"a vocabulary of the same size as that of --tokenizer {tokenizer_name!r}, but other tokens")
    raise SystemExit(
        f"error: the shards at {path!r} were written with the tokenizer {manifest.tokenizer!r}, "
        f"{difference}: their token ids mean other tokens for this model. Pass the tokenizer the shards were "
        f"written with (--tokenizer {manifest.tokenizer}), or write the shards again with this one "
        f"(prepare_tfrecord_shards.py --tokenizer_name_or_path {tokenizer_name} --overwrite ...).")


@contextlib.contextmanager
def damaged_shards_named(files):
    """Turns TensorFlow's DataLossError, raised inside fit or evaluate without a file name, into an error naming
    the damaged shards among `files`, found by reading them all again (on this error path only)."""
    try:
        yield
    except tf.errors.DataLossError:
        from diagnostics import explain_damaged_shards

        explanation = explain_damaged_shards(files)
        if explanation is None:
            raise
        raise explanation from None


def batches_per_host(sizes, num_hosts, batch_size):
    """Full batches that every host can read from its own share of the shards (host i reads shards i, i+n, ...)."""
    if len(sizes) < num_hosts:
        raise SystemExit(f"error: {num_hosts} hosts need at least {num_hosts} shard files, one per host, but "
                         f"there are {len(sizes)}. Write the shards again with a smaller --shard_size.")
    return min(sum(sizes[host::num_hosts]) for host in range(num_hosts)) // batch_size


def default_max_predictions(mlm_probability, max_length):
    """Positions per sequence the LM head computes logits at: the expected number of masks plus three standard
    deviations, rounded up to a multiple of 8 (a friendly shape for TPUs), so that the cap almost never bites."""
    mean = mlm_probability * max_length
    spread = 3 * math.sqrt(max_length * mlm_probability * (1 - mlm_probability))
    return min(max_length, 8 * math.ceil((mean + spread) / 8))


def mask_tokens(input_ids, seed, *, mask_token_id, special_token_ids, vocab_size, mlm_probability,
                max_predictions=0):
    """Masks a batch of token ids [batch, length]: a dict of "input_ids", "labels" (and "masked_positions").

    Each token that is not special (padding included) is chosen with probability `mlm_probability`; of those, 80 %
    become `mask_token_id`, 10 % a random token, 10 % stay. "labels" hold the original id where chosen, -100
    elsewhere. With `max_predictions` K > 0, at most K positions per sequence are chosen (the lowest draws, in the
    rare sequence that drew more), and "masked_positions" [batch, K] lists them, padded with unchosen ones (label
    -100): the LM head needs logits there only. Stateless random ops make the result a pure function of `seed`
    (two integers), and every shape is static: safe in tf.data and under XLA.
    """
    mask_seed, replace_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    shape = tf.shape(input_ids)
    is_special = tf.reduce_any(input_ids[..., tf.newaxis] == special_token_ids, axis=-1)
    draw = tf.random.stateless_uniform(shape, mask_seed)
    chosen = ~is_special & (draw < mlm_probability)
    batch = {}
    if max_predictions:
        # Rank positions by their draw, chosen ones first, and keep the first K: top_k has a static shape.
        scores = tf.where(chosen, draw, 2.0)
        lowest = tf.math.top_k(-scores, k=max_predictions)
        chosen &= scores <= -lowest.values[:, -1:]
        batch["masked_positions"] = lowest.indices
    replace_draw = tf.random.stateless_uniform(shape, replace_seed)
    random_ids = tf.random.stateless_uniform(shape, random_seed, maxval=vocab_size, dtype=input_ids.dtype)
    masked_ids = tf.where(chosen & (replace_draw < 0.8), tf.cast(mask_token_id, input_ids.dtype), input_ids)
    batch["input_ids"] = tf.where(chosen & (replace_draw >= 0.8) & (replace_draw < 0.9), random_ids, masked_ids)
    batch["labels"] = tf.where(chosen, input_ids, tf.constant(-100, input_ids.dtype))
    return batch


def make_dataset(files, input_context, *, batch_size, max_length, masking, seed, training,
                 shuffle_buffer_size=None, num_batches=None):
    """One host's input pipeline, endless (fit stops after the steps it asks for): its shards, read in parallel,
    (shuffled,) batched `batch_size` per replica, parsed and masked. Training data is shuffled (shard order, then
    samples in a buffer), with new masks on every pass. Evaluation data is the first `num_batches` batches, each
    masked from (seed, batch index), over and over: Keras keeps one iterator for every evaluation of a fit call,
    and each must see the same batches with the same masks."""
    host, num_hosts = input_context.input_pipeline_id, input_context.num_input_pipelines
    if training:
        own = [os.path.basename(file) for file in files[host::num_hosts]]
        logger.info("Input pipeline %d of %d reads %d of the %d training shards: %s", host, num_hosts, len(own),
                    len(files), ", ".join(own[:3]) + (", ..." if len(own) > 3 else ""))
    files = tf.data.Dataset.from_tensor_slices(files).shard(num_hosts, host)
    if training:
        files = files.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=not training)
    if training:
        records = records.shuffle(shuffle_buffer_size, seed=seed)
    batches = records.batch(batch_size, drop_remainder=True)  # One static batch shape, as XLA wants.
    if not training:
        batches = batches.take(num_batches)

    features = {name: tf.io.FixedLenFeature([max_length], tf.int64) for name in (INPUT_IDS, ATTENTION_MASK)}

    def parse_and_mask(index, serialized):
        batch = {name: tf.cast(value, tf.int32) for name, value in tf.io.parse_example(serialized, features).items()}
        batch.update(mask_tokens(batch[INPUT_IDS], tf.stack([tf.constant(seed, tf.int64), index]), **masking))
        return batch

    batches = batches.enumerate().map(parse_and_mask, num_parallel_calls=tf.data.AUTOTUNE)
    if not training:
        batches = batches.repeat()
    # Without tf.data's autotuning, the parallel reads and maps run at a fixed parallelism set from the number of
    # cores, and the prefetch buffer still grows as needed. With it, deleting an iterator (at the end of every fit
    # call) could wait up to 60 s: the tuning thread, woken by the cancellation before TensorFlow marks it done,
    # goes back to sleep for the rest of its period (tf.data's CancellationManager and Model::OptimizeLoop).
    options = tf.data.Options()
    options.autotune.enabled = False
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


class MaskedLMData:
    """This run's distributed datasets: on each host, make_dataset over its own shards, for its own replicas."""

    def __init__(self, args, strategy, plan, tokenizer, train_files, eval_files):
        self.args, self.strategy, self.plan = args, strategy, plan
        self.train_files, self.eval_files = train_files, eval_files
        self.masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                            vocab_size=len(tokenizer), mlm_probability=args.mlm_probability,
                            max_predictions=args.max_predictions_per_seq)

    def training(self, first_step):
        """Endless training batches of every micro-batch of a step, seeded by the step they start at."""
        return self._distribute(self.train_files, self.args.seed + first_step, self.plan.batch_per_replica_step,
                                training=True, shuffle_buffer_size=self.args.shuffle_buffer_size)

    def evaluation(self):
        """The plan.eval_steps batches of every evaluation (see make_dataset); None without eval data."""
        if not self.eval_files:
            return None
        return self._distribute(self.eval_files, self.args.seed, self.args.per_replica_batch_size, training=False,
                                num_batches=self.plan.eval_steps * self.plan.replicas_per_host)

    def _distribute(self, files, seed, batch_size, **kwargs):
        return self.strategy.distribute_datasets_from_function(lambda input_context: make_dataset(
            files, input_context, batch_size=batch_size, max_length=self.args.max_length, masking=self.masking,
            seed=seed, **kwargs))


# ----------------------------------------------------------------------------------------------------------------
# Model and training step


def load_config(args, tokenizer):
    """The model config: --pretrained_model_config, --config_overrides, and the tokenizer's vocabulary and ids."""
    try:
        config = AutoConfig.from_pretrained(local_copy(args.pretrained_model_config))
    except OSError as err:
        raise SystemExit(f"error: cannot load the model config {args.pretrained_model_config!r}: {err}\n"
                         "Pass a Hub model id (online), or a local folder holding config.json, or a config file."
                         ) from err
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
        except ValueError as err:
            raise SystemExit(f"error: bad --config_overrides {args.config_overrides!r}: {err}") from err
    config.update(dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    offset = position_offset(config)
    if args.max_length + offset > config.max_position_embeddings:
        raise SystemExit(
            f"error: --max_length {args.max_length} needs {args.max_length + offset} position embeddings, but the "
            f"config has max_position_embeddings={config.max_position_embeddings}. Lower --max_length, or add "
            f"max_position_embeddings={args.max_length + offset} to --config_overrides.")
    return config


def start_from_token_frequencies(mlm, log_probs):
    """Sets the LM head's output bias to the tokens' log-frequencies: a new model, its weights small and random,
    then starts out predicting as the frequency table does, the best possible without the context. Special tokens
    (-inf: never a label) get the lowest finite value instead, to keep the logits finite, in bfloat16 too."""
    finite = np.isfinite(log_probs)
    mlm.get_lm_head().get_bias()["bias"].assign(np.where(finite, log_probs, log_probs[finite].min()))


class Perplexity(keras.metrics.Mean):
    """exp(mean cross-entropy per masked token), over every batch since the metric was last reset."""

    def result(self):
        return tf.exp(super().result())


def frequency_log_probs(token_counts, special_token_ids):
    """Log-probabilities of the best constant predictor of masked tokens: each token's frequency in the training
    data. Special tokens are left out (-inf), since masking never chooses them; add-one smoothing gives a token
    unseen in training a finite cost."""
    counts = np.asarray(token_counts, np.float64) + 1.0
    counts[list(special_token_ids)] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum()).astype(np.float32)


class MaskedLMTrainer(keras.Model):
    """Trains a 🤗 TF…ForMaskedLM with model.fit, with loss and metrics over masked positions only.

    A step's loss is the cross-entropy summed over the masked positions of the global batch, divided by their
    number (an all-reduce across replicas): a replica that drew more masks weighs more, exactly as if one device
    had run the whole batch.

    `loss`, `perplexity` and `masked_accuracy` cover every position chosen for prediction. But a tenth of those
    keep their token and a tenth get a random one, where a model that copies its input scores for free: the
    `..._at_mask` metrics cover only the positions whose input became <mask>. With `frequency_log_probs`, those
    are also scored for a table of token frequencies, the best constant predictor (`frequency_..._at_mask`), and
    `nats_beyond_frequency` is how much lower the model's cross-entropy is there: 0 for a model that learned
    token frequencies and nothing else.

    Gradient accumulation runs the micro-batches inside the step rather than across steps: no branch on tensor
    values, and the step counter, the schedule and the checkpoints all count optimizer steps.

    With `jit_compile`, each replica's forward and backward passes are XLA-compiled, but not the optimizer update:
    Keras cannot XLA-compile an update of variables mirrored on several devices (keras-team/tf-keras#385), and
    this way XLA speeds up multi-GPU training too. TPUs compile everything with XLA anyway: it stays off there.
    """

    def __init__(self, mlm, mask_token_id, gradient_accumulation_steps=1, jit_compile=False,
                 frequency_log_probs=None):
        super().__init__()
        self.mlm = mlm
        self.mask_token_id = mask_token_id
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.frequency_log_probs = None if frequency_log_probs is None else tf.constant(frequency_log_probs)
        self.trackers = {"loss": keras.metrics.Mean(name="loss"), "perplexity": Perplexity(name="perplexity")}
        names = ["masked_accuracy", "loss_at_mask", "accuracy_at_mask"]
        if frequency_log_probs is not None:
            names += ["frequency_loss_at_mask", "frequency_accuracy_at_mask", "nats_beyond_frequency"]
        self.trackers.update((name, keras.metrics.Mean(name=name)) for name in names)
        self.compute_gradients = tf.function(self._compute_gradients, jit_compile=True) if jit_compile \
            else self._compute_gradients
        self.masked_lm_sums = tf.function(self._masked_lm_sums, jit_compile=True) if jit_compile \
            else self._masked_lm_sums

    @property
    def metrics(self):  # What Keras resets at the start of each epoch and evaluation.
        return list(self.trackers.values())

    def call(self, inputs, training=False):
        return self.mlm(**inputs, training=training).logits

    def _masked_lm_sums(self, batch, training=False):
        """Sums by name of the cross-entropy, correct predictions and count at the positions chosen for prediction,
        and at those whose input is <mask>; at the latter, the frequency table's too."""
        if "masked_positions" in batch:
            # The LM head only where there can be labels: encode every position, project K of them onto the
            # vocabulary. At length 128 that skips about three quarters of the head's work.
            encoder = getattr(self.mlm, self.mlm.base_model_prefix)
            hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             training=training)[0]
            logits = self.mlm.get_lm_head()(tf.gather(hidden, batch["masked_positions"], batch_dims=1))
            labels = tf.gather(batch["labels"], batch["masked_positions"], batch_dims=1)
            inputs = tf.gather(batch["input_ids"], batch["masked_positions"], batch_dims=1)
        else:
            logits = self.mlm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              training=training).logits
            labels, inputs = batch["labels"], batch["input_ids"]
        logits = tf.cast(logits, tf.float32)  # A softmax over the vocabulary needs float32, even in bfloat16 mode.
        is_chosen = labels != -100
        is_mask = is_chosen & (inputs == self.mask_token_id)
        labels = tf.where(is_chosen, labels, 0)  # Any valid id: the sums below leave those positions out.
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.argmax(logits, axis=-1, output_type=labels.dtype) == labels

        def total(where, values):  # tf.where, not a product with a 0/1 weight: -inf * 0 would be NaN.
            return tf.reduce_sum(tf.where(where, tf.cast(values, tf.float32), 0.0))

        sums = {"cross_entropy": total(is_chosen, cross_entropy), "correct": total(is_chosen, correct),
                "count": total(is_chosen, 1.0), "mask_cross_entropy": total(is_mask, cross_entropy),
                "mask_correct": total(is_mask, correct), "mask_count": total(is_mask, 1.0)}
        if self.frequency_log_probs is not None:
            most_frequent = tf.argmax(self.frequency_log_probs, output_type=labels.dtype)
            sums["frequency_cross_entropy"] = total(is_mask, -tf.gather(self.frequency_log_probs, labels))
            sums["frequency_correct"] = total(is_mask, labels == most_frequent)
        return sums

    def _compute_gradients(self, batch):
        """Gradients of the summed masked cross-entropy, accumulated over micro-batches, and the summed stats."""
        variables = self.mlm.trainable_variables
        steps = self.gradient_accumulation_steps
        micro_batches = {name: tf.reshape(value, [steps, -1, value.shape[-1]]) for name, value in batch.items()}
        gradient_sums, stat_sums = None, None
        # A Python loop, unrolled into the graph, not a graph loop: without XLA, TensorFlow's graph optimizer
        # rewrites large gradient sums into accumulators whose temporary variables clash between the iterations of
        # a loop nested in Keras' steps_per_execution loop (AlreadyExistsError).
        # The graph, and compilation time, grow with the number of micro-batches.
        for i in range(steps):
            micro_batch = {name: value[i] for name, value in micro_batches.items()}
            with tf.GradientTape() as tape:
                stats = self._masked_lm_sums(micro_batch, training=True)
            gradients = [tf.convert_to_tensor(gradient) for gradient in tape.gradient(stats["cross_entropy"],
                                                                                       variables)]
            gradient_sums = gradients if gradient_sums is None else [
                total + gradient for total, gradient in zip(gradient_sums, gradients)]
            stat_sums = stats if stat_sums is None else {name: stat_sums[name] + stats[name] for name in stats}
        return gradient_sums, stat_sums

    def train_step(self, batch):
        gradient_sums, sums = self.compute_gradients(batch)
        global_count = tf.distribute.get_replica_context().all_reduce("sum", sums["count"])
        # Replica gradients are summed by the optimizer: dividing by the global count makes that sum the gradient
        # of the mean over every masked position of the global batch.
        gradients = [gradient / tf.maximum(global_count, 1.0) for gradient in gradient_sums]
        self.optimizer.apply_gradients(zip(gradients, self.mlm.trainable_variables))
        return self._update_metrics(sums)

    def test_step(self, batch):
        return self._update_metrics(self.masked_lm_sums(batch))

    def _update_metrics(self, sums):
        """Each metric is a mean over positions: a batch's mean weighs as many positions as it covers."""
        def update(name, total, count):
            self.trackers[name].update_state(tf.math.divide_no_nan(total, count), sample_weight=count)

        update("loss", sums["cross_entropy"], sums["count"])
        update("perplexity", sums["cross_entropy"], sums["count"])
        update("masked_accuracy", sums["correct"], sums["count"])
        update("loss_at_mask", sums["mask_cross_entropy"], sums["mask_count"])
        update("accuracy_at_mask", sums["mask_correct"], sums["mask_count"])
        if self.frequency_log_probs is not None:
            update("frequency_loss_at_mask", sums["frequency_cross_entropy"], sums["mask_count"])
            update("frequency_accuracy_at_mask", sums["frequency_correct"], sums["mask_count"])
            update("nats_beyond_frequency", sums["frequency_cross_entropy"] - sums["mask_cross_entropy"],
                   sums["mask_count"])
        return {metric.name: metric.result() for metric in self.metrics}


def build_trainer(args, config, tokenizer, plan, jit_compile, train_files):
    """A new model, compiled for training in a MaskedLMTrainer, and its learning-rate schedule. Call it in the
    strategy's scope, so that every variable (weights, optimizer slots) is created on every replica."""
    mlm = TFAutoModelForMaskedLM.from_config(config)
    mlm.build_in_name_scope()  # Create the weights now, with the standard names that save_pretrained expects.
    optimizer, learning_rate = create_optimizer(init_lr=args.learning_rate, num_train_steps=plan.total_steps,
                                                num_warmup_steps=plan.warmup_steps,
                                                weight_decay_rate=args.weight_decay_rate)
    frequency_table = read_frequency_table(train_files, tokenizer)
    if args.output_bias == "frequencies" and frequency_table is not None:
        start_from_token_frequencies(mlm, frequency_table)  # A checkpoint restored later replaces it.
    trainer = MaskedLMTrainer(mlm, tokenizer.mask_token_id, args.gradient_accumulation_steps, jit_compile,
                              frequency_log_probs=frequency_table)
    trainer.compile(optimizer=optimizer, steps_per_execution=args.steps_per_execution)
    return trainer, learning_rate


# ----------------------------------------------------------------------------------------------------------------
# How long: batch sizes and step counts


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    num_hosts: int
    replicas_per_host: int
    batch_per_replica_step: int  # Samples a replica reads per optimizer step: all its micro-batches.
    global_batch_size: int
    train_samples: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    eval_every: int  # Steps per round; each round ends with an evaluation.
    eval_samples: int | None
    eval_steps: int | None


def plan_training(args, strategy, train_sizes, eval_sizes):
    """Batch sizes and step counts, from the shard sizes and the number of hosts and replicas. Every host reads
    its own shards (see make_dataset), so an epoch is as many steps as the host with the fewest samples fills."""
    num_hosts = count_hosts(strategy)
    replicas_per_host = strategy.num_replicas_in_sync // num_hosts
    batch_per_replica_step = args.per_replica_batch_size * args.gradient_accumulation_steps
    global_batch_size = batch_per_replica_step * strategy.num_replicas_in_sync
    steps_per_epoch = batches_per_host(train_sizes, num_hosts, batch_per_replica_step) // replicas_per_host
    if steps_per_epoch == 0:
        raise SystemExit(f"error: the {sum(train_sizes)} training samples do not fill one global batch of "
                         f"{global_batch_size}. Lower --per_replica_batch_size, or prepare more data.")
    total_steps = args.max_steps or args.num_epochs * steps_per_epoch
    eval_steps = None
    if eval_sizes:
        eval_steps = batches_per_host(eval_sizes, num_hosts, args.per_replica_batch_size) // replicas_per_host
        if eval_steps == 0:
            raise SystemExit(f"error: the {sum(eval_sizes)} evaluation samples do not fill one global batch of "
                             f"{args.per_replica_batch_size * strategy.num_replicas_in_sync}.")
    warmup_steps = args.warmup_steps if args.warmup_steps is not None else int(args.warmup_ratio * total_steps)
    if warmup_steps >= total_steps:
        raise SystemExit(f"error: {warmup_steps} warmup steps leave nothing of the {total_steps} steps.")
    return TrainingPlan(num_hosts=num_hosts, replicas_per_host=replicas_per_host,
                        batch_per_replica_step=batch_per_replica_step, global_batch_size=global_batch_size,
                        train_samples=sum(train_sizes), steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                        warmup_steps=warmup_steps, eval_every=args.eval_every_steps or steps_per_epoch,
                        eval_samples=sum(eval_sizes) if eval_sizes else None, eval_steps=eval_steps)


def fit_calls(start_step, total_steps, round_steps):
    """Splits training into model.fit calls, each (first step, steps per round, number of rounds). Rounds line up
    on multiples of `round_steps`: the whole rounds share one call, over one dataset; a round begun before an
    interruption, and a shorter last one, get a call each. So every run ends exactly at `total_steps`, evaluating
    at the same steps as a run never interrupted."""
    calls = []
    head = min(-start_step % round_steps, total_steps - start_step)
    if head:
        calls.append((start_step, head, 1))
    whole_rounds = (total_steps - start_step - head) // round_steps
    if whole_rounds:
        calls.append((start_step + head, round_steps, whole_rounds))
    tail = (total_steps - start_step - head) % round_steps
    if tail:
        calls.append((total_steps - tail, tail, 1))
    return calls


# ----------------------------------------------------------------------------------------------------------------
# Where a run starts, when it stops, what it saves


# What a run writes into --output_dir before its end. A folder holding only these is one this script can resume
# from (or, if it was stopped before its first complete checkpoint, start over in).
RUN_STATE = ("checkpoints", "logs", "training_results.json")


class TrainingRun(keras.callbacks.Callback):
    """Where this run starts, when it stops, and what it saves.

    Start: the same command run again resumes from the last checkpoint in {output_dir}/checkpoints (weights,
    optimizer state and step, hence the learning-rate schedule). A finished run has nothing left to do, unless a
    larger --max_steps or --num_epochs asks for more steps.

    Stop: a checkpoint is saved every --checkpoint_every_steps steps and at the last step. SIGTERM (a preempted VM,
    a job scheduler) and SIGINT (Ctrl-C) take effect at the end of the current step: a checkpoint is saved there,
    then the script exits with the shell's code for the signal (143 for SIGTERM). The hosts of a multi-worker job
    agree on that step, whichever was signalled: a host that left alone would leave the others waiting in a
    collective operation. A NaN or infinite loss stops training without a checkpoint, so that the last one saved
    stays the one to resume from.

    Saved: only the chief writes into --output_dir; the other hosts take part in saving each checkpoint (a
    collective operation) but into a scratch folder. training_results.json holds the metrics so far, and
    `saved_model_step` once the model is saved.

    Keras' BackupAndRestore refuses OneDeviceStrategy and keeps a single checkpoint, numbered by save rather than
    step, and not the last step's; tf.distribute's PreemptionCheckpointHandler does nothing on Google Cloud TPU
    and CPU VMs, and on GPU VMs waits for a maintenance event rather than SIGTERM.
    """

    def __init__(self, args, strategy):
        super().__init__()
        self.output_dir, self.overwrite = args.output_dir, args.overwrite
        self.checkpoint_every_steps = args.checkpoint_every_steps
        self.strategy = strategy
        self.is_chief = strategy.extended.should_checkpoint
        # One process drives every host of a TPU pod slice; a multi-worker job has a process per host.
        self.hosts_must_agree = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) \
            and count_hosts(strategy) > 1
        self.results_path = os.path.join(self.output_dir, "training_results.json")
        self.results = {}
        self.manager = None
        self.start_step = self.last_saved_step = 0
        self.received_signal = None  # The name of the signal this process received, if any.
        self.stop_requested = False  # By a signal, to this host or (multi-worker) to another.
        self.diverged_at_step = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    # Start

    def is_complete(self, total_steps):
        """Whether an earlier run of this command already trained `total_steps` steps and saved its model."""
        finished_at = None if self.overwrite or not tf.io.gfile.isdir(self.output_dir) else self.saved_model_step()
        if finished_at is None or finished_at < total_steps:
            return False
        logger.info("The run in %s is already complete at step %d%s, and its model is saved there. Nothing to do. "
                    "To train longer, raise --max_steps or --num_epochs; to start over, pass --overwrite.",
                    self.output_dir, finished_at,
                    f" (this command asks for {total_steps})" if finished_at > total_steps else "")
        return True

    def saved_model_step(self):
        """The step at which this script last saved the model into --output_dir, or None if it never did."""
        return self.recorded_results().get("saved_model_step")

    def recorded_results(self):
        """training_results.json of an earlier run in --output_dir; {} if there is none, or not this script's."""
        if not tf.io.gfile.exists(self.results_path):
            return {}
        with tf.io.gfile.GFile(self.results_path) as f:
            try:
                results = json.load(f)
            except json.JSONDecodeError:  # Not this script's file: prepare_output_dir refuses the folder.
                return {}
        return results if isinstance(results, dict) else {}

    def refuse_to_resume_with_another_plan(self, plan, args):
        """Before building the model: refuses to resume the last checkpoint where this command would not continue
        the interrupted run. A checkpoint's step counts batches of that run's global batch, and so do the
        learning-rate schedule (its warmup and total steps) and the seeds of the data (see train): under another
        batch size, all three would shift, and the resumed run would be neither the old one nor a new one. Runs
        saved by older versions of this script recorded no batch: they resume as before."""
        latest = None if self.overwrite else tf.train.latest_checkpoint(os.path.join(self.output_dir, "checkpoints"))
        if latest is None:
            return
        step = int(latest.rsplit("-", 1)[1])  # Checkpoints are numbered by their step (save_checkpoint).
        recorded = self.recorded_results()
        if recorded.get("global_batch_size", plan.global_batch_size) != plan.global_batch_size:
            raise SystemExit(
                f"error: {self.output_dir!r} holds a run, checkpointed at step {step}, that trained on global "
                f"batches of {recorded['global_batch_size']} samples ({recorded.get('per_replica_batch_size')} "
                f"per replica x {recorded.get('num_replicas')} replicas x "
                f"{recorded.get('gradient_accumulation_steps')} accumulation steps), but this command's global batch "
                f"is {plan.global_batch_size}. Its steps, learning-rate schedule and place in the data all count "
                "batches of the old size, so it cannot go on with another. To resume it, run it with the same "
                "global batch (--per_replica_batch_size x replicas x --gradient_accumulation_steps); to train with "
                "this batch instead, start over with --overwrite, or choose another --output_dir.")
        if step > plan.total_steps:
            raise SystemExit(
                f"error: {self.output_dir!r} holds an unfinished run, checkpointed at step {step}, beyond the "
                f"{plan.total_steps} steps this command asks for. To finish it, run it with --max_steps {step} or "
                "more (or as many --num_epochs as it had); to start over, pass --overwrite.")

    def record_batch(self, plan, args):
        """Records the batch of this run in training_results.json, for refuse_to_resume_with_another_plan."""
        self.results.update(global_batch_size=plan.global_batch_size,
                            per_replica_batch_size=args.per_replica_batch_size,
                            num_replicas=self.strategy.num_replicas_in_sync,
                            gradient_accumulation_steps=args.gradient_accumulation_steps)
        self.save_results()

    def prepare_output_dir(self):
        """Refuses an output folder holding files of something else; on --overwrite, clears an earlier run's state."""
        if not self.is_chief or not tf.io.gfile.exists(self.output_dir):
            return
        refuse_a_file(self.output_dir)
        if self.overwrite:
            clear_run_state(self.output_dir, RUN_STATE)
        elif set(tf.io.gfile.listdir(self.output_dir)) - {*RUN_STATE, *(name + "/" for name in RUN_STATE)} \
                and self.saved_model_step() is None:  # The other files are the model this script saved.
            raise SystemExit(f"error: the output folder {self.output_dir!r} holds files that are not a checkpoint "
                             "of this script to resume from. Choose another --output_dir, or pass --overwrite to "
                             "start over there.")

    def restore(self, model, optimizer):
        """Restores the last checkpoint, if any, and the metrics recorded up to it; sets start_step."""
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        checkpoint_dir = os.path.join(self.output_dir, "checkpoints")
        latest = None if self.overwrite else tf.train.latest_checkpoint(checkpoint_dir)
        if latest:
            checkpoint.restore(latest)
            logger.info("Resuming from %s, at step %d", latest, int(optimizer.iterations.numpy()))
        self.manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir if self.is_chief else tempfile.mkdtemp(),
                                                  max_to_keep=3)
        self.start_step = self.last_saved_step = int(optimizer.iterations.numpy())
        if self.start_step > 0 and tf.io.gfile.exists(self.results_path):
            with tf.io.gfile.GFile(self.results_path) as f:
                self.results = json.load(f)

    def save_config(self, config, tokenizer):
        """The config and tokenizer, beside the checkpoints (in {output_dir}/checkpoints/config): with them,
        export_model.py makes a model folder of the last checkpoint while the run is still going or interrupted."""
        def write(folder):
            config.save_pretrained(folder)
            tokenizer.save_pretrained(folder)

        if self.is_chief:
            save_final_folder(os.path.join(self.output_dir, "checkpoints", "config"), write,
                              "The checkpoints' config and tokenizer")

    @property
    def log_dir(self):
        """TensorBoard's folder; the other hosts of a multi-worker job write theirs into their scratch folder."""
        return os.path.join(self.output_dir if self.is_chief else self.manager.directory, "logs")

    # Stop

    def _on_signal(self, signum, frame):
        self.received_signal = signal.Signals(signum).name

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        stop_requested, diverged = self._on_every_host(self.received_signal is not None,
                                                       not math.isfinite(float(logs["loss"])))
        if diverged:
            self.diverged_at_step = step
        elif stop_requested or step - self.last_saved_step >= self.checkpoint_every_steps:
            self.save_checkpoint(step)
        self.stop_requested = stop_requested
        self.model.stop_training = self.stopping

    def _on_every_host(self, *flags):
        """`flags`, each true where it is true on any host of a multi-worker job: one small all-reduce per step."""
        if not self.hosts_must_agree:
            return flags
        values = self.strategy.run(lambda: tf.constant([float(flag) for flag in flags]))
        return [bool(total > 0) for total in self.strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)]

    @property
    def stopping(self):
        return self.stop_requested or self.diverged_at_step is not None

    def save_checkpoint(self, step):
        self.manager.save(checkpoint_number=step)
        self.last_saved_step = step

    def finish(self):
        """After training: exits after a stop signal or a NaN loss, else saves the last step's checkpoint."""
        step = int(self.model.optimizer.iterations.numpy()) if self.model else self.start_step
        if self.diverged_at_step is not None:
            raise SystemExit(f"error: the loss became NaN or infinite at step {self.diverged_at_step}. The last "
                             f"good checkpoint, {self.manager.latest_checkpoint}, is kept. Lower --learning_rate "
                             "or raise --warmup_steps, then run the same command again to resume from it.")
        if step > self.last_saved_step:
            self.save_checkpoint(step)  # The final step, whatever the interval.
        if not self.is_chief:
            tf.io.gfile.rmtree(self.manager.directory)
        if self.stop_requested or self.received_signal:
            logger.info("Stopped by %s at step %d, after saving checkpoint %s. Run the same command to resume.",
                        self.received_signal or "a signal to another host", step, self.manager.latest_checkpoint)
            # The shell's code for "killed by that signal"; another host's signal counts as a SIGTERM.
            raise SystemExit(128 + signal.Signals[self.received_signal or "SIGTERM"])

    # Saved

    def record(self, name, metrics):
        self.results[name] = metrics
        self.save_results()

    def on_epoch_end(self, epoch, logs=None):
        """The metrics of a round, at its last step."""
        self.results["step"] = int(self.model.optimizer.iterations.numpy())
        self.results["final_train"], evaluation = train_and_eval_metrics(logs)
        if evaluation:
            self.results["final_eval"] = evaluation
        logger.info("Step %d: %s", self.results["step"], format_metrics(logs))
        self.save_results()

    def save_results(self):
        if self.is_chief:
            tf.io.gfile.makedirs(self.output_dir)  # The first record comes before the first checkpoint or log.
            with tf.io.gfile.GFile(self.results_path, "w") as f:
                json.dump(self.results, f, indent=2)


# ----------------------------------------------------------------------------------------------------------------
# Output


class TensorBoardLogger(keras.callbacks.Callback):
    """Writes train and eval metrics (and the learning rate) to TensorBoard, at the optimizer step they belong to."""

    def __init__(self, log_dir, learning_rate_schedule):
        super().__init__()
        self.learning_rate_schedule = learning_rate_schedule
        self.writers = {part: tf.summary.create_file_writer(os.path.join(log_dir, part)) for part in ("train", "eval")}

    def write(self, part, metrics, step):
        with self.writers[part].as_default(step=step):
            for name, value in metrics.items():
                tf.summary.scalar(name, value)
            if part == "train":
                tf.summary.scalar("learning_rate", self.learning_rate_schedule(step))
        self.writers[part].flush()

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        train, evaluation = train_and_eval_metrics(logs)
        self.write("train", train, step)
        self.write("eval", evaluation, step)


def write_model_card(folder, args, results):
    """A README.md for the Hub, written into `folder`: what was trained, on what, for how long, and how well."""
    eval_lines = "\n".join(f"| {name} | {value:.4f} |" for name, value in results.get("final_eval", {}).items())
    card = f"""---
library_name: transformers
tags: [fill-mask, tensorflow, pytorch, masked-lm]
---

# {model_name(args.output_dir)}

A {results['model_type']} masked language model pre-trained from scratch with TensorFlow
(`run_mlm.py` of a TF + 🤗 Transformers TPU pre-training pipeline).

- Training data: `{args.train_dataset}`, {results['train_samples']} samples of {args.max_length} tokens
- Evaluation data: `{args.eval_dataset}`
- Tokenizer: `{args.tokenizer}`, vocabulary of {results['vocab_size']}
- Architecture: `{args.pretrained_model_config}` with overrides `{args.config_overrides or 'none'}`
- Steps: {results['step']} at a global batch of {results['global_batch_size']} samples
  ({results['num_replicas']} replicas), learning rate {args.learning_rate}, weight decay {args.weight_decay_rate}

## Final evaluation (masked positions only)

`loss`, `perplexity` and `masked_accuracy` cover every position chosen for prediction; the `..._at_mask` metrics
only those whose input was `<mask>`, for the model and for a table of the training tokens' frequencies
(`frequency_...`); `nats_beyond_frequency` is how much lower the model's cross-entropy is there than the table's.

| metric | value |
|---|---|
{eval_lines or '| (no evaluation data) | |'}

{model_card_usage("fill-mask", "The capital of France is <mask>.")}"""
    with open(os.path.join(folder, "README.md"), "w") as f:
        f.write(card)


def weights_fingerprint(model):
    """A short hash of every weight's bytes: hosts of a multi-host run must print the same one."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(weight.numpy().tobytes())
    return digest.hexdigest()[:16]


def train_and_eval_metrics(logs):
    """Keras' logs at the end of a round, split: the training metrics, and the evaluation's, which Keras names with
    a "val_" prefix (removed here)."""
    train = {name: value for name, value in logs.items() if not name.startswith("val_")}
    evaluation = {name[len("val_"):]: value for name, value in logs.items() if name.startswith("val_")}
    return train, evaluation


def format_metrics(metrics):
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


def save_model(args, trainer, tokenizer, config, run, plan):
    """The model, its tokenizer and a model card into --output_dir (and to the Hub with --hub_model_id); then, in
    training_results.json, the step it was saved at, so that the same command run again knows it has finished.
    (The batch is recorded there already, by TrainingRun.record_batch.)"""
    step = int(trainer.optimizer.iterations.numpy())
    run.results.update(step=step, model_type=config.model_type, vocab_size=config.vocab_size,
                       train_samples=plan.train_samples)
    run.save_results()

    def write(folder):
        trainer.mlm.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        save_pytorch_copy(trainer.mlm, tokenizer, folder)
        write_model_card(folder, args, run.results)

    save_final_folder(args.output_dir, write, "Model, tokenizer and model card", args.hub_model_id,
                      f"Pre-trained for {step} steps",
                      ignore_patterns=["checkpoints/*"])  # TensorBoard logs are welcome on the Hub.
    run.record("saved_model_step", step)


if __name__ == "__main__":
    main(parse_args())
