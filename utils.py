"""What every script uses, and nothing else:

- UserError, the one error type for bad input, and the argparse types of the flags;
- local and gs:// files: one small layer over the google-cloud-storage client, for what TensorFlow does not read or
  write itself (text, tokenizer, config and model folders, shards written without TensorFlow);
- a full disk or bucket, named with what was being written and what to do;
- the output-folder policy, and saving a folder locally, to gs:// and to the Hub, never half.

Each module beside it holds one contract between the scripts (README, "Layout"); what runs only once something has
gone wrong is in diagnostics.py. TensorFlow, 🤗 Datasets and 🤗 Transformers are not imported here.
"""

import argparse
import atexit
import contextlib
import errno
import fnmatch
import functools
import glob
import io
import logging
import os
import posixpath
import re
import shutil
import tempfile
import uuid

logger = logging.getLogger("utils")

# 🤗 Transformers' TF models are Keras 2 models (the tf-keras package). Importing TensorFlow also imports Keras 3 for
# `tf.keras`, which nothing here uses, and that costs every script 2 s of its start; with this variable, `tf.keras`
# is tf_keras and Keras 3 is never imported. Set here because every script imports this module before TensorFlow;
# a value of the user's own is kept.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


class UserError(Exception):
    """Something the user must change (a flag, a file, a folder), in a message that says what and how. Shared code
    and the scripts' functions raise it; each script's entry point prints it as "error: MESSAGE" and exits with
    status 1. A program that calls these functions can catch it like any other exception."""


# ----------------------------------------------------------------------------------------------------------------
# Flags


def positive_int(text):
    """An argparse type: an integer above 0 ("argument --limit: must be a positive number, got 0")."""
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {int(text)}")
    return int(text)


# The largest float32: the models train in float32 (bfloat16's range is the same), where a larger number is infinity.
FLOAT32_MAX = 3.4028234663852886e38


def finite_float(text):
    """An argparse type: a number, but neither NaN nor infinity nor one that is infinity in float32, which no run can
    use: a weight or rate of inf makes the loss NaN at the first step ("argument --pair_loss_weight: must be a finite
    number of float32's range, up to 3.4e38 in size, got inf"). Every float flag's type is this one or builds on it."""
    value = float(text)
    if not abs(value) <= FLOAT32_MAX:  # NaN too.
        raise argparse.ArgumentTypeError(f"must be a finite number of float32's range, up to 3.4e38 in size, "
                                         f"got {text}")
    return value


def fraction(text):
    """An argparse type: a number in [0, 1)."""
    value = finite_float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def probability(text):
    """An argparse type: a number in (0, 1), 0 and 1 excluded (a masking rate, a validation share)."""
    value = finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), 0 and 1 excluded, got {text}")
    return value


def share(text):
    """An argparse type: a number in (0, 1], 0 excluded (the share of chosen tokens that become <mask>)."""
    value = finite_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], 0 excluded, got {text}")
    return value


def positive_float(text):
    """An argparse type: a number above 0 (a learning rate)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative_float(text):
    """An argparse type: a number of 0 or more (a weight decay rate)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def non_negative_int(text):
    """An argparse type: an integer of 0 or more (warmup steps)."""
    if int(text) < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {int(text)}")
    return int(text)


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


GLOB_WILDCARD = re.compile(r"[*?[]")  # What makes a path a glob, for Cloud Storage and the local disk alike.


def gcs_glob_prefix(pattern):
    """("bucket", prefix) of a gs:// path or glob, the prefix being its name up to the first wildcard
    (gs://bucket/train/*.txt: "train/"): a bucket lists objects by prefix only, so a glob is listed so, then matched."""
    bucket, name = split_gcs_path(pattern)
    return bucket, GLOB_WILDCARD.split(name, maxsplit=1)[0]


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
    bucket, prefix = gcs_glob_prefix(path)
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
    if mode == "rb":
        # The bytes as stored, as a downloaded copy holds them. Of an object stored with Content-Encoding: gzip
        # (`gcloud storage cp -Z`), google-cloud-storage would give them decompressed, so twice for a name that says
        # .gz (corpus.py decompresses those), and Cloud Storage ignores the ranges its reader reads in when it
        # decompresses. That reader has no readline of its own: IOBase's would call it for every byte.
        return io.BufferedReader(gcs_blob(path).open(mode, raw_download=True))
    return gcs_blob(path).open(mode, **encoding)


def exists(path):
    return gcs_blob(path).exists() if is_gcs_path(path) else os.path.exists(path)


def match_files(patterns, what="file"):
    """[(path, size)] of the files that the `patterns` (local or gs://, each a path or a glob) match, in order, each
    once. A glob comes in quotes, so that the script expands it, not the shell: on gs:// too, and past the shell's
    limit on the length of a command. `what` names the files in the error for a pattern that matches nothing ("train
    file"). gs:// through this module's client, by listing the glob's prefix: one request for thousands of files."""
    files = {}
    for pattern in patterns:
        if is_gcs_path(pattern):
            bucket, prefix = gcs_glob_prefix(pattern)
            blobs = gcs_client().list_blobs(bucket, prefix=prefix)
            matches = {f"gs://{bucket}/{blob.name}": blob.size for blob in blobs
                       if fnmatch.fnmatchcase(f"gs://{bucket}/{blob.name}", pattern) and not blob.name.endswith("/")}
        else:
            matches = {path: os.path.getsize(path) for path in glob.glob(pattern) if os.path.isfile(path)}
        if not matches:
            if GLOB_WILDCARD.search(pattern):
                raise UserError(f"no {what} matches {pattern!r}. Check the pattern, in quotes.")
            raise UserError(f"the {what} {pattern!r} does not exist.")
        files.update(sorted(matches.items()))
    return list(files.items())


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
# A full disk or bucket


# A full disk or bucket, as each layer says it: the OS (ENOSPC, EDQUOT; h5py gives only the text), TensorFlow (a
# ResourceExhaustedError, which also means "out of device memory": hence the text), Cloud Storage (a quota).
OUT_OF_SPACE = {"the disk is full (No space left on device)": r"no space left on device",
                "the disk quota is exceeded (Disk quota exceeded)": r"disk quota exceeded",
                "the storage quota is exceeded": r"quota ?exceeded|exceeded .{0,60}quota|insufficient storage"}


def out_of_space_reason(error):
    """What says that `error` is a full disk or bucket, or None when it is another error."""
    if isinstance(error, UserError):  # Already explained.
        return None
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return list(OUT_OF_SPACE)[error.errno == errno.EDQUOT]
    return next((reason for reason, pattern in OUT_OF_SPACE.items()
                 if re.search(pattern, str(error), re.IGNORECASE)), None)


@contextlib.contextmanager
def out_of_space_named(folder, what, then):
    """Turns an error saying that the disk or the bucket is full into a UserError naming `folder`, `what` was being
    written there, and `then` (a text, or a function giving it then): what is left and what to do. Other errors
    pass unchanged."""
    try:
        yield
    except Exception as error:
        reason = out_of_space_reason(error)
        if reason is None:
            raise
        raise UserError(f"no space left to write {what} in {folder!r}: {reason}. "
                        f"{then() if callable(then) else then}") from error


# ----------------------------------------------------------------------------------------------------------------
# Output folders, and saving into them


def check_output_dir(path, overwrite, resumable=(), stale=()):
    """The output-folder policy of every script. --output_dir may not be a file; a folder that holds anything
    but `resumable` (what the script resumes from) is refused without --overwrite; with it, `stale` (what an
    earlier run left that would mix with this one's: TensorBoard events, checkpoints) is deleted first."""
    refuse_a_file_as_output_dir(path)
    foreign = [name for name in folder_entries(path) if name not in resumable]
    if foreign and not overwrite:
        raise UserError(f"the output folder {path!r} "
                        + ("holds files that are not a checkpoint of this script to resume from" if resumable
                            else "is not empty")
                        + ". Choose another --output_dir, or pass --overwrite to replace what this script writes "
                           "there.")
    for name in stale if overwrite else ():
        delete(os.path.join(path, name))


def refuse_an_output_that_is_read(output, inputs, flag="--output_dir"):
    """Stops when `output` is, holds or lies inside one of `inputs` (the files, folders and globs that the run
    reads; None for a flag not given): writing there, or clearing it with --overwrite, would replace or mix with
    the run's own input, such as a pre-trained model (hours of TPU) replaced by its classifier. Every script calls
    it before anything else. A run_mlm.py run that resumes reads its own checkpoints in --output_dir, which are not
    among its inputs."""
    written = comparable_path(output)
    for path in filter(None, inputs):
        stands = how_output_stands(written, str(path))
        if stands:
            raise UserError(f"{flag} {str(output)!r} {stands}, which this run reads: its output would replace or mix "
                            f"with its own input. Choose another {flag}: no flag writes over what a run reads.")


def how_output_stands(written, path):
    """How the output `written` (comparable_path) stands to the input `path`, as refuse_an_output_that_is_read says
    it ("is 'a/b'", "holds 'a/b'", "lies inside 'a/b'"); None where it neither is, holds nor lies inside it. A glob
    reads the files it matches, in its folder: an output that is or holds that folder holds them, those matched
    later too; one inside it only where it is or lies inside a match (local ones: a bucket is not listed here)."""
    fixed = GLOB_WILDCARD.split(path, maxsplit=1)[0]
    if fixed != path:
        folder = comparable_path(os.path.dirname(fixed) or ".")
        if folder.startswith(written):
            return f"holds {path!r}"
        if written.startswith(folder) and not is_gcs_path(path):
            for match in glob.glob(path):
                stands = how_output_stands(written, match)
                if stands:
                    return f"{stands} (matched by {path!r})"
        return None
    read = comparable_path(path, input_only=True)
    if read is None:
        return None
    if read == written:
        return f"is {path!r}"
    if read.startswith(written):
        return f"holds {path!r}"
    if written.startswith(read):
        return f"lies inside {path!r}"
    return None


def comparable_path(path, input_only=False):
    """`path` as refuse_an_output_that_is_read compares paths, ending in "/" so that a/b is not inside a/bc: a gs://
    one as written, a local one absolute with its symbolic links resolved. With `input_only`, None for a local path
    that does not exist: a Hub id (or a file that the script will say is missing), not a folder of this machine."""
    if is_gcs_path(path):
        return str(path).rstrip("/") + "/"
    if input_only and not os.path.exists(path):
        return None
    return os.path.join(os.path.realpath(path), "")


def refuse_a_file_as_output_dir(path):
    if os.path.isfile(path) or (is_gcs_path(path) and split_gcs_path(path)[1].strip("/")
                                and gcs_blob(path.rstrip("/")).exists()):
        raise UserError(f"--output_dir {path!r} is a file, not a folder. Choose another --output_dir "
                        "(a folder, which is created if it does not exist).")


FULL_DISK_ADVICE = ("What was written of it is deleted: nothing half-saved looks complete. Free space, then run the "
                    "same command again.")


@contextlib.contextmanager
def nothing_half_saved(output_dir, description):
    """Deletes what save_folder had written into `output_dir` when a full disk stopped it: a folder with half a
    model (a config, no weights) would look like a model, and a run could not resume beside it. What was there
    before stays."""
    before = set(folder_entries(output_dir))
    try:
        yield
    except UserError:
        for name in set(folder_entries(output_dir)) - before:
            delete(posixpath.join(output_dir, name) if is_gcs_path(output_dir) else os.path.join(output_dir, name))
        raise


def save_folder(output_dir, write, description, hub_model_id=None, commit_message=None, ignore_patterns=None):
    """Has `write(folder)` write files into a local folder, then puts them in `output_dir` and, with
    `hub_model_id`, on the Hub (less `ignore_patterns`). save_pretrained and the Hub client write and read local
    folders only: for a gs:// `output_dir`, `folder` is a temporary one."""
    local_dir = tempfile.mkdtemp() if is_gcs_path(output_dir) else output_dir
    if local_dir != output_dir:
        atexit.register(shutil.rmtree, local_dir, ignore_errors=True)  # Also when the upload fails.
    with nothing_half_saved(output_dir, description):
        with out_of_space_named(output_dir if local_dir == output_dir else f"{local_dir} (a local copy for "
                                f"{output_dir})", description[0].lower() + description[1:], then=FULL_DISK_ADVICE):
            write(local_dir)
        if local_dir != output_dir:
            with out_of_space_named(output_dir, description[0].lower() + description[1:], then=FULL_DISK_ADVICE):
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


if __name__ == "__main__":  # `python utils.py check-tpu`, the command of earlier versions: devices.py answers it now.
    import runpy

    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "devices.py"), run_name="__main__")
