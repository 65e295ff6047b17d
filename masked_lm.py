"""Masked-LM pre-training of any 🤗 TF…ForMaskedLM with Keras `model.fit`, in one file to copy into your own
program: it imports TensorFlow, tf-keras and NumPy, nothing else of this project.

- PretrainingTrainer: the training step (train_step, first) of every objective, gradient accumulation, XLA;
- MaskedLMTrainer: the masked LM's loss and metrics at the masked positions only, the LM head run where a prediction
  is needed; SentencePairTrainer: BERT's and ALBERT's pre-training, the masked LM beside a sentence-pair head;
- make_dataset: one host's tf.data pipeline over TFRecord shards, masking as it goes (make_pairs: sentence pairs);
- mask_tokens: token, whole-word (word_start_table) or SpanBERT's span masking, 80/10/10;
- frequency_log_probs: the baseline every figure is compared with, a table of token frequencies.

Everything that runs per batch obeys XLA, the compiler behind TPUs: no Python `if` on tensor values, no shape that
depends on values, one input shape. So batches always hold as many samples of exactly max_length tokens, and the
loss is a sum over masked positions divided by their count, never a boolean selection of them. The input pipeline
is TensorFlow ops only (a TPU Node's host cannot run Python for it) and masks anew on every pass; evaluation masks
come from a fixed seed, so that its figures compare across rounds and runs.

In your own program, under any tf.distribute strategy's scope:

    mlm = TFAutoModelForMaskedLM.from_config(config)
    mlm.build_in_name_scope()  # Its weights now: Keras looks for them before the first step.
    trainer = MaskedLMTrainer(mlm, tokenizer.mask_token_id)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-4))
    masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                   vocab_size=len(tokenizer), mlm_probability=0.15)
    data = strategy.distribute_datasets_from_function(lambda context: make_dataset(
        files, context, batch_size=32, max_length=128, masking=masking, seed=0, training=True,
        shuffle_buffer_size=10_000))
    trainer.fit(data, steps_per_epoch=1000)

BERT's next-sentence prediction: TFAutoModelForPreTraining in a SentencePairTrainer, and make_dataset(...,
pairs=dict(template=pair_template(tokenizer), sentence_order=False)); ALBERT's sentence order: sentence_order=True.
"""

import json
import logging
import math
import os
import unicodedata

import numpy as np
import tensorflow as tf
# 🤗 Transformers' TF models are Keras 2 models. Since TensorFlow 2.16, Keras 2 is the separate tf-keras package,
# and `tf.keras` is Keras 3 (unless TF_USE_LEGACY_KERAS is set): every Keras object here must come from tf_keras.
import tf_keras as keras

logger = logging.getLogger("masked_lm")


class PretrainingTrainer(keras.Model):
    """What the trainers of every pre-training objective share (MaskedLMTrainer, SentencePairTrainer, and
    electra.ElectraTrainer): a step's gradients over its micro-batches, the loss's denominators known before the
    step, the metrics as means over what they count. A subclass says what a batch counts (`counts`), what it sums
    (`sums`), the loss of those sums (`training_loss`), and its metrics (`update_metrics`).

    A step's loss is a sum over the positions (or samples) of the global batch divided by their global number (an
    all-reduce across replicas, from the batch before any model runs): the optimizer's sum of the replicas'
    gradients is then exactly the gradient of the global batch's mean, as if one device had run it.

    Gradient accumulation runs the micro-batches inside the step, so that the step counter, the schedule and the
    checkpoints count optimizer steps. With `jit_compile`, each replica's forward and backward passes are compiled
    with XLA, the optimizer update not: Keras cannot compile an update of variables mirrored on several devices
    (keras-team/tf-keras#385). A TPU compiles everything anyway.

    The steps are traced without AutoGraph, which rewrites Python `if`s and loops over tensors into graph ops:
    neither these steps nor 🤗's models branch on a tensor, and rewriting the models' source took 4 of the 5.6 s
    that tracing the first evaluation took (a tiny RoBERTa, on a CPU), on every host, before every run.

    Objectives that sample (ELECTRA's generator) draw from a stateless seed, from `seed` and the step counter that
    checkpoints keep in training (no random state to save, every step samples anew), from the batch itself in
    evaluation, whose masks are fixed (make_dataset), so that its figures compare across rounds.
    """

    def __init__(self, metrics, gradient_accumulation_steps=1, jit_compile=False, seed=0):
        super().__init__()
        self.trackers = {metric.name: metric for metric in metrics}
        self.gradient_accumulation_steps, self.seed = gradient_accumulation_steps, seed
        self.compute_gradients, self.compute_sums = (
            tf.function(function, jit_compile=True, autograph=False) if jit_compile else function
            for function in (self._compute_gradients, self.sums))

    @property
    def metrics(self):  # What Keras resets at the start of each epoch and evaluation.
        return list(self.trackers.values())

    @tf.autograph.experimental.do_not_convert
    def train_step(self, batch):
        counts = self._global_counts(batch)
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        seed = tf.random.experimental.stateless_fold_in(
            tf.stack([tf.cast(self.seed, tf.int64), tf.cast(self.optimizer.iterations, tf.int64)]),
            replica * self.gradient_accumulation_steps)
        gradients, sums = self.compute_gradients(batch, counts, seed)
        self.optimizer.apply_gradients(zip(gradients, self.trained_variables))
        self.update_metrics(sums, counts)
        return {metric.name: metric.result() for metric in self.metrics}

    @tf.autograph.experimental.do_not_convert
    def test_step(self, batch):
        seed = tf.stack([tf.cast(self.seed, tf.int64), tf.reduce_sum(tf.cast(batch["input_ids"], tf.int64))])
        self.update_metrics(self.compute_sums(batch, seed), self._global_counts(batch))
        return {metric.name: metric.result() for metric in self.metrics}

    def _global_counts(self, batch):
        return tf.maximum(tf.distribute.get_replica_context().all_reduce("sum", self.counts(batch)), 1.0)

    def _compute_gradients(self, batch, counts, seed):
        """Gradients of the loss of the replica's share of the global batch, and the summed stats, over the
        micro-batches."""
        steps = self.gradient_accumulation_steps
        micro_batches = {name: tf.reshape(value, [steps, -1, *value.shape[1:]]) for name, value in batch.items()}
        gradient_sums, stat_sums = None, None
        # A Python loop, unrolled into the graph: in a graph loop nested in Keras' steps_per_execution loop,
        # TensorFlow's optimizer turns large gradient sums into accumulators whose variables clash
        # (AlreadyExistsError). The graph, and compilation time, grow with the number of micro-batches.
        for i in range(steps):
            with tf.GradientTape() as tape:
                stats = self.sums({name: value[i] for name, value in micro_batches.items()},
                                  tf.random.experimental.stateless_fold_in(seed, i), training=True)
                loss = self.training_loss(stats, counts)
            # Zeros for the weights the loss does not reach (a pooler, ALBERT's second output bias).
            gradients = [tf.convert_to_tensor(gradient) for gradient in tape.gradient(
                loss, self.trained_variables, unconnected_gradients="zero")]
            gradient_sums = gradients if gradient_sums is None else [
                gradient_sum + gradient for gradient_sum, gradient in zip(gradient_sums, gradients)]
            stat_sums = stats if stat_sums is None else {name: stat_sums[name] + stats[name] for name in stats}
        return gradient_sums, stat_sums

    def update_summed_loss(self, sums, counts):
        """`loss`, the loss of the global batch as it trains: each replica's share of it, added up."""
        self.trackers["loss"].update_state(
            tf.distribute.get_replica_context().all_reduce("sum", self.training_loss(sums, counts)))

    def update_mean(self, name, total, count):
        """A metric that is a mean over positions (or samples): a batch's mean weighs as many as it covers."""
        self.trackers[name].update_state(tf.math.divide_no_nan(total, count), sample_weight=count)


class MaskedLMTrainer(PretrainingTrainer):
    """Trains a 🤗 TF…ForMaskedLM with model.fit, with loss and metrics over masked positions only.

    The loss is the cross-entropy at the masked positions of the global batch, a mean over them
    (PretrainingTrainer). `loss`, `perplexity` and `masked_accuracy` cover every position chosen for prediction;
    but a tenth of those keep their token, where a model that copies its input scores for free. The `..._at_mask`
    metrics cover only the positions whose input became <mask>; with `frequency_log_probs`, the frequency table is
    scored there too (`frequency_..._at_mask`), and `nats_beyond_frequency` is how much lower the model's
    cross-entropy is: 0 for a model that learned the token frequencies and nothing from the context.
    """

    MASKED_LM_LOSS = "loss"  # The name of the masked LM's loss among the metrics: the loss that trains, here.

    def __init__(self, mlm, mask_token_id, gradient_accumulation_steps=1, jit_compile=False,
                 frequency_log_probs=None, more_metrics=()):
        names = ["masked_accuracy", "loss_at_mask", "accuracy_at_mask"]
        if frequency_log_probs is not None:
            names += ["frequency_loss_at_mask", "frequency_accuracy_at_mask", "nats_beyond_frequency"]
        super().__init__([keras.metrics.Mean(name="loss"), Perplexity(name="perplexity"),
                          *(keras.metrics.Mean(name=name) for name in [*more_metrics, *names])],
                         gradient_accumulation_steps, jit_compile)
        self.mlm, self.mask_token_id = mlm, mask_token_id
        self.frequency_log_probs = None if frequency_log_probs is None else tf.constant(frequency_log_probs)

    @property
    def networks(self):  # What a checkpoint holds, by name: "model" is the one a user keeps.
        return {"model": self.mlm}

    @property
    def trained_variables(self):  # Those the optimizer updates.
        return self.mlm.trainable_variables

    def call(self, inputs, training=False):
        return self.mlm(**inputs, training=training).logits

    def counts(self, batch):
        return tf.stack([tf.reduce_sum(tf.cast(batch["labels"] != -100, tf.float32))])

    def training_loss(self, sums, counts):
        return sums["cross_entropy"] / counts[0]

    def sums(self, batch, seed, training=False):
        """The masked LM's sums (masked_lm_sums); `seed` is unused: the masks come with the batch."""
        return self.masked_lm_sums(batch, self.encode(batch, training).last_hidden_state)

    def encode(self, batch, training):
        """The outputs of the model's encoder (its last hidden states, and a pooler's output where it has one)."""
        encoder = getattr(self.mlm, self.mlm.base_model_prefix)
        return encoder(**{name: batch[name] for name in ("input_ids", "attention_mask", "token_type_ids")
                          if name in batch}, training=training)

    def masked_lm_sums(self, batch, hidden):
        """Sums by name of the cross-entropy, correct predictions and count at the positions chosen for prediction,
        and at those whose input is <mask>; at the latter, the frequency table's too. `hidden`: the encoder's last
        hidden states. With "masked_positions", only those K positions are projected onto the vocabulary: at length
        128, that skips about three quarters of the LM head's work."""
        positions = batch.get("masked_positions")
        if positions is None:  # No cap on the predictions: the LM head runs at every position.
            positions = tf.broadcast_to(tf.range(tf.shape(batch["input_ids"])[1]), tf.shape(batch["input_ids"]))
        # A softmax over the vocabulary needs float32, in bfloat16 mode too.
        logits = tf.cast(lm_head(self.mlm, tf.gather(hidden, positions, batch_dims=1)), tf.float32)
        labels, inputs = (tf.gather(batch[name], positions, batch_dims=1) for name in ("labels", "input_ids"))
        is_chosen = labels != -100
        is_mask = is_chosen & (inputs == self.mask_token_id)
        labels = tf.where(is_chosen, labels, 0)  # Any valid id: the sums leave those positions out.
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.argmax(logits, axis=-1, output_type=labels.dtype) == labels
        sums = {"cross_entropy": total(is_chosen, cross_entropy), "correct": total(is_chosen, correct),
                "count": total(is_chosen, 1.0), "mask_cross_entropy": total(is_mask, cross_entropy),
                "mask_correct": total(is_mask, correct), "mask_count": total(is_mask, 1.0)}
        if self.frequency_log_probs is not None:
            most_frequent = tf.argmax(self.frequency_log_probs, output_type=labels.dtype)
            sums["frequency_cross_entropy"] = total(is_mask, -tf.gather(self.frequency_log_probs, labels))
            sums["frequency_correct"] = total(is_mask, labels == most_frequent)
        return sums

    def update_metrics(self, sums, counts):
        self.update_mean(self.MASKED_LM_LOSS, sums["cross_entropy"], sums["count"])
        self.update_mean("perplexity", sums["cross_entropy"], sums["count"])
        self.update_mean("masked_accuracy", sums["correct"], sums["count"])
        self.update_mean("loss_at_mask", sums["mask_cross_entropy"], sums["mask_count"])
        self.update_mean("accuracy_at_mask", sums["mask_correct"], sums["mask_count"])
        if self.frequency_log_probs is not None:
            self.update_mean("frequency_loss_at_mask", sums["frequency_cross_entropy"], sums["mask_count"])
            self.update_mean("frequency_accuracy_at_mask", sums["frequency_correct"], sums["mask_count"])
            self.update_mean("nats_beyond_frequency", sums["frequency_cross_entropy"] - sums["mask_cross_entropy"],
                             sums["mask_count"])


# The 🤗 TF…ForPreTraining classes with a sentence-pair head beside the LM head, by model type, and that head's
# layer: BERT's for next-sentence prediction, ALBERT's for sentence-order prediction (both two-way: either objective
# trains either head).
PAIR_HEADS = {"albert": "sop_classifier", "bert": "nsp"}


class SentencePairTrainer(MaskedLMTrainer):
    """Trains a 🤗 TF…ForPreTraining with a masked LM and a sentence-pair head on its pooled <s> (BERT's
    next-sentence prediction, ALBERT's sentence-order prediction: the samples of make_pairs, whose "pair_labels"
    say which), on the sum of the two losses, each a mean over the global batch: the masked LM's over its masked
    positions, the pair head's over its samples, times `pair_loss_weight` (1: BERT's and ALBERT's pre-training loss;
    0: the masked LM alone, on pairs). With `pair_loss_ramp` (first, last), the pair loss's weight is 0 up to step
    `first`, then rises linearly to `pair_loss_weight` at step `last` (first == last: it joins whole): the masked LM
    can leave the token-frequency table before the pair head pulls on the encoder (issue #86).

    Metrics: MaskedLMTrainer's, with the masked LM's loss as `masked_lm_loss`; `pair_loss` and `pair_accuracy`;
    `loss`, the weighted sum that trains.
    """

    MASKED_LM_LOSS = "masked_lm_loss"

    def __init__(self, model, mask_token_id, gradient_accumulation_steps=1, jit_compile=False,
                 frequency_log_probs=None, pair_loss_weight=1.0, pair_loss_ramp=(0, 0)):
        super().__init__(model, mask_token_id, gradient_accumulation_steps, jit_compile, frequency_log_probs,
                         more_metrics=["masked_lm_loss", "pair_loss", "pair_accuracy"])
        self.pair_loss_weight, self.pair_loss_ramp = pair_loss_weight, pair_loss_ramp

    def counts(self, batch):
        return tf.concat([super().counts(batch), [tf.cast(tf.shape(batch["pair_labels"])[0], tf.float32)]], 0)

    def training_loss(self, sums, counts):
        return super().training_loss(sums, counts) + self.pair_weight() * sums["pair_cross_entropy"] / counts[1]

    def pair_weight(self):
        """The pair loss's weight at the step being taken (the optimizer's count of steps done, plus one)."""
        first, last = self.pair_loss_ramp
        if not last:  # No ramp: the weight is a constant of the graph.
            return self.pair_loss_weight
        step = tf.cast(self.optimizer.iterations + 1, tf.float32)
        return self.pair_loss_weight * tf.clip_by_value((step - first) / max(last - first, 1), 0.0, 1.0)

    def sums(self, batch, seed, training=False):
        outputs = self.encode(batch, training)
        # The pair head as the model's own call runs it: ALBERT's has dropout before its dense layer (BERT's, without,
        # is not given `training`: Keras passes it only to the layers whose call takes it).
        head = getattr(self.mlm, PAIR_HEADS[self.mlm.config.model_type])
        logits = tf.cast(head(outputs.pooler_output, training=training), tf.float32)
        labels = batch["pair_labels"]
        correct = tf.argmax(logits, axis=-1, output_type=labels.dtype) == labels
        return {**self.masked_lm_sums(batch, outputs.last_hidden_state),
                "pair_cross_entropy": tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)),
                "pair_correct": tf.reduce_sum(tf.cast(correct, tf.float32)),
                "pair_count": tf.cast(tf.size(labels), tf.float32)}

    def update_metrics(self, sums, counts):
        super().update_metrics(sums, counts)
        self.update_mean("pair_loss", sums["pair_cross_entropy"], sums["pair_count"])
        self.update_mean("pair_accuracy", sums["pair_correct"], sums["pair_count"])
        self.update_summed_loss(sums, counts)


def total(where, values):
    """The sum of `values` where `where` holds: tf.where, not a product with a 0/1 weight: -inf * 0 would be NaN."""
    return tf.reduce_sum(tf.where(where, tf.cast(values, tf.float32), 0.0))


class Perplexity(keras.metrics.Mean):
    """exp(mean cross-entropy per masked token)."""

    def result(self):
        return tf.exp(super().result())


# The layers between the encoder and the logits, for the models whose get_lm_head() is only the last of them.
LM_HEAD_LAYERS = {"electra": ("generator_predictions", "generator_lm_head"),
                  "convbert": ("generator_predictions", "generator_lm_head"),
                  "distilbert": ("vocab_transform", "act", "vocab_layer_norm", "vocab_projector")}


def lm_head(mlm, hidden):
    """The logits of a 🤗 TF…ForMaskedLM `mlm` at the encoder's hidden states `hidden` [..., positions, hidden]."""
    for name in LM_HEAD_LAYERS.get(mlm.config.model_type, ()):
        hidden = getattr(mlm, name)(hidden)
    return hidden if mlm.config.model_type in LM_HEAD_LAYERS else mlm.get_lm_head()(hidden)


# ----------------------------------------------------------------------------------------------------------------
# The input pipeline and the masking


def make_dataset(files, input_context, *, batch_size, max_length, masking, seed, training,
                 shuffle_buffer_size=None, num_batches=None, pairs=None, word_starts_in_shards=False, skip_batches=0):
    """One host's input pipeline, endless (fit stops after the steps it asks for): its own shards (host i of n
    reads shards i, i + n, ...), read in parallel, batched `batch_size` per replica, parsed, made into sentence
    pairs with `pairs` (make_pairs' arguments) and masked (`masking`: mask_tokens' arguments, or
    open_with_summary's where it holds a summary_token_id). With `word_starts_in_shards`, the shards say where
    words begin (a word segmenter's words, a "word_starts" feature), and whole-word masking takes those instead of
    what the tokenizer's pieces say. Training data is shuffled
    (shard order, then samples in a buffer), with new masks on every pass: one endless stream whose batch k always
    holds the same samples and masks for a `seed`, whichever batch it starts from. `skip_batches` starts it there,
    reading the samples before it without parsing or masking them: a resumed run goes on with the batches the
    interrupted one would have trained on next. Evaluation data is its first
    `num_batches` batches, each masked from (seed, batch index), over and over: Keras keeps one iterator for every
    evaluation of a fit call, and each must see the same masks."""
    host, num_hosts = input_context.input_pipeline_id, input_context.num_input_pipelines
    if training:
        own = [os.path.basename(file) for file in files[host::num_hosts]]
        logger.info("Input pipeline %d of %d reads %d of the %d training shards: %s%s", host, num_hosts, len(own),
                    len(files), ", ".join(own[:3]) + (", ..." if len(own) > 3 else ""),
                    f"; it first reads past the {skip_batches * batch_size} samples of the batches already trained"
                    if skip_batches else "")
    files = tf.data.Dataset.from_tensor_slices(files).shard(num_hosts, host)
    if training:
        files = files.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    # 32 shards read side by side, their records taken in turn: the same order in every run, so that --seed repeats
    # the batches (taken as they arrived, runs differed). A late read then holds the others back: over gs:// at 100 ms
    # a read (1 % over 1 s), 8 shards at a time gave 15,203 samples/s, 32 gave 24,498 (benchmarks/speed.md).
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=32, num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=True)
    if training:
        # The shard order of each pass, then the buffer's draws, follow from the seed alone: skipping records read
        # through the stream's start replays it, across passes too.
        records = records.shuffle(shuffle_buffer_size, seed=seed).skip(skip_batches * batch_size)
    batches = records.batch(batch_size, drop_remainder=True)  # One static batch shape, as XLA wants.
    if not training:
        batches = batches.take(num_batches)
    # The record format (written by prepare_tfrecord_shards.py): int64 features of max_length values each, and
    # "word_starts" (1 where a word begins, 0 inside one) in shards written with a word segmenter.
    uses_word_starts = word_starts_in_shards and masking.get("word_starts") is not None  # Whole words, or spans.
    names = ("input_ids", "attention_mask", "word_starts") if uses_word_starts else ("input_ids", "attention_mask")
    features = {name: tf.io.FixedLenFeature([max_length], tf.int64) for name in names}

    @tf.autograph.experimental.do_not_convert  # Python branches only (see MaskedLMTrainer).
    def parse_and_mask(index, serialized):
        batch = {name: tf.cast(value, tf.int32) for name, value in tf.io.parse_example(serialized, features).items()}
        batch_seed = tf.stack([tf.constant(seed, tf.int64), index])
        if pairs is not None:
            pair_seed, batch_seed = tf.unstack(tf.random.experimental.stateless_split(batch_seed, 2))
            batch = make_pairs(batch, pair_seed, **pairs)
        word_starts = batch.pop("word_starts", None)
        mask = open_with_summary if "summary_token_id" in masking else mask_tokens
        batch.update(mask(batch["input_ids"], batch_seed, **masking,
                          starts=tf.cast(word_starts, tf.bool) if uses_word_starts else None))
        return batch

    batches = batches.enumerate(start=skip_batches).map(parse_and_mask, num_parallel_calls=tf.data.AUTOTUNE)
    if not training:
        batches = batches.repeat()
    # Autotuning off: deleting an iterator (at the end of every fit call) joins tf.data's autotuning thread, which
    # can miss the cancellation (a TensorFlow race) and keep a run waiting tens of seconds after its last step. On one
    # device the default strategy takes batches straight from here; other strategies' iterators still autotune, and
    # run_mlm.py logs the wait. The prefetch buffer still grows as needed.
    options = tf.data.Options()
    options.autotune.enabled = False
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


def make_pairs(batch, seed, *, template, sentence_order):
    """Sentence pairs from a batch of samples of the token stream ("input_ids" and "attention_mask", [batch,
    length], and "word_starts" if it has them): those, "token_type_ids" and "pair_labels" [batch]. Each sample's
    tokens are cut at a random point into A and B (1 token or more each), placed in `template` (pair_template: the
    tokenizer's own layout of a pair, so that pre-training sees pairs as fine-tuning will), which takes the place
    of the sample's last tokens. Half the pairs, drawn at random, are changed and labelled 1: with
    `sentence_order` (ALBERT's sentence-order prediction), B comes before A; else (BERT's next-sentence
    prediction), B is the same stretch of the next sample of the batch, from elsewhere in the corpus (shuffled in
    training; in evaluation, the shards are interleaved, so the next sample is another shard's). Stateless random
    ops from `seed`, static shapes: safe in tf.data and under XLA."""
    ids, types = template
    first, second = (i for i, token in enumerate(ids) if token == -1)
    length = batch["input_ids"].shape[1]
    content_length = length - (len(ids) - 2)
    split_seed, label_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    num_samples = tf.shape(batch["input_ids"])[0]
    labels = tf.cast(tf.random.stateless_uniform([num_samples], label_seed) < 0.5, tf.int32)
    changed = labels[:, tf.newaxis] == 1
    # A's length, and where each token of the sample's first content_length goes.
    split = tf.random.stateless_uniform([num_samples, 1], split_seed, minval=1, maxval=content_length,
                                        dtype=tf.int32)
    position = tf.range(content_length)[tf.newaxis]
    if sentence_order:  # B then A: the content rotated by A's length.
        source = tf.where(changed, (position + split) % content_length, position)
        split = tf.where(changed, content_length - split, split)
    # Then the specials around the content: output position j reads the content, or the specials after it.
    j = tf.range(length)[tf.newaxis]
    middle, before_suffix = second - first - 1, length - (len(ids) - second - 1)
    index = tf.where(j < first, content_length + j, tf.where(
        j < first + split, j - first, tf.where(
            j < first + split + middle, content_length + j - split, tf.where(
                j < before_suffix, j - first - middle, j))))

    def arrange(content, specials):
        if sentence_order:
            content = tf.gather(content, source, batch_dims=1)
        else:  # The next sample's B.
            content = tf.where(changed & (position >= split), tf.roll(content, -1, axis=0), content)
        specials = tf.broadcast_to(tf.constant(specials, content.dtype), [num_samples, len(specials)])
        return tf.gather(tf.concat([content, specials], axis=1), index, batch_dims=1)

    special_types = [token_type for token, token_type in zip(ids, types) if token != -1]
    content_types = tf.where(position < split, types[first], types[second])
    pairs = {"input_ids": arrange(batch["input_ids"][:, :content_length], [token for token in ids if token != -1]),
             "attention_mask": arrange(batch["attention_mask"][:, :content_length], [1] * len(special_types)),
             "token_type_ids": tf.gather(tf.concat([content_types, tf.broadcast_to(
                 tf.constant(special_types, tf.int32), [num_samples, len(special_types)])], 1), index, batch_dims=1),
             "pair_labels": labels}
    if "word_starts" in batch:  # Where words begin moves with their tokens; a special token begins one.
        pairs["word_starts"] = arrange(batch["word_starts"][:, :content_length], [1] * len(special_types))
    return pairs


def pair_template(tokenizer):
    """How `tokenizer` lays out a pair of texts: (ids, token type ids) of a pair of one token each, with -1 in
    place of those two tokens: make_pairs' `template`."""
    encoding = tokenizer(tokenizer.mask_token, tokenizer.mask_token, return_token_type_ids=True)
    ids = [-1 if token == tokenizer.mask_token_id else token for token in encoding["input_ids"]]
    if ids.count(-1) != 2:
        raise ValueError(f"the tokenizer does not encode a pair as its two texts between special tokens: {ids}")
    return ids, encoding["token_type_ids"]


def mask_tokens(input_ids, seed, *, mask_token_id, special_token_ids, vocab_size, mlm_probability,
                max_predictions=0, word_starts=None, spans=False, mask_share=0.8, random_share=0.1, starts=None):
    """Masks a batch of token ids [batch, length]: a dict of "input_ids", "labels" (and "masked_positions").

    Each token that is not special is chosen with probability `mlm_probability`; of those, 80 % become
    `mask_token_id`, 10 % a random token, 10 % stay (`mask_share` and `random_share`: ELECTRA's are 0.85 and 0).
    "labels" hold the original id where chosen, -100 elsewhere.
    With `word_starts` (word_start_table), whole words are chosen instead (choose_words), and with `spans`,
    SpanBERT's spans of words; `starts` [batch, length], where given, says where words begin in place of the table
    (a word segmenter's words, stored in the shards). With `max_predictions` K > 0, at most K positions per sequence
    are chosen (the lowest draws; whole words), and "masked_positions" [batch, K] lists them, padded with unchosen
    ones: the LM head needs logits there only. Stateless random ops make the result a function of `seed` (two
    integers), and every shape is static: safe in tf.data and under XLA.
    """
    mask_seed, replace_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    shape = tf.shape(input_ids)
    is_special = is_special_token(input_ids, special_token_ids)
    batch = {}
    if word_starts is not None:
        if starts is None:
            starts = tf.gather(tf.constant(word_starts), input_ids)
        chosen, replace_draw = choose_words(input_ids, is_special, starts, mask_seed, replace_seed,
                                            mlm_probability, max_predictions, spans)
        if max_predictions:  # The chosen positions first (top_k keeps the lower index among equals).
            batch["masked_positions"] = tf.math.top_k(tf.cast(chosen, tf.float32), k=max_predictions).indices
    else:
        draw = tf.random.stateless_uniform(shape, mask_seed)
        chosen = ~is_special & (draw < mlm_probability)
        if max_predictions:
            # Rank positions by their draw, chosen ones first, and keep the first K: top_k has a static shape.
            scores = tf.where(chosen, draw, 2.0)
            lowest = tf.math.top_k(-scores, k=max_predictions)
            chosen &= scores <= -lowest.values[:, -1:]
            batch["masked_positions"] = lowest.indices
        replace_draw = tf.random.stateless_uniform(shape, replace_seed)
    random_ids = tf.random.stateless_uniform(shape, random_seed, maxval=vocab_size, dtype=input_ids.dtype)
    masked_ids = tf.where(chosen & (replace_draw < mask_share), tf.cast(mask_token_id, input_ids.dtype), input_ids)
    is_random = chosen & (replace_draw >= mask_share) & (replace_draw < mask_share + random_share)
    batch["input_ids"] = tf.where(is_random, random_ids, masked_ids)
    batch["labels"] = tf.where(chosen, input_ids, tf.constant(-100, input_ids.dtype))
    return batch


def open_with_summary(input_ids, seed, *, summary_token_id, starts=None, **masking):
    """mask_tokens with <s> (`summary_token_id`) in place of each sample's first token, labelled with a token of the
    sample drawn at random (never a special one): through the LM head, <s>'s output learns to predict the sample's
    bag of words. Without it, a masked LM never trains <s>'s output, and pre-training leaves <s> attending to
    itself, though <s> at the start is what a classification head reads (benchmarks/glue.md, "What the
    classification head reads": this mends <s>'s features, not GLUE's fine-tuned scores). The other tokens are
    masked by mask_tokens, and <s> gets a predicted position of its own: K + 1 "masked_positions" for
    `max_predictions` K."""
    summary_seed, seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    rest = input_ids[:, 1:]
    batch = mask_tokens(rest, seed, **dict(masking, max_predictions=min(masking.get("max_predictions", 0),
                                                                         rest.shape[1])),
                        starts=None if starts is None else starts[:, 1:])
    is_content = ~is_special_token(rest, masking["special_token_ids"])
    # A uniform draw among the content tokens: the largest of their uniform numbers.
    drawn = tf.argmax(tf.where(is_content, tf.random.stateless_uniform(tf.shape(rest), summary_seed), -1.0), axis=1)
    summary_label = tf.where(tf.reduce_any(is_content, axis=1), tf.gather(rest, drawn, batch_dims=1), -100)
    first = tf.ones_like(input_ids[:, :1])
    batch["input_ids"] = tf.concat([first * summary_token_id, batch["input_ids"]], axis=1)
    batch["labels"] = tf.concat([summary_label[:, tf.newaxis], batch["labels"]], axis=1)
    if "masked_positions" in batch:
        batch["masked_positions"] = tf.concat([tf.zeros_like(first), batch["masked_positions"] + 1], axis=1)
    return batch


def masked_share(batches, special_token_ids):
    """The share of the tokens that can be masked (not special) that make_dataset's `batches` (finitely many)
    chose for prediction: what the masking does, to compare with its mlm_probability (whole words that do not fit
    under max_predictions stay unmasked). A chosen token replaced by a random one counts as chosen, special or not."""
    chosen, maskable = 0, 0
    for batch in batches:
        is_chosen = batch["labels"] != -100
        chosen += int(tf.math.count_nonzero(is_chosen))
        maskable += int(tf.math.count_nonzero(is_chosen | ~is_special_token(batch["input_ids"], special_token_ids)))
    return chosen / max(maskable, 1)


def is_special_token(input_ids, special_token_ids):
    """[batch, length] booleans: where a token is one of `special_token_ids`, never masked nor drawn at <s>."""
    return tf.reduce_any(input_ids[..., tf.newaxis] == special_token_ids, axis=-1)


# SpanBERT's span lengths, in words: Geometric(0.2) truncated to 1 to MAX_SPAN_WORDS and renormalised, P(n) in
# proportion to 0.2 * 0.8 ** (n - 1), a mean of 3.8 words (clipping instead would pile the tail on 10: 4.5).
MAX_SPAN_WORDS = 10


def choose_words(input_ids, is_special, starts, mask_seed, replace_seed, mlm_probability, max_predictions, spans):
    """(chosen, replace_draw) of mask_tokens, [batch, length] each, for whole words: a token starts a word where
    `starts` [batch, length] says so, at a sample's start, and after a special token that starts a word (each such
    special is a word of its own, never chosen; <unk>, for unknown characters, stays inside its word). Every draw is
    made per word slot (a row has at most `length` words) and spread over the word's tokens, so a word is chosen, and
    replaced 80/10/10, as a whole; each word with probability `mlm_probability`, which is thus also the expected
    share of tokens.

    With `spans`, words are chosen in SpanBERT's spans: a span of span_lengths() words, 1 to MAX_SPAN_WORDS,
    starts at each word slot with the probability span_start_probability(); a word is chosen when
    a span covers it (spans that overlap merge, as SpanBERT's, drawn one after the other, do not). Slots before the
    row count too, so that every word is covered with `mlm_probability`. The draws of the span's first word serve
    the whole span. With `max_predictions` K, words are kept in the order of their draws while their tokens fit
    in K, a word never cut."""
    length = input_ids.shape[1]
    starts |= tf.pad((is_special & starts)[:, :-1], [[0, 0], [1, 0]], constant_values=True)  # After <s>, </s>.
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # Each token's word slot.
    slots = MAX_SPAN_WORDS - 1 + length if spans else length  # Spans may start before the row.
    draws = tf.random.stateless_uniform([tf.shape(input_ids)[0], slots, 2], mask_seed)
    draw, replace = draws[..., 0], tf.random.stateless_uniform(tf.shape(draws)[:2], replace_seed)
    if spans:
        begins = draw < span_start_probability(mlm_probability)
        lengths = span_lengths(draws[..., 1])
        score = tf.fill([tf.shape(input_ids)[0], length], 2.0)
        span_replace = tf.zeros_like(score)
        for back in range(MAX_SPAN_WORDS):  # Slot w is covered by a span begun `back` slots earlier.
            first = MAX_SPAN_WORDS - 1 - back
            covers = begins[:, first:first + length] & (lengths[:, first:first + length] > back)
            better = covers & (draw[:, first:first + length] < score)
            score = tf.where(better, draw[:, first:first + length], score)
            span_replace = tf.where(better, replace[:, first:first + length], span_replace)
        draw, replace, chosen_word = score, span_replace, score < 2.0
    else:
        chosen_word = draw < mlm_probability
    chosen = ~is_special & tf.gather(chosen_word, word, batch_dims=1)
    if max_predictions:
        # Chosen tokens per word slot, the slots in the order of their draws, and the words that fit in K.
        rows = tf.range(tf.shape(word)[0])[:, tf.newaxis] * length
        sizes = tf.reshape(tf.math.unsorted_segment_sum(tf.cast(chosen, tf.int32), word + rows,
                                                        tf.size(word)), tf.shape(word))
        order = tf.argsort(tf.where(sizes > 0, draw, 2.0), axis=1, stable=True)
        fits = tf.cumsum(tf.gather(sizes, order, batch_dims=1), axis=1) <= max_predictions
        kept = tf.gather(fits, tf.argsort(order, axis=1), batch_dims=1)
        chosen &= tf.gather(kept, word, batch_dims=1)
    return chosen, tf.gather(replace, word, batch_dims=1)


def span_lengths(uniform):
    """SpanBERT's span lengths, in words, from uniform draws in [0, 1), by inversion of the truncated law's
    cumulative distribution: P(length <= n) = (1 - 0.8 ** n) / (1 - 0.8 ** MAX_SPAN_WORDS). The draw, scaled into
    [0, 1 - 0.8 ** MAX_SPAN_WORDS), is inverted as an untruncated Geometric(0.2) draw would be, so that no length
    exceeds MAX_SPAN_WORDS; the minimum only guards against float32 rounding at the top. Elementwise: static
    shapes, no state, safe under XLA."""
    scaled = uniform * (1 - 0.8 ** MAX_SPAN_WORDS)
    return tf.minimum(1 + tf.floor(tf.math.log(1.0 - scaled) / math.log(0.8)), MAX_SPAN_WORDS)


def span_start_probability(mlm_probability):
    """The probability q that a span begins at a word slot, such that a slot is covered with `mlm_probability`:
    1 - prod over n < MAX_SPAN_WORDS of (1 - q P(length > n)) = mlm_probability, solved by bisection. P(length > n)
    is span_lengths' truncated law: (0.8 ** n - 0.8 ** MAX_SPAN_WORDS) / (1 - 0.8 ** MAX_SPAN_WORDS)."""
    top = 0.8 ** MAX_SPAN_WORDS
    survival = (0.8 ** np.arange(MAX_SPAN_WORDS) - top) / (1 - top)
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if 1 - np.prod(1 - middle * survival) < mlm_probability else (low, middle)
    return (low + high) / 2


# The scripts written without spaces between words (Unicode ranges): Chinese characters, kana, Thai, Lao, Khmer,
# Myanmar. There "▁" comes only after a space, so the pieces' markers would make a "word" of a whole clause.
UNSPACED_SCRIPTS = [(0x0E00, 0x0EFF),  # Thai, Lao
                    (0x1000, 0x109F), (0x1780, 0x17FF), (0x19E0, 0x19FF),  # Myanmar, Khmer and its symbols
                    (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x3029), (0x3040, 0x30FF), (0x31F0, 0x31FF),
                    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFF66, 0xFF9F),  # Han, kana
                    (0x20000, 0x323AF)]  # Han, the supplementary planes


def begins_unspaced_word(piece):
    """Whether a piece begins with a character of a script written without spaces that can begin a word (not a
    combining mark, such as a Thai vowel or tone mark above or below its consonant): as Google's BERT splits Chinese
    characters, each such piece is a word of its own, and whole-word masking is never coarser than token masking
    there. Finer words come from a word segmenter (prepare_tfrecord_shards.py --word_segmenter)."""
    first = piece.lstrip("▁")[:1]
    return bool(first) and any(low <= ord(first) <= high for low, high in UNSPACED_SCRIPTS) \
        and not unicodedata.category(first).startswith("M")


def word_start_table(tokenizer):
    """[vocabulary] booleans, True for the tokens that begin a word, read once from the tokenizer's pieces: for
    SentencePiece-style tokenizers (Metaspace, this pipeline's Unigram), those beginning with "▁"; for
    WordPiece (BERT's), those not beginning with "##"; for byte-level BPE (GPT-2, RoBERTa), "Ġ". In every case, a
    piece that begins with a character of a script written without spaces (begins_unspaced_word). Specials begin
    a word, but <unk>, which stands for characters inside one, and so do a byte-fallback piece's bytes ("<0xE4>").
    Raises ValueError for a tokenizer whose pieces do not show where words begin."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str()) if tokenizer.is_fast else {}
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    layout = json.dumps([backend.get("pre_tokenizer"), backend.get("decoder")])
    if backend.get("model", {}).get("type") == "WordPiece":
        prefix = backend["model"]["continuing_subword_prefix"]
        table = np.array([not piece.startswith(prefix) for piece in pieces])
    elif '"Metaspace"' in layout or '"ByteLevel"' in layout:
        marker = "▁" if '"Metaspace"' in layout else "Ġ"
        table = np.array([piece.startswith(marker) for piece in pieces])
    else:
        raise ValueError("--masking whole_word and span need a tokenizer whose pieces show where words begin "
                        "(SentencePiece's ▁, WordPiece's ##, or byte-level BPE's Ġ), but this one's show "
                        "none. Use --masking token, or a tokenizer from train_unigram.py.")
    table |= np.array([begins_unspaced_word(piece.removeprefix("##")) for piece in pieces])
    table[[i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]] = True
    return table


def default_max_predictions(mlm_probability, max_length, masking="token"):
    """Positions per sequence the LM head computes logits at: the expected number of masks plus three standard
    deviations, rounded up to a multiple of 8 (a friendly shape for TPUs): the cap almost never bites. Spans of
    several words vary more from sequence to sequence: twice that margin."""
    mean = mlm_probability * max_length
    spread = (2 if masking == "span" else 1) * 3 * math.sqrt(max_length * mlm_probability * (1 - mlm_probability))
    return min(max_length, 8 * math.ceil((mean + spread) / 8))


# ----------------------------------------------------------------------------------------------------------------
# The frequency baseline


def frequency_log_probs(token_counts, special_token_ids):
    """Log-probabilities of the best constant predictor of masked tokens: each token's frequency in the training
    data, special tokens left out (-inf: never masked), add-one smoothed so that an unseen token costs finitely."""
    counts = np.asarray(token_counts, np.float64) + 1.0
    counts[list(special_token_ids)] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum()).astype(np.float32)


def start_from_token_frequencies(mlm, log_probs):
    """Sets the LM head's output bias to the tokens' log-frequencies: a new model then starts out predicting as the
    frequency table does. Special tokens get the lowest finite value, which keeps the logits finite in bfloat16."""
    finite = np.isfinite(log_probs)
    for bias in mlm.get_lm_head().get_bias().values():  # ALBERT has two, of which TensorFlow uses one.
        bias.assign(np.where(finite, log_probs, log_probs[finite].min()))
