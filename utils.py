"""What the scripts share on a successful run, and nothing else:

- the shard contract between prepare_tfrecord_shards.py, which writes shards, and run_mlm.py, which reads them;
- Cloud Storage: one small layer over the google-cloud-storage client, for what TensorFlow does not read or write
  itself (text, tokenizer, config and model folders, shards written without TensorFlow);
- reading a text corpus, streamed (train_unigram.py and prepare_tfrecord_shards.py);
- output folders, the tokenizer and config loaders, and saving a folder locally, to gs:// and to the Hub, with a
  PyTorch copy of a model;
- the hardware flags and the tf.distribute strategy (run_mlm.py and run_classification.py).

What runs only once something has gone wrong (and `python utils.py check-tpu`) is in diagnostics.py. TensorFlow,
🤗 Datasets and 🤗 Transformers are imported inside the functions that need them: the data scripts never pay for
TensorFlow.
"""

import argparse
import atexit
import contextlib
import copy
import dataclasses
import functools
import glob
import hashlib
import io
import itertools
import json
import logging
import os
import posixpath
import random
import re
import shutil
import tempfile
import uuid

logger = logging.getLogger("utils")


class UserError(Exception):
    """Something the user must change (a flag, a file, a folder), in a message that says what and how. Shared code
    and the scripts' functions raise it; each script's entry point prints it as "error: MESSAGE" and exits with
    status 1. A program that calls these functions can catch it like any other exception."""

# ----------------------------------------------------------------------------------------------------------------
# The shard contract. Each split folder holds, written in this order:
#
#   INCOMPLETE                               first; deleted once the manifest is written
#   dataset-{index}-{num_samples}.tfrecord   the samples (the record format: prepare_tfrecord_shards.py)
#   token_counts.json                        how many times each token id occurs in the samples, a JSON list
#   manifest.json                            last, once every shard is complete: a Manifest

# The names of the original Transformers TPU example, whose shards run_mlm.py reads too.
SHARD_NAME = "dataset-{index}-{num_samples}.tfrecord"
SHARD_NAME_PATTERN = re.compile(r"dataset-(\d+)-(\d+)\.tfrecord$")
MANIFEST_NAME = "manifest.json"
TOKEN_COUNTS_NAME = "token_counts.json"
INCOMPLETE_MARKER_NAME = "INCOMPLETE"
# The shortest sample worth masking: two of its tokens may be a document bound (</s> <s>), never masked, and at 15 %
# one sample of 16 tokens in ten still draws no mask (0.85 ** 14); shorter ones leave a mask almost no context.
MIN_MAX_LENGTH = 16


@dataclasses.dataclass
class Manifest:
    """manifest.json of a split folder."""
    split: str
    max_length: int
    num_samples: int
    num_tokens: int
    dropped_tokens: int  # Tokens at the ends of the parts that did not fill a sample.
    num_parts: int  # Parts of the split written side by side (processes or Beam workers), each cut on its own.
    num_texts: int
    tokenizer: str  # What --tokenizer_name_or_path named.
    vocab_size: int
    vocabulary_fingerprint: str  # See vocabulary_fingerprint: run_mlm.py compares it with its tokenizer's.
    # In order: {"file", "num_samples", "num_bytes"}; run_mlm.py compares each size with the file's.
    shards: list

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, data, path):
        """The manifest in `data` (the bytes of the file at `path`), or UserError saying what is wrong with it."""
        try:
            fields = json.loads(data)
            if all(shard.keys() >= {"file", "num_samples", "num_bytes"} for shard in fields["shards"]):
                return cls(**{field.name: fields[field.name] for field in dataclasses.fields(cls)})
        except (ValueError, TypeError, KeyError, AttributeError):  # Not JSON, not an object, a field missing.
            pass
        from diagnostics import manifest_error

        raise UserError(manifest_error(cls, data, path))


def vocabulary_fingerprint(tokenizer):
    """A hash of every token of a 🤗 Tokenizers tokenizer with its id: shards and model must agree on what each id
    means. A Tokenizer loaded from tokenizer.json and the backend_tokenizer of its AutoTokenizer give the same."""
    pairs = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda pair: pair[1])
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# Local files and Cloud Storage. TensorFlow reads and writes gs:// itself (tf.io.gfile, TFRecord files,
# checkpoints); everything else goes through these functions, which take a local path or a gs:// one.


def is_gcs_path(path):
    return str(path).startswith("gs://")


def split_gcs_path(path):
    """("bucket", "folder/name") for "gs://bucket/folder/name"."""
    bucket, _, name = path[len("gs://"):].partition("/")
    return bucket, name


@functools.cache
def gcs_client():
    """A google-cloud-storage client with Application Default Credentials (see diagnostics.CREDENTIALS_ADVICE)."""
    from google.cloud import storage

    return storage.Client()


def gcs_blob(path):
    bucket, name = split_gcs_path(path)
    return gcs_client().bucket(bucket).blob(name)


def gcs_folder(path):
    """The bucket of a gs:// folder and the prefix of its objects: "a/b/" for gs://bucket/a/b, "" for the root."""
    bucket, name = split_gcs_path(path)
    return gcs_client().bucket(bucket), name.rstrip("/") + "/" if name.rstrip("/") else ""


def check_gcs_path(path, *, write=False):
    """Stops at once, saying what to do, when the gs:// `path` cannot be read (with `write`, written): before any
    long work, so that hours of it never end in a failed first write. Writing is probed with an object created and
    deleted, as publishing a shard needs both. Local paths pass."""
    if not is_gcs_path(path):
        return
    bucket, name = split_gcs_path(path)
    prefix = re.split(r"[*?[]", name, maxsplit=1)[0]  # A glob (gs://bucket/train/*.txt) up to its wildcard.
    try:
        next(iter(gcs_client().list_blobs(bucket, prefix=prefix, max_results=1)), None)
        if write:
            probe = gcs_blob(f"gs://{bucket}/{posixpath.join(prefix, f'.write-check-{uuid.uuid4().hex}')}")
            probe.upload_from_string(b"")
            probe.delete()
    except Exception as err:
        from diagnostics import explain_gcs_error

        message = explain_gcs_error(path, bucket, err, write=write)
        if message is None:
            raise
        raise UserError(message) from err


def open_file(path, mode="rb"):
    """A local or gs:// file opened for reading or writing ("rb", "wb", "r", "w"); text is UTF-8."""
    encoding = {} if "b" in mode else {"encoding": "utf-8"}
    if not is_gcs_path(path):
        return open(path, mode, **encoding)
    file = gcs_blob(path).open(mode, **encoding)
    # google-cloud-storage's reader has no readline of its own: IOBase's would call it for every byte.
    return io.BufferedReader(file) if mode == "rb" else file


def exists(path):
    return gcs_blob(path).exists() if is_gcs_path(path) else os.path.exists(path)


def file_size(path):
    if is_gcs_path(path):
        blob = gcs_blob(path)
        blob.reload()  # Its metadata, size included.
        return blob.size
    return os.path.getsize(path)


def rename(source, destination):
    """Moves a file, replacing `destination` (atomically on a local disk; a copy and a delete in a bucket)."""
    if is_gcs_path(source):
        blob = gcs_blob(source)
        blob.bucket.rename_blob(blob, split_gcs_path(destination)[1])
    else:
        os.replace(source, destination)


def folder_entries(path):
    """The names of the files and sub-folders in the folder `path`; [] when it does not exist."""
    if not is_gcs_path(path):
        return os.listdir(path) if os.path.isdir(path) else []
    bucket, prefix = gcs_folder(path)
    listing = bucket.list_blobs(prefix=prefix, delimiter="/")  # One level: the files, then the sub-folders' names.
    names = [blob.name[len(prefix):] for blob in listing] + [folder[len(prefix):-1] for folder in listing.prefixes]
    return sorted(set(names) - {""})  # "": the object that stands for the folder itself.


def delete(path):
    """Deletes a file, or a folder and everything in it; nothing if there is none."""
    if is_gcs_path(path):
        bucket, name = split_gcs_path(path.rstrip("/"))
        for blob in gcs_client().list_blobs(bucket, prefix=name):
            if blob.name == name or blob.name.startswith(name + "/"):
                blob.delete()
    elif os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


@functools.cache  # One copy per path, however many loaders read it.
def local_copy(path):
    """A path that 🤗 libraries can read: `path` itself when it is local (or a Hub id); for a gs:// file, or the
    files of a gs:// folder (not its sub-folders), a copy in a temporary folder deleted when the script exits."""
    if not is_gcs_path(path):
        return path
    local_dir = tempfile.mkdtemp(prefix="from-gcs-")
    atexit.register(shutil.rmtree, local_dir, ignore_errors=True)
    bucket, name = split_gcs_path(path)
    single_file = gcs_client().bucket(bucket).get_blob(name) if name and not name.endswith("/") else None
    if single_file is not None:
        single_file.download_to_filename(os.path.join(local_dir, posixpath.basename(name)))
        return os.path.join(local_dir, posixpath.basename(name))
    bucket, prefix = gcs_folder(path)
    files = [blob for blob in bucket.list_blobs(prefix=prefix, delimiter="/") if not blob.name.endswith("/")]
    if not files:
        raise UserError(f"there is no file at {path!r}.")
    for blob in files:
        blob.download_to_filename(os.path.join(local_dir, blob.name[len(prefix):]))
    return local_dir


def upload_folder(local_dir, path):
    """Copies a local folder, sub-folders included, into the gs:// folder `path`, replacing what is there."""
    for root, _, files in os.walk(local_dir):
        for file in files:
            relative = os.path.relpath(os.path.join(root, file), local_dir).replace(os.sep, "/")
            gcs_blob(posixpath.join(path, relative)).upload_from_filename(os.path.join(root, file))


# ----------------------------------------------------------------------------------------------------------------
# Reading a text corpus (train_unigram.py and prepare_tfrecord_shards.py)

# Which 🤗 Datasets builder reads a file, by its extension: the one format detection of the scripts.
FILE_BUILDERS = {".txt": "text", ".text": "text", ".csv": "csv", ".json": "json", ".jsonl": "json",
                 ".parquet": "parquet"}


def file_builder(path):
    return FILE_BUILDERS.get(os.path.splitext(path)[1].lower())


def add_corpus_arguments(group):
    """The corpus flags that train_unigram.py and prepare_tfrecord_shards.py share; each adds its file flags."""
    group.add_argument("--dataset_name", default="Salesforce/wikitext",
                       help="Dataset on the Hugging Face Hub (default: %(default)s).")
    group.add_argument("--dataset_config", default="wikitext-103-raw-v1",
                       help="Configuration of the Hub dataset (default: %(default)s).")
    group.add_argument("--text_column", default="text",
                       help="Column holding the text, for Hub datasets and JSON/Parquet files (default: %(default)s).")
    group.add_argument("--limit", type=positive_int,
                       help="Read only the first LIMIT records of each split, for a quick run (default: all).")
    group.add_argument("--trust_remote_code", action="store_true",
                       help="Allow a Hub dataset to run its own loading script. Off by default: only turn it on "
                            "for datasets whose code you trust.")


def text_batches(*, text_column, batch_size, limit=None, data_files=None, dataset_name=None, dataset_config=None,
                 splits=None, trust_remote_code=False):
    """{split: iterator of lists of up to `batch_size` texts}, empty and whitespace-only texts left out, `limit`
    records read at most per split, streamed: memory stays flat whatever the corpus size. From `data_files`
    ({split: [paths]}) or the Hub dataset `dataset_name` (`splits`: those to read, None for all). Text files are
    read here, at disk speed; the others through 🤗 Datasets."""
    file_format = data_files_format(data_files) if data_files else None  # Every file checked, once.
    if file_format == "text":
        if text_column != "text":  # As 🤗 Datasets' "text" builder, whose only column is "text".
            raise UserError(f"the data has no column {text_column!r}; its columns are ['text']. "
                            "Choose one with --text_column.")
        return {split: iter_text_file_batches(paths, batch_size, limit) for split, paths in data_files.items()}
    import datasets  # Only here: it takes a second to import.

    if data_files:
        corpus = datasets.load_dataset(file_format, data_files=data_files, streaming=True)
    else:
        check_hub_reachable(dataset_name)
        try:
            corpus = datasets.load_dataset(dataset_name, dataset_config, streaming=True,
                                           trust_remote_code=trust_remote_code)
        except (ConnectionError, FileNotFoundError, ValueError) as err:
            raise UserError(f"could not load the dataset {dataset_name!r} (config {dataset_config!r}) from "
                            f"the Hub: {err}\nCheck the name and config, or pass local files instead "
                            "(--train_file ...).") from err
        missing = [split for split in splits or [] if split not in corpus]
        if missing:
            raise UserError(f"the dataset {dataset_name!r} has no split {missing}; it has {sorted(corpus)}.")
    return {split: iter_text_batches(dataset, text_column, batch_size, limit) for split, dataset in corpus.items()
            if not splits or split in splits}


def check_hub_reachable(dataset_name):
    """Stops at once when the Hub cannot be reached, instead of after a minute of 🤗 Datasets' retries."""
    from huggingface_hub import HfApi, constants

    if not constants.HF_HUB_OFFLINE:  # Offline, 🤗 Datasets reads its cache, if it has the dataset.
        try:
            HfApi().dataset_info(dataset_name, timeout=10)
        except OSError as err:  # requests' connection and HTTP errors are OSErrors.
            from diagnostics import hub_unreachable_error

            raise UserError(hub_unreachable_error(dataset_name, err)) from err


def data_files_format(data_files, formats=("text", "json", "parquet")):
    """The 🤗 Datasets builder, one of `formats`, that reads every file of `data_files` ({split: [paths]});
    UserError for a missing file, an unknown extension or a mix of formats."""
    builders = set()
    for split, paths in data_files.items():
        for path in paths:
            builder = file_builder(path)
            if builder not in formats:
                extensions = ", ".join(extension for extension, known in FILE_BUILDERS.items() if known in formats)
                raise UserError(f"cannot read {path!r}: unknown extension "
                                f"{os.path.splitext(path)[1].lower()!r}. Use files of one of these: {extensions}.")
            if is_gcs_path(path) and builder != "text":
                raise UserError(f"cannot read {path!r}: JSON-lines and Parquet files are read from local "
                                "disk only. Copy them first (`gcloud storage cp`), or use text files, which are "
                                "read from gs:// directly.")
            if not exists(path):
                raise UserError(f"the {split} file {path!r} does not exist.")
            builders.add(builder)
    if len(builders) > 1:
        raise UserError(f"all input files must have one format, got a mix of {sorted(builders)}.")
    return builders.pop()


def iter_text_batches(dataset, text_column, batch_size, limit=None):
    """The texts of a streamed 🤗 dataset in lists of up to `batch_size`; `limit` records at most."""
    if text_column not in (dataset.column_names or [text_column]):
        raise UserError(f"the data has no column {text_column!r}; its columns are {dataset.column_names}. "
                        "Choose one with --text_column.")
    texts = (record[text_column] for record in (dataset.take(limit) if limit is not None else dataset))
    return batches_of_texts(texts, batch_size)


def iter_text_file_batches(files, batch_size, limit=None):
    """iter_text_batches for text files (paths, or (path, start, end) byte ranges): the texts that 🤗 Datasets'
    "text" builder gives, read at disk speed."""
    return batches_of_texts(itertools.islice(iter_text_file_lines(files), limit), batch_size)


def iter_text_file_lines(files):
    """The lines of text files, without their line breaks: "\\n", "\\r\\n" or "\\r", as Python's universal newlines
    and 🤗 Datasets split them. Each of `files` is a path, or a (path, start, end) byte range: the lines that begin
    in [start, end) (end None: the end of the file), a line beginning at 0 and after each "\\n". Consecutive ranges,
    wherever cut, give each line once (prepare_tfrecord_shards.py cuts files into parts so)."""
    for file in files:
        path, start, end = (file, 0, None) if isinstance(file, (str, os.PathLike)) else file
        with open_file(path, "rb") as f:
            if start:
                f.seek(start - 1)
                f.readline()  # The byte before `start`, up to and with the "\n" that ends its line.
            position = f.tell()
            for line in f:
                if end is not None and position >= end:
                    break
                position += len(line)
                try:
                    text = line.decode("utf-8").removesuffix("\n")
                except UnicodeDecodeError as err:
                    from diagnostics import not_utf8_error

                    raise UserError(not_utf8_error(path, open_file(path, "rb"))) from err
                yield from text.removesuffix("\r").split("\r")


def batches_of_texts(texts, batch_size):
    """The texts in lists of up to `batch_size`, less empty and whitespace-only ones (and None, a missing value)."""
    texts = (text for text in texts if text and not text.isspace())
    while batch := list(itertools.islice(texts, batch_size)):
        yield batch


# ----------------------------------------------------------------------------------------------------------------
# Flags, output folders, tokenizers, configs, saving


def positive_int(text):
    """An argparse type: an integer above 0 ("argument --limit: must be a positive number, got 0")."""
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {int(text)}")
    return int(text)


def fraction(text):
    """An argparse type: a number in [0, 1)."""
    if not 0 <= float(text) < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return float(text)


def check_output_dir(path, overwrite, resumable=(), stale=()):
    """The output-folder policy of every script. --output_dir may not be a file; a folder that holds anything
    but `resumable` (what the script resumes from) is refused without --overwrite; with it, `stale` (what an
    earlier run left that would mix with this one's: TensorBoard events, checkpoints) is deleted first."""
    if os.path.isfile(path) or (is_gcs_path(path) and split_gcs_path(path)[1].strip("/")
                                and gcs_blob(path.rstrip("/")).exists()):
        raise UserError(f"--output_dir {path!r} is a file, not a folder. Choose another --output_dir "
                        "(a folder, which is created if it does not exist).")
    foreign = [name for name in folder_entries(path) if name not in resumable]
    if foreign and not overwrite:
        raise UserError(f"the output folder {path!r} "
                        + ("holds files that are not a checkpoint of this script to resume from" if resumable
                            else "is not empty")
                        + ". Choose another --output_dir, or pass --overwrite to replace what this script writes "
                           "there.")
    for name in stale if overwrite else ():
        delete(os.path.join(path, name))


def load_tokenizer(name_or_path, flag, advice=None):
    """AutoTokenizer.from_pretrained of a local or gs:// folder or a Hub id, named by the option `flag`: the one
    tokenizer loader. A missing folder or an id that cannot be loaded stops with `advice` (default: train one with
    train_unigram.py), instead of 🤗 Hub's errors about repository ids."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id
    from transformers import AutoTokenizer

    advice = advice or (f"Pass the folder written by train_unigram.py (train one with `python train_unigram.py "
                        f"--output_dir {name_or_path}`), or a Hub tokenizer id while online.")
    local_path = local_copy(name_or_path)
    if not os.path.isdir(local_path):
        try:
            validate_repo_id(local_path)
        except HFValidationError:  # A path ("/a/b", "./a", "a/b/c"), which cannot be a Hub id.
            raise UserError(f"the tokenizer folder {name_or_path!r} ({flag}) does not exist. Check the "
                            f"path. {advice}") from None
    try:
        return AutoTokenizer.from_pretrained(local_path)
    except (OSError, ValueError) as err:  # Not on the Hub, offline, or a folder without tokenizer files.
        where = ("the folder holds no tokenizer that AutoTokenizer can load" if os.path.isdir(local_path)
                 else "there is no such local folder, and it could not be loaded from the Hugging Face Hub")
        raise UserError(f"cannot load the tokenizer {name_or_path!r} ({flag}): {where}.\n"
                        f"{type(err).__name__}: {err}\n{advice}") from err


def load_config(name_or_path, flag, advice):
    """AutoConfig.from_pretrained of a local or gs:// folder or file, or a Hub id: the one config loader."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(local_copy(name_or_path))
    except (OSError, ValueError) as err:  # No such folder or id, no config.json, or not a config.
        raise UserError(f"cannot load the model config {name_or_path!r} ({flag}): {err}\n{advice}") from err


# RoBERTa-style models number positions from pad_token_id + 1: they need that many more position embeddings than
# their longest sequence (RoBERTa-base: 514 for 512 tokens).
MODELS_WITH_POSITION_OFFSET = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm")


def check_max_length(config, max_length, can_override=False):
    """Stops when samples of `max_length` tokens need more position embeddings than `config` has; `can_override`:
    the script has --config_overrides."""
    offset = config.pad_token_id + 1 if config.model_type in MODELS_WITH_POSITION_OFFSET else 0
    needed = max_length + offset
    if needed > config.max_position_embeddings:
        raise UserError(
            f"--max_length {max_length} needs {needed} position embeddings, but the model has "
            f"max_position_embeddings={config.max_position_embeddings}, enough for "
            f"{config.max_position_embeddings - offset} tokens. Lower --max_length"
            + (f", or add max_position_embeddings={needed} to --config_overrides." if can_override else "."))


def save_folder(output_dir, write, description, hub_model_id=None, commit_message=None, ignore_patterns=None):
    """Has `write(folder)` write files into a local folder, then puts them in `output_dir` and, with
    `hub_model_id`, on the Hub (less `ignore_patterns`). save_pretrained and the Hub client write and read local
    folders only: for a gs:// `output_dir`, `folder` is a temporary one."""
    local_dir = tempfile.mkdtemp() if is_gcs_path(output_dir) else output_dir
    write(local_dir)
    if local_dir != output_dir:
        upload_folder(local_dir, output_dir)
    logger.info("%s saved to %s", description, output_dir)
    if hub_model_id:
        from huggingface_hub import create_repo, upload_folder as upload_to_hub

        try:
            create_repo(hub_model_id, exist_ok=True)
            url = upload_to_hub(repo_id=hub_model_id, folder_path=local_dir, commit_message=commit_message,
                                ignore_patterns=ignore_patterns)
        except (OSError, ValueError) as err:  # Network, authentication and bad-name errors.
            raise UserError(
                f"pushing to the Hub repository {hub_model_id!r} failed: {err}\nNothing is lost: everything "
                f"is saved in {output_dir!r}. Log in with `huggingface-cli login` (or set HF_TOKEN), then upload "
                f"it with `huggingface-cli upload {hub_model_id} {local_dir}`.") from err
        logger.info("Pushed to %s", url)
    if local_dir != output_dir:
        shutil.rmtree(local_dir)


# The model types that tests/test_architectures.py trains, resumes, fine-tunes and converts exactly (the README's
# table): save_pytorch_copy writes no copy of any other.
ARCHITECTURES = ("albert", "bert", "camembert", "convbert", "deberta", "deberta-v2", "distilbert", "electra", "mpnet",
                 "roberta", "roberta-prelayernorm", "xlm-roberta")

# A model's copy for 🤗 Transformers 5, which has no TensorFlow: a complete model folder inside the TensorFlow one.
# Not beside tf_model.h5: Transformers 4.57's TensorFlow loader prefers any model.safetensors, and fails on these.
PYTORCH_SUBFOLDER = "pytorch"


def save_pytorch_copy(model, tokenizer, folder):
    """Writes into {folder}/pytorch the 🤗 TF `model` as Transformers 5 loads it with PyTorch: config, `tokenizer`,
    float32 weights in a PyTorch-format model.safetensors, named and laid out by Transformers' own TF-to-PyTorch
    mapping, written by safetensors' numpy writer: no PyTorch needed. (TensorFlow's own safetensors keep the TF
    names, which Transformers 5 ignores: it would load random weights.)"""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers.modeling_tf_pytorch_utils import apply_transpose, convert_tf_weight_name_to_pt_weight_name

    if model.config.model_type not in ARCHITECTURES:
        logger.warning("No PyTorch copy: the conversion of %s models is not tested here.", model.config.model_type)
        return
    pytorch_dir = os.path.join(folder, PYTORCH_SUBFOLDER)
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__.removeprefix("TF")]  # RobertaForMaskedLM
    config.save_pretrained(pytorch_dir)
    tokenizer.save_pretrained(pytorch_dir)
    tensors = {}
    for weight in model.weights:
        name, transpose = convert_tf_weight_name_to_pt_weight_name(weight.name, tf_weight_shape=weight.shape)
        if ".pooler." in name and config.architectures[0].endswith("ForMaskedLM"):
            continue  # MPNet's TensorFlow masked LM holds a pooler that it never uses, PyTorch's none.
        value = apply_transpose(transpose, weight.numpy(), pt_to_tf=False)
        if "key_conv_attn_layer." in name and not name.endswith("pointwise.weight"):
            # ConvBERT's separable convolution: PyTorch's keeps these as (channels, 1, kernel) and (channels, 1).
            value = value.reshape(-1, 1, *value.shape[2:])
        tensors[name] = np.ascontiguousarray(value, np.float32)
    save_file(tensors, os.path.join(pytorch_dir, "model.safetensors"), metadata={"format": "pt"})


def write_model_card(folder, output_dir, task, example, description):
    """README.md in `folder`, for the Hub: the model's name (the last part of `output_dir`), `description`, and how
    to run it in the `task` pipeline on `example`, with PyTorch and with TensorFlow."""
    from huggingface_hub import ModelCard, ModelCardData

    name = os.path.basename(output_dir.rstrip("/") if is_gcs_path(output_dir) else os.path.abspath(output_dir))
    data = ModelCardData(library_name="transformers", pipeline_tag=task, tags=["tensorflow", "pytorch"])
    ModelCard(f"""---
{data.to_yaml()}
---

# {name}

{description}

## Use

With 🤗 Transformers 5 and PyTorch, from the folder `{PYTORCH_SUBFOLDER}/` (converted from TensorFlow's weights), or
with Transformers 4.57 and TensorFlow, from `tf_model.h5`:

```python
from transformers import pipeline

pipe = pipeline("{task}", model="PATH_OR_HUB_ID", model_kwargs=dict(subfolder="{PYTORCH_SUBFOLDER}"))  # PyTorch
pipe = pipeline("{task}", model="PATH_OR_HUB_ID", framework="tf", dtype=None)  # TensorFlow
print(pipe("{example}"))
```
""").save(os.path.join(folder, "README.md"))


# ----------------------------------------------------------------------------------------------------------------
# Hardware (run_mlm.py and run_classification.py)


def add_hardware_arguments(parser):
    """The hardware flags of the two training scripts, as an argparse group."""
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--tpu_name",
                          help="TPU to use: `local` on a TPU VM; a TPU Node's or a pod slice's name, from a machine "
                               "that is not the TPU host. Default: `local` when this machine has TPU chips, else "
                               "GPUs or the CPU. A TPU named here must be found, or the script stops.")
    hardware.add_argument("--tpu_zone", help="Zone of the TPU named by --tpu_name (TPU Nodes and pod slices).")
    hardware.add_argument("--gcp_project", help="Google Cloud project of that TPU (TPU Nodes and pod slices).")
    hardware.add_argument("--no_tpu", action="store_true",
                          help="Do not use a TPU even if this machine has one: use GPUs or the CPU.")
    hardware.add_argument("--num_cpu_replicas", type=positive_int, default=1,
                          help="On a machine without GPUs, split the CPU into this many devices and train one "
                               "replica on each: a dry run of multi-replica training (default: %(default)s).")
    hardware.add_argument("--steps_per_execution", type=positive_int, default=1,
                          help="Steps run per call from Python into the device; larger values cut the per-step "
                               "overhead, mostly on TPUs (default: %(default)s).")
    hardware.add_argument("--bfloat16", action="store_true",
                          help="Mixed precision: compute in bfloat16, keep weights in float32. Fast on TPUs and "
                               "recent GPUs (A100, H100); slow on CPUs.")
    # Both spellings of the negative flag: argparse's BooleanOptionalAction would only accept --no-jit_compile.
    hardware.add_argument("--jit_compile", action="store_true", default=None,
                          help="Compile each replica's forward and backward pass with XLA. Default: on with GPUs, "
                               "off on a CPU, where XLA measured slower for these models (benchmarks/README.md); "
                               "pass it there to rehearse a TPU's compilation. TPUs compile everything with XLA, "
                               "whatever the flag.")
    hardware.add_argument("--no_jit_compile", "--no-jit_compile", dest="jit_compile", action="store_false",
                          help="Run the forward and backward pass without XLA, on GPUs too.")


# Every TPU chip is a PCI device of Google's vendor id, its device id naming the generation (v2 and v3 share one,
# told apart by the subsystem id): the ids that Google's tpu-info tool reads.
GOOGLE_PCI_VENDOR_ID = "0x1ae0"
TPU_GENERATIONS = {("0x0027", "0x004e"): "v2", ("0x0027", "0x004f"): "v3", "0x005e": "v4", "0x0062": "v5p",
                   "0x0063": "v5e", "0x006f": "v6e", "0x0076": "7x"}


def local_tpu_chips(root="/"):
    """This machine's TPU chips by generation, e.g. {"v4": 4}, read from the PCI devices in sysfs as JAX and
    tpu-info do: this works without any TPU software. /dev/accel* files count as chips of unknown generation when
    sysfs shows none. `root` lets tests point at a fake tree."""
    chips = {}
    for device in glob.glob(os.path.join(root, "sys/bus/pci/devices/*")):
        ids = {}
        for name in ("vendor", "device", "subsystem_device"):
            with contextlib.suppress(OSError), open(os.path.join(device, name)) as f:
                ids[name] = f.read().strip()
        generation = ids.get("vendor") == GOOGLE_PCI_VENDOR_ID and (
            TPU_GENERATIONS.get((ids.get("device"), ids.get("subsystem_device")))
            or TPU_GENERATIONS.get(ids.get("device")))
        if generation:  # Google's other PCI devices (its network cards) are not TPUs.
            chips[generation] = chips.get(generation, 0) + 1
    accel_files = glob.glob(os.path.join(root, "dev/accel[0-9]*"))
    return chips or ({"unknown generation": len(accel_files)} if accel_files else {})


def choose_strategy(args, root="/"):
    """The tf.distribute strategy for this machine, and whether it is a TPU one. Call it before any TensorFlow op:
    the CPU is split into --num_cpu_replicas devices first, and MultiWorkerMirroredStrategy sets up its collective
    ops at start-up. A machine with TPU chips never falls back to its CPU silently: if TensorFlow cannot use them,
    the script stops and says why. `root` lets tests point at a fake sysfs."""
    import tensorflow as tf

    if args.num_cpu_replicas > 1 and not tf.config.list_physical_devices("GPU"):
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                                   [tf.config.LogicalDeviceConfiguration()] * args.num_cpu_replicas)
    chips = {} if args.no_tpu else local_tpu_chips(root)
    tpu_name = args.tpu_name or ("local" if chips else None)
    if tpu_name:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu_name, zone=args.tpu_zone, project=args.gcp_project)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            return tf.distribute.TPUStrategy(resolver), True
        except Exception as err:  # Each TPU set-up failure has its own type; all mean "this TPU is not usable".
            from diagnostics import explain_tpu_error

            raise UserError(explain_tpu_error(tpu_name, chips, err, root)) from err
    if "TF_CONFIG" in os.environ:
        return tf.distribute.MultiWorkerMirroredStrategy(), False
    devices = [device.name for device in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]
    if len(devices) == 1:
        # MirroredStrategy would pay for its cross-replica machinery on every step (benchmarks/README.md);
        # OneDeviceStrategy keeps the same code path (scope, distributed datasets, replica context) without it.
        return tf.distribute.OneDeviceStrategy(devices[0]), False
    return tf.distribute.MirroredStrategy(devices), False


def set_up_training(args, input_paths):
    """What both training scripts do first, in this order; returns (strategy, on_tpu, jit_compile). The gs://
    paths first: a missing bucket must not wait for a TPU to start. Then the strategy, before any TensorFlow op;
    then the seeds and the precision, before any model is built."""
    import tf_keras as keras

    for path in input_paths:
        if path:
            check_gcs_path(path)
    check_gcs_path(args.output_dir, write=True)
    strategy, on_tpu = choose_strategy(args)
    set_seed(args.seed)
    if args.bfloat16:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    return strategy, on_tpu, use_jit_compile(args, on_tpu)


def set_seed(seed):
    """Seeds Python, NumPy and TensorFlow: keras.utils.set_random_seed less the seed generator it installs, which
    draws with random.randint(1, 1e9), a float bound that Python 3.12 refuses. Without it, tf-keras draws its
    layers' seeds from Python's own generator, seeded here all the same."""
    import numpy as np
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def use_jit_compile(args, on_tpu):
    """Whether to XLA-compile each replica's forward and backward pass: as --jit_compile says, else on with GPUs
    (where XLA's fused kernels pay) and off on a CPU (where they measured slower). A TPU compiles the whole step
    with XLA anyway."""
    import tensorflow as tf

    if on_tpu:
        return False
    return args.jit_compile if args.jit_compile is not None else bool(tf.config.list_logical_devices("GPU"))


def count_hosts(strategy):
    """Machines whose CPUs run an input pipeline of their own: the hosts of a TPU (one for a TPU VM, all of a pod
    slice's), or the workers of a multi-worker cluster."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return strategy.extended.num_hosts
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return len(host_addresses(strategy))
    return 1


def host_addresses(strategy):
    """The addresses of a multi-host strategy's hosts, as its cluster resolver gives them ([] for none)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return [*cluster.get("chief", []), *cluster.get("worker", [])]


def strategy_name(strategy):
    # MultiWorkerMirroredStrategy is the public name of the class that TensorFlow calls CollectiveAllReduceStrategy.
    name = type(strategy).__name__
    return "MultiWorkerMirroredStrategy" if name == "CollectiveAllReduceStrategy" else name


if __name__ == "__main__":
    from diagnostics import main  # `python utils.py check-tpu`, as the README and the Makefile say.

    main(local_tpu_chips())
