"""run_mlm.py --model_name_or_path: a saved model, or its PyTorch copy, continues where it stopped (its own weights and
LM head, the same evaluation before the first step); the run resumes from its own checkpoints; a model trained at
32 tokens continues at 64 (the BERT recipe's 128 then 512, in small); and the refusals: overrides that change a
weight's shape, a tokenizer that is not the model's, a length beyond the model's positions, an output bias that would
be ignored; and the starting models that would not continue: a weights file cut short, a classifier without its LM
head, a run that saved no model yet."""

import argparse
import json
import shutil

import pytest

from helpers import MAX_LENGTH, WIKITEXT, built_once, run_main, unfinished_copy
from test_export_model import MLM_TEXTS, assert_numpy_forward_gives, masked_lm_logits, tensorflow_logits

SHORT = 32  # Phase 1's length; phase 2 runs at MAX_LENGTH.


@pytest.fixture(scope="module")
def short_shards_dir(tokenizer_dir, tmp_path_factory):
    return built_once(tmp_path_factory, "short-shards/tfrecords", lambda output_dir: run_main(
        "prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file",
        WIKITEXT / "train.txt", "--validation_file", WIKITEXT / "validation.txt", "--limit", 600, "--max_length",
        SHORT, "--shard_size", 200, "--output_dir", output_dir))


def flags(shards, max_length, output_dir, *more):
    return ["--train_dataset", shards / "train", "--eval_dataset", shards / "validation", "--max_length", max_length,
            "--per_replica_batch_size", 8, "--learning_rate", 3e-3, "--warmup_steps", 1, "--input_check_seconds", 0,
            "--no_tpu", "--output_dir", output_dir, *more]


@pytest.fixture(scope="module")
def phase_1_dir(short_shards_dir, tokenizer_dir, tiny_config_dir, tmp_path_factory):
    """Phase 1: the tiny RoBERTa (positions for MAX_LENGTH tokens) trained at SHORT tokens, with evaluations. From
    a zero output bias: its evaluations then tell the trained model from a new one, and from a frequency table.
    Once for all test processes (helpers.built_once)."""
    return built_once(tmp_path_factory, "phase-1/model", lambda output_dir: run_main(
        "run_mlm.py", *flags(short_shards_dir, SHORT, output_dir, "--tokenizer", tokenizer_dir,
                             "--pretrained_model_config", tiny_config_dir, "--max_steps", 20,
                             "--output_bias", "zeros")))


def results(folder):
    return json.loads((folder / "training_results.json").read_text())


@pytest.mark.parametrize("weights", ["tensorflow", "pytorch copy"])
def test_a_saved_model_continues_where_it_stopped(weights, phase_1_dir, short_shards_dir, tmp_path):
    start = phase_1_dir if weights == "tensorflow" else phase_1_dir / "pytorch"
    output_dir = tmp_path / "continued"
    command = flags(short_shards_dir, SHORT, output_dir, "--model_name_or_path", start, "--max_steps", 2)
    run_main("run_mlm.py", *command)
    before, saved = results(output_dir)["step_0_eval"], results(phase_1_dir)["final_eval"]
    # Same shards, same masks: the evaluation of the saved model, with its own LM head (its bias not reset to the
    # token frequencies), far from that of a new model.
    assert before["loss"] == pytest.approx(saved["loss"], abs=0.01)
    assert before["nats_beyond_frequency"] == pytest.approx(saved["nats_beyond_frequency"], abs=0.01)
    assert abs(saved["nats_beyond_frequency"]) > 0.1
    assert results(phase_1_dir)["step_0_eval"]["loss"] > saved["loss"] + 0.5
    assert results(output_dir)["started_from"] == str(start)
    assert f"continued from `{start}`" in (output_dir / "README.md").read_text()
    # The continued model's PyTorch copy holds its weights, as every saved model's does.
    inputs, expected = tensorflow_logits("TFAutoModelForMaskedLM", output_dir, MLM_TEXTS)
    assert_numpy_forward_gives(expected, output_dir / "pytorch", masked_lm_logits, inputs)

    if weights == "pytorch copy":  # Resumes from its own checkpoint, not from the model it started from.
        result = run_main("run_mlm.py", *command[:-1], 3)
        assert f"Resuming from {output_dir}/checkpoints/ckpt-2, at step 2" in result.stderr
        assert "Evaluation before training" not in result.stderr and results(output_dir)["step"] == 3


def test_a_second_phase_at_a_longer_length(phase_1_dir, shards_dir, tmp_path):
    output_dir = tmp_path / "phase-2"
    run_main("run_mlm.py", *flags(shards_dir, MAX_LENGTH, output_dir, "--model_name_or_path", phase_1_dir,
                                    "--config_overrides", "hidden_dropout_prob=0.05", "--max_steps", 2))
    assert results(output_dir)["step"] == 2
    config = json.loads((output_dir / "config.json").read_text())
    assert config["hidden_dropout_prob"] == 0.05 and config["max_position_embeddings"] == MAX_LENGTH + 2


def test_an_output_bias_that_would_be_ignored_is_refused(phase_1_dir, short_shards_dir, tiny_config_dir,
                                                        tokenizer_dir, tmp_path):
    # A loaded LM head keeps the bias it learned: a given --output_bias is refused, the default is not.
    result = run_main("run_mlm.py", *flags(short_shards_dir, SHORT, tmp_path / "continued", "--model_name_or_path",
                                           phase_1_dir, "--output_bias", "zeros", "--max_steps", 2),
                      expect_failure=True)
    assert (f"error: --output_bias sets a new LM head's starting bias, but the LM head of {phase_1_dir} is loaded "
            "with the bias it learned. Drop --output_bias.") in result.stderr
    # Shards without their token counts (the original example's): frequencies asked for cannot be set.
    uncounted = shutil.copytree(short_shards_dir, tmp_path / "uncounted")
    (uncounted / "train" / "token_counts.json").unlink()
    result = run_main("run_mlm.py", *flags(uncounted, SHORT, tmp_path / "new", "--tokenizer", tokenizer_dir,
                                           "--pretrained_model_config", tiny_config_dir, "--output_bias",
                                           "frequencies", "--max_steps", 2), expect_failure=True)
    assert (f"error: --output_bias frequencies reads the token counts written beside the training shards "
            f"(token_counts.json), and {uncounted / 'train'} has none") in result.stderr


def model_config_args(model_dir, **changes):
    return argparse.Namespace(**{**dict(model_name_or_path=str(model_dir), tokenizer=str(model_dir),
                                        pretrained_model_config=None, config_overrides=None, max_length=SHORT,
                                        objective="mlm"),
                                 **changes})


def test_what_would_not_continue_the_model_is_refused(phase_1_dir, tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer

    from run_mlm import model_config
    from utils import UserError

    tokenizer = AutoTokenizer.from_pretrained(phase_1_dir)
    with pytest.raises(UserError, match=r"--config_overrides sets hidden_size, but the model of "
                                        r"--model_name_or_path .* has hidden_size=32 in its weights: starting from "
                                        r"a model, only dropout may change"):
        model_config(model_config_args(phase_1_dir, config_overrides="hidden_size=64"), tokenizer)
    with pytest.raises(UserError, match=rf"--max_length 80 needs 82 position embeddings, but the model has "
                                         rf"max_position_embeddings={MAX_LENGTH + 2}.*cannot grow. For a longer "
                                         r"second phase, build the model with them from the start "
                                         r"\(--config_overrides max_position_embeddings=82 in the first phase\)"):
        model_config(model_config_args(phase_1_dir, max_length=80), tokenizer)

    other_dir = tmp_path / "other-tokenizer"
    run_main("train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--vocab_size", 900,
               "--output_dir", other_dir)
    with pytest.raises(UserError, match=r"--tokenizer .* is not the tokenizer of the model .*: 900 tokens, the "
                                        r"model's 1000\. .*Drop --tokenizer \(the model's is the default\), and "
                                        r"write the shards with the model's tokenizer: prepare_tfrecord_shards.py "
                                        r"--tokenizer_name_or_path"):
        model_config(model_config_args(phase_1_dir, tokenizer=str(other_dir)),
                     AutoTokenizer.from_pretrained(other_dir))
    assert model_config(model_config_args(phase_1_dir, config_overrides="attention_probs_dropout_prob=0.2"),
                        tokenizer).attention_probs_dropout_prob == 0.2


def model_copy(model_dir, destination):
    """The model folder run_mlm.py saved (its files and its pytorch/ copy, not its run), copied to change it."""
    shutil.copytree(model_dir, destination, ignore=shutil.ignore_patterns("checkpoints", "logs"))
    return destination


def cut_short(path):
    """What an interrupted copy or a full disk leaves: the first half of the file."""
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize("weights", ["tf_model.h5", "pytorch/model.safetensors"])
def test_a_damaged_starting_model_is_named_with_what_to_do(weights, pretrained_model_dir, shards_dir, tmp_path):
    from test_run_classification import fine_tune_args

    damaged = model_copy(pretrained_model_dir, tmp_path / "damaged")
    cut_short(damaged / weights)
    start = damaged / weights.rpartition("/")[0] if "/" in weights else damaged
    expected = (f"error: cannot read the weights file {weights.rpartition('/')[2]} of {str(start)!r} "
                "(--model_name_or_path): it is damaged or incomplete")
    # Each a UserError, exit status 1: run_main would raise anything else, with its traceback.
    result = run_main("run_mlm.py", *flags(shards_dir, MAX_LENGTH, tmp_path / "continued", "--model_name_or_path",
                                           start, "--max_steps", 2), expect_failure=True)
    assert result.returncode == 1 and expected in result.stderr and "Copy the model folder again" in result.stderr
    # run_classification.py loads its model with the same loader, and answers the same.
    result = run_main("run_classification.py", *fine_tune_args(start, tmp_path / "classifier"), expect_failure=True)
    assert result.returncode == 1 and expected in result.stderr


def test_a_classifier_is_refused_as_a_masked_lm_whichever_its_weights(pretrained_model_dir, shards_dir, tmp_path):
    # A classifier saved as run_classification.py saves it (config.json's architectures:
    # RobertaForSequenceClassification; TensorFlow weights, and PyTorch's in pytorch/), without an LM head.
    from transformers import AutoConfig, AutoTokenizer, TFAutoModelForSequenceClassification

    from models import load_pretrained_model, save_model_folder

    config = AutoConfig.from_pretrained(pretrained_model_dir, num_labels=3)
    classifier = load_pretrained_model(TFAutoModelForSequenceClassification, str(pretrained_model_dir),
                                       "--model_name_or_path", config, new_head=True)
    classifier_dir = tmp_path / "classifier"
    save_model_folder(classifier, AutoTokenizer.from_pretrained(pretrained_model_dir), classifier_dir)
    assert json.loads((classifier_dir / "config.json").read_text())["architectures"] == \
        ["RobertaForSequenceClassification"]
    for start in (classifier_dir, classifier_dir / "pytorch"):
        result = run_main("run_mlm.py", *flags(shards_dir, MAX_LENGTH, tmp_path / "continued", "--model_name_or_path",
                                               start, "--max_steps", 2), expect_failure=True)
        assert (f"error: {str(start)!r} (--model_name_or_path) holds a RobertaForSequenceClassification without the "
                "head of a TFRobertaForMaskedLM: its weights have no lm_head. Starting that head from random weights "
                "would train a new head, not continue the model. Pass the model folder that has that head, such as "
                "the masked-LM folder a classifier was fine-tuned from") in result.stderr
        assert "newly initialized" not in result.stderr  # 🤗's own warning, which said it in other words.


def test_an_unfinished_run_is_named_with_what_to_do(pretrained_model_dir, shards_dir, tmp_path):
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "unfinished")
    result = run_main("run_mlm.py", *flags(shards_dir, MAX_LENGTH, tmp_path / "continued", "--model_name_or_path",
                                           unfinished, "--max_steps", 2), expect_failure=True)
    # The answer run_classification.py gives (test_run_classification.py), from the same function.
    assert (f"error: {str(unfinished)!r} holds a pre-training run that did not finish: checkpoints (the latest at "
            "step 20) but no saved model. Finish it by running the same run_mlm.py command again") in result.stderr
    assert f"python export_model.py {unfinished} --output_dir NEW_FOLDER" in result.stderr
    assert "model_type" not in result.stderr
