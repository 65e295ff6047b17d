"""train_unigram.py: the saved tokenizer, its special tokens, its inputs, and its error messages."""

import collections
import itertools
import json
import math
import re
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
from transformers import AutoTokenizer

import train_unigram
from corpus import iter_text_file_batches
from train_unigram import (build_tokenizer, log_one_minus_exp, reservoir_sample, tokenizer_from_sentencepiece,
                           train_sentencepiece, train_tokenizer)

from helpers import TOKENIZER_LINES, WIKITEXT, assert_entry_point_error, run_main, run_script, write_compressed


def texts_trained_on(result):
    return int(re.search(r"Trained on (\d+) texts", result.stderr).group(1))


@pytest.mark.fast
def test_tokenizer_loads_offline_with_roberta_layout(tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert tokenizer.is_fast
    assert len(tokenizer) == 1000
    assert tokenizer.model_max_length == 512
    assert [tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id,
            tokenizer.unk_token_id, tokenizer.mask_token_id] == [0, 1, 2, 3, 4]
    assert (tokenizer.cls_token, tokenizer.sep_token) == ("<s>", "</s>")


@pytest.mark.fast
def test_encoding_wraps_text_and_keeps_special_tokens_whole(tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = tokenizer("The game was <unk> in <mask> .").input_ids
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    tokens = tokenizer.convert_ids_to_tokens(ids)
    # <mask> and <unk> absorb the space before them: no stray "▁" token precedes them.
    assert tokens[tokens.index("<mask>") - 1] == "▁in"
    assert tokens[tokens.index("<unk>") - 1] == "▁was"
    assert tokenizer.decode(ids, skip_special_tokens=True).split() == ["The", "game", "was", "in", "."]


@pytest.mark.fast
def test_spaces_at_the_ends_and_runs_of_spaces_do_not_make_tokens(tokenizer_dir):
    # SentencePiece trains on text with these spaces removed, so the tokenizer removes them too: otherwise the
    # trailing space of every WikiText line would become a token "▁" of its own.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert tokenizer.tokenize("  The game   was  played . ") == tokenizer.tokenize("The game was played .")


def test_converted_tokenizer_encodes_as_sentencepiece():
    # The quality measured for SentencePiece's model is the quality of the saved tokenizer only if the conversion
    # to 🤗 Tokenizers changes no token.
    lines = [line for line in (WIKITEXT / "train.txt").read_text().split("\n")[:TOKENIZER_LINES] if line.strip()]
    normalizer = build_tokenizer().normalizer
    model = train_sentencepiece(lines, 1000, normalizer)
    tokenizer = tokenizer_from_sentencepiece(model)
    processor = spm.SentencePieceProcessor(model_proto=model)
    # Without WikiText's "<unk>", which the 🤗 tokenizer matches as its special token before the model runs.
    validation = [line.replace("<unk>", "") for line in (WIKITEXT / "validation.txt").read_text().split("\n")]
    assert sum(1 for line in validation if line.strip()) > 10
    for line in validation:
        assert tokenizer.encode(line, add_special_tokens=False).ids == \
            processor.encode(normalizer.normalize_str(line)), line


def test_wikitext_slice_skips_empty_lines(tokenizer_dir):
    # The fixture read TOKENIZER_LINES lines; the saved tokenizer must not have seen the blank ones.
    lines = (WIKITEXT / "train.txt").read_text().split("\n")[:TOKENIZER_LINES]
    non_empty = sum(1 for line in lines if line.strip())
    result = run_main("train_unigram.py", "--train_file", WIKITEXT / "train.txt", "--limit", TOKENIZER_LINES,
                      "--vocab_size", 500, "--output_dir", tokenizer_dir.parent / "again")
    assert texts_trained_on(result) == non_empty < TOKENIZER_LINES


def test_json_lines_and_parquet_with_a_text_column(tmp_path):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    records = [{"body": " ".join(words[i % 7:]) + f" {i}"} for i in range(200)]
    records += [{"body": ""}, {"body": "   \t "}, {"body": "\n"}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(record) for record in records))
    pq.write_table(pa.table({"body": [record["body"] for record in records]}), tmp_path / "data.parquet")
    write_compressed(tmp_path / "data.jsonl.bz2", (tmp_path / "data.jsonl").read_bytes())  # 🤗 Datasets decompresses.

    for name in ("data.jsonl", "data.parquet", "data.jsonl.bz2"):
        result = run_main("train_unigram.py", "--train_file", tmp_path / name, "--text_column", "body",
                          "--vocab_size", 50, "--output_dir", tmp_path / f"tokenizer-{name}")
        assert texts_trained_on(result) == 200  # The three empty or whitespace-only records were skipped.
        tokenizer = AutoTokenizer.from_pretrained(tmp_path / f"tokenizer-{name}")
        assert tokenizer.decode(tokenizer("gamma delta").input_ids, skip_special_tokens=True) == "gamma delta"


def test_compressed_text_gives_the_tokenizer_of_the_text(tmp_path, tokenizer_dir):
    compressed = write_compressed(tmp_path / "train.txt.gz", (WIKITEXT / "train.txt").read_bytes())
    run_main("train_unigram.py", "--train_file", compressed, "--limit", TOKENIZER_LINES, "--vocab_size", 1000,
             "--output_dir", tmp_path / "tokenizer")
    # The session's tokenizer, trained on the same lines of train.txt.
    assert (tmp_path / "tokenizer" / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()


@pytest.mark.fast
def test_wrong_text_column_is_named(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"body": "some text"}\n')
    result = run_main("train_unigram.py", "--train_file", tmp_path / "data.jsonl", "--output_dir",
                      tmp_path / "out", expect_failure=True)
    assert "no column 'text'" in result.stderr and "--text_column" in result.stderr


@pytest.mark.fast
def test_input_with_only_blank_records_fails_clearly(tmp_path):
    (tmp_path / "blank.txt").write_text("\n   \n\t\n \n")
    result = run_main("train_unigram.py", "--train_file", tmp_path / "blank.txt", "--output_dir",
                      tmp_path / "out", expect_failure=True)
    assert "holds no text" in result.stderr


@pytest.mark.fast
def test_a_corpus_too_small_for_the_vocabulary_asked_for_fails_with_the_size_it_gives(tmp_path):
    args = ["--train_file", WIKITEXT / "validation.txt", "--limit", 100]
    result = run_main("train_unigram.py", *args, "--vocab_size", 200_000, "--output_dir", tmp_path / "big",
                      expect_failure=True)
    message = re.search(r"error: the corpus could not give a vocabulary of 200000 tokens, only (\d+) \(special "
                        r"tokens included\): its (\d+) texts are too little text for more\. Nothing was saved\.",
                        result.stderr)
    assert message and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "big").exists()
    # The size it names is one this corpus gives.
    size = int(message.group(1))
    assert f"pass --vocab_size {size} to train on this corpus" in result.stderr
    run_main("train_unigram.py", *args, "--vocab_size", size, "--output_dir", tmp_path / "fits")
    assert len(AutoTokenizer.from_pretrained(tmp_path / "fits")) == size


@pytest.mark.fast
def test_unknown_file_type_and_missing_file(tmp_path):
    (tmp_path / "data.csv").write_text("text\nhello\n")
    result = run_main("train_unigram.py", "--train_file", tmp_path / "data.csv", "--output_dir",
                      tmp_path / "out", expect_failure=True)
    assert "unknown extension '.csv'" in result.stderr
    result = run_main("train_unigram.py", "--train_file", tmp_path / "nope.txt", "--output_dir",
                      tmp_path / "out", expect_failure=True)
    assert "does not exist" in result.stderr


@pytest.mark.fast
def test_non_empty_output_dir_needs_overwrite(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("precious")
    args = ["--train_file", WIKITEXT / "validation.txt", "--limit", 300, "--vocab_size", 300,
            "--output_dir", tmp_path / "out"]
    result = run_main("train_unigram.py", *args, expect_failure=True)
    assert "is not empty" in result.stderr and "--overwrite" in result.stderr
    assert not (tmp_path / "out" / "tokenizer.json").exists()
    run_main("train_unigram.py", *args, "--overwrite")
    assert (tmp_path / "out" / "tokenizer.json").exists()


@pytest.mark.fast
def test_push_without_network_fails_after_the_local_save(tmp_path):
    result = run_main("train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--limit", 300,
                      "--vocab_size", 300, "--output_dir", tmp_path / "out", "--push_to_hub",
                      "--hub_model_id", "someone/tokenizer", expect_failure=True)
    assert "pushing to the Hub repository 'someone/tokenizer' failed" in result.stderr
    assert "Nothing is lost" in result.stderr
    assert AutoTokenizer.from_pretrained(tmp_path / "out").mask_token == "<mask>"


@pytest.mark.fast
def test_unreachable_hub_fails_at_once_with_what_to_do(tmp_path):
    # A closed port on 127.0.0.1 stands in for the Hub: the same connection error as having no network.
    result = run_script("train_unigram.py", "--output_dir", tmp_path / "out", expect_failure=True, timeout=60,
                        env={"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert_entry_point_error(result, "cannot reach the dataset 'Salesforce/wikitext'")  # Status 1, no traceback.
    assert "--train_file" in result.stderr and "make demo DATA=" in result.stderr


@pytest.mark.fast
def test_offline_mode_without_a_cached_dataset_fails_clearly(tmp_path):
    result = run_main("train_unigram.py", "--output_dir", tmp_path / "out", expect_failure=True)
    assert "could not load the dataset 'Salesforce/wikitext'" in result.stderr
    assert "--train_file" in result.stderr


@pytest.mark.fast
def test_text_that_is_not_utf8_is_named_with_the_line_and_offset_of_its_first_bad_byte(tmp_path):
    # "café" in Latin-1: é is the single byte 0xe9, which cannot stand alone in UTF-8.
    (tmp_path / "latin1.txt").write_bytes(b"first line\nsecond line\nun caf\xe9 noir\n")
    result = run_main("train_unigram.py", "--train_file", tmp_path / "latin1.txt", "--output_dir",
                      tmp_path / "out", expect_failure=True)
    assert f"error: the text file '{tmp_path / 'latin1.txt'}' is not UTF-8: the first invalid byte is at line 3, " \
           "byte offset 29 (byte 0xe9)" in result.stderr
    # The converted file keeps the extension that the scripts read it by.
    assert f"`iconv -f latin1 -t utf-8 {tmp_path / 'latin1.txt'} > {tmp_path / 'latin1.utf8.txt'}`, then pass the " \
           "converted file." in result.stderr and "Traceback" not in result.stderr


@pytest.mark.fast
def test_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("a file")
    result = run_main("train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--limit", 300,
                      "--output_dir", tmp_path / "out", expect_failure=True)
    assert f"error: --output_dir '{tmp_path / 'out'}' is a file, not a folder" in result.stderr
    assert "Traceback" not in result.stderr and (tmp_path / "out").read_text() == "a file"


# ----------------------------------------------------------------------------------------------------------------
# --sample_size: a uniform random sample of the texts (reservoir_sample)


def batched(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def assert_within_six_sigma(counts, expected, variance):
    """Each count within 6 standard deviations of what a uniform sample gives. `variance` is that of a binomial
    count, which is never below the true one (a sample's members are drawn without replacement): a correct sampler
    fails with a probability below 2e-9 per count, while a biased one (first texts kept, or last texts favoured)
    misses by dozens of standard deviations."""
    for key, count in counts.items():
        assert abs(count - expected) <= 6 * math.sqrt(variance), (key, count, expected)


def test_reservoir_sample_draws_every_set_of_texts_equally_often():
    # 3 of 8 texts, 56,000 times with a seed each: each of the 56 possible sets should come about 1,000 times.
    # Batches of 2 make the sample fill up in the middle of a batch.
    texts, size, trials = [f"text {i}" for i in range(8)], 3, 56_000
    subsets = list(itertools.combinations(texts, size))
    counts = collections.Counter({subset: 0 for subset in subsets})
    for seed in range(trials):
        sample, num_read = reservoir_sample(batched(texts, 2), size, seed)
        assert num_read == len(texts) and len(set(sample)) == size
        counts[tuple(sorted(sample, key=texts.index))] += 1
    assert len(counts) == len(subsets)
    p = 1 / len(subsets)
    assert_within_six_sigma(counts, trials * p, trials * p * (1 - p))


def test_reservoir_sample_is_uniform_over_a_long_stream():
    # 10 of 2,000 texts, where Algorithm L skips most texts: how often each tenth of the stream is in the sample.
    num_texts, size, trials, bins = 2_000, 10, 3_000, 10
    texts = list(range(num_texts))
    counts = collections.Counter({b: 0 for b in range(bins)})
    for seed in range(trials):
        sample, _ = reservoir_sample(batched(texts, 7), size, seed)
        assert len(set(sample)) == size
        counts.update(text * bins // num_texts for text in sample)
    p = 1 / bins
    assert_within_six_sigma(counts, trials * size * p, trials * size * p * (1 - p))


def test_reservoir_sample_is_set_by_the_seed_whatever_the_batches():
    texts = [f"text {i}" for i in range(10_000)]
    sample, num_read = reservoir_sample(batched(texts, 1000), 100, seed=7)
    assert num_read == len(texts) and len(sample) == len(set(sample)) == 100
    for batch_size in (1, 3, 999, 10_000):
        assert reservoir_sample(batched(texts, batch_size), 100, seed=7) == (sample, num_read)
    assert reservoir_sample(batched(texts, 1000), 100, seed=8)[0] != sample


def test_reservoir_sample_of_a_short_stream_is_all_of_it():
    texts = ["a", "b", "c"]
    assert reservoir_sample(batched(texts, 2), 3, seed=0) == (texts, 3)
    assert reservoir_sample(batched(texts, 2), 5, seed=0) == (texts, 3)
    assert reservoir_sample([], 5, seed=0) == ([], 0)


def test_log_one_minus_exp_is_accurate_at_both_ends():
    # Where log(1 - exp(x)) computed as written fails (1 - exp(-1e-20) rounds to 0) or loses every digit.
    assert log_one_minus_exp(-1e-20) == pytest.approx(math.log(1e-20), rel=1e-15)
    assert log_one_minus_exp(-50.0) == pytest.approx(-math.exp(-50.0), rel=1e-15)
    assert log_one_minus_exp(-1.0) == pytest.approx(math.log(1 - math.exp(-1.0)), rel=1e-15)


def test_sample_size_trains_on_the_sample_of_its_seed(tmp_path):
    result = run_main("train_unigram.py", "--train_file", WIKITEXT / "train.txt", "--sample_size", 300,
                      "--seed", 5, "--vocab_size", 300, "--output_dir", tmp_path / "out")
    non_empty = sum(1 for line in (WIKITEXT / "train.txt").read_text().split("\n") if line.strip())
    assert f"Read {non_empty} non-empty texts" in result.stderr
    assert "kept a uniform random sample of 300 (--seed 5)" in result.stderr
    assert texts_trained_on(result) == 300
    # The same sample, drawn here in batches of another size, gives the same vocabulary: the script trained on it.
    sample, _ = reservoir_sample(iter_text_file_batches([WIKITEXT / "train.txt"], 64), 300, seed=5)
    expected = train_tokenizer(sample, 300)
    assert AutoTokenizer.from_pretrained(tmp_path / "out").get_vocab() == expected.get_vocab()


def test_sample_size_draws_from_the_first_limit_records_of_json_lines(tmp_path):
    # JSON lines are streamed through 🤗 Datasets, as a Hub dataset is.
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps({"text": f"record {i} " + "word " * (i % 9)})
                                                   for i in range(400)))
    result = run_main("train_unigram.py", "--train_file", tmp_path / "data.jsonl", "--limit", 150,
                      "--sample_size", 50, "--vocab_size", 40, "--output_dir", tmp_path / "out")
    assert "Read 150 non-empty texts" in result.stderr
    assert "kept a uniform random sample of 50 (--seed 42)" in result.stderr and texts_trained_on(result) == 50


@pytest.mark.fast
@pytest.mark.parametrize("argv,message", [
    (["--sample_size", "0"], "argument --sample_size: must be a positive number, got 0"),
    (["--sample_size", "-5"], "argument --sample_size: must be a positive number, got -5"),
    (["--seed", "3"], "--seed sets the sample drawn by --sample_size: give --sample_size too"),
    (["--sample_size", "10", "--seed", "-1"], "--seed must be 0 or more, got -1."),
    (["--limit", "0"], "argument --limit: must be a positive number, got 0"),
    (["--batch_size", "-1"], "argument --batch_size: must be a positive number, got -1"),
])
def test_bad_sampling_values_are_refused_clearly(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_unigram.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        train_unigram.parse_args()
    assert exit_info.value.code == 2
    assert f"train_unigram.py: error: {message}" in capsys.readouterr().err
