"""Pre-training on sentence pairs (run_mlm.py --objective nsp and sop; masked_lm.make_pairs and SentencePairTrainer):
the pairs in the tokenizer's own layout, the loss of both heads, and tiny BERT and ALBERT runs end to end: trained,
resumed, saved with their pooler and pair head, exported from a checkpoint, continued, fine-tuned from the pooler
they learned; and (make test-pytorch) their PyTorch copies in 🤗 Transformers 5."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from transformers import AlbertConfig, AutoTokenizer, BertConfig, TFAutoModelForPreTraining

from helpers import MAX_LENGTH, REPO, run_main, run_script, tiny_mlm_args
from masked_lm import SentencePairTrainer, make_pairs, mask_tokens, pair_template
from models import with_typed_pairs

BANKING77 = REPO / "tests" / "data" / "banking77"
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=MAX_LENGTH)
# This pipeline's tokenizers lay a pair out as RoBERTa's, <s> A </s></s> B </s>, of one token type; BERT's WordPiece
# tokenizers as [CLS] A [SEP] B [SEP], B of type 1.
ROBERTA_LAYOUT = ([0, -1, 2, 2, -1, 2], [0] * 6)
BERT_LAYOUT = ([101, -1, 102, -1, 102], [0, 0, 0, 1, 1])


def stream_batch(num_samples=64, length=24):
    """Consecutive samples of a token stream whose ids say where they came from: sample i holds 1000 + 100 i + j."""
    ids = 1000 + 100 * np.arange(num_samples)[:, None] + np.arange(length)[None]
    return {"input_ids": tf.constant(ids, tf.int32), "attention_mask": tf.ones([num_samples, length], tf.int32)}


@pytest.mark.fast
@pytest.mark.parametrize("template", [ROBERTA_LAYOUT, BERT_LAYOUT])
@pytest.mark.parametrize("sentence_order", [False, True])
def test_a_pair_is_a_sample_cut_in_two_in_the_tokenizers_layout_half_of_them_changed(template, sentence_order):
    batch = stream_batch()
    pairs = make_pairs(batch, tf.constant([3, 4], tf.int64), template=template, sentence_order=sentence_order)
    ids, types, labels = (pairs[name].numpy() for name in ("input_ids", "token_type_ids", "pair_labels"))
    assert ids.shape == types.shape == (64, 24) and (pairs["attention_mask"].numpy() == 1).all()
    assert 20 < labels.sum() < 44  # Half of them changed, 32 expected.
    specials, special_types = zip(*[(token, t) for token, t in zip(*template) if token != -1])
    content_length = 24 - len(specials)
    first_lengths = set()
    for row, row_types, label, sample in zip(ids, types, labels, range(64)):
        is_special = row < 1000
        assert tuple(row[is_special]) == specials and tuple(row_types[is_special]) == special_types
        # The specials where the template has them: before A, between A and B, after B.
        first = np.flatnonzero(is_special[1:])[0]  # A's length: the tokens before the next special.
        segments = [row[1:1 + first], row[~is_special][first:]]
        first_lengths.add(first)
        assert all(len(segment) >= 1 for segment in segments)
        # The segments' token types: the template's for A and for B.
        assert (row_types[1:1 + first] == template[1][1]).all()
        assert (row_types[~is_special][first:] == template[1][template[0].index(-1, 2)]).all()
        own = 1000 + 100 * sample + np.arange(content_length)
        if label == 0:  # A then B, the sample's first tokens in their order.
            assert (row[~is_special] == own).all()
        elif sentence_order:  # B then A.
            assert (np.concatenate(segments[::-1]) == own).all()
        else:  # A, then the same stretch of the next sample.
            next_sample = 1000 + 100 * ((sample + 1) % 64) + np.arange(content_length)
            assert (segments[0] == own[:first]).all() and (segments[1] == next_sample[first:]).all()
    assert len(first_lengths) > 10  # The cut falls anywhere.


@pytest.mark.fast
def test_the_pair_template_is_the_tokenizers_own_its_second_text_typed_for_models_with_token_types(tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert pair_template(tokenizer) == ([0, -1, 2, 2, -1, 2], [0] * 6)
    # The pair as the tokenizer encodes it, and as make_pairs lays out a sample cut after its second token.
    texts = tokenizer("The game", "was released"), tokenizer("The game was released")
    ids = texts[1]["input_ids"][1:-1]
    assert texts[0]["input_ids"] == [0, *ids[:2], 2, 2, *ids[2:], 2]
    # For BERT and ALBERT, B and the separators from the second on are of type 1, as in BERT's own tokenizers; single
    # texts as before, and a tokenizer typed already is kept.
    typed = with_typed_pairs(tokenizer)
    assert pair_template(typed) == ([0, -1, 2, 2, -1, 2], [0, 0, 0, 1, 1, 1])
    assert typed("The game", "was released")["token_type_ids"] == [0] * 4 + [1] * 5
    assert typed("The game was released")["input_ids"] == texts[1]["input_ids"]
    assert with_typed_pairs(typed) is typed and tokenizer("a", "b")["token_type_ids"] == [0] * 6


def tiny_pair_model(config_class, **overrides):
    config = config_class(vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          **{**TINY, **overrides})
    model = TFAutoModelForPreTraining.from_config(config)
    model.build_in_name_scope()
    return model


def masked_pair_batch():
    """8 pairs of 20 tokens in BERT's layout, masked for a vocabulary of 50 whose <mask> is 4."""
    pairs = make_pairs({"input_ids": tf.random.stateless_uniform([8, 20], [1, 2], minval=5, maxval=50,
                                                                 dtype=tf.int32),
                        "attention_mask": tf.ones([8, 20], tf.int32)}, tf.constant([5, 6], tf.int64),
                       template=([0, -1, 2, -1, 2], [0, 0, 0, 1, 1]), sentence_order=True)
    return {**pairs, **mask_tokens(pairs["input_ids"], tf.constant([7, 8], tf.int64), mask_token_id=4,
                                   special_token_ids=[0, 1, 2, 3, 4], vocab_size=50, mlm_probability=0.3,
                                   max_predictions=8)}


@pytest.mark.parametrize("config_class, pair_loss_weight", [(BertConfig, None), (AlbertConfig, 0.3)])
def test_the_loss_is_the_masked_lms_mean_plus_the_pair_heads_weighted_mean_as_the_models_own_call_gives_them(
        config_class, pair_loss_weight):
    # No dropout (ALBERT's pair head has its own): the micro-batches must give what one batch gives.
    model = tiny_pair_model(config_class, **({"embedding_size": 16, "classifier_dropout_prob": 0.0}
                                             if config_class is AlbertConfig else {}))
    batch = masked_pair_batch()
    trainer = SentencePairTrainer(model, 4, gradient_accumulation_steps=2,
                                  **({} if pair_loss_weight is None else {"pair_loss_weight": pair_loss_weight}))
    counts = trainer.counts(batch)
    sums = trainer.sums(batch, seed=None)
    # The model's own call: the LM head at every position, the pair head on the pooled <s>.
    outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"])
    pair_logits = outputs.seq_relationship_logits if config_class is BertConfig else outputs.sop_logits
    chosen = batch["labels"] != -100
    masked_lm = tf.reduce_mean(tf.boolean_mask(tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.where(chosen, batch["labels"], 0), outputs.prediction_logits), chosen))
    pair = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(batch["pair_labels"], pair_logits))
    assert float(trainer.training_loss(sums, counts)) == pytest.approx(  # BERT's and ALBERT's own sum by default.
        float(masked_lm + (pair_loss_weight or 1) * pair), rel=1e-5)
    # Two micro-batches: the same sums, and gradients that reach both heads and the pooler.
    gradients, step_sums = trainer._compute_gradients(batch, counts, tf.constant([0, 0], tf.int64))
    assert float(step_sums["pair_cross_entropy"]) == pytest.approx(float(sums["pair_cross_entropy"]), rel=1e-5)
    norms = {variable.name: float(tf.norm(gradient))
             for variable, gradient in zip(model.trainable_variables, gradients)}
    for layer in ("pooler", "seq_relationship" if config_class is BertConfig else "sop_classifier", "predictions"):
        assert any(norm > 0 for name, norm in norms.items() if layer in name), layer


def test_the_pair_loss_joins_after_the_ramps_first_step_and_has_its_whole_weight_from_the_last():
    trainer = SentencePairTrainer(tiny_pair_model(BertConfig), 4, pair_loss_weight=0.5, pair_loss_ramp=(10, 30))
    trainer.compile(optimizer=keras.optimizers.Adam())
    weights = {}
    for steps_done in (0, 9, 10, 19, 29, 100):
        trainer.optimizer.iterations.assign(steps_done)
        weights[steps_done + 1] = float(trainer.pair_weight())  # That of the step being taken.
    assert weights == pytest.approx({1: 0, 10: 0, 11: 0.025, 20: 0.25, 30: 0.5, 101: 0.5})

    # In the compiled training step: before the pair loss joins, the pair head gets no gradient and stays as it was
    # (Adam without weight decay); once it has joined, it learns. The masked LM learns throughout.
    model = tiny_pair_model(BertConfig)
    trainer = SentencePairTrainer(model, 4, jit_compile=True, pair_loss_ramp=(5, 5))
    trainer.compile(optimizer=keras.optimizers.Adam(1e-2))
    batches = tf.data.Dataset.from_tensors(masked_pair_batch()).repeat()
    pair_head, lm_bias = model.nsp.seq_relationship.kernel, model.mlm.predictions.bias
    for steps_done, pair_head_learns in ((0, False), (4, False), (5, True)):
        trainer.optimizer.iterations.assign(steps_done)
        before = pair_head.numpy(), lm_bias.numpy()
        trainer.fit(batches, steps_per_epoch=1, verbose=0)
        assert (pair_head.numpy() != before[0]).any() == pair_head_learns, steps_done
        assert (lm_bias.numpy() != before[1]).any(), steps_done


@pytest.fixture(scope="module")
def bert_config_dir(tmp_path_factory):
    config_dir = tmp_path_factory.mktemp("tiny-bert")
    BertConfig(**TINY).save_pretrained(config_dir)
    return config_dir


def pair_args(shards_dir, tokenizer_dir, config_dir, output_dir, max_steps, objective="nsp", eval_every=4):
    return [*tiny_mlm_args(shards_dir, tokenizer_dir, config_dir, output_dir), "--objective", objective,
            "--eval_dataset", shards_dir / "validation", "--max_steps", max_steps, "--eval_every_steps", eval_every,
            "--checkpoint_every_steps", 4]


def test_a_bert_run_with_next_sentence_prediction_resumes_saves_exports_continues_and_fine_tunes(
        shards_dir, tokenizer_dir, bert_config_dir, tmp_path):
    from transformers import TFBertForPreTraining, TFBertForSequenceClassification

    model_dir = tmp_path / "nsp"
    run_main("run_mlm.py", *pair_args(shards_dir, tokenizer_dir, bert_config_dir, model_dir, 4))
    second = run_main("run_mlm.py", *pair_args(shards_dir, tokenizer_dir, bert_config_dir, model_dir, 8))
    assert f"Resuming from {model_dir}/checkpoints/ckpt-4, at step 4" in second.stderr
    results = json.loads((model_dir / "training_results.json").read_text())
    assert results["saved_model_step"] == 8 and results["objective"] == "nsp"
    final = results["final_eval"]
    assert {"loss", "masked_lm_loss", "pair_loss", "pair_accuracy", "nats_beyond_frequency"} <= set(final)
    assert final["loss"] == pytest.approx(final["masked_lm_loss"] + final["pair_loss"], rel=0.05)
    assert 0 < final["pair_accuracy"] < 1
    assert "next-sentence prediction" in (model_dir / "README.md").read_text()
    # Its tokenizer, and that beside its checkpoints, type pairs as pre-training did: B of type 1.
    for folder in (model_dir, model_dir / "checkpoints" / "config"):
        assert AutoTokenizer.from_pretrained(folder)("a", "b")["token_type_ids"][-2:] == [1, 1]

    # Resumed with the other pair objective, or as a masked LM, it is refused before anything is built.
    for objective in ("sop", "mlm"):
        refused = run_main("run_mlm.py", *pair_args(shards_dir, tokenizer_dir, bert_config_dir, model_dir, 12,
                                                     objective), expect_failure=True)
        assert f"of another model than this command's: --objective nsp (this command: {objective})" \
            in refused.stderr

    # The saved model keeps its pooler and pair head; export_model.py makes the same of the last checkpoint.
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    saved = TFBertForPreTraining.from_pretrained(model_dir)
    exported = tmp_path / "exported"
    run_main("export_model.py", model_dir, "--output_dir", tmp_path / "exported")
    run_main("export_model.py", model_dir / "checkpoints", "--output_dir", exported, "--overwrite")
    inputs = dict(input_ids=tf.constant([[0, 40, 4, 2, 2, 60, 70, 2]]), attention_mask=tf.ones([1, 8], tf.int32))
    assert np.allclose(TFBertForPreTraining.from_pretrained(exported)(**inputs).seq_relationship_logits,
                       saved(**inputs).seq_relationship_logits)

    # Pre-training continues from the saved model, pair head and all: it evaluates as the run ended. With the pair
    # loss weighed 0 (the masked LM alone, on pairs), the loss that trains is the masked LM's.
    continued = tmp_path / "continued"
    run_main("run_mlm.py", "--model_name_or_path", model_dir, "--objective", "nsp", "--pair_loss_weight", 0,
             "--train_dataset", shards_dir / "train", "--eval_dataset", shards_dir / "validation", "--max_length",
             MAX_LENGTH, "--per_replica_batch_size", 8, "--max_steps", 1, "--warmup_steps", 0, "--input_check_seconds",
             0, "--no_tpu", "--output_dir", continued)
    continued_eval = json.loads((continued / "training_results.json").read_text())["step_0_eval"]
    assert continued_eval.pop("loss") == pytest.approx(continued_eval["masked_lm_loss"], rel=0.02)
    assert continued_eval == pytest.approx({name: value for name, value in final.items() if name != "loss"}, rel=1e-4)
    assert "pair loss weight 0.0)" in (continued / "README.md").read_text()
    # A masked LM continues on pairs with a new pooler and pair head, said in a warning.
    from transformers import TFBertForMaskedLM

    from models import save_model_folder

    masked_lm = TFBertForMaskedLM(BertConfig.from_pretrained(model_dir))
    masked_lm.build_in_name_scope()
    save_model_folder(masked_lm, AutoTokenizer.from_pretrained(tokenizer_dir), str(tmp_path / "masked-lm"))
    result = run_main("run_mlm.py", "--model_name_or_path", tmp_path / "masked-lm", "--objective", "sop",
                      "--train_dataset", shards_dir / "train", "--max_length", MAX_LENGTH, "--max_steps", 1,
                      "--warmup_steps", 0, "--input_check_seconds", 0, "--no_tpu", "--output_dir", tmp_path / "sop")
    assert "masked-lm has no bert/pooler/dense/bias:0, bert/pooler/dense/kernel:0, nsp___cls: a TFBertForPreTraining " \
           "starts them from random weights" in result.stderr
    assert json.loads((tmp_path / "sop" / "config.json").read_text())["architectures"] == ["BertForPreTraining"]

    # Fine-tuning starts from the pooler it learned.
    classifier_dir = tmp_path / "classifier"
    run_main("run_classification.py", "--model_name_or_path", model_dir, "--train_file", BANKING77 / "train.csv",
             "--label_column", "category", "--max_length", 32, "--per_replica_batch_size", 8, "--num_epochs", 1,
             "--learning_rate", 1e-9, "--no_tpu", "--output_dir", classifier_dir)
    classifier = TFBertForSequenceClassification.from_pretrained(classifier_dir)
    assert np.allclose(classifier.bert.pooler.dense.kernel.numpy(), saved.bert.pooler.dense.kernel.numpy(),
                       atol=1e-6)


def test_sentence_pairs_need_a_pair_head(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path):
    result = run_main("run_mlm.py", *tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path / "m"),
                      "--objective", "sop", "--max_steps", 2, expect_failure=True)
    assert "--objective sop trains a sentence-pair head, which 🤗's TensorFlow models have for albert and bert " \
           "only, but" in result.stderr
    assert "is a roberta config" in result.stderr and "Model:" not in result.stderr


# What Transformers 5 with PyTorch gives for a saved pair model, run in PYTORCH_PYTHON: its loading report and pair
# logits on the same token ids.
TRANSFORMERS_5 = """
import json, sys
import torch, transformers

model_class, folder, input_ids = json.loads(sys.argv[1])
model, report = getattr(transformers, model_class).from_pretrained(folder + "/pytorch", output_loading_info=True)
with torch.no_grad():
    outputs = model(input_ids=torch.tensor(input_ids))
logits = outputs.seq_relationship_logits if hasattr(outputs, "seq_relationship_logits") else outputs.sop_logits
json.dump(dict(report={key: list(value) for key, value in report.items()}, pair_logits=logits.tolist(),
               prediction_logits=outputs.prediction_logits.tolist()), sys.stdout)
"""


@pytest.mark.skipif(not os.environ.get("PYTORCH_PYTHON"),
                    reason="needs 🤗 Transformers 5 and PyTorch: `make test-pytorch` builds them and runs it")
@pytest.mark.parametrize("objective,config", [("nsp", BertConfig(**TINY)),
                                              ("sop", AlbertConfig(embedding_size=16, **TINY))])
def test_transformers_5_with_pytorch_loads_the_pair_model_as_tensorflow_runs_it(objective, config, shards_dir,
                                                                               tokenizer_dir, tmp_path):
    config.save_pretrained(tmp_path / "config")
    model_dir = tmp_path / objective
    run_main("run_mlm.py", *pair_args(shards_dir, tokenizer_dir, tmp_path / "config", model_dir, 4, objective))
    input_ids = [[0, 40, 50, 4, 2, 2, 60, 70, 2], [0, 90, 2, 2, 4, 100, 110, 120, 2]]  # <s> A </s></s> B </s>
    model_class = config.model_type.capitalize() + "ForPreTraining"
    result = subprocess.run([os.environ["PYTORCH_PYTHON"], "-c", TRANSFORMERS_5,
                             json.dumps([model_class, str(model_dir), input_ids])],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    answer = json.loads(result.stdout)
    assert answer["report"] == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
    tensorflow = TFAutoModelForPreTraining.from_pretrained(model_dir)(input_ids=tf.constant(input_ids))
    pair_logits = tensorflow.seq_relationship_logits if objective == "nsp" else tensorflow.sop_logits
    assert np.abs(np.array(answer["pair_logits"]) - pair_logits.numpy()).max() < 1e-4
    assert np.abs(np.array(answer["prediction_logits"]) - tensorflow.prediction_logits.numpy()).max() < 1e-4


def test_an_albert_run_on_two_replicas_with_accumulation_stops_on_sigterm_and_resumes(shards_dir, tokenizer_dir,
                                                                                      tmp_path):
    # The pair head's count all-reduced across replicas, the pairs and labels split into micro-batches, and the stop
    # signal of a preempted VM in the middle of a run: a checkpoint at the step it came, no model yet, and the same
    # command trains on from that checkpoint. (tests/test_cloud_storage.py stops and resumes a run of one replica.)
    AlbertConfig(embedding_size=16, **TINY).save_pretrained(tmp_path / "config")
    output_dir = tmp_path / "sop"
    # No periodic checkpoints (pair_args' every 4 steps: 15 saves of the 60 steps between both runs): the signal's
    # is the one that the run resumes from.
    args = [*pair_args(shards_dir, tokenizer_dir, tmp_path / "config", output_dir, 60, "sop", eval_every=20),
            "--num_cpu_replicas", 2, "--gradient_accumulation_steps", 2, "--checkpoint_every_steps", 1000]
    process = subprocess.Popen([sys.executable, str(REPO / "run_mlm.py"), *map(str, args)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:  # Once the first round has ended.
        if " run_mlm: Step 20: " in line:
            break
    process.send_signal(signal.SIGTERM)
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 128 + signal.SIGTERM, stderr[-3000:]
    saved = re.search(r"Stopped by SIGTERM at step (\d+), after saving checkpoint (\S+)\.", stderr)
    assert saved, stderr[-3000:]
    stopped_at = int(saved.group(1))
    assert 20 <= stopped_at < 60 and saved.group(2).endswith(f"ckpt-{stopped_at}")
    assert not (output_dir / "tf_model.h5").exists()

    result = run_script("run_mlm.py", *args)
    assert f"Resuming from {output_dir}/checkpoints/ckpt-{stopped_at}, at step {stopped_at}" in result.stderr
    assert f"Steps {stopped_at + 1} to " in result.stderr
    assert "global batch 32 (8 per replica x 2 replicas x 2 accumulation steps)" in result.stderr
    results = json.loads((output_dir / "training_results.json").read_text())
    assert results["saved_model_step"] == 60 and results["objective"] == "sop"
    for final in (results["final_train"], results["final_eval"]):
        assert final["loss"] == pytest.approx(final["masked_lm_loss"] + final["pair_loss"], rel=0.05), final
        assert 0 < final["pair_accuracy"] < 1 and final["pair_loss"] > 0
    assert json.loads((output_dir / "config.json").read_text())["architectures"] == ["AlbertForPreTraining"]
