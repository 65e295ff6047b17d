"""Shared set-up for the tests: an offline environment, and the expensive artifacts (a tokenizer, a set of shards,
a tiny model config) built once per session from the slice of the real WikiText-2 in tests/data."""

import atexit
import os
import shutil
import tempfile

# Before anything imports 🤗 libraries or TensorFlow: no network, an empty cache of our own, quiet TensorFlow.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf-home-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], ignore_errors=True)
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
# tf.keras is tf_keras, as utils.py makes it for the scripts: the test modules import TensorFlow before any script's
# module, and every test process would pay the 2 s of Keras 3's import.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
# One thread per TensorFlow op, here and in the scripts the tests start: `make test` runs a test process per core and
# one more, and the tests' tiny models gain nothing from splitting an op (the architecture tests took 9 % less time
# so). One op at a time too: beside the other test processes, a pool of threads running ops side by side only waits
# for cores (the whole suite on 2 cores: 855 and 989 s of CPU, 7:13 and 8:25, against 1,063 and 1,131 s, 9:05 and
# 9:33).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# XLA without LLVM's optimisations of the machine code (XLA's own graph rewrites still run; the results differ from
# the optimised code's by rounding only: a tiny masked LM's first loss by 5e-7): the tests' steps run a few times
# each, so compiling them costs more than running them. On a 2-core Xeon, that model's first fit under XLA took 2.8
# to 3.1 s of CPU instead of 4.2 to 5.0, the architecture tests 141 s instead of 161.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
os.environ["TOKENIZERS_PARALLELISM"] = "true"
# Never real Cloud Storage credentials or endpoints: the gs:// tests bring their own emulator on 127.0.0.1.
for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT"):
    os.environ.pop(name, None)

import pytest  # noqa: E402

from helpers import (MAX_LENGTH, SHARD_LINES, TOKENIZER_LINES, VALIDATION_LINES, WIKITEXT, built_once,  # noqa: E402
                     run_main, tiny_mlm_args)


def pytest_collection_modifyitems(items):
    """The tests marked fast last: `make test`'s processes take the slow ones first, and the last minute of the run
    is tests of a second, not one process finishing a run of a minute while the others wait."""
    items.sort(key=lambda item: item.get_closest_marker("fast") is not None)  # Stable: in file order otherwise.


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A Unigram tokenizer trained by train_unigram.py on the first lines of WikiText-2 train."""
    return built_once(tmp_path_factory, "tokenizer/tokenizer", lambda output_dir: run_main(
        "train_unigram.py", "--train_file", WIKITEXT / "train.txt", "--limit", TOKENIZER_LINES, "--vocab_size", 1000,
        "--output_dir", output_dir))


@pytest.fixture(scope="session")
def shards_dir(tokenizer_dir, tmp_path_factory):
    """Train and validation shards written by prepare_tfrecord_shards.py: samples of MAX_LENGTH tokens."""
    def build(output_dir):
        validation_file = output_dir.parent / "validation.txt"
        with open(WIKITEXT / "validation.txt", encoding="utf-8") as f:
            validation_file.write_text("".join(f.readline() for _ in range(VALIDATION_LINES)), encoding="utf-8")
        run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                 "--train_file", WIKITEXT / "train.txt", "--validation_file", validation_file, "--limit", SHARD_LINES,
                 "--max_length", MAX_LENGTH, "--shard_size", 100, "--output_dir", output_dir)

    return built_once(tmp_path_factory, "shards/tfrecords", build)


@pytest.fixture(scope="session")
def tiny_config_dir(tmp_path_factory):
    """A tiny RoBERTa config saved locally, standing in for a Hub id such as FacebookAI/roberta-base."""
    from transformers import RobertaConfig

    # Shared too: the pre-trained model's folder names it, whichever process reads that.
    return built_once(tmp_path_factory, "tiny-roberta/config", RobertaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=MAX_LENGTH + 2).save_pretrained)


@pytest.fixture(scope="session")
def pretrained_model_dir(shards_dir, tokenizer_dir, tiny_config_dir, tmp_path_factory):
    """A tiny masked-LM folder saved by run_mlm.py after a few steps: the input of run_classification.py."""
    return built_once(tmp_path_factory, "pretrained/mlm-model", lambda output_dir: run_main(
        "run_mlm.py", *tiny_mlm_args(shards_dir, tokenizer_dir, tiny_config_dir, output_dir), "--max_steps", 20))
