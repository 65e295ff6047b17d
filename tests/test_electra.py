"""ELECTRA's replaced-token detection (electra.py, run_mlm.py --objective electra): the discriminator's labels, the
embeddings the two networks share, the FLOP count of both, and a tiny run end to end: trained, resumed, saved with
its generator and PyTorch copies, exported from its checkpoint and fine-tuned; and (make test-pytorch) both
networks' PyTorch copies in 🤗 Transformers 5."""

import argparse
import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from transformers import ElectraConfig, TFElectraForMaskedLM, TFElectraForPreTraining

from devices import electra_training_flops_per_token
from electra import ElectraTrainer, generator_config, replace_tokens
from helpers import MAX_LENGTH, REPO, run_main, run_script, tiny_mlm_args
from masked_lm import mask_tokens

BANKING77 = REPO / "tests" / "data" / "banking77"
# The discriminator of the check: hidden 32, embeddings of 16; its generator a quarter as wide (hidden 8).
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=MAX_LENGTH)
SHARED = ["word_embeddings/weight", "token_type_embeddings/embeddings", "position_embeddings/embeddings",
          "embeddings/LayerNorm/gamma", "embeddings/LayerNorm/beta"]


def build_pair(config):
    discriminator, generator = TFElectraForPreTraining(config), TFElectraForMaskedLM(generator_config(config, 0.25))
    discriminator.build_in_name_scope()
    generator.build_in_name_scope()
    return discriminator, generator


def test_a_sampled_original_token_is_labelled_original():
    # Positions 1, 3 and 4 of the row were chosen (labels), position 4 kept its token; masked_positions lists them and
    # pads with the unchosen position 0. The generator's logits all but force its samples: the original token at 1 and
    # 4, another one at 3, and another at the padding position 0, which must change nothing.
    mask = 1
    input_ids = tf.constant([[5, mask, 7, mask, 9, 10]])
    labels = tf.constant([[-100, 6, -100, 8, 9, -100]])
    masked_positions = tf.constant([[1, 3, 4, 0]])
    forced = [6, 12, 9, 15]
    logits = tf.one_hot([forced], depth=20) * 1e4
    replaced_ids, replaced_labels, sampled = replace_tokens(input_ids, labels, masked_positions, logits,
                                                            tf.constant([0, 0], tf.int64))
    assert sampled.numpy().tolist() == [forced]
    assert replaced_ids.numpy().tolist() == [[5, 6, 7, 12, 9, 10]]
    assert replaced_labels.numpy().tolist() == [[0, 0, 0, 1, 0, 0]]

    # On a masked batch of a vocabulary of 3, where the generator's uniform samples often hit the original token:
    # a label is 1 exactly where the discriminator's input differs from the original text.
    original = tf.random.stateless_uniform([16, 32], [1, 2], minval=2, maxval=5, dtype=tf.int32)
    batch = mask_tokens(original, tf.constant([3, 4], tf.int64), mask_token_id=mask, special_token_ids=[0, mask],
                        vocab_size=5, mlm_probability=0.5, max_predictions=24, mask_share=0.85, random_share=0.0)
    chosen = batch["labels"] != -100
    # ELECTRA's replacement: <mask> or the token itself, never a random one.
    assert tf.reduce_all((batch["input_ids"] == original) | (chosen & (batch["input_ids"] == mask)))
    replaced_ids, replaced_labels, _ = replace_tokens(batch["input_ids"], batch["labels"], batch["masked_positions"],
                                                      tf.zeros([16, 24, 5]) + [-1e4, -1e4, 0.0, 0.0, 0.0],
                                                      tf.constant([5, 6], tf.int64))
    differs = (replaced_ids != original).numpy()
    assert (replaced_labels.numpy() == differs).all()
    assert not differs[~chosen.numpy()].any()  # Only chosen positions change...
    assert 0.2 < differs[chosen.numpy()].mean() < 0.9  # ... about two thirds of them: the rest sampled the original.

    # Whole words and spans take the same replacement: <mask> or the token itself.
    word_starts = np.array([True, True, True, False, True])
    for spans in (False, True):
        words = mask_tokens(original, tf.constant([5, 6], tf.int64), mask_token_id=mask, special_token_ids=[0, mask],
                            vocab_size=5, mlm_probability=0.3, max_predictions=24, word_starts=word_starts,
                            spans=spans, mask_share=0.85, random_share=0.0)
        chosen = words["labels"] != -100
        assert tf.reduce_any(chosen & (words["input_ids"] == mask))
        assert tf.reduce_all((words["input_ids"] == original) | (chosen & (words["input_ids"] == mask)))


def test_the_shared_embeddings_are_one_variable_each_with_one_gradient():
    discriminator, generator = build_pair(ElectraConfig(vocab_size=50, **TINY))
    generator_only = len(generator.trainable_variables)
    trainer = ElectraTrainer(discriminator, generator)
    assert generator.generator_lm_head.input_embeddings is discriminator.electra.embeddings
    assert generator.get_input_embeddings() is discriminator.electra.embeddings
    shared = [v for v in generator.trainable_variables if any(v is w for w in discriminator.trainable_variables)]
    assert sorted(name for name in SHARED if any(name in v.name for v in shared)) == sorted(SHARED)
    assert len(shared) == len(SHARED)
    # Every variable once: the discriminator's and the generator's own (its encoder's projection 16 -> 8, layers,
    # head), not a second copy of the embeddings.
    variables = trainer.trained_variables
    assert len({id(v) for v in variables}) == len(variables) == len(discriminator.trainable_variables) \
        + generator_only - len(SHARED)
    assert any("embeddings_project" in v.name for v in generator.trainable_variables)

    batch = mask_tokens(tf.random.stateless_uniform([4, 16], [7, 8], minval=3, maxval=50, dtype=tf.int32),
                        tf.constant([1, 2], tf.int64), mask_token_id=2, special_token_ids=[0, 1, 2], vocab_size=50,
                        mlm_probability=0.3, max_predictions=8, mask_share=0.85, random_share=0.0)
    batch["attention_mask"] = tf.ones([4, 16], tf.int32)
    gradients, sums = trainer._compute_gradients(batch, tf.constant([sums_count(batch), 64.0]),
                                                 tf.constant([0, 0], tf.int64))
    assert len(gradients) == len(variables)
    norms = {v.name: float(tf.norm(g)) for v, g in zip(variables, gradients)}
    assert all(norm > 0 for norm in norms.values()), [name for name, norm in norms.items() if norm == 0]
    assert sums["masked_count"] == sums_count(batch) and sums["token_count"] == 64


def test_the_step_compiled_with_xla_computes_the_same_gradients():
    # Without dropout, the same batch gives the same gradients, with two micro-batches, compiled or not. XLA draws
    # other random numbers from the same seed, so the generator's output bias all but fixes its samples: the
    # original token of a masked position, which is then labelled original, and another token elsewhere.
    config = ElectraConfig(vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **TINY)
    discriminator, generator = build_pair(config)
    batch = mask_tokens(tf.random.stateless_uniform([4, 16], [7, 8], minval=3, maxval=50, dtype=tf.int32),
                        tf.constant([1, 2], tf.int64), mask_token_id=2, special_token_ids=[0, 1, 2], vocab_size=50,
                        mlm_probability=0.3, max_predictions=8, mask_share=0.85, random_share=0.0)
    batch["attention_mask"] = tf.ones([4, 16], tf.int32)
    token = int(tf.boolean_mask(batch["labels"], batch["labels"] != -100)[0])  # The original of a masked position.
    generator.generator_lm_head.bias.assign(tf.one_hot(token, 50) * 100)
    plain = ElectraTrainer(discriminator, generator, gradient_accumulation_steps=2)
    compiled = ElectraTrainer(discriminator, generator, gradient_accumulation_steps=2, jit_compile=True)
    counts, seed = tf.constant([sums_count(batch), 64.0]), tf.constant([3, 4], tf.int64)
    expected, expected_sums = plain.compute_gradients(batch, counts, seed)
    gradients, sums = compiled.compute_gradients(batch, counts, seed)
    assert all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(expected, gradients))
    assert 0 < expected_sums["replaced_count"] < expected_sums["masked_count"]
    assert {name: float(value) for name, value in sums.items()} == pytest.approx(
        {name: float(value) for name, value in expected_sums.items()}, rel=1e-4)


def test_the_discriminator_learns_to_find_replacements_that_the_text_gives_away():
    # Each row repeats one token, so a replaced token is the one that differs from its row: the discriminator
    # learns to find them within 200 steps unless its input, labels or gradients are wrong (a 2-layer discriminator
    # on real text sits at the prior for thousands of steps: benchmarks/electra.md).
    config = ElectraConfig(vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **TINY)
    trainer = ElectraTrainer(*build_pair(config))

    def batch(step):
        row_tokens = tf.random.stateless_uniform([32, 1], [step, 0], minval=3, maxval=50, dtype=tf.int32)
        masked = mask_tokens(tf.broadcast_to(row_tokens, [32, 16]), tf.stack([step, 1]), mask_token_id=2,
                             special_token_ids=[0, 1, 2], vocab_size=50, mlm_probability=0.15, max_predictions=4,
                             mask_share=0.85, random_share=0.0)
        return {**masked, "attention_mask": tf.ones([32, 16], tf.int32)}

    trainer.compile(optimizer=keras.optimizers.Adam(2e-3))
    history = trainer.fit(tf.data.Dataset.range(200).map(batch), epochs=2, steps_per_epoch=100, verbose=0).history
    # At about 13 % replaced, the prior costs 0.39 nats per token. Over five initial weights, the second 100 steps
    # gained 0.36 to 0.39 nats and found 93 to 98 % of the replaced tokens.
    assert history["nats_beyond_prior"][-1] > 0.2 and history["replaced_accuracy"][-1] > 0.8, history


def test_nats_beyond_prior_is_the_loss_of_a_constant_guess_of_the_share_replaced_less_the_discriminators():
    trainer = ElectraTrainer(*build_pair(ElectraConfig(vocab_size=50, **TINY)))
    sums = {name: tf.constant(0.0) for name in ("generator_cross_entropy", "generator_correct", "discriminator_correct",
                                                "replaced_correct", "original_correct", "original_count",
                                                "masked_count")}
    # 20 of 100 tokens replaced: the constant guess of 0.2 costs 0.5004 nats per token; the discriminator 0.3.
    sums.update(token_count=tf.constant(100.0), replaced_count=tf.constant(20.0),
                discriminator_cross_entropy=tf.constant(30.0))
    trainer.update_metrics(sums, tf.constant([1.0, 100.0]))
    assert float(trainer.trackers["nats_beyond_prior"].result()) == \
        pytest.approx(-0.2 * np.log(0.2) - 0.8 * np.log(0.8) - 0.3)
    # A batch with nothing replaced: the constant guess is exact, and a loss above it is below 0.
    sums.update(replaced_count=tf.constant(0.0), discriminator_cross_entropy=tf.constant(10.0))
    trainer.reset_metrics()
    trainer.update_metrics(sums, tf.constant([1.0, 100.0]))
    assert float(trainer.trackers["nats_beyond_prior"].result()) == pytest.approx(-0.1)


def test_a_model_that_learned_nothing_from_the_context_is_told_so_at_the_end(caplog):
    from run_folder import warn_if_nothing_learned_from_context

    # At 13 % replaced, the constant guess costs 0.388 nats per token: a tenth of it is 0.039.
    for final, said in (({"nats_beyond_frequency": 0.05}, "barely better than a table of token frequencies"),
                        ({"nats_beyond_frequency": 0.5}, None),
                        ({"nats_beyond_prior": -0.004, "replaced_share": 0.13}, "worse than a constant guess"),
                        ({"nats_beyond_prior": 0.03, "replaced_share": 0.13}, "(+0.030 nats per token, 8 % of"),
                        ({"nats_beyond_prior": 0.05, "replaced_share": 0.13}, None)):
        caplog.clear()
        warn_if_nothing_learned_from_context({"final_eval": final})
        assert (said in caplog.text) if said else not caplog.text, final


def sums_count(batch):
    return float(tf.reduce_sum(tf.cast(batch["labels"] != -100, tf.float32)))


def test_flops_per_token_of_both_networks_against_a_hand_count():
    # The discriminator: hidden 4, embeddings 2, feed-forward 8, 2 layers, vocabulary 10; its generator half as wide:
    # hidden 2 (= its embeddings: no projection), feed-forward 4, 1 head. Samples of 16 tokens, the generator's LM
    # head at 4 of them. Multiply-adds of the forward pass per token:
    #   generator      each layer: 4 x 2x2 = 16, feed-forward 2x4 + 4x2 = 16, attention 2 x 16 x 2 = 64: 96
    #                  LM head at 4 of 16: (dense 2x2 + vocabulary 2x10) / 4 = 6
    #   discriminator  projection 2x4 = 8; each layer: 4 x 4x4 = 64, 4x8 + 8x4 = 64, attention 2 x 16 x 4 = 128: 256
    #                  its head at every position: dense 4x4 + 4x1 = 20
    # Training: 6 FLOPs per multiply-add.
    config = ElectraConfig(vocab_size=10, embedding_size=2, hidden_size=4, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=8, max_position_embeddings=16)
    generator = generator_config(config, 0.5)
    assert (generator.hidden_size, generator.intermediate_size, generator.num_attention_heads,
            generator.embedding_size, generator.num_hidden_layers) == (2, 4, 1, 2, 2)
    generator_count, discriminator_count = 2 * 96 + 6, 8 + 2 * 256 + 20
    assert electra_training_flops_per_token(config, generator, 16, 4) == 6 * (generator_count + discriminator_count)

    # The hand count's matrices are the models': the discriminator's head is a 4x4 and a 4x1 kernel.
    discriminator = TFElectraForPreTraining(config)
    discriminator.build_in_name_scope()
    head = sorted(int(w.shape.num_elements()) for w in discriminator.weights
                  if "discriminator_predictions" in w.name and w.name.endswith("kernel:0"))
    assert head == [4, 16]


@pytest.fixture(scope="module")
def electra_config_dir(tmp_path_factory):
    config_dir = tmp_path_factory.mktemp("tiny-electra")
    ElectraConfig(**TINY).save_pretrained(config_dir)
    return config_dir


def electra_args(shards_dir, tokenizer_dir, config_dir, output_dir, max_steps, evaluate=True):
    return [*tiny_mlm_args(shards_dir, tokenizer_dir, config_dir, output_dir), "--objective", "electra",
            *(["--eval_dataset", shards_dir / "validation"] if evaluate else []), "--max_steps", max_steps,
            "--eval_every_steps", 4, "--checkpoint_every_steps", 4]


def test_electra_run_resumes_saves_both_networks_exports_and_fine_tunes(shards_dir, tokenizer_dir, electra_config_dir,
                                                                        tmp_path):
    from run_folder import restore_last_checkpoint
    from transformers import create_optimizer

    from models import load_pytorch_weights

    model_dir = tmp_path / "electra"
    first = run_main("run_mlm.py", *electra_args(shards_dir, tokenizer_dir, electra_config_dir, model_dir, 4))
    assert "ELECTRA discriminator (hidden size 32) and generator (hidden size 8)" in first.stderr
    saved_at_4 = {name: TFElectraForMaskedLM.from_pretrained(model_dir / "generator")
                  if name == "generator" else TFElectraForPreTraining.from_pretrained(model_dir)
                  for name in ("generator", "discriminator")}

    # The checkpoint holds both networks: restored into new ones, each has the weights saved at that step.
    config = ElectraConfig.from_pretrained(model_dir / "checkpoints" / "config")
    trainer = ElectraTrainer(*build_pair(config))
    # The optimizer of the run: AdamWeightDecay, whose state the checkpoint holds.
    trainer.compile(optimizer=create_optimizer(init_lr=1e-3, num_train_steps=8, num_warmup_steps=1,
                                               weight_decay_rate=1e-3)[0])
    restore_last_checkpoint(argparse.Namespace(output_dir=str(model_dir), overwrite=False), trainer, False)
    assert int(trainer.optimizer.iterations.numpy()) == 4
    # Adam's moments of every variable of both, the shared ones once, came back too.
    assert all(np.abs(trainer.optimizer.get_slot(variable, "m").numpy()).max() > 0
               for variable in trainer.trained_variables)
    for name in ("generator", "discriminator"):
        saved = {strip(w.name): w.numpy() for w in saved_at_4[name].weights}
        restored = {strip(w.name): w.numpy() for w in getattr(trainer, name).weights}
        assert saved.keys() == restored.keys()
        assert all(np.array_equal(saved[key], restored[key]) for key in saved), name

    # The same command with more steps resumes from step 4, both networks with it.
    second = run_main("run_mlm.py", *electra_args(shards_dir, tokenizer_dir, electra_config_dir, model_dir, 8))
    assert f"Resuming from {model_dir}/checkpoints/ckpt-4, at step 4" in second.stderr
    assert "Steps 5 to 8 of 8" in second.stderr
    results = json.loads((model_dir / "training_results.json").read_text())
    assert results["saved_model_step"] == 8
    final, before = results["final_eval"], results["step_0_eval"]
    assert set(final) >= {"loss", "generator_loss", "generator_accuracy", "discriminator_loss",
                          "discriminator_accuracy", "replaced_accuracy", "original_accuracy", "replaced_share"}
    assert 0 < final["replaced_share"] < 0.15  # At most the 15 % masked, less those sampled as the original.
    assert final["discriminator_loss"] < before["discriminator_loss"]
    assert final["loss"] == pytest.approx(final["generator_loss"] + 50 * final["discriminator_loss"], rel=0.05)
    assert "nats_beyond_prior" in final
    assert "The discriminator tells replaced tokens from original ones" in second.stderr  # It learned nothing yet.
    # Resumed with another generator, or as a masked LM, it is refused before anything is built: its checkpoints hold
    # an ELECTRA pair, with a generator of hidden size 8.
    for flags, holds in ((["--generator_hidden_size", 0.5], "the generator's hidden_size=8 (this command: 16)"),
                         (["--objective", "mlm"], "--objective electra (this command: mlm)")):
        refused = run_main("run_mlm.py", *electra_args(shards_dir, tokenizer_dir, electra_config_dir, model_dir, 12),
                           *flags, expect_failure=True)
        assert f"checkpointed at step 8, of another model than this command's: {holds}" in refused.stderr
        assert "Model:" not in refused.stderr

    # What a user keeps: the discriminator, and beside it the generator, a fill-mask model of its own, their
    # embeddings the same; each with a PyTorch copy whose weights load back into the same model.
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    assert json.loads((model_dir / "generator" / "config.json").read_text())["architectures"] == \
        ["ElectraForMaskedLM"]
    assert "replaced-token detection" in (model_dir / "README.md").read_text()
    discriminator = TFElectraForPreTraining.from_pretrained(model_dir)
    generator = TFElectraForMaskedLM.from_pretrained(model_dir / "generator")
    assert np.array_equal(discriminator.get_input_embeddings().weight.numpy(),
                          generator.get_input_embeddings().weight.numpy())
    inputs = dict(input_ids=tf.constant([[3, 40, 50, 60, 4]]), attention_mask=tf.ones([1, 5], tf.int32))
    for model, folder in ((discriminator, model_dir), (generator, model_dir / "generator")):
        copy = type(model)(model.config)
        copy.build_in_name_scope()
        load_pytorch_weights(copy, [str(folder / "pytorch" / "model.safetensors")], str(folder))
        assert np.allclose(copy(**inputs).logits, model(**inputs).logits, atol=1e-5)
    from transformers import pipeline

    predictions = pipeline("fill-mask", model=str(model_dir / "generator"), framework="tf", dtype=None)(
        "The game was released in <mask> .")
    assert len(predictions) == 5

    # export_model.py makes the discriminator of the last checkpoint, step 8: the saved one.
    exported = tmp_path / "exported"
    run_main("export_model.py", model_dir / "checkpoints", "--output_dir", exported)
    assert json.loads((exported / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    assert np.allclose(TFElectraForPreTraining.from_pretrained(exported)(**inputs).logits,
                       discriminator(**inputs).logits)

    # Pre-training continues from the saved pair: before its first step, it evaluates as the run it continues ended.
    # Its generator's size is that of its weights, whatever --generator_hidden_size says: said in a warning.
    def continue_electra(start, output_dir, max_steps, *flags):
        return run_main("run_mlm.py", "--model_name_or_path", start, "--objective", "electra", "--train_dataset",
                        shards_dir / "train", "--max_length", MAX_LENGTH, "--per_replica_batch_size", 8,
                        "--max_steps", max_steps, "--warmup_steps", 0, "--input_check_seconds", 0, "--no_tpu",
                        "--output_dir", output_dir, *flags)

    continued = tmp_path / "continued"
    result = continue_electra(model_dir, continued, 3, "--eval_dataset", shards_dir / "validation",
                              "--generator_hidden_size", 0.5)
    assert f"--generator_hidden_size has no effect: the generator saved in {model_dir}/generator continues" \
        in result.stderr
    continued_results = json.loads((continued / "training_results.json").read_text())
    assert continued_results["step_0_eval"] == pytest.approx(final, rel=1e-4)
    assert (continued / "generator" / "tf_model.h5").exists()
    assert json.loads((continued / "generator" / "config.json").read_text())["hidden_size"] == 8
    # A discriminator without its generator (the exported folder) continues with a new one, of
    # --generator_hidden_size: said in a warning before anything is built.
    result = continue_electra(exported, tmp_path / "new-generator", 1, "--generator_hidden_size", 0.5)
    assert f"{exported} has no generator/ folder, where run_mlm.py saves the generator beside its discriminator: a " \
           "new generator starts from random weights, of hidden size 16 (--generator_hidden_size 0.5 of the " \
           "discriminator's 32)" in result.stderr
    assert result.stderr.index("a new generator starts from random weights") < result.stderr.index("Model:")
    assert json.loads((tmp_path / "new-generator" / "generator" / "config.json").read_text())["hidden_size"] == 16

    # The discriminator fine-tunes as a classifier.
    classifier_dir = tmp_path / "classifier"
    run_main("run_classification.py", "--model_name_or_path", model_dir, "--train_file", BANKING77 / "train.csv",
             "--test_file", BANKING77 / "test.csv", "--label_column", "category", "--max_length", 32,
             "--per_replica_batch_size", 8, "--num_epochs", 1, "--no_tpu", "--output_dir", classifier_dir)
    assert json.loads((classifier_dir / "eval_results.json").read_text())["test"]["num_examples"] > 0


def test_two_cpu_replicas_with_gradient_accumulation_and_bfloat16(shards_dir, tokenizer_dir, electra_config_dir,
                                                                  tmp_path):
    # The counts and losses all-reduced across replicas, the micro-batches, bfloat16. (XLA: the test above; compiling
    # this step on a CPU takes minutes.)
    model_dir = tmp_path / "electra"
    args = electra_args(shards_dir, tokenizer_dir, electra_config_dir, model_dir, 3, evaluate=False)
    result = run_script("run_mlm.py", *args,
                        "--num_cpu_replicas", 2, "--gradient_accumulation_steps", 2, "--bfloat16")
    assert "MirroredStrategy with 2 replica(s) on 1 host(s); global batch 32 (8 per replica x 2 replicas x 2 " \
           "accumulation steps); XLA off; bfloat16 mixed precision" in result.stderr
    results = json.loads((model_dir / "training_results.json").read_text())
    assert results["step"] == 3 and results["saved_model_step"] == 3
    final = results["final_train"]  # The last step's metrics.
    assert all(np.isfinite(value) for value in final.values()), final
    assert all(value >= 0 for name, value in final.items() if name != "nats_beyond_prior"), final  # It can be < 0.
    assert 0 < final["replaced_share"] < 0.15 and 0 < final["discriminator_accuracy"] <= 1
    # The loss is the generator's plus 50 times the discriminator's, whatever the replicas and micro-batches.
    assert final["loss"] == pytest.approx(final["generator_loss"] + 50 * final["discriminator_loss"], rel=0.05)


def strip(name):
    """A weight's name less its model's own (tf_electra_for_masked_lm/electra/... -> electra/...)."""
    return name.split("/", 1)[1]


def test_electra_needs_an_electra_config(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path):
    result = run_main("run_mlm.py", *tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path / "m"),
                      "--objective", "electra", "--max_steps", 2, expect_failure=True)
    assert "--objective electra trains an ELECTRA discriminator and generator, but" in result.stderr
    assert "is a roberta config" in result.stderr


# What Transformers 5 with PyTorch gives for the saved pair, run in PYTORCH_PYTHON: each network's loading report and
# logits on the same token ids.
TRANSFORMERS_5 = """
import json, sys
import torch, transformers

answers = {}
for name, model_class, folder, input_ids in json.loads(sys.argv[1]):
    model, report = getattr(transformers, model_class).from_pretrained(folder + "/pytorch", output_loading_info=True)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(input_ids), attention_mask=torch.ones(len(input_ids), len(input_ids[0]),
                                                                                 dtype=torch.long)).logits
    answers[name] = dict(report={key: list(value) for key, value in report.items()}, logits=logits.tolist())
json.dump(answers, sys.stdout)
"""


@pytest.mark.skipif(not os.environ.get("PYTORCH_PYTHON"),
                    reason="needs 🤗 Transformers 5 and PyTorch: `make test-pytorch` builds them and runs it")
def test_transformers_5_with_pytorch_loads_the_discriminator_and_the_generator_as_tensorflow_runs_them(
        shards_dir, tokenizer_dir, electra_config_dir, tmp_path):
    model_dir = tmp_path / "electra"
    run_main("run_mlm.py", *electra_args(shards_dir, tokenizer_dir, electra_config_dir, model_dir, 4, evaluate=False))
    input_ids = [[0, 40, 50, 4, 60, 70, 2], [0, 90, 4, 100, 110, 120, 2]]  # <s> ... <mask> ... </s>
    networks = [("discriminator", "ElectraForPreTraining", str(model_dir), input_ids),
                ("generator", "ElectraForMaskedLM", str(model_dir / "generator"), input_ids)]
    result = subprocess.run([os.environ["PYTORCH_PYTHON"], "-c", TRANSFORMERS_5, json.dumps(networks)],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    answers = json.loads(result.stdout)
    inputs = dict(input_ids=tf.constant(input_ids), attention_mask=tf.ones([2, 7], tf.int32))
    for name, model_class, folder, _ in networks:
        assert answers[name]["report"] == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [],
                                           "error_msgs": []}, name
        tensorflow = getattr(__import__("transformers"), "TF" + model_class).from_pretrained(folder)
        assert np.abs(np.array(answers[name]["logits"]) - tensorflow(**inputs).logits.numpy()).max() < 1e-4, name
