"""Faults a long run meets (issue #34): hyper-parameters out of their domain, records that are not text, a full
disk, a damaged checkpoint, two runs in one output folder, a huge line. Each ends in a clear message, in-process
where it can: no traceback, nothing lost."""

import argparse
import json
import sys

import pytest

import run_classification
import run_mlm
import utils
from utils import UserError


@pytest.mark.parametrize("script,argv,message", [
    (run_mlm, ["--learning_rate", "-1"], "argument --learning_rate: must be above 0, got -1"),
    (run_mlm, ["--learning_rate", "0"], "argument --learning_rate: must be above 0, got 0"),
    (run_mlm, ["--learning_rate", "nan"], "argument --learning_rate: must be above 0, got nan"),
    (run_mlm, ["--weight_decay_rate", "-0.1"], "argument --weight_decay_rate: must be 0 or more, got -0.1"),
    (run_mlm, ["--warmup_steps", "-5"], "argument --warmup_steps: must be 0 or more, got -5"),
    (run_mlm, ["--warmup_ratio", "1"], "argument --warmup_ratio: must be in [0, 1), got 1"),
    (run_mlm, ["--mlm_probability", "1.5"], "argument --mlm_probability: must be in (0, 1), 0 and 1 excluded, got 1.5"),
    (run_mlm, ["--mlm_probability", "0"], "argument --mlm_probability: must be in (0, 1), 0 and 1 excluded, got 0"),
    (run_mlm, ["--max_predictions_per_seq", "-1"], "argument --max_predictions_per_seq: must be 0 or more, got -1"),
    (run_mlm, ["--max_predictions_per_seq", "200"], "--max_predictions_per_seq must be from 0 to --max_length (128)"),
    (run_mlm, ["--config_overrides", "hidden_size=64,hidden_dropout_prob=1.5"],
     "argument --config_overrides: hidden_dropout_prob is a dropout rate: it must be in [0, 1), got 1.5"),
    (run_mlm, ["--config_overrides", "attention_probs_dropout_prob=-0.1"],
     "attention_probs_dropout_prob is a dropout rate: it must be in [0, 1), got -0.1"),
    (run_mlm, ["--config_overrides", "num_hidden_layers=0"], "num_hidden_layers must be a positive number, got 0"),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--learning_rate=-1e-3"],
     "argument --learning_rate: must be above 0, got -1e-3"),
    (run_classification, ["--model_name_or_path", "m", "--train_file", "t.csv", "--weight_decay_rate", "-1"],
     "argument --weight_decay_rate: must be 0 or more, got -1"),
])
def test_hyper_parameters_out_of_their_domain_are_refused_with_the_range(script, argv, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"{script.__name__}.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        script.parse_args()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_hyper_parameters_in_their_domain_are_accepted(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["run_mlm.py", "--learning_rate", "2e-3", "--weight_decay_rate", "0",
                                      "--warmup_steps", "0", "--mlm_probability", "0.4", "--config_overrides",
                                      "hidden_dropout_prob=0,classifier_dropout=None,hidden_size=128"])
    args = run_mlm.parse_args()
    assert (args.learning_rate, args.weight_decay_rate, args.warmup_steps) == (2e-3, 0, 0)
    assert args.max_predictions_per_seq == run_mlm.default_max_predictions(0.4, 128)


def write_json_lines(path, values):
    path.write_text("".join(json.dumps({"text": value}) + "\n" for value in values))
    return path


@pytest.mark.parametrize("value,shown", [(42, "int 42"), (["a", "b"], "list ['a', 'b']"),
                                         ({"a": 1}, "dict {'a': 1}"), (1.5, "float 1.5")])
def test_a_record_that_is_not_text_is_refused_with_its_number(value, shown, tmp_path):
    # train_unigram.py and prepare_tfrecord_shards.py read every corpus through utils.text_batches.
    path = write_json_lines(tmp_path / "data.jsonl", ["first text", None, "", "third text", value, "after"])
    (batches,) = utils.text_batches(text_column="text", batch_size=2, data_files={"train": [str(path)]}).values()
    with pytest.raises(UserError) as error:
        list(batches)
    assert str(error.value).startswith(f"the 'text' field of record 5 of the train split is not text but {shown}.")
    assert "--text_column" in str(error.value) and "null counts as an empty text" in str(error.value)


def test_null_records_are_skipped_as_empty_ones_in_json_lines_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = ["one", None, "  ", "two", None]
    write_json_lines(tmp_path / "data.jsonl", values)
    pq.write_table(pa.table({"text": values}), tmp_path / "data.parquet")
    for name in ("data.jsonl", "data.parquet"):
        (batches,) = utils.text_batches(text_column="text", batch_size=10,
                                        data_files={"train": [str(tmp_path / name)]}).values()
        assert list(batches) == [["one", "two"]]


def test_a_parquet_column_of_numbers_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [3, 4]}), tmp_path / "data.parquet")
    (batches,) = utils.text_batches(text_column="text", batch_size=10,
                                    data_files={"validation": [str(tmp_path / "data.parquet")]}).values()
    with pytest.raises(UserError, match="the 'text' field of record 1 of the validation split is not text but int 3"):
        list(batches)


def test_the_beam_workers_refuse_a_record_that_is_not_text_as_the_scripts_do(tmp_path, tokenizer_dir):
    import beam_pipeline

    path = write_json_lines(tmp_path / "data.jsonl", ["a text", None, 7])
    args = argparse.Namespace(tokenizer_name_or_path=str(tokenizer_dir), text_column="text", batch_size=10,
                              shard_size=10, max_length=16)
    (tmp_path / "out").mkdir()
    with pytest.raises(UserError) as error:
        beam_pipeline.write_part_on_beam_worker((0, [(str(path), 0, path.stat().st_size)]), str(tmp_path / "out"),
                                                args)
    assert str(error.value).startswith(f"the 'text' field of record 3 of {str(path)!r} from byte 0 (blank lines not "
                                       "counted) is not text but int 7.")
