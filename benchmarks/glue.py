#!/usr/bin/env python
"""Where a pre-trained model stands on the field's yardstick: GLUE's CoLA, SST-2, MRPC, STS-B and RTE dev sets,
beside Google's BERT-Tiny, which has the demo's size (2 layers, hidden 128).

Each model (--model NAME=FOLDER, a folder that run_mlm.py saved) and the same architecture from random weights (the
first model's, --from_scratch; --no_random_weights leaves it out) is fine-tuned by run_classification.py --task_name on
each task, for every learning rate of --learning_rates and every seed of --seeds. For each model and task, the learning
rate of the best mean dev score is kept (the usual way of reporting GLUE's dev sets, and Turc et al.'s for BERT-Tiny: a
grid, the best on dev), and the table gives the mean ± sd over the seeds there; MRPC and STS-B count the mean of their
two metrics in the average, as GLUE does. SST-2's 67,349 training sentences would take most of the time:
--sst2_train_examples of them, drawn once with seed 0, train it. Beside them: the majority class (the trivial baseline,
whose score run_classification.py reports), a lexical baseline (scikit-learn's linear models on the words alone, fitted
on all of SST-2 in seconds: lexical_baseline) and BERT-Tiny's published scores, which are on GLUE's test set, not its
dev sets. Every task's files, every model's folder and every kept run are checked before the first run.

The flags it does not know go to every run of run_classification.py: fine-tuning as you would (--head_epochs,
--config_overrides with dropout), for every model and random weights alike.

Each run's folder stays in --output_dir; a run whose eval_results.json is there is not run again: stopped, the
benchmark goes on where it was, and --summary_only prints the table of what is there (a model's average once all its
runs are). Give each setting of the flags its own --output_dir: a kept run made with another --num_epochs, batch size
or SST-2 size is refused, but the flags passed on are not checked. Without --model, --summary_only prints the
baselines alone.

    python benchmarks/glue.py --glue_dir ../shared/data/glue --model "masked LM=demo-output/model" \\
        --output_dir glue-runs
"""

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import types

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline

from common import REPO, describe_machine, load_average, print_table
import tasks
from utils import UserError, exists, positive_float, positive_int, refuse_an_output_that_is_read

# The five tasks: GLUE's folder, the tokens per example (where 99 % of the training examples fit with the demo's
# tokenizer; RTE's premises run longer, cut at BERT's 128), and the columns of the table.
TASKS = {"cola": ("CoLA", 64, ["matthews_correlation"]),
         "sst2": ("SST-2", 64, ["accuracy"]),
         "mrpc": ("MRPC", 128, ["f1", "accuracy"]),
         "stsb": ("STS-B", 128, ["pearson", "spearman"]),
         "rte": ("RTE", 128, ["accuracy"])}
# Turc et al. (2019), "Well-Read Students Learn Better", Table 6 (GLUE's test set): BERT-Tiny, 2 layers, hidden 128.
BERT_TINY = {"cola": [0.0], "sst2": [83.2], "mrpc": [81.1, 71.1], "stsb": [74.3, 73.6], "rte": [57.2]}
FROM_SCRATCH = "random weights"
# run_classification.py's flags that the benchmark sets for each run. Its other such flags never reach the passed-on
# ones: --output_dir, --num_epochs and --per_replica_batch_size are the benchmark's own, and argparse takes
# --learning_rate and --seed for its --learning_rates and --seeds.
SET_FOR_EACH_RUN = ("--model_name_or_path", "--task_name", "--data_dir", "--max_length", "--from_scratch")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue_dir", required=True, help="A folder of GLUE's task folders (CoLA, SST-2, ...).")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER",
                        help="A pre-trained model and its name in the table; repeat for several. Needed but with "
                             "--summary_only.")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="(default: all five)")
    parser.add_argument("--learning_rates", type=positive_float, nargs="+", default=[1e-3],
                        help="The grid: each model and task keeps the best (default: %(default)s, the demo's).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="(default: %(default)s)")
    parser.add_argument("--num_epochs", type=positive_int, default=3, help="(default: %(default)s)")
    parser.add_argument("--per_replica_batch_size", type=positive_int, default=32, help="(default: %(default)s)")
    parser.add_argument("--sst2_train_examples", type=positive_int, default=4000,
                        help="67349 trains on all of SST-2's sentences (default: %(default)s).")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="Runs side by side, each on its share of the cores: a small model uses one core better "
                             "than two (default: %(default)s).")
    parser.add_argument("--no_random_weights", action="store_true",
                        help="Leave out the first model's architecture from random weights, which costs as much as "
                             "the model: to have the model's row sooner (the same command without it runs them "
                             "then), or where that row is measured already.")
    parser.add_argument("--output_dir", required=True, help="A folder for the runs, kept.")
    parser.add_argument("--summary_only", action="store_true", help="Print the table of the runs already there.")
    args, args.fine_tuning_flags = parser.parse_known_args()
    # Passed on, these would override what the benchmark sets for each run, silently: the model, the task.
    for name in (flag.split("=")[0] for flag in args.fine_tuning_flags):
        if name in SET_FOR_EACH_RUN:
            parser.error(f"{name} is set for each run by this benchmark (the model, each task's data and length); "
                         "drop it. Its own flags: --learning_rates, --seeds, --tasks, --num_epochs, "
                         "--per_replica_batch_size.")
    if not args.model and not args.summary_only:
        parser.error("name the model to fine-tune: --model NAME=FOLDER (or --summary_only, for the table of the runs "
                     "in --output_dir and the baselines).")
    if unnamed := [model for model in args.model if "=" not in model]:
        parser.error(f"--model {unnamed[0]}: give it as NAME=FOLDER, NAME its row's name in the table.")
    args.models = dict(model.split("=", 1) for model in args.model)
    args.arms = [*args.models, *([] if args.no_random_weights else [FROM_SCRATCH])]
    return args


def read_splits(data_dir, task_name, task=None):
    """{split: tasks.Examples} of a task's folder, read as run_classification.py --task_name reads it; `task`: another
    definition of its files than GLUE's (tasks.GLUE_TASKS)."""
    flags = types.SimpleNamespace(task_name=task_name, data_dir=data_dir, train_file=None)
    return tasks.load_splits(flags, task or tasks.GLUE_TASKS[task_name])


def check_inputs(args):
    """Refuses, before the first run, a task's file missing from --glue_dir or a --model folder without a model:
    each run finds out only when it starts, after the runs before it (20 minutes and more of them)."""
    missing = {task_name: [os.path.join(TASKS[task_name][0], file) for _, file in tasks.GLUE_TASKS[task_name].files
                           if not os.path.isfile(os.path.join(args.glue_dir, TASKS[task_name][0], file))]
               for task_name in args.tasks}
    if any(missing.values()):
        complete = [task_name for task_name, files in missing.items() if not files]
        raise UserError(f"--glue_dir {args.glue_dir} has no {', '.join(sum(missing.values(), []))}: it must hold "
                        "GLUE's task folders as GLUE's download script writes them (CoLA/train.tsv, CoLA/dev.tsv, "
                        "...). Add the missing files" + (f", or leave their tasks out: --tasks {' '.join(complete)}"
                                                         if complete else "") + ".")
    if not args.summary_only:
        for name, folder in args.models.items():
            if not exists(os.path.join(folder, "config.json")):
                raise UserError(f"--model {name}={folder}: {folder} holds no model (no config.json). Pass the folder "
                                "that run_mlm.py saved (its --output_dir) or that export_model.py wrote.")


class PairOverlap(TransformerMixin, BaseEstimator):
    """How much a pair's two texts overlap on the surface, as features for a linear model: the cosine of their word
    TF-IDF vectors (fitted on the training texts, both sides of each pair: a shared rare word counts more than a
    shared "the"), the Jaccard index of their sets of words and of word bigrams (which keep some of the order), the
    ratio of the shorter's words to the longer's, and the Jaccard index of the numbers they hold (a paraphrase keeps
    its figures). Fitted and applied to (text, text pair) tuples."""

    def fit(self, pairs, targets=None):
        self.tfidf_ = TfidfVectorizer().fit([text for pair in pairs for text in pair])
        return self

    def transform(self, pairs):
        firsts, seconds = zip(*pairs)
        # TF-IDF's rows have unit length: the sum of their products is the cosine.
        cosines = self.tfidf_.transform(firsts).multiply(self.tfidf_.transform(seconds)).sum(axis=1).A1
        words, bigrams = self.tfidf_.build_analyzer(), CountVectorizer(ngram_range=(2, 2)).build_analyzer()
        rows = []
        for first, second, cosine in zip(firsts, seconds, cosines):
            first_words, second_words = words(first), words(second)
            lengths = sorted([len(first_words), len(second_words)])
            rows.append([cosine, jaccard(set(first_words), set(second_words)),
                         jaccard(set(bigrams(first)), set(bigrams(second))), lengths[0] / max(lengths[1], 1),
                         jaccard(set(NUMBER.findall(first)), set(NUMBER.findall(second)))])
        return np.array(rows)


NUMBER = re.compile(r"\d+(?:[.,]\d+)*")  # 3, 4.5, 1,200 (the tokenized texts split "$" and "%" off).


def jaccard(first, second):
    """|A ∩ B| / |A ∪ B|: 1 for two empty sets, which do not differ."""
    return len(first & second) / len(first | second) if first | second else 1.0


def lexical_baseline(data_dir, task_name):
    """The dev-set metrics (tasks.score_predictions, as the runs are scored) of a model of the words alone, fitted on
    the whole training set in seconds, nothing chosen on dev: what a task's surface gives away, which a pre-trained
    model should beat. One sentence: word 1- and 2-gram TF-IDF into a logistic regression, its classes balanced (else
    it rarely predicts CoLA's minority class, on which Matthews' correlation rests); a pair: its PairOverlap into a
    logistic regression, or a ridge regression for STS-B's scores."""
    task = tasks.GLUE_TASKS[task_name]
    splits = read_splits(data_dir, task_name)
    label_names = tasks.label_names_of(task, splits)
    if task.text_pair_column is None:
        model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                              LogisticRegression(C=1, class_weight="balanced"))
    else:
        model = make_pipeline(PairOverlap(), Ridge() if task.regression else LogisticRegression(C=1))

    def inputs(examples):  # Texts, or a pair's two texts as a tuple.
        return examples.texts if examples.text_pairs is None else list(zip(examples.texts, examples.text_pairs))

    train, dev = splits["train"], splits["validation"]
    model.fit(inputs(train), tasks.targets_of(train, label_names))
    return tasks.score_predictions(task, tasks.targets_of(dev, label_names), model.predict(inputs(dev)))


def sst2_subset(glue_dir, output_dir, size):
    """A folder with `size` of SST-2's training sentences (drawn with seed 0, in the file's order) and its dev set."""
    folder = os.path.join(output_dir, f"SST-2-{size}")
    missing = [file for file in ("train.tsv", "dev.tsv") if not os.path.exists(os.path.join(glue_dir, "SST-2", file))]
    if missing:
        raise UserError(f"{os.path.join(glue_dir, 'SST-2')} has no {' and no '.join(missing)}: --glue_dir must be "
                        "a folder of GLUE's task folders, as GLUE's download script writes them.")
    if not os.path.exists(os.path.join(folder, "dev.tsv")):
        with open(os.path.join(glue_dir, "SST-2", "train.tsv"), encoding="utf-8") as f:
            header, *rows = f.readlines()
        if size > len(rows):
            raise UserError(f"--sst2_train_examples {size}: SST-2's train.tsv holds {len(rows)} sentences. Pass at "
                            f"most {len(rows)}, which trains on all of them.")
        os.makedirs(folder, exist_ok=True)
        kept = sorted(random.Random(0).sample(range(len(rows)), size))
        with open(os.path.join(folder, "train.tsv"), "w", encoding="utf-8") as f:
            f.writelines([header, *(rows[i] for i in kept)])
        shutil.copy(os.path.join(glue_dir, "SST-2", "dev.tsv"), folder)
    return folder


def run_folder(output_dir, arm, task_name, learning_rate, seed):
    """A run's folder in --output_dir: its name says the model, task, rate and seed."""
    return os.path.join(output_dir, f"{arm.replace(' ', '-')}-{task_name}-lr{learning_rate:g}-seed{seed}")


def is_kept(folder):
    """Whether a run is complete: run_classification.py writes eval_results.json last."""
    return os.path.exists(os.path.join(folder, "eval_results.json"))


def read_kept_run(folder):
    """A complete run's eval_results.json (is_kept)."""
    with open(os.path.join(folder, "eval_results.json")) as f:
        return json.load(f)


def run_unless_kept(folder, flags, jobs):
    """run_classification.py with `flags` into `folder`, in its share of the cores (`jobs` runs side by side), unless
    a run is kept there: (its eval_results.json, seconds it took, whether it ran now)."""
    ran = not is_kept(folder)
    if ran:
        command = [sys.executable, str(REPO / "run_classification.py"), *flags, "--output_dir", folder,
                   "--overwrite", "--no_tpu"]
        threads = str(max(1, (os.cpu_count() or 1) // jobs))
        start = time.perf_counter()
        result = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                                env={**os.environ, "TF_NUM_INTRAOP_THREADS": threads, "TF_NUM_INTEROP_THREADS": "1"})
        if result.returncode:
            raise SystemExit(f"{' '.join(map(str, command))} failed:\n{result.stderr[-3000:]}")
        with open(os.path.join(folder, "seconds.txt"), "w") as f:
            f.write(f"{time.perf_counter() - start:.1f}\n")
    with open(os.path.join(folder, "seconds.txt")) as seconds:
        return read_kept_run(folder), float(seconds.read()), ran


def run(args, arm, task_name, learning_rate, seed, data_dir):
    """One run_classification.py run, unless its results are there (check_kept_run has checked them): (its
    eval_results.json, seconds it took)."""
    folder = run_folder(args.output_dir, arm, task_name, learning_rate, seed)
    model = args.models.get(arm) or next(iter(args.models.values()))
    results, run_seconds, ran = run_unless_kept(folder, [
        "--model_name_or_path", model, "--task_name", task_name, "--data_dir", data_dir, "--max_length",
        TASKS[task_name][1], "--learning_rate", learning_rate, "--num_epochs", args.num_epochs, "--seed", seed,
        "--per_replica_batch_size", args.per_replica_batch_size, *(["--from_scratch"] if arm == FROM_SCRATCH else []),
        *args.fine_tuning_flags], args.jobs)
    if ran:
        print(f"{arm}, {task_name}, learning rate {learning_rate:g}, seed {seed}: {results['validation']['score']:.4f}",
              flush=True)
    return results, run_seconds


def check_kept_run(args, task_name, folder):
    """Refuses a kept run made with other flags than asked: it would enter the table silently, as its folder's name
    says only the model, task, rate and seed."""
    results = read_kept_run(folder)
    made_with = {"--num_epochs": (results["num_epochs"], args.num_epochs),
                 "--per_replica_batch_size": (results["global_batch_size"] // results["num_replicas"],
                                              args.per_replica_batch_size)}
    if task_name == "sst2" and results["examples_per_label"] is None:  # A few-shot run trains on fewer, as asked.
        made_with["--sst2_train_examples"] = (results["train_examples"], args.sst2_train_examples)
    differing = [f"{flag} {made} (asked now: {asked})" for flag, (made, asked) in made_with.items() if made != asked]
    if differing:
        raise UserError(f"the run kept in {folder} was made with {', '.join(differing)}. Give each setting of the "
                        "flags its own --output_dir.")


def best_learning_rate(scores_by_rate):
    """The learning rate whose runs score best on average: {rate: [the score of each seed's run]}."""
    return max(scores_by_rate, key=lambda rate: statistics.mean(scores_by_rate[rate]))


def mean_and_sd(values):
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main(args):
    refuse_an_output_that_is_read(args.output_dir, [args.glue_dir, *args.models.values()])
    check_inputs(args)
    os.makedirs(args.output_dir, exist_ok=True)
    data_dirs = {task_name: os.path.join(args.glue_dir, TASKS[task_name][0]) for task_name in args.tasks}
    # The lexical baseline before the runs, on all of SST-2 (seconds): a task that cannot be read fails here.
    lexical = {task_name: lexical_baseline(data_dir, task_name) for task_name, data_dir in data_dirs.items()}
    if "sst2" in args.tasks:
        data_dirs["sst2"] = sst2_subset(args.glue_dir, args.output_dir, args.sst2_train_examples)
    print(describe_machine())
    print(f"{args.models}; learning rates {args.learning_rates}, seeds {args.seeds}, {args.num_epochs} epochs, "
          f"batch {args.per_replica_batch_size}; SST-2: {args.sst2_train_examples} training sentences"
          + (f"; {' '.join(args.fine_tuning_flags)}" if args.fine_tuning_flags else "") + "\n", flush=True)
    # The first learning rate for every model and task first: a benchmark stopped early has a whole table of it.
    plan = [(arm, task_name, learning_rate, seed) for learning_rate in args.learning_rates for seed in args.seeds
            for task_name in args.tasks for arm in args.arms]
    kept = [key for key in plan if is_kept(run_folder(args.output_dir, *key))]
    for key in kept:  # Each before the first run, not when its turn comes.
        check_kept_run(args, key[1], run_folder(args.output_dir, *key))
    if args.summary_only:
        plan = kept
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {key: pool.submit(run, args, *key, data_dirs[key[1]]) for key in plan}
        for key, future in futures.items():
            results[key] = future.result()
    print_summary(args, args.arms, results, lexical)


def print_summary(args, arms, results, lexical):
    """The table: per model and task, the best learning rate's mean ± sd, the baselines below (`lexical`: {task:
    lexical_baseline's metrics}); the grid and the minutes below it."""
    rows, grid_rows, minutes = [], [], {}
    majority = {}
    for arm in arms:
        row, main_scores, seed_counts = [arm], [], []
        for task_name in args.tasks:
            by_rate = {}
            for (run_arm, run_task, learning_rate, seed), (eval_results, seconds) in results.items():
                if (run_arm, run_task) == (arm, task_name):
                    by_rate.setdefault(learning_rate, []).append(eval_results["validation"])
                    minutes[task_name] = minutes.get(task_name, 0) + seconds / 60
                    validation = eval_results["validation"]
                    majority.setdefault(task_name, validation.get("majority_class_score",
                                                                  validation.get("mean_prediction_score", 0.0)))
            if not by_rate:
                row.append("")
                continue
            best_rate = best_learning_rate({rate: [run["score"] for run in runs] for rate, runs in by_rate.items()})
            runs = by_rate[best_rate]
            row.append(" / ".join("%.1f ± %.1f" % tuple(100 * x for x in mean_and_sd([run[name] for run in runs]))
                                  for name in TASKS[task_name][2]) + f" ({best_rate:g}, {len(runs)} seeds)")
            main_scores.append(statistics.mean(run["score"] for run in runs))
            seed_counts.append(len(runs))
            grid_rows += [[arm, task_name, f"{rate:g}", "%.1f ± %.1f" % tuple(
                100 * x for x in mean_and_sd([run["score"] for run in by_rate[rate]])), len(by_rate[rate])]
                for rate in sorted(by_rate)]
        # An average over fewer runs than asked would look like the others (--summary_only of a benchmark under way).
        complete = len(main_scores) == len(args.tasks) and min(seed_counts) == len(args.seeds)
        row.append(f"{100 * statistics.mean(main_scores):.1f}" if complete else "incomplete")
        rows.append(row)
    rows.append(["majority class (STS-B: the training mean)",
                 *(f"{100 * majority[task]:.1f}" if task in majority else "" for task in args.tasks),
                 f"{100 * statistics.mean(majority.values()):.1f}" if len(majority) == len(args.tasks) else ""])
    rows.append(["lexical: TF-IDF or word overlap, linear (all of SST-2)",
                 *(" / ".join(f"{100 * lexical[task][name]:.1f}" for name in TASKS[task][2]) for task in args.tasks),
                 f"{100 * statistics.mean(lexical[task]['score'] for task in args.tasks):.1f}"])
    rows.append(["BERT-Tiny (Turc et al., 2019; GLUE's test set)",
                 *(" / ".join(f"{score:.1f}" for score in BERT_TINY[task]) for task in args.tasks),
                 f"{statistics.mean(statistics.mean(BERT_TINY[task]) for task in args.tasks):.1f}"])
    headers = [f"{TASKS[task][0]} ({' / '.join(TASKS[task][2])})" for task in args.tasks]
    print()
    print_table(["dev set, × 100: mean ± sd over seeds (learning rate)", *headers, "average"], rows)
    print_table(["model", "task", "learning rate", "score, mean ± sd", "seeds"], grid_rows)
    print_table(["task", *args.tasks], [["minutes of fine-tuning, all runs", *(f"{minutes.get(task, 0):.1f}"
                                                                            for task in args.tasks)]])
    print(f"{args.jobs} runs side by side; load average at the end: {load_average():.1f}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
