#!/usr/bin/env python
"""Benchmark of run_mlm.py's training step on the CPU: full vs gathered LM head, XLA on vs off, steps_per_execution.

Every combination is a MaskedLMTrainer, built and compiled as run_mlm.py does it (MirroredStrategy over the CPU,
AdamW from create_optimizer), around its own RoBERTa model of the size given, fed masked batches of random token
ids held in memory (the input pipeline is measured by input_pipeline.py; here it must cost nothing). The full
head's batches carry no "masked_positions", so the trainer computes vocabulary logits at every position; the
gathered head's carry the default --max_predictions_per_seq positions. Each trainer is warmed up once (tracing,
XLA compilation), then timed over --steps steps with model.fit, round after round, every combination in turn,
so that whatever else loads the machine disturbs them alike.

FLOPs per sample are counted analytically (common.training_flops_per_sample).

    python benchmarks/training_step.py
    python benchmarks/training_step.py --hidden 128 --layers 2 --steps_per_execution 1 8 --rounds 2

Rounds vary: with 8 trainers in one process, a trainer at times ran a whole round on one core of two (13 to 32
samples/s for one setting, on 2 cores), while a head trained alone in a process of its own kept both cores. So
the table gives each combination's best round, an estimate of its undisturbed speed, beside the median and the
worst, and compares the heads by their best rounds.
"""

import argparse
import itertools
import sys
import time

from common import describe_machine, load_average, median, print_table, training_flops_per_sample

import tensorflow as tf  # noqa: E402  (after common, which quiets TensorFlow)
import tf_keras as keras  # noqa: E402
from transformers import RobertaConfig, TFAutoModelForMaskedLM, create_optimizer  # noqa: E402

from run_mlm import MaskedLMTrainer, default_max_predictions, mask_tokens  # noqa: E402

SPECIAL_TOKEN_IDS = [0, 1, 2, 3, 4]  # <s>, <pad>, </s>, <unk>, <mask>: train_unigram.py's layout.


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=256, help="Hidden size (default: %(default)s).")
    parser.add_argument("--layers", type=int, default=4, help="Layers (default: %(default)s).")
    parser.add_argument("--heads", type=int, default=4, help="Attention heads (default: %(default)s).")
    parser.add_argument("--intermediate", type=int, default=1024,
                        help="Feed-forward size (default: %(default)s).")
    parser.add_argument("--vocab", type=int, default=10_000, help="Vocabulary size (default: %(default)s).")
    parser.add_argument("--length", type=int, default=128, help="Tokens per sample (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=32, help="Samples per step (default: %(default)s).")
    parser.add_argument("--steps", type=int, default=8,
                        help="Steps timed per round and combination; a multiple of every --steps_per_execution "
                             "(default: %(default)s).")
    parser.add_argument("--steps_per_execution", type=int, nargs="+", default=[1, 8],
                        help="Values to compare (default: %(default)s).")
    parser.add_argument("--jit_compile", choices=["on", "off"], nargs="+", default=["on", "off"],
                        help="XLA settings to compare (default: %(default)s).")
    parser.add_argument("--rounds", type=int, default=6, help="Rounds of measurements (default: %(default)s).")
    args = parser.parse_args()
    if any(args.steps % value for value in args.steps_per_execution):
        parser.error("--steps must be a multiple of every --steps_per_execution value.")
    return args


def masked_batches(args, max_predictions, num_batches=8):
    """An endless dataset of `num_batches` different masked batches, held in memory: <s> random ids </s>."""
    ids = tf.random.stateless_uniform([num_batches * args.batch_size, args.length], [0, 1], minval=5,
                                      maxval=args.vocab, dtype=tf.int32)
    ids = tf.concat([tf.zeros_like(ids[:, :1]), ids[:, 1:-1], tf.fill(tf.shape(ids[:, :1]), 2)], axis=1)

    def mask(index, batch_ids):
        batch = mask_tokens(batch_ids, tf.stack([tf.constant(0, tf.int64), index]), mask_token_id=4,
                            special_token_ids=SPECIAL_TOKEN_IDS, vocab_size=args.vocab, mlm_probability=0.15,
                            max_predictions=max_predictions)
        batch["attention_mask"] = tf.ones_like(batch_ids)
        return batch

    dataset = tf.data.Dataset.from_tensor_slices(ids).batch(args.batch_size, drop_remainder=True)
    return dataset.enumerate().map(mask).cache().repeat()


def build_trainer(strategy, config, jit_compile, steps_per_execution):
    with strategy.scope():
        mlm = TFAutoModelForMaskedLM.from_config(config)
        mlm.build_in_name_scope()
        optimizer, _ = create_optimizer(init_lr=1e-4, num_train_steps=10**6, num_warmup_steps=100,
                                        weight_decay_rate=1e-3)
        trainer = MaskedLMTrainer(mlm, jit_compile=jit_compile)
        trainer.compile(optimizer=optimizer, steps_per_execution=steps_per_execution)
    return trainer


def main():
    args = parse_args()
    keras.utils.set_random_seed(0)
    config = RobertaConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=args.heads, intermediate_size=args.intermediate,
                           max_position_embeddings=args.length + 2)
    strategy = tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")])
    gathered_positions = default_max_predictions(0.15, args.length)
    heads = {"full": 0, "gathered": gathered_positions}
    datasets = {head: masked_batches(args, positions) for head, positions in heads.items()}

    # In this order, the two heads of a setting are measured one right after the other: their ratio, taken
    # round by round, is the least disturbed by whatever else runs on the machine.
    combinations = [(head, jit, steps_per_execution) for steps_per_execution, jit, head
                    in itertools.product(args.steps_per_execution, args.jit_compile, heads)]
    trainers, failures = {}, {}
    for head, jit, steps_per_execution in combinations:
        start = time.perf_counter()
        trainer = build_trainer(strategy, config, jit == "on", steps_per_execution)
        try:  # Warm-up: tracing and XLA compilation happen here, not in the timed rounds.
            for _ in range(2):
                trainer.fit(datasets[head], steps_per_epoch=steps_per_execution, verbose=0)
        except tf.errors.OpError as error:
            failures[head, jit, steps_per_execution] = type(error).__name__
            print(f"{head} head, jit_compile {jit}, steps_per_execution {steps_per_execution} failed: {error}",
                  file=sys.stderr)
            continue
        trainers[head, jit, steps_per_execution] = trainer
        print(f"{head} head, jit_compile {jit}, steps_per_execution {steps_per_execution}: built, traced and "
              f"compiled in {time.perf_counter() - start:.0f} s", file=sys.stderr)

    speeds = {combination: [] for combination in trainers}
    busy_cores = {combination: [] for combination in trainers}  # Fewer than the machine has: it was busy.
    loads = [load_average()]
    for round_number in range(args.rounds):
        for (head, jit, steps_per_execution), trainer in trainers.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            trainer.fit(datasets[head], steps_per_epoch=args.steps, verbose=0)
            seconds = time.perf_counter() - start
            speeds[head, jit, steps_per_execution].append(args.steps * args.batch_size / seconds)
            busy_cores[head, jit, steps_per_execution].append((time.process_time() - cpu_start) / seconds)
            print(f"{head} head, jit_compile {jit}, steps_per_execution {steps_per_execution}: "
                  f"{speeds[head, jit, steps_per_execution][-1]:.1f} samples/s, "
                  f"{busy_cores[head, jit, steps_per_execution][-1]:.2f} busy cores", file=sys.stderr)
        loads.append(load_average())
        print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)

    flops = {head: training_flops_per_sample(args.hidden, args.layers, args.intermediate, args.vocab, args.length,
                                             positions or args.length) for head, positions in heads.items()}
    parameters = next(iter(trainers.values())).mlm.count_params()
    print(f"Machine: {describe_machine()}; TensorFlow {tf.__version__}; load average during the run "
          f"{min(loads):.1f} to {max(loads):.1f}")
    print(f"Model: RoBERTa, hidden {args.hidden}, {args.layers} layers, {args.heads} heads, intermediate "
          f"{args.intermediate}, vocabulary {args.vocab}, {parameters / 1e6:.1f}M "
          f"parameters; length {args.length}, batch {args.batch_size}, float32; gathered head at "
          f"{gathered_positions} positions; {args.steps} steps timed per round, {args.rounds} rounds\n")
    rows = []
    for head, jit, steps_per_execution in combinations:
        row = [head, jit, steps_per_execution, f"{flops[head] / 1e9:.2f}"]
        if (head, jit, steps_per_execution) in failures:
            rows.append(row + [f"fails: {failures[head, jit, steps_per_execution]}", "", "", "", "", ""])
            continue
        samples = speeds[head, jit, steps_per_execution]
        best_round = samples.index(max(samples))
        full = speeds.get(("full", jit, steps_per_execution))
        rows.append(row + [f"{max(samples):.1f}", f"{median(samples):.1f}", f"{min(samples):.1f}",
                           f"{busy_cores[head, jit, steps_per_execution][best_round]:.2f}",
                           f"{max(samples) * flops[head] / 1e9:.0f}",
                           f"{max(samples) / max(full):.2f}" if full else ""])
    print_table(["LM head", "jit_compile", "steps_per_execution", "GFLOP/sample", "samples/s, best round",
                 "median", "worst", "busy cores (best round)", "GFLOP/s (best round)", "x full head (best rounds)"],
                rows)


if __name__ == "__main__":
    main()
