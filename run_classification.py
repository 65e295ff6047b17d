#!/usr/bin/env python
"""Step 4: is the pre-trained model any good? Fine-tune it on a text classification task and evaluate it.

The encoder saved by run_mlm.py gets a new classification head (🤗 TFAutoModelForSequenceClassification) and is
fine-tuned with Keras `model.fit`, on the TPU, cluster, GPUs or CPU that run_mlm.py would use; --from_scratch
trains the same architecture from random weights, the baseline that shows what pre-training bought.

The data: one of GLUE's tasks (--task_name, with the task's columns, labels and metrics, from tasks.GLUE_TASKS),
from --data_dir, the files of GLUE's download script, or else from the Hub (nyu-mll/glue, as 🤗's run_glue.py reads
it: the same examples, metrics and predictions files, but that the Hub keeps STS-B's scores to float32's 7 digits);
or CSV, TSV, JSON-lines or Parquet files (local or gs://), or a Hub dataset, with a text column, optionally a second
text (--text_pair_column: sentence pairs), and a column of label names (or a ClassLabel), or of numbers
(--regression: one output, squared error). TSV files are read with quoting off, as GLUE and UER-py write them (a text
may hold a lone double quote); every label is a class name as written (TNEWS's "108" too), unless --regression. Rows
without a label, empty or --no_label_mark ("-": SNLI's and OCNLI's rows without an annotator majority), are left out
and counted in a warning. Without validation data, a stratified --validation_split_percentage of the training data
is held out. A warning says when the tokenizer reads over 5 % of the training texts' tokens as unknown (a tokenizer
of English on Chinese or Thai text); eval_results.json records that share (unknown_token_share).

With --head_epochs, the new head first trains alone on the frozen encoder (at --head_learning_rate), then the whole
model trains. Of the whole model's epochs, the weights of the one with the best validation score are kept: the mean
of the task's metrics (GLUE's: Matthews correlation for CoLA, F1 and accuracy for MRPC and QQP, Pearson and Spearman
correlation for STS-B, accuracy for the others; accuracy for other classes; the two correlations for a regression).
The metrics, the trivial baseline (the majority class, or the training mean), the worst classes and the most
confused label pairs go to {output_dir}/eval_results.json and TensorBoard ({output_dir}/logs); each split's
predictions, one per example in the order of its file, to {split}_predictions.tsv beside it (for a GLUE test file
without labels, the file that GLUE's submission takes, such as RTE.tsv). The model and tokenizer are saved to
--output_dir, for `pipeline("text-classification", model=output_dir, framework="tf", dtype=None)`, with a copy for 🤗
Transformers 5 and PyTorch in {output_dir}/pytorch. The training step and the datasets are in classifier.py, the
tasks and metrics in tasks.py; TensorFlow, and what imports it, is imported in the functions that use it, once the
flags are parsed: --help and a mistyped flag answer at once.

Examples (on a CPU, for the demo's small model): BANKING77 from local CSV files; GLUE's RTE from its folder
(without --data_dir, from the Hub); CLUE's OCNLI, sentence pairs in JSON lines.
    python run_classification.py --model_name_or_path mlm-model --train_file banking77/train.csv \\
        --test_file banking77/test.csv --label_column category --learning_rate 1e-3 --num_epochs 4 \\
        --output_dir banking77-model --no_tpu
    python run_classification.py --model_name_or_path mlm-model --task_name rte --data_dir glue_data/RTE \\
        --max_length 128 --learning_rate 1e-3 --num_epochs 3 --output_dir rte-model --no_tpu
    python run_classification.py --model_name_or_path chinese-mlm-model --train_file ocnli/train.json \\
        --validation_file ocnli/dev.json --text_column sentence1 --text_pair_column sentence2 --max_length 128 \\
        --learning_rate 1e-3 --num_epochs 3 --output_dir ocnli-model --no_tpu
"""

import argparse
import json
import logging
import os
import sys

import numpy as np

from devices import add_hardware_arguments, count_hosts, create_optimizer_state, set_up_training, strategy_name
from models import (check_max_length, config_overrides, load_config, load_pretrained_model, load_tokenizer,
                    override_config, save_model_folder, write_model_card)
from tasks import (GLUE_TASKS, NO_LABEL_MARK, encode, evaluation_metrics, label_names_of, load_splits,
                   predictions_file, predictions_of, sample_per_label, score_predictions, stratified_split, task_name,
                   task_of_flags, write_predictions)
from utils import (UserError, check_output_dir, finite_float, fraction, non_negative_float, non_negative_int,
                   positive_float, positive_int, save_folder)

logger = logging.getLogger("run_classification")

# The flags of the columns and labels, which a GLUE task (--task_name) sets itself.
COLUMN_FLAGS = {"text_column": "text", "text_pair_column": None, "label_column": "label", "regression": False,
                "no_label_mark": NO_LABEL_MARK}


def percentage(text):
    """An argparse type: a number between 0 and 100, both excluded."""
    value = finite_float(text)
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100, got {text}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hardware_arguments(parser)

    data = parser.add_argument_group("data")
    source = data.add_mutually_exclusive_group(required=True)
    source.add_argument("--train_file", help="Training data: a CSV, TSV, JSON-lines or Parquet file, local or gs://.")
    source.add_argument("--dataset_name", help="A Hub dataset instead of files, e.g. PolyAI/banking77: those of "
                                               "its train, validation and test splits it has.")
    source.add_argument("--task_name", type=task_name, choices=GLUE_TASKS, metavar="{" + ",".join(GLUE_TASKS) + "}",
                        help="A GLUE task, with its columns, labels and metrics: read from --data_dir, else from "
                             "the Hub (nyu-mll/glue).")
    data.add_argument("--data_dir", help="With --task_name: the task's folder as GLUE's download script writes it "
                                         "(train.tsv, dev.tsv, and test.tsv where present; MNLI's dev_matched.tsv "
                                         "and dev_mismatched.tsv), local or gs:// (default: the Hub's copy).")
    data.add_argument("--validation_file", help="Validation data, same format (default: part of the training data).")
    data.add_argument("--test_file", help="Test data, same format (default: no test); without the label column, "
                                          "its examples are predicted only.")
    data.add_argument("--dataset_config", help="Configuration of the Hub dataset.")
    data.add_argument("--text_column", help="Column holding the text (default: text).")
    data.add_argument("--text_pair_column",
                      help="Column holding a second text, for sentence pairs (paraphrase, entailment): the two are "
                           "encoded as the tokenizer's pair, the longer cut first (default: single texts).")
    data.add_argument("--label_column",
                      help="Column of label names (default: label; BANKING77's CSV files: category).")
    data.add_argument("--no_label_mark",
                      help="A label that means the row has none: such rows are left out, and counted in a warning, "
                           f"as rows with an empty label are (default: {NO_LABEL_MARK}, SNLI's and OCNLI's mark of "
                           f"no annotator majority; '' keeps {NO_LABEL_MARK} as a class of its own).")
    data.add_argument("--regression", action="store_true",
                      help="The labels are numbers to predict (a similarity score): one output, squared error.")
    data.add_argument("--validation_split_percentage", type=percentage, default=10,
                      help="Without --validation_file: the percentage of each label of the training data held out "
                           "for validation (default: %(default)s).")
    data.add_argument("--examples_per_label", type=positive_int,
                      help="Train on this many examples of each label only, drawn with --seed from the training "
                           "data left after the validation split: the few-shot regime (default: all of them).")
    data.add_argument("--max_length", type=positive_int, default=64,
                      help="Tokens per text, or pair; longer ones are cut, shorter ones padded (default: %(default)s).")

    model = parser.add_argument_group("model")
    model.add_argument("--model_name_or_path", required=True,
                       help="The folder run_mlm.py saved (local or gs://), or its pytorch/ copy, or any folder "
                            "of TensorFlow or PyTorch (safetensors) weights, or a Hub model id: a masked-LM model, "
                            "whose encoder gets a new classification head; or a classification model fine-tuned "
                            "on the same labels, whose head is kept. Its tokenizer is used.")
    model.add_argument("--from_scratch", action="store_true",
                       help="Same architecture and tokenizer, random weights: the baseline without pre-training.")
    model.add_argument("--config_overrides", type=config_overrides,
                       help="Dropout to fine-tune with, e.g. hidden_dropout_prob=0.1,attention_probs_dropout_prob=0.1 "
                            "(default: the model's own, 0 for the demo's). Dropout only: the weights fix the rest.")

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
    training.add_argument("--head_epochs", type=non_negative_int, default=0,
                          help="Epochs that train the new head alone on the frozen encoder, before --num_epochs of the "
                               "whole model (Kumar et al., 2022: a random head's first gradients otherwise reshape the "
                               "pre-trained features); their scores are logged, never kept (default: %(default)s).")
    training.add_argument("--head_learning_rate", type=positive_float,
                          help="Peak learning rate of the --head_epochs: a new head on a frozen encoder can learn "
                               "faster than the whole model (default: --learning_rate).")
    training.add_argument("--early_stopping_patience", type=positive_int,
                          help="Stop after this many epochs without a better validation score (default: train "
                               "every epoch). Either way, the best epoch's weights are the ones kept.")
    training.add_argument("--seed", type=int, default=42,
                          help="Seed of the validation split, the --examples_per_label sample, the new weights and "
                               "the data order (default: %(default)s).")

    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", default="classification-model",
                        help="Folder for the model, eval_results.json, the predictions and TensorBoard logs, local "
                             "or gs:// (default: %(default)s).")
    output.add_argument("--overwrite", action="store_true", help="Write into --output_dir even if it is not empty.")
    output.add_argument("--hub_model_id", help="Push the model and tokenizer to this Hub repository.")
    args = parser.parse_args(argv)

    if args.task_name:
        given = [f"--{name}" for name in ("validation_file", "test_file", "dataset_config", *COLUMN_FLAGS)
                 if getattr(args, name)]
        if given:
            parser.error(f"--task_name {args.task_name} brings its files, columns and labels: leave out "
                         f"{', '.join(given)}.")
    elif args.data_dir:
        parser.error("--data_dir holds the files of a GLUE task (--task_name); pass your own data with --train_file "
                     "(and --validation_file, --test_file).")
    if args.head_epochs:
        args.head_learning_rate = args.head_learning_rate or args.learning_rate
    elif args.head_learning_rate:
        parser.error("--head_learning_rate is the rate of the --head_epochs, which are 0: add --head_epochs N, or "
                     "leave --head_learning_rate out.")
    for name, default in COLUMN_FLAGS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.text_pair_column == args.text_column:
        parser.error(f"--text_pair_column and --text_column both name the column {args.text_column!r}: each text "
                     "would be paired with itself. Name the column of the second text in --text_pair_column, or "
                     "leave it out for single texts.")
    return args


def input_paths(args):
    """What a run reads: its data and its model (benchmarks/fine_tuning.py checks its own --output_dir with them)."""
    return args.train_file, args.validation_file, args.test_file, args.data_dir, args.model_name_or_path


def main(args):
    from run_folder import refuse_an_unfinished_pretraining_run

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    strategy, on_tpu, jit_compile = set_up_training(args, input_paths(args))
    is_chief = strategy.extended.should_checkpoint  # Only the chief writes into --output_dir.
    global_batch_size = args.per_replica_batch_size * strategy.num_replicas_in_sync

    # The model folder and the data, checked before anything is built: mistakes cost seconds, not minutes.
    refuse_an_unfinished_pretraining_run(args.model_name_or_path)
    tokenizer = load_tokenizer(args.model_name_or_path, "--model_name_or_path", PASS_A_MODEL_FOLDER)
    task = task_of_flags(args)
    label_names, splits = prepare_data(args, task)
    encoded = {split: encode(tokenizer, examples, label_names, args.max_length) for split, examples in splits.items()}
    unknown_share = unknown_token_share(tokenizer, encoded["train"][0]["input_ids"], args.model_name_or_path)
    config = classification_config(args, label_names, tokenizer)
    if is_chief:
        check_output_dir(args.output_dir, args.overwrite, stale=["logs"])  # TensorBoard would add to old curves.
    logger.info("Strategy: %s with %d replica(s) on %d host(s); global batch %d; XLA %s; %s",
                strategy_name(strategy), strategy.num_replicas_in_sync, count_hosts(strategy), global_batch_size,
                "implicit (TPU)" if on_tpu else "on" if jit_compile else "off",
                "bfloat16 mixed precision" if args.bfloat16 else "float32")

    with strategy.scope():
        model = build_model(args, config)
    logger.info("Model: %s with %.1fM parameters, %s", config.model_type, model.count_params() / 1e6,
                "random weights (--from_scratch)" if args.from_scratch else f"from {args.model_name_or_path}")
    trainer, best_epoch, history = train(args, strategy, model, jit_compile, task, encoded, global_batch_size)
    predictions = {split: predict(trainer, task, *encoded[split], global_batch_size)
                   for split in splits if split != "train"}
    results = evaluate(task, splits, encoded, predictions, label_names)
    if is_chief:
        write_tensorboard_results(os.path.join(args.output_dir, "logs"), results, step=best_epoch)
        results.update(model_name_or_path=args.model_name_or_path, task_name=args.task_name,
                       from_scratch=args.from_scratch, config_overrides=args.config_overrides,
                       regression=task.regression, num_labels=1 if task.regression else len(label_names),
                       train_examples=len(splits["train"]),
                       examples_per_label=args.examples_per_label, max_length=args.max_length,
                       num_replicas=strategy.num_replicas_in_sync, global_batch_size=global_batch_size,
                       learning_rate=args.learning_rate, head_epochs=args.head_epochs,
                       head_learning_rate=args.head_learning_rate, num_epochs=args.num_epochs,
                       seed=args.seed, unknown_token_share=unknown_share,
                       best_epoch=best_epoch, history=history)
        save(args, model, tokenizer, results, task, splits, predictions, label_names)


def prepare_data(args, task):
    """The label names (None for a regression), and {split: tasks.Examples} for train, validation, any other
    validation split of the task and (if any) test."""
    splits = load_splits(args, task)
    label_names = label_names_of(task, splits)
    if "validation" not in splits:
        train, validation = stratified_split(splits["train"].labels, args.validation_split_percentage, args.seed,
                                             task.regression)
        # Validation second, as in the data of a task: the log and eval_results.json list the splits in this order.
        splits = {"train": splits["train"].subset(train), "validation": splits["train"].subset(validation),
                  **{split: examples for split, examples in splits.items() if split != "train"}}
        logger.info("Validation: %d examples held out of the training data (%g %% of %s)", len(validation),
                    args.validation_split_percentage, "them" if task.regression else "each label")
    if args.examples_per_label:
        if task.regression:
            raise UserError("--examples_per_label draws examples of each label, but a regression has no classes. "
                            "Leave it out, or fine-tune a classifier.")
        # Drawn after the validation split, so that the few-shot model is still chosen on examples it never saw.
        splits["train"] = splits["train"].subset(sample_per_label(splits["train"].labels, args.examples_per_label,
                                                                  args.seed))
        logger.info("Training on %d examples of each label (--examples_per_label)", args.examples_per_label)
    logger.info("Data: %s; %s", "a regression" if task.regression else f"{len(label_names)} labels",
                ", ".join(f"{split} {len(examples)} examples" for split, examples in splits.items()))
    return label_names, splits


# Above this share of unknown tokens among the training texts' tokens, the tokenizer does not know the task's text.
# The tests' English tokenizer (1,000 tokens from 647 texts of WikiText-2) reads 41 % of ChnSentiCorp's and TNEWS's
# tokens and 26 to 31 % of Wisesight's as <unk>, though a Unigram tokenizer makes one <unk> of a run of unknown
# characters; it reads 2.4 % of BANKING77's, all of them "?", which its texts lack. A tokenizer that misses a
# character or two is not what this warns of: one that misses the script is.
UNKNOWN_TOKEN_SHARE_WARNING = 0.05


def unknown_token_share(tokenizer, input_ids, model_name_or_path):
    """The share of the tokenizer's unknown token among the tokens of the texts encoded in `input_ids` (its other
    special tokens and the padding left out), with a warning above UNKNOWN_TOKEN_SHARE_WARNING; None for a tokenizer
    without an unknown token (a byte-level one encodes any text)."""
    if tokenizer.unk_token_id is None:
        return None
    others = [token_id for token_id in tokenizer.all_special_ids if token_id != tokenizer.unk_token_id]
    text_tokens = input_ids[~np.isin(input_ids, others)]
    share = float(np.mean(text_tokens == tokenizer.unk_token_id)) if text_tokens.size else 0.0
    if share > UNKNOWN_TOKEN_SHARE_WARNING:
        logger.warning("%.1f %% of the training texts' tokens are %s, the unknown token of the tokenizer of %r: it "
                       "never saw much of this text's characters (a model pre-trained on English, fine-tuned on "
                       "Chinese?), and the model cannot learn what it reads as %s. Fine-tune a model whose tokenizer "
                       "was trained on text like the task's (train_unigram.py on a corpus of its language, then "
                       "run_mlm.py).", 100 * share, tokenizer.unk_token, model_name_or_path, tokenizer.unk_token)
    return share


def train(args, strategy, model, jit_compile, task, encoded, global_batch_size):
    """Fine-tunes `model` (after --head_epochs of its head alone) and leaves it with the weights of the epoch of best
    validation score; returns its trainer, that epoch (counted from 1) and the per-epoch history (the head's epochs
    as head_only_loss, ...)."""
    import tf_keras as keras  # 🤗 Transformers' TF models are Keras 2 models: tf_keras, not Keras 3.
    from transformers import create_optimizer

    from classifier import ClassifierTrainer, ValidationScores, evaluation_dataset, training_dataset
    from run_folder import StopAtNonFiniteLoss

    steps_per_epoch = len(encoded["train"][1]) // global_batch_size
    if steps_per_epoch == 0:
        raise UserError(f"the {len(encoded['train'][1])} training examples do not fill one global batch of "
                        f"{global_batch_size}. Lower --per_replica_batch_size.")
    validation = evaluation_dataset(*encoded["validation"], global_batch_size)
    validation_targets = encoded["validation"][1]
    scores = ValidationScores(validation, len(validation_targets), lambda outputs: score_predictions(
        task, validation_targets, predictions_of(task, outputs)))

    def fit(epochs, learning_rate, callbacks, after_nan):
        """`epochs` of the weights trainable now, with a warmup to `learning_rate` and a linear decay of their own. A
        new trainer each time: its step, once traced, would keep the variables it was traced with. A NaN or infinite
        loss stops it with a UserError, `after_nan` saying where and what to do: nothing is saved then."""
        total_steps = steps_per_epoch * epochs
        with strategy.scope():
            trainer = ClassifierTrainer(model, jit_compile)
            optimizer, _ = create_optimizer(init_lr=learning_rate, num_train_steps=total_steps,
                                            num_warmup_steps=int(args.warmup_ratio * total_steps),
                                            weight_decay_rate=args.weight_decay_rate)
            # weighted_metrics=[]: ClassifierTrainer weighs the examples itself; this silences Keras' warning.
            trainer.compile(optimizer=optimizer, weighted_metrics=[], steps_per_execution=args.steps_per_execution)
            create_optimizer_state(optimizer, model.trainable_variables)
        # No validation_data: the scores' pass over the validation data gives Keras' validation loss too.
        divergence = StopAtNonFiniteLoss(strategy)
        history = trainer.fit(training_dataset(*encoded["train"], global_batch_size, args.seed), epochs=epochs,
                              callbacks=[divergence, scores, *callbacks], verbose=1 if sys.stdout.isatty() else 2)
        if divergence.diverged_at_step is not None:
            raise UserError(f"the loss became NaN or infinite at step {divergence.diverged_at_step} {after_nan}")
        return trainer, history.history

    head_only = {}
    if args.head_epochs:
        encoder = getattr(model, model.base_model_prefix)  # 🤗's main layer: all but the head.
        encoder.trainable = False
        logger.info("The head alone, on the frozen encoder: %d epochs at a learning rate of %g", args.head_epochs,
                    args.head_learning_rate)
        _, head_history = fit(args.head_epochs, args.head_learning_rate, [], after_nan=(
            "of the new head's training (--head_epochs): nothing is saved. Lower --head_learning_rate or raise "
            "--warmup_ratio, then run again."))
        head_only = {f"head_only_{name}": values for name, values in head_history.items()}
        encoder.trainable = True
    keep_best = keras.callbacks.EarlyStopping(monitor="val_score", mode="max", restore_best_weights=True,
                                              patience=args.early_stopping_patience or args.num_epochs)
    tensorboard = keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs"), write_graph=False)
    logger.info("Training: %d steps per epoch of %d examples, %d epochs; the score: %s", steps_per_epoch,
                global_batch_size, args.num_epochs, " and ".join(task.metrics))
    trainer, history = fit(args.num_epochs, args.learning_rate, [keep_best, tensorboard], after_nan=(
        f"of fine-tuning: nothing is saved but its TensorBoard logs, in {tensorboard.log_dir!r}. Lower "
        "--learning_rate or raise --warmup_ratio, then run again with --overwrite, which replaces them."))
    best_epoch = keep_best.best_epoch + 1
    logger.info("Best validation score %.4f, at epoch %d: its weights are kept", keep_best.best, best_epoch)
    return trainer, best_epoch, {**head_only, **history}


def predict(trainer, task, features, targets, global_batch_size):
    """The trainer's predictions of every example exactly once, in order: label ids, or a regression's numbers."""
    from classifier import evaluation_dataset

    outputs = trainer.predict(evaluation_dataset(features, targets, global_batch_size), verbose=0)
    return predictions_of(task, outputs[:len(targets)])  # The padding rows come last.


def evaluate(task, splits, encoded, predictions, label_names):
    """{split: metrics} of every split with labels but the training data."""
    results = {}
    for split, split_predictions in predictions.items():
        if splits[split].labels is None:
            continue
        # A regression is scored against its labels as written, not the float32 copies that trained it.
        targets = np.array(splits[split].labels) if task.regression else encoded[split][1]
        metrics = results[split] = evaluation_metrics(task, targets, split_predictions, encoded["train"][1],
                                                      label_names)
        scores = ", ".join(f"{name} {metrics[name]:.4f}" for name in task.metrics)
        baseline = (f"always the training mean: squared error {metrics['mean_prediction_mean_squared_error']:.4f} "
                    f"against {metrics['mean_squared_error']:.4f}" if task.regression else
                    f"accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f}; majority class: "
                    f"score {metrics['majority_class_score']:.4f}, accuracy {metrics['majority_class_accuracy']:.4f}")
        logger.info("%s: %s on %d examples (%s)", split.capitalize(), scores, metrics["num_examples"], baseline)
    return results


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
    changed = next(iter(override_config(config, args.config_overrides)), None)
    if changed:
        raise UserError(f"--config_overrides sets {changed}, but fine-tuning keeps the architecture of "
                        f"{args.model_name_or_path!r}, and its {changed}: only dropout may change. Drop it.")
    # A regression's one output has no label name: 🤗 calls it LABEL_0, and its config's problem_type says what it is.
    regression = label_names is None
    label_names = ["LABEL_0"] if regression else label_names
    label2id = {label: i for i, label in enumerate(label_names)}
    is_classifier = any(name.endswith("ForSequenceClassification") for name in architectures)
    if is_classifier and not args.from_scratch and (
            config.label2id != label2id or (config.problem_type == "regression") != regression):
        held = "a regression" if config.problem_type == "regression" else f"{sorted(config.label2id)[:5]} ..."
        raise UserError(f"{args.model_name_or_path!r} is a classification model for other labels ({held}). Pass "
                        "the masked-LM folder it was fine-tuned from.")
    check_max_length(config, args.max_length)
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"the tokenizer of {args.model_name_or_path!r} has {len(tokenizer)} tokens, the "
                        f"model only {config.vocab_size}: they do not belong together.")
    config.update(dict(num_labels=len(label_names), id2label=dict(enumerate(label_names)), label2id=label2id,
                       problem_type="regression" if regression else None))
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


def write_tensorboard_results(log_dir, results, step):
    """The final scores of each split, beside the per-epoch curves of Keras' TensorBoard callback."""
    import tensorflow as tf

    for split, metrics in results.items():
        with tf.summary.create_file_writer(os.path.join(log_dir, f"final_{split}")).as_default(step=step):
            for name, value in metrics.items():
                if isinstance(value, float):  # Not the counts and the lists of classes.
                    tf.summary.scalar(name, value)


def save(args, model, tokenizer, results, task, splits, predictions, label_names):
    """The model (and its PyTorch copy), the tokenizer, eval_results.json, each split's predictions and a model card
    into --output_dir (and to the Hub with --hub_model_id)."""
    scores = "\n".join(f"- {split.capitalize()}: " + ", ".join(f"{name} {results[split][name]:.3f}"
                                                              for name in task.metrics)
                       for split in predictions if split in results)
    what = "regressor" if task.regression else f"classifier of {len(label_names)} labels"
    data = f"GLUE's {args.task_name.upper()}" if args.task_name else f"`{args.train_file or args.dataset_name}`"
    description = (f"A {model.config.model_type} text {what}, fine-tuned with TensorFlow from "
                   f"`{args.model_name_or_path}`{' (random weights: --from_scratch)' if args.from_scratch else ''} "
                   f"on {data} (`run_classification.py` of a TF + 🤗 Transformers TPU pre-training pipeline)."
                   f"\n\n{scores}")

    def write(folder):
        save_model_folder(model, tokenizer, folder)
        with open(os.path.join(folder, "eval_results.json"), "w") as f:
            json.dump(results, f, indent=2)
        for split, split_predictions in predictions.items():
            name = predictions_file(task, split, labelled=splits[split].labels is not None)
            write_predictions(os.path.join(folder, name), splits[split], split_predictions, label_names)
        write_model_card(folder, args.output_dir, "text-classification", "I lost my card", description)

    save_folder(args.output_dir, write, "Model, tokenizer, eval_results.json, predictions and model card",
                args.hub_model_id, "Fine-tuned with run_classification.py", ignore_patterns=["logs/*"])


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
