"""run_mlm.py across two worker processes (MultiWorkerMirroredStrategy on 127.0.0.1), and stopping on SIGTERM."""

import json
import re
import shutil
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from helpers import REPO, run_main, run_script, tiny_mlm_args
from utils import UserError


def tiny_run_args(shards_dir, tokenizer_dir, tiny_config_dir, output_dir):
    return [*tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, output_dir),
            "--eval_dataset", shards_dir / "validation"]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def start_workers(args):
    """Starts run_mlm.py as the two workers of one cluster on 127.0.0.1; returns their processes."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen([sys.executable, str(REPO / "run_mlm.py"), *map(str, args)],
                                          env={**__import__("os").environ, "TF_CONFIG": tf_config},
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    return processes


def run_workers(args, timeout=600):
    """Runs run_mlm.py as the two workers of one cluster on 127.0.0.1; returns their (exit code, stderr)."""
    processes = start_workers(args)
    outputs = []
    for process in processes:
        try:
            outputs.append((process.wait(timeout=timeout), process.stderr.read()))
        finally:
            for other in processes:
                if other.poll() is None and process.returncode != 0:
                    other.kill()
    return outputs


def test_two_workers_train_in_step_on_their_own_shards(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path):
    output_dir = tmp_path / "model"
    args = tiny_run_args(shards_dir, tokenizer_dir, tiny_config_dir, output_dir) + [
        "--max_steps", 6, "--eval_every_steps", 3, "--checkpoint_every_steps", 3]
    (chief_code, chief), (worker_code, worker) = run_workers(args)
    assert chief_code == 0, chief[-3000:]
    assert worker_code == 0, worker[-3000:]

    num_shards = len(list((shards_dir / "train").glob("*.tfrecord")))
    for index, log in enumerate((chief, worker)):
        assert "MultiWorkerMirroredStrategy with 2 replica(s) on 2 host(s); global batch 16" in log
        own = len(range(index, num_shards, 2))
        assert f"Input pipeline {index} of 2 reads {own} of the {num_shards} training shards" in log
        assert "Input pipeline {} of 2".format(1 - index) not in log

    # Both hosts end with bit-identical weights.
    fingerprints = [re.search(r"Weights fingerprint: (\w+)", log).group(1) for log in (chief, worker)]
    assert fingerprints[0] == fingerprints[1]
    # Only the chief writes checkpoints, logs and the model.
    assert "Model, tokenizer and model card saved" in chief and "saved" not in worker.split("Weights fingerprint")[1]
    assert sorted(path.name for path in (output_dir / "checkpoints").glob("*.index")) == ["ckpt-3.index",
                                                                                          "ckpt-6.index"]
    assert json.loads((output_dir / "training_results.json").read_text())["num_replicas"] == 2


def test_fewer_shards_than_hosts_fails_clearly(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path):
    one_shard = tmp_path / "one-shard"
    one_shard.mkdir()
    shutil.copy(shards_dir / "train" / "dataset-0-100.tfrecord", one_shard)
    args = tiny_run_args(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path / "model")
    for code, log in run_workers(args + ["--train_dataset", one_shard, "--max_steps", 2], timeout=300):
        assert code != 0
        assert "2 hosts need at least 2 shard files, one per host, but there are 1" in log


def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step(shards_dir, tokenizer_dir, tiny_config_dir,
                                                                   tmp_path):
    # A preempted host of a multi-worker job: the other hosts must stop at the same step, not wait for it forever.
    output_dir = tmp_path / "model"
    args = tiny_run_args(shards_dir, tokenizer_dir, tiny_config_dir, output_dir) + [
        "--max_steps", 40, "--eval_every_steps", 20, "--checkpoint_every_steps", 1000]
    chief, worker = start_workers(args)
    for line in worker.stderr:  # As training begins: the worker stops after its first step, and so must the chief.
        if "Steps 1 to 40 of 40" in line:
            break
    worker.send_signal(signal.SIGTERM)  # The non-chief only.
    try:
        chief_log, worker_log = (process.communicate(timeout=300)[1] for process in (chief, worker))
    finally:
        for process in (chief, worker):
            if process.poll() is None:
                process.kill()
    assert worker.returncode == 128 + signal.SIGTERM, worker_log[-3000:]
    assert chief.returncode == 128 + signal.SIGTERM, chief_log[-3000:]
    stopped = re.search(r"Stopped by SIGTERM at step (\d+), after saving", worker_log)
    assert stopped, worker_log[-3000:]
    step = int(stopped.group(1))
    assert f"Stopped by a signal to another host at step {step}, after saving checkpoint " in chief_log
    assert 0 < step < 40 and (output_dir / "checkpoints" / f"ckpt-{step}.index").exists()


def step_losses(log):
    """{step: training loss} from a run's log, one line per round (rounds of one step: each step's own loss)."""
    return {int(step): float(loss) for step, loss in re.findall(r"run_mlm: Step (\d+): loss ([\d.]+)", log)}


def h5_weights(path):
    """{name: array} of the weights in a saved model's tf_model.h5, named without the number Keras adds to a model's
    name in a process that built one before (tf_roberta_for_masked_lm_2)."""
    import h5py

    weights = {}
    with h5py.File(path) as f:
        f.visititems(lambda name, item: weights.update({re.sub(r"(tf_\w+?)_\d+/", r"\1/", name): item[()]})
                     if isinstance(item, h5py.Dataset) else None)
    return weights


def test_a_run_stopped_by_sigterm_and_resumed_trains_as_the_run_never_stopped(shards_dir, tokenizer_dir,
                                                                              tiny_config_dir, tmp_path):
    # Each step's batch of 2 micro-batches, its samples and masks, must be the same whether the run stopped before it
    # or not. Without dropout, whose draws a resumed run does not replay (see --seed's help).
    args = [*tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path / "never-stopped"), "--max_steps", 6,
            "--eval_every_steps", 1, "--per_replica_batch_size", 4, "--gradient_accumulation_steps", 2,
            "--config_overrides", "hidden_dropout_prob=0,attention_probs_dropout_prob=0"]
    # A process of its own, as the stopped run's: a run in the test process starts from other initial weights once
    # other tests have run there (the same in every run of that process, not those of a fresh one).
    never_stopped = step_losses(run_script("run_mlm.py", *args).stderr)

    stopped_args = [*args, "--output_dir", tmp_path / "stopped"]
    process = subprocess.Popen([sys.executable, str(REPO / "run_mlm.py"), *map(str, stopped_args)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:  # As training begins: the run stops after its first step or a little later.
        if "Steps 1 to 6 of 6" in line:
            break
    process.send_signal(signal.SIGTERM)
    stopped_log = line + process.communicate(timeout=300)[1]
    assert process.returncode == 128 + signal.SIGTERM, stopped_log[-3000:]
    stopped_at = int(re.search(r"Stopped by SIGTERM at step (\d+)", stopped_log).group(1))
    assert 0 < stopped_at < 6
    resumed = run_main("run_mlm.py", *stopped_args).stderr
    assert f"Resuming from {tmp_path / 'stopped' / 'checkpoints' / f'ckpt-{stopped_at}'}, at step {stopped_at}" \
        in resumed
    assert f"first reads past the {8 * stopped_at} samples of the batches already trained" in resumed

    losses = {**step_losses(stopped_log), **step_losses(resumed)}
    assert list(losses) == list(never_stopped) == [1, 2, 3, 4, 5, 6]
    assert losses == pytest.approx(never_stopped, abs=2e-4)  # Printed with 4 decimals.
    weights, never_stopped_weights = (h5_weights(tmp_path / run / "tf_model.h5") for run in ("stopped",
                                                                                              "never-stopped"))
    assert weights.keys() == never_stopped_weights.keys()
    for name, value in weights.items():
        np.testing.assert_allclose(value, never_stopped_weights[name], rtol=1e-5, atol=1e-6, err_msg=name)


def fit_with_checkpoint_and_stop(checkpoint_dir, features, extra_callbacks=(), every_steps=1000, start_step=0):
    """A one-weight Keras model fitted for 2 rounds of 3 steps (batches of 2 rows of `features`), each round ending
    with an evaluation, beside run_folder.CheckpointAndStop, from `start_step` (as a run resumed there); returns
    (model, stopper). The signal handlers that the stopper installs are put back."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from run_folder import CheckpointAndStop

    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.iterations.assign(start_step)
    data = tf.data.Dataset.from_tensor_slices((np.asarray(features, "float32"), np.ones((len(features), 1), "float32")))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), checkpoint_dir, max_to_keep=None)
    saved_handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        stopper = CheckpointAndStop(manager, every_steps=every_steps, strategy=tf.distribute.get_strategy(),
                                    start_step=start_step, is_chief=True)
        model.fit(data.batch(2), steps_per_epoch=3, epochs=2, validation_data=data.take(4).batch(2),
                  callbacks=[stopper, *extra_callbacks], verbose=0)
    finally:
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
    return model, stopper


def test_sigterm_during_a_rounds_evaluation_saves_the_checkpoint_before_the_evaluation_ends(tmp_path):
    # A preempted VM has 30 s; a round's evaluation can take longer. The signal arrives as the first evaluation
    # batch begins; the checkpoint must exist when that batch ends, and no training step follows.
    import os

    import tf_keras as keras

    class SignalAndLook(keras.callbacks.Callback):
        saved_at_first_eval_batch = None

        def on_test_batch_begin(self, batch, logs=None):
            if self.saved_at_first_eval_batch is None:
                os.kill(os.getpid(), signal.SIGTERM)

        def on_test_batch_end(self, batch, logs=None):
            if self.saved_at_first_eval_batch is None:
                self.saved_at_first_eval_batch = sorted(path.name for path in tmp_path.glob("ckpt-*.index"))

    look = SignalAndLook()
    model, stopper = fit_with_checkpoint_and_stop(tmp_path, [[1.0, 1.0]] * 12, [look])
    assert look.saved_at_first_eval_batch == ["ckpt-3.index"]
    assert stopper.received_signal == "SIGTERM" and int(model.optimizer.iterations.numpy()) == 3
    assert [path.name for path in tmp_path.glob("ckpt-*.index")] == ["ckpt-3.index"]  # Saved once.


def test_a_resumed_run_checkpoints_at_the_multiples_of_the_interval(tmp_path):
    # Resumed from a checkpoint that a signal saved at step 7, with checkpoints every 4 steps: steps 8 to 13, saved at
    # 8 and 12, as an uninterrupted run would be (not at 11, 4 steps after the resume), then at the last step.
    model, stopper = fit_with_checkpoint_and_stop(tmp_path, [[1.0, 1.0]] * 12, every_steps=4, start_step=7)
    assert int(model.optimizer.iterations.numpy()) == 13
    stopper.finish(13)
    assert {path.name for path in tmp_path.glob("ckpt-*.index")} == {"ckpt-8.index", "ckpt-12.index", "ckpt-13.index"}


def test_a_nan_loss_stops_training_at_its_step_with_no_checkpoint_after_the_last_good_one(tmp_path):
    # Step 5's batch holds a NaN: steps 1 to 4 train, step 4 is checkpointed (every 2 steps), step 5 is not,
    # and the round's evaluation after it does not restart training.
    features = [[1.0, 1.0]] * 8 + [[float("nan"), 1.0]] * 4
    model, stopper = fit_with_checkpoint_and_stop(tmp_path, features, every_steps=2)
    assert stopper.diverged_at_step == 5 and int(model.optimizer.iterations.numpy()) == 5
    assert sorted(path.name for path in tmp_path.glob("ckpt-*.index")) == ["ckpt-2.index", "ckpt-4.index"]
    with pytest.raises(UserError, match=r"NaN or infinite at step 5\. The last good checkpoint, .*ckpt-4, is kept"):
        stopper.finish(5)


def test_a_nan_loss_before_any_checkpoint_says_that_none_was_written(tmp_path):
    # The first batch holds a NaN: step 1 diverges, and there is no checkpoint to name (issue #66: "None").
    model, stopper = fit_with_checkpoint_and_stop(tmp_path, [[float("nan"), 1.0]] * 12, every_steps=2)
    assert stopper.diverged_at_step == 1 and not list(tmp_path.glob("ckpt-*"))
    with pytest.raises(UserError) as error:
        stopper.finish(1)
    assert str(error.value) == ("the loss became NaN or infinite at step 1. No checkpoint was written yet: lower "
                                "--learning_rate or raise --warmup_steps, then run the same command again; it starts "
                                "over.")
