"""The masking step and the input pipeline of run_mlm.py, run in this process on a CPU."""

import argparse

import numpy as np
import pytest
import tensorflow as tf

from helpers import MAX_LENGTH, WIKITEXT
from masked_lm import default_max_predictions, make_dataset, mask_tokens, open_with_summary
from shards import find_shards
from utils import UserError

pytestmark = pytest.mark.fast  # The masking and the input pipeline: all in the quick subset.

VOCAB_SIZE = 1000
SPECIAL_IDS = [0, 1, 2, 3, 4]  # <s>, <pad>, </s>, <unk>, <mask>, as train_unigram.py lays them out.
MASK_ID = 4
MASKING = dict(mask_token_id=MASK_ID, special_token_ids=SPECIAL_IDS, vocab_size=VOCAB_SIZE, mlm_probability=0.15)


def masked(input_ids, seed, **overrides):
    """(masked input ids, labels) as NumPy arrays."""
    batch = mask_tokens(input_ids, tf.constant(seed, tf.int64), **{**MASKING, **overrides})
    return batch["input_ids"].numpy(), batch["labels"].numpy()


@pytest.fixture(scope="module")
def batch():
    """A large batch of real-looking rows: <s> words </s>, then padding on a random tail of each row."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCAB_SIZE, size=(1024, 128))
    ids[:, 0], ids[:, 63], ids[:, 64] = 0, 2, 0  # Two documents per row.
    lengths = rng.integers(70, 129, size=1024)
    ids[np.arange(128) >= lengths[:, None]] = 1
    ids[:, 1::17] = 3  # Some <unk> too.
    return tf.constant(ids, tf.int32)


def test_rates_of_masking_and_replacement(batch):
    (masked_ids, labels), ids = masked(batch, [1, 2]), batch.numpy()
    candidates = ~np.isin(ids, SPECIAL_IDS)
    chosen = labels != -100
    assert abs(chosen.sum() / candidates.sum() - 0.15) < 0.005  # About 100k candidates: a 0.1 % standard error.
    to_mask = masked_ids[chosen] == MASK_ID
    unchanged = masked_ids[chosen] == ids[chosen]
    randomized = ~to_mask & ~unchanged
    assert abs(to_mask.mean() - 0.8) < 0.01
    assert abs(randomized.mean() - 0.1) < 0.01
    assert abs(unchanged.mean() - 0.1) < 0.01  # A random draw equal to the original counts here: 1 in 1000.
    assert masked_ids[chosen][randomized].min() >= 0 and masked_ids[chosen][randomized].max() < VOCAB_SIZE


@pytest.mark.parametrize("objective,mask_share,shares", [
    ("mlm", None, (0.8, 0.1, 0.1)), ("mlm", 1.0, (1.0, 0.0, 0.0)), ("mlm", 0.6, (0.6, 0.2, 0.2)),
    ("electra", None, (0.85, 0.0, 0.15)), ("electra", 0.7, (0.7, 0.0, 0.3))])
def test_mask_share_sets_what_the_chosen_tokens_become(objective, mask_share, shares, batch):
    """--mask_share, through run_mlm.py's data_arguments: the shares of <mask>, a random token and unchanged."""
    from run_mlm import data_arguments

    tokenizer = word_level_tokenizer_without_cls()
    args = argparse.Namespace(masking="token", mlm_probability=0.15, max_predictions_per_seq=0, objective=objective,
                              mask_share=mask_share, cls_bag_of_words=False)
    masking = data_arguments(args, tokenizer)["masking"]
    (masked_ids, labels), ids = masked(batch, [5, 6], mask_share=masking["mask_share"],
                                       random_share=masking["random_share"]), batch.numpy()
    chosen = labels != -100
    to_mask = masked_ids[chosen] == MASK_ID
    unchanged = masked_ids[chosen] == ids[chosen]
    for share, expected in zip((to_mask.mean(), (~to_mask & ~unchanged).mean(), unchanged.mean()), shares):
        assert abs(share - expected) < 0.01


def word_level_tokenizer_without_cls():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                   unk_token="<unk>", mask_token="<mask>")


def test_special_tokens_and_padding_are_never_masked(batch):
    (masked_ids, labels), ids = masked(batch, [3, 4]), batch.numpy()
    special = np.isin(ids, SPECIAL_IDS)
    assert (labels[special] == -100).all()
    assert (masked_ids[special] == ids[special]).all()
    assert (masked_ids[~special] == MASK_ID).sum() > 0


def test_labels_hold_the_original_tokens_exactly_where_chosen(batch):
    (masked_ids, labels), ids = masked(batch, [5, 6]), batch.numpy()
    chosen = labels != -100
    assert (labels[chosen] == ids[chosen]).all()
    assert (masked_ids[~chosen] == ids[~chosen]).all()  # Nothing changes where there is no label.
    assert masked_ids.dtype == ids.dtype and masked_ids.shape == ids.shape


def test_masks_are_a_function_of_the_seed(batch):
    first, again, other = masked(batch, [7, 8]), masked(batch, [7, 8]), masked(batch, [7, 9])
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[1], other[1])


def test_masking_compiles_with_xla(batch):
    # XLA may pick another random-number algorithm than the host does, so compare properties, not values.
    compiled = tf.function(lambda ids, seed: mask_tokens(ids, seed, **MASKING, max_predictions=32), jit_compile=True)
    result = {k: v.numpy() for k, v in compiled(batch, tf.constant([1, 2], tf.int64)).items()}
    masked_ids, labels, ids = result["input_ids"], result["labels"], batch.numpy()
    again = compiled(batch, tf.constant([1, 2], tf.int64))["labels"].numpy()
    chosen = labels != -100
    assert np.array_equal(labels, again)
    assert (labels[chosen] == ids[chosen]).all() and (masked_ids[~chosen] == ids[~chosen]).all()
    assert not chosen[np.isin(ids, SPECIAL_IDS)].any()
    assert abs(chosen.sum() / (~np.isin(ids, SPECIAL_IDS)).sum() - 0.15) < 0.005


def test_at_most_max_predictions_per_sequence_and_their_positions(batch):
    assert default_max_predictions(0.15, 128) == 32 and default_max_predictions(0.15, 512) == 104
    # A high probability makes the cap bite in many rows. Same seed, same draws: the cap keeps a subset.
    uncapped = masked(batch, [9, 9], mlm_probability=0.3)[1] != -100
    result = mask_tokens(batch, tf.constant([9, 9], tf.int64), **{**MASKING, "mlm_probability": 0.3},
                         max_predictions=24)
    labels, positions = result["labels"].numpy(), result["masked_positions"].numpy()
    chosen = labels != -100
    assert positions.shape == (1024, 24)
    assert (chosen.sum(axis=1) == np.minimum(uncapped.sum(axis=1), 24)).all()
    assert (uncapped.sum(axis=1) > 24).mean() > 0.3 and not (chosen & ~uncapped).any()
    for row in range(1024):
        assert len(set(positions[row])) == 24  # Distinct positions...
        assert set(np.flatnonzero(chosen[row])) <= set(positions[row])  # ...covering every chosen one.
    # With the usual probability and the default cap, the rates stay as without a cap.
    uncapped = masked(batch, [1, 2])[1] != -100
    capped = masked(batch, [1, 2], max_predictions=default_max_predictions(0.15, 128))[1] != -100
    assert abs(capped.sum() / uncapped.sum() - 1) < 0.002


def input_context():
    return tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)


def test_evaluation_batches_are_identical_on_every_pass(shards_dir):
    files, sizes = find_shards(str(shards_dir / "validation"), MAX_LENGTH)
    dataset = make_dataset(files, input_context(), batch_size=16, max_length=MAX_LENGTH, masking=MASKING,
                           seed=42, training=False, num_batches=sum(sizes) // 16)
    assert dataset.element_spec["input_ids"].shape == (16, MAX_LENGTH)  # Static: one shape for XLA.
    num_batches = sum(sizes) // 16
    batches = [{k: v.numpy() for k, v in batch.items()} for batch in dataset.take(2 * num_batches)]
    passes = [batches[:num_batches], batches[num_batches:]]
    for first, second in zip(*passes):
        assert all(np.array_equal(first[k], second[k]) for k in ("input_ids", "attention_mask", "labels"))
    assert len({batch["labels"].tobytes() for batch in passes[0]}) == len(passes[0])  # New masks per batch.


def test_training_batches_are_shuffled_masked_and_endless(shards_dir):
    files, sizes = find_shards(str(shards_dir / "train"), MAX_LENGTH)
    dataset = make_dataset(files, input_context(), batch_size=8, max_length=MAX_LENGTH, masking=MASKING,
                           seed=1, training=True, shuffle_buffer_size=500)
    assert dataset.element_spec["labels"].shape == (8, MAX_LENGTH)
    num_batches = 2 * sum(sizes) // 8 + 3  # More than two epochs: the data repeats.
    rows = np.concatenate([batch["labels"].numpy() for batch in dataset.take(num_batches)])
    assert rows.shape == (num_batches * 8, MAX_LENGTH)
    assert abs((rows != -100).mean() - 0.15) < 0.03
    first_rows = [batch["labels"].numpy() for batch in make_dataset(
        files, input_context(), batch_size=8, max_length=MAX_LENGTH, masking=MASKING, seed=2, training=True,
        shuffle_buffer_size=500).take(3)]
    assert not np.array_equal(rows[:24], np.concatenate(first_rows))  # Another seed, another order and masks.


def test_a_stream_that_skips_batches_goes_on_with_the_batches_of_a_stream_that_did_not(shards_dir):
    # A resumed run's data: host 1 of 2, each step a batch of 8 samples for each of its 2 replicas. Skipped to a
    # step a little before the end of the first and of the second pass over the host's shards (each reshuffled), it
    # holds the samples and masks of a stream read from the start, across that end, the shuffle buffer full.
    files, sizes = find_shards(str(shards_dir / "train"), MAX_LENGTH)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)

    def stream(skip_batches, num_batches):
        dataset = make_dataset(files, context, batch_size=8, max_length=MAX_LENGTH, masking=MASKING, seed=5,
                               training=True, shuffle_buffer_size=300, skip_batches=skip_batches)
        return [{name: value.numpy() for name, value in batch.items()} for batch in dataset.take(num_batches)]

    batches_per_pass = sum(sizes[1::2]) / 8
    from_the_start = stream(0, int(2 * batches_per_pass) + 8)
    for step in (int(batches_per_pass / 2) - 2, int(batches_per_pass) - 2):
        skipped = stream(2 * step, 8)
        for batch, unskipped in zip(skipped, from_the_start[2 * step:2 * step + 8], strict=True):
            assert all(np.array_equal(batch[name], unskipped[name]) for name in ("input_ids", "labels"))


def test_each_host_reads_its_own_shards(shards_dir):
    files, sizes = find_shards(str(shards_dir / "validation"), MAX_LENGTH)
    for host in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=host, num_replicas_in_sync=2)
        dataset = make_dataset(files, context, batch_size=4, max_length=MAX_LENGTH, masking=MASKING, seed=0,
                               training=False, num_batches=sum(sizes[host::2]) // 4).take(sum(sizes[host::2]) // 4)
        # Undo the masking: the labels hold the original token wherever the input was changed.
        read = {tuple(np.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])[row])
                for batch in dataset.as_numpy_iterator() for row in range(4)}
        own_files = files[host::2]  # Host i reads shards i, i + 2, i + 4, ...
        own_rows = {tuple(row) for file in own_files for row in tf.data.TFRecordDataset(file).map(
            lambda record: tf.io.parse_single_example(
                record, {"input_ids": tf.io.FixedLenFeature([MAX_LENGTH], tf.int64)})["input_ids"]
        ).as_numpy_iterator()}
        assert read and read <= own_rows
        assert len(own_rows) - len(read) < 4  # Only the last partial batch is left out.


def test_fit_calls_cover_every_step_once_in_aligned_rounds():
    from run_mlm import fit_calls
    assert fit_calls(0, 1000, 250) == [(0, 250, 4)]
    assert fit_calls(0, 1100, 250) == [(0, 250, 4), (1000, 100, 1)]
    assert fit_calls(130, 1100, 250) == [(130, 120, 1), (250, 250, 3), (1000, 100, 1)]  # Resumed at step 130.
    assert fit_calls(130, 200, 250) == [(130, 70, 1)]
    assert fit_calls(500, 500, 250) == []


def test_token_masking_is_the_same_function_of_the_seed_as_before(batch):
    # --masking token, the default, draws as it always has: a uniform per token from the first of three seeds split
    # from the batch's seed, a second for the 80/10/10 choice, a third for the random tokens.
    ids, seed = batch.numpy(), tf.constant([11, 12], tf.int64)
    mask_seed, replace_seed, random_seed = tf.random.experimental.stateless_split(seed, 3)
    chosen = ~np.isin(ids, SPECIAL_IDS) & (tf.random.stateless_uniform(ids.shape, mask_seed).numpy() < 0.15)
    replace = tf.random.stateless_uniform(ids.shape, replace_seed).numpy()
    random_ids = tf.random.stateless_uniform(ids.shape, random_seed, maxval=VOCAB_SIZE, dtype=tf.int32).numpy()
    expected = np.where(chosen & (replace < 0.8), MASK_ID, np.where(chosen & (replace >= 0.8) & (replace < 0.9),
                                                                    random_ids, ids))
    masked_ids, labels = masked(batch, seed)
    assert np.array_equal(masked_ids, expected) and np.array_equal(labels, np.where(chosen, ids, -100))


def wordpiece_tokenizer():
    """A WordPiece tokenizer as BERT's (## continues a word), trained here on the test data."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train([str(WIKITEXT / "train.txt")], trainers.WordPieceTrainer(vocab_size=1000, special_tokens=specials))
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def rows_of_words(tokenizer, lines, length):
    """Rows of `length` ids of the lines' tokens, concatenated with the tokenizer's specials as the shards are, and
    for each token the word it belongs to by the tokenizer's own account (word_ids; -1 for specials, <unk> too)."""
    ids, words = [], []
    for number, encoding in enumerate(tokenizer(lines).encodings):
        ids += encoding.ids
        words += [-1 if word is None or token in tokenizer.all_special_ids else number * 10_000 + word
                  for token, word in zip(encoding.ids, encoding.word_ids)]
    rows = len(ids) // length
    return (tf.constant(np.reshape(ids[:rows * length], [rows, length]), tf.int32),
            np.reshape(words[:rows * length], [rows, length]))


@pytest.mark.parametrize("kind", ["unigram", "wordpiece"])
def test_whole_words_and_spans_are_never_cut_on_real_text(kind, tokenizer_dir):
    from transformers import AutoTokenizer

    from masked_lm import word_start_table

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if kind == "unigram" else wordpiece_tokenizer()
    lines = [line for line in (WIKITEXT / "validation.txt").read_text().splitlines() if line.strip()][:300]
    ids, words = rows_of_words(tokenizer, lines, MAX_LENGTH)
    assert (words[:, 1:] == words[:, :-1]).mean() > 0.1  # Many words of several tokens.
    masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                   vocab_size=len(tokenizer), mlm_probability=0.4, word_starts=word_start_table(tokenizer))
    for spans, max_predictions in ((False, 0), (False, 16), (True, 0), (True, 16)):
        batch = mask_tokens(ids, tf.constant([5, 6], tf.int64), **masking, spans=spans,
                            max_predictions=max_predictions)
        chosen, changed = batch["labels"].numpy() != -100, batch["input_ids"].numpy()
        assert chosen.any() and not chosen[words == -1].any()
        all_masked = []  # For each chosen word of several tokens: did they all become <mask>?
        for row in range(len(words)):
            for word in set(words[row]) - {-1}:
                in_word = words[row] == word
                assert chosen[row][in_word].all() or not chosen[row][in_word].any(), (spans, row, word)
                if chosen[row][in_word].all() and in_word.sum() > 1:
                    all_masked.append((changed[row][in_word] == tokenizer.mask_token_id).all())
        # 80/10/10 per word: 80 % of the words are all <mask> (per token, 0.8 ** tokens of them would be).
        assert len(all_masked) > 300 and abs(np.mean(all_masked) - 0.8) < 0.06
        if max_predictions:
            assert chosen.sum(axis=1).max() <= max_predictions
            positions = batch["masked_positions"].numpy()
            assert all(set(np.flatnonzero(chosen[row])) <= set(positions[row]) for row in range(len(words)))


def test_spans_are_as_long_as_spanbert_s_and_cover_mlm_probability_of_the_words():
    # Rows where every token is a word: a run of chosen tokens is a span, or rarely spans that touch (at 1 % few
    # do). Runs cut by a row's edge are left out. SpanBERT's lengths, Geometric(0.2) truncated to 1 to 10 words and
    # renormalised, have a mean of 3.797 words; clipped at 10 instead, 4.46.
    every_token_a_word = np.ones(VOCAB_SIZE, bool)
    ids = tf.fill([4096, 1024], 7)
    chosen = masked(ids, [1, 2], mlm_probability=0.01, word_starts=every_token_a_word, spans=True)[1] != -100
    edges = np.diff(np.pad(chosen.astype(np.int8), [[0, 0], [1, 1]]), axis=1)
    begins, ends = np.nonzero(edges == 1)[1], np.nonzero(edges == -1)[1]
    inside = (begins > 0) & (ends < ids.shape[1])
    assert inside.sum() > 8000 and abs((ends - begins)[inside].mean() - 3.8) < 0.1
    # With spans so long, as many words are still covered as mlm_probability says.
    chosen = masked(ids[:1024], [3, 4], mlm_probability=0.15, word_starts=every_token_a_word, spans=True)[1] != -100
    assert abs(chosen.mean() - 0.15) < 0.005


@pytest.mark.parametrize("mode", ["token", "whole_word", "span"])
def test_the_masked_share_is_mlm_probability_in_every_mode(mode, shards_dir, tokenizer_dir):
    from transformers import AutoTokenizer

    from masked_lm import word_start_table

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    files, sizes = find_shards(str(shards_dir / "validation"), MAX_LENGTH)
    masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                   vocab_size=len(tokenizer), mlm_probability=0.3, spans=mode == "span",
                   max_predictions=default_max_predictions(0.3, MAX_LENGTH, mode),
                   word_starts=None if mode == "token" else word_start_table(tokenizer))
    dataset = make_dataset(files, input_context(), batch_size=32, max_length=MAX_LENGTH, masking=masking, seed=3,
                           training=True, shuffle_buffer_size=100)
    chosen = candidates = 0
    for batch in dataset.take(60).as_numpy_iterator():  # About 100,000 candidate tokens.
        chosen += (batch["labels"] != -100).sum()
        original = np.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        candidates += (~np.isin(original, tokenizer.all_special_ids)).sum()
    assert abs(chosen / candidates - 0.3) < 0.01


def test_cls_bag_of_words_opens_every_sample_with_s_labelled_with_one_of_its_tokens(shards_dir, tokenizer_dir):
    """--cls_bag_of_words, through run_mlm.py's data_arguments and make_dataset, on real shards: <s> replaces
    each sample's first token, its label is a token of the rest of the sample (never a special one), the rest is
    masked as before, and the LM head computes logits at <s> too."""
    from transformers import AutoTokenizer

    from run_mlm import data_arguments

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    args = argparse.Namespace(masking="token", mlm_probability=0.15, max_predictions_per_seq=32, objective="mlm",
                              mask_share=None, cls_bag_of_words=True, tokenizer=str(tokenizer_dir))
    files, _ = find_shards(str(shards_dir / "validation"), MAX_LENGTH)
    dataset = make_dataset(files, input_context(), batch_size=16, max_length=MAX_LENGTH, seed=4, training=False,
                           num_batches=4, **data_arguments(args, tokenizer))
    special = tokenizer.all_special_ids
    for batch in dataset.take(4).as_numpy_iterator():
        ids, labels, positions = batch["input_ids"], batch["labels"], batch["masked_positions"]
        assert (ids[:, 0] == tokenizer.cls_token_id).all() and positions.shape == (16, 33)
        original = np.where(labels != -100, labels, ids)[:, 1:]
        for row, label in zip(original, labels[:, 0]):
            assert label not in special and label in row
        rest = labels[:, 1:] != -100
        assert 0.1 < rest.mean() < 0.2  # mlm_probability 0.15 of the rest's tokens, most of them not special.
        assert 0.7 < (ids[:, 1:][rest] == tokenizer.mask_token_id).mean() < 0.9  # 80 % of them become <mask>.
        assert (positions[:, 0] == 0).all()
        for row_labels, row_positions in zip(labels, positions):
            assert set(np.flatnonzero(row_labels != -100)) <= set(row_positions)

    with pytest.raises(UserError, match="--cls_bag_of_words trains the token a classification head reads"):
        data_arguments(args, word_level_tokenizer_without_cls())


def test_the_label_at_s_is_drawn_uniformly_from_the_sample_s_tokens():
    """Each token of the sample (the first one excepted: <s> takes its place) is drawn as often as it occurs; a
    sample of special tokens only gets no label at <s>."""
    rows = tf.constant([[9, 7, 7, 7, 8, 2, 1, 1]] * 4000 + [[0, 1, 1, 1, 1, 1, 1, 1]], tf.int32)
    batch = open_with_summary(rows, tf.constant([1, 2], tf.int64), summary_token_id=0, **MASKING)
    drawn = batch["labels"].numpy()[:, 0]
    assert set(drawn[:-1]) == {7, 8} and drawn[-1] == -100
    assert abs((drawn[:-1] == 7).mean() - 0.75) < 0.03  # 3 of the 4 content tokens; the sd is 0.007.


def test_whole_word_masking_refuses_a_tokenizer_that_does_not_mark_words():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from masked_lm import word_start_table
    from run_mlm import data_arguments
    from utils import UserError

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "[MASK]": 1, "the": 2, "game": 3}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", mask_token="[MASK]")
    # masked_lm.py, which imports nothing of the project, raises ValueError; run_mlm.py gives its message as the user's.
    with pytest.raises(ValueError, match="need a tokenizer whose pieces show where words begin"):
        word_start_table(tokenizer)
    args = argparse.Namespace(masking="whole_word", mlm_probability=0.15, max_predictions_per_seq=0, objective="mlm")
    with pytest.raises(UserError, match="need a tokenizer whose pieces show where words begin"):
        data_arguments(args, tokenizer)
