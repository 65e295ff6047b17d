"""Every architecture of the README's table (utils.ARCHITECTURES), on a tiny config, in this process: run_mlm.py's
trainer trains it with the LM head at the masked positions, under XLA, and that head gives the model's own logits;
a checkpoint restores it; run_classification.py's trainer fine-tunes the saved model; both saved folders answer in
🤗's TensorFlow pipelines (fill-mask, text-classification); and (make test-pytorch)
🤗 Transformers 5 loads its PyTorch copy, masked LM and classifier, with TensorFlow's logits on every real token."""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
import transformers
from transformers import (AutoConfig, AutoTokenizer, TFAutoModelForMaskedLM, TFAutoModelForSequenceClassification,
                          create_optimizer, pipeline)

from classifier import ClassifierTrainer
from devices import create_optimizer_state, set_seed
from helpers import MAX_LENGTH, REPO, own_cross_entropy
from masked_lm import MaskedLMTrainer, mask_tokens, start_from_token_frequencies
from models import ARCHITECTURES, save_model_folder, save_pytorch_copy

# Hidden 64, 2 layers; DeBERTa-v3's attention (relative positions, shared keys, buckets; run_mlm.py refuses DeBERTa
# v1's relative attention, which fails under XLA), and a smaller embedding where the models
# project it (ALBERT, ELECTRA, ConvBERT).
SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
             max_position_embeddings=MAX_LENGTH + 2)
OVERRIDES = {
    "distilbert": dict(dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=MAX_LENGTH),
    "albert": dict(embedding_size=32), "electra": dict(embedding_size=32), "convbert": dict(embedding_size=32),
    "deberta-v2": dict(relative_attention=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                       position_buckets=16, norm_rel_ebd="layer_norm", share_att_key=True),
}
TEXTS = ["The game was released in <mask> 2011 .", "He was born in the <mask> of London , England ."]


def tiny_config(model_type, tokenizer):
    sizes = OVERRIDES["distilbert"] if model_type == "distilbert" else {**SIZES, **OVERRIDES.get(model_type, {})}
    return AutoConfig.for_model(model_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **sizes)


def built(model_class, config):
    model = model_class.from_config(config)
    model.build_in_name_scope()
    return model


def masked_batches(tokenizer, count):
    """Batches of the tokenizer's real ids at random, <s> ... </s>, masked as run_mlm.py masks them."""
    batches = []
    for seed in range(count):
        ids = tf.random.stateless_uniform([8, MAX_LENGTH], [0, seed], minval=5, maxval=len(tokenizer), dtype=tf.int32)
        ids = tf.concat([tf.zeros([8, 1], tf.int32), ids[:, 1:-1], tf.fill([8, 1], 2)], axis=1)
        batch = mask_tokens(ids, tf.constant([1, seed], tf.int64), mask_token_id=tokenizer.mask_token_id,
                            special_token_ids=tokenizer.all_special_ids, vocab_size=len(tokenizer),
                            mlm_probability=0.15, max_predictions=16)
        batches.append({**batch, "attention_mask": tf.ones_like(ids)})
    return batches


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_trains_with_the_gathered_head_under_xla_resumes_and_fine_tunes(model_type, tokenizer_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = tiny_config(model_type, tokenizer)
    # No dropout in the encoders, and seeded weights and dropout masks in the classifiers' heads: the same steps
    # whichever tests ran before in this process.
    config.update(dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, dropout=0.0, attention_dropout=0.0))
    set_seed(0)
    mlm = built(TFAutoModelForMaskedLM, config)
    start_from_token_frequencies(mlm, np.log(np.full(len(tokenizer), 1 / len(tokenizer), np.float32)))
    trainer = MaskedLMTrainer(mlm, tokenizer.mask_token_id, jit_compile=True)
    batches = masked_batches(tokenizer, 3)

    # The head at the masked positions computes what the model's own call computes there.
    full_batch = {name: value for name, value in batches[0].items() if name != "masked_positions"}
    gathered, full = trainer.sums(batches[0], seed=None), trainer.sums(full_batch, seed=None)
    assert float(gathered["count"]) == float(full["count"]) > 10
    np.testing.assert_allclose(float(gathered["cross_entropy"]), float(full["cross_entropy"]), rtol=1e-5)
    np.testing.assert_allclose(float(gathered["cross_entropy"]), own_cross_entropy(mlm, full_batch), rtol=1e-5)

    optimizer, _ = create_optimizer(init_lr=1e-2, num_train_steps=10, num_warmup_steps=0, weight_decay_rate=1e-3)
    trainer.compile(optimizer=optimizer)
    create_optimizer_state(optimizer, mlm.trainable_variables)  # As the scripts do.
    dataset = tf.data.Dataset.from_tensor_slices({name: tf.stack([batch[name] for batch in batches])
                                                  for name in batches[0]})
    losses = trainer.fit(dataset.repeat(), steps_per_epoch=3, epochs=2, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and losses[1] < losses[0]

    # A checkpoint as run_mlm.py writes it restores every weight into a new model (the optimizer's state is not
    # the architecture's: tests/test_run_mlm.py resumes runs).
    path = tf.train.Checkpoint(model=mlm, optimizer=optimizer).save(str(tmp_path / "checkpoints" / "ckpt"))
    restored = built(TFAutoModelForMaskedLM, config)
    tf.train.Checkpoint(model=restored).restore(path).expect_partial()
    assert all(np.array_equal(a, b) for a, b in zip(restored.get_weights(), mlm.get_weights()))

    # Saved as run_mlm.py saves it, then fine-tuned as run_classification.py fine-tunes it: the encoder's weights
    # are the pre-trained ones, and it learns.
    folder = tmp_path / "model"
    save_model_folder(mlm, tokenizer, folder)
    assert (folder / "pytorch" / "model.safetensors").exists()
    classifier = TFAutoModelForSequenceClassification.from_pretrained(folder, num_labels=3)
    embeddings = {w.name.split("/", 1)[1]: w.numpy() for w in mlm.weights if "word_embeddings" in w.name}
    assert embeddings and all(np.array_equal(w.numpy(), embeddings[w.name.split("/", 1)[1]])
                              for w in classifier.weights if "word_embeddings" in w.name)
    features = dict(tokenizer(TEXTS * 4, padding="max_length", max_length=MAX_LENGTH, return_tensors="np",
                              return_token_type_ids=False))
    data = tf.data.Dataset.from_tensors((features, np.arange(8) % 3, np.ones(8, np.float32))).repeat()
    classifier_trainer = ClassifierTrainer(classifier)
    classifier_trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    create_optimizer_state(classifier_trainer.optimizer, classifier.trainable_variables)
    losses = classifier_trainer.fit(data, steps_per_epoch=4, epochs=2, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and losses[1] < losses[0]

    # Both saved folders answer in 🤗's TensorFlow pipelines: their tokenizers give only the inputs the model takes
    # (DistilBERT and MPNet take no token_type_ids).
    classifier_folder = tmp_path / "classifier"
    save_model_folder(classifier, tokenizer, classifier_folder)
    fill_mask = pipeline("fill-mask", model=str(folder), framework="tf", dtype=None)
    assert len(fill_mask(TEXTS[0], top_k=3)) == 3
    classify = pipeline("text-classification", model=str(classifier_folder), framework="tf", dtype=None)
    assert classify(TEXTS[1])[0]["label"] in {"LABEL_0", "LABEL_1", "LABEL_2"}


@pytest.mark.fast
@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.json")), ids=lambda path: path.name)
def test_every_shipped_config_is_a_tested_architecture_with_a_tensorflow_class(path):
    # What --pretrained_model_config configs/… builds: the model type of the README's table, and a TF class of
    # Transformers 4.57 for the architecture the file names (the class that the saved config then names).
    config = AutoConfig.from_pretrained(path)
    assert config.model_type in ARCHITECTURES
    assert hasattr(transformers, "TF" + config.architectures[0]), config.architectures


@pytest.mark.fast
def test_deberta_v1_with_relative_attention_is_refused_and_an_untested_type_is_warned_of(tokenizer_dir, tmp_path,
                                                                                        caplog):
    import argparse

    from run_mlm import model_config
    from utils import UserError

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config_dir = tmp_path / "config"
    tiny_config("deberta", tokenizer).save_pretrained(config_dir)
    args = argparse.Namespace(model_name_or_path=None, pretrained_model_config=str(config_dir), max_length=MAX_LENGTH,
                              config_overrides="relative_attention=True", objective="mlm")
    with pytest.raises(UserError, match=r"DeBERTa \(v1\) with relative_attention=True does not train under XLA.*Use "
                                        r"deberta-v2 \(configs/deberta-v3-base.json\), or add "
                                        r"relative_attention=False to --config_overrides"):
        model_config(args, tokenizer)
    assert model_config(argparse.Namespace(**{**vars(args), "config_overrides": None}), tokenizer).model_type == \
        "deberta" and "not among the architectures tested" not in caplog.text

    AutoConfig.for_model("roformer", **SIZES).save_pretrained(config_dir)
    assert model_config(argparse.Namespace(**{**vars(args), "config_overrides": None}), tokenizer).model_type == \
        "roformer"
    assert "roformer is not among the architectures tested with this pipeline" in caplog.text
    assert "it gets no PyTorch copy" in caplog.text


# What Transformers 5 answers, run in PYTORCH_PYTHON: each model's loading report and logits.
TRANSFORMERS_5 = """
import json, sys
import torch, transformers

inputs = {name: torch.tensor(value) for name, value in json.loads(sys.argv[1]).items()}
answers = {}
for folder, model_class in json.loads(sys.argv[2]):
    model, report = getattr(transformers, model_class).from_pretrained(folder, output_loading_info=True)
    with torch.no_grad():
        answers[folder] = dict(report={key: sorted(value) for key, value in report.items() if value},
                               logits=model(**inputs).logits.tolist())
json.dump(answers, sys.stdout)
"""


@pytest.mark.skipif(not os.environ.get("PYTORCH_PYTHON"),
                    reason="needs 🤗 Transformers 5 and PyTorch: `make test-pytorch` builds them and runs it")
def test_transformers_5_loads_every_architecture_with_tensorflows_logits(tokenizer_dir, tmp_path):
    # Random weights of a large scale (LayerNorm scales around 1), so that a weight misplaced shows in the logits.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    inputs = dict(tokenizer(TEXTS, padding=True, return_tensors="np", return_token_type_ids=False))
    assert inputs["attention_mask"].min() == 0  # Texts of different lengths: padding, which no loss reads.
    rng = np.random.default_rng(0)
    expected, models = {}, []
    for model_type in ARCHITECTURES:
        for model_class in (TFAutoModelForMaskedLM, TFAutoModelForSequenceClassification):
            model = built(model_class, tiny_config(model_type, tokenizer))
            for weight in model.weights:
                is_scale = weight.name.endswith("gamma:0")
                weight.assign(rng.normal(1.0 if is_scale else 0.0, 0.2, weight.shape))
            folder = str(tmp_path / f"{model_type}-{model_class.__name__}")
            save_pytorch_copy(model, tokenizer, folder)
            expected[folder + "/pytorch"] = model(inputs, training=False).logits.numpy()
            models.append((folder + "/pytorch", type(model).__name__.removeprefix("TF")))
    result = subprocess.run([os.environ["PYTORCH_PYTHON"], "-c", TRANSFORMERS_5,
                             json.dumps({name: value.tolist() for name, value in inputs.items()}),
                             json.dumps(models)], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    answers = json.loads(result.stdout)
    real = inputs["attention_mask"].astype(bool)
    for folder, _ in models:
        logits, tensorflow = np.array(answers[folder]["logits"]), expected[folder]
        assert answers[folder]["report"] == {}, (folder, answers[folder]["report"])
        differences = np.abs(logits - tensorflow)[real] if tensorflow.ndim == 3 else np.abs(logits - tensorflow)
        assert tensorflow.std() > 0.1 and differences.max() < 1e-4, (folder, differences.max())
