"""run_classification.py on GLUE's tasks (--task_name, --data_dir) and on any data of sentence pairs or numbers:
GLUE's files read as its download script writes them, each task's metrics against hand-computed values, the scores
of eval_results.json recomputed from the predictions written beside it, GLUE's submission layout for a test file,
the saved pair classifier and regressor in TensorFlow's pipeline (and, with PYTORCH_PYTHON, in Transformers 5 with
PyTorch), and bad input."""

import argparse
import csv
import functools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tasks
from helpers import REPO, run_main
from tasks import GLUE_TASKS, Examples, encode, evaluation_metrics, load_splits, score_predictions
from test_export_model import TRANSFORMERS_5, same_answers, tensorflow_logits

GLUE = REPO / "tests" / "data" / "glue"
FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}
BANKING77 = REPO / "tests" / "data" / "banking77"


def read_tsv(path, header=True):
    """The rows of a GLUE file as dicts (lists without a header), read here with the csv module, quoting off."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = (csv.DictReader if header else csv.reader)(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return list(reader)


def read_rows(task_name, path):
    """The rows of a task's file as dicts; CoLA's labelled files, without a header line, by the task's column names."""
    task = GLUE_TASKS[task_name]
    if task.headerless_columns and path.name != "test.tsv":
        return [dict(zip(task.headerless_columns, row)) for row in read_tsv(path, header=False)]
    return read_tsv(path)


def task_args(task_name, data_dir):
    """The data flags of --task_name, with --data_dir unless it is None (the Hub's copy)."""
    return argparse.Namespace(task_name=task_name, data_dir=data_dir and str(data_dir), train_file=None)


@pytest.mark.fast
@pytest.mark.parametrize("task_name", FOLDERS)
def test_each_glue_task_reads_its_files_as_the_download_script_writes_them(task_name):
    task = GLUE_TASKS[task_name]
    splits = load_splits(task_args(task_name, GLUE / FOLDERS[task_name]), task)
    assert sorted(splits) == ["train", "validation"]
    for split, file in (("train", "train.tsv"), ("validation", "dev.tsv")):
        examples = splits[split]
        rows = read_rows(task_name, GLUE / FOLDERS[task_name] / file)  # CoLA's: source, label, mark, sentence.
        assert len(examples) == len(rows) == (40 if split == "train" else 20)
        assert examples.rows == list(range(len(rows)))
        assert examples.texts == [row[task.text_column] for row in rows]
        assert examples.text_pairs == (None if task.text_pair_column is None else
                                       [row[task.text_pair_column] for row in rows])
        labels = [row[task.label_column] for row in rows]
        assert examples.labels == ([float(label) for label in labels] if task.regression else labels)
        assert task.regression or set(labels) <= set(task.label_names)
    if task_name == "rte":  # Row 2164's lone double quote stays a character of its text, the rows after it rows.
        assert splits["train"].texts[-1].startswith('"That film wasn\'t too successful')


def write_tsv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(map(str, row)) + "\n" for row in [header, *rows]), encoding="utf-8")


@pytest.mark.fast
def test_mnli_has_two_dev_sets_and_test_files_are_data_to_predict(tmp_path, monkeypatch):
    # MNLI's layout (its files are too large to ship): the matched and mismatched dev sets, and its two test files.
    header = ["index", "genre", "sentence1", "sentence2", "gold_label"]
    labels = ["entailment", "neutral", "contradiction"]
    for name, rows in (("train", 6), ("dev_matched", 3), ("dev_mismatched", 4)):
        write_tsv(tmp_path / f"{name}.tsv", header, [[i, "fiction", f"premise {i}", f"hypothesis {i}", labels[i % 3]]
                                                     for i in range(rows)])
    write_tsv(tmp_path / "test_matched.tsv", header[:-1], [[i, "fiction", f"p {i}", f"h {i}"] for i in range(2)])
    splits = load_splits(task_args("mnli", tmp_path), GLUE_TASKS["mnli"])
    assert {split: len(examples) for split, examples in splits.items()} == {
        "train": 6, "validation": 3, "validation_mismatched": 4, "test": 2}
    assert splits["test"].labels is None and splits["test"].text_pairs == ["h 0", "h 1"]
    assert splits["validation_mismatched"].labels == ["entailment", "neutral", "contradiction", "entailment"]
    # The same from the Hub's copy, whose splits say matched where the files do not.
    files = {"train": "train", "validation_matched": "dev_matched", "validation_mismatched": "dev_mismatched",
             "test_matched": "test_matched"}
    hub = hub_copy(tmp_path / "hub", "mnli", {hub_split: read_rows("mnli", tmp_path / f"{name}.tsv")
                                              for hub_split, name in files.items()})
    monkeypatch.setattr(tasks, "GLUE_ON_THE_HUB", str(hub))
    assert load_splits(task_args("mnli", None), GLUE_TASKS["mnli"]) == splits


# GLUE on the Hub (nyu-mll/glue), as 🤗 Datasets' GLUE script made it from GLUE's files: each task's text columns,
# and the names of its classes (None: STS-B's numbers, in float32), which it stores as ids.
HUB_LAYOUT = {"cola": (["sentence"], ["unacceptable", "acceptable"]),
              "sst2": (["sentence"], ["negative", "positive"]),
              "mrpc": (["sentence1", "sentence2"], ["not_equivalent", "equivalent"]),
              "stsb": (["sentence1", "sentence2"], None),
              "rte": (["sentence1", "sentence2"], ["entailment", "not_entailment"]),
              "mnli": (["premise", "hypothesis"], ["entailment", "neutral", "contradiction"])}


def hub_copy(root, task_name, splits, class_names=None):
    """A folder in the layout of GLUE's repository on the Hub, which load_dataset reads as it reads the Hub's:
    `splits`, {split on the Hub: rows with the files' columns}, in Parquet files
    {task_name}/{split}-00000-of-00001.parquet with the Hub's columns and features (a label's class id: its name's
    position, or the number the file writes, as CoLA's 1, acceptable; -1 in rows without a label, as the test splits'
    are), and README.md's configurations naming them. `class_names`: other names than the Hub's."""
    import datasets

    task = GLUE_TASKS[task_name]
    text_columns, hub_class_names = HUB_LAYOUT[task_name]
    class_names = class_names or hub_class_names
    label = datasets.Value("float32") if class_names is None else datasets.ClassLabel(names=class_names)
    features = datasets.Features({**dict.fromkeys(text_columns, datasets.Value("string")), "label": label,
                                  "idx": datasets.Value("int32")})

    def class_id(row):
        value = row.get(task.label_column)
        if value is None:
            return -1
        if class_names is None:
            return float(value)
        return class_names.index(value) if value in class_names else int(value)

    for split, rows in splits.items():
        texts = {hub_column: [row[column] for row in rows]
                 for hub_column, column in zip(text_columns, (task.text_column, task.text_pair_column))}
        datasets.Dataset.from_dict({**texts, "label": [class_id(row) for row in rows], "idx": list(range(len(rows)))},
                                   features=features).to_parquet(root / task_name / f"{split}-00000-of-00001.parquet")
    configs = "".join(f"- config_name: {folder.name}\n  data_files:\n" + "".join(
        f"  - split: {split}\n    path: {folder.name}/{split}-*\n"
        for split in sorted(path.name.split("-")[0] for path in folder.glob("*.parquet")))
        for folder in sorted(root.iterdir()) if folder.is_dir())
    (root / "README.md").write_text(f"---\nconfigs:\n{configs}---\n")
    return root


def hub_copy_of_folder(root, task_name, folder):
    """The Hub's copy of a task folder of glue_copy: its train.tsv, dev.tsv and test.tsv."""
    return hub_copy(root, task_name, {split: read_rows(task_name, folder / file) for split, file in (
        ("train", "train.tsv"), ("validation", "dev.tsv"), ("test", "test.tsv"))})


@pytest.mark.fast
@pytest.mark.parametrize("task_name", FOLDERS)
def test_glue_from_the_hub_gives_the_examples_of_its_files(task_name, tmp_path, monkeypatch):
    # --task_name without --data_dir, as 🤗's run_glue.py reads GLUE: the Hub's columns, class ids and split names, the
    # test splits' -1 for no label; the examples, labels and rows of the files, the test split's to predict.
    folder = glue_copy(task_name, tmp_path, test_file=True)
    monkeypatch.setattr(tasks, "GLUE_ON_THE_HUB", str(hub_copy_of_folder(tmp_path / "hub", task_name, folder)))
    task = GLUE_TASKS[task_name]
    from_the_hub = load_splits(task_args(task_name, None), task)
    from_files = load_splits(task_args(task_name, folder), task)
    if task.regression:  # The Hub's numbers are float32: as the files write them, but for digits beyond its 7.
        pairs = [(label, hub_label) for split in ("train", "validation")
                 for label, hub_label in zip(from_files[split].labels, from_the_hub[split].labels)]
        assert [pair for pair in pairs if pair[0] != pair[1]] == [(2.33333333333333, 2.3333333)]
        for split in ("train", "validation"):
            from_the_hub[split].labels = from_files[split].labels
    assert from_the_hub == from_files
    assert list(from_the_hub) == ["train", "validation", "test"] and from_the_hub["test"].labels is None


@pytest.mark.fast
def test_glue_from_the_hub_refuses_classes_and_splits_it_does_not_know(tmp_path, monkeypatch):
    rows = read_rows("rte", GLUE / "RTE" / "dev.tsv")
    other_names = hub_copy(tmp_path / "names", "rte", {"train": rows, "validation": rows},
                           class_names=["entailment", "not_entailment", "contradiction"])
    monkeypatch.setattr(tasks, "GLUE_ON_THE_HUB", str(other_names))
    with pytest.raises(tasks.UserError, match=r"GLUE's rte on the Hub has classes that this task does not: "
                                              r"\['contradiction'\]; its classes are "
                                              r"\['entailment', 'not_entailment'\]"):
        load_splits(task_args("rte", None), GLUE_TASKS["rte"])
    monkeypatch.setattr(tasks, "GLUE_ON_THE_HUB", str(hub_copy(tmp_path / "splits", "rte", {"train": rows})))
    with pytest.raises(tasks.UserError, match=r"GLUE's rte on the Hub has no validation split; it has \['train'\]"):
        load_splits(task_args("rte", None), GLUE_TASKS["rte"])


@pytest.mark.fast
def test_the_tasks_training_texts_for_pre_training_hold_train_and_never_dev(tmp_path, monkeypatch):
    # benchmarks/glue_text.py, the task-adaptive corpus of `make glue-hour`: every training text in the files' order
    # (a pair's two texts one after the other), no label, no dev text.
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    output = tmp_path / "glue-train.txt"
    result = run_main("benchmarks/glue_text.py", "--glue_dir", GLUE, "--output_file", output)
    expected = []
    for task_name, folder in FOLDERS.items():
        task = GLUE_TASKS[task_name]
        rows = read_rows(task_name, GLUE / folder / "train.tsv")
        expected += [row[column].strip() for row in rows for column in (task.text_column, task.text_pair_column)
                     if column]
    assert output.read_text(encoding="utf-8").splitlines() == expected
    assert "SST-2: 40 lines" in result.stdout and "MRPC: 80 lines" in result.stdout
    dev_texts = {row["sentence1"] for row in read_tsv(GLUE / "RTE" / "dev.tsv")}
    assert dev_texts and not dev_texts & set(expected)

    shutil.copytree(GLUE, tmp_path / "glue")
    (tmp_path / "glue" / "RTE" / "train.tsv").unlink()
    result = run_main("benchmarks/glue_text.py", "--glue_dir", tmp_path / "glue", "--output_file", output,
                      expect_failure=True)
    assert result.stderr.strip().splitlines()[-1].startswith("error: the folder") and "train.tsv" in result.stderr


@pytest.mark.fast
def test_glue_metrics_against_hand_computed_values():
    def score(task_name, true, predicted):
        return score_predictions(GLUE_TASKS[task_name], np.array(true), np.array(predicted))

    true, predicted = [1, 1, 1, 0, 0, 1], [1, 0, 1, 0, 1, 1]  # TP 3, FN 1, TN 1, FP 1.
    # Matthews: (TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (3 − 1) / √(4·4·2·2) = 0.25.
    assert score("cola", true, predicted) == pytest.approx({"matthews_correlation": 0.25, "score": 0.25})
    # F1 of the label 1: precision 3/4, recall 3/4; accuracy 4/6; the score is their mean.
    assert score("mrpc", true, predicted) == pytest.approx({"f1": 0.75, "accuracy": 4 / 6,
                                                            "score": (0.75 + 4 / 6) / 2})
    assert score("rte", true, predicted) == pytest.approx({"accuracy": 4 / 6, "score": 4 / 6})
    # Pearson of [1, 2, 3, 4] and [1, 3, 2, 4]: Σ dx·dy / √(Σ dx² Σ dy²) = 4 / 5. Spearman of [1, 2, 2, 3] (ranks 1,
    # 2.5, 2.5, 4: ties share their mean rank) and [.1, .4, .3, .9] (ranks 1, 3, 2, 4): 4.5 / √(4.5 · 5) = √0.9.
    assert score("stsb", [1, 2, 3, 4], [1, 3, 2, 4])["pearson"] == pytest.approx(0.8)
    assert score("stsb", [1, 2, 2, 3], [.1, .4, .3, .9])["spearman"] == pytest.approx(0.9 ** 0.5)
    # The trivial baselines: always the majority training label (1 here), always the training mean.
    def evaluate(task_name):
        return evaluation_metrics(GLUE_TASKS[task_name], np.array(true), np.array(predicted),
                                  train_targets=np.array([1, 1, 0]), label_names=["0", "1"])

    cola, mrpc = evaluate("cola"), evaluate("mrpc")
    assert cola["majority_class_score"] == 0 and cola["majority_class_accuracy"] == pytest.approx(4 / 6)
    assert mrpc["majority_class_score"] == pytest.approx((2 * 4 / 6 / (1 + 4 / 6) + 4 / 6) / 2)  # F1 = 2p / (1 + p).
    stsb = evaluation_metrics(GLUE_TASKS["stsb"], np.array([1., 3.]), np.array([1.5, 4.]), np.array([0., 4.]), None)
    assert stsb["mean_squared_error"] == (0.5 ** 2 + 1) / 2 and stsb["mean_prediction_mean_squared_error"] == 1
    assert stsb["mean_prediction_score"] == 0
    # Constant predictions say nothing of the order: a correlation of 0 (SciPy: undefined), as Matthews' is then.
    assert score("stsb", [1, 2, 3], [2, 2, 2]) == {"pearson": 0, "spearman": 0, "score": 0}


@pytest.mark.fast
def test_a_pair_is_encoded_as_the_tokenizers_pair_the_longer_text_cut_first(tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    long_text, short_text = "The game was released in Japan in 2011 , and in the United States later .", "A game ."
    examples = Examples([long_text], [short_text], ["1"], [0])
    features, targets = encode(tokenizer, examples, ["0", "1"], max_length=16)
    tokens = tokenizer.convert_ids_to_tokens(features["input_ids"][0])
    short_tokens = tokenizer.tokenize(short_text)
    # <s> the first text, cut to fit </s></s> the second, whole </s>: the pair of the tokenizer, 16 tokens.
    assert tokens == ["<s>", *tokenizer.tokenize(long_text)[:16 - 4 - len(short_tokens)], "</s>", "</s>",
                      *short_tokens, "</s>"]
    assert targets.tolist() == [1] and features["attention_mask"].sum() == 16


def glue_copy(task_name, tmp_path, test_file=False):
    """A copy of the task's folder in tests/data/glue; with `test_file`, a test.tsv of GLUE's layout beside it: the dev
    rows without their label, numbered from 0 by an index column, as GLUE's test files are."""
    folder = tmp_path / FOLDERS[task_name]
    shutil.copytree(GLUE / FOLDERS[task_name], folder)
    if test_file:
        task = GLUE_TASKS[task_name]
        columns = [column for column in (task.text_column, task.text_pair_column) if column]
        write_tsv(folder / "test.tsv", ["index", *columns], [[i, *(row[column] for column in columns)] for i, row in
                                                             enumerate(read_rows(task_name, folder / "dev.tsv"))])
    return folder


def fine_tune_args(model_dir, output_dir, *data):
    return ["--model_name_or_path", model_dir, *data, "--max_length", 64, "--per_replica_batch_size", 8,
            "--learning_rate", 5e-3, "--num_epochs", 3, "--no_tpu", "--output_dir", output_dir]


@pytest.fixture(scope="module")
def glue_model(pretrained_model_dir, tmp_path_factory):
    """fine_tuned(task_name): the folder of the tiny masked LM fine-tuned on that task (STS-B and MRPC with a test
    file), run once per test process."""
    @functools.cache
    def fine_tuned(task_name):
        root = tmp_path_factory.mktemp(task_name)
        data_dir = glue_copy(task_name, root, test_file=task_name in ("stsb", "mrpc"))
        run_main("run_classification.py", *fine_tune_args(pretrained_model_dir, root / "model", "--task_name",
                                                          task_name, "--data_dir", data_dir))
        return root / "model"
    return fine_tuned


@pytest.mark.parametrize("task_name", ["stsb", "cola", "mrpc", "rte"])
def test_each_tasks_scores_recompute_from_the_dev_predictions_written_beside_them(glue_model, task_name):
    output_dir = glue_model(task_name)
    results = json.loads((output_dir / "eval_results.json").read_text())
    task = GLUE_TASKS[task_name]
    validation = results["validation"]
    assert results["task_name"] == task_name and validation["num_examples"] == 20
    # One prediction per dev example, in the file's order, with its label: the file's own.
    dev_rows = read_tsv(GLUE / FOLDERS[task_name] / "dev.tsv", header=task_name != "cola")
    dev_labels = [row[1] for row in dev_rows] if task_name == "cola" else [row[task.label_column] for row in dev_rows]
    predictions = read_tsv(output_dir / "validation_predictions.tsv")
    assert [row["index"] for row in predictions] == [str(i) for i in range(20)]
    assert [row["label"] for row in predictions] == [
        repr(float(label)) if task.regression else label for label in dev_labels]
    # The task's metrics, recomputed here from the predictions and the dev file: scikit-learn and SciPy directly.
    from scipy import stats
    from sklearn import metrics

    if task.regression:
        true, predicted = np.array(dev_labels, float), np.array([float(row["prediction"]) for row in predictions])
        expected = {"pearson": stats.pearsonr(true, predicted)[0], "spearman": stats.spearmanr(true, predicted)[0]}
    else:
        true, predicted = np.array(dev_labels), np.array([row["prediction"] for row in predictions])
        expected = {"matthews_correlation": lambda: metrics.matthews_corrcoef(true, predicted),
                    "f1": lambda: metrics.f1_score(true, predicted, pos_label="1", zero_division=0.0),
                    "accuracy": lambda: metrics.accuracy_score(true, predicted)}
        expected = {name: expected[name]() for name in task.metrics}
    for name in task.metrics:
        assert validation[name] == pytest.approx(expected[name], abs=1e-6), name
    assert validation["score"] == pytest.approx(np.mean([validation[name] for name in task.metrics]))
    # The kept epoch is the best by the task's score, which the history logged after each epoch.
    assert validation["score"] == pytest.approx(max(results["history"]["val_score"]), abs=1e-6)
    assert results["history"]["val_score"][results["best_epoch"] - 1] == max(results["history"]["val_score"])
    assert all(len(results["history"][f"val_{name}"]) == 3 for name in task.metrics)


def test_glue_from_the_hub_fine_tunes_to_the_results_and_files_of_its_folder(glue_model, pretrained_model_dir,
                                                                             tmp_path, monkeypatch):
    # MRPC: other columns, named classes, F1; the same metrics and predictions files, the test split's in GLUE's
    # submission file.
    from_files = glue_model("mrpc")
    folder = glue_copy("mrpc", tmp_path, test_file=True)
    monkeypatch.setattr(tasks, "GLUE_ON_THE_HUB", str(hub_copy_of_folder(tmp_path / "hub", "mrpc", folder)))
    output_dir = tmp_path / "model"
    run_main("run_classification.py", *fine_tune_args(pretrained_model_dir, output_dir, "--task_name", "mrpc"))
    assert (json.loads((output_dir / "eval_results.json").read_text()) ==
            json.loads((from_files / "eval_results.json").read_text()))
    for name in ("validation_predictions.tsv", "MRPC.tsv"):
        assert (output_dir / name).read_text() == (from_files / name).read_text(), name


def test_a_regression_learns_and_predicts_glues_test_file_in_its_submission_layout(glue_model):
    output_dir = glue_model("stsb")
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert results["regression"] and "accuracy" not in results["history"]
    assert results["history"]["loss"][-1] < 0.8 * results["history"]["loss"][0]  # The squared error falls.
    # GLUE's submission file: index and prediction, every test row in order, no label; no other test results.
    submission = read_tsv(output_dir / "STS-B.tsv")
    assert list(submission[0]) == ["index", "prediction"] and [row["index"] for row in submission] == [
        str(i) for i in range(20)]
    assert "test" not in results and not (output_dir / "test_predictions.tsv").exists()
    config = json.loads((output_dir / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "LABEL_0"}
    # The same rows through the saved model, one pair at a time: the predictions of the file.
    from transformers import pipeline

    regressor = pipeline("text-classification", model=str(output_dir), framework="tf", dtype=None)
    dev_rows = read_tsv(GLUE / "STS-B" / "dev.tsv")[:3]
    answers = regressor([{"text": row["sentence1"], "text_pair": row["sentence2"]} for row in dev_rows])
    assert [answer["label"] for answer in answers] == ["LABEL_0"] * 3
    assert [answer["score"] for answer in answers] == pytest.approx(
        [float(row["prediction"]) for row in submission[:3]], abs=1e-4)


def test_pairs_from_json_lines_train_with_text_and_text_pair_columns(pretrained_model_dir, tmp_path):
    rows = read_tsv(GLUE / "RTE" / "train.tsv")
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"premise": row["sentence1"], "hypothesis": row["sentence2"],
                                         "entails": row["label"]}) + "\n" for row in rows))
    output_dir = tmp_path / "model"
    result = run_main("run_classification.py", *fine_tune_args(
        pretrained_model_dir, output_dir, "--train_file", train, "--text_column", "premise", "--text_pair_column",
        "hypothesis", "--label_column", "entails"), "--num_epochs", 1)
    assert "Data: 2 labels; train 36 examples, validation 4 examples" in result.stderr  # 10 % of each label held out.
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert results["num_labels"] == 2 and results["validation"]["num_examples"] == 4
    # The held-out rows, in the training file's order, by their row in it.
    predictions = read_tsv(output_dir / "validation_predictions.tsv")
    assert [rows[int(row["index"])]["label"] for row in predictions] == [row["label"] for row in predictions]

    from transformers import pipeline

    classify = pipeline("text-classification", model=str(output_dir), framework="tf", dtype=None)
    answer = classify({"text": rows[0]["sentence1"], "text_pair": rows[0]["sentence2"]})
    assert answer["label"] in ("entailment", "not_entailment") and 0.5 <= answer["score"] <= 1


def assert_refused(args, *messages, status=1):
    result = run_main("run_classification.py", *args, expect_failure=True)
    assert result.returncode == status
    for message in messages:
        assert message in result.stderr, result.stderr[-3000:]
    assert "Model:" not in result.stderr and "Traceback" not in result.stderr  # Before building the model.
    return result


@pytest.mark.fast
def test_bad_glue_and_pair_input(pretrained_model_dir, tmp_path):
    model = ["--model_name_or_path", pretrained_model_dir, "--no_tpu", "--output_dir", tmp_path / "model"]
    assert_refused([*model, "--task_name", "glue", "--data_dir", GLUE],
                   "argument --task_name: invalid choice: 'glue'", "cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli",
                   status=2)
    # Without --data_dir, GLUE's copy on the Hub; offline (as the tests are), one line that says what to do.
    error = assert_refused([*model, "--task_name", "rte"]).stderr.splitlines()[-1]
    assert error.startswith("error: cannot load GLUE's rte from the Hub (offline?): Couldn't reach 'nyu-mll/glue'")
    assert error.endswith(". Pass --data_dir with GLUE's task folder as its download script writes it (glue_data/RTE "
                          "for rte).")
    assert_refused([*model, "--task_name", "RTE", "--data_dir", GLUE / "RTE", "--text_column", "premise"],
                   "--task_name rte brings its files, columns and labels: leave out --text_column", status=2)
    assert_refused([*model, "--train_file", BANKING77 / "train.csv", "--data_dir", GLUE],
                   "--data_dir holds the files of a GLUE task (--task_name)", status=2)
    assert_refused([*model, "--task_name", "mnli", "--data_dir", GLUE / "RTE"],
                   f"the folder '{GLUE / 'RTE'}' (--data_dir) has no dev_matched.tsv, dev_mismatched.tsv: --task_name "
                   "mnli reads train.tsv and dev_matched.tsv and dev_mismatched.tsv")
    assert_refused([*model, "--task_name", "sst2", "--data_dir", GLUE / "RTE"],
                   f"the train file '{GLUE / 'RTE' / 'train.tsv'}' has no column 'sentence'",
                   "Is it the file of GLUE's sst2 from its download script?")
    banking77 = ["--train_file", BANKING77 / "train.csv", "--label_column", "category"]
    assert_refused([*model, *banking77, "--text_pair_column", "question"],
                   "has no column 'question'; its columns are ['text', 'category']",
                   "Choose one with --text_pair_column.")
    assert_refused([*model, *banking77, "--regression"], "has a label that is not a number, 'card_arrival' (column "
                   "'category', row 1): a regression learns numbers")
    rte = glue_copy("rte", tmp_path)
    (rte / "dev.tsv").write_text((rte / "dev.tsv").read_text().replace("\tnot_entailment\n", "\tunknown\n", 1))
    assert_refused([*model, "--task_name", "rte", "--data_dir", rte],
                   "the validation data has labels that this task does not: ['unknown']; its labels are "
                   "['entailment', 'not_entailment']")


@pytest.mark.fast
def test_a_text_pair_column_that_is_the_text_column_is_refused(capsys):
    # Each text would be paired with itself, in silence.
    import run_classification

    data = ["--model_name_or_path", "m", "--train_file", "t.csv"]
    for columns, column in ((["--text_pair_column", "text"], "text"),
                            (["--text_column", "question", "--text_pair_column", "question"], "question")):
        with pytest.raises(SystemExit) as exit_info:
            run_classification.parse_args([*data, *columns])
        assert exit_info.value.code == 2
        assert f"error: --text_pair_column and --text_column both name the column {column!r}: each text would be " \
               "paired with itself. Name the column of the second text in --text_pair_column, or leave it out for " \
               "single texts." in capsys.readouterr().err
    assert run_classification.parse_args([*data, "--text_pair_column", "question"]).text_column == "text"


@pytest.mark.skipif(not os.environ.get("PYTORCH_PYTHON"),
                    reason="needs 🤗 Transformers 5 and PyTorch: `make test-pytorch` builds them and runs it")
def test_transformers_5_with_pytorch_runs_the_pair_classifier_and_the_regressor_as_tensorflow(glue_model):
    from transformers import pipeline

    # STS-B's pairs are short: within the tiny model's 64 positions, untruncated.
    pairs = [[row["sentence1"], row["sentence2"]] for row in read_tsv(GLUE / "STS-B" / "dev.tsv")[:3]]
    models = [(task_name, "AutoModelForSequenceClassification", "text-classification", str(glue_model(task_name)),
               pairs) for task_name in ("rte", "stsb")]
    result = subprocess.run([os.environ["PYTORCH_PYTHON"], "-c", TRANSFORMERS_5, json.dumps(models)],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    answers = json.loads(result.stdout)
    for task_name, model_class, task, folder, texts in models:
        pytorch = answers[task_name]
        assert pytorch["report"] == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [],
                                     "error_msgs": []}
        _, logits = tensorflow_logits("TF" + model_class, folder, texts)
        assert logits.shape == (3, 1 if task_name == "stsb" else 2)
        assert np.abs(np.array(pytorch["logits"]) - logits).max() < 1e-4
        inputs = [{"text": text, "text_pair": pair} for text, pair in texts]
        tensorflow = pipeline(task, model=folder, framework="tf", dtype=None)(inputs)
        assert same_answers(pytorch["pipeline"], tensorflow), (pytorch["pipeline"], tensorflow)


def test_frozen_features_are_read_at_s_and_averaged_over_the_tokens_only(pretrained_model_dir, monkeypatch):
    # benchmarks/frozen_features.py: a text's features do not depend on the texts batched with it (the padding of a
    # longer one is left out of the mean), "<s>" is the output at the first position, and "self-attention" the
    # last layer's attention from there on itself.
    from transformers import AutoTokenizer, TFAutoModel

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from frozen_features import features

    tokenizer = AutoTokenizer.from_pretrained(pretrained_model_dir)
    encoder = TFAutoModel.from_pretrained(pretrained_model_dir)
    short, long = "The game began.", "The game began in the rain, and the crowd stayed until the very end of it."
    alone, batched = features(encoder, tokenizer, [short], 64), features(encoder, tokenizer, [short, long], 64)
    result = encoder(**tokenizer([short], return_tensors="tf"), output_attentions=True)
    outputs = result.last_hidden_state.numpy()[0]
    np.testing.assert_allclose(alone["mean"][0], outputs.mean(axis=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batched["mean"][0], alone["mean"][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batched["<s>"][0], outputs[0], rtol=1e-4, atol=1e-5)
    assert not np.allclose(alone["mean"][0], alone["<s>"][0])
    on_itself = result.attentions[-1].numpy()[0, :, 0, 0].mean()  # [batch, heads, from, to]
    np.testing.assert_allclose([alone["self-attention"][0], batched["self-attention"][0]], on_itself, rtol=1e-4)


@pytest.mark.fast
def test_the_glue_benchmarks_sst2_subset_refuses_a_missing_file_and_more_sentences_than_held(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import sst2_subset
    from utils import UserError

    shutil.copytree(GLUE / "SST-2", tmp_path / "glue" / "SST-2")
    folder = sst2_subset(str(tmp_path / "glue"), str(tmp_path / "subset"), 10)
    assert len(read_tsv(os.path.join(folder, "train.tsv"))) == 10
    available = len(read_tsv(str(tmp_path / "glue" / "SST-2" / "train.tsv")))
    everything = sst2_subset(str(tmp_path / "glue"), str(tmp_path / "subset"), available)
    assert read_tsv(os.path.join(everything, "train.tsv")) == read_tsv(str(tmp_path / "glue" / "SST-2" / "train.tsv"))
    with pytest.raises(UserError, match=f"--sst2_train_examples {available + 1}: SST-2's train.tsv holds {available} "
                                        f"sentences. Pass at most {available}, which trains on all of them."):
        sst2_subset(str(tmp_path / "glue"), str(tmp_path / "subset"), available + 1)
    assert not os.path.exists(tmp_path / "subset" / f"SST-2-{available + 1}")
    (tmp_path / "glue" / "SST-2" / "dev.tsv").unlink()
    with pytest.raises(UserError, match="SST-2 has no dev.tsv: --glue_dir must be a folder of GLUE's task folders"):
        sst2_subset(str(tmp_path / "glue"), str(tmp_path / "other"), 10)


@pytest.mark.fast
def test_the_glue_benchmark_keeps_a_run_only_if_it_was_made_with_the_flags_asked(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import check_kept_run, run
    from utils import UserError

    kept = {"num_epochs": 3, "global_batch_size": 64, "num_replicas": 2, "train_examples": 4000,
            "examples_per_label": None, "validation": {"score": 0.8}}
    for task_name in ("sst2", "rte"):
        folder = tmp_path / f"a-model-{task_name}-lr0.001-seed1"
        folder.mkdir()
        (folder / "eval_results.json").write_text(json.dumps(kept))
        (folder / "seconds.txt").write_text("12.5\n")
    args = argparse.Namespace(output_dir=str(tmp_path), models={"a model": "folder"}, num_epochs=3,
                              per_replica_batch_size=32, sst2_train_examples=4000, fine_tuning_flags=[], jobs=1)
    assert run(args, "a model", "sst2", 1e-3, 1, "no data read") == (kept, 12.5)
    for flag, value in (("num_epochs", 5), ("per_replica_batch_size", 16), ("sst2_train_examples", 67349)):
        asked = argparse.Namespace(**{**vars(args), flag: value})
        with pytest.raises(UserError, match=rf"a-model-sst2-lr0.001-seed1 was made with --{flag} "
                                            rf"{getattr(args, flag)} \(asked now: {value}\)\. Give each setting"):
            check_kept_run(asked, "sst2", str(tmp_path / "a-model-sst2-lr0.001-seed1"))
    # SST-2's size is no other task's, and a few-shot run (--examples_per_label, passed on) trains on fewer.
    check_kept_run(argparse.Namespace(**{**vars(args), "sst2_train_examples": 67349}), "rte",
                   str(tmp_path / "a-model-rte-lr0.001-seed1"))
    few_shot = {**kept, "train_examples": 20, "examples_per_label": 10}
    (tmp_path / "a-model-sst2-lr0.001-seed1" / "eval_results.json").write_text(json.dumps(few_shot))
    check_kept_run(args, "sst2", str(tmp_path / "a-model-sst2-lr0.001-seed1"))


@pytest.mark.fast
def test_the_glue_benchmarks_table_averages_a_model_only_once_every_seed_has_run(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import TASKS, print_summary

    args = argparse.Namespace(tasks=list(TASKS), seeds=[1, 2, 3], jobs=2)
    lexical = {task: {"score": 0.5, **{name: 0.5 for name in TASKS[task][2]}} for task in TASKS}
    results = {}
    for arm in ("done", "under way"):
        for task in TASKS:
            for seed in (1, 2, 3):
                if not (arm == "under way" and task == "sst2" and seed > 1):  # Its SST-2 has one seed of three.
                    scores = {name: 0.4 + 0.1 * seed for name in ("score", *TASKS[task][2])}
                    results[(arm, task, 1e-3, seed)] = ({"validation": scores}, 60.0)
    print_summary(args, ["done", "under way"], results, lexical)
    rows = {}  # The first table's row of each model: the grid's rows below start with the model too.
    for line in capsys.readouterr().out.splitlines():
        if line.count("|") > 2:
            rows.setdefault(line.split("|")[1].strip(), line)
    assert rows["done"].rstrip(" |").endswith("| 60.0") and "(0.001, 3 seeds)" in rows["done"]
    assert rows["under way"].rstrip(" |").endswith("| incomplete") and "(0.001, 1 seeds)" in rows["under way"]


@pytest.mark.fast
def test_the_glue_benchmark_passes_fine_tuning_flags_on_and_refuses_those_it_sets(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import parse_args

    required = ["glue.py", "--glue_dir", "glue", "--model", "a=b", "--output_dir", "runs"]
    monkeypatch.setattr(sys, "argv", [*required, "--head_epochs", "3", "--seeds", "1", "--config_overrides=x=0"])
    args = parse_args()
    assert args.fine_tuning_flags == ["--head_epochs", "3", "--config_overrides=x=0"] and args.seeds == [1]
    # Beside the models, their first one's architecture from random weights, unless left out.
    assert args.arms == ["a", "random weights"]
    monkeypatch.setattr(sys, "argv", [*required, "--model", "c=d", "--no_random_weights"])
    assert parse_args().arms == ["a", "c"]
    for flag in ("--max_length", "--task_name=rte", "--from_scratch"):
        monkeypatch.setattr(sys, "argv", [*required, flag, *(["64"] if flag == "--max_length" else [])])
        with pytest.raises(SystemExit):
            parse_args()
        assert f"error: {flag.split('=')[0]} is set for each run by this benchmark" in capsys.readouterr().err
    # A model must be named, as NAME=FOLDER (but for the table alone: of the runs there, and the baselines).
    for models, message in (([], "error: name the model to fine-tune: --model NAME=FOLDER"),
                            (["--model", "folder"], "error: --model folder: give it as NAME=FOLDER")):
        monkeypatch.setattr(sys, "argv", ["glue.py", "--glue_dir", "glue", "--output_dir", "runs", *models])
        with pytest.raises(SystemExit):
            parse_args()
        assert message in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["glue.py", "--glue_dir", "glue", "--output_dir", "runs", "--summary_only"])
    assert parse_args().models == {}


def words_task_folder(folder, task_name, make_row, sizes=(("train", 200), ("dev", 60))):
    """A GLUE task folder of made-up rows, make_row(random generator, row number): text, (text pair,) label."""
    import random

    task = GLUE_TASKS[task_name]
    columns = [column for column in (task.text_column, task.text_pair_column, task.label_column) if column]
    rng = random.Random(0)
    for split, size in sizes:
        write_tsv(folder / f"{split}.tsv", columns, [make_row(rng, i) for i in range(size)])
    return folder


@pytest.mark.fast
def test_the_glue_benchmarks_lexical_baseline_learns_the_words_that_decide_a_label(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import lexical_baseline

    filler = [f"filler{i}" for i in range(100)]
    cues = {"1": ["splendid", "moving", "witty"], "0": ["tedious", "clumsy", "bland"]}

    def review(rng, i):  # Six words of filler, one of them a cue of the label.
        label = str(i % 2)
        words = rng.sample(filler, 6)
        words[rng.randrange(6)] = rng.choice(cues[label])
        return " ".join(words), label

    sst2 = words_task_folder(tmp_path / "SST-2", "sst2", review)
    assert lexical_baseline(str(sst2), "sst2") == {"accuracy": 1.0, "score": 1.0}  # The majority class: 0.5.
    # The same sentences under labels drawn at random, unrelated to the words: chance, not a model of the cues.
    shuffled = words_task_folder(tmp_path / "shuffled", "sst2", lambda rng, i: (review(rng, i)[0], rng.choice("01")))
    assert lexical_baseline(str(shuffled), "sst2")["accuracy"] < 0.7


@pytest.mark.fast
def test_the_glue_benchmarks_lexical_baseline_reads_a_pairs_overlap(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import lexical_baseline

    vocabulary = [f"word{i}" for i in range(300)]

    def pair(rng, kept):  # A sentence of 8 words, and one that keeps `kept` of them, in order, and draws the rest.
        first = rng.sample(vocabulary, 8)
        second = [word if i < kept else rng.choice(vocabulary) for i, word in enumerate(first)]
        return " ".join(first), " ".join(second)

    def paraphrase(rng, i):  # A paraphrase keeps all but one word; the other pairs share at most two.
        label = i % 3 != 0
        return (*pair(rng, 7 if label else rng.randrange(3)), int(label))

    mrpc = lexical_baseline(str(words_task_folder(tmp_path / "MRPC", "mrpc", paraphrase)), "mrpc")
    assert mrpc["accuracy"] == 1.0 and mrpc["f1"] == 1.0  # The majority class: 2/3 accuracy.

    def similar(rng, i):  # Similarity from 0 to 5: the share of the first sentence's words that the second keeps.
        kept = rng.randrange(9)
        return (*pair(rng, kept), 5 * kept / 8)

    stsb = lexical_baseline(str(words_task_folder(tmp_path / "STS-B", "stsb", similar)), "stsb")
    assert stsb["pearson"] > 0.95 and stsb["spearman"] > 0.95


def lexical_row(table):
    """The cells of the lexical baseline's row in glue.py's table."""
    return [cell.strip() for cell in next(line for line in table.splitlines()
                                          if line.startswith("| lexical")).split("|")[2:-1]]


@pytest.mark.fast
def test_the_glue_benchmarks_table_gives_the_lexical_baseline_of_every_task_the_same_each_time(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import lexical_baseline

    # Without --model: no run, the baselines alone.
    tables = [run_main("benchmarks/glue.py", "--glue_dir", GLUE, "--summary_only", "--sst2_train_examples", 40,
                       "--output_dir", tmp_path / f"runs-{i}").stdout for i in range(2)]
    assert lexical_row(tables[0]) == lexical_row(tables[1])  # Deterministic.
    lines = tables[0].splitlines()
    assert lines.index(next(line for line in lines if line.startswith("| majority class"))) + 1 == lines.index(
        next(line for line in lines if line.startswith("| lexical")))
    # Each task's metrics as lexical_baseline gives them, and the mean of the tasks' scores.
    metrics = {task_name: lexical_baseline(str(GLUE / folder), task_name) for task_name, folder in FOLDERS.items()}
    assert lexical_row(tables[0]) == [
        *(" / ".join(f"{100 * metrics[task][name]:.1f}" for name in GLUE_TASKS[task].metrics) for task in FOLDERS),
        f"{100 * np.mean([task_metrics['score'] for task_metrics in metrics.values()]):.1f}"]


@pytest.mark.fast
def test_the_glue_benchmark_checks_every_tasks_files_and_model_before_the_first_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import glue

    started = []

    def run(args, arm, task_name, learning_rate, seed, data_dir):  # No fine-tuning: a record of it, and a score.
        started.append((arm, task_name, learning_rate))
        metrics = dict.fromkeys([*GLUE_TASKS[task_name].metrics, "score"], 0.5)
        return {"validation": {**metrics, "majority_class_score": 0.0}}, 60.0

    monkeypatch.setattr(glue, "run", run)
    glue_dir, model = tmp_path / "glue", tmp_path / "model"
    shutil.copytree(GLUE, glue_dir)
    model.mkdir()
    (model / "config.json").write_text("{}")
    # RTE, the last task, lacks its training file and MRPC its folder: said at once, before any run.
    (glue_dir / "RTE" / "train.tsv").unlink()
    shutil.rmtree(glue_dir / "MRPC")
    flags = ["--glue_dir", glue_dir, "--sst2_train_examples", 40, "--output_dir", tmp_path / "runs"]
    result = run_main("benchmarks/glue.py", *flags, "--model", f"a model={model}", expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: --glue_dir {glue_dir} has no MRPC/train.tsv, MRPC/dev.tsv, RTE/train.tsv: it must hold GLUE's task "
        "folders as GLUE's download script writes them (CoLA/train.tsv, CoLA/dev.tsv, ...). Add the missing files, or "
        "leave their tasks out: --tasks cola sst2 stsb.")
    assert not started and not (tmp_path / "runs").exists()
    # The tasks that are there run (SST-2, not asked for, is not needed), and a model folder without a model is
    # refused before them.
    shutil.rmtree(glue_dir / "SST-2")
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    result = run_main("benchmarks/glue.py", *flags, "--tasks", "cola", "--model", f"a model={model}",
                      "--model", f"other={not_a_model}", expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: --model other={not_a_model}: {not_a_model} holds no model (no config.json). Pass the folder that "
        "run_mlm.py saved (its --output_dir) or that export_model.py wrote.")
    assert not started
    # A run kept from other flags, the plan's last (seed 3), is refused before the first run too.
    kept = tmp_path / "runs" / "a-model-cola-lr0.001-seed3"
    kept.mkdir(parents=True)
    (kept / "eval_results.json").write_text(json.dumps({"num_epochs": 5, "global_batch_size": 32, "num_replicas": 1}))
    result = run_main("benchmarks/glue.py", *flags, "--tasks", "cola", "--model", f"a model={model}",
                      expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: the run kept in {kept} was made with --num_epochs 5 (asked now: 3). Give each setting of the flags "
        "its own --output_dir.")
    assert not started
    result = run_main("benchmarks/glue.py", *flags, "--tasks", "cola", "--seeds", 1, "--model", f"a model={model}")
    assert started == [("a model", "cola", 1e-3), ("random weights", "cola", 1e-3)]
    assert "| a model " in result.stdout and "| 50.0 ± 0.0 (0.001, 1 seeds) |" in result.stdout


@pytest.mark.fast
def test_the_minutes_picture_draws_glue_py_averages_and_refuses_a_point_missing_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from glue import lexical_baseline, run_folder

    def keep(model, task_index, learning_rate, seed, score):
        folder = run_folder(str(tmp_path / "runs"), model, list(FOLDERS)[task_index], learning_rate, seed)
        os.makedirs(folder)
        with open(os.path.join(folder, "eval_results.json"), "w") as f:
            json.dump({"validation": {"score": score}}, f)

    for seed in (1, 2, 3):
        for task_index in range(5):
            # Task i, seed s: base + 0.02 i + 0.01 s at 1e-3; at 3e-4 one run better than all, the mean worse.
            for model, base in (("short run", 0.40), ("long run", 0.60), ("long 2", 0.64)):
                keep(model, task_index, 1e-3, seed, base + 0.02 * task_index + 0.01 * seed)
                keep(model, task_index, 3e-4, seed, 0.9 if seed == 1 else 0.0)
            keep("random weights", task_index, 1e-3, seed, 0.30)
            keep("random weights", task_index, 3e-4, seed, 0.20)
    picture = tmp_path / "minutes.png"
    flags = ["--glue_dir", GLUE, "--runs_dir", tmp_path / "runs", "--learning_rates", "1e-3", "3e-4",
             "--point", "NSP", "10", "short run", "--point", "NSP", "60", "long run", "--point", "NSP", "60",
             "long 2", "--output", picture]
    table = run_main("benchmarks/glue_minutes.py", *flags).stdout
    # Per task the mean over seeds at the best mean's rate (0.42 + 0.02 i), their mean; the sd of the seeds' averages.
    assert "| NSP    | 10      | short run | 42.0 | 44.0  | 46.0 | 48.0  | 50.0 | 46.0 ± 1.0" in table
    assert "| NSP    | 60      | long run  | 62.0 | 64.0  | 66.0 | 68.0  | 70.0 | 66.0 ± 1.0" in table
    # Two pre-training seeds of one point: their mean, and the sd between their averages (66 and 70).
    assert "NSP, 60 minutes: 68.0 ± 2.8 over 2 pre-training seeds" in table
    lexical = np.mean([lexical_baseline(str(GLUE / folder), task)["score"] for task, folder in FOLDERS.items()])
    assert f"random weights 30.0; counting words {100 * lexical:.1f}" in table
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # A point whose grid is not complete is refused: an average of fewer runs would look like the others.
    missing = run_folder(str(tmp_path / "runs"), "long run", "rte", 3e-4, 2)
    shutil.rmtree(missing)
    result = run_main("benchmarks/glue_minutes.py", *flags, expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: 'long run' lacks 1 run(s) in {tmp_path / 'runs'}, such as {missing}: run benchmarks/glue.py with "
        "this --output_dir, --model and grid first.")
    # Random weights' runs missing, as glue.py --no_random_weights leaves them: the flag to leave out is named.
    missing = run_folder(str(tmp_path / "runs"), "random weights", "cola", 1e-3, 3)
    shutil.rmtree(missing)
    result = run_main("benchmarks/glue_minutes.py", *flags[:flags.index("short run") + 1], "--output", picture,
                      expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: 'random weights' lacks 1 run(s) in {tmp_path / 'runs'}, such as {missing}: run benchmarks/glue.py "
        "with this --output_dir, the --model of that architecture (without --no_random_weights) and grid first.")
