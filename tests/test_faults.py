"""Faults a long run meets (issue #34): hyper-parameters out of their domain, records that are not text, a full
disk, a damaged checkpoint, two runs in one output folder, a huge line; an output folder among the inputs (#60).
Each ends in a clear message, in-process where it can: no traceback, nothing lost."""

import argparse
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import corpus
import masked_lm
import models
import run_classification
import run_folder
import run_mlm
import shards
import utils
from helpers import (MAX_LENGTH, REPO, WIKITEXT, assert_entry_point_error, run_main, run_script, tiny_mlm_args,
                     unfinished_copy, write_compressed)
from utils import UserError

NOT_FINITE = "must be a finite number of float32's range, up to 3.4e38 in size, got"


@pytest.mark.fast
@pytest.mark.parametrize("script,argv,message", [
    (run_mlm, ["--learning_rate", "-1"], "argument --learning_rate: must be above 0, got -1"),
    (run_mlm, ["--learning_rate", "0"], "argument --learning_rate: must be above 0, got 0"),
    (run_mlm, ["--learning_rate", "nan"], f"argument --learning_rate: {NOT_FINITE} nan"),
    # Issue #66: a weight of inf made the first step's loss NaN, and the message blamed the learning rate.
    (run_mlm, ["--objective", "nsp", "--pair_loss_weight", "inf"],
     f"argument --pair_loss_weight: {NOT_FINITE} inf"),
    # Finite, but infinity in float32: the same NaN at the first step.
    (run_mlm, ["--objective", "nsp", "--pair_loss_weight", "1e39"],
     f"argument --pair_loss_weight: {NOT_FINITE} 1e39"),
    (run_mlm, ["--weight_decay_rate", "-0.1"], "argument --weight_decay_rate: must be 0 or more, got -0.1"),
    (run_mlm, ["--warmup_steps", "-5"], "argument --warmup_steps: must be 0 or more, got -5"),
    (run_mlm, ["--warmup_ratio", "1"], "argument --warmup_ratio: must be in [0, 1), got 1"),
    (run_mlm, ["--mlm_probability", "1.5"], "argument --mlm_probability: must be in (0, 1), 0 and 1 excluded, got 1.5"),
    (run_mlm, ["--mlm_probability", "0"], "argument --mlm_probability: must be in (0, 1), 0 and 1 excluded, got 0"),
    (run_mlm, ["--mask_share", "0"], "argument --mask_share: must be in (0, 1], 0 excluded, got 0"),
    (run_mlm, ["--mask_share", "1.2"], "argument --mask_share: must be in (0, 1], 0 excluded, got 1.2"),
    (run_mlm, ["--max_predictions_per_seq", "-1"], "argument --max_predictions_per_seq: must be 0 or more, got -1"),
    (run_mlm, ["--max_predictions_per_seq", "200"], "--max_predictions_per_seq must be from 0 to --max_length (128)"),
    (run_mlm, ["--config_overrides", "hidden_size=64,hidden_dropout_prob=1.5"],
     "argument --config_overrides: hidden_dropout_prob is a dropout rate: it must be in [0, 1), got 1.5"),
    (run_mlm, ["--config_overrides", "attention_probs_dropout_prob=-0.1"],
     "attention_probs_dropout_prob is a dropout rate: it must be in [0, 1), got -0.1"),
    (run_mlm, ["--config_overrides", "num_hidden_layers=0"], "num_hidden_layers must be a positive number, got 0"),
    # One objective's flags with another: the run would ignore them, even at their defaults.
    (run_mlm, ["--generator_hidden_size", "0.5"], "--generator_hidden_size is a flag of --objective electra, and this "
     "command trains --objective mlm: add --objective electra, or drop --generator_hidden_size."),
    (run_mlm, ["--objective", "nsp", "--discriminator_weight", "50"], "--discriminator_weight is a flag of --objective "
     "electra, and this command trains --objective nsp"),
    (run_mlm, ["--objective", "electra", "--pair_loss_weight", "0"], "--pair_loss_weight is a flag of --objective nsp "
     "or sop, and this command trains --objective electra: add --objective nsp, or drop --pair_loss_weight."),
    (run_mlm, ["--objective", "sop", "--pair_loss_weight=-1"],
     "argument --pair_loss_weight: must be 0 or more, got -1"),
    (run_mlm, ["--pair_loss_ramp", "0", "100"], "--pair_loss_ramp is a flag of --objective nsp or sop, and this "
     "command trains --objective mlm"),
    (run_mlm, ["--objective", "nsp", "--pair_loss_ramp", "300", "100"], "--pair_loss_ramp FIRST LAST: the weight "
     "rises from step FIRST to step LAST, so FIRST must not be after LAST, got 300 100."),
    (run_mlm, ["--max_grad_norm", "0"], "argument --max_grad_norm: must be above 0, got 0"),
    (run_mlm, ["--objective", "electra", "--cls_bag_of_words"], "--cls_bag_of_words is a masked LM's loss at <s>, "
     "and --objective electra trains ELECTRA: drop one of the two."),
    (run_mlm, ["--objective", "sop", "--cls_bag_of_words"], "--objective sop trains a pair head there: drop one"),
    (run_mlm, ["--objective", "nsp", "--per_replica_batch_size", "1"], "--per_replica_batch_size 1 has none: give "
     "it 2 or more."),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--learning_rate=-1e-3"],
     "argument --learning_rate: must be above 0, got -1e-3"),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--learning_rate", "inf"],
     f"argument --learning_rate: {NOT_FINITE} inf"),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--config_overrides",
                          "hidden_dropout_prob=0.1,initializer_range=nan"],
     f"argument --config_overrides: initializer_range {NOT_FINITE} nan"),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--weight_decay_rate", "-1"],
     "argument --weight_decay_rate: must be 0 or more, got -1"),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--config_overrides",
                          "hidden_dropout_prob=1"],
     "hidden_dropout_prob is a dropout rate: it must be in [0, 1), got 1"),
])
def test_hyper_parameters_out_of_their_domain_are_refused_with_the_range(script, argv, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"{script.__name__}.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        script.parse_args()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


# The scripts and the benchmarks, each with its parse_args().
SCRIPTS = ["train_unigram", "prepare_tfrecord_shards", "run_mlm", "run_classification", "export_model",
           *sorted(path.stem for path in (REPO / "benchmarks").glob("*.py") if path.stem != "common")]


@pytest.mark.fast
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_float_flag_refuses_nan_and_infinity_when_parsed(script, monkeypatch):
    # Issue #66: --pair_loss_weight inf was accepted, and the run stopped at its first step blaming the learning rate.
    # Each flag whose type makes a float of "0.5", whatever the type, is checked: a new one with type=float too.
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    module = importlib.import_module(script)
    parsers = []

    def catch_the_parser(parser, *args, **kwargs):
        parsers.append(parser)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catch_the_parser)  # parse_args calls it too.
    with pytest.raises(SystemExit):
        module.parse_args()
    float_flags = [action for action in parsers[0]._actions if isinstance(parsed_or_none(action.type, "0.5"), float)]
    for action in float_flags:
        for text in ("nan", "inf", "-inf", "1e999", "-4e38"):
            with pytest.raises(argparse.ArgumentTypeError, match=f"^{NOT_FINITE} {text}$"):
                action.type(text)
    if script == "run_mlm":  # The search finds what it looks for.
        assert {"--pair_loss_weight", "--learning_rate"} <= {action.option_strings[0] for action in float_flags}


def parsed_or_none(argument_type, text):
    """What the argparse type `argument_type` (None: a string, or no value) makes of `text`; None if it refuses it."""
    try:
        return argument_type(text)
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return None


@pytest.mark.fast
def test_hyper_parameters_in_their_domain_are_accepted(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["run_mlm.py", "--learning_rate", "2e-3", "--weight_decay_rate", "0",
                                      "--warmup_steps", "0", "--mlm_probability", "0.4", "--mask_share", "1",
                                      "--config_overrides",
                                      "hidden_dropout_prob=0,classifier_dropout=None,hidden_size=128"])
    args = run_mlm.parse_args()
    assert (args.learning_rate, args.weight_decay_rate, args.warmup_steps, args.mask_share) == (2e-3, 0, 0, 1.0)
    assert args.max_predictions_per_seq == masked_lm.default_max_predictions(0.4, 128)
    monkeypatch.setattr(sys, "argv", ["run_mlm.py", "--objective", "electra", "--generator_hidden_size", "0.5",
                                      "--discriminator_weight", "20"])
    electra = run_mlm.parse_args()
    assert (electra.generator_hidden_size, electra.discriminator_weight) == (0.5, 20)


def write_json_lines(path, values):
    path.write_text("".join(json.dumps({"text": value}) + "\n" for value in values))
    return path


@pytest.mark.fast
@pytest.mark.parametrize("value,shown", [(42, "int 42"), (["a", "b"], "list ['a', 'b']"),
                                         ({"a": 1}, "dict {'a': 1}"), (1.5, "float 1.5")])
def test_a_record_that_is_not_text_is_refused_with_its_number(value, shown, tmp_path):
    # train_unigram.py and prepare_tfrecord_shards.py read every corpus through corpus.text_batches.
    path = write_json_lines(tmp_path / "data.jsonl", ["first text", None, "", "third text", value, "after"])
    (batches,) = corpus.text_batches(text_column="text", batch_size=2, data_files={"train": [str(path)]}).values()
    with pytest.raises(UserError) as error:
        list(batches)
    assert str(error.value).startswith(f"the 'text' field of record 5 of the train split is not text but {shown}.")
    assert "--text_column" in str(error.value) and "null counts as an empty text" in str(error.value)


@pytest.mark.fast
def test_null_records_are_skipped_as_empty_ones_in_json_lines_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = ["one", None, "  ", "two", None]
    write_json_lines(tmp_path / "data.jsonl", values)
    pq.write_table(pa.table({"text": values}), tmp_path / "data.parquet")
    for name in ("data.jsonl", "data.parquet"):
        (batches,) = corpus.text_batches(text_column="text", batch_size=10,
                                        data_files={"train": [str(tmp_path / name)]}).values()
        assert list(batches) == [["one", "two"]]


@pytest.mark.fast
def test_a_parquet_column_of_numbers_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [3, 4]}), tmp_path / "data.parquet")
    (batches,) = corpus.text_batches(text_column="text", batch_size=10,
                                    data_files={"validation": [str(tmp_path / "data.parquet")]}).values()
    with pytest.raises(UserError, match="the 'text' field of record 1 of the validation split is not text but int 3"):
        list(batches)


def test_the_beam_workers_refuse_a_record_that_is_not_text_as_the_scripts_do(tmp_path, tokenizer_dir):
    import beam_pipeline

    path = write_json_lines(tmp_path / "data.jsonl", ["a text", None, 7])
    args = argparse.Namespace(tokenizer_name_or_path=str(tokenizer_dir), text_column="text", batch_size=10,
                              shard_size=10, max_length=16, file_format=None, word_segmenter=None)
    (tmp_path / "out").mkdir()
    with pytest.raises(UserError) as error:
        beam_pipeline.write_part_on_beam_worker((0, [(str(path), 0, path.stat().st_size)]), str(tmp_path / "out"),
                                                args, keep=None)
    assert str(error.value).startswith(f"the 'text' field of record 3 of {str(path)!r} from byte 0 (blank lines not "
                                       "counted) is not text but int 7.")


@pytest.fixture
def releases(monkeypatch):
    """The releases that OutputDirLease.hold registers to run at exit, run at the end of the test instead."""
    callbacks = []
    monkeypatch.setattr(run_folder.atexit, "register", callbacks.append)
    yield callbacks
    for callback in callbacks:
        callback()


@pytest.mark.fast
def test_a_second_run_into_a_folder_where_a_run_is_going_is_refused_at_once(tmp_path, releases):
    run_folder.OutputDirLease(str(tmp_path)).hold()
    claim = json.loads((tmp_path / "running.json").read_text())
    assert claim["pid"] == os.getpid() and claim["host"] == socket.gethostname()
    with pytest.raises(UserError) as error:
        run_folder.OutputDirLease(str(tmp_path)).hold()
    message = str(error.value)
    assert message.startswith(f"another run is writing into --output_dir {str(tmp_path)!r}: process {os.getpid()} "
                              f"on host {socket.gethostname()}, started {run_folder.utc(claim['started'])}")
    assert "choose another --output_dir" in message and "expires" not in message  # Same host: no lease to wait for.
    releases.pop()()  # The process exits: its claim goes.
    assert not (tmp_path / "running.json").exists()


@pytest.mark.fast
def test_a_run_killed_on_this_host_leaves_a_claim_that_the_next_run_takes_over(tmp_path, releases, caplog):
    holder = subprocess.Popen(["sleep", "60"])  # Stands in for a run's process.
    lease = run_folder.OutputDirLease(str(tmp_path))
    lease.claim.update(pid=holder.pid, process_start=run_folder.process_start(holder.pid))
    assert lease.claim_folder(replacing=False, generation=None)
    with pytest.raises(UserError, match=f"process {holder.pid} on host"):
        run_folder.OutputDirLease(str(tmp_path)).hold()
    holder.kill()  # SIGKILL: nothing is released.
    holder.wait()
    run_folder.OutputDirLease(str(tmp_path)).hold()
    assert json.loads((tmp_path / "running.json").read_text())["pid"] == os.getpid()
    assert f"names a run that ended without releasing it (process {holder.pid}" in caplog.text


@pytest.mark.fast
def test_a_claim_from_another_host_blocks_until_its_lease_expires(tmp_path, releases):
    lease = run_folder.OutputDirLease(str(tmp_path))
    lease.claim.update(host="lost-vm", pid=1234, renewed=time.time() - 60)
    assert lease.claim_folder(replacing=False, generation=None)
    with pytest.raises(UserError) as error:
        run_folder.OutputDirLease(str(tmp_path)).hold()
    assert "process 1234 on host lost-vm" in str(error.value)
    expires = run_folder.utc(lease.claim["renewed"] + 600)
    assert (f"takes over once its claim expires, at {expires} (10 minutes after it "
            f"was last renewed), or at once if you delete {tmp_path / 'running.json'}") in str(error.value)
    lease.claim["renewed"] = time.time() - 601
    (tmp_path / "running.json").write_text(json.dumps(lease.claim))
    run_folder.OutputDirLease(str(tmp_path)).hold()
    assert json.loads((tmp_path / "running.json").read_text())["host"] == socket.gethostname()


@pytest.mark.fast
def test_a_process_id_used_again_is_not_taken_for_the_run(tmp_path, releases):
    lease = run_folder.OutputDirLease(str(tmp_path))
    lease.claim["process_start"] = "1"  # This process's id, but another process's start: the run has ended.
    assert lease.claim_folder(replacing=False, generation=None)
    run_folder.OutputDirLease(str(tmp_path)).hold()


@pytest.mark.fast
def test_of_two_runs_started_at_once_one_holds_the_folder(tmp_path, releases, monkeypatch):
    """The second run reads the folder while the first writes its claim (seen: two scripts starting the same command
    in the same second): one of them holds the folder, never both."""
    first, second = run_folder.OutputDirLease(str(tmp_path)), run_folder.OutputDirLease(str(tmp_path))
    outcomes = {}

    def hold(lease):
        try:
            lease.hold()
            return "holds"
        except UserError:
            return "refused"

    def open_then_the_second_run_starts(path, mode="r", *args, **kwargs):
        opened = open(path, mode, *args, **kwargs)
        if ("w" in mode or "x" in mode) and not outcomes:  # The first run's claim, before a byte of it is written.
            outcomes["second"] = "starting"  # First: the second run's own claim must not start a third.
            outcomes["second"] = hold(second)
        return opened

    monkeypatch.setattr(run_folder, "open", open_then_the_second_run_starts, raising=False)
    outcomes["first"] = hold(first)
    assert sorted(outcomes.values()) == ["holds", "refused"]
    holder = first if outcomes["first"] == "holds" else second
    assert json.loads((tmp_path / "running.json").read_text())["run"] == holder.claim["run"]
    assert sorted(os.listdir(tmp_path)) == ["running.json"]


@pytest.mark.fast
def test_a_folder_without_hard_links_is_claimed_too(tmp_path, releases, monkeypatch):
    def no_hard_links(source, target):
        raise PermissionError(1, "Operation not permitted")  # What gcsfuse answers.

    monkeypatch.setattr(run_folder.os, "link", no_hard_links)
    lease = run_folder.OutputDirLease(str(tmp_path))
    lease.hold()
    assert json.loads((tmp_path / "running.json").read_text())["run"] == lease.claim["run"]
    assert sorted(os.listdir(tmp_path)) == ["running.json"]
    with pytest.raises(UserError, match="another run is writing into --output_dir"):
        run_folder.OutputDirLease(str(tmp_path)).hold()


@pytest.mark.fast
def test_the_holder_renews_its_claim_and_releases_only_its_own(tmp_path, releases):
    lease = run_folder.OutputDirLease(str(tmp_path))
    lease.hold()
    renewed = lease.claim["renewed"]
    time.sleep(0.01)
    assert lease.renew() and json.loads((tmp_path / "running.json").read_text())["renewed"] > renewed
    (tmp_path / "running.json").write_text(json.dumps({**lease.claim, "run": "another"}))  # Taken over.
    assert not lease.renew()
    releases.pop()()
    assert json.loads((tmp_path / "running.json").read_text())["run"] == "another"


@pytest.fixture(scope="module")
def gcs():
    from gcs_emulator import GcsEmulator

    with GcsEmulator() as emulator:
        emulator.create_bucket("faults")
        yield emulator


@pytest.fixture
def bucket_client(gcs, monkeypatch):
    """utils' Cloud Storage layer, in this process, on the emulator."""
    monkeypatch.setattr(utils, "gcs_client", gcs.client)
    return gcs.client()


def test_a_claim_in_a_bucket_is_a_lease_that_expires_and_one_of_two_runs_wins(bucket_client, releases):
    folder = f"gs://faults/run-{time.monotonic_ns()}"
    first, second = run_folder.OutputDirLease(folder), run_folder.OutputDirLease(folder)
    second.claim["host"] = "another-vm"  # The second run starts on another machine: only the lease can tell.
    first.hold()
    assert not second.claim_folder(replacing=False, generation=None)  # It too found no claim, but came second.
    with pytest.raises(UserError, match=f"process {os.getpid()} on host .* If that run is gone .* at once if you "
                                        f"delete {folder}/running.json"):
        second.hold()
    assert first.renew()
    stale = json.loads(bucket_client.bucket("faults").blob(f"{folder[len('gs://faults/'):]}/running.json")
                       .download_as_bytes())
    stale.update(host="lost-vm", renewed=time.time() - 601)
    bucket_client.bucket("faults").blob(f"{folder[len('gs://faults/'):]}/running.json").upload_from_string(
        json.dumps(stale))
    second.hold()  # The lost VM's lease has expired.
    assert not first.renew()  # The first run learns that it was taken over.
    releases.pop(0)()  # The first run exits: the claim is the second's, and stays.
    assert run_folder.OutputDirLease(folder).read()[0]["run"] == second.claim["run"]
    releases.pop()()
    assert run_folder.OutputDirLease(folder).read() == (None, None)


# The same command twice into one folder, the second refused at once, then the first killed (SIGKILL: no release)
# and the folder taken over by the next run: tests/test_run_mlm.py's
# test_train_refuse_a_second_run_kill_resume_and_fill_mask, whose run is killed and resumed anyway.


@pytest.fixture
def small_disk(tmp_path):
    """mount(size): a tmpfs of `size` bytes at tmp_path/"disk", a disk that fills; mount again to grow it (space
    freed). Skipped where this test may not mount (not root, or no CAP_SYS_ADMIN): the injected errors below still
    run there."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = []

    def mount(size):
        options = f"size={size}" + (",remount" if mounted else "")
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)], capture_output=True)
        if result.returncode:
            pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.decode().strip()}")
        mounted.append(size)
        return disk

    yield mount
    if mounted:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # Lazy: a file the failed write left open.


def prepare_argv(tokenizer_dir, output_dir, *extra):
    return ["prepare_tfrecord_shards.py", "--tokenizer_name_or_path", str(tokenizer_dir), "--train_file",
            str(WIKITEXT / "train.txt"), "--limit", "1400", "--max_length", str(MAX_LENGTH), "--shard_size", "100",
            "--output_dir", str(output_dir), *extra]


def test_a_full_disk_while_writing_shards_leaves_the_split_incomplete_and_the_same_command_works_once_freed(
        tokenizer_dir, small_disk, monkeypatch):
    import prepare_tfrecord_shards

    disk = small_disk(64 * 1024)  # The shards of 1,400 lines take about 600 KB.
    monkeypatch.setattr(sys, "argv", prepare_argv(tokenizer_dir, disk / "tfrecords"))
    with pytest.raises(UserError) as error:
        prepare_tfrecord_shards.main(prepare_tfrecord_shards.parse_args())
    assert str(error.value).startswith(f"no space left to write the shards in '{disk / 'tfrecords'}': the disk is "
                                       "full (No space left on device). Nothing unfinished looks complete")
    assert "run the same command again with --overwrite" in str(error.value)
    split = disk / "tfrecords" / "train"
    assert (split / "INCOMPLETE").exists() and not (split / "manifest.json").exists()
    with pytest.raises(UserError, match="the shards at .* are incomplete"):  # Nothing looks complete.
        shards.find_shards(str(split), MAX_LENGTH)
    small_disk(8 * 2**20)  # Space freed.
    monkeypatch.setattr(sys, "argv", prepare_argv(tokenizer_dir, disk / "tfrecords", "--overwrite"))
    prepare_tfrecord_shards.main(prepare_tfrecord_shards.parse_args())
    assert json.loads((split / "manifest.json").read_text())["num_samples"] > 0 and not (split / "INCOMPLETE").exists()


def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint_and_the_same_command_resumes(
        shards_dir, tokenizer_dir, tiny_config_dir, pretrained_model_dir, small_disk):
    # Room for the run's config and one checkpoint, not two: the checkpoint of step 20 finds the disk full.
    checkpoint_bytes = sum(path.stat().st_size for path in (pretrained_model_dir / "checkpoints").glob("ckpt-*"))
    config_bytes = sum(path.stat().st_size for path in (pretrained_model_dir / "checkpoints" / "config").iterdir())
    disk = small_disk(config_bytes + checkpoint_bytes * 3 // 2 + 128 * 1024)
    output_dir = disk / "model"
    args = [*tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, output_dir), "--max_steps", 30,
            "--checkpoint_every_steps", 10]
    result = run_main("run_mlm.py", *args, expect_failure=True)
    assert (f"error: no space left to write the checkpoint of step 20 in '{output_dir / 'checkpoints'}': the disk "
            "is full (No space left on device). The checkpoints in "
            f"'{output_dir / 'checkpoints'}' are intact, the last '{output_dir / 'checkpoints' / 'ckpt-10'}': free "
            "space, then run the same command again; it resumes from there.") in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(path.name for path in (output_dir / "checkpoints").iterdir()) == [
        "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index", "config"]  # The failed save's files gone.
    assert not (output_dir / "running.json").exists()
    small_disk(64 * 2**20)  # Space freed.
    result = run_main("run_mlm.py", *args)
    assert f"Resuming from {output_dir / 'checkpoints' / 'ckpt-10'}, at step 10" in result.stderr
    assert json.loads((output_dir / "training_results.json").read_text())["saved_model_step"] == 30


def test_a_full_disk_while_saving_a_model_leaves_nothing_half_saved(pretrained_model_dir, small_disk):
    import export_model

    disk = small_disk(256 * 1024)  # Less than the weights, in tf_model.h5 and pytorch/model.safetensors.
    output_dir = disk / "model"
    with pytest.raises(UserError) as error:
        export_model.main(argparse.Namespace(source=str(pretrained_model_dir), output_dir=str(output_dir),
                                             overwrite=False))
    assert str(error.value).startswith(f"no space left to write the model of {str(pretrained_model_dir)}, with its "
                                       f"PyTorch copy in pytorch/, in '{output_dir}'")
    assert "nothing half-saved looks complete" in str(error.value)
    assert list(output_dir.iterdir()) == []


@pytest.mark.fast
@pytest.mark.parametrize("error,reason", [
    (OSError(28, "No space left on device"), "the disk is full (No space left on device)"),
    (OSError(122, "Disk quota exceeded"), "the disk quota is exceeded (Disk quota exceeded)"),
    (OSError("Unable to create file (file write failed: errno = 28, error message = 'No space left on device')"),
     "the disk is full (No space left on device)"),  # h5py's: no errno.
    (tf.errors.ResourceExhaustedError(None, None, "/m/ckpt-2_temp/part-0; No space left on device [Op:SaveV2]"),
     "the disk is full (No space left on device)"),
    (tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[8,128,50265]"), None),
    (OSError(13, "Permission denied"), None),
    (UserError("no space left on device: already explained"), None),
])
def test_full_disks_are_told_from_other_errors(error, reason):
    assert utils.out_of_space_reason(error) == reason


def test_a_bucket_quota_error_while_writing_shards_to_gs_is_named(tokenizer_dir, bucket_client, monkeypatch):
    # The emulator has no quota: the error Cloud Storage answers with is injected at the shard write.
    from google.api_core.exceptions import Forbidden, TooManyRequests
    from google.cloud.storage import fileio

    import prepare_tfrecord_shards

    def quota_exceeded(self, data):
        raise Forbidden("POST https://storage.googleapis.com/upload/storage/v1/b/faults/o: The project has "
                        "exceeded its storage quota (quotaExceeded)")

    monkeypatch.setattr(fileio.BlobWriter, "write", quota_exceeded)
    output_dir = f"gs://faults/shards-{time.monotonic_ns()}"
    monkeypatch.setattr(sys, "argv", prepare_argv(tokenizer_dir, output_dir))
    with pytest.raises(UserError) as error:
        prepare_tfrecord_shards.main(prepare_tfrecord_shards.parse_args())
    assert str(error.value).startswith(f"no space left to write the shards in '{output_dir}': the storage quota is "
                                       "exceeded. Nothing unfinished")
    prefix = output_dir[len("gs://faults/"):]
    names = {blob.name[len(prefix) + 1:] for blob in bucket_client.list_blobs("faults", prefix=prefix)}
    assert "train/INCOMPLETE" in names and "train/manifest.json" not in names
    # A rate limit is not a full bucket: it passes unchanged.
    assert not utils.out_of_space_reason(TooManyRequests("rateLimitExceeded: The rate of change requests is too high"))


@pytest.fixture
def run_with_two_checkpoints(pretrained_model_dir, tmp_path):
    """An interrupted run with checkpoints at steps 10 and 20 (the one of the finished run, twice)."""
    run_dir = unfinished_copy(pretrained_model_dir, tmp_path / "run")
    checkpoints = run_dir / "checkpoints"
    for path in checkpoints.glob("ckpt-20.*"):
        shutil.copy(path, checkpoints / path.name.replace("ckpt-20", "ckpt-10"))
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-10"\n'
                                            'all_model_checkpoint_paths: "ckpt-20"\n')
    return run_dir


@pytest.mark.parametrize("damage", ["cut short", "corrupted"])
def test_a_damaged_checkpoint_is_named_with_the_intact_one_before_it_which_is_used_once_the_damaged_is_deleted(
        damage, run_with_two_checkpoints, tmp_path):
    import export_model

    checkpoints = run_with_two_checkpoints / "checkpoints"
    data = checkpoints / "ckpt-20.data-00000-of-00001"
    if damage == "cut short":
        os.truncate(data, data.stat().st_size // 2)
    else:
        with open(data, "r+b") as f:
            f.seek(data.stat().st_size // 2)
            f.write(b"\x00" * 64)
    export = argparse.Namespace(source=str(run_with_two_checkpoints), output_dir=str(tmp_path / "exported"),
                                overwrite=False)
    with pytest.raises(UserError) as error:
        export_model.main(export)
    message = str(error.value)
    assert message.startswith(f"the checkpoint {checkpoints / 'ckpt-20'} is damaged: ")
    assert (f"The checkpoint before it, {checkpoints / 'ckpt-10'}, is intact: to resume or export from it, delete "
            f"the damaged checkpoint's files (`rm {checkpoints / 'ckpt-20'}.*`), then run the same command again. "
            "Its steps after 10 are lost") in message
    assert not (tmp_path / "exported").exists()
    # run_mlm.py checks the checkpoint it resumes from before restoring it (restoring reads lazily).
    run_args = argparse.Namespace(output_dir=str(run_with_two_checkpoints), overwrite=False)
    with pytest.raises(UserError, match=f"the checkpoint {checkpoints / 'ckpt-20'} is damaged"):
        run_folder.restore_last_checkpoint(run_args, trainer=None, is_chief=True)

    for path in checkpoints.glob("ckpt-20.*"):  # What the message says to do.
        path.unlink()
    assert run_folder.last_checkpoint(str(checkpoints)) == str(checkpoints / "ckpt-10")
    export_model.main(export)
    assert (tmp_path / "exported" / "tf_model.h5").exists()


def test_no_intact_checkpoint_says_to_start_over(run_with_two_checkpoints):
    checkpoints = run_with_two_checkpoints / "checkpoints"
    for step in (10, 20):
        os.truncate(checkpoints / f"ckpt-{step}.data-00000-of-00001", 1000)
    with pytest.raises(UserError, match="No earlier checkpoint is intact: start the run over"):
        run_folder.check_checkpoint(str(checkpoints / "ckpt-20"), str(checkpoints))


@pytest.mark.fast
def test_a_long_line_is_tokenized_in_pieces_into_the_tokens_of_the_whole(tokenizer_dir, monkeypatch):
    tokenizer, _ = models.load_backend_tokenizer(str(tokenizer_dir))
    lines = [line for line in (WIKITEXT / "train.txt").read_text().splitlines() if line.strip()]
    long_line = "  ".join(lines[:60])  # Runs of spaces too, which the normalizer makes one.
    monkeypatch.setattr(shards, "MAX_PIECE_CHARS", 300)  # Dozens of pieces, several calls.
    texts = [lines[100], long_line, lines[101], lines[102]]
    expected = [token for text in texts for token in tokenizer.encode(text).ids]
    assert len(long_line) > 20 * 300
    assert shards.tokenize(tokenizer, texts).tolist() == expected
    # A "word" longer than a piece is cut where it must be: its tokens may differ at the cut, but none is lost.
    ids = shards.tokenize(tokenizer, ["x" * 1000])
    assert ids[0] == tokenizer.token_to_id("<s>") and ids[-1] == tokenizer.token_to_id("</s>") and len(ids) > 2


@pytest.mark.fast
@pytest.mark.parametrize("name", ["long.txt", "long.txt.gz"])
def test_a_long_line_is_read_in_pieces_never_whole_into_the_tokens_of_the_whole(name, tokenizer_dir, tmp_path,
                                                                                  monkeypatch):
    import corpus

    tokenizer, _ = models.load_backend_tokenizer(str(tokenizer_dir))
    lines = [line for line in (WIKITEXT / "train.txt").read_text().splitlines() if line.strip()]
    long_line = " ".join(lines[:60]) + " 戦"  # A character of three UTF-8 bytes, cut by some chunk.
    texts = [lines[100], long_line, lines[101], "short\rafter a carriage return", lines[102]]
    data = ("\n".join(texts[:3]) + "\r\n" + "\n".join(texts[3:]) + "\n").encode()
    path = tmp_path / name
    if name.endswith(".gz"):
        write_compressed(path, data)
    else:
        path.write_bytes(data)
    monkeypatch.setattr(corpus, "READ_CHUNK_BYTES", 1000)
    monkeypatch.setattr(corpus, "LONG_TEXT_BYTES", 1000)
    monkeypatch.setattr(shards, "MAX_PIECE_CHARS", 300)
    read = list(corpus.iter_text_file_lines([str(path)], long_texts=True))
    assert [type(text) for text in read] == [str, corpus.LongText, str, str, str, str]
    # The long text is held as where it lies (for a compressed file, in an uncompressed copy of its line, which a
    # text is read back from without decompressing all before it), and read back in pieces of at most a chunk.
    pieces = list(read[1].pieces())
    assert len(pieces) > 10 and max(map(len, pieces)) <= 1000 and "".join(pieces) == long_line
    expected = [token for text in [*texts[:3], "short", "after a carriage return", texts[4]]
                for token in tokenizer.encode(text).ids]
    assert shards.tokenize(tokenizer, read).tolist() == expected
    # The scripts that want every text whole get it so.
    assert list(corpus.iter_text_file_lines([str(path)])) == [str(text) for text in read]
    where = read[1].path
    assert (where == str(path)) != name.endswith(".gz")
    del read, pieces
    assert os.path.exists(where) != name.endswith(".gz")  # The copy goes with the last text that lies in it.


# ----------------------------------------------------------------------------------------------------------------
# A compressed file that is truncated, damaged or not of the compression its name says (issue #65): one line that
# names it and says what to do, never a traceback, never a shorter corpus.


def damaged_archive(path, damage, text):
    """Writes `text` to `path`, compressed as its extension says, then `damage`d; returns `path`."""
    if damage == "not compressed":
        path.write_bytes(text)
        return path
    data = bytearray(write_compressed(path, text).read_bytes())
    if damage == "truncated":
        del data[-8:]  # As a download cut short leaves it.
    else:
        middle = len(data) // 2
        data[middle:middle + 8] = bytes(byte ^ 0xFF for byte in data[middle:middle + 8])
    path.write_bytes(data)
    return path


def damaged_archive_message(path, tool):
    return (f"cannot read {str(path)!r} as {tool}-compressed, as its name says it is: ", f" It is truncated or damaged "
            f"(a download or copy cut short?), or not {tool}-compressed: test it with `{tool} -t {path}`, then copy it "
            "again, or give it the extension of its format.")


@pytest.mark.fast
@pytest.mark.parametrize("extension,tool", [(".gz", "gzip"), (".bz2", "bzip2"), (".xz", "xz"), (".zst", "zstd")])
@pytest.mark.parametrize("damage", ["truncated", "corrupted", "not compressed"])
def test_a_damaged_archive_is_named_with_what_to_do(extension, tool, damage, tmp_path):
    text = (WIKITEXT / "validation.txt").read_bytes()
    path = damaged_archive(tmp_path / f"corpus.txt{extension}", damage, text)
    (batches,) = corpus.text_batches(text_column="text", batch_size=100, data_files={"train": [str(path)]}).values()
    with pytest.raises(UserError) as error:
        list(batches)
    start, end = damaged_archive_message(path, tool)
    assert str(error.value).startswith(start) and str(error.value).endswith(end) and "\n" not in str(error.value)


@pytest.mark.fast
def test_compressed_json_lines_read_by_datasets_are_named_when_damaged(tmp_path):
    text = "".join(json.dumps({"text": line}) + "\n" for line in (WIKITEXT / "validation.txt").read_text().split("\n"))
    good = write_compressed(tmp_path / "a.jsonl.xz", text.encode())
    damaged = damaged_archive(tmp_path / "b.jsonl.gz", "truncated", text.encode())
    # Found as 🤗 Datasets reads the records, or as it opens the files, reading the first ones for their columns.
    for files in ([good, damaged], [damaged]):
        with pytest.raises(UserError) as error:
            (batches,) = corpus.text_batches(text_column="text", batch_size=100,
                                             data_files={"train": list(map(str, files))}).values()
            list(batches)
        assert str(error.value).startswith(damaged_archive_message(damaged, "gzip")[0])


@pytest.mark.fast
def test_compressed_text_that_is_not_utf8_or_whose_name_does_not_say_it_is_compressed_is_named(tmp_path):
    def error(path):
        (batches,) = corpus.text_batches(text_column="text", batch_size=100, data_files={"train": [str(path)]}).values()
        with pytest.raises(UserError) as raised:
            list(batches)
        return str(raised.value)

    latin1 = write_compressed(tmp_path / "latin1.txt.bz2", (WIKITEXT / "validation.txt").read_bytes() + b"caf\xe9\n")
    assert error(latin1).startswith(f"the text file '{latin1}' is not UTF-8: the first invalid byte is at line 501")
    assert (f"`bzip2 -dc {latin1} | iconv -f latin1 -t utf-8 | bzip2 > {tmp_path / 'latin1.utf8.txt.bz2'}`, then pass "
            "the converted file.") in error(latin1)
    unnamed = write_compressed(tmp_path / "corpus.txt.gz", (WIKITEXT / "validation.txt").read_bytes())
    unnamed = unnamed.rename(tmp_path / "corpus.txt")
    assert error(unnamed).startswith(f"the text file '{unnamed}' is gzip-compressed, but its name does not say so: "
                                     "name it corpus.txt.gz, and it is read as it is")


def test_a_damaged_archive_stops_each_script_in_one_line_and_leaves_the_split_incomplete(tmp_path, tokenizer_dir):
    good = write_compressed(tmp_path / "train.txt.gz", (WIKITEXT / "train.txt").read_bytes())
    damaged = damaged_archive(tmp_path / "validation.txt.gz", "corrupted", (WIKITEXT / "validation.txt").read_bytes())
    start, end = damaged_archive_message(damaged, "gzip")
    # The damage comes after the first batch, read while SentencePiece trains.
    unigram = run_main("train_unigram.py", "--train_file", good, damaged, "--batch_size", 10, "--vocab_size", 1000,
                       "--output_dir", tmp_path / "tokenizer", expect_failure=True)
    assert f"error: {start}" in unigram.stderr and end in unigram.stderr and "Traceback" not in unigram.stderr
    assert not (tmp_path / "tokenizer").exists()
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--train_file", good, damaged, "--max_length", MAX_LENGTH]
    one_process = run_main("prepare_tfrecord_shards.py", *args, "--num_workers", 1, "--output_dir", tmp_path / "one",
                           expect_failure=True)
    assert f"error: {start}" in one_process.stderr and end in one_process.stderr
    # In a worker process: its error ends the run, in the same line.
    workers = run_script("prepare_tfrecord_shards.py", *args, "--num_workers", 2, "--output_dir", tmp_path / "two",
                         expect_failure=True)
    assert_entry_point_error(workers, start)
    for output in ("one", "two"):
        names = {path.name for path in (tmp_path / output / "train").iterdir()}
        assert "INCOMPLETE" in names and "manifest.json" not in names


# ----------------------------------------------------------------------------------------------------------------
# An output folder that is what the run reads (issue #60): refused, --overwrite or not (a benchmark has no such flag).


def output_refusal(output, stands, flag="--output_dir"):
    return (f"{flag} {str(output)!r} {stands}, which this run reads: its output would replace or mix with its own "
            f"input. Choose another {flag}: no flag writes over what a run reads.")


@pytest.mark.fast
def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "corpus.txt").write_text("a text\n")
    (tmp_path / "link").symlink_to(tmp_path / "model")
    refused = [("model", "./model/", "is './model/'"), ("link", "model", "is 'model'"),
               ("model/classifier", "model", "lies inside 'model'"), (".", "corpus.txt", "holds 'corpus.txt'"),
               ("corpus.txt", "corpus.txt", "is 'corpus.txt'"),
               # A glob holds the files it matches, those to come too; only they are read in its folder.
               (".", "*.txt", "holds '*.txt'"), ("..", "*.txt", "holds '*.txt'"),
               ("corpus.txt", "./*.txt", "is './corpus.txt' (matched by './*.txt')"),
               ("model/classifier", "mod*", "lies inside 'model' (matched by 'mod*')"),
               ("gs://b/a", "gs://b/a/", "is 'gs://b/a/'"), ("gs://b/a/c", "gs://b/a", "lies inside 'gs://b/a'"),
               ("gs://b", "gs://b/a/*.txt", "holds 'gs://b/a/*.txt'"),
               ("gs://b/a/", "gs://b/a/*.txt", "holds 'gs://b/a/*.txt'")]
    for output, read, stands in refused:
        with pytest.raises(UserError) as error:
            utils.refuse_an_output_that_is_read(output, [None, "FacebookAI/roberta-base", read])
        assert str(error.value) == output_refusal(output, stands)
    # Not what the run reads: a Hub id (no such local folder), a folder whose name begins alike, a sibling, a folder
    # beside the files of a glob.
    for output, read in [("FacebookAI", "FacebookAI/roberta-base"), ("gs://b/ab", "gs://b/a"), ("model-2", "model"),
                         ("gs://b/a", "gs://b/ab/*.txt"), ("gs://c/a", "gs://b/a"), ("other", "model"),
                         ("model", "*.txt"), ("shards", "corpus-*.txt"), ("gs://b/a/shards", "gs://b/a/*.txt")]:
        utils.refuse_an_output_that_is_read(output, [read])


@pytest.fixture
def inputs_folder(tmp_path):
    """Folders that the scripts' flags read, none of them valid for its script: each script must refuse an output
    among them before it reads any."""
    for folder in ("model", "data", "glue/CoLA"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "data" / "train.txt").write_text("a text\nanother text\n")
    (tmp_path / "data" / "train.csv").write_text("text,label\na text,a\n")
    (tmp_path / "glue" / "CoLA" / "train.tsv").write_text("a\t1\t\ta text\n")
    return tmp_path


# Each script with an output among its inputs, in inputs_folder ({dir}): (its flags, the output's flag, the output, how
# it stands to the input named, that input).
OUTPUTS_AMONG_INPUTS = {
    "train_unigram.py": (["--train_file", "{dir}/data/train.txt", "--output_dir", "{dir}/data", "--overwrite"],
                         "--output_dir", "{dir}/data", "holds", "{dir}/data/train.txt"),
    "prepare_tfrecord_shards.py": (["--tokenizer_name_or_path", "{dir}/model", "--train_file", "{dir}/data/train.txt",
                                    "--output_dir", "{dir}/model/shards", "--overwrite"],
                                   "--output_dir", "{dir}/model/shards", "lies inside", "{dir}/model"),
    "run_mlm.py": (["--model_name_or_path", "{dir}/model", "--train_dataset", "{dir}/data", "--output_dir",
                    "{dir}/model", "--overwrite", "--no_tpu"], "--output_dir", "{dir}/model", "is", "{dir}/model"),
    # The case: the pre-trained model replaced by its classifier.
    "run_classification.py": (["--model_name_or_path", "{dir}/model", "--train_file", "{dir}/data/train.csv",
                               "--output_dir", "{dir}/model", "--overwrite", "--no_tpu"],
                              "--output_dir", "{dir}/model", "is", "{dir}/model"),
    "export_model.py": (["{dir}/model", "--output_dir", "{dir}/model", "--overwrite"],
                        "--output_dir", "{dir}/model", "is", "{dir}/model"),
    "glue.py": (["--glue_dir", "{dir}/glue", "--model", "m={dir}/model", "--output_dir", "{dir}/glue"],
                "--output_dir", "{dir}/glue", "is", "{dir}/glue"),
    "glue_text.py": (["--glue_dir", "{dir}/glue", "--output_file", "{dir}/glue/CoLA/train.tsv"],
                     "--output_file", "{dir}/glue/CoLA/train.tsv", "lies inside", "{dir}/glue"),
    "fine_tuning.py": (["--model", "{dir}/model", "--train_file", "{dir}/data/train.csv", "--probe_only",
                        "--output_dir", "{dir}/data"], "--output_dir", "{dir}/data", "holds", "{dir}/data/train.csv"),
    "mlm_recipes.py": (["--train_file", "{dir}/data/train.txt", "--validation_file", "{dir}/data/train.txt",
                        "--work_dir", "{dir}/data"], "--work_dir", "{dir}/data", "holds", "{dir}/data/train.txt"),
    "training_end_to_end.py": (["--train_dataset", "{dir}/data", "--tokenizer", "{dir}/model", "--work_dir",
                                "{dir}/model"], "--work_dir", "{dir}/model", "is", "{dir}/model"),
}


@pytest.mark.fast
@pytest.mark.parametrize("script", OUTPUTS_AMONG_INPUTS)
def test_each_script_refuses_an_output_among_its_inputs_before_reading_them(script, inputs_folder, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # Where the benchmarks' scripts are.
    argv, flag, output, relation, read = OUTPUTS_AMONG_INPUTS[script]

    def in_folder(text):
        return text.format(dir=inputs_folder)

    before = sorted((path, path.stat().st_mtime_ns) for path in inputs_folder.rglob("*"))
    result = run_main(script, *map(in_folder, argv), expect_failure=True)
    assert f"error: {output_refusal(in_folder(output), f'{relation} {in_folder(read)!r}', flag)}" in result.stderr, \
        result.stderr[-3000:]
    assert sorted((path, path.stat().st_mtime_ns) for path in inputs_folder.rglob("*")) == before
