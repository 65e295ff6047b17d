"""ELECTRA's replaced-token detection (Clark et al., 2020) with Keras `model.fit`, in one file to copy into your own
program beside masked_lm.py, the only file of this project that it imports.

A small generator (a 🤗 TFElectraForMaskedLM) fills the masked positions with tokens sampled from its own
predictions; the discriminator (a TFElectraForPreTraining, the model a user keeps) tells, at every real token,
whether it is the original or a replacement. Both train together, on the sum of the generator's masked-LM loss and
the discriminator's loss weighted 50, the recipe of google-research/electra:

- ElectraTrainer: the training step (train_step, first), its losses and metrics, gradient accumulation, XLA;
- share_embeddings: the generator reads the discriminator's word, position and token-type embeddings;
- replace_tokens: the discriminator's input and labels, from the generator's logits at the masked positions;
- generator_config: the generator's config, a fraction of the discriminator's width.

Masking is masked_lm.mask_tokens' with ELECTRA's replacement: `mask_share=0.85, random_share=0.0` (a chosen
position becomes <mask> or keeps its token, never a random one). Everything per batch obeys XLA, as in masked_lm.py.

In your own program, under any tf.distribute strategy's scope:

    discriminator = TFElectraForPreTraining(config)
    generator = TFElectraForMaskedLM(generator_config(config, 0.25))
    discriminator.build_in_name_scope()  # The weights now: Keras looks for them before the first step.
    generator.build_in_name_scope()
    trainer = ElectraTrainer(discriminator, generator)  # Shares the embeddings.
    trainer.compile(optimizer=keras.optimizers.Adam(2e-4))
    trainer.fit(data, steps_per_epoch=1000)  # masked_lm.make_dataset's batches, with "masked_positions".
"""

import copy

import tensorflow as tf
import tf_keras as keras

from masked_lm import PretrainingTrainer, lm_head, total

# The discriminator's loss weighs this much against the generator's (ELECTRA's disc_weight).
DISCRIMINATOR_WEIGHT = 50.0
# The generator's hidden size, feed-forward size and attention heads, as a fraction of the discriminator's: a quarter,
# as in ELECTRA-Small and -Large (the paper found 1/4 to 1/2 best).
GENERATOR_HIDDEN_SIZE = 0.25


def generator_config(config, fraction):
    """The generator's ElectraConfig: the discriminator's `config` with its hidden size, feed-forward size and
    attention heads multiplied by `fraction` (ELECTRA's get_generator_config divides all three by the same factor),
    the same depth, and the same embedding size: the two share their embeddings. Raises ValueError for a size that
    does not divide into whole heads."""
    generator = copy.deepcopy(config)
    generator.hidden_size = max(1, round(config.hidden_size * fraction))
    generator.intermediate_size = max(1, round(config.intermediate_size * fraction))
    generator.num_attention_heads = max(1, round(config.num_attention_heads * fraction))
    generator.embedding_size = config.embedding_size or config.hidden_size
    generator.architectures = ["ElectraForMaskedLM"]
    if generator.hidden_size % generator.num_attention_heads:
        raise ValueError(f"a generator of hidden size {generator.hidden_size} does not divide into "
                         f"{generator.num_attention_heads} attention heads; choose a fraction of the discriminator's "
                         f"hidden size ({config.hidden_size}) that does")
    return generator


def share_embeddings(discriminator, generator):
    """Makes the built `generator` read the built `discriminator`'s embeddings layer (word, position and token-type
    embeddings and their layer norm), in its encoder and in its LM head's output projection, which reuses the word
    embeddings. The generator's own embedding weights are then no longer part of it. Swapping layers after both are
    built, rather than building the generator around the shared layer, keeps weights already loaded: 🤗's
    embeddings layer creates its weights anew each time it is built."""
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.input_embeddings = discriminator.electra.embeddings


def replace_tokens(input_ids, labels, masked_positions, generator_logits, seed):
    """The discriminator's input and labels, [batch, length] each: at each chosen position (`labels` != -100 there),
    a token sampled from `generator_logits` [batch, K, vocabulary] at `masked_positions` [batch, K]; elsewhere
    `input_ids`. A label is 1 ("replaced") only where the sampled token differs from the original: the generator
    that samples the original token has not replaced it. Sampling is Gumbel-max at temperature 1 (the argmax of
    the logits plus Gumbel noise, stateless from `seed`), with no gradient through it. Also returns the sampled
    tokens [batch, K]."""
    logits = tf.stop_gradient(tf.cast(generator_logits, tf.float32))
    uniform = tf.random.stateless_uniform(tf.shape(logits), seed, minval=1e-9, maxval=1.0)
    sampled = tf.argmax(logits - tf.math.log(-tf.math.log(uniform)), axis=-1, output_type=input_ids.dtype)
    original = tf.gather(labels, masked_positions, batch_dims=1)
    chosen = original != -100
    inputs_there = tf.gather(input_ids, masked_positions, batch_dims=1)
    # Scatter the K values of each row back to their positions: masked_positions are distinct within a row.
    rows = tf.broadcast_to(tf.range(tf.shape(input_ids)[0])[:, tf.newaxis], tf.shape(masked_positions))
    indices = tf.stack([rows, masked_positions], axis=-1)
    replaced_ids = tf.tensor_scatter_nd_update(input_ids, indices, tf.where(chosen, sampled, inputs_there))
    is_replaced = tf.cast(chosen & (sampled != original), input_ids.dtype)
    replaced_labels = tf.tensor_scatter_nd_update(tf.zeros_like(input_ids), indices, is_replaced)
    return replaced_ids, replaced_labels, sampled


class ElectraTrainer(PretrainingTrainer):
    """Trains an ELECTRA discriminator and its generator together with model.fit.

    The loss is the generator's cross-entropy, a mean over the masked positions of the global batch, plus
    `discriminator_weight` times the discriminator's sigmoid cross-entropy, a mean over every real (non-padding)
    token of the global batch (masked_lm.PretrainingTrainer: the steps, their seeds and gradient accumulation).

    Metrics: `generator_loss` and `generator_accuracy` at the masked positions; `discriminator_loss` and
    `discriminator_accuracy` over the real tokens, and the accuracy on the replaced ones (`replaced_accuracy`) and
    the original ones (`original_accuracy`); `replaced_share`, the share of real tokens the generator replaced;
    `nats_beyond_prior`, how much lower the discriminator's loss is than that of a constant guess of that share (0:
    nothing learned from the context); `loss`, the sum that trains.

    `trained_variables` are the trainable variables of both networks, the shared embeddings once.
    """

    def __init__(self, discriminator, generator, discriminator_weight=DISCRIMINATOR_WEIGHT,
                 gradient_accumulation_steps=1, jit_compile=False, seed=0):
        names = ["loss", "generator_loss", "generator_accuracy", "discriminator_loss", "discriminator_accuracy",
                 "replaced_accuracy", "original_accuracy", "replaced_share", "nats_beyond_prior"]
        super().__init__([keras.metrics.Mean(name=name) for name in names], gradient_accumulation_steps,
                         jit_compile, seed)
        share_embeddings(discriminator, generator)
        self.discriminator, self.generator = discriminator, generator
        self.discriminator_weight = discriminator_weight
        seen = {id(variable) for variable in discriminator.trainable_variables}
        self.trained_variables = discriminator.trainable_variables + [
            variable for variable in generator.trainable_variables if id(variable) not in seen]

    @property
    def networks(self):  # What a checkpoint holds, by name: "model" is the one a user keeps, the discriminator.
        return {"model": self.discriminator, "generator": self.generator}

    def call(self, inputs, training=False):
        return self.discriminator(**inputs, training=training).logits

    def counts(self, batch):
        """The masked positions and real tokens: the loss's denominators."""
        return tf.stack([tf.reduce_sum(tf.cast(batch["labels"] != -100, tf.float32)),
                         tf.reduce_sum(tf.cast(batch["attention_mask"], tf.float32))])

    def training_loss(self, sums, counts):
        return (sums["generator_cross_entropy"] / counts[0]
                + self.discriminator_weight * sums["discriminator_cross_entropy"] / counts[1])

    def sums(self, batch, seed, training=False):
        """Sums by name of the generator's cross-entropy and correct predictions at the masked positions, and of the
        discriminator's cross-entropy and correct labels over the real tokens, the replaced ones and the others."""
        positions = batch.get("masked_positions")
        if positions is None:  # No cap on the predictions: the generator's head runs at every position.
            positions = tf.broadcast_to(tf.range(tf.shape(batch["input_ids"])[1]), tf.shape(batch["input_ids"]))
        hidden = self.generator.electra(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                        training=training)[0]
        # A softmax over the vocabulary needs float32, in bfloat16 mode too.
        logits = tf.cast(lm_head(self.generator, tf.gather(hidden, positions, batch_dims=1)), tf.float32)
        labels = tf.gather(batch["labels"], positions, batch_dims=1)
        is_chosen = labels != -100
        labels = tf.where(is_chosen, labels, 0)  # Any valid id: the sums leave those positions out.
        generator_cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        generator_correct = tf.argmax(logits, axis=-1, output_type=labels.dtype) == labels

        replaced_ids, is_replaced, _ = replace_tokens(batch["input_ids"], batch["labels"], positions, logits, seed)
        discriminator_logits = tf.cast(self.discriminator(input_ids=replaced_ids,
                                                          attention_mask=batch["attention_mask"],
                                                          training=training).logits, tf.float32)
        targets = tf.cast(is_replaced, tf.float32)
        discriminator_cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets,
                                                                              logits=discriminator_logits)
        discriminator_correct = (discriminator_logits > 0) == (is_replaced == 1)
        is_real = batch["attention_mask"] == 1
        replaced, original = is_real & (is_replaced == 1), is_real & (is_replaced == 0)
        return {"generator_cross_entropy": total(is_chosen, generator_cross_entropy),
                "generator_correct": total(is_chosen, generator_correct),
                "discriminator_cross_entropy": total(is_real, discriminator_cross_entropy),
                "discriminator_correct": total(is_real, discriminator_correct),
                "replaced_correct": total(replaced, discriminator_correct), "replaced_count": total(replaced, 1.0),
                "original_correct": total(original, discriminator_correct), "original_count": total(original, 1.0),
                "masked_count": total(is_chosen, 1.0), "token_count": total(is_real, 1.0)}

    def update_metrics(self, sums, counts):
        """`loss` is the global batch's, as it trains (each replica's share adds up to it)."""
        self.update_mean("generator_loss", sums["generator_cross_entropy"], sums["masked_count"])
        self.update_mean("generator_accuracy", sums["generator_correct"], sums["masked_count"])
        self.update_mean("discriminator_loss", sums["discriminator_cross_entropy"], sums["token_count"])
        self.update_mean("discriminator_accuracy", sums["discriminator_correct"], sums["token_count"])
        self.update_mean("replaced_accuracy", sums["replaced_correct"], sums["replaced_count"])
        self.update_mean("original_accuracy", sums["original_correct"], sums["original_count"])
        self.update_mean("replaced_share", sums["replaced_count"], sums["token_count"])
        # The discriminator against the best constant guess, the share of replaced tokens, whose loss is that share's
        # binary entropy: 0 for a discriminator that learned nothing from the context.
        share = tf.math.divide_no_nan(sums["replaced_count"], sums["token_count"])
        constant_guess = -tf.math.xlogy(share, share) - tf.math.xlogy(1.0 - share, 1.0 - share)
        self.update_mean("nats_beyond_prior", constant_guess * sums["token_count"]
                         - sums["discriminator_cross_entropy"], sums["token_count"])
        self.update_summed_loss(sums, counts)
