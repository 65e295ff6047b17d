#!/usr/bin/env python
"""Benchmark of whole training processes: run_mlm.py with its default flags against the original Transformers
example's training path, on the same shards, model and batch.

training_step.py times the step alone, in memory. This one times what a user waits for: each side runs as a
process of its own, twice, for --short_steps and for --long_steps steps, and the time per steady step is the
difference of the two wall-clock times divided by the difference of the steps. Start-up, tracing, compilation and
the first steps cancel out; what is left includes the input pipeline, the metrics and the callbacks.

    run_mlm     run_mlm.py with its defaults (strategy, XLA setting, gathered LM head, metrics, checkpoints at
                the end), evaluation off
    original    the original example's path: the 🤗 model compiled with AdamW only, no tf.distribute strategy, no
                XLA, model.fit computing the model's own loss at every position; fed by the same tf.data pipeline
                (masked_lm.make_dataset, masking every chosen position, no gathered head)

The sides alternate, --passes times, so that anything else loading the machine disturbs them alike.

    python benchmarks/training_end_to_end.py --train_dataset tfrecords/train --tokenizer unigram-tokenizer
"""

import argparse
import json
import os
import subprocess
import sys
import time

from common import REPO, describe_machine, load_average, median, print_table
from utils import UserError, refuse_an_output_that_is_read

SIDES = ("original", "run_mlm")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_dataset", required=True, help="Folder of training shards (prepare_tfrecord_shards.py).")
    parser.add_argument("--tokenizer", required=True, help="The tokenizer folder the shards were written with.")
    parser.add_argument("--config_overrides",
                        default="hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024",
                        help="The model, over configs/roberta-base.json (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=32, help="Samples per step (default: %(default)s).")
    parser.add_argument("--short_steps", type=int, default=10, help="Steps of the short run (default: %(default)s).")
    parser.add_argument("--long_steps", type=int, default=90, help="Steps of the long run (default: %(default)s).")
    parser.add_argument("--passes", type=int, default=3, help="Times each run is repeated (default: %(default)s).")
    parser.add_argument("--work_dir", default="/tmp/training-end-to-end", help="Output folders (default: %(default)s).")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # STEPS: the original path, in this process.
    return parser.parse_args()


def train_original_path(args, steps):
    """The original example's training path, for `steps` steps."""
    from transformers import AutoConfig, AutoTokenizer, TFAutoModelForMaskedLM, create_optimizer

    import tensorflow as tf
    from devices import set_seed
    from masked_lm import make_dataset
    from shards import MANIFEST_NAME, find_shards

    set_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    with open(os.path.join(args.train_dataset, MANIFEST_NAME)) as f:
        length = json.load(f)["max_length"]
    files, _ = find_shards(args.train_dataset, length, tokenizer, args.tokenizer)
    config = AutoConfig.from_pretrained(REPO / "configs" / "roberta-base.json")
    config.update_from_string(args.config_overrides)
    config.update({"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id})
    model = TFAutoModelForMaskedLM.from_config(config)
    optimizer, _ = create_optimizer(init_lr=1e-4, num_train_steps=steps, num_warmup_steps=0, weight_decay_rate=1e-3)
    model.compile(optimizer=optimizer)  # No loss: the 🤗 model computes its own from the labels in the batch.
    masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                   vocab_size=len(tokenizer), mlm_probability=0.15, max_predictions=0)
    dataset = make_dataset(files, tf.distribute.InputContext(), batch_size=args.batch_size, max_length=length,
                           masking=masking, seed=0, training=True, shuffle_buffer_size=10_000)
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=2)


def timed_run(args, side, steps):
    """Wall-clock seconds of one whole process of `side` training for `steps` steps."""
    if side == "original":
        command = [__file__, *sys.argv[1:], "--only", str(steps)]
    else:
        command = ["run_mlm.py", "--train_dataset", args.train_dataset, "--tokenizer", args.tokenizer,
                   "--pretrained_model_config", "configs/roberta-base.json", "--config_overrides",
                   args.config_overrides, "--per_replica_batch_size", str(args.batch_size), "--max_steps",
                   str(steps), "--output_dir", f"{args.work_dir}/run_mlm-{steps}", "--overwrite"]
    start = time.perf_counter()
    child = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if child.returncode:
        raise SystemExit(f"error: {side} failed:\n{child.stderr[-3000:]}")
    if side == "run_mlm":
        settings = next(line for line in child.stderr.splitlines() if "Strategy: " in line)
        print(settings.split("Strategy: ", 1)[1], file=sys.stderr)
    return seconds


def main(args):
    if args.only:
        train_original_path(args, int(args.only))
        return
    refuse_an_output_that_is_read(args.work_dir, [args.train_dataset, args.tokenizer], "--work_dir")
    step_seconds = {side: [] for side in SIDES}
    loads = [load_average()]
    for pass_number in range(args.passes):
        for side in SIDES:
            short, long = (timed_run(args, side, steps) for steps in (args.short_steps, args.long_steps))
            step_seconds[side].append((long - short) / (args.long_steps - args.short_steps))
            loads.append(load_average())
            print(f"pass {pass_number + 1}: {side}: {short:.1f} s for {args.short_steps} steps, {long:.1f} s for "
                  f"{args.long_steps}: {args.batch_size / step_seconds[side][-1]:.1f} samples/s", file=sys.stderr)

    print(f"Machine: {describe_machine()}; load average during the runs {min(loads):.1f} to {max(loads):.1f}")
    print(f"Model: configs/roberta-base.json with {args.config_overrides}; batch {args.batch_size}; shards "
          f"{args.train_dataset}; {args.passes} passes of {args.long_steps} minus {args.short_steps} steps\n")
    speed = {side: args.batch_size / median(seconds) for side, seconds in step_seconds.items()}
    print_table(["side", "samples/s", "each pass", "x original"],
                [[side, f"{speed[side]:.1f}", " / ".join(f"{args.batch_size / s:.1f}" for s in step_seconds[side]),
                  f"{speed[side] / speed['original']:.2f}"] for side in SIDES])


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
