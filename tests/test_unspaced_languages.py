"""Whole words in languages written without spaces (Chinese, Thai): the characters rule that needs no package, a word
segmenter's words stored in the shards, and the share of tokens actually masked, stated and checked. On the slices
of Chinese and Thai text in tests/data, with tokenizers and shards built once for the session."""

import argparse
import functools
import json
import logging
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO, built_once, run_main
from masked_lm import default_max_predictions, make_dataset, mask_tokens, masked_share, word_start_table
from shards import Manifest, find_shards
from utils import UserError

CHINESE = REPO / "tests" / "data" / "chinese-text" / "classical-modern-600.txt"
THAI = REPO / "tests" / "data" / "thai-text" / "thaigov-110.txt"
TEXTS = {"chinese": (CHINESE, 2000), "thai": (THAI, 600)}  # The text, and its tokenizer's vocabulary.
MAX_LENGTH = 64


def build_tokenizer(language, tmp_path_factory):
    text, vocab_size = TEXTS[language]
    return built_once(tmp_path_factory, f"{language}-tokenizer/tokenizer", lambda output_dir: run_main(
        "train_unigram.py", "--train_file", text, "--vocab_size", vocab_size, "--output_dir", output_dir))


def build_shards(language, tokenizer_dir, tmp_path_factory, segmenter=None):
    """Train shards of the whole text, and validation shards of its last 50 lines (the tests only read shards)."""
    def build(output_dir):
        validation = output_dir.parent / "validation.txt"
        validation.write_text("".join(TEXTS[language][0].read_text(encoding="utf-8").splitlines(True)[-50:]),
                              encoding="utf-8")
        run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file",
                 TEXTS[language][0], "--validation_file", validation, "--max_length", MAX_LENGTH, "--shard_size", 100,
                 "--output_dir", output_dir, *(["--word_segmenter", segmenter] if segmenter else []))

    return built_once(tmp_path_factory, f"{language}-shards-{segmenter}/tfrecords", build)


@pytest.fixture(scope="module", params=["chinese", "thai"])
def language(request):
    return request.param


@pytest.fixture(scope="module")
def tokenizer(language, tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tokenizer(language, tmp_path_factory))


@pytest.fixture(scope="module")
def chinese_tokenizer_dir(tmp_path_factory):
    return build_tokenizer("chinese", tmp_path_factory)


@pytest.fixture(scope="module")
def segmented_shards(chinese_tokenizer_dir, tmp_path_factory):
    """Chinese shards with the words of jieba's segmenter (rjieba: jieba's dictionary and algorithm, in Rust)."""
    return build_shards("chinese", chinese_tokenizer_dir, tmp_path_factory, segmenter="rjieba")


def made_of(text, words):
    """Whether `text` is a concatenation of some of `words`."""
    @functools.cache
    def from_(start):
        return start == len(text) or any(text.startswith(word, start) and from_(start + len(word))
                                          for word in words_by_first.get(text[start], ()))

    words_by_first = {}
    for word in words:
        words_by_first.setdefault(word[:1], []).append(word)
    return from_(0)


def masking_of(tokenizer, word_starts, mlm_probability=0.15):
    return dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                vocab_size=len(tokenizer), mlm_probability=mlm_probability, word_starts=word_starts,
                max_predictions=default_max_predictions(mlm_probability, MAX_LENGTH, "whole_word"))


def share_masked(files, masking, word_starts_in_shards=False):
    dataset = make_dataset(files, tf.distribute.InputContext(), batch_size=16, max_length=MAX_LENGTH,
                           masking=masking, seed=1, training=False, num_batches=8,
                           word_starts_in_shards=word_starts_in_shards)
    return masked_share(dataset.take(8), masking["special_token_ids"])


def marker_only_table(tokenizer):
    """The word starts of the pieces' "▁" alone (what word_start_table gave before the characters rule)."""
    table = np.array([piece.startswith("▁") for piece in tokenizer.convert_ids_to_tokens(range(len(tokenizer)))])
    table[[i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]] = True
    return table


@pytest.mark.fast
def test_a_piece_of_a_script_without_spaces_begins_a_word_but_not_a_combining_mark(tokenizer, language):
    pieces = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    table = word_start_table(tokenizer)
    first = [piece.lstrip("▁")[:1] for piece in pieces]
    if language == "chinese":
        han = [i for i, char in enumerate(first) if "\u4e00" <= char <= "\u9fff"]
        assert len(han) > 1000 and table[han].all()
    else:
        consonants = [i for i, char in enumerate(first) if "\u0e01" <= char <= "\u0e2e"]  # ก to ฮ
        thai_marks = "\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e48\u0e49"  # Vowels above and below, tone marks.
        marks = [i for i, char in enumerate(first) if char and char in thai_marks]
        assert len(consonants) > 100 and table[consonants].all()
        assert marks and not table[marks].any()  # ั ิ ี ... ่ ้ sit on the consonant before them, inside its word.
    latin = [i for i, piece in enumerate(pieces) if piece[:1].isascii() and piece[:1].isalpha()]
    assert not table[latin].any()  # A Latin piece without "▁" goes on the word before it, as it always did.


def test_whole_words_mask_the_share_asked_with_the_default_cap(tokenizer, language, tmp_path_factory):
    """The issue's measure: with "▁" alone, a Chinese "word" was a clause, and at 15 % with the default cap a
    fraction of the share asked was masked; by the characters rule, within a tenth of it."""
    files, _ = find_shards(str(build_shards(language, build_tokenizer(language, tmp_path_factory),
                                            tmp_path_factory) / "train"), MAX_LENGTH)
    by_characters = share_masked(files, masking_of(tokenizer, word_start_table(tokenizer)))
    by_markers = share_masked(files, masking_of(tokenizer, marker_only_table(tokenizer)))
    assert 0.135 <= by_characters <= 0.165
    assert by_markers < 0.135  # The test fails where the fix is missing.


def test_a_segmenter_s_words_are_stored_beside_the_ids_and_masked_whole(segmented_shards, chinese_tokenizer_dir):
    import rjieba
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chinese_tokenizer_dir)
    manifest = json.loads((segmented_shards / "train" / "manifest.json").read_text())
    assert manifest["word_segmenter"] == "rjieba"
    files, _ = find_shards(str(segmented_shards / "train"), MAX_LENGTH)
    # The shards' words are rjieba's: each word's tokens spell one of the words rjieba cuts the text into, or,
    # where a piece spans the end of one word and the start of the next, several of them (rarely a word's end).
    jieba_words = {unicodedata.normalize("NFKC", word) for word in rjieba.cut(CHINESE.read_text(encoding="utf-8"))}
    records = [tf.train.Example.FromString(record).features.feature
               for record in tf.data.TFRecordDataset(files[0]).as_numpy_iterator()]
    ids, starts = (np.array([record[name].int64_list.value for record in records])
                   for name in ("input_ids", "word_starts"))
    assert starts.shape == ids.shape and 0.3 < starts.mean() < 0.9
    words = []
    for row_ids, row_starts in zip(ids, starts):
        bounds = np.flatnonzero(row_starts).tolist() + [MAX_LENGTH]
        words += [row_ids[begin:end] for begin, end in zip(bounds[1:-1], bounds[2:-1])  # Whole words in the row.
                  if not set(row_ids[begin:end]) & set(tokenizer.all_special_ids)]
    spelled = [unicodedata.normalize("NFKC", tokenizer.decode(word)).strip() for word in words]
    assert sum(len(word) > 1 for word in words) > 100  # Words of several tokens.
    assert np.mean([word in jieba_words for word in spelled]) > 0.8
    assert np.mean([made_of(word, jieba_words) for word in spelled]) > 0.995  # 3,904 of 3,906.
    # Whole-word masking takes those words whole, and masks the share asked.
    masking = masking_of(tokenizer, word_start_table(tokenizer))
    dataset = make_dataset(files[:1], tf.distribute.InputContext(), batch_size=16, max_length=MAX_LENGTH,
                           masking=masking, seed=2, training=False, num_batches=4, word_starts_in_shards=True)
    batch = next(dataset.as_numpy_iterator())  # The first 16 records of the first shard, in order.
    chosen = batch["labels"] != -100
    word_of = np.cumsum(starts[:16], axis=1)
    for row in range(16):
        for word in np.unique(word_of[row][chosen[row]]):
            in_word = (word_of[row] == word) & ~np.isin(ids[row], tokenizer.all_special_ids)
            assert chosen[row][in_word].all()
    assert 0.135 <= share_masked(files, masking, word_starts_in_shards=True) <= 0.165


@pytest.mark.fast
def test_shards_of_another_segmenter_or_none_are_refused_together(segmented_shards, chinese_tokenizer_dir,
                                                                   tmp_path_factory):
    from shards import shards_word_segmenter

    plain = build_shards("chinese", chinese_tokenizer_dir, tmp_path_factory)
    train, _ = find_shards(str(segmented_shards / "train"), MAX_LENGTH)
    evaluation, _ = find_shards(str(plain / "validation"), MAX_LENGTH)
    assert shards_word_segmenter(train, []) == "rjieba"
    with pytest.raises(UserError, match="hold the words of rjieba, the evaluation shards .* those of none"):
        shards_word_segmenter(train, evaluation)


@pytest.mark.fast
def test_a_manifest_written_before_segmenters_reads_as_shards_without_words():
    fields = dict(split="train", max_length=64, num_samples=1, num_tokens=64, dropped_tokens=0, num_parts=1,
                  num_texts=1, tokenizer="t", vocab_size=10, vocabulary_fingerprint="f",
                  shards=[{"file": "dataset-0-1.tfrecord", "num_samples": 1, "num_bytes": 100}])
    assert Manifest.from_json(json.dumps(fields), "manifest.json").word_segmenter is None


@pytest.mark.fast
def test_a_segmenter_not_installed_names_its_package(monkeypatch):
    import word_segmenters

    monkeypatch.setitem(word_segmenters.SEGMENTERS, "jieba", ("no_such_module_here", "jieba", None))
    with pytest.raises(UserError, match="needs the package jieba, which is not installed.*pip install jieba"):
        word_segmenters.load_word_segmenter("jieba")


def test_a_masking_that_falls_short_is_stated_with_its_cause(tokenizer, language, tmp_path_factory, caplog):
    """run_mlm.py's statement of the masking: the share in the log, and a warning naming the cause when it falls
    short by more than a fifth (here: "▁" words, clauses of many tokens, under the default cap)."""
    from run_mlm import state_the_masking

    files, _ = find_shards(str(build_shards(language, build_tokenizer(language, tmp_path_factory),
                                            tmp_path_factory) / "train"), MAX_LENGTH)
    args = argparse.Namespace(per_replica_batch_size=16, max_length=MAX_LENGTH, seed=0, mlm_probability=0.15,
                              masking="whole_word", max_predictions_per_seq=default_max_predictions(
                                  0.15, MAX_LENGTH, "whole_word"))
    with caplog.at_level(logging.INFO, logger="run_mlm"):
        share = state_the_masking(args, dict(masking=masking_of(tokenizer, word_start_table(tokenizer)),
                                             pairs=None), files)
    assert f"Masking: {100 * share:.1f} % of the tokens chosen for prediction, for --mlm_probability 0.15" \
        in caplog.text and "Only" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="run_mlm"):
        short = state_the_masking(args, dict(masking=masking_of(tokenizer, marker_only_table(tokenizer)),
                                             pairs=None), files)
    assert short < 0.8 * 0.15
    assert f"Only {100 * short:.1f} % of the tokens are masked, where --mlm_probability asks 15 %: whole words of " \
           f"many tokens do not fit under --max_predictions_per_seq {args.max_predictions_per_seq}" in caplog.text


@pytest.mark.fast
def test_word_starts_from_the_shards_take_the_table_s_place():
    """mask_tokens' `starts`: a row whose starts say one word of 8 tokens is chosen whole or not at all."""
    ids = tf.fill([512, 8], 7)
    starts = tf.constant([[True] + [False] * 7] * 512)
    batch = mask_tokens(ids, tf.constant([1, 2], tf.int64), mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4],
                        vocab_size=10, mlm_probability=0.5, word_starts=np.ones(10, bool), starts=starts)
    chosen = batch["labels"].numpy() != -100
    assert set(chosen.sum(axis=1)) == {0, 8}
