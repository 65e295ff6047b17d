#!/usr/bin/env python
"""Benchmark of the training step on the CPU: run_mlm.py's trainer (gathered or full LM head) against the original
Transformers example's path, under each tf.distribute strategy for one device, with XLA on and off.

What runs the step (--paths):
    original   the original example's path: the 🤗 TFRobertaForMaskedLM compiled with an optimizer only and fed
               batches with labels, so that model.fit computes the model's own loss at every position
    full       run_mlm.py's MaskedLMTrainer, vocabulary logits at every position
    gathered   run_mlm.py's MaskedLMTrainer as it trains by default, logits at the --max_predictions_per_seq
               masked positions only
Under which strategy (--strategies), all on the one device of this machine:
    default     no strategy: TensorFlow's default one
    one_device  tf.distribute.OneDeviceStrategy
    mirrored    tf.distribute.MirroredStrategy over the one CPU device

Every combination runs in a process of its own, as a training script runs: the model and AdamW (create_optimizer)
built under the strategy, fed masked batches of random token ids held in memory (the input pipeline is measured
by input_pipeline.py; here it must cost nothing). Each process first runs one execution to trace and compile,
then one model.fit call of --steps steps, and times every execution of that call but its first, which also pays
for fit's own set-up (a second or more, now and then several): what is left is the steady pace of a long run, the
one that decides accelerator hours. The combinations run one after the other, --passes times over, so that
anything else loading the machine disturbs them alike. FLOPs per sample are counted analytically
(common.training_flops_per_sample).

    python benchmarks/training_step.py
    python benchmarks/training_step.py --hidden 128 --layers 2 --heads 2 --intermediate 512 --vocab 8000
"""

import argparse
import itertools
import json
import subprocess
import sys
import time

from common import (SPECIAL_TOKEN_IDS, describe_machine, load_average, median, print_table,
                    training_flops_per_sample)

import tensorflow as tf  # noqa: E402  (after common, which quiets TensorFlow)
import tf_keras as keras  # noqa: E402
from transformers import RobertaConfig, TFAutoModelForMaskedLM, create_optimizer  # noqa: E402

from devices import set_seed  # noqa: E402
from masked_lm import MaskedLMTrainer, default_max_predictions, mask_tokens  # noqa: E402

PATHS = ("original", "full", "gathered")
STRATEGIES = ("default", "one_device", "mirrored")


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
    parser.add_argument("--steps", type=int, default=24,
                        help="Steps of the timed fit call, a multiple of every --steps_per_execution value and at "
                             "least 3 executions of the largest (default: %(default)s).")
    parser.add_argument("--paths", choices=PATHS, nargs="+", default=list(PATHS),
                        help="What runs the step (default: %(default)s).")
    parser.add_argument("--strategies", choices=STRATEGIES, nargs="+", default=list(STRATEGIES),
                        help="Strategies to compare (default: %(default)s).")
    parser.add_argument("--jit_compile", choices=["on", "off"], nargs="+", default=["off", "on"],
                        help="XLA settings to compare (default: %(default)s).")
    parser.add_argument("--steps_per_execution", type=int, nargs="+", default=[1],
                        help="Values to compare (default: %(default)s).")
    parser.add_argument("--passes", type=int, default=2,
                        help="Times every combination is measured, in a new process each time (default: "
                             "%(default)s).")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # PATH,STRATEGY,JIT,STEPS_PER_EXECUTION: one measurement.
    args = parser.parse_args()
    if any(args.steps % value or args.steps < 3 * value for value in args.steps_per_execution):
        parser.error("--steps must be a multiple of every --steps_per_execution value, and at least 3 times it.")
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


class ExecutionTimer(keras.callbacks.Callback):
    """Wall-clock and CPU time at the end of every execution (steps_per_execution steps) of a fit call. Keras
    hands a plain callback its logs as numbers, so each execution has finished when it is called."""

    def on_train_begin(self, logs=None):
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        self.times.append((time.perf_counter(), time.process_time()))


def make_strategy(name):
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(tf.config.list_logical_devices("CPU")[0].name)
    return tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")])


def measure(args, path, strategy_name, jit, steps_per_execution):
    """Builds one model, compiles it, times its steady steps; returns the figures as a dict."""
    set_seed(0)
    config = RobertaConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=args.heads, intermediate_size=args.intermediate,
                           max_position_embeddings=args.length + 2)
    start = time.perf_counter()
    with make_strategy(strategy_name).scope():
        mlm = TFAutoModelForMaskedLM.from_config(config)
        mlm.build_in_name_scope()
        optimizer, _ = create_optimizer(init_lr=1e-4, num_train_steps=10**6, num_warmup_steps=100,
                                        weight_decay_rate=1e-3)
        if path == "original":  # No loss given: the 🤗 model computes its own from the labels in the batch.
            model = mlm
            model.compile(optimizer=optimizer, jit_compile=jit == "on", steps_per_execution=steps_per_execution)
        else:
            model = MaskedLMTrainer(mlm, mask_token_id=4, jit_compile=jit == "on")
            model.compile(optimizer=optimizer, steps_per_execution=steps_per_execution)
    data = masked_batches(args, default_max_predictions(0.15, args.length) if path == "gathered" else 0)
    model.fit(data, steps_per_epoch=steps_per_execution, verbose=0)  # Tracing and XLA compilation.
    compile_seconds = time.perf_counter() - start

    timer = ExecutionTimer()
    model.fit(data, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
    (first_wall, first_cpu), (last_wall, last_cpu) = timer.times[0], timer.times[-1]
    return {"step_seconds": [(end[0] - begin[0]) / steps_per_execution
                             for begin, end in zip(timer.times, timer.times[1:])],
            "busy_cores": (last_cpu - first_cpu) / (last_wall - first_wall),
            "compile_seconds": compile_seconds, "parameters": mlm.count_params()}


def measure_in_new_process(combination):
    """Runs this script with --only in a child process; returns its figures, or {"error": last line of stderr}."""
    command = [sys.executable, __file__, *sys.argv[1:], "--only", ",".join(map(str, combination))]
    child = subprocess.run(command, capture_output=True, text=True)
    if child.returncode:
        return {"error": (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]}
    return json.loads(child.stdout.splitlines()[-1])


def main():
    args = parse_args()
    if args.only:
        path, strategy_name, jit, steps_per_execution = args.only.split(",")
        print(json.dumps(measure(args, path, strategy_name, jit, int(steps_per_execution))))
        return

    # In this order, the settings of one path are measured one right after the other.
    combinations = list(itertools.product(args.paths, args.strategies, args.jit_compile, args.steps_per_execution))
    results = {combination: [] for combination in combinations}
    loads = [load_average()]
    for pass_number in range(args.passes):
        for combination in combinations:
            result = measure_in_new_process(combination)
            results[combination].append(result)
            loads.append(load_average())
            figures = (result["error"] if "error" in result else
                       f"{args.batch_size / median(result['step_seconds']):.1f} samples/s, "
                       f"{result['busy_cores']:.2f} busy cores, compiled in {result['compile_seconds']:.0f} s")
            print(f"pass {pass_number + 1}: {', '.join(map(str, combination))}: {figures}", file=sys.stderr)

    gathered_positions = default_max_predictions(0.15, args.length)
    flops = {path: training_flops_per_sample(args.hidden, args.layers, args.intermediate, args.vocab, args.length,
                                             gathered_positions if path == "gathered" else args.length)
             for path in PATHS}
    parameters = next((result["parameters"] for runs in results.values() for result in runs
                       if "parameters" in result), 0)
    print(f"Machine: {describe_machine()}; TensorFlow {tf.__version__}; load average during the run "
          f"{min(loads):.1f} to {max(loads):.1f}")
    print(f"Model: RoBERTa, hidden {args.hidden}, {args.layers} layers, {args.heads} heads, intermediate "
          f"{args.intermediate}, vocabulary {args.vocab}, {parameters / 1e6:.1f}M parameters; length "
          f"{args.length}, batch {args.batch_size}, float32; gathered head at {gathered_positions} positions; "
          f"{args.passes} passes, each a new process per combination timing {args.steps} steps\n")

    def samples_per_second(runs):  # Over every timed execution of every pass; None if any failed.
        if not runs or any("error" in run for run in runs):
            return None
        return args.batch_size / median([seconds for run in runs for seconds in run["step_seconds"]])

    rows = []
    for combination in combinations:
        path, strategy_name, jit, steps_per_execution = combination
        runs = results[combination]
        row = [path, strategy_name, jit, steps_per_execution, f"{flops[path] / 1e9:.2f}"]
        speed = samples_per_second(runs)
        if speed is None:
            rows.append(row + [f"fails: {next(run['error'] for run in runs if 'error' in run)}", "", "", "", ""])
            continue
        # The original example's own settings: no strategy, no XLA.
        original = samples_per_second(results.get(("original", "default", "off", steps_per_execution), []))
        rows.append(row + [f"{speed:.1f}", " / ".join(f"{samples_per_second([run]):.1f}" for run in runs),
                           " / ".join(f"{run['busy_cores']:.2f}" for run in runs),
                           f"{speed * flops[path] / 1e9:.0f}", f"{speed / original:.2f}" if original else ""])
    print_table(["path", "strategy", "jit_compile", "steps_per_execution", "GFLOP/sample", "samples/s", "each pass",
                 "busy cores", "GFLOP/s", "x original"], rows)


if __name__ == "__main__":
    main()
