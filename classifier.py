"""Fine-tuning a 🤗 TF…ForSequenceClassification with Keras `model.fit`, in one file to copy, as masked_lm.py is for
pre-training: it imports TensorFlow, tf-keras and NumPy, nothing else of this project.

- ClassifierTrainer: the step (train_step, first), its loss (and accuracy) over the examples of weight 1 only, for
  classes or a regression;
- ValidationScores: after each epoch, one pass over the validation data: Keras' validation loss (and accuracy), and
  metrics that need every prediction at once (F1, a correlation);
- training_dataset and evaluation_dataset: batches of one static shape, the last evaluation batch filled up with
  examples of weight 0, so that every example counts exactly once.
"""

import numpy as np
import tensorflow as tf
# 🤗 Transformers' TF models are Keras 2 models: every Keras object here comes from tf_keras, not Keras 3.
import tf_keras as keras


class ClassifierTrainer(keras.Model):
    """Fine-tunes a 🤗 TF…ForSequenceClassification with model.fit, counting only the examples of weight 1.

    Every batch is (features, targets, sample weights): the targets are label ids, or numbers for a regression (a
    config with problem_type "regression": one output, as 🤗's models have then). A step's loss, the cross-entropy
    or the squared error, is the weighted sum over the global batch divided by the sum of its weights (an all-reduce
    across replicas): the padding of evaluation batches counts for nothing, where Keras' compiled loss would divide
    by every row. The loss is computed in float32: bfloat16 is too coarse for a log-softmax. With `jit_compile`,
    each replica's forward and backward passes are compiled with XLA, the optimizer update not: Keras cannot compile
    an update of variables mirrored on several devices (keras-team/tf-keras#385). A TPU compiles everything anyway.
    As in masked_lm.py, the steps are traced without AutoGraph: nothing in them branches on a tensor (a regression
    is known when the step is traced), and rewriting the model's source costs seconds.
    """

    def __init__(self, classifier, jit_compile=False):
        super().__init__()
        self.classifier = classifier
        self.regression = classifier.config.problem_type == "regression"
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")
        self.compute_gradients, self.weighted_sums = (
            tf.function(function, jit_compile=True, autograph=False) if jit_compile else function
            for function in (self._compute_gradients, self._weighted_sums))

    @property
    def metrics(self):  # What Keras resets at the start of each epoch and evaluation.
        return [self.loss_tracker] if self.regression else [self.loss_tracker, self.accuracy_tracker]

    def call(self, features, training=False):
        return self.classifier(**features, training=training).logits

    @tf.autograph.experimental.do_not_convert
    def train_step(self, batch):
        gradient_sums, (loss_sum, correct, count) = self.compute_gradients(*batch)
        global_count = tf.distribute.get_replica_context().all_reduce("sum", count)
        # The optimizer sums the replicas' gradients: divided by the global count, that sum is the gradient of the
        # mean over every example of the global batch.
        gradients = [gradient / global_count for gradient in gradient_sums]
        self.optimizer.apply_gradients(zip(gradients, self.classifier.trainable_variables))
        return self._update_metrics(loss_sum, correct, count)

    @tf.autograph.experimental.do_not_convert
    def test_step(self, batch):
        return self._update_metrics(*self.weighted_sums(*batch))

    @tf.autograph.experimental.do_not_convert
    def predict_step(self, batch):
        """The batch's outputs (logits), as Keras' own predict_step gives them; its loss and correct predictions go
        into the metrics as in test_step, so that one pass over the validation data gives both its predictions and
        Keras' validation loss (ValidationScores)."""
        features, targets, weights = batch
        outputs = self(features, training=False)
        self._update_metrics(*self._sums_of_outputs(outputs, targets, weights))
        return outputs

    def _weighted_sums(self, features, targets, weights, training=False):
        return self._sums_of_outputs(self(features, training=training), targets, weights)

    def _sums_of_outputs(self, outputs, targets, weights):
        """Weighted sums of the loss and of the correct predictions (none in a regression), and the sum of the
        weights."""
        outputs = tf.cast(outputs, tf.float32)
        if self.regression:
            loss = tf.square(outputs[:, 0] - targets)
            correct = tf.zeros_like(loss)
        else:
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=outputs)
            correct = tf.cast(tf.argmax(outputs, axis=-1, output_type=targets.dtype) == targets, tf.float32)
        return tf.reduce_sum(loss * weights), tf.reduce_sum(correct * weights), tf.reduce_sum(weights)

    def _compute_gradients(self, features, targets, weights):
        with tf.GradientTape() as tape:
            sums = self._weighted_sums(features, targets, weights, training=True)
        # Zeros for the weights the loss does not reach (MPNet's pooler).
        gradients = tape.gradient(sums[0], self.classifier.trainable_variables, unconnected_gradients="zero")
        return [tf.convert_to_tensor(gradient) for gradient in gradients], sums

    def _update_metrics(self, loss_sum, correct, count):
        self.loss_tracker.update_state(tf.math.divide_no_nan(loss_sum, count), sample_weight=count)
        self.accuracy_tracker.update_state(tf.math.divide_no_nan(correct, count), sample_weight=count)
        return {metric.name: metric.result() for metric in self.metrics}


class ValidationScores(keras.callbacks.Callback):
    """After each epoch, predicts `dataset` (an evaluation_dataset of `num_examples`) once and puts into the epoch's
    logs, where EarlyStopping, TensorBoard and the history read them, Keras' validation metrics of that pass (val_loss,
    val_accuracy: ClassifierTrainer.predict_step updates them) and what `score(outputs)` returns, {name: value}, as
    val_{name}: metrics that Keras' running means over batches cannot give, such as F1 or a correlation. It stands
    for fit's validation_data, which would pass over the data a second time. Place it before the callbacks that read
    the logs."""

    def __init__(self, dataset, num_examples, score):
        super().__init__()
        self.dataset, self.num_examples, self.score = dataset, num_examples, score

    def on_epoch_end(self, epoch, logs=None):
        self.model.reset_metrics()  # As Keras' evaluate does: the metrics of this pass alone, not the training's.
        outputs = self.model.predict(self.dataset, verbose=0)[:self.num_examples]  # The padding rows come last.
        logs.update({f"val_{metric.name}": float(metric.result()) for metric in self.model.metrics})
        logs.update({f"val_{name}": value for name, value in self.score(outputs).items()})


def training_dataset(features, targets, global_batch_size, seed):
    """Shuffled anew each epoch, in full batches only (one shape for XLA), every example of weight 1."""
    weights = np.ones(len(targets), dtype=np.float32)
    return (tf.data.Dataset.from_tensor_slices((features, targets, weights))
            .shuffle(len(targets), seed=seed, reshuffle_each_iteration=True)
            .batch(global_batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))


def evaluation_dataset(features, targets, global_batch_size):
    """Every example once, in order, in full batches with sample weights: the last batch is filled up with copies
    of the first examples (real inputs, so their logits are finite) of weight 0."""
    num_examples = len(targets)
    padded_size = num_examples + -num_examples % global_batch_size
    rows = np.arange(padded_size) % num_examples
    weights = (np.arange(padded_size) < num_examples).astype(np.float32)
    padded_features = {name: values[rows] for name, values in features.items()}
    return (tf.data.Dataset.from_tensor_slices((padded_features, targets[rows], weights))
            .batch(global_batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))

