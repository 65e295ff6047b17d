"""benchmarks/pretraining_curves.py on TensorBoard logs written here as run_mlm.py writes them (tf.summary scalars at
the optimizer step, in logs/train and logs/eval): the table's means and standard deviations over an arm's runs, the
last value of a step evaluated twice, the picture, and the runs and folders it refuses."""

import statistics

import pytest

from helpers import REPO, run_main

# Validation nats beyond frequency and pair accuracy at steps 0, 100, 200 of two seeds of an arm with a pair head.
NATS = {"seed 1": [-0.01, 0.02, 0.5], "seed 2": [-0.02, 0.04, 0.7]}
PAIR_ACCURACY = {"seed 1": [0.49, 0.55, 0.71], "seed 2": [0.51, 0.6, 0.8]}
MLM_NATS = [0.0, 0.3]  # A plain masked LM, stopped after its evaluation at step 100.


def write_logs(folder, eval_steps, train_steps):
    """Scalars at each step of {tag: [value per step]}, into folder/logs/eval and folder/logs/train."""
    import tensorflow as tf

    for part, steps in (("eval", eval_steps), ("train", train_steps)):
        with tf.summary.create_file_writer(str(folder / "logs" / part)).as_default():
            for step, values in steps.items():
                for tag, value in values.items():
                    tf.summary.scalar(tag, value, step=step)


def nsp_run(folder, nats, pair_accuracy):
    """A run with a pair head, evaluated at steps 0, 100 and 200 to these values."""
    write_logs(folder, {step: {"nats_beyond_frequency": beyond, "pair_accuracy": accuracy, "pair_loss": 0.69}
                        for step, beyond, accuracy in zip((0, 100, 200), nats, pair_accuracy)},
               {0: {"learning_rate": 0.0}, 100: {"masked_lm_loss": 7.0, "pair_loss": 0.6, "loss": 7.6},
                200: {"masked_lm_loss": 6.5, "pair_loss": 0.5, "loss": 7.0}})
    return folder


def mean_sd(values):
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Three runs, {arm: [folders]}: two seeds of the arm "NSP", the second resumed at its last step, and a "masked
    LM"."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    first = nsp_run(tmp_path / "nsp-1", NATS["seed 1"], PAIR_ACCURACY["seed 1"])
    second = nsp_run(tmp_path / "nsp-2", [*NATS["seed 2"][:2], 9.0], [*PAIR_ACCURACY["seed 2"][:2], 0.1])
    # Evaluated at step 200 again, into an event file of its own, as a run resumed there: the value written last counts.
    write_logs(second, {200: {"nats_beyond_frequency": NATS["seed 2"][2], "pair_accuracy": PAIR_ACCURACY["seed 2"][2]}},
               {})
    mlm = tmp_path / "mlm"
    write_logs(mlm, {step: {"nats_beyond_frequency": nats, "loss": 7.0} for step, nats in zip((0, 100), MLM_NATS)},
               {0: {"learning_rate": 0.0}, 100: {"loss": 6.9}})
    return {"NSP": [first, second], "masked LM": [mlm]}


def flags(runs):
    return [flag for name, folders in runs.items() for folder in folders for flag in ("--run", f"{name}={folder}")]


def table_rows(stdout):
    """The rows of the printed table, as lists of cells, without its header and rule."""
    lines = stdout.split("\n\n")[0].splitlines()[2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def nsp_row(index, step):
    """The row of the arm "NSP" at the index-th step written: mean ± sd over its two seeds."""
    return ["NSP", str(step), "2", mean_sd([values[index] for values in NATS.values()]),
            mean_sd([values[index] for values in PAIR_ACCURACY.values()])]


@pytest.mark.fast
def test_the_table_gives_each_arm_s_mean_and_sd_at_the_steps_and_the_picture_is_drawn(runs, tmp_path):
    picture = tmp_path / "curves.png"
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--at_steps", 100, 0, "--output", picture)
    assert table_rows(result.stdout) == [nsp_row(0, 0), nsp_row(1, 100),
                                         ["masked LM", "0", "1", f"{MLM_NATS[0]:.3f}", "–"],
                                         ["masked LM", "100", "1", f"{MLM_NATS[1]:.3f}", "–"]]
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and picture.stat().st_size > 10_000
    # By default, each run's last evaluation: step 200 of the NSP seeds (the resumed one's second value), 100 of the
    # masked LM, which stopped there.
    picture.unlink()
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--output", picture)
    assert table_rows(result.stdout) == [nsp_row(2, 200), ["masked LM", "100", "1", f"{MLM_NATS[1]:.3f}", "–"]]
    assert result.stdout.endswith(f"picture: {picture}\n") and picture.stat().st_size > 10_000


@pytest.mark.fast
def test_a_step_a_run_has_not_evaluated_and_a_folder_without_logs_are_refused(runs, tmp_path):
    mlm = runs["masked LM"][0]
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--at_steps", 100, 200, "--output",
                      tmp_path / "curves.png", expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: run 'masked LM' ({mlm}) has no evaluation at step 200; it has steps 0, 100.")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--run", f"NSP={empty}", "--output",
                      tmp_path / "curves.png", expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: {empty} has no {empty / 'logs' / 'train'}: not a run_mlm.py output folder, or it has not evaluated "
        "yet.")
    # Started, not evaluated yet: its log folders are there, empty.
    (empty / "logs" / "train").mkdir(parents=True)
    (empty / "logs" / "eval").mkdir()
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--run", f"NSP={empty}", "--output",
                      tmp_path / "curves.png", expect_failure=True)
    assert result.stderr.splitlines()[-1] == (
        f"error: {empty} has not evaluated yet: run_mlm.py evaluates at step 0, then every --eval_every_steps.")
    # Trained on shards without token counts: no frequency table to measure against.
    write_logs(empty, {0: {"loss": 7.0}}, {})
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--run", f"NSP={empty}", "--output",
                      tmp_path / "curves.png", expect_failure=True)
    assert result.stderr.splitlines()[-1].startswith(f"error: {empty}'s evaluations have no nats_beyond_frequency:")
    result = run_main("benchmarks/pretraining_curves.py", *flags(runs), "--output", tmp_path / "curves.pdf",
                      expect_failure=True)
    assert result.stderr.splitlines()[-1] == f"error: --output {tmp_path / 'curves.pdf'}: name a .png file."
    assert not (tmp_path / "curves.png").exists() and not (tmp_path / "curves.pdf").exists()
