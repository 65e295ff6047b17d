"""A learning signal a user can trust: at <mask> positions, the model against the best constant predictor, a table
of the training tokens' frequencies. The baseline is computed right where it is known by hand, and a model that
trains briefly on a corpus whose masked tokens follow from their neighbours goes far beyond it: a masking, label
or loss bug would not."""

import numpy as np
import tensorflow as tf
import tf_keras as keras
from transformers import RobertaConfig, TFAutoModelForMaskedLM

from devices import create_optimizer_state, set_seed
from masked_lm import MaskedLMTrainer, frequency_log_probs, mask_tokens, start_from_token_frequencies

SPECIAL_IDS = [0, 1, 2, 3, 4]  # <s>, <pad>, </s>, <unk>, <mask>, as train_unigram.py lays them out.
MASK_ID = 4


def tiny_mlm(vocab_size, length):
    config = RobertaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=length + 2, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
    mlm = TFAutoModelForMaskedLM.from_config(config)
    mlm.build_in_name_scope()
    return mlm


def test_the_frequency_table_scores_what_it_is_known_to_score():
    # Ten token ids, five of them special. Ordinary ids 5 to 9 occur 10, 20, 30, 0 and 40 times: with add-one
    # smoothing, probabilities 11, 21, 31, 1, 41 out of 105; specials never, whatever their counts.
    log_probs = frequency_log_probs([100, 50, 100, 0, 0, 10, 20, 30, 0, 40], SPECIAL_IDS)
    np.testing.assert_allclose(np.exp(log_probs), [0, 0, 0, 0, 0, 11 / 105, 21 / 105, 31 / 105, 1 / 105, 41 / 105],
                               rtol=1e-6)

    # Labels at five positions: three whose input became <mask>, one kept, one randomized; the rest unlabelled.
    labels = tf.constant([[-100, 9, 6, -100, 8, 7, 9, -100]])
    input_ids = tf.constant([[0, MASK_ID, MASK_ID, 5, MASK_ID, 7, 5, 2]])
    batch = {"input_ids": input_ids, "attention_mask": tf.ones_like(input_ids), "labels": labels}
    trainer = MaskedLMTrainer(tiny_mlm(10, 8), MASK_ID, frequency_log_probs=log_probs)
    sums = {name: float(value) for name, value in trainer.sums(batch, seed=None).items()}
    assert (sums["count"], sums["mask_count"]) == (5, 3)
    # At the three <mask> positions the labels are 9, 6 and 8; the table always answers 9, its most frequent id.
    np.testing.assert_allclose(sums["frequency_cross_entropy"], -np.log(41 / 105) - np.log(21 / 105) - np.log(1 / 105),
                               rtol=1e-5)
    assert sums["frequency_correct"] == 1


def counting_batches(seed, num_batches, batch_size=32, length=32, cycle=40):
    """Masked batches of rows that count: <s> a, a+1, a+2, ... </s>, wrapping around after `cycle` ordinary ids. Every
    ordinary id is as frequent as every other, so the frequency table learns nothing, and every masked id follows
    from its neighbours."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, cycle, size=(num_batches * batch_size, 1))
    ids = 5 + (starts + np.arange(length - 2)) % cycle
    ids = np.concatenate([np.zeros_like(starts), ids, np.full_like(starts, 2)], axis=1).astype(np.int32)
    batches = []
    for index in range(num_batches):
        rows = tf.constant(ids[index * batch_size:(index + 1) * batch_size])
        batch = mask_tokens(rows, tf.constant([seed, index], tf.int64), mask_token_id=MASK_ID,
                            special_token_ids=SPECIAL_IDS, vocab_size=5 + cycle, mlm_probability=0.15,
                            max_predictions=8)
        batch["attention_mask"] = tf.ones_like(rows)
        batches.append(batch)
    return tf.data.Dataset.from_tensor_slices({name: tf.stack([batch[name] for batch in batches])
                                               for name in batches[0]}), np.bincount(ids.ravel(), minlength=45)


def test_a_model_learns_far_beyond_token_frequency_where_the_context_tells():
    set_seed(0)
    train, token_counts = counting_batches(seed=1, num_batches=64)
    evaluation, _ = counting_batches(seed=2, num_batches=8)
    trainer = MaskedLMTrainer(tiny_mlm(45, 32), MASK_ID, frequency_log_probs=frequency_log_probs(token_counts,
                                                                                                 SPECIAL_IDS))
    trainer.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-2))
    create_optimizer_state(trainer.optimizer, trainer.mlm.trainable_variables)  # As run_mlm.py does.
    before = trainer.evaluate(evaluation, return_dict=True, verbose=0)
    trainer.fit(train.repeat(), steps_per_epoch=600, verbose=0)  # Seen here: 3.5 nats beyond from step 400.
    after = trainer.evaluate(evaluation, return_dict=True, verbose=0)
    # The table knows nothing here: every id is as frequent (40 of them, log 40 = 3.7 nats).
    assert abs(after["frequency_loss_at_mask"] - np.log(40)) < 0.05
    assert before["nats_beyond_frequency"] < 0.5
    assert after["nats_beyond_frequency"] > 2.5, after
    assert after["accuracy_at_mask"] > 0.8 > 0.1 > after["frequency_accuracy_at_mask"]


def test_a_new_model_starts_at_the_frequency_table_with_the_output_bias_set_from_it():
    set_seed(0)
    # Ordinary ids of very unequal frequencies: a model that has not learned them is far worse than the table.
    rng = np.random.default_rng(3)
    ids = rng.choice(np.arange(5, 45), p=np.arange(1, 41) ** 3 / np.sum(np.arange(1, 41) ** 3), size=(64, 16))
    rows = tf.constant(np.concatenate([np.zeros((64, 1)), ids, np.full((64, 1), 2)], axis=1), tf.int32)
    batch = mask_tokens(rows, tf.constant([0, 0], tf.int64), mask_token_id=MASK_ID, special_token_ids=SPECIAL_IDS,
                        vocab_size=45, mlm_probability=0.15, max_predictions=4)
    batch["attention_mask"] = tf.ones_like(rows)
    log_probs = frequency_log_probs(np.bincount(rows.numpy().ravel(), minlength=45), SPECIAL_IDS)
    trainer = MaskedLMTrainer(tiny_mlm(45, 18), MASK_ID, frequency_log_probs=log_probs)
    trainer.compile()
    at_zero = trainer.evaluate(tf.data.Dataset.from_tensors(batch), return_dict=True, verbose=0)
    start_from_token_frequencies(trainer.mlm, log_probs)
    at_table = trainer.evaluate(tf.data.Dataset.from_tensors(batch), return_dict=True, verbose=0)
    assert at_zero["nats_beyond_frequency"] < -0.5, at_zero
    assert abs(at_table["nats_beyond_frequency"]) < 0.05, at_table
