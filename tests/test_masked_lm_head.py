"""The gathered LM head (logits only at masked positions) computes exactly what the full head does."""

import numpy as np
import tensorflow as tf
from transformers import RobertaConfig, TFAutoModelForMaskedLM

from run_mlm import MaskedLMTrainer, mask_tokens


def test_gathered_head_equals_full_head():
    config = RobertaConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=66,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # Deterministic steps.
    mlm = TFAutoModelForMaskedLM.from_config(config)
    mlm.build_in_name_scope()
    trainer = MaskedLMTrainer(mlm)

    ids = tf.random.stateless_uniform([16, 64], [0, 1], minval=5, maxval=500, dtype=tf.int32)
    ids = tf.concat([tf.zeros([16, 1], tf.int32), ids[:, 1:-1], tf.fill([16, 1], 2)], axis=1)  # <s> ... </s>
    batch = mask_tokens(ids, tf.constant([3, 4], tf.int64), mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4],
                        vocab_size=500, mlm_probability=0.15, max_predictions=24)
    batch["attention_mask"] = tf.ones_like(ids)
    full_batch = {k: v for k, v in batch.items() if k != "masked_positions"}  # Same masks, full head.

    gathered = [float(x) for x in trainer._masked_lm_sums(batch)]
    full = [float(x) for x in trainer._masked_lm_sums(full_batch)]
    assert gathered[2] == full[2] == float((batch["labels"].numpy() != -100).sum()) > 100
    np.testing.assert_allclose(gathered, full, rtol=1e-5)  # Summed loss, correct predictions, count.

    gathered_gradients, gathered_stats = trainer._compute_gradients(batch)
    full_gradients, _ = trainer._compute_gradients(full_batch)
    np.testing.assert_allclose(gathered_stats[0], gathered[0], rtol=1e-5)
    for a, b in zip(gathered_gradients, full_gradients):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
