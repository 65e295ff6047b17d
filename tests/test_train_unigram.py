"""train_unigram.py: the saved tokenizer, its special tokens, its inputs, and its error messages."""

import collections
import itertools
import json
import math
import random
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
    result = run_main("train_unigram.py", "--train_file", tmp_path / "nope-*", "--output_dir", tmp_path / "out",
                      expect_failure=True)
    assert f"error: no train file matches '{tmp_path / 'nope-*'}'" in result.stderr


@pytest.mark.fast
def test_files_named_without_their_format_are_read_in_the_one_file_format_says(tmp_path):
    # A data job's JSON lines, gzip-compressed, as part-00000.gz: refused without --file_format, by a message that
    # names it; with --file_format jsonl, the tokenizer of the same file named .jsonl.gz.
    lines = (WIKITEXT / "validation.txt").read_text().splitlines()[:300]
    records = "".join(json.dumps({"content": line}) + "\n" for line in lines).encode()
    named, unnamed = (write_compressed(tmp_path / name, records) for name in ("corpus.jsonl.gz", "part-00000.gz"))
    args = ["--text_column", "content", "--vocab_size", 300]
    refused = run_main("train_unigram.py", *args, "--train_file", unnamed, "--output_dir", tmp_path / "refused",
                       expect_failure=True)
    assert f"error: cannot read '{unnamed}': no extension of its format. " in refused.stderr
    assert "or pass --file_format (text, jsonl, parquet) for files whose names do not tell" in refused.stderr
    run_main("train_unigram.py", *args, "--train_file", named, "--output_dir", tmp_path / "named")
    run_main("train_unigram.py", *args, "--train_file", unnamed, "--file_format", "jsonl",
             "--output_dir", tmp_path / "unnamed")
    assert (tmp_path / "unnamed" / "tokenizer.json").read_text() == (tmp_path / "named" / "tokenizer.json").read_text()


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
    (["--character_coverage", "0"], "argument --character_coverage: must be in (0, 1], 0 excluded, got 0"),
    (["--character_coverage", "1.5"], "argument --character_coverage: must be in (0, 1], 0 excluded, got 1.5"),
])
def test_bad_sampling_values_are_refused_clearly(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_unigram.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        train_unigram.parse_args()
    assert exit_info.value.code == 2
    assert f"train_unigram.py: error: {message}" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# Every script's text: as typed, after only the normalization its users expect, and many distinct characters


# A few ordinary sentences per language, written for these tests: the training texts, then a held-out one. Thai
# and Lao hold their AM vowels "ำ" and "ຳ", Turkish its dotted and dotless I, the emoji a skin tone, a ZWJ family
# and a flag.
LANGUAGES = {
    "Chinese (simplified)": (["今天天气很好，我们去公园散步吧。", "这本书讲的是一个小村庄的故事。",
                              "他每天早上六点起床，然后喝一杯茶。"], "明年我想去北京学习中文。"),
    "Chinese (traditional)": (["這座城市的夜景非常漂亮。", "我們應該多讀書，少看電視。", "圖書館裡有很多舊報紙。"],
                              "請問火車站怎麼走？"),
    "Japanese": (["東京は日本の首都です。", "昨日、友達と一緒に映画を見ました。", "このパソコンはとても速いです。"],
                 "猫が窓の外を静かに見ている。"),
    "Korean": (["오늘은 날씨가 정말 좋네요.", "저는 매일 아침 커피를 마십니다.", "한국어는 배우기 재미있는 언어입니다."],
               "주말에 가족과 함께 바다에 갔어요."),
    "Thai": (["วันนี้อากาศดีมาก เราไปเดินเล่นที่สวนกันเถอะ", "ฉันชอบดื่มน้ำเย็นตอนบ่าย",
              "เขาทำงานที่โรงพยาบาลในกรุงเทพ"],
             "แม่กำลังทำอาหารในครัว"),
    "Lao": (["ຂ້ອຍມັກດື່ມນ້ຳເຢັນ", "ແມ່ນ້ຳຂອງຍາວຫຼາຍ"], "ນ້ຳຂອງໄຫຼຜ່ານວຽງຈັນ"),
    "Arabic": (["ذهبت إلى السوق صباح اليوم.", "هذا الكتاب مفيد جدا للطلاب.", "تعيش عائلتي في مدينة صغيرة."],
               "أحب قراءة الشعر في المساء."),
    "Hindi": (["आज मौसम बहुत अच्छा है।", "मेरा भाई दिल्ली में काम करता है।", "हम शाम को चाय पीते हैं।"],
              "बच्चे बगीचे में खेल रहे हैं।"),
    "Russian": (["Сегодня мы гуляли в парке.", "Моя сестра читает интересную книгу.", "Зимой в Москве очень холодно."],
                "Ёжик нашёл в лесу большой гриб."),
    "Turkish": (["İstanbul çok güzel bir şehir.", "Kırmızı ışıkta durmak gerekir.",
                 "Dün akşam arkadaşlarımla yemek yedik."],
                "Iğdır'dan İzmir'e uzun bir yolculuk."),
    "emoji": (["Great job 👍🏽 see you soon 👋", "👨‍👩‍👧 family picnic ❤️", "🇯🇵 trip ✈️ tomorrow"],
              "🐱 cat 🍣 sushi 🧑🏿‍💻"),
}
# Texts that NFKC changes as their users expect: full-width Latin letters and digits to ASCII, half-width katakana
# to full-width; full-width punctuation stays.
NORMALIZED = {"ＡＢＣ社のｶﾀﾛｸﾞを見た（１０月）！": "ABC社のカタログを見た（10月）！"}
# The share of the held-out text's tokens that are <unk> for the tokenizer trained without byte fallback, as
# measured: the characters it never saw (a run of them is one <unk>; held-out Chinese is mostly new characters).
UNKNOWN_SHARE_AT_MOST = {"Chinese (simplified)": 0.45, "Chinese (traditional)": 0.5, "Japanese": 0.34, "Korean": 0.39,
                         "Thai": 0.14, "Lao": 0.2, "Arabic": 0.14, "Hindi": 0.07, "Russian": 0.18, "Turkish": 0.1,
                         "emoji": 0.24}


def round_trip(tokenizer, text):
    return tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=True)


def unknown_share(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return ids.count(train_unigram.UNK_ID) / len(ids)


@pytest.fixture(scope="module")
def training_texts():
    return [text for texts, _ in LANGUAGES.values() for text in texts] + list(NORMALIZED)


@pytest.mark.fast
def test_every_script_comes_back_as_typed(training_texts):
    tokenizer = train_tokenizer(training_texts, 400)
    for texts, _ in LANGUAGES.values():
        for text in texts:
            assert round_trip(tokenizer, text) == text
    for text, normalized in NORMALIZED.items():
        assert round_trip(tokenizer, text) == normalized
    # NFKC alone would give NIKHAHIT + SARA AA (U+0E4D U+0E32) for SARA AM, and the Lao pair likewise.
    assert "\u0e33" in round_trip(tokenizer, "น้ำ") and "\u0eb3" in round_trip(tokenizer, "ນ້ຳ")
    for language, (_, held_out) in LANGUAGES.items():
        assert unknown_share(tokenizer, held_out) <= UNKNOWN_SHARE_AT_MOST[language], language


@pytest.mark.fast
def test_byte_fallback_gives_back_characters_unseen_in_training(training_texts):
    tokenizer = train_tokenizer(training_texts, 700, byte_fallback=True)
    assert tokenizer.token_to_id("<0x00>") == 5 and tokenizer.token_to_id("<0xFF>") == 260
    for language, (_, held_out) in LANGUAGES.items():
        assert round_trip(tokenizer, held_out) == held_out, language
        assert unknown_share(tokenizer, held_out) == 0, language
    # masked_lm.word_start_table finds where words begin by the Metaspace in the decoder.
    assert '"Metaspace"' in json.dumps(json.loads(tokenizer.to_str())["decoder"])


def chinese_corpus(num_characters):
    """Lines of `num_characters` distinct CJK ideographs (from U+4E00), the one of rank r about 100,000 / r ** 1.5
    times, at least once: a steep skew, as in Chinese text, where a few thousand characters make most of it."""
    characters = [chr(0x4E00 + i) for i in range(num_characters)]
    stream = [character for rank, character in enumerate(characters, 1)
              for _ in range(max(1, int(100_000 / rank ** 1.5)))]
    random.Random(0).shuffle(stream)
    return characters, ["".join(stream[i:i + 50]) for i in range(0, len(stream), 50)]


def test_more_distinct_characters_than_the_vocabulary_train_with_byte_fallback(tmp_path):
    characters, lines = chinese_corpus(5000)
    (tmp_path / "zh.txt").write_text("\n".join(lines), encoding="utf-8")
    run_main("train_unigram.py", "--train_file", tmp_path / "zh.txt", "--vocab_size", 4000,
             "--character_coverage", 0.99, "--byte_fallback", "--output_dir", tmp_path / "out")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert len(tokenizer) == 4000
    rarest = characters[-1]  # Seen once in training: no token of its own, spelled in its 3 UTF-8 bytes.
    text = f"一{rarest}丁"
    assert tokenizer.tokenize(text)[1:4] == [f"<0x{byte:02X}>" for byte in rarest.encode()]
    assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text


@pytest.mark.fast
def test_more_distinct_characters_than_the_vocabulary_fail_with_the_flags_to_pass(tmp_path):
    (tmp_path / "zh.txt").write_text("\n".join(chinese_corpus(5000)[1]), encoding="utf-8")
    result = run_main("train_unigram.py", "--train_file", tmp_path / "zh.txt", "--vocab_size", 4000,
                      "--output_dir", tmp_path / "out", expect_failure=True)
    # 5,000 ideographs and "▁", where the text begins.
    assert "error: the corpus has more distinct characters than a vocabulary of 4000 tokens can hold: at " \
           "--character_coverage 1, 5001 characters need a token each, 5006 tokens with the 5 special tokens. " \
           "Nothing was saved. Pass --character_coverage 0.9995" in result.stderr
    assert "--byte_fallback" in result.stderr and "or --vocab_size 5006 or more" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    # With byte fallback, the 256 byte tokens count too; the coverage is what to lower.
    result = run_main("train_unigram.py", "--train_file", tmp_path / "zh.txt", "--vocab_size", 4000,
                      "--character_coverage", 0.9995, "--byte_fallback", "--output_dir", tmp_path / "out",
                      expect_failure=True)
    assert re.search(r"at --character_coverage 0\.9995, \d+ characters need a token each, \d+ tokens with the 261 "
                     r"special and byte tokens\. Nothing was saved\. Pass a --character_coverage below 0\.9995 ",
                     result.stderr), result.stderr[-2000:]
