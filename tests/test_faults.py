"""Faults a long run meets (issue #34): hyper-parameters out of their domain, records that are not text, a full
disk, a damaged checkpoint, two runs in one output folder, a huge line. Each ends in a clear message, in-process
where it can: no traceback, nothing lost."""

import sys

import pytest

import run_classification
import run_mlm


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
