#!/usr/bin/env python
"""Step 4: is the pre-trained model any good? Fine-tune it on a text classification task and evaluate it.

The encoder saved by run_mlm.py gets a new classification head (🤗 TFAutoModelForSequenceClassification) and is
fine-tuned with Keras `model.fit`, on the TPU, cluster, GPUs or CPU that run_mlm.py would use; --from_scratch
trains the same architecture from random weights, the baseline that shows what pre-training bought. The data are
CSV, JSON-lines or Parquet files (local or gs://), or a Hub dataset, with a text column and a column of label
names (or a ClassLabel). Without validation data, a stratified --validation_split_percentage of the training data
is held out.

The weights of the epoch with the best validation accuracy are kept. Accuracy, macro-F1, the majority-class
baseline, the worst classes and the most confused label pairs, on the validation and test data, go to
{output_dir}/eval_results.json and TensorBoard ({output_dir}/logs). The model and tokenizer are saved to
--output_dir, for `pipeline("text-classification", model=output_dir, framework="tf", dtype=None)`, with a copy
for 🤗 Transformers 5 and PyTorch in {output_dir}/pytorch. The training step and the datasets are in classifier.py;
TensorFlow, and what imports it, is imported in the functions that use it, once the flags are parsed: --help and a
mistyped flag answer at once.

Example (BANKING77 from local CSV files, on a CPU, for the demo's small model):
    python run_classification.py --model_name_or_path mlm-model --train_file banking77/train.csv \\
        --test_file banking77/test.csv --label_column category --learning_rate 1e-3 --num_epochs 4 \\
        --output_dir banking77-model --no_tpu
"""

import argparse
import json
import logging
import os
import sys

import numpy as np

from corpus import data_files_format
from devices import add_hardware_arguments, count_hosts, create_optimizer_state, set_up_training, strategy_name
from models import (check_max_length, load_config, load_pretrained_model, load_tokenizer, save_model_folder,
                    write_model_card)
from utils import (UserError, check_output_dir, fraction, local_copy, non_negative_float, positive_float, positive_int,
                   save_folder)

logger = logging.getLogger("run_classification")

SPLITS = ("train", "validation", "test")
NUM_WORST = 5  # How many of the worst classes and of the most confused label pairs the results list.


def percentage(text):
    """An argparse type: a number between 0 and 100, both excluded."""
    if not 0 < float(text) < 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100, got {text}")
    return float(text)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hardware_arguments(parser)

    data = parser.add_argument_group("data")
    source = data.add_mutually_exclusive_group(required=True)
    source.add_argument("--train_file", help="Training data: a CSV, JSON-lines or Parquet file, local or gs://.")
    source.add_argument("--dataset_name", help="A Hub dataset instead of files, e.g. PolyAI/banking77: those of "
                                               "its train, validation and test splits it has.")
    data.add_argument("--validation_file", help="Validation data, same format (default: part of the training data).")
    data.add_argument("--test_file", help="Test data, same format (default: no test).")
    data.add_argument("--dataset_config", help="Configuration of the Hub dataset.")
    data.add_argument("--text_column", default="text", help="Column holding the text (default: %(default)s).")
    data.add_argument("--label_column", default="label",
                      help="Column of label names (default: %(default)s; BANKING77's CSV files: category).")
    data.add_argument("--validation_split_percentage", type=percentage, default=10,
                      help="Without --validation_file: the percentage of each label of the training data held out "
                           "for validation (default: %(default)s).")
    data.add_argument("--examples_per_label", type=positive_int,
                      help="Train on this many examples of each label only, drawn with --seed from the training "
                           "data left after the validation split: the few-shot regime (default: all of them).")
    data.add_argument("--max_length", type=positive_int, default=64,
                      help="Tokens per text; longer texts are cut, shorter ones padded (default: %(default)s).")

    model = parser.add_argument_group("model")
    model.add_argument("--model_name_or_path", required=True,
                       help="The folder run_mlm.py saved (local or gs://), or its pytorch/ copy, or any folder "
                            "of TensorFlow or PyTorch (safetensors) weights, or a Hub model id: a masked-LM model, "
                            "whose encoder gets a new classification head; or a classification model fine-tuned "
                            "on the same labels, whose head is kept. Its tokenizer is used.")
    model.add_argument("--from_scratch", action="store_true",
                       help="Same architecture and tokenizer, random weights: the baseline without pre-training.")

    training = parser.add_argument_group("training")
    training.add_argument("--per_replica_batch_size", type=positive_int, default=32,
                          help="Examples per replica and step (default: %(default)s).")
    training.add_argument("--learning_rate", type=positive_float, default=5e-5,
                          help="Peak learning rate (default: %(default)s, for base-size models; small ones such as "
                               "the demo's learn faster at about 1e-3).")
    training.add_argument("--weight_decay_rate", type=non_negative_float, default=0.01,
                          help="AdamW's decoupled weight decay, never on LayerNorm weights and biases "
                               "(default: %(default)s).")
    training.add_argument("--warmup_ratio", type=fraction, default=0.1,
                          help="Warmup as a fraction of all steps, then a linear decay to 0 (default: %(default)s).")
    training.add_argument("--num_epochs", type=positive_int, default=5,
                          help="Passes over the training data (default: %(default)s).")
    training.add_argument("--early_stopping_patience", type=positive_int,
                          help="Stop after this many epochs without a better validation accuracy (default: train "
                               "every epoch). Either way, the best epoch's weights are the ones kept.")
    training.add_argument("--seed", type=int, default=42,
                          help="Seed of the validation split, the --examples_per_label sample, the new weights and "
                               "the data order (default: %(default)s).")

    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", default="classification-model",
                        help="Folder for the model, eval_results.json and TensorBoard logs, local or gs:// "
                             "(default: %(default)s).")
    output.add_argument("--overwrite", action="store_true", help="Write into --output_dir even if it is not empty.")
    output.add_argument("--hub_model_id", help="Push the model and tokenizer to this Hub repository.")
    return parser.parse_args(argv)


def main(args):
    from classifier import ClassifierTrainer
    from run_folder import refuse_an_unfinished_pretraining_run

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    strategy, on_tpu, jit_compile = set_up_training(
        args, input_paths=(args.train_file, args.validation_file, args.test_file, args.model_name_or_path))
    is_chief = strategy.extended.should_checkpoint  # Only the chief writes into --output_dir.
    global_batch_size = args.per_replica_batch_size * strategy.num_replicas_in_sync

    # The model folder and the data, checked before anything is built: mistakes cost seconds, not minutes.
    refuse_an_unfinished_pretraining_run(args.model_name_or_path)
    tokenizer = load_tokenizer(args.model_name_or_path, "--model_name_or_path", PASS_A_MODEL_FOLDER)
    label_names, encoded = prepare_data(args, tokenizer)
    config = classification_config(args, label_names, tokenizer)
    if is_chief:
        check_output_dir(args.output_dir, args.overwrite, stale=["logs"])  # TensorBoard would add to old curves.
    logger.info("Strategy: %s with %d replica(s) on %d host(s); global batch %d; XLA %s; %s",
                strategy_name(strategy), strategy.num_replicas_in_sync, count_hosts(strategy), global_batch_size,
                "implicit (TPU)" if on_tpu else "on" if jit_compile else "off",
                "bfloat16 mixed precision" if args.bfloat16 else "float32")

    with strategy.scope():
        model = build_model(args, config)
        trainer = ClassifierTrainer(model, jit_compile)
    logger.info("Model: %s with %.1fM parameters, %s", config.model_type, model.count_params() / 1e6,
                "random weights (--from_scratch)" if args.from_scratch else f"from {args.model_name_or_path}")
    best_epoch, history = train(args, strategy, trainer, encoded, global_batch_size)
    results = evaluate(trainer, encoded, label_names, global_batch_size)
    if is_chief:
        write_tensorboard_results(os.path.join(args.output_dir, "logs"), results, step=best_epoch)
        results.update(model_name_or_path=args.model_name_or_path, from_scratch=args.from_scratch,
                       num_labels=len(label_names), train_examples=len(encoded["train"][1]),
                       examples_per_label=args.examples_per_label, max_length=args.max_length,
                       num_replicas=strategy.num_replicas_in_sync, global_batch_size=global_batch_size,
                       learning_rate=args.learning_rate, num_epochs=args.num_epochs, seed=args.seed,
                       best_epoch=best_epoch, history=history)
        save(args, model, tokenizer, results)


def prepare_data(args, tokenizer):
    """The label names, and {split: (features, label ids)} for train, validation and (if any) test."""
    columns = load_splits(args)
    label_names = check_labels(columns)

    def training_rows(indices):
        texts, labels = columns["train"]
        return [texts[i] for i in indices], [labels[i] for i in indices]

    if "validation" not in columns:
        train, validation = stratified_split(columns["train"][1], args.validation_split_percentage, args.seed)
        columns["train"], columns["validation"] = training_rows(train), training_rows(validation)
        logger.info("Validation: %d examples held out of the training data (%g %% of each label)",
                    len(validation), args.validation_split_percentage)
    if args.examples_per_label:
        # Drawn after the validation split, so that the few-shot model is still chosen on examples it never saw.
        columns["train"] = training_rows(sample_per_label(columns["train"][1], args.examples_per_label, args.seed))
        logger.info("Training on %d examples of each label (--examples_per_label)", args.examples_per_label)
    label2id = {label: i for i, label in enumerate(label_names)}
    encoded = {split: encode(tokenizer, *columns[split], label2id, args.max_length)
               for split in SPLITS if split in columns}
    logger.info("Data: %d labels; %s", len(label_names),
                ", ".join(f"{split} {len(label_ids)} examples" for split, (_, label_ids) in encoded.items()))
    return label_names, encoded


def train(args, strategy, trainer, encoded, global_batch_size):
    """Fine-tunes the trainer's classifier and leaves it with the weights of the epoch of best validation accuracy;
    returns that epoch (counted from 1) and the per-epoch history."""
    import tf_keras as keras  # 🤗 Transformers' TF models are Keras 2 models: tf_keras, not tf.keras (Keras 3).
    from transformers import create_optimizer

    from classifier import evaluation_dataset, training_dataset

    steps_per_epoch = len(encoded["train"][1]) // global_batch_size
    if steps_per_epoch == 0:
        raise UserError(f"the {len(encoded['train'][1])} training examples do not fill one global batch of "
                        f"{global_batch_size}. Lower --per_replica_batch_size.")
    total_steps = steps_per_epoch * args.num_epochs
    with strategy.scope():
        optimizer, _ = create_optimizer(init_lr=args.learning_rate, num_train_steps=total_steps,
                                        num_warmup_steps=int(args.warmup_ratio * total_steps),
                                        weight_decay_rate=args.weight_decay_rate)
        # weighted_metrics=[]: ClassifierTrainer weighs the examples itself; this silences Keras' warning about it.
        trainer.compile(optimizer=optimizer, weighted_metrics=[], steps_per_execution=args.steps_per_execution)
        create_optimizer_state(optimizer, trainer.classifier.trainable_variables)
    keep_best = keras.callbacks.EarlyStopping(monitor="val_accuracy", mode="max", restore_best_weights=True,
                                              patience=args.early_stopping_patience or args.num_epochs)
    tensorboard = keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs"), write_graph=False)
    logger.info("Training: %d steps per epoch of %d examples, %d epochs", steps_per_epoch, global_batch_size,
                args.num_epochs)
    history = trainer.fit(training_dataset(*encoded["train"], global_batch_size, args.seed),
                          validation_data=evaluation_dataset(*encoded["validation"], global_batch_size),
                          epochs=args.num_epochs, callbacks=[keep_best, tensorboard],
                          verbose=1 if sys.stdout.isatty() else 2)
    best_epoch = keep_best.best_epoch + 1
    logger.info("Best validation accuracy %.4f, at epoch %d: its weights are kept", keep_best.best, best_epoch)
    return best_epoch, history.history


def evaluate(trainer, encoded, label_names, global_batch_size):
    """The metrics of the validation and (if any) test data, from a prediction of every example exactly once."""
    from classifier import evaluation_dataset

    results = {}
    for split in ("validation", "test"):
        if split not in encoded:
            continue
        features, label_ids = encoded[split]
        logits = trainer.predict(evaluation_dataset(features, label_ids, global_batch_size), verbose=0)
        predictions = np.argmax(logits[:len(label_ids)], axis=-1)  # The padding rows come last.
        metrics = results[split] = classification_metrics(label_ids, predictions, label_names, encoded["train"][1])
        logger.info("%s: accuracy %.4f, macro-F1 %.4f on %d examples (majority class: %.4f)", split.capitalize(),
                    metrics["accuracy"], metrics["macro_f1"], metrics["num_examples"],
                    metrics["majority_class_accuracy"])
    return results


# ----------------------------------------------------------------------------------------------------------------
# Data


def load_splits(args):
    """{split: (texts, label names)} of the splits given (train always), as lists of strings."""
    import datasets  # Here, after the flags are checked: it is slow to import.

    if args.train_file:
        paths = {split: path for split in SPLITS if (path := getattr(args, f"{split}_file"))}
        data_files = {split: [local_copy(path)] for split, path in paths.items()}  # 🤗 Datasets reads local files.
        builder = data_files_format(data_files, formats=("csv", "json", "parquet"))
        splits = {}
        for split, files in data_files.items():
            try:
                splits[split] = datasets.load_dataset(builder, data_files=files, split="train")
            except datasets.exceptions.DatasetGenerationError as err:  # Not parsable, not even a header row.
                reason = err.__cause__ or err
                raise UserError(f"cannot read the {split} file {paths[split]!r}: {reason}") from err
            except ValueError as err:  # How 🤗 Datasets says that a file holds a header but no rows.
                raise UserError(f"the {split} file {paths[split]!r} holds no examples ({err}).") from err
    else:
        try:
            hub_splits = datasets.load_dataset(args.dataset_name, args.dataset_config)
        except (ConnectionError, FileNotFoundError, ValueError) as err:
            raise UserError(f"could not load the dataset {args.dataset_name!r} from the Hub: {err}\n"
                            "Check the name, or pass local files instead (--train_file ...).") from err
        if "train" not in hub_splits:
            raise UserError(f"the dataset {args.dataset_name!r} has no train split; it has "
                            f"{sorted(hub_splits)}.")
        splits = {split: hub_splits[split] for split in SPLITS if split in hub_splits}

    columns = {}
    for split, dataset in splits.items():
        for column, flag in ((args.text_column, "--text_column"), (args.label_column, "--label_column")):
            if column not in dataset.column_names:
                raise UserError(f"the {split} data has no column {column!r}; its columns are "
                                f"{dataset.column_names}. Choose one with {flag}.")
        if len(dataset) == 0:
            raise UserError(f"the {split} data is empty.")
        labels = dataset[args.label_column]
        label_feature = dataset.features[args.label_column]
        if isinstance(label_feature, datasets.ClassLabel):  # Integers, named in the features; -1: no label.
            labels = [None if label == -1 else label_feature.int2str(label) for label in labels]
        # A row without a label can be neither learned nor scored, but the labeled rest is good data: such rows are
        # left out, not refused. (As a string, a missing label would become a class "None" of its own.)
        rows = [(str(text), str(label)) for text, label in zip(dataset[args.text_column], labels)
                if label is not None and label == label and str(label).strip()]  # A float NaN is != itself.
        if not rows:
            raise UserError(f"the {split} data has no label in any of its {len(labels)} rows: its column "
                            f"{args.label_column!r} is empty. Check --label_column, or fill in the labels.")
        if len(rows) < len(labels):
            logger.warning("The %s data has %d row(s) of %d without a label (column %r empty): they are left out.",
                           split, len(labels) - len(rows), len(labels), args.label_column)
        columns[split] = [text for text, _ in rows], [label for _, label in rows]
    return columns


def check_labels(columns):
    """The label names, sorted, from the training data; every other split may only use those."""
    label_names = sorted(set(columns["train"][1]))
    if len(label_names) < 2:
        raise UserError(f"the training data has one label only ({label_names[0]!r}): classification needs "
                        "at least two. Check --label_column.")
    for split, (_, labels) in columns.items():
        unknown = sorted(set(labels) - set(label_names))
        if unknown:
            raise UserError(f"the {split} data has labels that the training data does not: "
                            f"{unknown[:10]}{' ...' if len(unknown) > 10 else ''}. A model cannot learn a label it "
                            "never sees in training: add examples of it to the training data, or remove it.")
    return label_names


def stratified_split(labels, validation_percentage, seed):
    """(train indices, validation indices), sorted: `validation_percentage` % of each label's examples go to
    validation, rounded, but at least one of every label with two or more examples, and never all of a label's.
    (🤗 Datasets' train_test_split(stratify_by_column=...) may leave a small label out, and refuses a label of one
    example.)"""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    train, validation = [], []
    for label in sorted(set(labels)):
        indices = rng.permutation(np.flatnonzero(labels == label))
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


def encode(tokenizer, texts, labels, label2id, max_length):
    """({"input_ids", "attention_mask"}, label ids), every text padded or cut to max_length: one shape for XLA."""
    features = tokenizer(texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="np",
                         return_token_type_ids=False)
    return dict(features), np.array([label2id[label] for label in labels], dtype=np.int32)


# ----------------------------------------------------------------------------------------------------------------
# Model

# What to do when --model_name_or_path is not the folder of a masked-LM model this pipeline saved.
PASS_A_MODEL_FOLDER = "Pass the folder that run_mlm.py saved (its --output_dir)."


def classification_config(args, label_names, tokenizer):
    """The model's config with the label set of the data, after checking that the model can be fine-tuned here."""
    config = load_config(args.model_name_or_path, "--model_name_or_path", PASS_A_MODEL_FOLDER)
    architectures = config.architectures or []
    # ForPreTraining: an ELECTRA discriminator (run_mlm.py --objective electra).
    if not any(name.endswith(("ForMaskedLM", "ForPreTraining", "ForSequenceClassification")) for name in architectures):
        raise UserError(f"{args.model_name_or_path!r} holds a {architectures or config.model_type} model, "
                        f"not a masked-LM or sequence-classification model (nor an ELECTRA discriminator). "
                        f"{PASS_A_MODEL_FOLDER}")
    label2id = {label: i for i, label in enumerate(label_names)}
    is_classifier = any(name.endswith("ForSequenceClassification") for name in architectures)
    if is_classifier and not args.from_scratch and config.label2id != label2id:
        raise UserError(f"{args.model_name_or_path!r} is a classification model for other labels "
                        f"({sorted(config.label2id)[:5]} ...). Pass the masked-LM folder it was fine-tuned from.")
    check_max_length(config, args.max_length)
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"the tokenizer of {args.model_name_or_path!r} has {len(tokenizer)} tokens, the "
                        f"model only {config.vocab_size}: they do not belong together.")
    config.update(dict(num_labels=len(label_names), id2label=dict(enumerate(label_names)), label2id=label2id))
    return config


def build_model(args, config):
    """The pre-trained encoder (TensorFlow or PyTorch weights) with a new classification head, or (--from_scratch)
    the same with random weights."""
    from transformers import TFAutoModelForSequenceClassification

    if args.from_scratch:
        model = TFAutoModelForSequenceClassification.from_config(config)
        model.build_in_name_scope()  # Create the weights now, with the names that save_pretrained expects.
        return model
    return load_pretrained_model(TFAutoModelForSequenceClassification, args.model_name_or_path, "--model_name_or_path",
                                 config, new_head=True)


# ----------------------------------------------------------------------------------------------------------------
# Results


def classification_metrics(label_ids, predictions, label_names, train_label_ids):
    """Accuracy, macro-F1 (the mean F1 over the labels in the data or the predictions, as scikit-learn's), the
    majority-class baseline (always the most frequent training label), the worst classes by F1, and the most
    confused pairs."""
    num_labels = len(label_names)
    # [true label, predicted label]
    confusion = np.bincount(np.asarray(label_ids) * num_labels + predictions, minlength=num_labels**2).reshape(
        num_labels, num_labels)
    true_positives = np.diag(confusion)
    support, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    present = (support + predicted) > 0
    # F1 = 2 TP / (2 TP + FP + FN) = 2 TP / (examples of the label + predictions of the label).
    f1 = np.divide(2 * true_positives, support + predicted, out=np.zeros(num_labels), where=present)
    majority_label = np.bincount(train_label_ids, minlength=num_labels).argmax()
    worst = sorted(np.flatnonzero(support > 0), key=lambda i: (f1[i], label_names[i]))[:NUM_WORST]
    errors = confusion - np.diag(true_positives)
    confused = sorted(zip(*np.nonzero(errors)), key=lambda pair: (-errors[pair], pair))[:NUM_WORST]
    return {
        "num_examples": int(len(label_ids)),
        "accuracy": float(true_positives.sum() / len(label_ids)),
        "macro_f1": float(f1[present].mean()),
        "majority_class_accuracy": float(np.mean(label_ids == majority_label)),
        "worst_classes": [{"label": label_names[i], "f1": float(f1[i]), "support": int(support[i])} for i in worst],
        "most_confused": [{"label": label_names[true], "predicted": label_names[predicted],
                           "count": int(errors[true, predicted])} for true, predicted in confused],
    }


def write_tensorboard_results(log_dir, results, step):
    """The final scores of each split, beside the per-epoch curves of Keras' TensorBoard callback."""
    import tensorflow as tf

    for split, metrics in results.items():
        with tf.summary.create_file_writer(os.path.join(log_dir, f"final_{split}")).as_default(step=step):
            for name in ("accuracy", "macro_f1", "majority_class_accuracy"):
                tf.summary.scalar(name, metrics[name])


def save(args, model, tokenizer, results):
    """The model (and its PyTorch copy), the tokenizer, eval_results.json and a model card into --output_dir (and
    to the Hub with --hub_model_id)."""
    scores = "\n".join(f"- {split.capitalize()}: accuracy {metrics['accuracy']:.3f}, macro-F1 "
                       f"{metrics['macro_f1']:.3f} (majority class: accuracy {metrics['majority_class_accuracy']:.3f})"
                       for split, metrics in results.items() if split in ("validation", "test"))
    description = (f"A {model.config.model_type} text classifier of {model.config.num_labels} labels, fine-tuned "
                   f"with TensorFlow from `{args.model_name_or_path}`"
                   f"{' (random weights: --from_scratch)' if args.from_scratch else ''} on "
                   f"`{args.train_file or args.dataset_name}` (`run_classification.py` of a TF + 🤗 Transformers "
                   f"TPU pre-training pipeline).\n\n{scores}")

    def write(folder):
        save_model_folder(model, tokenizer, folder)
        with open(os.path.join(folder, "eval_results.json"), "w") as f:
            json.dump(results, f, indent=2)
        write_model_card(folder, args.output_dir, "text-classification", "I lost my card", description)

    save_folder(args.output_dir, write, "Model, tokenizer, eval_results.json and model card",
                args.hub_model_id, "Fine-tuned with run_classification.py", ignore_patterns=["logs/*"])


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
