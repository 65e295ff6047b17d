"""run_classification.py on the files of Chinese and Thai tasks in the layouts their publishers give them: UER-py's
TSV (ChnSentiCorp, book_review), CLUE's JSON lines (TNEWS, OCNLI) and Wisesight Sentiment's, read through the flags a
user passes; and the warning that a tokenizer does not know the task's text.

The files are written here, a few rows in each layout with the quirks of the real ones (a lone double quote in a TSV
text, TNEWS's labels as codes in strings, OCNLI's rows labelled "-"), of texts written for these tests: OCNLI's rows
are under CC BY-NC, and TNEWS's and UER's files state no licence."""

import json
import logging

import pytest

from helpers import REPO
from run_classification import UNKNOWN_TOKEN_SHARE_WARNING, parse_args, prepare_data, unknown_token_share
from tasks import encode, task_of_flags

pytestmark = pytest.mark.fast

# UER-py's layout: a header, then label<TAB>text_a. Double quotes are characters of the texts: a lone one (which
# quoting would take for the start of a field running over the next rows) and a pair opening a text.
CHNSENTICORP = [("1", "房间干净，服务周到，下次还住。"), ("0", '屏幕只有10寸"，字太小'),
                ("0", '"豪华"二字名不副实，隔音很差'), ("1", "早餐一般 但位置方便")]
# CLUE's TNEWS: the label a code written as a string, its name in label_desc, keywords often empty.
TNEWS = [{"label": "102", "label_desc": "news_entertainment", "sentence": "新电影今晚首映，主演现身红毯",
          "keywords": "电影,首映"},
         {"label": "108", "label_desc": "news_edu", "sentence": "高考报名人数再创新高", "keywords": ""},
         {"label": "110", "label_desc": "news_military", "sentence": "海军新型舰艇完成首次试航",
          "keywords": "海军,舰艇"}]
# CLUE's OCNLI: the majority label of five annotators in `label`, "-" where there is none; their own labels and
# other fields beside it.
OCNLI_TRAIN = [("他每天骑车上班", "他有一辆自行车", "entailment"), ("会议推迟到下周", "会议已经开过了", "contradiction"),
               ("她在北京读书", "她是一名研究生", "neutral"), ("我好像不适合去那边", "我有去那边的可能", "-"),
               ("天快黑了", "现在是傍晚", "entailment")]
OCNLI_DEV = [("雨下了一整天", "地面是湿的", "entailment"), ("商店关门了", "商店还在营业", "contradiction"),
             ("他写了一本书", "那本书很畅销", "neutral"), ("他们搬家了", "他们住得更远了", "-"),
             ("孩子们在唱歌", "孩子们很开心", "-")]
# Wisesight Sentiment: Thai posts in `texts`, one of neu, neg, pos and q (a question) in `category`.
WISESIGHT = [{"category": "pos", "texts": "อาหารอร่อยมาก บริการดี"},
             {"category": "neg", "texts": "รอนานมาก ไม่ประทับใจ"},
             {"category": "neu", "texts": "วันนี้ฝนตกทั้งวัน"}, {"category": "q", "texts": "ร้านเปิดกี่โมงคะ"}]


def write_tsv(path, rows):
    path.write_text("label\ttext_a\n" + "".join(f"{label}\t{text}\n" for label, text in rows), encoding="utf-8")
    return path


def write_json_lines(path, records):
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    return path


def ocnli_records(rows):
    return [{"level": "easy", "sentence1": premise, "sentence2": hypothesis, "label": label,
             **{f"label{i}": "neutral" if label == "-" else label for i in range(5)}, "genre": "news", "id": i}
            for i, (premise, hypothesis, label) in enumerate(rows)]


def read(*flags):
    """(label names, {split: Examples}) of run_classification.py's data flags, as its main reads them."""
    args = parse_args(["--model_name_or_path", "unused", *map(str, flags)])
    return prepare_data(args, task_of_flags(args))


def test_uer_tsv_files_keep_their_double_quotes_and_their_labels_as_classes(tmp_path):
    train = write_tsv(tmp_path / "train.tsv", CHNSENTICORP)
    dev = write_tsv(tmp_path / "dev.tsv", CHNSENTICORP[::-1])
    label_names, splits = read("--train_file", train, "--validation_file", dev, "--text_column", "text_a")
    assert label_names == ["0", "1"]
    assert splits["train"].texts == [text for _, text in CHNSENTICORP]
    assert splits["train"].labels == [label for label, _ in CHNSENTICORP]
    assert splits["validation"].texts == [text for _, text in CHNSENTICORP[::-1]]


def test_tnews_codes_are_class_names_and_its_keywords_a_second_text(tmp_path):
    train = write_json_lines(tmp_path / "train.json", TNEWS)
    dev = write_json_lines(tmp_path / "dev.json", TNEWS[:2])
    label_names, splits = read("--train_file", train, "--validation_file", dev, "--text_column", "sentence",
                               "--text_pair_column", "keywords")
    assert label_names == ["102", "108", "110"]  # Classes, not numbers to regress on.
    assert splits["train"].labels == ["102", "108", "110"] and splits["validation"].labels == ["102", "108"]
    assert splits["train"].texts == [record["sentence"] for record in TNEWS]
    assert splits["train"].text_pairs == ["电影,首映", "", "海军,舰艇"]
    label_names, splits = read("--train_file", train, "--validation_file", dev, "--text_column", "sentence",
                               "--label_column", "label_desc")
    assert label_names == ["news_edu", "news_entertainment", "news_military"]
    assert splits["train"].text_pairs is None


def test_ocnli_rows_without_an_annotator_majority_are_left_out_and_counted(tmp_path, caplog):
    train = write_json_lines(tmp_path / "train.json", ocnli_records(OCNLI_TRAIN))
    dev = write_json_lines(tmp_path / "dev.json", ocnli_records(OCNLI_DEV))
    pair_flags = ["--train_file", train, "--validation_file", dev, "--text_column", "sentence1",
                  "--text_pair_column", "sentence2"]
    with caplog.at_level(logging.WARNING, logger="run_classification"):
        label_names, splits = read(*pair_flags)
    assert label_names == ["contradiction", "entailment", "neutral"]
    for split, rows, left_out in (("train", OCNLI_TRAIN, 1), ("validation", OCNLI_DEV, 2)):
        kept = [(i, row) for i, row in enumerate(rows) if row[2] != "-"]
        assert splits[split].rows == [i for i, _ in kept]  # Rows of the file, for the predictions written.
        assert splits[split].texts == [premise for _, (premise, _, _) in kept]
        assert splits[split].text_pairs == [hypothesis for _, (_, hypothesis, _) in kept]
        assert splits[split].labels == [label for _, (_, _, label) in kept]
        assert (f"The {split} data has {left_out} row(s) of {len(rows)} labelled '-', the mark of a row without a "
                "label") in caplog.text
    assert "--no_label_mark ''" in caplog.text
    # A data set whose classes include "-" keeps it so.
    label_names, splits = read(*pair_flags, "--no_label_mark", "")
    assert label_names == ["-", "contradiction", "entailment", "neutral"]
    assert splits["validation"].labels == [label for _, _, label in OCNLI_DEV]


def test_a_glue_task_brings_its_own_labels_and_refuses_no_label_mark(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--model_name_or_path", "unused", "--task_name", "mnli", "--no_label_mark", "?"])
    assert "leave out --no_label_mark" in capsys.readouterr().err


def test_wisesight_json_lines_keep_their_thai_texts(tmp_path):
    train = write_json_lines(tmp_path / "train.jsonl", WISESIGHT)
    valid = write_json_lines(tmp_path / "valid.jsonl", WISESIGHT[::-1])
    label_names, splits = read("--train_file", train, "--validation_file", valid, "--text_column", "texts",
                               "--label_column", "category")
    assert label_names == ["neg", "neu", "pos", "q"]
    assert splits["train"].texts == [record["texts"] for record in WISESIGHT]
    assert splits["train"].labels == [record["category"] for record in WISESIGHT]


def unknown_share_of(tokenizer, examples):
    """The share of <unk> among the tokens of the examples' texts, counted here from each text's own tokens."""
    ids = [token_id for text in examples.texts for token_id in tokenizer(text, add_special_tokens=False)["input_ids"]]
    return sum(token_id == tokenizer.unk_token_id for token_id in ids) / len(ids)


def test_a_tokenizer_that_never_saw_the_tasks_script_is_warned_of(tokenizer_dir, tmp_path, caplog):
    from transformers import AutoTokenizer

    # The session's tokenizer, trained on English only (WikiText-2), on Chinese and Thai tasks and on BANKING77.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    chinese = write_tsv(tmp_path / "chinese.tsv", CHNSENTICORP)
    thai = write_json_lines(tmp_path / "thai.jsonl", WISESIGHT)
    for path, flags, warned in ((chinese, ["--text_column", "text_a"], True),
                                (thai, ["--text_column", "texts", "--label_column", "category"], True),
                                (REPO / "tests" / "data" / "banking77" / "train.csv", ["--label_column", "category"],
                                 False)):
        label_names, splits = read("--train_file", path, "--validation_file", path, *flags)
        features, _ = encode(tokenizer, splits["train"], label_names, max_length=128)  # No text is cut.
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="run_classification"):
            share = unknown_token_share(tokenizer, features["input_ids"], "english-model")
        assert share == pytest.approx(unknown_share_of(tokenizer, splits["train"]))
        assert (share > UNKNOWN_TOKEN_SHARE_WARNING) == warned, (path, share)
        if warned:
            assert f"{100 * share:.1f} % of the training texts' tokens are <unk>" in caplog.text
            assert "the tokenizer of 'english-model'" in caplog.text and "train_unigram.py" in caplog.text
        else:
            assert not caplog.text
    tokenizer.unk_token = None  # As a byte-level tokenizer's, which encodes any text.
    assert unknown_token_share(tokenizer, features["input_ids"], "english-model") is None
