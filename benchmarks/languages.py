#!/usr/bin/env python
"""A model for a language written without spaces, measured where its users measure it: Chinese (ChnSentiCorp,
book_review, TNEWS, OCNLI) and Thai (Wisesight Sentiment) dev sets, beside the same architecture from random weights
and a character n-gram TF-IDF baseline (benchmarks/glue.py's lexical row, for characters: these languages have no
spaces to find words by).

--data_dir is a language's folder laid out as the project's data folder has it (../shared/data/chinese: one folder
per task, with its files as their publishers write them: UER-py's TSV, CLUE's and Wisesight's JSON lines; the
pre-training text in pretrain/). Each model (--model NAME=FOLDER) and the first one's architecture from random weights
are fine-tuned by run_classification.py on each task's training file, for every seed of --seeds, and scored on its dev
file; the table gives the mean ± sd of dev accuracy over the seeds, with published figures for a model of this size
(UER-py's RoBERTa-Tiny) below. --train_examples caps a task's training set (drawn once, with seed 0), for a screen.

--write_training_texts FILE writes the tasks' training texts alone, a text per line (a pair's two texts on two lines;
never a dev or test text), for the tokenizer and the pre-training corpus (`make language-hour`), and exits.

Each run's folder stays in --output_dir; a run whose eval_results.json is there is not run again (its folder's name
says its model, task, --train_examples and seed: give other fine-tuning flags another --output_dir).

    python benchmarks/languages.py --language chinese --data_dir ../shared/data/chinese \\
        --model "one CPU-hour=demo-output/chinese-hour/model" --output_dir chinese-runs
"""

import argparse
import concurrent.futures
import os
import random
import statistics
import types

import numpy as np
import scipy.sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from common import describe_machine, load_average, print_table
from glue import FROM_SCRATCH, mean_and_sd, run_unless_kept
import tasks
from utils import UserError, positive_float, positive_int, refuse_an_output_that_is_read

# A task: its folder, its training and dev files, the columns run_classification.py reads (text, second text or
# None, label), the tokens per example (99 % of the training examples fit with an 8,000-token tokenizer of the
# language; OCNLI's pairs, BERT's 128), and UER-py's RoBERTa-Tiny's dev accuracy (2 layers, hidden 128, pre-trained
# 1.25 M steps on 14 GB: ../shared/data/README.md), where published.
Task = types.SimpleNamespace
LANGUAGES = {
    "chinese": {
        "chnsenticorp": Task(folder="chnsenticorp", train="train.tsv", dev="dev.tsv", columns=("text_a", None, "label"),
                             max_length=128, published=91.4),
        "book_review": Task(folder="book_review", train="train.tsv", dev="dev.tsv", columns=("text_a", None, "label"),
                            max_length=128, published=83.4),
        # UER-py's figure reads the title and its keywords; the title alone gave 54.3 to a user (UER-py issue 221).
        "tnews": Task(folder="tnews", train="train.json", dev="dev.json", columns=("sentence", "keywords", "label"),
                      max_length=64, published=62.0),
        "ocnli": Task(folder="ocnli", train="train.json", dev="dev.json", columns=("sentence1", "sentence2", "label"),
                      max_length=128, published=60.3),
    },
    "thai": {
        "wisesight": Task(folder="wisesight", train="train.jsonl", dev="valid.jsonl",
                          columns=("texts", None, "category"), max_length=128, published=None),
    },
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=LANGUAGES, required=True)
    parser.add_argument("--data_dir", required=True, help="The language's folder of task folders.")
    parser.add_argument("--write_training_texts", metavar="FILE",
                        help="Write the tasks' training texts to FILE (replaced if there), and do nothing else.")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER",
                        help="A pre-trained model and its name in the table; repeat for several.")
    parser.add_argument("--baseline_only", action="store_true",
                        help="Print the baselines alone (character n-grams, published figures): no fine-tuning.")
    parser.add_argument("--tasks", nargs="+", help="(default: all of the language's)")
    parser.add_argument("--no_random_weights", action="store_true",
                        help="Leave out the first model's architecture from random weights.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="(default: %(default)s)")
    parser.add_argument("--learning_rate", type=positive_float, default=1e-3, help="(default: %(default)s, the demo's)")
    parser.add_argument("--num_epochs", type=positive_int, default=3, help="(default: %(default)s)")
    parser.add_argument("--per_replica_batch_size", type=positive_int, default=32, help="(default: %(default)s)")
    parser.add_argument("--train_examples", type=positive_int,
                        help="At most this many training examples per task, drawn once with seed 0 (default: all).")
    parser.add_argument("--jobs", type=positive_int, default=1, help="Runs side by side (default: %(default)s).")
    parser.add_argument("--output_dir", default="language-runs", help="(default: %(default)s)")
    args, args.fine_tuning_flags = parser.parse_known_args()
    args.tasks = args.tasks or list(LANGUAGES[args.language])
    unknown = set(args.tasks) - set(LANGUAGES[args.language])
    if unknown:
        parser.error(f"--tasks: {args.language} has no {', '.join(sorted(unknown))}; its tasks are "
                     f"{', '.join(LANGUAGES[args.language])}.")
    if not args.model and not (args.write_training_texts or args.baseline_only):
        parser.error("name a model to fine-tune (--model NAME=FOLDER), or pass --baseline_only")
    args.models = dict(model.split("=", 1) for model in args.model)
    args.arms = [] if args.baseline_only else [*args.models, *([] if args.no_random_weights else [FROM_SCRATCH])]
    return args


def read_task(data_dir, task, split):
    """A split's Examples ("train" or "validation"), read as run_classification.py reads the file."""
    text, pair, label = task.columns
    flags = argparse.Namespace(task_name=None, train_file=os.path.join(data_dir, task.folder, task.train),
                               validation_file=os.path.join(data_dir, task.folder, task.dev), test_file=None)
    return tasks.load_splits(flags, tasks.Task(text, label, pair))[split]


def training_file(args, task_name, task):
    """The task's training file, or, with --train_examples, a copy of that many of its rows (drawn with seed 0, in
    the file's order; the header line kept)."""
    path = os.path.join(args.data_dir, task.folder, task.train)
    if not args.train_examples:
        return path
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    header, rows = (lines[:1], lines[1:]) if path.endswith(".tsv") else ([], lines)
    kept = sorted(random.Random(0).sample(range(len(rows)), min(args.train_examples, len(rows))))
    subset = os.path.join(args.output_dir, f"{task_name}-train-{args.train_examples}{os.path.splitext(path)[1]}")
    with open(subset, "w", encoding="utf-8") as f:
        f.writelines([*header, *(rows[i] for i in kept)])
    return subset


def character_baseline(args, task):
    """Dev accuracy of character 1- to 3-gram TF-IDF into a logistic regression, fitted on the whole training set: a
    pair is its two texts' features side by side and their product (the n-grams they share)."""
    train, dev = (read_task(args.data_dir, task, split) for split in ("train", "validation"))
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=2)
    vectorizer.fit(train.texts + (train.text_pairs or []))

    def features(examples):
        first = vectorizer.transform(examples.texts)
        if examples.text_pairs is None:
            return first
        second = vectorizer.transform(examples.text_pairs)
        return scipy.sparse.hstack([first, second, first.multiply(second)]).tocsr()

    model = LogisticRegression(C=1, max_iter=1000).fit(features(train), train.labels)
    return float(np.mean(model.predict(features(dev)) == np.array(dev.labels)))


def run(args, arm, task_name, seed, train_file):
    """One run_classification.py run, unless its results are there: (its eval_results.json, seconds it took)."""
    task = LANGUAGES[args.language][task_name]
    # The folder's name says what the run was: a run kept from another --train_examples is not taken for this one.
    examples = f"-{args.train_examples}-examples" if args.train_examples else ""
    folder = os.path.join(args.output_dir, f"{arm.replace(' ', '-')}-{task_name}{examples}-seed{seed}")
    text, pair, label = task.columns
    results, seconds, ran = run_unless_kept(folder, [
        "--model_name_or_path", args.models.get(arm) or next(iter(args.models.values())),
        "--train_file", train_file, "--validation_file", os.path.join(args.data_dir, task.folder, task.dev),
        "--text_column", text, *(["--text_pair_column", pair] if pair else []), "--label_column", label,
        "--max_length", task.max_length, "--learning_rate", args.learning_rate, "--num_epochs", args.num_epochs,
        "--seed", seed, "--per_replica_batch_size", args.per_replica_batch_size,
        *(["--from_scratch"] if arm == FROM_SCRATCH else []), *args.fine_tuning_flags], args.jobs)
    if ran:
        print(f"{arm}, {task_name}, seed {seed}: {results['validation']['accuracy']:.4f}", flush=True)
    return results, seconds


def write_training_texts(args):
    refuse_an_output_that_is_read(args.write_training_texts, [args.data_dir], "--write_training_texts")
    counts = {}
    with open(args.write_training_texts, "w", encoding="utf-8") as f:
        for task_name in args.tasks:
            train = read_task(args.data_dir, LANGUAGES[args.language][task_name], "train")
            rows = zip(train.texts, train.text_pairs) if train.text_pairs else zip(train.texts)
            lines = [line for row in rows for text in row if (line := str(text).strip())]
            f.writelines(line + "\n" for line in lines)
            counts[task_name] = len(lines)
    print(", ".join(f"{task}: {count:,} lines" for task, count in counts.items()),
          f"of training text written to {args.write_training_texts}")


def main(args):
    if args.write_training_texts:
        return write_training_texts(args)
    refuse_an_output_that_is_read(args.output_dir, [args.data_dir, *args.models.values()])
    os.makedirs(args.output_dir, exist_ok=True)
    language_tasks = LANGUAGES[args.language]
    # The baseline first (seconds to a minute a task): a task whose files cannot be read fails before any run.
    baseline = {task_name: character_baseline(args, language_tasks[task_name]) for task_name in args.tasks}
    train_files = {task_name: training_file(args, task_name, language_tasks[task_name]) for task_name in args.tasks}
    print(describe_machine())
    print("--baseline_only: no fine-tuning" if args.baseline_only else
          f"{args.models}; seeds {args.seeds}, learning rate {args.learning_rate:g}, {args.num_epochs} epochs, batch "
          f"{args.per_replica_batch_size}, training examples: {args.train_examples or 'all'}"
          + (f"; {' '.join(args.fine_tuning_flags)}" if args.fine_tuning_flags else ""), flush=True)
    plan = [(arm, task_name, seed) for seed in args.seeds for task_name in args.tasks for arm in args.arms]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {key: pool.submit(run, args, *key, train_files[key[1]]) for key in plan}
        results = {key: future.result() for key, future in futures.items()}
    print_summary(args, results, baseline)


def print_summary(args, results, baseline):
    language_tasks = LANGUAGES[args.language]
    rows, majority, minutes = [], {}, {}
    for arm in args.arms:
        scores = {}
        for (run_arm, task_name, _), (eval_results, seconds) in results.items():
            if run_arm == arm:
                scores.setdefault(task_name, []).append(eval_results["validation"]["accuracy"])
                majority[task_name] = eval_results["validation"]["majority_class_score"]
                minutes[task_name] = minutes.get(task_name, 0) + seconds / 60
        rows.append([arm, *("%.1f ± %.1f" % tuple(100 * x for x in mean_and_sd(scores[task]))
                            for task in args.tasks),
                     f"{100 * statistics.mean(statistics.mean(scores[task]) for task in args.tasks):.1f}"])
    if majority:  # The runs report it.
        rows.append(["majority class", *(f"{100 * majority[task]:.1f}" for task in args.tasks),
                     f"{100 * statistics.mean(majority.values()):.1f}"])
    rows.append(["characters: 1- to 3-gram TF-IDF, linear (all training data)",
                 *(f"{100 * baseline[task]:.1f}" for task in args.tasks),
                 f"{100 * statistics.mean(baseline.values()):.1f}"])
    published = [language_tasks[task].published for task in args.tasks]
    if all(published):
        rows.append(["UER-py's RoBERTa-Tiny (1.25 M steps on 14 GB)", *published,
                     f"{statistics.mean(published):.1f}"])
    print()
    print_table([f"dev accuracy, × 100: mean ± sd over seeds {args.seeds}", *args.tasks, "average"], rows)
    if minutes:
        print_table(["task", *args.tasks], [["minutes of fine-tuning, all runs", *(f"{minutes[task]:.1f}"
                                                                                for task in args.tasks)]])
    print(f"{args.jobs} runs side by side; load average at the end: {load_average():.1f}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
