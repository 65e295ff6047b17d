#!/usr/bin/env python
"""Step 3: pre-train a masked language model on the TFRecord shards of step 2, from scratch or from a model.

The model is a 🤗 Transformers TF…ForMaskedLM (RoBERTa by default) built from a config, or (--model_name_or_path)
one that exists, which continues pre-training with its own weights and LM head, on the shards of its tokenizer. It
trains with Keras `model.fit` under a tf.distribute strategy: TPUStrategy on a TPU VM (its chips are
found in sysfs) or a TPU Node or pod slice (--tpu_name); MultiWorkerMirroredStrategy when TF_CONFIG describes a
cluster; MirroredStrategy over several GPUs (or --num_cpu_replicas CPU devices); TensorFlow's default on one.

Everything that runs per batch obeys XLA, the compiler behind TPUs: no Python `if` on tensor values, no shape that
depends on values, one input shape. So batches always hold as many samples of exactly max_length tokens, and the
loss is a sum over masked positions divided by their count, never a boolean selection of them. The input pipeline
is TensorFlow ops only (a TPU Node's host cannot run Python for it) and masks anew on every pass; evaluation masks
come from a fixed seed, so that its figures compare across rounds and runs.

Training runs in rounds of --eval_every_steps, each ending with an evaluation: metrics at the masked positions
(loss, masked_accuracy, perplexity, and against a table of token frequencies) to the log, TensorBoard
({output_dir}/logs) and {output_dir}/training_results.json. Checkpoints go to {output_dir}/checkpoints; the same
command run again resumes from the last one. At the end, the model and tokenizer are saved to --output_dir for
`pipeline("fill-mask", model=output_dir, framework="tf")`, with a copy for 🤗 Transformers 5 and PyTorch in
{output_dir}/pytorch. Every path may be gs://; each is checked before anything else starts.

Example (a small model on a CPU):
    python run_mlm.py --train_dataset tfrecords/train --eval_dataset tfrecords/validation \\
        --tokenizer unigram-tokenizer --config_overrides hidden_size=256,num_hidden_layers=4,... --no_tpu
"""

import argparse
import atexit
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid

import numpy as np
import tensorflow as tf
# 🤗 Transformers' TF models are Keras 2 models. Since TensorFlow 2.16, Keras 2 is the separate tf-keras package,
# and `tf.keras` is Keras 3: every Keras object here must come from tf_keras.
import tf_keras as keras
from transformers import TFAutoModelForMaskedLM, create_optimizer

from utils import (ARCHITECTURES, INCOMPLETE_MARKER_NAME, MANIFEST_NAME, MIN_MAX_LENGTH, SHARD_NAME_PATTERN,
                   TOKEN_COUNTS_NAME, Manifest, UserError, add_hardware_arguments, check_checkpoint, check_max_length,
                   check_output_dir, count_hosts, create_optimizer_state, delete, fraction, gcs_blob, host_addresses,
                   is_gcs_path, last_checkpoint, load_config, load_pretrained_model, load_tokenizer, local_copy,
                   local_tpu_chips, non_negative_float, non_negative_int, out_of_space_named, positive_float,
                   positive_int, probability, refuse_a_file_as_output_dir, save_folder, save_pytorch_copy,
                   set_up_training, strategy_name, vocabulary_fingerprint, write_model_card)

logger = logging.getLogger("run_mlm")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hardware_arguments(parser)

    data = parser.add_argument_group("data")
    data.add_argument("--train_dataset", default="tfrecords/train",
                      help="Folder or glob of training shards, local or gs:// (default: %(default)s).")
    data.add_argument("--eval_dataset", help="Folder or glob of evaluation shards (default: no evaluation).")
    data.add_argument("--shards_on_every_host", action="store_true",
                      help="On a TPU pod slice, accept local shards, copied to the same path on every host (else "
                           "they must be on gs://: each host reads its own).")
    data.add_argument("--max_length", type=positive_int, default=128,
                      help=f"Tokens per sample, as in the shards; at least {MIN_MAX_LENGTH} (default: %(default)s).")
    data.add_argument("--shuffle_buffer_size", type=positive_int, default=10_000,
                      help="Samples in the shuffle buffer: more mixes better, in more host memory "
                           "(default: %(default)s).")
    data.add_argument("--mlm_probability", type=probability, default=0.15,
                      help="Fraction of the non-special tokens to mask (default: %(default)s).")
    data.add_argument("--masking", choices=["token", "whole_word", "span"], default="token",
                      help="What is masked at once: a token, a whole word (all its tokens), or SpanBERT's spans of "
                           "whole words (default: %(default)s).")
    data.add_argument("--max_predictions_per_seq", type=non_negative_int,
                      help="Masked positions per sequence at most, where the LM head computes logits (0: at every "
                           "position). Default: the expected number plus a margin, 32 for 0.15 x 128.")

    model = parser.add_argument_group("model")
    model.add_argument("--tokenizer",
                       help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id (default: "
                            "that of --model_name_or_path, else unigram-tokenizer).")
    start = model.add_mutually_exclusive_group()
    start.add_argument("--pretrained_model_config", default="FacebookAI/roberta-base",
                       help="Architecture to train from scratch: a Hub model id, a folder holding config.json or a "
                            "config file (local or gs://); weights are never read (default: %(default)s).")
    start.add_argument("--model_name_or_path",
                       help="Continue pre-training this model instead: a folder saved by this pipeline or "
                            "save_pretrained (TensorFlow or PyTorch safetensors weights, local or gs://), or a Hub "
                            "model id. A fresh optimizer and schedule; the shards must use its tokenizer.")
    model.add_argument("--config_overrides", type=config_overrides,
                       help="Changes to the config, e.g. hidden_size=256,num_hidden_layers=4,num_attention_heads=4 "
                            "(with --model_name_or_path, dropout only).")
    model.add_argument("--output_bias", choices=["frequencies", "zeros"], default="frequencies",
                       help="The LM head's initial output bias: each token's log-frequency in the training shards "
                            "(their token_counts.json), so that the first steps need not learn it; or zeros, as 🤗 "
                            "Transformers initialises it (default: %(default)s).")

    training = parser.add_argument_group("training")
    training.add_argument("--per_replica_batch_size", type=positive_int, default=8,
                          help="Samples per replica and micro-batch; the global batch is this x replicas x "
                               "--gradient_accumulation_steps (default: %(default)s).")
    training.add_argument("--gradient_accumulation_steps", type=positive_int, default=1,
                          help="Micro-batches per step, their gradients added up: a larger batch in the same "
                               "memory (default: %(default)s).")
    training.add_argument("--learning_rate", type=positive_float, default=1e-4,
                          help="AdamW's peak learning rate (default: %(default)s).")
    training.add_argument("--weight_decay_rate", type=non_negative_float, default=1e-3,
                          help="AdamW's decoupled weight decay, never on LayerNorm weights and biases "
                               "(default: %(default)s).")
    warmup = training.add_mutually_exclusive_group()
    warmup.add_argument("--warmup_steps", type=non_negative_int,
                        help="Steps of linear warmup before the linear decay to 0.")
    warmup.add_argument("--warmup_ratio", type=fraction, default=0.05,
                        help="Warmup as a fraction of all steps (default: %(default)s).")
    length = training.add_mutually_exclusive_group()
    length.add_argument("--num_epochs", type=positive_int, default=1,
                        help="Passes over the training data (default: %(default)s).")
    length.add_argument("--max_steps", type=positive_int, help="Optimizer steps to train for, instead of --num_epochs.")
    training.add_argument("--eval_every_steps", type=positive_int,
                          help="Steps per round; each ends with an evaluation (default: an epoch).")
    training.add_argument("--checkpoint_every_steps", type=positive_int, default=1000,
                          help="Steps between checkpoints to resume from (default: %(default)s).")
    training.add_argument("--input_check_seconds", type=non_negative_float, default=3.0,
                          help="Before training, time one host's input pipeline alone for this long, to compare "
                               "with what training takes from it (0: skip) (default: %(default)s).")
    training.add_argument("--seed", type=int, default=42,
                          help="Seed of the weights, the data order and the masks (default: %(default)s).")

    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", default="mlm-model",
                        help="Folder for checkpoints, TensorBoard logs and the model, local or gs:// (gs:// on a "
                             "pod slice or a multi-host job) (default: %(default)s).")
    output.add_argument("--overwrite", action="store_true",
                        help="Start from scratch even if --output_dir holds checkpoints or other files.")
    output.add_argument("--hub_model_id", help="Push the final model and tokenizer to this Hub repository.")
    args = parser.parse_args()

    if args.max_length < MIN_MAX_LENGTH:
        parser.error(f"--max_length must be at least {MIN_MAX_LENGTH}, got {args.max_length}: shorter samples leave "
                     "too few tokens to mask, with too little context. Write shards of 128 tokens, or at least "
                     f"{MIN_MAX_LENGTH}, with prepare_tfrecord_shards.py.")
    args.tokenizer = args.tokenizer or args.model_name_or_path or "unigram-tokenizer"
    if args.max_predictions_per_seq is None:  # After the types checked --mlm_probability: a rate in (0, 1).
        args.max_predictions_per_seq = default_max_predictions(args.mlm_probability, args.max_length, args.masking)
    if args.max_predictions_per_seq > args.max_length:
        parser.error(f"--max_predictions_per_seq must be from 0 to --max_length ({args.max_length}), got "
                     f"{args.max_predictions_per_seq}.")
    return args


def main(args):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    strategy, on_tpu, jit_compile = set_up_training(
        args, input_paths=(args.train_dataset, args.eval_dataset, args.tokenizer, args.pretrained_model_config,
                           args.model_name_or_path))
    is_chief = strategy.extended.should_checkpoint  # Only the chief writes into --output_dir.
    if is_chief:
        OutputDirLease(args.output_dir).hold()  # At once: a second run into this folder stops here.

    # The data and the config, checked before anything is built: mistakes cost seconds, not minutes.
    tokenizer = load_tokenizer(args.tokenizer, "--tokenizer")
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise UserError(f"the tokenizer {args.tokenizer!r} has no mask or pad token; train one with "
                        "train_unigram.py.")
    train_files, train_sizes = find_shards(args.train_dataset, args.max_length, tokenizer, args.tokenizer)
    eval_files, eval_sizes = find_shards(args.eval_dataset, args.max_length, tokenizer, args.tokenizer) \
        if args.eval_dataset else ([], [])
    config = model_config(args, tokenizer)
    plan = plan_training(args, strategy, train_sizes, eval_sizes)
    if on_tpu:
        check_paths_for_pod(args, plan.num_hosts)
    log_plan(args, strategy, plan, on_tpu, jit_compile, train_files, eval_files)

    # Where the run starts: nothing left to do, from scratch, or from the last checkpoint.
    results = ResultsFile(args.output_dir, is_chief, args.overwrite)
    if not check_where_the_run_starts(args, plan, results, is_chief):
        return
    if is_chief:
        save_config(args.output_dir, config, tokenizer)
    with strategy.scope():  # Every variable (weights, optimizer slots) is created on every replica.
        trainer, learning_rate = build_trainer(args, config, tokenizer, plan, jit_compile, train_files)
        checkpoints = restore_last_checkpoint(args, trainer, is_chief)
    start_step = int(trainer.optimizer.iterations.numpy())
    throughput = Throughput.of(args, config, plan, strategy, on_tpu)
    logger.info("Model: %s with %.1fM parameters, %.4g MFLOP per token to train (LM head at %s); %s",
                config.model_type, trainer.mlm.count_params() / 1e6, throughput.flops_per_token / 1e6,
                f"{args.max_predictions_per_seq} of {args.max_length} positions" if args.max_predictions_per_seq
                else "every position", throughput.describe_peak())
    if start_step == 0:
        results.clear()  # Nothing of an earlier run that left no checkpoint.
    results.record(global_batch_size=plan.global_batch_size, per_replica_batch_size=args.per_replica_batch_size,
                   num_replicas=strategy.num_replicas_in_sync,
                   gradient_accumulation_steps=args.gradient_accumulation_steps,
                   started_from=args.model_name_or_path)  # None: random weights.

    # Train in rounds, each ending with an evaluation, checkpointing as it goes.
    masking = masking_arguments(args, tokenizer)  # Once: the word-start table reads the whole vocabulary.
    training_data, eval_data = distributed_datasets(args, strategy, plan, masking, train_files, eval_files)
    round_end = RoundEnd(results, os.path.join(args.output_dir if is_chief else checkpoints.directory, "logs"),
                         learning_rate, throughput)
    stopper = CheckpointAndStop(checkpoints, args.checkpoint_every_steps, strategy, start_step, is_chief)
    with damaged_shards_named(train_files + eval_files):
        if args.input_check_seconds:
            check_input_pipeline(args, strategy, plan, masking, train_files, throughput, results)
        if start_step == 0 and eval_files:
            metrics = trainer.evaluate(eval_data, steps=plan.eval_steps, return_dict=True, verbose=0)
            logger.info("Evaluation before training: %s", format_metrics(metrics))
            round_end.write_tensorboard("eval", metrics, step=0)
            results.record(step_0_eval=metrics)
        train(trainer, training_data, eval_data, plan, start_step, stopper, round_end)
    stopper.finish(int(trainer.optimizer.iterations.numpy()))  # Exits after a stop signal or a NaN loss.

    logger.info("Weights fingerprint: %s", weights_fingerprint(trainer.mlm))  # The same on every host.
    warn_if_nothing_learned_from_context(results)
    if is_chief:
        save_model(args, trainer, tokenizer, config, results, plan)


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


def train(trainer, training_data, eval_data, plan, start_step, stopper, round_end):
    """Trains from `start_step` to plan.total_steps, in the model.fit calls of fit_calls. Each call's data is
    seeded by its first step: a resumed run does not replay the data and masks that the interrupted one began with."""
    start_time = time.perf_counter()
    for first, round_steps, num_rounds in fit_calls(start_step, plan.total_steps, plan.eval_every):
        logger.info("Steps %d to %d of %d, in %d round(s) of %d steps, each ending with an evaluation", first + 1,
                    first + round_steps * num_rounds, plan.total_steps, num_rounds, round_steps)
        first_round = first // plan.eval_every  # Keras' epochs are the run's rounds, in its progress lines too.
        trainer.fit(training_data(first), steps_per_epoch=round_steps, initial_epoch=first_round,
                    epochs=first_round + num_rounds, validation_data=eval_data, validation_steps=plan.eval_steps,
                    callbacks=[stopper, round_end], verbose=1 if sys.stdout.isatty() else 2)
        if trainer.stop_training:
            return
    steps = int(trainer.optimizer.iterations.numpy()) - start_step
    if steps:
        end = time.perf_counter()
        logger.info("Trained %d steps in %.0f s (%.1f samples/s); model.fit returned %.1f s after the last round's "
                    "line", steps, end - start_time, steps * plan.global_batch_size / (end - start_time),
                    end - round_end.ended_at)


# ----------------------------------------------------------------------------------------------------------------
# Masked-LM training: the masking, the input pipeline and the trainer. This block needs only TensorFlow, tf-keras
# and 🤗 Transformers: lift it into your own code as it is.


def default_max_predictions(mlm_probability, max_length, masking="token"):
    """Positions per sequence the LM head computes logits at: the expected number of masks plus three standard
    deviations, rounded up to a multiple of 8 (a friendly shape for TPUs): the cap almost never bites. Spans of
    several words vary more from sequence to sequence: twice that margin."""
    mean = mlm_probability * max_length
    spread = (2 if masking == "span" else 1) * 3 * math.sqrt(max_length * mlm_probability * (1 - mlm_probability))
    return min(max_length, 8 * math.ceil((mean + spread) / 8))


def mask_tokens(input_ids, seed, *, mask_token_id, special_token_ids, vocab_size, mlm_probability,
                max_predictions=0, word_starts=None, spans=False):
    """Masks a batch of token ids [batch, length]: a dict of "input_ids", "labels" (and "masked_positions").

    Each token that is not special is chosen with probability `mlm_probability`; of those, 80 % become
    `mask_token_id`, 10 % a random token, 10 % stay. "labels" hold the original id where chosen, -100 elsewhere.
    With `word_starts` (word_start_table), whole words are chosen instead (choose_words), and with `spans`,
    SpanBERT's spans of words. With `max_predictions` K > 0, at most K positions per sequence are chosen (the
    lowest draws; whole words), and "masked_positions" [batch, K] lists them, padded with unchosen ones: the LM head
    needs logits there only. Stateless random ops make the result a function of `seed` (two integers), and every
    shape is static: safe in tf.data and under XLA.
    """
    mask_seed, replace_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    shape = tf.shape(input_ids)
    is_special = tf.reduce_any(input_ids[..., tf.newaxis] == special_token_ids, axis=-1)
    batch = {}
    if word_starts is not None:
        chosen, replace_draw = choose_words(input_ids, is_special, word_starts, mask_seed, replace_seed,
                                            mlm_probability, max_predictions, spans)
        if max_predictions:  # The chosen positions first (top_k keeps the lower index among equals).
            batch["masked_positions"] = tf.math.top_k(tf.cast(chosen, tf.float32), k=max_predictions).indices
    else:
        draw = tf.random.stateless_uniform(shape, mask_seed)
        chosen = ~is_special & (draw < mlm_probability)
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


MAX_SPAN_WORDS = 10  # SpanBERT's clip of its span lengths (in words), drawn from Geometric(0.2).


def choose_words(input_ids, is_special, word_starts, mask_seed, replace_seed, mlm_probability, max_predictions,
                 spans):
    """(chosen, replace_draw) of mask_tokens, [batch, length] each, for whole words: a token starts a word where
    `word_starts` says so, at a sample's start, and after a special token that starts a word (each such special
    is a word of its own, never chosen; <unk>, for unknown characters, stays inside its word). Every draw is made
    per word slot (a row has at most `length` words) and spread over the word's tokens, so a word is chosen, and
    replaced 80/10/10, as a whole; each word with probability `mlm_probability`, which is thus also the expected
    share of tokens.

    With `spans`, words are chosen in SpanBERT's spans: a span of Geometric(0.2) words, clipped at
    MAX_SPAN_WORDS, starts at each word slot with the probability span_start_probability(); a word is chosen when
    a span covers it (spans that overlap merge, as SpanBERT's, drawn one after the other, do not). Slots before the
    row count too, so that every word is covered with `mlm_probability`. The draws of the span's first word serve
    the whole span. With `max_predictions` K, words are kept in the order of their draws while their tokens fit
    in K, a word never cut."""
    length = input_ids.shape[1]
    starts = tf.gather(tf.constant(word_starts), input_ids)
    starts |= tf.pad((is_special & starts)[:, :-1], [[0, 0], [1, 0]], constant_values=True)  # After <s>, </s>.
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # Each token's word slot.
    slots = MAX_SPAN_WORDS - 1 + length if spans else length  # Spans may start before the row.
    draws = tf.random.stateless_uniform([tf.shape(input_ids)[0], slots, 2], mask_seed)
    draw, replace = draws[..., 0], tf.random.stateless_uniform(tf.shape(draws)[:2], replace_seed)
    if spans:
        begins = draw < span_start_probability(mlm_probability)
        # Geometric(0.2) lengths from the second draw, by inversion: P(length > n) = 0.8 ** n.
        lengths = tf.minimum(1 + tf.floor(tf.math.log(1.0 - draws[..., 1]) / math.log(0.8)), MAX_SPAN_WORDS)
        score = tf.fill([tf.shape(input_ids)[0], length], 2.0)
        span_replace = tf.zeros_like(score)
        for back in range(MAX_SPAN_WORDS):  # Slot w is covered by a span begun `back` slots earlier.
            first = MAX_SPAN_WORDS - 1 - back
            covers = begins[:, first:first + length] & (lengths[:, first:first + length] > back)
            better = covers & (draw[:, first:first + length] < score)
            score = tf.where(better, draw[:, first:first + length], score)
            span_replace = tf.where(better, replace[:, first:first + length], span_replace)
        draw, replace, chosen_word = score, span_replace, score < 2.0
    else:
        chosen_word = draw < mlm_probability
    chosen = ~is_special & tf.gather(chosen_word, word, batch_dims=1)
    if max_predictions:
        # Chosen tokens per word slot, the slots in the order of their draws, and the words that fit in K.
        rows = tf.range(tf.shape(word)[0])[:, tf.newaxis] * length
        sizes = tf.reshape(tf.math.unsorted_segment_sum(tf.cast(chosen, tf.int32), word + rows,
                                                        tf.size(word)), tf.shape(word))
        order = tf.argsort(tf.where(sizes > 0, draw, 2.0), axis=1, stable=True)
        fits = tf.cumsum(tf.gather(sizes, order, batch_dims=1), axis=1) <= max_predictions
        kept = tf.gather(fits, tf.argsort(order, axis=1), batch_dims=1)
        chosen &= tf.gather(kept, word, batch_dims=1)
    return chosen, tf.gather(replace, word, batch_dims=1)


def span_start_probability(mlm_probability):
    """The probability q that a span begins at a word slot, such that a slot is covered with `mlm_probability`:
    1 - prod over n < MAX_SPAN_WORDS of (1 - q P(length > n)) = mlm_probability, solved by bisection."""
    survival = 0.8 ** np.arange(MAX_SPAN_WORDS)
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if 1 - np.prod(1 - middle * survival) < mlm_probability else (low, middle)
    return (low + high) / 2


def word_start_table(tokenizer):
    """[vocabulary] booleans, True for the tokens that begin a word, read once from the tokenizer's pieces: for
    SentencePiece-style tokenizers (Metaspace, this pipeline's Unigram), those beginning with "▁"; for
    WordPiece (BERT's), those not beginning with "##"; for byte-level BPE (GPT-2, RoBERTa), "Ġ". Specials begin
    a word, but <unk>, which stands for characters inside one. Raises UserError for a tokenizer whose pieces do
    not show where words begin."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str()) if tokenizer.is_fast else {}
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    layout = json.dumps([backend.get("pre_tokenizer"), backend.get("decoder")])
    if backend.get("model", {}).get("type") == "WordPiece":
        prefix = backend["model"]["continuing_subword_prefix"]
        table = np.array([not piece.startswith(prefix) for piece in pieces])
    elif '"Metaspace"' in layout or '"ByteLevel"' in layout:
        marker = "▁" if '"Metaspace"' in layout else "Ġ"
        table = np.array([piece.startswith(marker) for piece in pieces])
    else:
        raise UserError("--masking whole_word and span need a tokenizer whose pieces show where words begin "
                        "(SentencePiece's ▁, WordPiece's ##, or byte-level BPE's Ġ), but this one's show "
                        "none. Use --masking token, or a tokenizer from train_unigram.py.")
    table[[i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]] = True
    return table


def make_dataset(files, input_context, *, batch_size, max_length, masking, seed, training,
                 shuffle_buffer_size=None, num_batches=None):
    """One host's input pipeline, endless (fit stops after the steps it asks for): its own shards (host i of n
    reads shards i, i + n, ...), read in parallel, batched `batch_size` per replica, parsed and masked (`masking`:
    mask_tokens' arguments). Training data is shuffled (shard order, then samples in a buffer), with new masks on
    every pass. Evaluation data is its first `num_batches` batches, each masked from (seed, batch index), over and
    over: Keras keeps one iterator for every evaluation of a fit call, and each must see the same masks."""
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
    # The record format (written by prepare_tfrecord_shards.py): two int64 features of max_length values each.
    features = {name: tf.io.FixedLenFeature([max_length], tf.int64) for name in ("input_ids", "attention_mask")}

    @tf.autograph.experimental.do_not_convert  # Python branches only (see MaskedLMTrainer).
    def parse_and_mask(index, serialized):
        batch = {name: tf.cast(value, tf.int32) for name, value in tf.io.parse_example(serialized, features).items()}
        batch.update(mask_tokens(batch["input_ids"], tf.stack([tf.constant(seed, tf.int64), index]), **masking))
        return batch

    batches = batches.enumerate().map(parse_and_mask, num_parallel_calls=tf.data.AUTOTUNE)
    if not training:
        batches = batches.repeat()
    # Autotuning off: deleting an iterator (at the end of every fit call) could otherwise wait up to a minute for
    # the tuning thread (benchmarks/README.md, "The end of a fit call"). The prefetch buffer still grows as needed.
    options = tf.data.Options()
    options.autotune.enabled = False
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


def frequency_log_probs(token_counts, special_token_ids):
    """Log-probabilities of the best constant predictor of masked tokens: each token's frequency in the training
    data, special tokens left out (-inf: never masked), add-one smoothed so that an unseen token costs finitely."""
    counts = np.asarray(token_counts, np.float64) + 1.0
    counts[list(special_token_ids)] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum()).astype(np.float32)


def start_from_token_frequencies(mlm, log_probs):
    """Sets the LM head's output bias to the tokens' log-frequencies: a new model then starts out predicting as the
    frequency table does. Special tokens get the lowest finite value, which keeps the logits finite in bfloat16."""
    finite = np.isfinite(log_probs)
    for bias in mlm.get_lm_head().get_bias().values():  # ALBERT has two, of which TensorFlow uses one.
        bias.assign(np.where(finite, log_probs, log_probs[finite].min()))


# The layers between the encoder and the logits, for the models whose get_lm_head() is only the last of them.
LM_HEAD_LAYERS = {"electra": ("generator_predictions", "generator_lm_head"),
                  "convbert": ("generator_predictions", "generator_lm_head"),
                  "distilbert": ("vocab_transform", "act", "vocab_layer_norm", "vocab_projector")}


def lm_head(mlm, hidden):
    """The logits of a 🤗 TF…ForMaskedLM `mlm` at the encoder's hidden states `hidden` [..., positions, hidden]."""
    for name in LM_HEAD_LAYERS.get(mlm.config.model_type, ()):
        hidden = getattr(mlm, name)(hidden)
    return hidden if mlm.config.model_type in LM_HEAD_LAYERS else mlm.get_lm_head()(hidden)


class Perplexity(keras.metrics.Mean):
    """exp(mean cross-entropy per masked token)."""

    def result(self):
        return tf.exp(super().result())


class MaskedLMTrainer(keras.Model):
    """Trains a 🤗 TF…ForMaskedLM with model.fit, with loss and metrics over masked positions only.

    A step's loss is the cross-entropy summed over the masked positions of the global batch, divided by their
    number (an all-reduce across replicas), exactly as if one device had run the whole batch.

    `loss`, `perplexity` and `masked_accuracy` cover every position chosen for prediction; but a tenth of those
    keep their token, where a model that copies its input scores for free. The `..._at_mask` metrics cover only
    the positions whose input became <mask>; with `frequency_log_probs`, the frequency table is scored there too
    (`frequency_..._at_mask`), and `nats_beyond_frequency` is how much lower the model's cross-entropy is: 0 for a
    model that learned the token frequencies and nothing from the context.

    Gradient accumulation runs the micro-batches inside the step, so that the step counter, the schedule and the
    checkpoints count optimizer steps. With `jit_compile`, each replica's forward and backward passes are compiled
    with XLA, the optimizer update not: Keras cannot compile an update of variables mirrored on several devices
    (keras-team/tf-keras#385). A TPU compiles everything anyway.

    The steps are traced without AutoGraph, which rewrites Python `if`s and loops over tensors into graph ops:
    neither these steps nor 🤗's models branch on a tensor, and rewriting the models' source took 4 of the 5.6 s
    that tracing the first evaluation took (a tiny RoBERTa, on a CPU), on every host, before every run.
    """

    def __init__(self, mlm, mask_token_id, gradient_accumulation_steps=1, jit_compile=False,
                 frequency_log_probs=None):
        super().__init__()
        self.mlm, self.mask_token_id = mlm, mask_token_id
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.frequency_log_probs = None if frequency_log_probs is None else tf.constant(frequency_log_probs)
        names = ["masked_accuracy", "loss_at_mask", "accuracy_at_mask"]
        if frequency_log_probs is not None:
            names += ["frequency_loss_at_mask", "frequency_accuracy_at_mask", "nats_beyond_frequency"]
        self.trackers = {"loss": keras.metrics.Mean(name="loss"), "perplexity": Perplexity(name="perplexity"),
                         **{name: keras.metrics.Mean(name=name) for name in names}}
        self.compute_gradients, self.masked_lm_sums = (
            tf.function(function, jit_compile=True, autograph=False) if jit_compile else function
            for function in (self._compute_gradients, self._masked_lm_sums))

    @property
    def metrics(self):  # What Keras resets at the start of each epoch and evaluation.
        return list(self.trackers.values())

    def call(self, inputs, training=False):
        return self.mlm(**inputs, training=training).logits

    def _masked_lm_sums(self, batch, training=False):
        """Sums by name of the cross-entropy, correct predictions and count at the positions chosen for prediction,
        and at those whose input is <mask>; at the latter, the frequency table's too."""
        if "masked_positions" in batch:
            # Encode every position, but project only K of them onto the vocabulary: at length 128, that skips
            # about three quarters of the LM head's work.
            encoder = getattr(self.mlm, self.mlm.base_model_prefix)
            hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             training=training)[0]
            logits = lm_head(self.mlm, tf.gather(hidden, batch["masked_positions"], batch_dims=1))
            labels, inputs = (tf.gather(batch[name], batch["masked_positions"], batch_dims=1)
                              for name in ("labels", "input_ids"))
        else:
            logits = self.mlm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              training=training).logits
            labels, inputs = batch["labels"], batch["input_ids"]
        logits = tf.cast(logits, tf.float32)  # A softmax over the vocabulary needs float32, in bfloat16 mode too.
        is_chosen = labels != -100
        is_mask = is_chosen & (inputs == self.mask_token_id)
        labels = tf.where(is_chosen, labels, 0)  # Any valid id: the sums leave those positions out.
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
        """Gradients of the summed masked cross-entropy and the summed stats, over the micro-batches."""
        steps = self.gradient_accumulation_steps
        micro_batches = {name: tf.reshape(value, [steps, -1, value.shape[-1]]) for name, value in batch.items()}
        gradient_sums, stat_sums = None, None
        # A Python loop, unrolled into the graph: in a graph loop nested in Keras' steps_per_execution loop,
        # TensorFlow's optimizer turns large gradient sums into accumulators whose variables clash
        # (AlreadyExistsError). The graph, and compilation time, grow with the number of micro-batches.
        for i in range(steps):
            with tf.GradientTape() as tape:
                stats = self._masked_lm_sums({name: value[i] for name, value in micro_batches.items()}, True)
            # Zeros for the weights the loss does not reach (a pooler, ALBERT's second output bias).
            gradients = [tf.convert_to_tensor(gradient) for gradient in tape.gradient(
                stats["cross_entropy"], self.mlm.trainable_variables, unconnected_gradients="zero")]
            gradient_sums = gradients if gradient_sums is None else [
                total + gradient for total, gradient in zip(gradient_sums, gradients)]
            stat_sums = stats if stat_sums is None else {name: stat_sums[name] + stats[name] for name in stats}
        return gradient_sums, stat_sums

    @tf.autograph.experimental.do_not_convert
    def train_step(self, batch):
        gradient_sums, sums = self.compute_gradients(batch)
        global_count = tf.distribute.get_replica_context().all_reduce("sum", sums["count"])
        # The optimizer sums the replicas' gradients: divided by the global count, that sum is the gradient of the
        # mean over every masked position of the global batch.
        gradients = [gradient / tf.maximum(global_count, 1.0) for gradient in gradient_sums]
        self.optimizer.apply_gradients(zip(gradients, self.mlm.trainable_variables))
        return self._update_metrics(sums)

    @tf.autograph.experimental.do_not_convert
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


# ----------------------------------------------------------------------------------------------------------------
# The shards, checked against their manifest, the tokenizer and the hosts before anything is built


def find_shards(path, max_length, tokenizer=None, tokenizer_name=None):
    """The shard files of a folder or glob and their sample counts, checked against `max_length` and, when given,
    the `tokenizer` (which the user named `tokenizer_name`). The counts come from manifest.json, or, for shards of
    the original Transformers example, from the file names. The checks read the manifest, the file list and at most
    one record: cheap, before anything is built."""
    is_folder = tf.io.gfile.isdir(path)
    files = sorted(tf.io.gfile.glob(os.path.join(path, "*.tfrecord") if is_folder else path))
    folder = os.path.dirname(files[0]) if files else path if is_folder else None
    manifest_path = folder and os.path.join(folder, MANIFEST_NAME)
    if folder and not tf.io.gfile.exists(manifest_path):
        refuse_an_interrupted_split(folder)
        manifest_path = None
    if not files:
        raise UserError(f"no .tfrecord shard found at {path!r}. Check the path, or write shards there "
                        "with prepare_tfrecord_shards.py.")
    if manifest_path:
        with tf.io.gfile.GFile(manifest_path, "rb") as f:
            manifest = Manifest.from_json(f.read(), manifest_path)
        sizes = refuse_shards_that_are_not_the_manifests(path, files, manifest, manifest_path, tokenizer,
                                                         tokenizer_name)
        shard_max_length = manifest.max_length
    else:
        logger.warning("The shards at %r have no %s, so this script cannot check that they are the whole split, "
                       "nor that they were written with the tokenizer --tokenizer names (shards of the original "
                       "Transformers example have none).", path, MANIFEST_NAME)
        matches = [SHARD_NAME_PATTERN.search(os.path.basename(file)) for file in files]
        if not all(matches):
            raise UserError(f"cannot count the samples of the shards at {path!r}: there is no "
                            f"{MANIFEST_NAME}, and not every file is named dataset-INDEX-NUM_SAMPLES.tfrecord.")
        sizes = [int(match.group(2)) for match in matches]
        with damaged_shards_named(files[:1]):
            record = next(iter(tf.data.TFRecordDataset(files[0]).take(1))).numpy()
        shard_max_length = len(tf.train.Example.FromString(record).features.feature["input_ids"].int64_list.value)
    if shard_max_length != max_length:
        raise UserError(f"the shards at {path!r} hold samples of {shard_max_length} tokens, but "
                        f"--max_length is {max_length}. Pass --max_length {shard_max_length}, or write new shards.")
    return files, sizes


def refuse_shards_that_are_not_the_manifests(path, files, manifest, manifest_path, tokenizer, tokenizer_name):
    """The sample count of each file, after checking that the files are the manifest's, of the sizes it records
    (a truncated copy is found before training: one stat per shard), and written with `tokenizer`'s vocabulary
    (else their ids would mean other tokens, or lie beyond the embedding table: read as zeros on a TPU, silently)."""
    listed = {shard["file"]: shard for shard in manifest.shards}
    unlisted = [file for file in files if os.path.basename(file) not in listed]
    if unlisted:
        raise UserError(f"{unlisted[0]!r} is not listed in {manifest_path!r}: the folder mixes shards of "
                        "different runs. Write the shards again into an empty folder.")
    wrong = [f"{file} ({size} bytes, {listed[os.path.basename(file)]['num_bytes']} expected)" for file in files
             if (size := tf.io.gfile.stat(file).length) != listed[os.path.basename(file)]["num_bytes"]]
    if wrong:
        raise UserError(f"{len(wrong)} shard(s) do not have the size that {manifest_path!r} records, so "
                        f"they are truncated or damaged (an interrupted copy?): {', '.join(wrong)}. Copy the "
                        "shards again, or write them again with prepare_tfrecord_shards.py (with --overwrite).")
    if tokenizer is not None and (manifest.vocab_size != len(tokenizer) or manifest.vocabulary_fingerprint
                                  != vocabulary_fingerprint(tokenizer.backend_tokenizer)):
        difference = (f"a vocabulary of {manifest.vocab_size} tokens, but --tokenizer {tokenizer_name!r} has "
                      f"{len(tokenizer)}" if manifest.vocab_size != len(tokenizer) else
                      f"a vocabulary of the same size as that of --tokenizer {tokenizer_name!r}, but other tokens")
        raise UserError(
            f"the shards at {path!r} were written with the tokenizer {manifest.tokenizer!r}, {difference}: "
            "their token ids mean other tokens for this model. Pass the tokenizer the shards were written with "
            f"(--tokenizer {manifest.tokenizer}), or write the shards again with this one "
            f"(prepare_tfrecord_shards.py --tokenizer_name_or_path {tokenizer_name} --overwrite ...).")
    return [listed[os.path.basename(file)]["num_samples"] for file in files]


def refuse_an_interrupted_split(folder):
    """Stops when `folder`, which has no manifest, holds what an interrupted prepare_tfrecord_shards.py leaves."""
    leftovers = [name for name in (INCOMPLETE_MARKER_NAME, "*.tfrecord.tmp")
                 if tf.io.gfile.glob(os.path.join(folder, name))]
    if leftovers:
        raise UserError(
            f"the shards at {folder!r} are incomplete: prepare_tfrecord_shards.py was interrupted while "
            f"writing them (the folder holds {' and '.join(leftovers)}, and no {MANIFEST_NAME}). Run "
            "prepare_tfrecord_shards.py again, with --overwrite, and let it finish.")


@contextlib.contextmanager
def damaged_shards_named(files):
    """Turns TensorFlow's DataLossError, which names no file, into an error naming the damaged shards among
    `files`, found by reading them all again (diagnostics.py)."""
    try:
        yield
    except tf.errors.DataLossError as error:
        from diagnostics import explain_damaged_shards

        message = explain_damaged_shards(files)
        if message is None:
            raise
        raise UserError(message) from error


def check_paths_for_pod(args, num_hosts):
    """Refuses paths that the hosts of a TPU pod slice cannot all reach. One process on worker 0 drives them all,
    but each host runs its own input pipeline and saves its own part of each checkpoint: a local path means each
    host's own disk."""
    if num_hosts == 1:
        return
    local_shards = [path for path in (args.train_dataset, args.eval_dataset) if path and not is_gcs_path(path)]
    if local_shards and not args.shards_on_every_host:
        raise UserError(
            f"this TPU has {num_hosts} hosts, and each reads its own shards, but {local_shards[0]!r} is a "
            "local path, which the other hosts cannot see. Copy the shards to a bucket (`gcloud storage cp -r "
            f"{local_shards[0]} gs://BUCKET/...`) and pass the gs:// path; or, if you copied them to this same path "
            "on every host, pass --shards_on_every_host.")
    if not is_gcs_path(args.output_dir):
        raise UserError(f"this TPU has {num_hosts} hosts, and each saves its own part of every checkpoint, "
                        f"but --output_dir {args.output_dir!r} is a local path. Pass a gs:// folder.")


def masking_arguments(args, tokenizer):
    """mask_tokens' arguments, from the flags and the tokenizer."""
    return dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                vocab_size=len(tokenizer), mlm_probability=args.mlm_probability,
                max_predictions=args.max_predictions_per_seq, spans=args.masking == "span",
                word_starts=None if args.masking == "token" else word_start_table(tokenizer))


def distributed_datasets(args, strategy, plan, masking, train_files, eval_files):
    """(training(first_step), evaluation): on each host, make_dataset over its own shards, for its own replicas.
    Training batches hold every micro-batch of a step; evaluation is the plan.eval_steps batches of every round.
    `masking`: masking_arguments."""

    def distribute(files, seed, batch_size, **kwargs):
        return strategy.distribute_datasets_from_function(lambda input_context: make_dataset(
            files, input_context, batch_size=batch_size, max_length=args.max_length, masking=masking, seed=seed,
            **kwargs))

    def training(first_step):
        return distribute(train_files, args.seed + first_step, plan.batch_per_replica_step, training=True,
                          shuffle_buffer_size=args.shuffle_buffer_size)

    if not eval_files:
        return training, None
    return training, distribute(eval_files, args.seed, args.per_replica_batch_size, training=False,
                                num_batches=plan.eval_steps * plan.replicas_per_host)


# ----------------------------------------------------------------------------------------------------------------
# The model and how long it trains


def config_overrides(text):
    """An argparse type: --config_overrides as given ("name=value,..."), its rates and sizes checked here; the names
    and the other values are checked once the config is loaded (model_config). A dropout rate of 1 or more, or a
    size of 0, would train a model that cannot learn, or fail deep in Keras."""
    for name, _, value in (pair.partition("=") for pair in text.split(",")):
        if "dropout" in name and value != "None" and not 0 <= float(value) < 1:
            raise argparse.ArgumentTypeError(f"{name} is a dropout rate: it must be in [0, 1), got {value}")
        if (name.endswith("_size") or name.startswith("num_") or name == "max_position_embeddings") \
                and not int(value) > 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive number, got {value}")
    return text


def model_config(args, tokenizer):
    """The model config: --pretrained_model_config, --config_overrides, and the tokenizer's vocabulary and ids; or
    that of --model_name_or_path, whose weights fix every shape: dropout overrides only, and its own tokenizer."""
    start = args.model_name_or_path
    config = load_config(start or args.pretrained_model_config,
                         "--model_name_or_path" if start else "--pretrained_model_config",
                         "Pass a Hub model id (online), or a local folder holding config.json"
                         + ("." if start else ", or a config file."))
    original = config.to_dict()
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
        except ValueError as err:
            raise UserError(f"bad --config_overrides {args.config_overrides!r}: {err}") from err
    if config.model_type == "deberta" and config.relative_attention:
        raise UserError("DeBERTa (v1) with relative_attention=True does not train under XLA, which TPUs always use "
                        "(TensorFlow's DeBERTa: a gradient in its attention fails to compile). Use deberta-v2 "
                        "(configs/deberta-v3-base.json), or add relative_attention=False to --config_overrides.")
    if config.model_type not in ARCHITECTURES:
        logger.warning("%s is not among the architectures tested with this pipeline (README, \"Architectures\"): it "
                       "may fail at its first step, and it gets no PyTorch copy.", config.model_type)
    if not start:
        config.update(dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
        check_max_length(config, args.max_length, can_override=True)
        return config
    changed = [key for key, value in config.to_dict().items() if original.get(key) != value and "dropout" not in key]
    if changed:
        raise UserError(f"--config_overrides sets {changed[0]}, but the model of --model_name_or_path {start!r} "
                        f"has {changed[0]}={original.get(changed[0])!r} in its weights: starting from a model, "
                        "only dropout may change. Drop it, or train a new model of that shape from scratch "
                        "(--pretrained_model_config).")
    refuse_a_tokenizer_not_the_models(args, config, tokenizer)
    check_max_length(config, args.max_length, weights_from=start)
    return config


def refuse_a_tokenizer_not_the_models(args, config, tokenizer):
    """Stops unless `tokenizer` (--tokenizer, which the shards were checked against) is the model's own: another
    vocabulary would give every id the embedding of another token. The model's tokenizer, where its folder has one,
    must have the same tokens at the same ids, special ones included; else the sizes and the pad id must fit."""
    from transformers import AutoTokenizer

    start = args.model_name_or_path
    try:
        own = AutoTokenizer.from_pretrained(local_copy(start))
    except (OSError, ValueError):  # A model folder without tokenizer files.
        own = None
        logger.warning("The model %s has no tokenizer to compare --tokenizer with: only its size is checked.", start)

    def special_ids(tokenizer):
        return {name: getattr(tokenizer, name + "_token_id") for name in ("pad", "mask", "bos", "eos", "unk")}

    if own is None:
        if len(tokenizer) <= config.vocab_size and tokenizer.pad_token_id == config.pad_token_id:
            return
        difference = (f"{len(tokenizer)} tokens and pad id {tokenizer.pad_token_id}, the model {config.vocab_size} "
                      f"embeddings and pad id {config.pad_token_id}")
    elif vocabulary_fingerprint(own.backend_tokenizer) != vocabulary_fingerprint(tokenizer.backend_tokenizer):
        difference = (f"{len(tokenizer)} tokens, the model's {len(own)}" if len(own) != len(tokenizer)
                      else f"{len(tokenizer)} tokens as the model's, but other tokens or ids")
    elif special_ids(tokenizer) != special_ids(own):
        difference = f"special tokens at other ids ({special_ids(tokenizer)}, the model's {special_ids(own)})"
    else:
        return
    raise UserError(
        f"--tokenizer {args.tokenizer!r} is not the tokenizer of the model {start!r}: {difference}. Its ids would "
        "mean other tokens to the model. Drop --tokenizer (the model's is the default), and write the shards with "
        f"the model's tokenizer: prepare_tfrecord_shards.py --tokenizer_name_or_path {start} ...")


def build_trainer(args, config, tokenizer, plan, jit_compile, train_files):
    """The model (new, or that of --model_name_or_path) in a compiled MaskedLMTrainer, and its learning-rate
    schedule. Call it in the strategy's scope. The token counts beside the shards give the frequency baseline, and
    (--output_bias) a new model's starting output bias: a loaded one keeps its own."""
    if args.model_name_or_path:
        mlm = load_pretrained_model(TFAutoModelForMaskedLM, args.model_name_or_path, "--model_name_or_path", config)
    else:
        mlm = TFAutoModelForMaskedLM.from_config(config)
        mlm.build_in_name_scope()  # The weights now, with the names that save_pretrained expects.
    optimizer, learning_rate = create_optimizer(init_lr=args.learning_rate, num_train_steps=plan.total_steps,
                                                num_warmup_steps=plan.warmup_steps,
                                                weight_decay_rate=args.weight_decay_rate)
    counts_path = os.path.join(os.path.dirname(train_files[0]), TOKEN_COUNTS_NAME)
    frequency_table = None
    if tf.io.gfile.exists(counts_path):
        with tf.io.gfile.GFile(counts_path) as f:  # One count per token id: find_shards checked the vocabulary.
            frequency_table = frequency_log_probs(json.load(f), tokenizer.all_special_ids)
        if args.output_bias == "frequencies" and not args.model_name_or_path:
            start_from_token_frequencies(mlm, frequency_table)  # A checkpoint restored later replaces it.
    else:
        logger.warning("No %s beside the training shards (shards of the original example): the metrics leave out "
                       "the token-frequency baseline.", TOKEN_COUNTS_NAME)
    trainer = MaskedLMTrainer(mlm, tokenizer.mask_token_id, args.gradient_accumulation_steps, jit_compile,
                              frequency_log_probs=frequency_table)
    trainer.compile(optimizer=optimizer, steps_per_execution=args.steps_per_execution)
    return trainer, learning_rate


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
    eval_samples: int
    eval_steps: int


def plan_training(args, strategy, train_sizes, eval_sizes):
    """Batch sizes and step counts, from the shard sizes and the hosts and replicas. Every host reads its own shards
    (see make_dataset), so an epoch is as many steps as the host with the fewest samples fills."""
    num_hosts = count_hosts(strategy)
    replicas_per_host = strategy.num_replicas_in_sync // num_hosts
    batch_per_replica_step = args.per_replica_batch_size * args.gradient_accumulation_steps

    def steps(sizes, batch_size, what):
        if len(sizes) < num_hosts:
            raise UserError(f"{num_hosts} hosts need at least {num_hosts} shard files, one per host, but "
                            f"there are {len(sizes)}. Write the shards again with a smaller --shard_size.")
        count = min(sum(sizes[host::num_hosts]) for host in range(num_hosts)) // batch_size // replicas_per_host
        if count == 0:
            raise UserError(f"the {sum(sizes)} {what} samples do not fill one global batch of "
                            f"{batch_size * strategy.num_replicas_in_sync}. Lower --per_replica_batch_size, or "
                            "prepare more data.")
        return count

    steps_per_epoch = steps(train_sizes, batch_per_replica_step, "training")
    total_steps = args.max_steps or args.num_epochs * steps_per_epoch
    warmup_steps = args.warmup_steps if args.warmup_steps is not None else int(args.warmup_ratio * total_steps)
    if warmup_steps >= total_steps:
        raise UserError(f"{warmup_steps} warmup steps leave nothing of the {total_steps} steps.")
    return TrainingPlan(
        num_hosts=num_hosts, replicas_per_host=replicas_per_host, batch_per_replica_step=batch_per_replica_step,
        global_batch_size=batch_per_replica_step * strategy.num_replicas_in_sync, train_samples=sum(train_sizes),
        steps_per_epoch=steps_per_epoch, total_steps=total_steps, warmup_steps=warmup_steps,
        eval_every=args.eval_every_steps or steps_per_epoch, eval_samples=sum(eval_sizes),
        eval_steps=steps(eval_sizes, args.per_replica_batch_size, "evaluation") if eval_sizes else 0)


def fit_calls(start_step, total_steps, round_steps):
    """The model.fit calls from `start_step` to `total_steps`, each (first step, steps per round, rounds). Rounds
    line up on multiples of `round_steps`: the whole rounds share one call, a round begun before an interruption
    and a shorter last one get a call each. So every run ends at `total_steps`, evaluating at the same steps as a
    run never interrupted."""
    head = min(-start_step % round_steps, total_steps - start_step)
    whole_rounds, tail = divmod(total_steps - start_step - head, round_steps)
    calls = [(start_step, head, 1), (start_step + head, round_steps, whole_rounds), (total_steps - tail, tail, 1)]
    return [(first, steps, rounds) for first, steps, rounds in calls if steps and rounds]


# ----------------------------------------------------------------------------------------------------------------
# Speed: what a round's time means for the hardware, and whether the input pipeline keeps up

# Published peak dense throughput, FLOP/s. TPUs, per chip, in bfloat16 (Google Cloud's pages on each generation:
# cloud.google.com/tpu/docs/v2, v3, v4, v5e, v5p, v6e); a TPU multiplies float32 matrices in bfloat16 passes.
TPU_PEAK_FLOPS = {"v2": 45e12, "v3": 123e12, "v4": 275e12, "v5e": 197e12, "v5p": 459e12, "v6e": 918e12}
# TensorCores per chip that TensorFlow drives as replicas of their own: two on v2 and v3; one on v5e and v6e, and
# on v4 and v5p, whose two cores act as one (megacore).
TPU_REPLICAS_PER_CHIP = {"v2": 2, "v3": 2}
# NVIDIA GPUs, without sparsity: (bfloat16, TF32, float32), from NVIDIA's A100, H100 and L4 data sheets; matched
# in this order against the name TensorFlow reports ("NVIDIA H100 80GB HBM3" is the SXM module). TensorFlow
# multiplies float32 matrices in TF32 on these GPUs, unless tf.config.experimental.enable_tensor_float_32_execution
# turns it off.
GPU_PEAK_FLOPS = [("A100", (312e12, 156e12, 19.5e12)), ("H100 PCIe", (756e12, 378e12, 51e12)),
                  ("H100 NVL", (835e12, 418e12, 60e12)), ("H100", (989e12, 495e12, 67e12)),
                  ("L4", (121e12, 60e12, 30.3e12))]


def training_flops_per_token(config, max_length, max_predictions):
    """Floating-point operations of a training step (forward and backward) per token, counted from a BERT-style
    `config` (BERT, RoBERTa and the like) for samples of `max_length` tokens and an LM head that runs at
    `max_predictions` positions per sample (0: at every one).

    A multiply-add is 2 FLOPs, and the backward pass costs twice the forward one (gradients for the activations and
    for the weights): 6 FLOPs per multiply-add of the forward pass, that is 6 per weight that multiplies each token's
    vector, plus attention. Per token, with hidden size h, feed-forward size f, L tokens per sample, vocabulary V
    and K head positions per sample, the forward pass does these multiply-adds:
        each layer   4 h^2 + 2 h f          query, key, value and output projections; the two feed-forward ones
                     + 2 L h                attention: scores against L keys, then the sum of L values
        LM head      K / L x (h^2 + h V)    its dense layer and the projection onto the vocabulary, at K of L
    Embeddings are looked up (the vocabulary projection reuses the word embeddings, counted in the head); biases,
    layer norms, activations, softmaxes and the optimizer update are left out: a few percent. DeBERTa's
    relative-position attention and ConvBERT's convolutions are counted as BERT's attention: roughly.
    """
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    feed_forward = getattr(config, "intermediate_size", None) or config.hidden_dim  # DistilBERT's name for it.
    # ALBERT, ELECTRA and ConvBERT embed in a smaller size e: projected to h for every token, and the head's dense
    # layer maps h to e before the vocabulary projection.
    embedding = getattr(config, "embedding_size", None) or hidden
    projection = hidden * embedding if embedding != hidden else 0
    per_layer = 4 * hidden**2 + 2 * hidden * feed_forward + 2 * max_length * hidden
    head = (max_predictions or max_length) / max_length * (hidden * embedding + embedding * vocab)
    return 6 * (projection + layers * per_layer + head)


def model_flops_utilization(flops_per_second, peak_flops):
    """MFU, in percent: the model's FLOPs per second (counted as above, not what the device executes, which
    includes recomputation and other overhead) over the devices' peak."""
    return 100 * flops_per_second / peak_flops


def peak_flops(strategy, on_tpu, bfloat16):
    """(The published peak FLOP/s of all replicas, what they are); (None, what they are) where no peak is known."""
    replicas = strategy.num_replicas_in_sync
    if on_tpu:
        generation = next(iter(local_tpu_chips()), "of unknown generation")  # A TPU Node's chips are not local.
        if generation not in TPU_PEAK_FLOPS:
            return None, f"TPU {generation}"
        per_chip = TPU_REPLICAS_PER_CHIP.get(generation, 1)
        return (replicas / per_chip * TPU_PEAK_FLOPS[generation],
                f"{replicas // per_chip} x TPU {generation} at {TPU_PEAK_FLOPS[generation] / 1e12:g} TFLOP/s in "
                "bfloat16")
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None, "CPU"
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    for model, peaks in GPU_PEAK_FLOPS:
        if model in name:
            precision = 0 if bfloat16 else 1 if tf.config.experimental.tensor_float_32_execution_enabled() else 2
            return (replicas * peaks[precision], f"{replicas} x {name} at {peaks[precision] / 1e12:g} TFLOP/s in "
                                                 f"{('bfloat16', 'TF32', 'float32')[precision]}")
    return None, name


@dataclasses.dataclass
class Throughput:
    """Turns the steps of a round and their time into what they mean for the hardware: tokens and samples per
    second (all replicas), the model's FLOP/s and, where the devices' peak is known, MFU."""
    flops_per_token: float
    tokens_per_step: int
    samples_per_step: int
    num_hosts: int
    peak_flops: float | None
    devices: str
    input_samples_per_second: float | None = None  # One host's input pipeline alone: check_input_pipeline.

    @classmethod
    def of(cls, args, config, plan, strategy, on_tpu):
        return cls(training_flops_per_token(config, args.max_length, args.max_predictions_per_seq),
                   plan.global_batch_size * args.max_length, plan.global_batch_size, plan.num_hosts,
                   *peak_flops(strategy, on_tpu, args.bfloat16))

    def describe_peak(self):
        if self.peak_flops is None:
            return f"no published peak is known for {self.devices}: rounds show TFLOP/s, no MFU"
        return f"peak {self.peak_flops / 1e12:,.0f} TFLOP/s ({self.devices})"

    def figures(self, steps, seconds):
        tokens_per_second = steps * self.tokens_per_step / seconds
        figures = {"tokens_per_second": tokens_per_second,
                   "samples_per_second": steps * self.samples_per_step / seconds,
                   "flops_per_token": self.flops_per_token, "tflops": tokens_per_second * self.flops_per_token / 1e12}
        if self.peak_flops:
            figures["mfu_percent"] = model_flops_utilization(figures["tflops"] * 1e12, self.peak_flops)
        return figures

    @staticmethod
    def describe(figures):
        text = (f"{figures['tokens_per_second']:,.0f} tokens/s, {figures['samples_per_second']:,.1f} samples/s, "
                f"{figures['flops_per_token'] / 1e6:.4g} MFLOP/token, {figures['tflops']:.3g} TFLOP/s")
        return text + (f", MFU {figures['mfu_percent']:.1f} %" if "mfu_percent" in figures else "")

    def compare_with_input(self, figures):
        """Logs how much of what one host's input pipeline delivers alone training takes; warns when it takes so
        much that the steps likely wait for their input. Returns that share."""
        taken = figures["samples_per_second"] / self.num_hosts
        share = taken / self.input_samples_per_second
        logger.info("Input pipeline: %s samples/s per host alone, before training; training takes %s (%.1f %%)",
                    f"{self.input_samples_per_second:,.0f}", f"{taken:,.1f}", 100 * share)
        if share > INPUT_BOUND_SHARE:
            logger.warning(
                "Training takes %.0f %% of what the input pipeline delivers alone: the steps likely wait for their "
                "input, and the devices idle. Give each host more shards to read in parallel (at least 8: a "
                "smaller --shard_size in prepare_tfrecord_shards.py, or more data), keep gs:// shards in the "
                "devices' region, use hosts with more CPU cores; a larger --shuffle_buffer_size evens out slow "
                "reads.", 100 * share)
        return share


# Above this share of the input pipeline's own speed, training is likely held back by it: the pipeline shares the
# host's cores with the rest of the step, and its speed varies with the files it reads.
INPUT_BOUND_SHARE = 0.8


@tf.function
def pull_batches(iterator, num_batches):
    """Takes `num_batches` batches from a dataset iterator inside TensorFlow: no Python runs per batch."""
    for _ in tf.range(num_batches):
        iterator.get_next()


def check_input_pipeline(args, strategy, plan, masking, train_files, throughput, results):
    """Times this host's input pipeline alone, as training builds it, with no model, for about
    --input_check_seconds, after its shuffle buffer has filled; logs its samples/s and, where the devices' peak is
    known, what training would take at that peak. (One process drives every host of a TPU pod: it times host 0's.)"""
    resolver = strategy.cluster_resolver  # None on one machine; a worker's task index with TF_CONFIG.
    host = resolver.task_id if resolver is not None and resolver.task_id is not None else 0
    dataset = make_dataset(train_files, tf.distribute.InputContext(plan.num_hosts, host, plan.replicas_per_host),
                           batch_size=plan.batch_per_replica_step, max_length=args.max_length,
                           masking=masking, seed=args.seed, training=True,
                           shuffle_buffer_size=args.shuffle_buffer_size)
    with tf.device("/cpu:0"):  # The host's CPU, wherever the devices are.
        iterator = iter(dataset)
        pull_batches(iterator, tf.constant(1))  # Waits for the shuffle buffer to fill.
        batches, start, seconds = 0, time.perf_counter(), 0.0
        while seconds < args.input_check_seconds or not batches:  # Some batches, however short the time asked.
            pull_batches(iterator, tf.constant(INPUT_CHECK_BATCHES))
            batches += INPUT_CHECK_BATCHES
            seconds = time.perf_counter() - start
    samples_per_second = throughput.input_samples_per_second = batches * plan.batch_per_replica_step / seconds
    at_peak = "" if throughput.peak_flops is None else (
        "; at the devices' peak, training would take "
        f"{throughput.peak_flops / throughput.flops_per_token / args.max_length / plan.num_hosts:,.0f} per host")
    logger.info("Input pipeline alone, on this host: %s samples/s (%s tokens/s), over %.1f s%s",
                f"{samples_per_second:,.0f}", f"{samples_per_second * args.max_length:,.0f}", seconds, at_peak)
    results.record(input_pipeline_samples_per_second=throughput.input_samples_per_second)


INPUT_CHECK_BATCHES = 20  # Per call of pull_batches: a few milliseconds on a fast host.


# ----------------------------------------------------------------------------------------------------------------
# Where a run starts, when it stops, what it records and saves

# What a run writes into --output_dir before its end: a folder holding only these is a run to resume.
RUN_STATE = ("checkpoints", "logs", "training_results.json")


class OutputDirLease:
    """One run at a time per --output_dir: {output_dir}/running.json names the run that writes there (host, process,
    start) and when it last renewed its claim. The chief holds it (the other hosts of a multi-host run write only
    to scratch folders), renews it every RENEW_SECONDS from a thread, and deletes it when its process exits.

    A run killed with SIGKILL, or on a lost VM, cannot delete it. A later run takes over when the holder is gone:
    on the holder's host, once its process no longer lives; elsewhere (a gs:// folder, or a local one shared across
    hosts), once the claim has not been renewed for LEASE_SECONDS. Deleting the file takes over at once. Claims are
    atomic (a file created only if absent, a rename; in a bucket, a write conditional on the object's generation):
    of two runs that start together, one wins."""

    NAME = "running.json"
    LEASE_SECONDS = 600  # Ten missed renewals: a slow bucket or a long pause is not taken for a lost VM.
    RENEW_SECONDS = 60

    def __init__(self, output_dir):
        self.output_dir, self.path = output_dir, os.path.join(output_dir, self.NAME)
        self.claim = {"host": socket.gethostname(), "pid": os.getpid(), "process_start": process_start(os.getpid()),
                      "started": time.time(), "renewed": time.time(), "run": uuid.uuid4().hex}
        self.generation = None  # In a bucket: the object's generation, as this run last wrote it.
        self.stopped = threading.Event()

    def hold(self):
        """Claims the folder, or raises UserError naming the run that holds it; released when the process exits."""
        refuse_a_file_as_output_dir(self.output_dir)
        holder, generation = self.read()
        if holder is not None and self.holder_is_running(holder):
            raise UserError(self.held_message(holder))
        if holder is not None:
            logger.warning("%s names a run that ended without releasing it (%s): this run takes over.", self.path,
                           describe_run(holder))
        if not self.claim_folder(holder is not None, generation):
            raise UserError(self.held_message(self.read()[0] or {}))  # Another run claimed it first.
        atexit.register(self.release)
        threading.Thread(target=self.renew_until_stopped, daemon=True, name="output-dir-lease").start()

    def holder_is_running(self, holder):
        if holder.get("host") == self.claim["host"]:
            started = process_start(holder.get("pid"))
            if started is not None:  # /proc says whether its process lives, and whether it is the same one.
                return started == holder.get("process_start")
        return time.time() - holder.get("renewed", 0) < self.LEASE_SECONDS

    def held_message(self, holder):
        here = holder.get("host") == self.claim["host"]
        return (f"another run is writing into --output_dir {self.output_dir!r}: {describe_run(holder)}. Two runs "
                "in one folder would overwrite each other's checkpoints and model. Wait for it to end, or stop it "
                f"(Ctrl-C, or `kill {holder.get('pid')}` on host {holder.get('host')}: it saves a checkpoint, and "
                "the same command resumes from it), or choose another --output_dir."
                + ("" if here else " If that run is gone (its VM lost), a new run takes over once its claim expires, "
                   f"at {utc(holder.get('renewed', 0) + self.LEASE_SECONDS)} ({self.LEASE_SECONDS // 60} minutes "
                   f"after it was last renewed), or at once if you delete {self.path}."))

    def read(self):
        """(the claim in the folder, its generation in a bucket), or (None, None) when there is none; {} for a file
        that is not a claim (cut short by a full disk, say), which names no run and has expired."""
        if is_gcs_path(self.path):
            blob = gcs_blob(self.path)
            from google.api_core.exceptions import NotFound

            try:
                blob.reload()  # Its generation, then the bytes of that generation.
                data = blob.download_as_bytes(if_generation_match=blob.generation)
            except NotFound:
                return None, None
            generation = blob.generation
        else:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                return None, None
            generation = None
        try:
            claim = json.loads(data)
        except ValueError:
            claim = None
        return claim if isinstance(claim, dict) else {}, generation

    def claim_folder(self, replacing, generation):
        """Writes this run's claim where there was none, or over the ended run's; False if another run won."""
        data = json.dumps(self.claim, indent=2).encode()
        if is_gcs_path(self.path):
            return self.write_to_bucket(data, expected_generation=generation or 0)  # 0: only if there is none.
        os.makedirs(self.output_dir, exist_ok=True)
        if replacing:  # A rename is atomic: of two runs taking over, one moves the ended run's claim away.
            try:
                os.rename(self.path, f"{self.path}.{self.claim['run']}")
            except FileNotFoundError:
                return False
            os.remove(f"{self.path}.{self.claim['run']}")
        try:
            with open(self.path, "xb") as f:  # Only if there is none.
                f.write(data)
        except FileExistsError:
            return False
        return True

    def write_to_bucket(self, data, expected_generation):
        from google.api_core.exceptions import PreconditionFailed

        blob = gcs_blob(self.path)
        try:
            blob.upload_from_string(data, if_generation_match=expected_generation)
        except PreconditionFailed:
            return False
        self.generation = blob.generation
        return True

    def renew(self):
        """Writes the claim again with the time now; False when another run has taken the folder over."""
        self.claim["renewed"] = time.time()
        data = json.dumps(self.claim, indent=2).encode()
        if is_gcs_path(self.path):
            return self.write_to_bucket(data, expected_generation=self.generation)
        if (self.read()[0] or {}).get("run") != self.claim["run"]:
            return False
        try:
            with open(f"{self.path}.tmp", "wb") as f:
                f.write(data)
            os.replace(f"{self.path}.tmp", self.path)
        except OSError:  # A full disk: no stray file left beside the claim.
            with contextlib.suppress(OSError):
                os.remove(f"{self.path}.tmp")
            raise
        return True

    def renew_until_stopped(self):
        while not self.stopped.wait(self.RENEW_SECONDS):
            try:
                if not self.renew():
                    logger.error("Another run has taken over %s: two runs now write into %s. Stop one of them.",
                                 self.path, self.output_dir)
                    return
            except Exception as err:  # One failed renewal (a full disk, the network) must not end the run.
                logger.warning("Could not renew %s: %s", self.path, err)

    def release(self):
        self.stopped.set()
        if (self.read()[0] or {}).get("run") == self.claim["run"]:  # Never another run's claim.
            delete(self.path)


def describe_run(claim):
    return (f"process {claim.get('pid', '?')} on host {claim.get('host', '?')}, started "
            f"{utc(claim.get('started', 0))}, its claim last renewed {utc(claim.get('renewed', 0))}")


def process_start(pid):
    """When the process `pid` started, in clock ticks since boot (so that a new process given the same id is not
    taken for it); "gone" when there is no such process; None where /proc cannot say."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]  # Field 22; the name before ")" may hold spaces.
    except FileNotFoundError:
        return "gone"
    except (OSError, TypeError, ValueError, IndexError):
        return None


def utc(seconds):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def check_where_the_run_starts(args, plan, recorded, is_chief):
    """False when an earlier run of this command (`recorded`: its results) trained `plan.total_steps` and saved its
    model: nothing left to do. Else refuses an --output_dir that holds something other than a run to resume (with
    --overwrite, clears it), and a checkpoint that this command would not continue."""
    saved_at = recorded.get("saved_model_step")
    if saved_at is not None and saved_at >= plan.total_steps:
        logger.info("The run in %s is already complete at step %d%s, and its model is saved there. Nothing to do. "
                    "To train longer, raise --max_steps or --num_epochs; to start over, pass --overwrite.",
                    args.output_dir, saved_at,
                    f" (this command asks for {plan.total_steps})" if saved_at > plan.total_steps else "")
        return False
    if is_chief and saved_at is None:  # A folder with a model this script saved is this script's.
        check_output_dir(args.output_dir, args.overwrite, resumable=(*RUN_STATE, OutputDirLease.NAME),
                         stale=RUN_STATE)
    latest = None if args.overwrite else last_checkpoint(os.path.join(args.output_dir, "checkpoints"))
    step = latest and int(latest.rsplit("-", 1)[1])  # Checkpoints are numbered by their step.
    if latest and recorded.get("global_batch_size", plan.global_batch_size) != plan.global_batch_size:
        raise UserError(
            f"{args.output_dir!r} holds a run, checkpointed at step {step}, that trained on global batches "
            f"of {recorded['global_batch_size']} samples ({recorded['per_replica_batch_size']} per replica x "
            f"{recorded['num_replicas']} replicas x {recorded['gradient_accumulation_steps']} accumulation steps), "
            f"but this command's global batch is {plan.global_batch_size}. Its steps, learning-rate schedule and "
            "place in the data count batches of that size. To resume it, run it with the same global batch "
            "(--per_replica_batch_size x replicas x --gradient_accumulation_steps); to train with this one, start "
            "over with --overwrite, or choose another --output_dir.")
    if latest and step > plan.total_steps:
        raise UserError(
            f"{args.output_dir!r} holds an unfinished run, checkpointed at step {step}, beyond the "
            f"{plan.total_steps} steps this command asks for. To finish it, run it with --max_steps {step} or more "
            "(or as many --num_epochs as it had); to start over, pass --overwrite.")
    return True


def restore_last_checkpoint(args, trainer, is_chief):
    """Restores the last checkpoint in --output_dir, if any: weights, optimizer state and step, hence the
    learning-rate schedule. Returns the CheckpointManager that saves the next ones; the other hosts of a
    multi-worker job take part in saving (a collective operation), into a scratch folder."""
    directory = os.path.join(args.output_dir, "checkpoints")
    latest = None if args.overwrite else last_checkpoint(directory)
    if latest:
        check_checkpoint(latest, directory)
    # Adam's moments now, in a new run too: created in the first step, they would make TensorFlow trace it twice; and
    # each one created after a restore would read the checkpoint again (over gs://, a minute for the tests' model).
    create_optimizer_state(trainer.optimizer, trainer.mlm.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=trainer.mlm, optimizer=trainer.optimizer)
    if latest:
        checkpoint.restore(latest)
        logger.info("Resuming from %s, at step %d", latest, int(trainer.optimizer.iterations.numpy()))
    return tf.train.CheckpointManager(checkpoint, directory if is_chief else tempfile.mkdtemp(), max_to_keep=3)


class CheckpointAndStop(keras.callbacks.Callback):
    """Saves a checkpoint every `every_steps` steps and at the last one. SIGTERM (a preempted VM) and SIGINT (Ctrl-C)
    take effect at the end of the step: a checkpoint is saved, then the script exits with the shell's code for the
    signal. The hosts of a multi-worker job agree on that step, whichever was signalled: one that left alone would
    leave the others waiting in a collective operation. A NaN or infinite loss stops training with no checkpoint
    after it. (Keras' BackupAndRestore refuses OneDeviceStrategy and numbers checkpoints by save, not step;
    tf.distribute's PreemptionCheckpointHandler ignores SIGTERM on Cloud TPU, CPU and GPU VMs.)"""

    def __init__(self, manager, every_steps, strategy, start_step, is_chief):
        super().__init__()
        self.manager, self.every_steps, self.strategy, self.is_chief = manager, every_steps, strategy, is_chief
        self.last_saved_step = start_step
        # One process drives every host of a TPU pod slice; a multi-worker job has a process per host.
        self.hosts_must_agree = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) \
            and count_hosts(strategy) > 1
        self.received_signal = None  # The name of the signal this process received, if any.
        self.stop_requested = False  # By a signal, to this host or to another.
        self.diverged_at_step = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum, frame):
        self.received_signal = signal.Signals(signum).name

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        flags = [self.received_signal is not None, not math.isfinite(float(logs["loss"]))]
        if self.hosts_must_agree:  # Each flag true where it is true on any host: one small all-reduce per step.
            values = self.strategy.run(lambda: tf.constant([float(flag) for flag in flags]))
            flags = [bool(total > 0) for total in self.strategy.reduce("SUM", values, axis=None)]
        self.stop_requested, diverged = flags
        if diverged:
            self.diverged_at_step = step
        elif self.stop_requested or step - self.last_saved_step >= self.every_steps:
            self.save(step)
        self.model.stop_training = self.stop_requested or diverged

    def save(self, step):
        directory = self.manager.directory
        try:
            with out_of_space_in_run(directory, f"the checkpoint of step {step}", directory):
                self.manager.save(checkpoint_number=step)
        except UserError:  # The files of the failed save go, giving their space back; the last good one stays.
            for leftover in tf.io.gfile.glob(os.path.join(directory, f"ckpt-{step}[._]*")):
                delete(leftover)
            raise
        self.last_saved_step = step

    def finish(self, step):
        """After training: exits after a NaN loss or a stop signal, else saves the last step's checkpoint."""
        if self.diverged_at_step is not None:
            raise UserError(f"the loss became NaN or infinite at step {self.diverged_at_step}. The last "
                            f"good checkpoint, {self.manager.latest_checkpoint}, is kept. Lower --learning_rate "
                            "or raise --warmup_steps, then run the same command again to resume from it.")
        if step > self.last_saved_step:
            self.save(step)  # The final step, whatever the interval.
        if not self.is_chief:
            tf.io.gfile.rmtree(self.manager.directory)  # Its scratch folder.
        if self.stop_requested or self.received_signal:
            logger.info("Stopped by %s at step %d, after saving checkpoint %s. Run the same command to resume.",
                        self.received_signal or "a signal to another host", step, self.manager.latest_checkpoint)
            # The shell's code for "killed by that signal"; another host's signal counts as a SIGTERM.
            raise SystemExit(128 + signal.Signals[self.received_signal or "SIGTERM"])


class ResultsFile(dict):
    """training_results.json in --output_dir, rewritten by the chief at every record: the run's batch (checked when
    it resumes), its metrics so far, and, once saved, the step of its model (a finished run)."""

    def __init__(self, output_dir, is_chief, overwrite):
        self.path, self.is_chief = os.path.join(output_dir, "training_results.json"), is_chief
        super().__init__({} if overwrite or not tf.io.gfile.exists(self.path) else self.read())

    def read(self):
        with tf.io.gfile.GFile(self.path) as f:
            try:
                results = json.load(f)
            except json.JSONDecodeError:  # Not this script's: check_output_dir refuses the folder.
                return {}
        return results if isinstance(results, dict) else {}

    def record(self, **fields):
        self.update(fields)
        if self.is_chief:
            tf.io.gfile.makedirs(os.path.dirname(self.path))  # The first record comes before any checkpoint.
            with out_of_space_in_run(os.path.dirname(self.path), os.path.basename(self.path),
                                     os.path.join(os.path.dirname(self.path), "checkpoints")):
                try:  # Written whole, then renamed: a full disk leaves the last complete file.
                    with tf.io.gfile.GFile(self.path + ".tmp", "w") as f:
                        json.dump(self, f, indent=2)
                    tf.io.gfile.rename(self.path + ".tmp", self.path, overwrite=True)
                except Exception:
                    delete(self.path + ".tmp")
                    raise


class RoundEnd(keras.callbacks.Callback):
    """At the end of each round (a Keras epoch), its training and evaluation metrics and its speed to the log, to
    `results` and to TensorBoard, at the optimizer step they belong to, with the learning rate. The speed counts
    from the end of the round's first execution (which, in a fit call's first round, also traces and compiles the
    step and fills the input pipeline) to the end of its last; a round of one execution counts from its start."""

    def __init__(self, results, log_dir, learning_rate_schedule, throughput):
        super().__init__()
        self.results, self.learning_rate_schedule, self.throughput = results, learning_rate_schedule, throughput
        self.log_dir, self.checkpoint_dir = log_dir, os.path.join(os.path.dirname(log_dir), "checkpoints")
        with out_of_space_in_run(log_dir, "TensorBoard logs", self.checkpoint_dir):
            self.writers = {part: tf.summary.create_file_writer(os.path.join(log_dir, part))
                            for part in ("train", "eval")}
        self.execution_ends = []  # (time, steps done in the round) at the end of each execution of the round.
        self.compared_with_input = False
        self.ended_at = None  # When the last round's figures were written.

    def write_tensorboard(self, part, metrics, step):
        with out_of_space_in_run(self.log_dir, "TensorBoard logs", self.checkpoint_dir):
            with self.writers[part].as_default(step=step):
                for name, value in metrics.items():
                    tf.summary.scalar(name, value)
                if part == "train":
                    tf.summary.scalar("learning_rate", self.learning_rate_schedule(step))
            self.writers[part].flush()

    def on_epoch_begin(self, epoch, logs=None):
        self.execution_ends = [(time.perf_counter(), 0)]

    def on_train_batch_end(self, batch, logs=None):
        self.execution_ends.append((time.perf_counter(), batch + 1))  # `batch`: the execution's last step.

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        train = {name: value for name, value in logs.items() if not name.startswith("val_")}
        evaluation = {name.removeprefix("val_"): value for name, value in logs.items() if name.startswith("val_")}
        ends = self.execution_ends
        (first_time, first_steps), (last_time, last_steps) = ends[1] if len(ends) > 2 else ends[0], ends[-1]
        speed = self.throughput.figures(last_steps - first_steps, last_time - first_time)
        logger.info("Step %d: %s; %s", step, format_metrics(logs), self.throughput.describe(speed))
        if self.throughput.input_samples_per_second and not self.compared_with_input:
            self.results.record(input_pipeline_share=self.throughput.compare_with_input(speed))
            self.compared_with_input = True
        self.results.record(step=step, final_train=train, speed=speed,
                            **({"final_eval": evaluation} if evaluation else {}))
        self.write_tensorboard("train", {**train, **speed}, step)
        self.write_tensorboard("eval", evaluation, step)
        self.ended_at = time.perf_counter()


def out_of_space_in_run(folder, what, checkpoint_dir):
    """utils.out_of_space_named for what a run writes as it goes: its checkpoints stay, and after space is freed,
    the same command resumes from the last one."""
    def then():
        latest = last_checkpoint(checkpoint_dir)
        return (f"The checkpoints in {checkpoint_dir!r} are intact, the last {latest!r}: free space, then run the "
                "same command again; it resumes from there." if latest else "No checkpoint was saved yet: free "
                "space, then run the same command again; it starts over.")

    return out_of_space_named(folder, what, then)


def format_metrics(metrics):
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


def weights_fingerprint(model):
    """A short hash of every weight's bytes: the hosts of a multi-host run must print the same one."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(weight.numpy().tobytes())
    return digest.hexdigest()[:16]


def warn_if_nothing_learned_from_context(results):
    """Below a tenth of a nat, the model has learned token frequencies and next to nothing from the context."""
    beyond = results.get("final_eval", {}).get("nats_beyond_frequency")
    if beyond is not None and beyond < 0.1:
        logger.warning("At <mask> positions, the model predicts tokens %s a table of token frequencies does "
                       "(%+.3f nats): it has learned next to nothing from the context yet. Train longer, or with "
                       "another recipe (learning rate, batch size, masking rate).",
                       "worse than" if beyond < 0 else "barely better than", beyond)


def save_config(output_dir, config, tokenizer):
    """The config and tokenizer beside the checkpoints: with them, export_model.py makes a model folder of any
    checkpoint, while the run is still going or after it was interrupted."""
    def write(folder):
        config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    save_folder(os.path.join(output_dir, "checkpoints", "config"), write, "The checkpoints' config and tokenizer")


def save_model(args, trainer, tokenizer, config, results, plan):
    """The model, its tokenizer, a PyTorch copy and a model card into --output_dir (and to the Hub with
    --hub_model_id); then, in training_results.json, the step it was saved at: the run is finished."""
    step, mlm = int(trainer.optimizer.iterations.numpy()), trainer.mlm
    results.record(step=step, model_type=config.model_type, vocab_size=config.vocab_size,
                   train_samples=plan.train_samples)
    metrics = "\n".join(f"| {name} | {value:.4f} |" for name, value in results.get("final_eval", {}).items())
    origin = (f"continued from `{args.model_name_or_path}`" if args.model_name_or_path
              else f"`{args.pretrained_model_config}` from scratch")
    description = f"""A {config.model_type} masked language model pre-trained with TensorFlow (`run_mlm.py` of a TF + 🤗
Transformers TPU pre-training pipeline), {origin}.

- Training data: `{args.train_dataset}`, {plan.train_samples} samples of {args.max_length} tokens
- Evaluation data: `{args.eval_dataset}`
- Tokenizer: `{args.tokenizer}`, vocabulary of {config.vocab_size}
- Config overrides: `{args.config_overrides or 'none'}`
- Steps: {step} at a global batch of {plan.global_batch_size} samples ({results['num_replicas']} replicas),
  learning rate {args.learning_rate}, weight decay {args.weight_decay_rate}

## Final evaluation (masked positions only)

`loss`, `perplexity` and `masked_accuracy` cover every position chosen for prediction; the `..._at_mask` metrics
only those whose input was `<mask>`, for the model and for a table of the training tokens' frequencies
(`frequency_...`); `nats_beyond_frequency` is how much lower the model's cross-entropy is there than the table's.

| metric | value |
|---|---|
{metrics or '| (no evaluation data) | |'}"""

    def write(folder):
        mlm.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        save_pytorch_copy(mlm, tokenizer, folder)
        write_model_card(folder, args.output_dir, "fill-mask", "The capital of France is <mask>.", description)

    save_folder(args.output_dir, write, "Model, tokenizer and model card", args.hub_model_id,  # Logs go to the Hub.
                f"Pre-trained for {step} steps", ignore_patterns=["checkpoints/*", OutputDirLease.NAME])
    results.record(saved_model_step=step)


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
