"""What run_classification.py fine-tunes on and how it scores it: a task's data and metrics.

- Task: where the texts (one, or a pair) and the labels (classes, or a regression's numbers) are, and the metrics
  the task is reported by;
- GLUE_TASKS: GLUE's nine tasks in one table, their files as GLUE's download script writes them (the convention of
  BERT's run_classifier.py processors and of 🤗's run_glue.py --task_name), and their copy on the Hub (nyu-mll/glue);
- load_splits: each split's examples from CSV, TSV, JSON-lines or Parquet files, a GLUE folder, GLUE on the Hub or a
  Hub dataset;
- stratified_split, sample_per_label, encode, targets_of: the validation split, the few-shot sample, the model's
  inputs and targets;
- score_predictions, classification_diagnostics, write_predictions: metrics and predictions, for eval_results.json
  and the files beside it.
🤗 Datasets, scikit-learn and SciPy are imported in the functions that use them: run_classification.py --help
answers without them.
"""

import csv
import dataclasses
import logging
import os

import numpy as np

from corpus import data_files_format
from utils import UserError, exists, local_copy

logger = logging.getLogger("run_classification")

NUM_WORST = 5  # How many of the worst classes and of the most confused label pairs the results list.


# The label of a row that has none, in SNLI's convention that MultiNLI's and CLUE's OCNLI files follow: "-" where the
# annotators agreed on no label. Such a row is left out as an empty label is, by default: kept, it would become a
# class of its own that the model learns from a few dozen examples and that no published score counts (OCNLI's
# 49 train and 50 dev rows). A data set whose classes include "-" says so with --no_label_mark "", which the warning
# that counts the rows left out names.
NO_LABEL_MARK = "-"


@dataclasses.dataclass(frozen=True)
class Task:
    """A classification or regression task: its columns, labels and metrics; for a GLUE task, its files too.

    `label_names`: the classes in the order of the model's outputs (a GLUE task's are fixed, as BERT's processors
    fix them; else None: the training data's labels, sorted). `metrics`: names of metric_functions(); a task's score
    is their mean, as GLUE ranks a task of two metrics (MRPC, QQP, STS-B). `files`: (split, file in --data_dir)
    pairs, the labelled files, "validation" choosing the epoch; `test_files`: (split, file, name of the predictions
    file that GLUE's submission takes) of the files without labels, read where present; `headerless_columns`: the
    names of the columns of labelled files that have no header line (CoLA's). GLUE's copy on the Hub, where it
    differs from the files: `hub_columns`, its text, text pair and label columns; `hub_label_names`, the names of its
    classes, in the order of `label_names` (it stores class ids); `hub_splits`, (split, its split) pairs.
    `no_label_mark`: a label that says a row has no label (NO_LABEL_MARK; "" for none but the empty label).
    """
    text_column: str
    label_column: str
    text_pair_column: str | None = None
    regression: bool = False
    label_names: tuple[str, ...] | None = None
    metrics: tuple[str, ...] = ("accuracy",)
    files: tuple[tuple[str, str], ...] = (("train", "train.tsv"), ("validation", "dev.tsv"))
    test_files: tuple[tuple[str, str, str], ...] = ()
    headerless_columns: tuple[str, ...] | None = None
    hub_columns: tuple[str, str | None, str] | None = None
    hub_label_names: tuple[str, ...] | None = None
    hub_splits: tuple[tuple[str, str], ...] = ()
    no_label_mark: str = NO_LABEL_MARK


def glue_task(text_column, text_pair_column, label_column, label_names, metrics, submission, **fields):
    """A GLUE task: a regression where it has no label names; its test.tsv predicted into `submission`."""
    test_files = fields.pop("test_files", (("test", "test.tsv", submission),))
    return Task(text_column, label_column, text_pair_column, label_names is None, label_names, metrics,
                test_files=test_files, **fields)


BINARY = ("0", "1")
ENTAILMENT = ("entailment", "not_entailment")
# GLUE's tasks, by the names of 🤗's run_glue.py. MRPC's and QQP's F1 is that of the label 1 (paraphrase,
# duplicate); STS-B is a regression of similarity scores from 0 to 5; MNLI is scored on the dev sets of the genres
# of its training data (matched, which chooses the epoch) and of others (mismatched). On the Hub, the labels 0 and 1
# have names (CoLA's 1 is acceptable), and the label column is always "label".
GLUE_TASKS = {
    "cola": glue_task("sentence", None, "label", BINARY, ("matthews_correlation",), "CoLA.tsv",
                      headerless_columns=("source", "label", "original_label", "sentence"),
                      hub_label_names=("unacceptable", "acceptable")),
    "sst2": glue_task("sentence", None, "label", BINARY, ("accuracy",), "SST-2.tsv",
                      hub_label_names=("negative", "positive")),
    "mrpc": glue_task("#1 String", "#2 String", "Quality", BINARY, ("f1", "accuracy"), "MRPC.tsv",
                      hub_columns=("sentence1", "sentence2", "label"),
                      hub_label_names=("not_equivalent", "equivalent")),
    "stsb": glue_task("sentence1", "sentence2", "score", None, ("pearson", "spearman"), "STS-B.tsv",
                      hub_columns=("sentence1", "sentence2", "label")),
    "qqp": glue_task("question1", "question2", "is_duplicate", BINARY, ("f1", "accuracy"), "QQP.tsv",
                     hub_columns=("question1", "question2", "label"), hub_label_names=("not_duplicate", "duplicate")),
    "mnli": glue_task("sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral"),
                      ("accuracy",), None,
                      files=(("train", "train.tsv"), ("validation", "dev_matched.tsv"),
                             ("validation_mismatched", "dev_mismatched.tsv")),
                      test_files=(("test", "test_matched.tsv", "MNLI-m.tsv"),
                                  ("test_mismatched", "test_mismatched.tsv", "MNLI-mm.tsv")),
                      hub_columns=("premise", "hypothesis", "label"),
                      hub_splits=(("validation", "validation_matched"), ("test", "test_matched"))),
    "qnli": glue_task("question", "sentence", "label", ENTAILMENT, ("accuracy",), "QNLI.tsv"),
    "rte": glue_task("sentence1", "sentence2", "label", ENTAILMENT, ("accuracy",), "RTE.tsv"),
    "wnli": glue_task("sentence1", "sentence2", "label", BINARY, ("accuracy",), "WNLI.tsv",
                      hub_label_names=("not_entailment", "entailment")),
}
# Where --task_name without --data_dir reads GLUE: the Hub's copy, one configuration a task, by these names.
GLUE_ON_THE_HUB = "nyu-mll/glue"


def task_name(text):
    """An argparse type: a GLUE task's name as 🤗's run_glue.py writes it, or as GLUE's folders do (SST-2, STS-B)."""
    return text.lower().replace("-", "")


def task_of_flags(args):
    """The task that run_classification.py's data flags describe: GLUE's, or one of the flags' columns."""
    if args.task_name:
        return GLUE_TASKS[args.task_name]
    return Task(args.text_column, args.label_column, args.text_pair_column, args.regression,
                metrics=("pearson", "spearman") if args.regression else ("accuracy",),
                no_label_mark=args.no_label_mark)


# ----------------------------------------------------------------------------------------------------------------
# Data


@dataclasses.dataclass
class Examples:
    """A split's examples in the order of its data: texts, second texts (None: single texts), labels (label names, or
    numbers for a regression; None: data without labels, to predict only), and where each is in the data (its row,
    counted from 0 after any header line)."""
    texts: list
    text_pairs: list | None
    labels: list | None
    rows: list

    def __len__(self):
        return len(self.rows)

    def subset(self, indices):
        def take(values):
            return None if values is None else [values[i] for i in indices]
        return Examples(take(self.texts), take(self.text_pairs), take(self.labels), take(self.rows))


# TSV as GLUE's files are: tab-separated, quoting off (some fields hold a lone double quote), every field kept as
# written ("NA" or "null" stay texts), a byte-order mark before the header skipped (MRPC's has one).
TSV_OPTIONS = dict(sep="\t", quoting=csv.QUOTE_NONE, keep_default_na=False, encoding="utf-8-sig")


def data_files(args, task):
    """{split: path} of the files to read, from --train_file and its siblings or from a GLUE task's --data_dir."""
    if not args.task_name:
        return {split: path for split in ("train", "validation", "test") if (path := getattr(args, f"{split}_file"))}
    paths = {split: os.path.join(args.data_dir, file) for split, file in task.files}
    missing = [os.path.basename(path) for path in paths.values() if not exists(path)]
    if missing:
        expected = " and ".join(file for _, file in task.files)
        if task.test_files:
            expected += f" (and, where present, {' and '.join(file for _, file, _ in task.test_files)})"
        raise UserError(f"the folder {args.data_dir!r} (--data_dir) has no {', '.join(missing)}: --task_name "
                        f"{args.task_name} reads {expected}, as GLUE's download script writes them into its task "
                        "folder (glue_data/RTE for rte). Pass that folder.")
    paths.update({split: path for split, file, _ in task.test_files
                  if exists(path := os.path.join(args.data_dir, file))})
    return paths


def load_splits(args, task):
    """{split: Examples} of the splits given (train always)."""
    import datasets  # Here, after the flags are checked: it is slow to import.

    if args.train_file or (args.task_name and args.data_dir):
        paths = data_files(args, task)
        local_paths = {split: local_copy(path) for split, path in paths.items()}  # 🤗 Datasets reads local files.
        builder = data_files_format({split: [path] for split, path in local_paths.items()},
                                    formats=("csv", "json", "parquet"))
        splits = {}
        for split, path in local_paths.items():
            options = dict(TSV_OPTIONS) if path.lower().endswith(".tsv") else {}
            if task.headerless_columns and not split.startswith("test"):
                options.update(header=None, column_names=list(task.headerless_columns))
            try:
                splits[split] = datasets.load_dataset(builder, data_files=[path], split="train", **options)
            except datasets.exceptions.DatasetGenerationError as err:  # Not parsable, not even a header row.
                reason = err.__cause__ or err
                raise UserError(f"cannot read the {split} file {paths[split]!r}: {reason}") from err
            except ValueError as err:  # How 🤗 Datasets says that a file holds a header but no rows.
                raise UserError(f"the {split} file {paths[split]!r} holds no examples ({err}).") from err
        where = {split: f"the {split} file {path!r}" for split, path in paths.items()}
    elif args.task_name:
        splits = glue_from_the_hub(args.task_name, task)
        where = {split: f"the {split} data of GLUE's {args.task_name} on the Hub" for split in splits}
    else:
        hub_splits = load_from_the_hub(args.dataset_name, args.dataset_config, lambda reason: (
            f"could not load the dataset {args.dataset_name!r} from the Hub: {reason}\n"
            "Check the name, or pass local files instead (--train_file ...)."))
        if "train" not in hub_splits:
            raise UserError(f"the dataset {args.dataset_name!r} has no train split; it has "
                            f"{sorted(hub_splits)}.")
        splits = {split: hub_splits[split] for split in ("train", "validation", "test") if split in hub_splits}
        where = {split: f"the {split} data" for split in splits}
    return {split: examples_of(dataset, task, split, where[split], args.task_name) for split, dataset in
            splits.items()}


def load_from_the_hub(name, config, message):
    """The 🤗 DatasetDict of a Hub dataset (or of a local folder in the Hub's layout), or a UserError of
    `message(reason)` where it cannot be loaded."""
    import datasets

    try:
        return datasets.load_dataset(name, config)
    except (ConnectionError, FileNotFoundError, ValueError) as err:  # Offline, no such dataset or configuration.
        raise UserError(message(err)) from err


def glue_from_the_hub(task_name, task):
    """{split: 🤗 Dataset} of GLUE's task from its copy on the Hub (GLUE_ON_THE_HUB), as its files would give them:
    their splits, columns and label names. The test splits are GLUE's submission data, read without labels as its
    test files are (the Hub holds -1 for each; MRPC's labels, from the corpus' own test file, are left out too, so
    that both ways write the same files)."""
    import datasets

    hub_splits = load_from_the_hub(GLUE_ON_THE_HUB, task_name, lambda reason: (
        f"cannot load GLUE's {task_name} from the Hub (offline?): {' '.join(str(reason).split())}. Pass --data_dir "
        "with GLUE's task folder as its download script writes it (glue_data/RTE for rte)."))
    names_on_the_hub = dict(task.hub_splits)
    columns = (task.text_column, task.text_pair_column, task.label_column)
    renamed = {hub_column: column for hub_column, column in zip(task.hub_columns or columns, columns)
               if hub_column != column}
    splits = {}
    for split in [split for split, _ in task.files] + [split for split, _, _ in task.test_files]:
        hub_split = names_on_the_hub.get(split, split)
        if hub_split not in hub_splits:
            if not split.startswith("test"):
                raise UserError(f"GLUE's {task_name} on the Hub has no {hub_split} split; it has "
                                f"{sorted(hub_splits)}. Pass --data_dir with GLUE's task folder.")
            continue
        dataset = hub_splits[hub_split].rename_columns(renamed)
        if split.startswith("test"):
            dataset = dataset.remove_columns(task.label_column)
        elif task.label_names:
            dataset = dataset.cast_column(task.label_column, datasets.ClassLabel(names=glue_label_names(
                task_name, task, dataset.features[task.label_column])))
        splits[split] = dataset
    return splits


def glue_label_names(task_name, task, class_label):
    """The label names of the files for the classes of GLUE's task on the Hub (a ClassLabel), in its order."""
    names_on_the_hub = task.hub_label_names or task.label_names
    unknown = sorted(set(class_label.names) - set(names_on_the_hub))
    if unknown:
        raise UserError(f"GLUE's {task_name} on the Hub has classes that this task does not: {unknown}; its classes "
                        f"are {list(names_on_the_hub)}. Pass --data_dir with GLUE's task folder.")
    return [dict(zip(names_on_the_hub, task.label_names))[name] for name in class_label.names]


def examples_of(dataset, task, split, where, task_name=None):
    """The Examples of a 🤗 dataset: rows without a label are left out, and counted in a warning; a test split
    without the label column is data to predict."""
    import datasets

    def advice(flag):
        return (f"Is it the file of GLUE's {task_name} from its download script?" if task_name else
                f"Choose one with {flag}.")

    labelled = task.label_column in dataset.column_names or not split.startswith("test")
    for column, flag in ((task.text_column, "--text_column"), (task.text_pair_column, "--text_pair_column"),
                         (task.label_column if labelled else None, "--label_column")):
        if column is not None and column not in dataset.column_names:
            raise UserError(f"{where} has no column {column!r}; its columns are {dataset.column_names}. "
                            f"{advice(flag)}")
    if len(dataset) == 0:
        raise UserError(f"{where} holds no examples.")
    texts = [str(text) for text in dataset[task.text_column]]
    pairs = None if task.text_pair_column is None else [str(text) for text in dataset[task.text_pair_column]]
    examples = Examples(texts, pairs, None, list(range(len(dataset))))
    if not labelled:
        logger.info("The %s data has no column %r: its %d examples are predicted, not scored.", split,
                    task.label_column, len(dataset))
        return examples
    labels = dataset[task.label_column]
    label_feature = dataset.features[task.label_column]
    if isinstance(label_feature, datasets.ClassLabel):  # Integers, named in the features; -1: no label.
        labels = [None if label == -1 else label_feature.int2str(label) for label in labels]
    elif label_feature == datasets.Value("float32"):  # The numbers as written (3.8, not 3.799999952316284): the
        # shortest texts that float32 reads back as the same numbers (STS-B's scores on the Hub).
        labels = [None if label is None else float(str(np.float32(label))) for label in labels]
    # A row without a label can be neither learned nor scored, but the labelled rest is good data: such rows are
    # left out, not refused. (As a string, a missing label would become a class "None" of its own.)
    empty = [row for row, label in enumerate(labels)
             if label is None or label != label or not str(label).strip()]  # A float NaN is != itself.
    marked = [row for row, label in enumerate(labels) if task.no_label_mark and str(label) == task.no_label_mark]
    kept = sorted(set(range(len(labels))) - set(empty) - set(marked))
    if not kept:
        raise UserError(f"{where} has no label in any of its {len(labels)} rows: its column {task.label_column!r} "
                        f"is empty{f' or {task.no_label_mark!r} (no label)' if marked else ''}. Check "
                        "--label_column, or fill in the labels.")
    if empty:
        logger.warning("The %s data has %d row(s) of %d without a label (column %r empty): they are left out.",
                       split, len(empty), len(labels), task.label_column)
    if marked:
        logger.warning("The %s data has %d row(s) of %d labelled %r, the mark of a row without a label (SNLI's "
                       "and OCNLI's where the annotators agreed on none): they are left out. If %r is one of your "
                       "classes, pass --no_label_mark ''.", split, len(marked), len(labels), task.no_label_mark,
                       task.no_label_mark)
    examples = examples.subset(kept)
    examples.labels = [numeric_label(labels[row], row, where, task) if task.regression else str(labels[row])
                       for row in kept]
    return examples


def numeric_label(label, row, where, task):
    """A regression's label as a float, or a UserError naming where the first label that is not a number is."""
    try:
        return float(label)
    except (TypeError, ValueError):
        raise UserError(f"{where} has a label that is not a number, {label!r} (column {task.label_column!r}, row "
                        f"{row + 1}): a regression learns numbers. Fix the label, or fine-tune a classifier "
                        "(without --regression).") from None


def label_names_of(task, splits):
    """The classes, in the order of the model's outputs: the task's, else the training data's, sorted; every split
    may only use those. None for a regression."""
    if task.regression:
        return None
    names = task.label_names or sorted(set(splits["train"].labels))
    if len(names) < 2:
        raise UserError(f"the training data has one label only ({names[0]!r}): classification needs at least two. "
                        "Check --label_column, or pass --regression for a column of numbers.")
    for split, examples in splits.items():
        unknown = sorted(set(examples.labels or ()) - set(names))
        if unknown and task.label_names:
            raise UserError(f"the {split} data has labels that this task does not: {unknown[:10]}; its labels are "
                            f"{list(names)}. Check that --data_dir holds this task's files.")
        if unknown:
            raise UserError(f"the {split} data has labels that the training data does not: "
                            f"{unknown[:10]}{' ...' if len(unknown) > 10 else ''}. A model cannot learn a label it "
                            "never sees in training: add examples of it to the training data, or remove it.")
    return list(names)


def stratified_split(labels, validation_percentage, seed, regression=False):
    """(train indices, validation indices), sorted: `validation_percentage` % of each label's examples go to
    validation, rounded, but at least one of every label with two or more examples, and never all of a label's;
    for a regression, that share of all examples, drawn at random. (🤗 Datasets'
    train_test_split(stratify_by_column=...) may leave a small label out, and refuses a label of one example.)"""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    groups = [np.arange(len(labels))] if regression else [np.flatnonzero(labels == label)
                                                           for label in sorted(set(labels))]
    train, validation = [], []
    for group in groups:
        indices = rng.permutation(group)
        num_validation = min(len(indices) - 1, max(1, round(len(indices) * validation_percentage / 100)))
        validation.extend(indices[:num_validation])
        train.extend(indices[num_validation:])
    return sorted(train), sorted(validation)


def sample_per_label(labels, examples_per_label, seed):
    """Sorted indices of exactly `examples_per_label` examples of each label, drawn at random with `seed`."""
    rng = np.random.default_rng(seed)
    label_array = np.asarray(labels)
    sample = []
    for label in sorted(set(labels)):  # Python strings, so that the error message shows the label as written.
        indices = np.flatnonzero(label_array == label)
        if len(indices) < examples_per_label:
            raise UserError(f"the label {label!r} has {len(indices)} training examples (after the "
                            f"validation split), fewer than --examples_per_label {examples_per_label}. Lower "
                            "--examples_per_label, or add examples of that label.")
        sample.extend(rng.choice(indices, examples_per_label, replace=False))
    return sorted(sample)


def encode(tokenizer, examples, label_names, max_length):
    """(features, targets): the tokenizer's inputs for the model, every text (or pair, with the tokenizer's
    separators between its two texts, the longer cut first) padded or cut to max_length, one shape for XLA; the
    targets_of the examples."""
    features = tokenizer(examples.texts, examples.text_pairs, padding="max_length", truncation=True,
                         max_length=max_length, return_tensors="np")
    return dict(features), targets_of(examples, label_names)


def targets_of(examples, label_names):
    """What a model learns and is scored against: the label ids (positions in `label_names`), or a regression's
    numbers (`label_names` None); zeros for data without labels."""
    if examples.labels is None:
        return np.zeros(len(examples), np.float32 if label_names is None else np.int32)
    if label_names is None:
        return np.array(examples.labels, dtype=np.float32)
    label2id = {label: i for i, label in enumerate(label_names)}
    return np.array([label2id[label] for label in examples.labels], dtype=np.int32)


# ----------------------------------------------------------------------------------------------------------------
# Metrics and predictions


def metric_functions():
    """{name: function(true values, predictions)}: scikit-learn's and SciPy's. F1 is that of the label id 1 (MRPC's
    and QQP's positive class)."""
    from scipy import stats
    from sklearn import metrics

    return {"accuracy": metrics.accuracy_score,
            "f1": lambda true, predicted: metrics.f1_score(true, predicted, zero_division=0.0),
            "matthews_correlation": metrics.matthews_corrcoef,
            "pearson": lambda true, predicted: stats.pearsonr(true, predicted).statistic,
            "spearman": lambda true, predicted: stats.spearmanr(true, predicted).statistic}


def score_predictions(task, targets, predictions):
    """{metric: value} of the task's metrics, and "score", their mean."""
    import warnings

    functions = metric_functions()
    if task.regression:  # In float64: the correlations of float32 numbers would differ in their sixth digit.
        targets, predictions = np.asarray(targets, np.float64), np.asarray(predictions, np.float64)
    with warnings.catch_warnings():
        # Constant predictions (a collapsed model) say nothing of the order: SciPy's correlations are undefined (NaN)
        # and warn, scikit-learn's Matthews correlation is 0. Here 0 for all: a NaN score is never the best epoch's.
        warnings.simplefilter("ignore", category=RuntimeWarning)
        scores = {name: float(np.nan_to_num(functions[name](targets, predictions))) for name in task.metrics}
    return {**scores, "score": float(np.mean(list(scores.values())))}


def predictions_of(task, outputs):
    """The model's predictions from its outputs (logits): label ids, or a regression's numbers."""
    return outputs[:, 0] if task.regression else np.argmax(outputs, axis=-1)


def evaluation_metrics(task, targets, predictions, train_targets, label_names):
    """The task's metrics and score, with the trivial baseline: for a regression, the squared error and that of
    always predicting the training data's mean, and that prediction's score; for classes, accuracy, macro-F1 and the task's score of always
    predicting the most frequent training label, with the worst classes and the most confused pairs."""
    metrics = {"num_examples": int(len(targets)), **score_predictions(task, targets, predictions)}
    if task.regression:
        mean = np.full(len(targets), np.mean(train_targets))
        metrics.update(mean_squared_error=float(np.mean((predictions - targets) ** 2)),
                       mean_prediction_mean_squared_error=float(np.mean((mean - targets) ** 2)),
                       mean_prediction_score=score_predictions(task, targets, mean)["score"])
        return metrics
    majority = np.full(len(targets), np.bincount(train_targets, minlength=len(label_names)).argmax())
    return {**metrics, **classification_diagnostics(targets, predictions, label_names),
            "majority_class_accuracy": float(np.mean(targets == majority)),
            "majority_class_score": score_predictions(task, targets, majority)["score"]}


def classification_diagnostics(label_ids, predictions, label_names):
    """Accuracy, macro-F1 (the mean F1 over the labels in the data or the predictions, as scikit-learn's), the worst
    classes by F1, and the most confused pairs, from the confusion matrix. (scikit-learn's confusion_matrix and
    f1_score give the first two, but the lists below need the matrix anyway.)"""
    num_labels = len(label_names)
    # [true label, predicted label]
    confusion = np.bincount(np.asarray(label_ids) * num_labels + predictions, minlength=num_labels**2).reshape(
        num_labels, num_labels)
    true_positives = np.diag(confusion)
    support, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    present = (support + predicted) > 0
    # F1 = 2 TP / (2 TP + FP + FN) = 2 TP / (examples of the label + predictions of the label).
    f1 = np.divide(2 * true_positives, support + predicted, out=np.zeros(num_labels), where=present)
    worst = sorted(np.flatnonzero(support > 0), key=lambda i: (f1[i], label_names[i]))[:NUM_WORST]
    errors = confusion - np.diag(true_positives)
    confused = sorted(zip(*np.nonzero(errors)), key=lambda pair: (-errors[pair], pair))[:NUM_WORST]
    return {
        "accuracy": float(true_positives.sum() / len(label_ids)),
        "macro_f1": float(f1[present].mean()),
        "worst_classes": [{"label": label_names[i], "f1": float(f1[i]), "support": int(support[i])} for i in worst],
        "most_confused": [{"label": label_names[true], "predicted": label_names[predicted],
                           "count": int(errors[true, predicted])} for true, predicted in confused],
    }


def predictions_file(task, split, labelled):
    """The file name of a split's predictions: GLUE's submission name for a GLUE test file without labels."""
    submission = {test_split: name for test_split, _, name in task.test_files}
    return submission[split] if split in submission and not labelled else f"{split}_predictions.tsv"


def write_predictions(path, examples, predictions, label_names):
    """A split's predictions, one per example in the order of its data, tab-separated with a header line:
    `index` (the example's row in the data file, counted from 0 after the header line: GLUE's test files number
    their rows so, and its submissions take `index` and `prediction`), `prediction` (a label name, or a regression's
    number), and `label` where the data has labels, so that anyone can recompute a metric."""
    def text(value):  # A number as the shortest text that reads back as exactly the same number.
        return label_names[value] if label_names else repr(float(value))

    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["index", "prediction"] + (["label"] if examples.labels is not None else []))
        for i, (row, prediction) in enumerate(zip(examples.rows, predictions)):
            label = [] if examples.labels is None else [examples.labels[i] if label_names else
                                                        text(examples.labels[i])]
            writer.writerow([row, text(prediction), *label])
