"""What the three scripts share, and nothing else.

- Reading a text corpus (train_unigram.py and prepare_tfrecord_shards.py): from the Hugging Face Hub or from
  local text / JSON-lines / Parquet files, streamed so that a corpus larger than memory is never loaded whole.
- The shard file name (prepare_tfrecord_shards.py writes it, run_mlm.py reads sample counts back from it).
- Guarding an output folder against being overwritten by accident.
- Pushing a finished folder to the Hub (train_unigram.py and run_mlm.py).
"""

import os
import re

# Shards are named as in the original Transformers TPU example, so that shards made by it keep working:
# the second number is how many samples (tf.train.Example records) the file holds.
SHARD_NAME = "dataset-{index}-{num_samples}.tfrecord"
SHARD_NAME_PATTERN = re.compile(r"dataset-(\d+)-(\d+)\.tfrecord$")
MANIFEST_NAME = "manifest.json"

# Which 🤗 Datasets builder reads a local file, by its extension.
FILE_BUILDERS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def is_gcs_path(path):
    """True for a Google Cloud Storage path (gs://bucket/...), false for anything else, local paths included."""
    return str(path).startswith("gs://")


def load_text_splits(*, data_files=None, dataset_name=None, dataset_config=None, splits=None,
                     trust_remote_code=False):
    """Opens each split of a corpus as a streamed 🤗 `IterableDataset`, keyed by split name.

    Either `data_files` ({split: [paths]}, local text, JSON-lines or Parquet files) or `dataset_name` (a Hub
    dataset, with `splits` a list of split names, or None for every split it has). Streaming reads the data as it
    is consumed: memory stays flat whatever the corpus size, and local files are not copied into a cache first.
    Bad input raises SystemExit with a message that says what to do.
    """
    import datasets  # Imported here: run_mlm.py never needs it.

    if data_files:
        return datasets.load_dataset(data_files_format(data_files), data_files=data_files, streaming=True)

    _check_hub_reachable(dataset_name)
    try:
        corpus = datasets.load_dataset(dataset_name, dataset_config, streaming=True,
                                       trust_remote_code=trust_remote_code)
    except (ConnectionError, FileNotFoundError, ValueError) as err:
        raise SystemExit(
            f"error: could not load the dataset {dataset_name!r} (config {dataset_config!r}) from the Hub: {err}\n"
            "Check the name and config, or pass local files instead (--train_file ...).") from err
    if splits:
        missing = [split for split in splits if split not in corpus]
        if missing:
            raise SystemExit(f"error: the dataset {dataset_name!r} has no split {missing}; "
                             f"it has {sorted(corpus)}.")
        corpus = {split: corpus[split] for split in splits}
    return dict(corpus)


def data_files_format(data_files):
    """The 🤗 Datasets builder ("text", "json" or "parquet") that reads every file of `data_files` ({split: [paths]}).

    Raises SystemExit, with a message that says what to do, for a missing file, an unknown extension or a mix of
    formats.
    """
    builders = set()
    for split, paths in data_files.items():
        for path in paths:
            extension = os.path.splitext(path)[1].lower()
            if extension not in FILE_BUILDERS:
                raise SystemExit(
                    f"error: cannot read {path!r}: unknown extension {extension!r}. "
                    f"Use text ({', '.join(e for e, b in FILE_BUILDERS.items() if b == 'text')}), "
                    f"JSON lines (.json, .jsonl) or Parquet (.parquet) files.")
            if not is_gcs_path(path) and not os.path.isfile(path):
                raise SystemExit(f"error: the {split} file {path!r} does not exist.")
            builders.add(FILE_BUILDERS[extension])
    if len(builders) > 1:
        raise SystemExit(f"error: all input files must have one format, got a mix of {sorted(builders)}.")
    return builders.pop()


def _check_hub_reachable(dataset_name):
    """Fails at once when the Hub cannot be reached, instead of after a minute of retries in 🤗 Datasets."""
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:  # Offline mode: 🤗 Datasets reads its local cache, if it has the dataset.
        return
    try:
        HfApi().dataset_info(dataset_name, timeout=10)
    except OSError as err:  # requests' connection and HTTP errors are OSErrors.
        raise SystemExit(
            f"error: cannot reach the dataset {dataset_name!r} on the Hugging Face Hub ({type(err).__name__}).\n"
            "Without network access, train on local files instead: --train_file (and for the shards "
            "--validation_file); with the Makefile, `make demo DATA=folder/with/train.txt/and/validation.txt`."
        ) from err


def iter_text_batches(dataset, text_column, batch_size, limit=None):
    """Yields lists of up to `batch_size` texts from `dataset`, leaving out empty and whitespace-only texts.

    `limit` caps the number of records read (before empty ones are left out), for quick runs on a slice.
    """
    if text_column not in (dataset.column_names or [text_column]):
        raise SystemExit(f"error: the data has no column {text_column!r}; its columns are "
                         f"{dataset.column_names}. Choose one with --text_column.")
    if limit is not None:
        dataset = dataset.take(limit)
    for batch in dataset.iter(batch_size=batch_size):
        texts = [text for text in batch[text_column] if text and not text.isspace()]
        if texts:
            yield texts


def check_output_dir(path, overwrite):
    """Refuses to write into a folder that already holds files, unless the user said `overwrite`.

    Returns True when the folder exists and is not empty (and overwrite was given), so that the caller can clear
    what it is about to replace.
    """
    if is_gcs_path(path):
        import tensorflow as tf  # TensorFlow's file system layer lists gs:// folders.
        exists, listdir = tf.io.gfile.exists, tf.io.gfile.listdir
    else:
        exists, listdir = os.path.exists, os.listdir
    if not exists(path) or not listdir(path):
        return False
    if not overwrite:
        raise SystemExit(f"error: the output folder {path!r} is not empty. Choose another --output_dir, "
                         "or pass --overwrite to replace what this run writes there.")
    return True


def push_folder_to_hub(folder, repo_id, commit_message, ignore_patterns=None):
    """Uploads a saved folder (but files matching `ignore_patterns`) to the Hub repository `repo_id`, created if needed.

    The folder is saved locally before this is called, so a failed push loses nothing: the error says how to
    retry the upload by hand.
    """
    from huggingface_hub import create_repo, upload_folder

    try:
        create_repo(repo_id, exist_ok=True)
        url = upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message,
                            ignore_patterns=ignore_patterns)
    except (OSError, ValueError) as err:  # Network, authentication and bad-name errors.
        raise SystemExit(
            f"error: pushing to the Hub repository {repo_id!r} failed: {err}\n"
            f"Nothing is lost: everything is saved in {folder!r}. Log in with `huggingface-cli login` "
            f"(or set HF_TOKEN), then upload it with `huggingface-cli upload {repo_id} {folder}`.") from err
    return url
