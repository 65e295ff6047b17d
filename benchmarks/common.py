"""What the benchmarks share: where the repository is, a tokenizer for the corpus, the special token ids, the machine
they ran on, printing a table, and FLOPs per training sample."""

import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The default corpus is the slice of WikiText-2 train that the tests use, shipped in the repository, so that every
# benchmark runs from a clone. It is small: the README's figures come from the whole of WikiText-2 train.
DEFAULT_TRAIN_FILE = REPO / "tests" / "data" / "wikitext-2" / "train.txt"
TRAIN_FILE_HELP = ("Corpus, one text per line (default: %(default)s, the first 1,500 lines of WikiText-2 train, "
                   "shipped for the tests: it runs anywhere, but it is too small for figures that mean much, and for "
                   "a tokenizer of 10,000 tokens: the tokenizer trained on it has 5,000). The README's figures come "
                   "from all of WikiText-2 train (10.3 MiB): ../shared/data/wikitext-2-v1/train.txt on this "
                   "project's machines, wiki.train.tokens of the WikiText-2 release elsewhere; any larger file will "
                   "do.")
# The benchmarks import functions from the pipeline's scripts, at the top of the repository.
sys.path.insert(0, str(REPO))

# Offline, TensorFlow quiet and without Keras 3: set before any 🤗 library or TensorFlow is imported, here and in
# child processes.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf_keras, not Keras 3: utils.py says why.

SPECIAL_TOKEN_IDS = [0, 1, 2, 3, 4]  # <s>, <pad>, </s>, <unk>, <mask>: train_unigram.py's layout.


def train_tokenizer(train_file, output_dir):
    """train_unigram.py's tokenizer of 10,000 tokens for the corpus `train_file` (5,000 for DEFAULT_TRAIN_FILE,
    which holds too little text for more), saved in output_dir."""
    vocab_size = 5000 if Path(train_file) == DEFAULT_TRAIN_FILE else 10000
    result = subprocess.run([sys.executable, str(REPO / "train_unigram.py"), "--train_file", str(train_file),
                             "--vocab_size", str(vocab_size), "--output_dir", str(output_dir)],
                            capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"train_unigram.py failed on {train_file}:\n{result.stderr[-2000:]}")


def describe_machine():
    """One line about the machine: CPU model, cores, memory, Python. Printed above every table."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        with open("/proc/meminfo") as f:
            memory = f"{int(f.readline().split()[1]) / 2**20:.0f} GiB"
    except (OSError, StopIteration):
        memory = "unknown memory"
    return f"{cpu}, {os.cpu_count()} cores, {memory}, Python {platform.python_version()}"


def load_average():
    """The 1-minute load average: above the number of cores, something else competed for the CPU."""
    return os.getloadavg()[0]


def median(values):
    return statistics.median(values)


def print_table(headers, rows):
    """Prints rows (lists of values, formatted with str) as a Markdown table, columns aligned."""
    rows = [[str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, ["-" * width for width in widths], *rows]:
        print("| " + " | ".join(value.ljust(width) for value, width in zip(row, widths)) + " |")
    print()


def training_flops_per_sample(hidden, layers, intermediate, vocab, length, head_positions):
    """FLOPs of one training step (forward and backward) on one sample of `length` tokens, for a RoBERTa of these
    sizes with the LM head at `head_positions` positions: devices.training_flops_per_token, which says what it
    counts, times the length."""
    from transformers import RobertaConfig

    from devices import training_flops_per_token

    config = RobertaConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=intermediate,
                           vocab_size=vocab)
    return length * training_flops_per_token(config, length, head_positions)
