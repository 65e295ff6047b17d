#!/usr/bin/env python
"""Sweep of small-model pre-training recipes: how far beyond a table of token frequencies each one gets, and how
soon, on two CPU cores.

One tokenizer (train_unigram.py) and one set of shards per sequence length (prepare_tfrecord_shards.py) are made
first, in --work_dir, and kept for the next run. Then every recipe is a whole run_mlm.py process, one after the
other: the demo's command with the recipe's flags added (a later flag replaces an earlier one). From each run's
log come its evaluations (nats beyond token frequency at <mask> positions); from training_results.json its final
figures. A recipe's row gives the last evaluation, the seconds it took (from process start to the saved model),
and the nats beyond frequency at every evaluation (every 250 steps): how soon a recipe starts to learn from the
context. Seconds are only comparable between runs on an otherwise
idle machine; the nats at a given step do not depend on the machine.

"Nats beyond frequency" is the token-frequency table's cross-entropy at <mask> positions minus the model's (see
run_mlm.py's MaskedLMTrainer): 0 for a model that learned the frequencies of tokens and nothing from the context.

    python benchmarks/mlm_recipes.py --train_file wikitext-2-v1/train.txt \\
        --validation_file wikitext-2-v1/validation.txt --recipes demo before-32
"""

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, describe_machine, load_average, print_table
from utils import UserError, refuse_an_output_that_is_read

DEMO_MODEL = "hidden_size=128,num_hidden_layers=2,num_attention_heads=2,intermediate_size=512"
NO_DROPOUT = "hidden_dropout_prob=0,attention_probs_dropout_prob=0"
# The demo before this sweep: RoBERTa's recipe (15 % masking, dropout 0.1, a zero output bias) on a small model.
BEFORE = ["--config_overrides", DEMO_MODEL, "--max_length", "128", "--per_replica_batch_size", "32",
          "--max_steps", "1000", "--learning_rate", "1e-3", "--warmup_steps", "100", "--output_bias", "zeros"]
# Output bias from token frequencies, no dropout (Cramming), 40 % masking (Wettig et al.), a higher peak rate.
LEARNS = ["--output_bias", "frequencies", "--config_overrides", f"{DEMO_MODEL},{NO_DROPOUT}",
          "--mlm_probability", "0.4", "--learning_rate", "2e-3"]
# The same number of tokens per step (4,096) in shorter samples.
LENGTH_64 = ["--max_length", "64", "--per_replica_batch_size", "64"]
LENGTH_32 = ["--max_length", "32", "--per_replica_batch_size", "128"]
RECIPES = {
    "demo-before": BEFORE,
    "learns-128": BEFORE + LEARNS,
    "learns-64": BEFORE + LEARNS + LENGTH_64 + ["--max_steps", "1500"],
    "learns-32": BEFORE + LEARNS + LENGTH_32 + ["--max_steps", "1500"],
    "learns-32-lr4e-3": BEFORE + LEARNS + LENGTH_32 + ["--max_steps", "1500", "--learning_rate", "4e-3"],
    # What `make demo` runs, and the same at length 32 with the ingredients of the demo before.
    "demo": BEFORE + LEARNS + LENGTH_32 + ["--max_steps", "800"],
    "before-32": BEFORE + LENGTH_32 + ["--max_steps", "800"],
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_file", required=True, help="Training corpus, one text per line.")
    parser.add_argument("--validation_file", required=True, help="Validation corpus, one text per line.")
    parser.add_argument("--vocab_size", type=int, default=8000, help="Tokenizer size (default: %(default)s).")
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES),
                        help="Recipes to run, in this order (default: all).")
    parser.add_argument("--work_dir", default="/tmp/mlm-recipes",
                        help="Tokenizer, shards and runs; the tokenizer and shards are reused (default: "
                             "%(default)s).")
    return parser.parse_args()


def run(command, log_path=None):
    """Runs a command of the pipeline with this Python; returns its log lines (stderr), stopping on failure."""
    child = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True)
    if log_path:
        Path(log_path).write_text(child.stderr)
    if child.returncode:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{child.stderr[-3000:]}")
    return child.stderr.splitlines()


def prepare_data(args, work_dir, lengths):
    tokenizer = work_dir / "tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        run(["train_unigram.py", "--train_file", args.train_file, "--vocab_size", str(args.vocab_size),
             "--output_dir", str(tokenizer), "--overwrite"])
    for length in lengths:
        shards = work_dir / f"tfrecords-{length}"
        if not (shards / "validation" / "manifest.json").exists():
            run(["prepare_tfrecord_shards.py", "--train_file", args.train_file, "--validation_file",
                 args.validation_file, "--tokenizer_name_or_path", str(tokenizer), "--max_length", str(length),
                 "--output_dir", str(shards), "--overwrite"])
    return tokenizer


def effective_flags(flags):
    """{flag: value} as argparse reads a list of flags: a later value replaces an earlier one."""
    return dict(zip(flags[::2], flags[1::2]))


def evaluations(log_lines):
    """(step, nats beyond frequency) for each evaluation in a run_mlm.py log."""
    found = []
    for line in log_lines:
        match = re.search(r"INFO run_mlm: Step (\d+): .*val_nats_beyond_frequency (-?[\d.]+)", line)
        if match:
            found.append((int(match[1]), float(match[2])))
    return found


def main(args):
    refuse_an_output_that_is_read(args.work_dir, [args.train_file, args.validation_file], "--work_dir")
    work_dir = Path(args.work_dir).resolve()
    lengths = sorted({int(effective_flags(RECIPES[name])["--max_length"]) for name in args.recipes})
    tokenizer = prepare_data(args, work_dir, lengths)

    rows = []
    loads = [load_average()]
    for name in args.recipes:
        flags = RECIPES[name]
        settings = effective_flags(flags)
        length, steps = settings["--max_length"], int(settings["--max_steps"])
        command = ["run_mlm.py", "--train_dataset", str(work_dir / f"tfrecords-{length}" / "train"),
                   "--eval_dataset", str(work_dir / f"tfrecords-{length}" / "validation"),
                   "--tokenizer", str(tokenizer), "--pretrained_model_config", "configs/roberta-base.json",
                   "--eval_every_steps", "250", "--checkpoint_every_steps", str(steps),
                   "--output_dir", str(work_dir / "runs" / name), "--overwrite", *flags]
        start = time.time()
        log = run(command, work_dir / f"{name}.log")
        seconds = time.time() - start
        loads.append(load_average())
        results = json.loads((work_dir / "runs" / name / "training_results.json").read_text())
        final = results["final_eval"]
        curve = " / ".join(f"{nats:+.2f}" for _, nats in evaluations(log))
        rows.append([name, f"{length} x {settings['--per_replica_batch_size']}", steps,
                     f"{seconds:.0f}", f"{final['loss_at_mask']:.3f}", f"{final['frequency_loss_at_mask']:.3f}",
                     f"{final['nats_beyond_frequency']:+.3f}", f"{final['accuracy_at_mask']:.3f}", curve])
        print(f"{name}: {rows[-1]}", file=sys.stderr)

    print(f"Machine: {describe_machine()}; load average during the runs {min(loads):.1f} to {max(loads):.1f}")
    print("Every run: run_mlm.py --pretrained_model_config configs/roberta-base.json, "
          f"shards of {args.train_file} (vocabulary {args.vocab_size}), evaluated on {args.validation_file}\n")
    print_table(["recipe", "length x batch", "steps", "seconds", "loss at <mask>", "frequency table",
                 "nats beyond", "accuracy at <mask>", "nats every 250 steps"], rows)
    for name in args.recipes:
        print(f"- `{name}`: " + " ".join(f"{flag} {value}" for flag, value in effective_flags(RECIPES[name]).items()))


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
