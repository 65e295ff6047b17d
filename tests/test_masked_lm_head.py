"""MaskedLMTrainer's computation: the gathered LM head (logits only at masked positions) computes exactly what the
full head does, training without XLA (as on a TPU, where XLA is implicit) equals training with it, and Keras traces
a run's step once; and masked_lm.py, copied alone into a program, trains."""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from transformers import RobertaConfig, TFAutoModelForMaskedLM, create_optimizer

from devices import create_optimizer_state
from helpers import REPO, own_cross_entropy
from masked_lm import MaskedLMTrainer, mask_tokens
from run_folder import restore_last_checkpoint

MASK_ID = 4
CONFIG = RobertaConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=66,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # Deterministic steps.


def tiny_mlm():
    mlm = TFAutoModelForMaskedLM.from_config(CONFIG)
    mlm.build_in_name_scope()
    return mlm


def masked_batch(seed, batch_size=16, length=64, vocab_size=500, max_predictions=24):
    """A batch of random rows, <s> ids </s>, masked as run_mlm.py masks them."""
    ids = tf.random.stateless_uniform([batch_size, length], [0, seed], minval=5, maxval=vocab_size, dtype=tf.int32)
    ids = tf.concat([tf.zeros([batch_size, 1], tf.int32), ids[:, 1:-1], tf.fill([batch_size, 1], 2)], axis=1)
    batch = mask_tokens(ids, tf.constant([3, seed], tf.int64), mask_token_id=MASK_ID,
                        special_token_ids=[0, 1, 2, 3, 4], vocab_size=vocab_size, mlm_probability=0.15,
                        max_predictions=max_predictions)
    batch["attention_mask"] = tf.ones_like(ids)
    return batch


def dataset_of(batches):
    return tf.data.Dataset.from_tensor_slices({name: tf.stack([batch[name] for batch in batches])
                                               for name in batches[0]})


def test_gathered_head_equals_full_head():
    trainer = MaskedLMTrainer(tiny_mlm(), MASK_ID, frequency_log_probs=np.log(np.full(500, 1 / 495, np.float32)))
    batch = masked_batch(seed=4)
    full_batch = {k: v for k, v in batch.items() if k != "masked_positions"}  # Same masks, full head.

    gathered = {name: float(value) for name, value in trainer.sums(batch, seed=None).items()}
    full = {name: float(value) for name, value in trainer.sums(full_batch, seed=None).items()}
    assert gathered["cross_entropy"] == pytest.approx(own_cross_entropy(trainer.mlm, batch), rel=1e-5)
    assert gathered["count"] == full["count"] == float((batch["labels"].numpy() != -100).sum()) > 100
    assert 0.7 * full["count"] < gathered["mask_count"] == full["mask_count"] < 0.9 * full["count"]
    for name in full:  # Summed loss, correct predictions, counts, at every chosen position and at <mask> only.
        np.testing.assert_allclose(gathered[name], full[name], rtol=1e-5, err_msg=name)

    counts, seed = trainer.counts(batch), tf.constant([0, 0], tf.int64)
    gathered_gradients, gathered_stats = trainer._compute_gradients(batch, counts, seed)
    full_gradients, _ = trainer._compute_gradients(full_batch, counts, seed)
    np.testing.assert_allclose(gathered_stats["cross_entropy"], gathered["cross_entropy"], rtol=1e-5)
    for a, b in zip(gathered_gradients, full_gradients):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_training_without_xla_equals_training_with_it():
    # Keras runs train_step inside its own tf.function: the step, with its gradient accumulation loop, must trace
    # there without XLA too (run_mlm.py turns jit_compile off on TPUs), and give what the XLA step gives.
    dataset = dataset_of([masked_batch(seed) for seed in range(3)])
    initial_weights = tiny_mlm().get_weights()
    histories, weights = {}, {}
    for jit_compile in (True, False):
        mlm = tiny_mlm()
        mlm.set_weights(initial_weights)
        trainer = MaskedLMTrainer(mlm, MASK_ID, gradient_accumulation_steps=2, jit_compile=jit_compile)
        trainer.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5), steps_per_execution=3)
        create_optimizer_state(trainer.optimizer, mlm.trainable_variables)  # As run_mlm.py does.
        histories[jit_compile] = trainer.fit(dataset, epochs=2, verbose=0).history
        weights[jit_compile] = mlm.get_weights()
    assert histories[False]["loss"][1] < histories[False]["loss"][0]  # It learns.
    for name in ("loss", "masked_accuracy"):
        np.testing.assert_allclose(histories[False][name], histories[True][name], rtol=1e-4)
    for without_xla, with_xla in zip(weights[False], weights[True]):
        np.testing.assert_allclose(without_xla, with_xla, rtol=1e-3, atol=1e-5)


def test_many_steps_per_execution_without_xla_on_a_model_large_enough_for_graph_rewrites():
    # From about this size (5.8M parameters, 16 x 128 tokens a batch; 8 x 128 did not), TensorFlow's graph optimizer
    # rewrites large gradient sums into accumulators with temporary variables; inside a graph loop nested in Keras'
    # steps_per_execution loop, those clashed (AlreadyExistsError) at the second execution of the step function,
    # which the unrolled micro-batch loop avoids: 4 steps in executions of 2.
    config = RobertaConfig(vocab_size=10_000, hidden_size=256, num_hidden_layers=4, num_attention_heads=2,
                           intermediate_size=1024, max_position_embeddings=130)
    dataset = dataset_of([masked_batch(seed, length=128, vocab_size=10_000, max_predictions=32)
                          for seed in range(4)]).repeat()
    mlm = TFAutoModelForMaskedLM.from_config(config)
    mlm.build_in_name_scope()
    trainer = MaskedLMTrainer(mlm, MASK_ID, gradient_accumulation_steps=2, jit_compile=False)
    trainer.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), steps_per_execution=2)
    create_optimizer_state(trainer.optimizer, mlm.trainable_variables)  # As run_mlm.py does.
    assert np.isfinite(trainer.fit(dataset, steps_per_epoch=4, verbose=0).history["loss"][0])
    assert int(trainer.optimizer.iterations.numpy()) == 4


def test_a_run_creates_adams_moments_before_its_first_step_which_keras_then_traces_once(tmp_path):
    # Created in the first step, as Keras would create them, they make TensorFlow trace the step twice: seconds
    # for every run, minutes for a large model.
    mlm = tiny_mlm()
    optimizer, _ = create_optimizer(init_lr=1e-3, num_train_steps=4, num_warmup_steps=0, weight_decay_rate=1e-3)
    trainer = MaskedLMTrainer(mlm, MASK_ID)
    trainer.compile(optimizer=optimizer)
    restore_last_checkpoint(argparse.Namespace(output_dir=str(tmp_path), overwrite=False), trainer, is_chief=True)
    assert all(optimizer.get_slot(variable, "m").shape == variable.shape for variable in mlm.trainable_variables)
    traces, compute_gradients = [], trainer.compute_gradients
    trainer.compute_gradients = lambda *args: traces.append(args) or compute_gradients(*args)  # Runs as it traces.
    trainer.fit(dataset_of([masked_batch(seed) for seed in range(2)]), epochs=2, verbose=0)
    assert len(traces) == 1 and int(optimizer.iterations.numpy()) == 4


# A program of the user's own, beside a copy of masked_lm.py and nothing else of this project: a masked step.
STANDALONE = """
import json, sys
import numpy as np
import tensorflow as tf
import tf_keras as keras
from transformers import RobertaConfig, TFAutoModelForMaskedLM

import masked_lm

config = RobertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=40)
mlm = TFAutoModelForMaskedLM.from_config(config)
mlm.build_in_name_scope()
trainer = masked_lm.MaskedLMTrainer(mlm, mask_token_id=4)
trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
ids = tf.constant(np.random.RandomState(0).randint(5, 50, size=(4, 32)), tf.int32)
batch = masked_lm.mask_tokens(ids, tf.constant([0, 0], tf.int64), mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4],
                              vocab_size=50, mlm_probability=0.3, max_predictions=16)
batch["attention_mask"] = tf.ones_like(ids)
history = trainer.fit(tf.data.Dataset.from_tensors(batch).repeat(), steps_per_epoch=3, epochs=1, verbose=0)
print(json.dumps({"file": masked_lm.__file__, "losses": history.history["loss"],
                  "steps": int(trainer.optimizer.iterations),
                  "project_modules_loaded": sorted(set(sys.argv[1:]) & set(sys.modules))}))
"""


def test_masked_lm_py_copied_alone_into_a_program_trains_a_masked_step(tmp_path):
    # The README's promise: masked_lm.py is the one file to copy. In a folder of its own, on a path without the
    # repository, it imports and trains.
    shutil.copy(REPO / "masked_lm.py", tmp_path)
    project = [path.stem for path in REPO.glob("*.py") if path.stem != "masked_lm"]
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", STANDALONE, *project], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["file"] == str(tmp_path / "masked_lm.py")
    assert report["project_modules_loaded"] == [] and "utils" in project
    assert report["steps"] == 3 and np.isfinite(report["losses"]).all()
