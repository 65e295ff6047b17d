"""run_mlm.py: input checks, choice of strategy, and training end to end (interrupted, resumed, used)."""

import argparse
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from safetensors import safe_open
from transformers import pipeline

import devices
from helpers import (MAX_LENGTH, REPO, WIKITEXT, ZEN3_EPYC, assert_entry_point_error, run_main, run_script,
                     tiny_mlm_args, unfinished_copy, write_cpuinfo)


@pytest.fixture
def train_args(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path):
    """Flags for a few quick steps of the tiny model on the session's shards, evaluated on its validation shards."""
    return [*tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path / "model"),
            "--eval_dataset", shards_dir / "validation"]


def assert_fails_before_building_the_model(result, *messages):
    for message in messages:
        assert message in result.stderr, result.stderr[-3000:]
    assert "Model:" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.fast
def test_missing_or_empty_dataset(train_args, tmp_path):
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "nowhere"):
        result = run_main("run_mlm.py", *train_args, "--train_dataset", path, expect_failure=True)
        assert_fails_before_building_the_model(result, f"no .tfrecord shard found at '{path}'")


@pytest.mark.fast
def test_max_length_must_match_the_shards(train_args):
    result = run_main("run_mlm.py", *train_args, "--max_length", 128, expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"hold samples of {MAX_LENGTH} tokens, but --max_length is 128", f"--max_length {MAX_LENGTH}")
    result = run_main("run_mlm.py", *train_args, "--max_length", 8, expect_failure=True)
    assert_fails_before_building_the_model(result, "--max_length must be at least 16, got 8")


@pytest.mark.fast
def test_shards_of_the_original_example_have_no_manifest(train_args, shards_dir, tmp_path):
    # Counts then come from the file names, and max_length from the first record.
    old_style = tmp_path / "old"
    shutil.copytree(shards_dir / "train", old_style, ignore=shutil.ignore_patterns("manifest.json"))
    result = run_main("run_mlm.py", *train_args, "--train_dataset", old_style, "--max_length", 128,
                      expect_failure=True)
    assert_fails_before_building_the_model(result, f"hold samples of {MAX_LENGTH} tokens")
    assert "WARNING shards: The shards at" in result.stderr and "cannot check that they are the whole split" \
        in result.stderr
    next(old_style.glob("*.tfrecord")).rename(old_style / "extra.tfrecord")
    result = run_main("run_mlm.py", *train_args, "--train_dataset", old_style, expect_failure=True)
    assert_fails_before_building_the_model(result, "cannot count the samples", "dataset-INDEX-NUM_SAMPLES")


@pytest.mark.fast
def test_position_embeddings_must_fit_max_length(train_args):
    result = run_main("run_mlm.py", *train_args, "--config_overrides", f"max_position_embeddings={MAX_LENGTH}",
                      expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"needs {MAX_LENGTH + 2} position embeddings", f"max_position_embeddings={MAX_LENGTH + 2}")


@pytest.mark.fast
def test_bad_config_override_and_unreachable_config(train_args):
    result = run_main("run_mlm.py", *train_args, "--config_overrides", "hidden_sise=8", expect_failure=True)
    assert_fails_before_building_the_model(result, "bad --config_overrides 'hidden_sise=8'")
    result = run_main("run_mlm.py", *train_args, "--pretrained_model_config", "FacebookAI/roberta-base",
                      expect_failure=True)
    assert_fails_before_building_the_model(result, "cannot load the model config 'FacebookAI/roberta-base'",
                                           "local folder holding config.json")


@pytest.mark.fast
def test_a_named_tpu_that_is_not_there_fails_fast(train_args):
    started = time.perf_counter()
    result = run_script("run_mlm.py", *train_args, "--tpu_name", "local", expect_failure=True)
    assert_fails_before_building_the_model(result, "cannot use the TPU 'local'", "--no_tpu")
    assert_entry_point_error(result, "cannot use the TPU 'local'")
    assert time.perf_counter() - started < 60


@pytest.mark.fast
def test_output_dir_with_foreign_files_is_not_overwritten(train_args, tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "results.txt").write_text("from another run")
    result = run_main("run_mlm.py", *train_args, expect_failure=True)
    assert_fails_before_building_the_model(result, "holds files that are not a checkpoint", "--overwrite")
    assert (tmp_path / "model" / "results.txt").read_text() == "from another run"


def checkpoint_steps(model_dir):
    return sorted(int(path.name.split("-")[1].split(".")[0]) for path in (model_dir / "checkpoints").glob("*.index"))


def test_train_refuse_a_second_run_kill_resume_and_fill_mask(train_args, tmp_path, monkeypatch):
    model_dir = tmp_path / "model"
    # From a zero output bias, as 🤗 Transformers initialises it: learning the token frequencies shows at once.
    args = [*train_args, "--max_steps", 300, "--eval_every_steps", 150, "--checkpoint_every_steps", 10,
            "--output_bias", "zeros", "--input_check_seconds", 1]
    command = [sys.executable, str(REPO / "run_mlm.py"), *map(str, args)]

    # Start, and kill the process (as a crash or a preempted machine would) once it has saved a checkpoint:
    # TensorFlow names the last complete one in the `checkpoint` file, written after the checkpoint itself.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Meanwhile the same command into the same folder is refused at once. The run holds the folder before it
        # logs its strategy; asking then costs it no training step, which the kill below needs to come before the
        # last one.
        for line in process.stderr:
            if " run_mlm: Strategy: " in line:
                break
        second = run_main("run_mlm.py", *args, expect_failure=True)
        assert (f"error: another run is writing into --output_dir '{model_dir}': process {process.pid} on host "
                f"{socket.gethostname()}, started ") in second.stderr
        assert "Model:" not in second.stderr and "Traceback" not in second.stderr
        deadline = time.monotonic() + 300
        while not tf.train.latest_checkpoint(str(model_dir / "checkpoints")) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)  # No checkpoint at the end, no release of the folder.
        stderr = process.communicate()[1]
    assert process.returncode == -signal.SIGKILL, stderr[-3000:]
    assert "Evaluation before training: loss" in stderr
    interrupted_at = int(tf.train.latest_checkpoint(str(model_dir / "checkpoints")).rsplit("-", 1)[1])
    assert 0 < interrupted_at < 300 and not (model_dir / "tf_model.h5").exists()
    assert (model_dir / "running.json").exists()

    # A save cut short leaves files of a newer checkpoint that the `checkpoint` file does not name yet.
    for suffix in (".index", ".data-00000-of-00001"):
        (model_dir / "checkpoints" / f"ckpt-{interrupted_at + 5}{suffix}").write_bytes(b"cut short")

    # The same command again resumes from the last complete checkpoint and trains to the end, on issue #66's AVX2
    # EPYC as far as the peak is concerned: its /proc/cpuinfo, listing every CPU this process may run on.
    cpu = write_cpuinfo(tmp_path / "cpu", ZEN3_EPYC, cores=max(os.sched_getaffinity(0)) + 1)
    monkeypatch.setattr(devices, "cpu_peak_flops", functools.partial(devices.cpu_peak_flops, root=cpu))
    # The killed run's claim on the folder does not block it: it names the run, and takes over.
    result = run_main("run_mlm.py", *args)
    assert f"names a run that ended without releasing it (process {process.pid}" in result.stderr
    assert f"Resuming from {model_dir}/checkpoints/ckpt-{interrupted_at}, at step {interrupted_at}" in result.stderr
    assert "Evaluation before training" not in result.stderr
    assert f"Steps {interrupted_at + 1} to " in result.stderr
    assert checkpoint_steps(model_dir)[-1] == 300
    # Every round's line tells the speed and MFU, against the paper peak of the CPU cores TensorFlow uses. The input
    # pipeline was timed alone first, then compared with what training took from it.
    round_lines = [line for line in result.stderr.splitlines() if " run_mlm: Step " in line]
    assert len(round_lines) == 2 and all(re.search(r"; [\d,]+ tokens/s, [\d,.]+ samples/s, [\d.]+ MFLOP/token, "
                                                   r"[\d.e-]+ TFLOP/s, MFU [\d.]+ %$", line)
                                         for line in round_lines), round_lines
    assert re.search(r"; peak [\d,]+ GFLOP/s \(\d+ cores? x 32 FLOP/cycle \(Zen 3: 2 x 256-bit FMA, float32\) x 2.45 "
                     r"GHz \(cpuinfo's cpu MHz\)\)\n", result.stderr)
    assert re.search(r"Input pipeline alone, on this host: [\d,]+ samples/s", result.stderr)
    assert re.search(r"Input pipeline: [\d,]+ samples/s per host alone, before training; training takes [\d,.]+ ",
                     result.stderr)

    results = json.loads((model_dir / "training_results.json").read_text())
    assert results["step"] == 300 and not (model_dir / "running.json").exists()  # Released at the end.
    assert results["input_pipeline_samples_per_second"] > 0 and 0 < results["input_pipeline_share"] < 1
    assert results["speed"]["tflops"] == pytest.approx(
        results["speed"]["tokens_per_second"] * results["speed"]["flops_per_token"] / 1e12)
    assert results["speed"]["mfu_percent"] > 0
    # The optimizer state was saved and restored: the Adam moments are in the checkpoint.
    saved = dict(tf.train.list_variables(str(model_dir / "checkpoints" / "ckpt-300")))
    assert saved["optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"] == []
    assert any("/.OPTIMIZER_SLOT/optimizer/m/" in name for name in saved)
    assert tf.train.load_checkpoint(str(model_dir / "checkpoints" / "ckpt-300")).get_tensor(
        "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE") == 300

    # Learning shows on held-out data: masked-token accuracy above its value before training.
    assert results["final_eval"]["masked_accuracy"] > results["step_0_eval"]["masked_accuracy"] + 0.05
    # At <mask> positions, the model against a table of the training tokens' frequencies (token_counts.json).
    final = results["final_eval"]
    assert final["nats_beyond_frequency"] == pytest.approx(final["frequency_loss_at_mask"] - final["loss_at_mask"],
                                                           abs=1e-3)
    assert 0 < final["accuracy_at_mask"] and 0 < final["frequency_accuracy_at_mask"]
    assert results["final_eval"]["loss"] < results["step_0_eval"]["loss"] - 1
    assert "| masked_accuracy |" in (model_dir / "README.md").read_text()
    assert list((model_dir / "logs" / "eval").glob("events.out.tfevents.*"))
    train_tags = {value.tag for path in (model_dir / "logs" / "train").glob("events.out.tfevents.*")
                  for event in tf.compat.v1.train.summary_iterator(str(path)) for value in event.summary.value}
    assert {"tokens_per_second", "samples_per_second", "flops_per_token", "tflops", "mfu_percent"} <= train_tags

    # The saved model serves the fill-mask pipeline in a TensorFlow-only install.
    predictions = pipeline("fill-mask", model=str(model_dir), framework="tf", dtype=None)(
        "The game was released in <mask> .")
    assert len(predictions) == 5 and all(0 <= p["score"] <= 1 for p in predictions)
    assert all(p["sequence"].startswith("The game was released in") for p in predictions)


def test_two_cpu_replicas_with_gradient_accumulation_and_bfloat16(train_args, tmp_path):
    # Pushing to the Hub fails here (offline), after the model is saved: the message says how to push it later.
    result = run_script("run_mlm.py", *train_args, "--num_cpu_replicas", 2, "--gradient_accumulation_steps", 2,
                        "--bfloat16", "--max_steps", 6, "--eval_every_steps", 3, "--steps_per_execution", 3,
                        "--jit_compile", "--max_grad_norm", 1.0, "--hub_model_id", "someone/tiny-mlm",
                        expect_failure=True)
    assert "pushing to the Hub repository 'someone/tiny-mlm' failed" in result.stderr
    assert "Nothing is lost" in result.stderr and (tmp_path / "model" / "tf_model.h5").exists()
    assert "MirroredStrategy with 2 replica(s) on 1 host(s); global batch 32 (8 per replica x 2 replicas x 2 " \
           "accumulation steps); XLA on; bfloat16 mixed precision" in result.stderr
    # Clipped after the replicas' gradients are summed (Keras' global_clipnorm), as the model card says.
    assert "gradients clipped to a norm of 1.0" in (tmp_path / "model" / "README.md").read_text()
    results = json.loads((tmp_path / "model" / "training_results.json").read_text())
    assert results["step"] == 6 and results["num_replicas"] == 2 and results["global_batch_size"] == 32
    # By default the output bias starts as the training tokens' log-frequencies: the model starts at the table.
    assert abs(results["step_0_eval"]["nats_beyond_frequency"]) < 0.1, results["step_0_eval"]
    final = results["final_eval"]
    assert all(np.isfinite(value) for value in final.values())
    # All are positive, but the difference of two losses: after 6 steps, likely below 0.
    assert all(value > 0 for name, value in final.items() if name != "nats_beyond_frequency")
    # Mixed precision keeps float32 weights: the PyTorch copy holds them in full, not rounded to bfloat16.
    with safe_open(tmp_path / "model" / "pytorch" / "model.safetensors", framework="np") as f:
        tensors = [f.get_tensor(name) for name in f.keys()]
    assert all(tensor.dtype == np.float32 for tensor in tensors)
    assert any((tensor.view(np.uint32) & 0xFFFF).any() for tensor in tensors)  # Bits that bfloat16 lacks.


@pytest.mark.fast
def test_output_dir_that_is_a_file_and_a_missing_tokenizer_are_named(train_args, tmp_path):
    (tmp_path / "model").write_text("a file")
    result = run_main("run_mlm.py", *train_args, expect_failure=True)
    assert_fails_before_building_the_model(result, f"error: --output_dir '{tmp_path / 'model'}' is a file")
    (tmp_path / "model").unlink()
    result = run_main("run_mlm.py", *train_args, "--tokenizer", tmp_path / "no-tokenizer", expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"error: the tokenizer folder '{tmp_path / 'no-tokenizer'}' (--tokenizer) does not exist")


def copy_split(shards_dir, split, destination, with_manifest=True):
    ignore = None if with_manifest else shutil.ignore_patterns("manifest.json")
    shutil.copytree(shards_dir / split, destination, ignore=ignore)
    return sorted(destination.glob("*.tfrecord"), key=lambda path: int(path.name.split("-")[1]))


@pytest.mark.fast
def test_a_damaged_manifest_is_named(train_args, shards_dir, tmp_path):
    copy_split(shards_dir, "train", tmp_path / "train")
    manifest_path = tmp_path / "train" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps(manifest)[:100])  # Cut short.
    result = run_main("run_mlm.py", *train_args, "--train_dataset", tmp_path / "train", expect_failure=True)
    assert_fails_before_building_the_model(result, f"error: '{manifest_path}' is not valid JSON",
                                           "Write the shards again")
    del manifest["vocab_size"], manifest["shards"][2]["num_samples"]
    manifest_path.write_text(json.dumps(manifest))
    result = run_main("run_mlm.py", *train_args, "--train_dataset", tmp_path / "train", expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"error: '{manifest_path}' lacks the field(s) vocab_size. Write the shards again")


def test_truncated_or_corrupted_shards_are_named(train_args, shards_dir, tmp_path):
    # With a manifest, a shard of another size is found before anything is built.
    shards = copy_split(shards_dir, "train", tmp_path / "train")
    size = shards[2].stat().st_size
    shards[2].write_bytes(shards[2].read_bytes()[:size // 2])
    result = run_main("run_mlm.py", *train_args, "--train_dataset", tmp_path / "train", expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"1 shard(s) do not have the size that '{tmp_path / 'train' / 'manifest.json'}' records",
        f"{shards[2]} ({size // 2} bytes, {size} expected)", "write them again with prepare_tfrecord_shards.py")

    # A byte changed in the middle keeps the size: TensorFlow's checksums find it when the shard is read, here in
    # the evaluation before training; and without a manifest, a truncated shard is found when read by fit.
    eval_shards = copy_split(shards_dir, "validation", tmp_path / "validation")
    data = bytearray(eval_shards[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    eval_shards[0].write_bytes(bytes(data))
    old_style = copy_split(shards_dir, "train", tmp_path / "old", with_manifest=False)
    old_style[2].write_bytes(old_style[2].read_bytes()[:size // 2])
    for flags, damaged in ((["--eval_dataset", tmp_path / "validation"], f"{eval_shards[0]} (corrupted record at "),
                           (["--train_dataset", tmp_path / "old"], f"{old_style[2]} (truncated record at ")):
        result = run_main("run_mlm.py", *train_args, *flags, "--max_steps", 4, expect_failure=True)
        assert f"error: 1 shard(s) cannot be read, they are damaged or truncated: {damaged}" in result.stderr, \
            result.stderr[-3000:]
        assert "Traceback" not in result.stderr and "Copy the shards again, or write them again" in result.stderr


@pytest.mark.fast
def test_shards_of_another_tokenizer_are_refused(train_args, tokenizer_dir, shards_dir, tmp_path):
    # Shards of a 1000-token vocabulary, a model of 300: ids beyond the embedding table.
    small_tokenizer = tmp_path / "small-tokenizer"
    run_main("train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--limit", 300,
             "--vocab_size", 300, "--output_dir", small_tokenizer)
    result = run_main("run_mlm.py", *train_args, "--tokenizer", small_tokenizer, expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"error: the shards at '{shards_dir / 'train'}' were written with the tokenizer '{tokenizer_dir}', "
                f"a vocabulary of 1000 tokens, but --tokenizer '{small_tokenizer}' has 300",
        f"--tokenizer {tokenizer_dir}", f"--tokenizer_name_or_path {small_tokenizer}")
    # The same size but other tokens: the fingerprint tells them apart.
    copy_split(shards_dir, "train", tmp_path / "train")
    manifest = json.loads((tmp_path / "train" / "manifest.json").read_text())
    manifest["vocabulary_fingerprint"] = "0" * 64
    (tmp_path / "train" / "manifest.json").write_text(json.dumps(manifest))
    result = run_main("run_mlm.py", *train_args, "--train_dataset", tmp_path / "train", expect_failure=True)
    assert_fails_before_building_the_model(result, "a vocabulary of the same size as that of --tokenizer",
                                           "but other tokens")


@pytest.mark.fast
def test_shards_of_an_interrupted_prepare_run_are_refused(train_args, tokenizer_dir, tmp_path):
    # Enough text that writing its shards takes seconds: the process is killed once it has written a shard.
    text = (WIKITEXT / "validation.txt").read_text()
    (tmp_path / "big.txt").write_text(text * (5_000_000 // len(text) + 1))
    split_dir = tmp_path / "shards" / "train"
    command = [sys.executable, str(REPO / "prepare_tfrecord_shards.py"), "--tokenizer_name_or_path",
               str(tokenizer_dir), "--train_file", str(tmp_path / "big.txt"), "--max_length", str(MAX_LENGTH),
               "--shard_size", "10", "--output_dir", str(tmp_path / "shards")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(split_dir.glob("*.tfrecord.tmp")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.kill()
    process.wait()
    assert (split_dir / "INCOMPLETE").exists() and not (split_dir / "manifest.json").exists()

    result = run_main("run_mlm.py", *train_args, "--train_dataset", split_dir, expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"error: the shards at '{split_dir}' are incomplete: prepare_tfrecord_shards.py was interrupted",
        "Run prepare_tfrecord_shards.py again, with --overwrite")
    # A shard left under its temporary name tells the same, marker or not.
    (split_dir / "INCOMPLETE").unlink()
    (split_dir / "dataset-99999.tfrecord.tmp").write_bytes(b"")
    result = run_main("run_mlm.py", *train_args, "--train_dataset", split_dir, expect_failure=True)
    assert_fails_before_building_the_model(result, "(the folder holds *.tfrecord.tmp, and no manifest.json)")


def test_running_a_finished_run_again_says_it_is_complete(train_args, tmp_path):
    args = [*train_args, "--max_steps", 4, "--eval_every_steps", 2, "--weight_decay_rate", 0]  # Keras' own Adam.
    run_main("run_mlm.py", *args)
    saved = (tmp_path / "model" / "tf_model.h5").stat().st_mtime_ns
    result = run_main("run_mlm.py", *args)  # Exits with 0.
    assert f"The run in {tmp_path / 'model'} is already complete at step 4, and its model is saved there. " \
           "Nothing to do." in result.stderr
    assert "Model:" not in result.stderr and (tmp_path / "model" / "tf_model.h5").stat().st_mtime_ns == saved
    # Asked for more steps, it resumes from the last checkpoint.
    result = run_main("run_mlm.py", *args, "--max_steps", 6)
    assert f"Resuming from {tmp_path / 'model'}/checkpoints/ckpt-4, at step 4" in result.stderr
    assert json.loads((tmp_path / "model" / "training_results.json").read_text())["saved_model_step"] == 6


@pytest.mark.fast
def test_an_unfinished_run_resumes_only_with_its_own_batch_and_steps(train_args, pretrained_model_dir, tmp_path):
    # pretrained_model_dir was trained by train_args' command with --max_steps 20, at a global batch of 8.
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "model")
    result = run_main("run_mlm.py", *train_args, "--max_steps", 20, "--per_replica_batch_size", 4,
                      expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"{str(unfinished)!r} holds a run, checkpointed at step 20, that trained on global batches "
                "of 8 samples (8 per replica x 1 replicas x 1 accumulation steps), but this command's global "
                "batch is 4", "run it with the same global batch", "--overwrite")
    result = run_main("run_mlm.py", *train_args, "--max_steps", 10, expect_failure=True)
    assert_fails_before_building_the_model(result, "checkpointed at step 20, beyond the 10 steps this command asks "
                                                   "for", "--max_steps 20 or more")


@pytest.mark.fast
def test_an_unfinished_run_resumes_only_on_its_own_batches_and_masks(train_args, pretrained_model_dir, shards_dir,
                                                                     tmp_path):
    # pretrained_model_dir was trained by train_args' command with --max_steps 20: seed 42, 15 % masked, its shards.
    # Resumed with another seed, masking or shards, it would train on as no run never stopped would.
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "model")
    for flags, difference in ((["--seed", 43], "--seed 43 (the run's: 42)"),
                              (["--mlm_probability", 0.3], "--mlm_probability 0.3 (the run's: 0.15)"),
                              (["--train_dataset", shards_dir / "validation"],
                               "other training shards, 2 files of 152 samples (the run's: 26 files")):
        result = run_main("run_mlm.py", *train_args, "--max_steps", 22, *flags, expect_failure=True)
        assert_fails_before_building_the_model(
            result, f"{str(unfinished)!r} holds a run, checkpointed at step 20, that trained on other batches or "
                    f"masks than this command would: {difference}", "run it with the run's values and shards",
            "--overwrite")
    # A flag that the stream does not depend on is free to change.
    result = run_main("run_mlm.py", *train_args, "--max_steps", 22, "--eval_every_steps", 1)
    assert "Resuming from" in result.stderr and "at step 20" in result.stderr


@pytest.mark.fast
def test_an_unfinished_run_resumes_only_with_its_own_model(train_args, pretrained_model_dir, tmp_path):
    # pretrained_model_dir's model has hidden size 32 (tiny_config_dir); its checkpoints' weights take no other.
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "model")
    result = run_main("run_mlm.py", *train_args, "--max_steps", 20, "--config_overrides", "hidden_size=64",
                      expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"{str(unfinished)!r} holds a run, checkpointed at step 20, of another model than this command's: "
                "hidden_size=32 (this command: 64), as the config beside its checkpoints says",
        "run it with the same model flags", "--overwrite")


@pytest.mark.fast
def test_an_unfinished_run_resumes_only_with_its_own_tokenizer(pretrained_model_dir, tokenizer_dir, tiny_config_dir,
                                                               tmp_path):
    # Another tokenizer of the same size gives the same config, and the checkpoints' weights fit it: but each of its
    # ids means another token. Its own shards are its own, and pass; the tokenizer beside the checkpoints does not.
    other_tokenizer = shutil.copytree(tokenizer_dir, tmp_path / "other-tokenizer")
    tokenizer_json = json.loads((other_tokenizer / "tokenizer.json").read_text())
    pieces = tokenizer_json["model"]["vocab"]
    pieces[100], pieces[101] = pieces[101], pieces[100]  # Two ordinary pieces swap ids.
    (other_tokenizer / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", other_tokenizer, "--train_file",
             WIKITEXT / "validation.txt", "--limit", 300, "--max_length", MAX_LENGTH, "--output_dir",
             tmp_path / "other-shards")
    unfinished = unfinished_copy(pretrained_model_dir, tmp_path / "model")
    result = run_main("run_mlm.py", *tiny_mlm_args(tmp_path / "other-shards", other_tokenizer, tiny_config_dir,
                                                   unfinished), "--max_steps", 22, expect_failure=True)
    assert_fails_before_building_the_model(
        result, f"{str(unfinished)!r} holds a run, checkpointed at step 20, trained with another tokenizer than this "
                f"command's --tokenizer {str(other_tokenizer)!r}: 1000 tokens as the run's, but other tokens or ids, "
                "as the tokenizer beside its checkpoints says", "To resume it, run it with the run's tokenizer",
        "--overwrite")


def test_the_seed_sets_the_initial_weights_and_the_batches(train_args, tmp_path):
    """--seed decides the model that training starts from, seen in the evaluation before the first step (on the
    same masked batches), and the batches it trains on, seen in the training loss. utils.set_up_training seeds
    without keras.utils.set_random_seed, which fails on 3.12."""
    losses = {}
    for name, seed in (("first", 7), ("again", 7), ("other", 8)):
        result = run_main("run_mlm.py", *train_args, "--max_steps", 3, "--seed", seed,
                          "--output_dir", tmp_path / name)
        # The figures without the speed, which differs from run to run.
        losses[name] = [line.split(" run_mlm: ", 1)[1].split(";")[0] for line in result.stderr.splitlines()
                        if "Evaluation before training: loss" in line or "Step 3: loss" in line]
    assert len(losses["first"]) == 2, losses
    assert losses["first"] == losses["again"], losses
    assert all(first != other for first, other in zip(losses["first"], losses["other"])), losses


def test_a_resumed_run_has_its_optimizer_state_before_the_first_step(pretrained_model_dir, tmp_path):
    """All of the checkpoint is restored at once: Adam's moments, restored only when the first step creates them,
    would each read the checkpoint again (over gs://, a minute for this tiny model)."""
    from transformers import AutoConfig, TFAutoModelForMaskedLM, create_optimizer

    from masked_lm import MaskedLMTrainer
    from run_folder import restore_last_checkpoint

    shutil.copytree(pretrained_model_dir / "checkpoints", tmp_path / "checkpoints")
    mlm = TFAutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(pretrained_model_dir))
    mlm.build_in_name_scope()
    optimizer, _ = create_optimizer(init_lr=1e-3, num_train_steps=20, num_warmup_steps=0, weight_decay_rate=1e-3)
    trainer = MaskedLMTrainer(mlm, mlm.config.vocab_size - 1)
    trainer.compile(optimizer=optimizer)
    restore_last_checkpoint(argparse.Namespace(output_dir=str(tmp_path), overwrite=False), trainer, is_chief=True)
    assert int(optimizer.iterations.numpy()) == 20
    reader = tf.train.load_checkpoint(str(tmp_path / "checkpoints" / "ckpt-20"))
    for slot in ("m", "v"):
        saved = [reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                 if f".OPTIMIZER_SLOT/optimizer/{slot}/" in name]
        restored = [optimizer.get_slot(variable, slot).numpy() for variable in mlm.trainable_variables]
        assert len(saved) == len(restored) and sum(np.abs(tensor).sum() for tensor in restored) > 0
        assert sum(np.abs(tensor).sum() for tensor in restored) == pytest.approx(
            sum(np.abs(tensor).sum() for tensor in saved), rel=1e-6)
