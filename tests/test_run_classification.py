"""run_classification.py: fine-tuning end to end, exact evaluation, the stratified split, two replicas, bad input."""

import argparse
import json
import shutil

import numpy as np
import pytest

from classifier import evaluation_dataset
from helpers import REPO, assert_entry_point_error, built_once, run_main, run_script, unfinished_copy
from models import load_tokenizer
from run_classification import (UNKNOWN_TOKEN_SHARE_WARNING, build_model, classification_config, parse_args,
                                prepare_data, train)
from run_folder import last_checkpoint
from tasks import (Examples, Task, encode, evaluation_metrics, load_splits, sample_per_label, stratified_split,
                   task_of_flags)
from utils import UserError

BANKING77 = REPO / "tests" / "data" / "banking77"
TEST_EXAMPLES = 37  # Not a multiple of any batch below.


def fine_tune_args(model_dir, output_dir):
    """Flags for a quick fine-tuning of the tiny model on the BANKING77 slice, on the CPU."""
    return ["--model_name_or_path", model_dir, "--train_file", BANKING77 / "train.csv",
            "--test_file", BANKING77 / "test.csv", "--label_column", "category", "--max_length", 32,
            "--per_replica_batch_size", 8, "--learning_rate", 5e-3, "--no_tpu", "--output_dir", output_dir]


@pytest.fixture(scope="module")
def fine_tuned_dir(pretrained_model_dir, tmp_path_factory):
    # Once for all test processes (helpers.built_once): 30 epochs.
    return built_once(tmp_path_factory, "fine-tuned/model", lambda output_dir: run_main(
        "run_classification.py", *fine_tune_args(pretrained_model_dir, output_dir), "--num_epochs", 30))


def test_fine_tune_evaluate_and_classify(fine_tuned_dir):
    results = json.loads((fine_tuned_dir / "eval_results.json").read_text())
    assert results["num_labels"] == 6 and results["train_examples"] == 108  # 120 less 10 % of each label.
    assert results["validation"]["num_examples"] == 12 and results["test"]["num_examples"] == TEST_EXAMPLES
    # Recorded and below the warning's threshold: the tokenizer of WikiText's English lacks only BANKING77's "?".
    assert 0 < results["unknown_token_share"] < UNKNOWN_TOKEN_SHARE_WARNING
    # Learning shows on held-out data: better than always answering the most frequent training label.
    test = results["test"]
    assert test["accuracy"] > test["majority_class_accuracy"] + 0.1
    assert 0 < test["macro_f1"] <= 1
    assert len(test["worst_classes"]) == 5 and all(0 <= c["f1"] <= 1 for c in test["worst_classes"])
    assert all(pair["label"] != pair["predicted"] for pair in test["most_confused"])
    # The kept weights are those of the best validation epoch.
    history = results["history"]
    assert results["validation"]["accuracy"] == pytest.approx(max(history["val_accuracy"]))
    assert history["val_accuracy"][results["best_epoch"] - 1] == max(history["val_accuracy"])
    for part in ("train", "validation", "final_test"):
        assert list((fine_tuned_dir / "logs" / part).glob("events.out.tfevents.*"))

    from transformers import pipeline

    classify = pipeline("text-classification", model=str(fine_tuned_dir), framework="tf", dtype=None)
    answers = classify(["What is the exchange rate for euros?", "My card has not arrived yet"])
    labels = {"card_arrival", "exchange_rate", "lost_or_stolen_card", "age_limit", "top_up_failed", "cancel_transfer"}
    assert len(answers) == 2 and all(a["label"] in labels and 0 < a["score"] <= 1 for a in answers)


def test_every_test_example_counted_once(fine_tuned_dir):
    # The script's test accuracy against predictions made here one example at a time, by the saved model.
    import csv

    from transformers import AutoTokenizer, TFAutoModelForSequenceClassification

    with open(BANKING77 / "test.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    tokenizer = AutoTokenizer.from_pretrained(fine_tuned_dir)
    model = TFAutoModelForSequenceClassification.from_pretrained(fine_tuned_dir)
    correct = 0
    for row in rows:
        inputs = tokenizer([row["text"]], padding="max_length", truncation=True, max_length=32, return_tensors="tf")
        logits = model(dict(inputs), training=False).logits
        correct += model.config.id2label[int(np.argmax(logits[0]))] == row["category"]
    results = json.loads((fine_tuned_dir / "eval_results.json").read_text())
    assert len(rows) == TEST_EXAMPLES == results["test"]["num_examples"]
    assert round(results["test"]["accuracy"] * TEST_EXAMPLES) == correct


@pytest.mark.fast
def test_evaluation_batches_hold_every_example_once_with_weight_one():
    features = {"input_ids": np.arange(37 * 4).reshape(37, 4), "attention_mask": np.ones((37, 4), dtype=int)}
    batches = list(evaluation_dataset(features, np.arange(37) % 3, global_batch_size=8).as_numpy_iterator())
    assert len(batches) == 5 and all(len(labels) == 8 for _, labels, _ in batches)  # 37 filled up to 40.
    weights = np.concatenate([weights for _, _, weights in batches])
    rows = np.concatenate([batch["input_ids"][:, 0] // 4 for batch, _, _ in batches])
    assert list(rows[weights == 1]) == list(range(37)) and weights.sum() == 37


@pytest.mark.fast
def test_stratified_split_keeps_every_label_on_both_sides():
    labels = ["a"] * 50 + ["b"] * 9 + ["c"] * 2 + ["d"]
    train, validation = stratified_split(labels, 10, seed=0)
    assert sorted(train + validation) == list(range(len(labels)))
    held_out = [labels[i] for i in validation]
    assert held_out.count("a") == 5 and held_out.count("b") == 1 and held_out.count("c") == 1
    assert "d" not in held_out  # A single example stays in training.
    assert {labels[i] for i in train} == {"a", "b", "c", "d"}
    assert stratified_split(labels, 10, seed=0) == (train, validation)
    assert stratified_split(labels, 10, seed=1) != (train, validation)


@pytest.mark.fast
def test_sample_per_label_is_stratified_exact_and_seeded():
    labels = ["a"] * 50 + ["b"] * 9 + ["c"] * 3
    sample = sample_per_label(labels, 3, seed=0)
    assert sample == sorted(set(sample))  # Sorted, no example twice.
    assert all([labels[i] for i in sample].count(label) == 3 for label in "abc")
    assert sample_per_label(labels, 3, seed=0) == sample
    assert any(sample_per_label(labels, 3, seed=seed) != sample for seed in (1, 2))
    # Every example of a label can be drawn: the sample is not always the first ones.
    drawn = {i for seed in range(20) for i in sample_per_label(labels, 3, seed=seed)}
    assert {i for i, label in enumerate(labels) if label == "b"} <= drawn
    with pytest.raises(UserError, match="the label 'c' has 3 training examples .* fewer than --examples_per_label 4"):
        sample_per_label(labels, 4, seed=0)


def test_the_demos_comparison_fine_tunes_both_arms_with_the_same_flags(pretrained_model_dir, tmp_path):
    # benchmarks/fine_tuning.py, the last step of `make demo`: the flags it does not know go to run_classification.py.
    data_and_batch = ["--train_file", BANKING77 / "train.csv", "--test_file", BANKING77 / "test.csv",
                      "--label_column", "category", "--per_replica_batch_size", 8]
    result = run_script("benchmarks/fine_tuning.py", "--model", pretrained_model_dir, *data_and_batch, "--seeds", 1,
                        "--examples_per_label", 4, "--few_shot_epochs", 1, "--no_probe", "--output_dir", tmp_path)
    accuracies = {}
    for arm in ("pretrained", "from-scratch"):
        results = json.loads((tmp_path / f"4-per-label-{arm}-seed1" / "eval_results.json").read_text())
        assert results["train_examples"] == 24 and results["num_epochs"] == 1 and results["seed"] == 1
        assert results["from_scratch"] == (arm == "from-scratch")
        # 6 labels of 4; validation is still 10 % of each label of the whole training data, never from the sample.
        assert results["examples_per_label"] == 4 and results["validation"]["num_examples"] == 12
        accuracies[arm] = results["test"]["accuracy"]
    # The table shows both arms (one seed: no spread) and the gap between them.
    row = next(line for line in result.stdout.splitlines() if line.startswith("| 4 per label, 1 epochs"))
    assert f"{100 * accuracies['pretrained']:.1f} ± 0.0" in row and f"{100 * accuracies['from-scratch']:.1f} ± 0.0" in row
    assert row.rstrip(" |").endswith(f"{100 * (accuracies['pretrained'] - accuracies['from-scratch']):+.1f}")


def test_the_demos_comparison_checks_the_data_flags_before_training(pretrained_model_dir, tmp_path):
    result = run_script("benchmarks/fine_tuning.py", "--model", pretrained_model_dir, "--train_file",
                        tmp_path / "missing.csv", "--no_probe", "--output_dir", tmp_path, expect_failure=True)
    assert "missing.csv' does not exist" in result.stderr and not any(tmp_path.iterdir())


@pytest.mark.fast
def test_class_label_columns_give_label_names(tmp_path):
    # As in the Hub's BANKING77: labels stored as integers, their names in the dataset's features. Parquet keeps
    # the features; a local folder read as a dataset stands in for the Hub (offline).
    import datasets

    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["card_arrival", "exchange_rate"])})
    datasets.Dataset.from_dict({"text": ["where is my card", "euro rate?", "rate today"], "label": [0, 1, 1]},
                               features=features).to_parquet(tmp_path / "train.parquet")
    expected = {"train": Examples(["where is my card", "euro rate?", "rate today"], None,
                                  ["card_arrival", "exchange_rate", "exchange_rate"], [0, 1, 2])}
    args = argparse.Namespace(train_file=None, validation_file=None, test_file=None, dataset_name=None,
                              dataset_config=None, task_name=None)
    task = Task(text_column="text", label_column="label")
    assert load_splits(argparse.Namespace(**{**vars(args), "train_file": str(tmp_path / "train.parquet")}),
                       task) == expected
    assert load_splits(argparse.Namespace(**{**vars(args), "dataset_name": str(tmp_path)}), task) == expected


@pytest.mark.fast
def test_classification_metrics():
    names = ["x", "y", "z"]
    metrics = evaluation_metrics(Task("text", "label"), np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0]),
                                 train_targets=np.array([1, 1, 0]), label_names=names)
    assert metrics["accuracy"] == metrics["score"] == pytest.approx(3 / 5)
    # F1: x 2·1/(2+2) = 0.5, y 2·2/(2+3) = 0.8, z 0.
    assert metrics["macro_f1"] == pytest.approx((0.5 + 0.8 + 0) / 3)
    assert metrics["majority_class_accuracy"] == metrics["majority_class_score"] == pytest.approx(2 / 5)  # Always "y",
    # the most frequent in training.
    assert [c["label"] for c in metrics["worst_classes"]] == ["z", "x", "y"]
    assert metrics["most_confused"] == [{"label": "x", "predicted": "y", "count": 1},
                                        {"label": "z", "predicted": "x", "count": 1}]


def test_two_cpu_replicas_match_one(pretrained_model_dir, tmp_path):
    # The same global batch of 16: 16 on one replica, or 8 on each of two; dropout off, so that training is
    # deterministic (XLA ignores dropout seeds).
    no_dropout = ["--config_overrides", "hidden_dropout_prob=0,attention_probs_dropout_prob=0"]
    results = {}
    for replicas in (1, 2):
        output_dir = tmp_path / f"replicas-{replicas}"
        args = [*fine_tune_args(pretrained_model_dir, output_dir), *no_dropout, "--num_epochs", 2,
                "--per_replica_batch_size", 16 // replicas]
        # Splitting the CPU into replicas takes a process of its own; one replica runs in a fresh process too: in the
        # test process, its losses drifted by up to 5e-4 with the tests that process had run before (full suite).
        result = run_script("run_classification.py", *args, "--num_cpu_replicas", replicas)
        strategy = "the default strategy" if replicas == 1 else "MirroredStrategy"
        assert f"{strategy} with {replicas} replica(s) on 1 host(s); global batch 16" in result.stderr
        results[replicas] = json.loads((output_dir / "eval_results.json").read_text())
    one, two = results[1], results[2]
    assert two["num_replicas"] == 2 and two["test"]["num_examples"] == TEST_EXAMPLES
    assert one["config_overrides"] == two["config_overrides"] == no_dropout[1]
    for name in ("loss", "val_loss"):
        assert two["history"][name] == pytest.approx(one["history"][name], rel=1e-4)
    for split in ("validation", "test"):
        assert two[split]["accuracy"] == one[split]["accuracy"]


def write_csv(path, rows):
    path.write_text("text,category\n" + "".join(f"{text},{label}\n" for text, label in rows))
    return path


def assert_fails(args, *messages, run=run_main):
    result = run("run_classification.py", *args, expect_failure=True)
    for message in messages:
        assert message in result.stderr, result.stderr[-3000:]
    assert "Model:" not in result.stderr and "Traceback" not in result.stderr  # Before building the model.
    return result


@pytest.mark.fast
def test_bad_data(pretrained_model_dir, tmp_path):
    args = fine_tune_args(pretrained_model_dir, tmp_path / "model")
    assert_fails([*args, "--label_column", "intent"],
                 f"the train file '{BANKING77 / 'train.csv'}' has no column 'intent'",
                 "['text', 'category']", "--label_column")
    nowhere = tmp_path / "nowhere.csv"
    result = assert_fails([*args, "--test_file", nowhere], f"the test file '{nowhere}' does not exist", run=run_script)
    assert_entry_point_error(result, f"the test file '{nowhere}' does not exist")  # The entry point's own output.
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert_fails([*args, "--train_file", empty], f"cannot read the train file '{empty}'", "No columns to parse")
    header_only = write_csv(tmp_path / "header.csv", [])
    assert_fails([*args, "--test_file", header_only], f"the test file '{header_only}' holds no examples")
    one_class = write_csv(tmp_path / "one.csv", [(f"query {i}", "card_arrival") for i in range(10)])
    assert_fails([*args, "--train_file", one_class], "one label only ('card_arrival')")
    unseen = write_csv(tmp_path / "unseen.csv", [("where is my card", "card_arrival"), ("hi", "greeting")])
    assert_fails([*args, "--validation_file", unseen],
                 "the validation data has labels that the training data does not: ['greeting']")
    assert_fails([*args, "--examples_per_label", 19], "has 18 training examples (after the validation split), "
                 "fewer than --examples_per_label 19")
    unlabeled = write_csv(tmp_path / "unlabeled.csv", [("where is my card", ""), ("hi", " ")])
    assert_fails([*args, "--test_file", unlabeled], f"the test file '{unlabeled}' has no label in any of its 2 rows",
                 "its column 'category' is empty")


def test_rows_without_a_label_are_left_out_and_counted(pretrained_model_dir, tmp_path):
    # The BANKING77 slice with the labels of four rows blanked: 116 labeled rows, less 10 % of each label.
    rows = [line.rsplit(",", 1) for line in (BANKING77 / "train.csv").read_text().splitlines()[1:]]
    assert len(rows) == 120
    for i in (3, 30, 60, 90):
        rows[i][1] = ""
    train = write_csv(tmp_path / "train.csv", rows)
    output_dir = tmp_path / "model"
    result = run_main("run_classification.py", *fine_tune_args(pretrained_model_dir, output_dir),
                      "--train_file", train, "--num_epochs", 1)
    assert "The train data has 4 row(s) of 120 without a label (column 'category' empty): they are left out." \
        in result.stderr
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert results["num_labels"] == 6 and results["train_examples"] + results["validation"]["num_examples"] == 116


@pytest.mark.fast
def test_an_unfinished_pretraining_run_is_named_with_what_to_do(pretrained_model_dir, tmp_path):
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "unfinished")
    assert_fails(fine_tune_args(unfinished, tmp_path / "model"),
                 f"{str(unfinished)!r} holds a pre-training run that did not finish: checkpoints (the latest at "
                 "step 20) but no saved model", "running the same run_mlm.py command again",
                 f"python export_model.py {unfinished} --output_dir NEW_FOLDER")


@pytest.mark.fast
def test_an_unfinished_run_is_named_at_the_last_checkpoint_that_run_mlm_would_resume_from(pretrained_model_dir,
                                                                                           tmp_path):
    # Checkpoints at steps 10 and 20, the files of step 20 deleted (what the message about a damaged checkpoint says
    # to do): run_mlm.py and export_model.py take step 10 (run_folder.last_checkpoint), and so does this check.
    # (tf.train.latest_checkpoint finds none, and the folder was taken for a model.)
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "unfinished")
    checkpoints = unfinished / "checkpoints"
    for path in checkpoints.glob("ckpt-20.*"):
        path.rename(checkpoints / path.name.replace("ckpt-20", "ckpt-10"))
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-10"\n'
                                            'all_model_checkpoint_paths: "ckpt-20"\n')
    assert last_checkpoint(str(checkpoints)) == str(checkpoints / "ckpt-10")
    assert_fails(fine_tune_args(unfinished, tmp_path / "model"),
                 f"{str(unfinished)!r} holds a pre-training run that did not finish: checkpoints (the latest at "
                 "step 10) but no saved model")


@pytest.mark.fast
def test_bad_model(pretrained_model_dir, tokenizer_dir, tmp_path):
    args = fine_tune_args(pretrained_model_dir, tmp_path / "model")
    assert_fails([*args, "--max_length", 65], "--max_length 65 needs 67 position embeddings",
                 "max_position_embeddings=66, enough for 64 tokens. Lower --max_length.")
    assert_fails([*args, "--model_name_or_path", tokenizer_dir],
                 f"cannot load the model config '{tokenizer_dir}' (--model_name_or_path)",
                 "Pass the folder that run_mlm.py saved")
    encoder_only = tmp_path / "encoder-only"
    shutil.copytree(pretrained_model_dir, encoder_only, ignore=shutil.ignore_patterns("checkpoints", "logs"))
    config = json.loads((encoder_only / "config.json").read_text())
    (encoder_only / "config.json").write_text(json.dumps({**config, "architectures": ["RobertaForCausalLM"]}))
    assert_fails([*args, "--model_name_or_path", encoder_only],
                 "holds a ['RobertaForCausalLM'] model, not a masked-LM or sequence-classification model")


@pytest.mark.fast
def test_config_overrides_set_dropout_and_nothing_else(pretrained_model_dir, tmp_path):
    def config(overrides, *flags):
        args = parse_args([*map(str, fine_tune_args(pretrained_model_dir, tmp_path)), "--config_overrides", overrides,
                           *flags])
        return classification_config(args, ["a", "b"], load_tokenizer(pretrained_model_dir, "", ""))

    for flags in ([], ["--from_scratch"]):
        dropout = config("hidden_dropout_prob=0.3,attention_probs_dropout_prob=0.2", *flags)
        assert (dropout.hidden_dropout_prob, dropout.attention_probs_dropout_prob) == (0.3, 0.2)
        assert dropout.num_labels == 2
        with pytest.raises(UserError, match=r"--config_overrides sets num_hidden_layers, but fine-tuning keeps the "
                                             r"architecture of .* only dropout may change"):
            config("hidden_dropout_prob=0.3,num_hidden_layers=1", *flags)


def training_inputs(args, model_dir):
    """What run_classification.main hands its train(): the task, the encoded splits and the model to fine-tune."""
    tokenizer = load_tokenizer(model_dir, "", "")
    task = task_of_flags(args)
    label_names, splits = prepare_data(args, task)
    encoded = {split: encode(tokenizer, examples, label_names, args.max_length) for split, examples in splits.items()}
    return task, encoded, build_model(args, classification_config(args, label_names, tokenizer))


def test_head_epochs_train_the_head_alone_then_the_whole_model(pretrained_model_dir, tmp_path, monkeypatch,
                                                               capsys):
    import tensorflow as tf

    import classifier

    flags = [*map(str, fine_tune_args(pretrained_model_dir, tmp_path / "model")), "--num_epochs", "1"]  # At 5e-3.
    assert parse_args([*flags, "--head_epochs", "2"]).head_learning_rate == 5e-3
    with pytest.raises(SystemExit):
        parse_args([*flags, "--head_learning_rate", "2e-2"])
    assert ("--head_learning_rate is the rate of the --head_epochs, which are 0: add --head_epochs N"
            in capsys.readouterr().err)
    args = parse_args([*flags, "--head_epochs", "2", "--head_learning_rate", "2e-2"])
    task, encoded, model = training_inputs(args, pretrained_model_dir)

    def encoder_weights():
        return [weight.numpy().copy() for weight in model.roberta.weights]

    before, fits, keras_fit = encoder_weights(), [], classifier.ClassifierTrainer.fit

    def fit(trainer, *args, **kwargs):  # What each phase trains, at which peak rate, and the encoder as it starts.
        fits.append(([variable.name for variable in trainer.classifier.trainable_variables],
                     trainer.optimizer.learning_rate.initial_learning_rate, encoder_weights()))
        return keras_fit(trainer, *args, **kwargs)

    monkeypatch.setattr(classifier.ClassifierTrainer, "fit", fit)
    _, best_epoch, history = train(args, tf.distribute.get_strategy(), model, False, task, encoded, 8)
    (head, head_rate, _), (whole_model, rate, after_the_head) = fits
    assert (head_rate, rate) == (2e-2, 5e-3)
    assert head and all("/classifier/" in name for name in head)
    assert len(whole_model) == len(model.trainable_variables) > len(head)
    assert all(np.array_equal(*pair) for pair in zip(before, after_the_head))  # Frozen while the head trained.
    assert not all(np.array_equal(*pair) for pair in zip(after_the_head, encoder_weights()))
    assert len(history["head_only_loss"]) == len(history["head_only_val_score"]) == 2
    assert len(history["loss"]) == 1 and best_epoch == 1


def test_a_loss_that_overflows_stops_fine_tuning_with_nothing_saved(pretrained_model_dir, tmp_path):
    # Issue #66: such a run trained on through a NaN loss and saved a model card and weights that were all NaN. A rate
    # of 1e30 is finite, so parsing takes it; without warmup, the first step's update at that rate makes the loss of
    # every step after it overflow.
    output_dir = tmp_path / "model"
    args = [*fine_tune_args(pretrained_model_dir, output_dir), "--num_epochs", 2, "--warmup_ratio", 0]
    result = run_main("run_classification.py", *args, "--learning_rate", 1e30, expect_failure=True)
    assert (f"error: the loss became NaN or infinite at step 2 of fine-tuning: nothing is saved but its TensorBoard "
            f"logs, in {str(output_dir / 'logs')!r}. Lower --learning_rate or raise --warmup_ratio, then run again "
            "with --overwrite, which replaces them.") in result.stderr
    assert "Traceback" not in result.stderr
    assert [path.name for path in output_dir.iterdir()] == ["logs"]  # No model, model card, results or predictions.
    # The new head trained alone first (--head_epochs) stops so too, before anything is written.
    head_output_dir = tmp_path / "head-first"
    result = run_main("run_classification.py", *args, "--head_epochs", 1, "--head_learning_rate", 1e30,
                      "--output_dir", head_output_dir, expect_failure=True)
    # At a step or two later: through a tanh, the large weights of the head's first layer give outputs of 1 at most.
    assert "error: the loss became NaN or infinite at step " in result.stderr
    assert (" of the new head's training (--head_epochs): nothing is saved. Lower --head_learning_rate or raise "
            "--warmup_ratio, then run again.") in result.stderr
    assert not head_output_dir.exists()


def test_each_epoch_passes_over_the_validation_data_once(pretrained_model_dir, tmp_path, monkeypatch):
    # Keras' validation loss and accuracy, and the scores, from one pass: fit's own validation pass (evaluate) and
    # the scores' predict would be two.
    import tensorflow as tf

    import classifier

    args = parse_args([*map(str, fine_tune_args(pretrained_model_dir, tmp_path / "model")), "--num_epochs", "2"])
    task, encoded, model = training_inputs(args, pretrained_model_dir)
    passes = []

    def counted(name):
        keras_method = getattr(classifier.ClassifierTrainer, name)

        def method(trainer, *args, **kwargs):
            passes.append(name)
            return keras_method(trainer, *args, **kwargs)
        return method

    for name in ("evaluate", "predict"):
        monkeypatch.setattr(classifier.ClassifierTrainer, name, counted(name))
    trainer, best_epoch, history = train(args, tf.distribute.get_strategy(), model, False, task, encoded, 8)
    assert passes == ["predict", "predict"]
    assert len(history["val_loss"]) == len(history["val_accuracy"]) == len(history["val_score"]) == 2
    # The kept weights, evaluated by Keras: the loss and accuracy that the history logged for their epoch.
    kept = trainer.evaluate(evaluation_dataset(*encoded["validation"], 8), return_dict=True, verbose=0)
    assert kept["loss"] == pytest.approx(history["val_loss"][best_epoch - 1], rel=1e-6)
    assert kept["accuracy"] == pytest.approx(history["val_accuracy"][best_epoch - 1], rel=1e-6)


def test_fine_tuned_model_needs_the_same_labels(fine_tuned_dir, tmp_path):
    other_labels = write_csv(tmp_path / "other.csv", [(f"query {i}", f"intent_{i % 2}") for i in range(10)])
    args = fine_tune_args(fine_tuned_dir, tmp_path / "model")
    assert_fails([*args, "--train_file", other_labels, "--test_file", other_labels],
                 "is a classification model for other labels")
