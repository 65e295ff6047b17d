"""Helpers for the tests: where the data is, the sizes of the session's fixtures and a folder that the test processes
build once between them, a CPU's /proc/cpuinfo, running a pipeline script the way a user does (in a process of its
own, or its main in this process), compressing files, and reading shards and the text they come from independently
of the scripts."""

import atexit
import bz2
import contextlib
import fcntl
import gzip
import importlib
import io
import logging
import lzma
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import zstandard

REPO = Path(__file__).resolve().parents[1]
# The first lines of WikiText-2 train and validation, shipped in the repository (tests/data/README.md).
WIKITEXT = REPO / "tests" / "data" / "wikitext-2"
# Lines of tests/data/wikitext-2 read by the fixtures (train.txt has 1,500, validation.txt 500): small enough to keep
# the suite fast, large enough for a vocabulary of 1,000 and dozens of shards. Both are below the length of train.txt,
# so --limit cuts it; the validation shards hold the first VALIDATION_LINES lines of validation.txt (about 150
# samples in two shards: every evaluation of a training run reads them all, and a run evaluates two to four times).
TOKENIZER_LINES = 1000
SHARD_LINES = 1400
VALIDATION_LINES = 80
MAX_LENGTH = 64


def tiny_mlm_args(shards_dir, tokenizer_dir, config_dir, output_dir):
    """run_mlm.py's flags for quick steps of a tiny model on the session's training shards, on the CPU, without the
    input check before training (test_run_mlm.py times it)."""
    return ["--train_dataset", shards_dir / "train", "--tokenizer", tokenizer_dir, "--pretrained_model_config",
            config_dir, "--max_length", MAX_LENGTH, "--per_replica_batch_size", 8, "--learning_rate", 3e-3,
            "--warmup_steps", 2, "--input_check_seconds", 0, "--no_tpu", "--output_dir", output_dir]


# One processor of the /proc/cpuinfo of issue #66's machine, a Zen 3 EPYC (AVX2 and FMA) in a virtual machine without
# cpufreq, less the lines that devices.cpu_peak_flops does not read and the processor's own numbers.
ZEN3_EPYC = {"vendor_id": "AuthenticAMD", "cpu family": 25, "model": 1, "model name": "AMD EPYC 7B13",
             "cpu MHz": "2450.000", "flags": "fpu sse sse2 ht avx fma avx2 bmi2 sha_ni"}


def write_cpuinfo(root, processor, cores, threads_per_core=1):
    """Writes root/proc/cpuinfo: `processor`'s lines for each of cores x threads_per_core CPUs, numbered as Linux
    numbers them (the first thread of every core, then the second ones). Returns root."""
    (root / "proc").mkdir(parents=True)
    blocks = [{"processor": cpu, "physical id": 0, "core id": cpu % cores, **processor}
              for cpu in range(cores * threads_per_core)]
    (root / "proc" / "cpuinfo").write_text(
        "".join("".join(f"{name}\t: {value}\n" for name, value in block.items()) + "\n" for block in blocks))
    return root


def built_once(tmp_path_factory, path, build):
    """The folder `path` ("its own folder/its name"), made by build(folder) once in the test session: `make test`'s
    processes (pytest-xdist workers) share it, the first that needs it builds it while the others wait. A session or
    module fixture of each process would build it in each, seconds of CPU every time. The tests only read it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # The session's temporary folder, above each worker's own.
    folder = root / "built-once" / path
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # Released as the file closes.
        if not (folder.parent / ".built").exists():  # A process whose build failed left no mark: build it again.
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            (folder.parent / ".built").touch()
    return folder


def run_script(script, *args, expect_failure=False, env=None, timeout=600, prefix=()):
    """Runs `python script args...` from the repository in a fresh process; returns the CompletedProcess.

    Fails the test when the exit status is not the one expected, showing the script's output. `prefix` is a
    command that runs it, such as strace.
    """
    command = [*prefix, sys.executable, str(REPO / script), *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    failed = result.returncode != 0
    if failed != expect_failure:
        raise AssertionError(f"{' '.join(command)} exited with {result.returncode}\n"
                             f"--- stdout ---\n{result.stdout[-5000:]}\n--- stderr ---\n{result.stderr[-8000:]}")
    return result


# What changes the process itself, for good: TensorFlow splits the CPU into devices once, before its first op, and
# connects to a TPU or a cluster once. Those runs need a process of their own (run_script).
NEEDS_A_PROCESS = ("--num_cpu_replicas", "--tpu_name")


def run_main(script, *args, expect_failure=False):
    """Runs `script`'s `main(parse_args())` on these arguments in this process, as `python script args...` would;
    returns a CompletedProcess, so that a test reads it as one of run_script.

    A check that fails before the long part costs milliseconds here, not the seconds of starting TensorFlow. stderr
    holds what the script logged (in its own format: its logging.basicConfig configures a root logger emptied for
    the run) and printed, then, when it stops on bad input, the line its entry point prints: "error: " and the
    UserError's message, with status 1; argparse's refusals exit with 2. Any other exception propagates: it fails the
    test with its traceback, as a traceback in a script's output would. What the run changes in this process is put
    back: sys.argv, the working folder, os.environ, the root logger, the random seeds, the Keras precision policy, the
    handlers of SIGTERM and SIGINT; Keras forgets its models; what it leaves for its process's end runs at the run's
    end.
    """
    from utils import UserError

    argv = [script, *map(str, args)]
    assert not set(NEEDS_A_PROCESS) & set(argv) and "TF_CONFIG" not in os.environ, "use run_script"
    module = importlib.import_module(Path(script).stem)
    stdout, stderr = io.StringIO(), io.StringIO()
    with _process_state_restored(), _process_end_at_the_runs_end():
        sys.argv = argv
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                module.main(module.parse_args())
                returncode = 0
            except UserError as err:
                print(f"error: {err}", file=sys.stderr)
                returncode = 1
            except SystemExit as exit_:  # As Python's own exit: a number is the status, anything else is printed.
                if exit_.code is None or isinstance(exit_.code, int):
                    returncode = exit_.code or 0
                else:
                    print(exit_.code, file=sys.stderr)
                    returncode = 1
    result = subprocess.CompletedProcess(argv, returncode, stdout.getvalue(), stderr.getvalue())
    if (returncode != 0) != expect_failure:
        raise AssertionError(f"{' '.join(argv)} (in-process) exited with {returncode}\n"
                             f"--- stdout ---\n{result.stdout[-5000:]}\n--- stderr ---\n{result.stderr[-8000:]}")
    return result


@contextlib.contextmanager
def _process_end_at_the_runs_end():
    """What the script registers with atexit for its process's end (releasing its claim on --output_dir, removing
    temporary copies) runs when the run ends, as that end would: a later run in this process finds the folder free.
    What a library registers as it is first imported during the run stays for the real end of the process: h5py's
    handler unregisters its type conversions, and h5py could read no file after it."""
    at_exit, register = [], atexit.register
    project_modules = {path.stem for path in REPO.glob("*.py")}

    def register_for_the_runs_end(function, *args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__") in project_modules:  # Called by the scripts' own code.
            at_exit.append((function, args, kwargs))
        else:
            register(function, *args, **kwargs)
        return function

    atexit.register = register_for_the_runs_end
    try:
        yield
    finally:
        atexit.register = register
        for function, args, kwargs in reversed(at_exit):
            function(*args, **kwargs)


@contextlib.contextmanager
def _process_state_restored():
    """Puts back what a script's main changes in its process (see run_main)."""
    import numpy as np

    root = logging.getLogger()
    saved_signals = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    saved_argv, saved_cwd, saved_environ = sys.argv, os.getcwd(), dict(os.environ)
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_random, saved_numpy = random.getstate(), np.random.get_state()
    # TensorFlow's global seed and the Keras precision policy (their defaults where the script is the first to load
    # them); get_seed(None) returns the global seed first.
    tensorflow_seed = sys.modules["tensorflow"].compat.v1.get_seed(None)[0] if "tensorflow" in sys.modules else None
    policy = sys.modules["tf_keras"].mixed_precision.global_policy() if "tf_keras" in sys.modules else "float32"
    root.handlers = []  # pytest's own: the script's logging.basicConfig would otherwise do nothing.
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = saved_handlers, saved_level
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)
        random.setstate(saved_random)
        np.random.set_state(saved_numpy)
        if "tensorflow" in sys.modules:
            sys.modules["tensorflow"].random.set_seed(tensorflow_seed)
        if "tf_keras" in sys.modules:
            sys.modules["tf_keras"].mixed_precision.set_global_policy(policy)
            sys.modules["tf_keras"].backend.clear_session()  # The run's models and their graphs, out of memory.
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)


def assert_entry_point_error(result, message):
    """A run in a process of its own (run_script) stopped as a script's entry point stops on bad input: `error: `
    and the message, status 1, no traceback."""
    assert result.returncode == 1 and f"error: {message}" in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def read_shard(path):
    """(input_ids, attention_mask) rows of a shard, parsed with nothing but the protobuf definition."""
    import tensorflow as tf

    rows = []
    for records in tf.data.TFRecordDataset(str(path)).batch(1 << 20):  # The whole shard: one eager step, not one each.
        for record in records.numpy():
            features = tf.train.Example.FromString(record).features.feature
            assert sorted(features) == ["attention_mask", "input_ids"]
            rows.append((list(features["input_ids"].int64_list.value),
                         list(features["attention_mask"].int64_list.value)))
    return rows


def lines_beginning_in(path, start, end):
    """The lines of a file that begin in the byte range [start, end), found without the code under test: a line
    begins at 0 and after each "\\n" (the test files have no other line breaks)."""
    data = open(path, "rb").read()
    lines, begin = [], 0
    for line in data.split(b"\n"):
        if start <= begin < end:
            lines.append(line.decode())
        begin += len(line) + 1
        if begin >= len(data):  # No line begins after the last "\n".
            break
    return lines


def part_stream(part, tokenizer, keep=None):
    """The tokens of one part, computed independently of the script: the lines that begin in its byte ranges,
    non-blank ones (those that `keep` accepts, when given) tokenized one by one and concatenated."""
    lines = [line for path, start, end in part for line in lines_beginning_in(path, start, end)]
    return [token for line in lines if line.strip() and (keep is None or keep(line))
            for token in tokenizer(line).input_ids]


def read_split(split_dir, vocab_size):
    """The manifest of a split folder and its samples (lists of token ids), in the order of the manifest; checks
    what must hold of every split written: only complete files are left, shards are numbered 0, 1, ... and named by
    their counts, the manifest's counts and sizes are those of the files, token_counts.json counts their tokens."""
    import json

    import numpy as np

    manifest = json.loads((split_dir / "manifest.json").read_text())
    assert sorted(path.name for path in split_dir.iterdir()) == sorted(
        [shard["file"] for shard in manifest["shards"]] + ["manifest.json", "token_counts.json"])
    samples = []
    for index, shard in enumerate(manifest["shards"]):
        rows = read_shard(split_dir / shard["file"])
        assert shard["file"] == f"dataset-{index}-{len(rows)}.tfrecord" and shard["num_samples"] == len(rows)
        assert shard["num_bytes"] == (split_dir / shard["file"]).stat().st_size
        assert all(attention_mask == [1] * manifest["max_length"] for _, attention_mask in rows)
        samples += [input_ids for input_ids, _ in rows]
    assert manifest["num_samples"] == len(samples) and manifest["num_tokens"] == len(samples) * manifest["max_length"]
    tokens = [token for sample in samples for token in sample]
    token_counts = json.loads((split_dir / "token_counts.json").read_text())
    assert token_counts == np.bincount(tokens, minlength=vocab_size).tolist()
    return manifest, samples


def cut_parts(streams, max_length, shard_size):
    """What a split made of these token streams (one per part) holds: its samples, each stream cut on its own every
    max_length tokens; the tokens dropped at the ends of the parts; and the sizes of its shards (each part's samples
    in shards of shard_size, the last one smaller)."""
    samples, dropped, shard_sizes = [], 0, []
    for stream in streams:
        num_samples = len(stream) // max_length
        samples += [stream[i * max_length:(i + 1) * max_length] for i in range(num_samples)]
        dropped += len(stream) - num_samples * max_length
        full, rest = divmod(num_samples, shard_size)
        shard_sizes += [shard_size] * full + ([rest] if rest else [])
    return samples, dropped, shard_sizes


def check_held_out_splits(output_dir, parts, share, tokenizer, shard_size):
    """Checks the train and validation splits that prepare_tfrecord_shards.py --validation_share `share` wrote to
    `output_dir` from the text files of `parts` (each split cut into these parts): each split's samples are the tokens
    of the non-blank lines of its side (corpus.holdout_side), part by part; the two splits count every such line once
    between them, and no text whole in one is in the other. Returns {split: the texts whole in its samples}."""
    from corpus import holdout_side

    whole, num_texts = {}, 0
    for split in ("train", "validation"):
        manifest, samples = read_split(output_dir / split, vocab_size=len(tokenizer))
        expected, dropped, shard_sizes = cut_parts([part_stream(part, tokenizer, holdout_side(split, share))
                                                    for part in parts], manifest["max_length"], shard_size)
        assert samples == expected and manifest["dropped_tokens"] == dropped
        assert [shard["num_samples"] for shard in manifest["shards"]] == shard_sizes
        whole[split], num_texts = whole_texts(samples, tokenizer), num_texts + manifest["num_texts"]
    assert num_texts == sum(1 for part in parts for path, start, end in part
                            for line in lines_beginning_in(path, start, end) if line.strip())
    assert not whole["train"] & whole["validation"]
    return whole


def whole_texts(samples, tokenizer):
    """The texts whole in a split's samples, as tuples of token ids from <s> to </s> (those cut off at the end of a
    part are not), read back without the code under test."""
    stream = [token for sample in samples for token in sample]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    texts, start = set(), None
    for position, token in enumerate(stream):
        if token == bos:
            start = position
        elif token == eos and start is not None:
            texts.add(tuple(stream[start:position + 1]))
            start = None
    return texts


def unfinished_copy(run_dir, destination):
    """What an interrupted run_mlm.py leaves, made from the folder of a finished one: its checkpoints, logs and
    training_results.json, without the saved model and the step it was saved at."""
    import json

    shutil.copytree(run_dir / "checkpoints", destination / "checkpoints")
    shutil.copytree(run_dir / "logs", destination / "logs")
    results = json.loads((run_dir / "training_results.json").read_text())
    del results["saved_model_step"]
    (destination / "training_results.json").write_text(json.dumps(results))
    return destination


def own_cross_entropy(mlm, batch):
    """The summed cross-entropy at the labelled positions of `batch`, from the 🤗 masked LM's own call (its logits
    at every position): what the trainers' LM head at the masked positions must compute."""
    import tensorflow as tf

    logits = mlm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    is_chosen = batch["labels"] != -100
    return float(tf.reduce_sum(tf.boolean_mask(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.where(is_chosen, batch["labels"], 0), logits=tf.cast(logits, tf.float32)), is_chosen)))


# How the tests compress a file, by its extension, independently of the code under test: zstd with the zstandard
# package, not the standard library's module that corpus.py reads with. Each as its command-line tool does: zstd adds
# a checksum of the content.
COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".zst": lambda data: zstandard.ZstdCompressor(write_checksum=True).compress(data)}


def write_compressed(path, data):
    """Writes the bytes `data` to `path`, compressed as its extension says (COMPRESSORS); returns `path`."""
    path.write_bytes(COMPRESSORS[path.suffix](data))
    return path
