#!/usr/bin/env python
"""What pre-training buys: a pre-trained encoder against the same architecture from random weights, on a text
classification task (BANKING77 by default), over several seeds, with mean and spread.

Two measurements, each for the pre-trained model (--model, a folder that run_mlm.py saved) and for random weights
of the same config:

- a frozen-encoder probe: the encoder's features of each text, at the `<s>` position and averaged over the text's
  tokens, with a linear softmax classifier trained on top (tf-keras, the encoder never updated). It measures what
  the representation holds, apart from how well it fine-tunes.
- fine-tuning by run_classification.py, with --examples_per_label K (the few-shot regime) and, with --full_data,
  on all the training data; pre-trained and --from_scratch with the same flags and seeds.

The seeds draw the K-per-label sample, the validation split, the random weights and the data order. The test split
only ever scores: the linear probe trains a fixed number of epochs, and fine-tuning keeps the epoch of best
accuracy on validation data held out from the training file. Every flag this script does not know goes to
run_classification.py unchanged: the data (--train_file, --test_file, --label_column, or --dataset_name), and any
other of its flags (--per_replica_batch_size, ...). `make demo` runs this comparison, without the probe, as its
last step.

    python benchmarks/fine_tuning.py --model demo-output/model     # tests/data's slice of BANKING77: a quick check
    python benchmarks/fine_tuning.py --model demo-output/model --train_file banking77/train.csv \\
        --test_file banking77/test.csv --label_column category --full_data   # benchmarks/fine_tuning.md's figures
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from common import REPO, describe_machine, load_average, print_table
from utils import UserError, positive_float, refuse_an_output_that_is_read

BANKING77 = REPO / "tests" / "data" / "banking77"
# Without data flags: the 6-intent slice of BANKING77 shipped for the tests.
DEFAULT_DATA_FLAGS = ["--train_file", str(BANKING77 / "train.csv"), "--test_file", str(BANKING77 / "test.csv"),
                      "--label_column", "category"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="The folder run_mlm.py saved.")
    parser.add_argument("--examples_per_label", type=int, default=10, help="K of the few-shot runs (default: 10).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="(default: %(default)s)")
    parser.add_argument("--max_length", type=int, default=32, help="Tokens per text (default: %(default)s).")
    parser.add_argument("--learning_rate", type=positive_float, default=1e-3,
                        help="Fine-tuning (default: %(default)s).")
    parser.add_argument("--few_shot_epochs", type=int, default=30, help="(default: %(default)s)")
    parser.add_argument("--full_data_epochs", type=int, default=4, help="(default: %(default)s)")
    parser.add_argument("--full_data", action="store_true", help="Also fine-tune on all the training data.")
    probe = parser.add_mutually_exclusive_group()
    probe.add_argument("--probe_only", action="store_true", help="Run the frozen-encoder probe only.")
    probe.add_argument("--no_probe", action="store_true", help="Fine-tune only.")
    parser.add_argument("--output_dir",
                        help="Keep each fine-tuning run (model, eval_results.json) in a folder of its own here "
                             "(default: a temporary folder, deleted at the end).")
    args, args.data_flags = parser.parse_known_args()
    args.data_flags = args.data_flags or DEFAULT_DATA_FLAGS
    return args


def encoder_features(encoder, tokenizer, texts, max_length):
    """[texts, 2 x hidden]: the last layer's vector at `<s>`, and its mean over the text's tokens (not the padding)."""
    features = []
    for start in range(0, len(texts), 256):
        batch = tokenizer(texts[start:start + 256], padding="max_length", truncation=True, max_length=max_length,
                          return_tensors="tf", return_token_type_ids=False)
        hidden = encoder(**batch, training=False).last_hidden_state.numpy()
        mask = batch["attention_mask"].numpy()[..., None]
        features.append(np.concatenate([hidden[:, 0], (hidden * mask).sum(1) / mask.sum(1)], axis=1))
    return np.concatenate(features)


def linear_probe_accuracy(train_x, train_y, test_x, test_y, num_labels, seed):
    """Test accuracy of softmax regression on standardized features (the scale of random and trained encoders
    differs), trained full-batch for a fixed number of epochs: nothing is chosen on the test data."""
    import tf_keras as keras

    from devices import set_seed

    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    set_seed(seed)
    probe = keras.Sequential([keras.layers.Dense(num_labels, kernel_regularizer=keras.regularizers.l2(1e-3))])
    probe.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    probe.fit((train_x - mean) / std, train_y, batch_size=len(train_y), epochs=300, verbose=0)
    return probe.evaluate((test_x - mean) / std, test_y, verbose=0)[1]


def probe(args, train, test):
    """{(weights, features): [test accuracy per seed]} for pre-trained and random weights, `<s>` and mean, given
    the tasks.Examples of the train and test splits."""
    from transformers import AutoConfig, AutoTokenizer, TFAutoModel
    from tasks import sample_per_label
    from devices import set_seed

    label_names = sorted(set(train.labels))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    label2id = {label: i for i, label in enumerate(label_names)}
    test_y = np.array([label2id[label] for label in test.labels])
    results = {}
    for weights in ("pre-trained", "random"):
        for seed in args.seeds:
            set_seed(seed)
            encoder = (TFAutoModel.from_pretrained(args.model) if weights == "pre-trained"
                       else TFAutoModel.from_config(AutoConfig.from_pretrained(args.model)))
            sample = train.subset(sample_per_label(train.labels, args.examples_per_label, seed))
            train_x = encoder_features(encoder, tokenizer, sample.texts, args.max_length)
            train_y = np.array([label2id[label] for label in sample.labels])
            test_x = encoder_features(encoder, tokenizer, test.texts, args.max_length)
            hidden = train_x.shape[1] // 2
            for name, columns in (("<s>", slice(0, hidden)), ("mean", slice(hidden, None))):
                accuracy = linear_probe_accuracy(train_x[:, columns], train_y, test_x[:, columns], test_y,
                                                 len(label_names), seed)
                results.setdefault((weights, name), []).append(accuracy)
    return results


def fine_tune(args, output_dir, from_scratch, seed, extra):
    """The test results of one run_classification.py run (eval_results.json's "test")."""
    command = [sys.executable, str(REPO / "run_classification.py"), "--model_name_or_path", args.model,
               *args.data_flags, "--max_length", args.max_length, "--learning_rate", args.learning_rate,
               "--seed", seed, "--output_dir", output_dir, "--overwrite", "--no_tpu", *extra]
    if from_scratch:
        command.append("--from_scratch")
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"run_classification.py failed:\n{result.stderr[-2000:]}")
    with open(f"{output_dir}/eval_results.json") as f:
        return json.load(f)["test"]


def spread(values):
    """mean ± standard deviation (over seeds), in %, and the values."""
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return (f"{100 * statistics.mean(values):.1f} ± {100 * deviation:.1f} "
            f"({' / '.join(f'{100 * value:.1f}' for value in values)})")


def compare_fine_tuning(args, folder):
    """Fine-tunes the pre-trained model and the same architecture from scratch with the same flags and seeds, in
    each regime, printing each run as it ends; returns the table's rows and the majority-class accuracy."""
    regimes = [(f"{args.examples_per_label} per label, {args.few_shot_epochs} epochs",
                f"{args.examples_per_label}-per-label",
                ["--examples_per_label", args.examples_per_label, "--num_epochs", args.few_shot_epochs])]
    if args.full_data:
        regimes.append((f"all training data, {args.full_data_epochs} epochs", "all",
                        ["--num_epochs", args.full_data_epochs]))
    rows = []
    for regime, regime_folder, extra in regimes:
        accuracies = {}
        for arm, arm_folder in (("pre-trained", "pretrained"), ("from scratch", "from-scratch")):
            for seed in args.seeds:
                start = time.perf_counter()
                results = fine_tune(args, f"{folder}/{regime_folder}-{arm_folder}-seed{seed}", arm == "from scratch",
                                    seed, extra)
                accuracies.setdefault(arm, []).append(results["accuracy"])
                print(f"{regime}, {arm}, seed {seed}: test accuracy {results['accuracy']:.1%} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
        gain = statistics.mean(accuracies["pre-trained"]) - statistics.mean(accuracies["from scratch"])
        rows.append([regime, spread(accuracies["pre-trained"]), spread(accuracies["from scratch"]),
                     f"{100 * gain:+.1f}"])
    return rows, results["majority_class_accuracy"]


def main(args):
    from run_classification import input_paths, parse_args as parse_classification_args
    from tasks import load_splits, task_of_flags

    # The data flags, checked and read as run_classification.py does.
    classification_args = parse_classification_args(["--model_name_or_path", args.model, *args.data_flags])
    if args.output_dir:
        refuse_an_output_that_is_read(args.output_dir, input_paths(classification_args))
    splits = load_splits(classification_args, task_of_flags(classification_args))
    if "test" not in splits:
        raise SystemExit("error: both measurements score on a test split, and the data has none: add --test_file.")
    print(describe_machine())
    print(f"{args.model}; {' '.join(args.data_flags)}; max_length {args.max_length}; seeds {args.seeds}\n",
          flush=True)

    if not args.no_probe:
        rows = [[f"{weights}, linear probe on `{name}`, {args.examples_per_label} per label", spread(accuracies)]
                for (weights, name), accuracies in probe(args, splits["train"], splits["test"]).items()]
        print_table(["frozen encoder", "test accuracy, % (mean ± sd (seeds))"], rows)
    if args.probe_only:
        return

    with tempfile.TemporaryDirectory() as temporary_folder:
        rows, majority_class = compare_fine_tuning(args, args.output_dir or temporary_folder)
    print()
    print_table(["fine-tuning, test accuracy", "pre-trained, % (mean ± sd (seeds))", "from scratch, %",
                 "gain, points"], rows)
    print(f"majority class: {majority_class:.1%}; load average at the end: {load_average():.1f}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
