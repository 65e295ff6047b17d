"""What the scripts look at only when something has gone wrong, and `python devices.py check-tpu`.

Where a text file stops being UTF-8; whether the Hub can be reached; what to do when Cloud Storage refuses a path;
what is wrong with an unreadable manifest; which shards are damaged; why TensorFlow cannot use the TPU chips that
devices.local_tpu_chips found. Imported where needed: a successful run uses only the Hub check, on a Hub dataset.
"""

import argparse
import collections
import contextlib
import dataclasses
import glob
import json
import mmap
import os
import re
import sys

def hub_unreachable_error(dataset_name, err):
    """The message for a Hub that corpus.check_hub_reachable could not reach."""
    return (
        f"cannot reach the dataset {dataset_name!r} on the Hugging Face Hub ({type(err).__name__}).\n"
        "Without network access, train on local files instead: --train_file (and for the shards --validation_file); "
        "with the Makefile, `make demo DATA=folder/with/train.txt/and/validation.txt`.")


def not_utf8_error(path, file, converted, tool=None):
    """The message for the text file `path`, open in binary `file` at its start, that is not valid UTF-8: where its
    first invalid byte is (which the text reader's error does not say), and how to convert it into the file
    `converted`; `tool`: the command that decompresses it, for a compressed file (`file` is then its text). Each line
    decodes on its own: no UTF-8 character holds the byte of "\\n"."""
    offset = 0
    with file as f:
        for line_number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                position = f"line {line_number}, byte offset {offset + err.start} (byte 0x{line[err.start]:02x})"
                break
            offset += len(line)
        else:
            position = "an unknown position"
    convert = (f"{tool} -dc {path} | iconv -f latin1 -t utf-8 | {tool} > {converted}" if tool
               else f"iconv -f latin1 -t utf-8 {path} > {converted}")
    return (f"the text file {path!r} is not UTF-8: the first invalid byte is at {position}. The scripts "
            f"read UTF-8 text only. Convert the file first, e.g. from Latin-1: `{convert}`, then pass the converted "
            "file.")


CREDENTIALS_ADVICE = (
    "On a TPU VM, the VM's service account is used: create the VM with one that may use the bucket. Elsewhere, "
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service account's "
    "key file.")


def explain_gcs_error(path, bucket, err, *, write=False):
    """The message that says what to do about `err`, raised by utils.check_gcs_path while reaching the gs://
    `path` in `bucket` (no credentials, no such bucket, no permission, no connection); None for another error."""
    from google.api_core import exceptions
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    if isinstance(err, DefaultCredentialsError):
        return f"no Google Cloud credentials found to access {path!r}.\n{CREDENTIALS_ADVICE}"
    if isinstance(err, exceptions.NotFound):
        return (
            f"the bucket of {path!r} does not exist. Create it in the region of your TPU, e.g. "
            f"`gcloud storage buckets create gs://{bucket} --location=us-central1`, or correct the path.")
    if isinstance(err, exceptions.Forbidden):
        return (
            f"no permission to {'write to' if write else 'read'} {path!r}: {err.message}\nGive the account "
            "these scripts run as (on a TPU VM, the VM's service account; on a TPU Node, the Cloud TPU service "
            "account too) a role on the bucket that allows it, "
            f"e.g. `gcloud storage buckets add-iam-policy-binding gs://{bucket} --member=serviceAccount:ACCOUNT "
            "--role=roles/storage.objectAdmin`.")
    if isinstance(err, (exceptions.Unauthorized, GoogleAuthError)):
        return (f"Cloud Storage refused the credentials used for {path!r}: {err}\n"
                f"{CREDENTIALS_ADVICE}")
    if isinstance(err, (exceptions.GoogleAPIError, OSError)):  # OSError: requests' connection errors.
        return f"cannot reach Cloud Storage for {path!r}: {err}"
    return None


def manifest_error(manifest_class, data, path):
    """The message saying what is wrong with the manifest in `data` (the bytes of the file at `path`), which
    shards.Manifest.from_json could not read: not JSON, not an object, fields missing or of the wrong kind."""
    advice = "Write the shards again with prepare_tfrecord_shards.py (with --overwrite)."
    try:
        fields = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return f"{path!r} is not valid JSON ({err}): it is damaged. {advice}"
    if not isinstance(fields, dict):
        return (f"{path!r} is not a manifest of prepare_tfrecord_shards.py (a JSON object is "
                f"expected). {advice}")
    missing = [field.name for field in dataclasses.fields(manifest_class) if field.name not in fields]
    if not missing and isinstance(fields["shards"], list):
        missing = sorted({f"shards[].{name}" for shard in fields["shards"]
                          for name in ("file", "num_samples", "num_bytes")
                          if not isinstance(shard, dict) or name not in shard})
    if missing:
        return f"{path!r} lacks the field(s) {', '.join(missing)}. {advice}"
    return (f"{path!r} is not a manifest of prepare_tfrecord_shards.py: its \"shards\" is not a "
            f"list of shards. {advice}")


def explain_damaged_shards(files):
    """The message naming the shards among `files` that TensorFlow cannot read to the end, with where and why
    ("corrupted record at BYTE": a bad checksum; "truncated record at BYTE": a cut-off file), once its DataLossError
    named none; None when all of them read to the end."""
    import tensorflow as tf

    damaged = []
    for file in files:
        try:
            tf.data.TFRecordDataset(file).reduce(0, lambda count, _: count + 1)  # Reads every record, in C++.
        except tf.errors.DataLossError as err:
            reason = re.search(r"(corrupted|truncated) record at \d+", err.message)
            damaged.append(f"{file} ({reason.group(0) if reason else 'unreadable'})")
    if not damaged:
        return None
    return (
        f"{len(damaged)} shard(s) cannot be read, they are damaged or truncated: {', '.join(damaged)}. "
        "Copy the shards again, or write them again with prepare_tfrecord_shards.py (with --overwrite).")


# A TPU chip's device file: /dev/accel0, 1, ... for v2 to v4; /dev/vfio/0, 1, ... for v5e and later.
TPU_DEVICE_FILE = re.compile(r"/dev/(accel|vfio/)\d+$")
INSTALL_TPU_ADVICE = ("Install TensorFlow's TPU build as the README's \"On a TPU VM, from nothing\" says "
                      "(`make install-tpu`), then check it with `python devices.py check-tpu`.")


def damaged_checkpoint_message(damaged, error, intact):
    """The message for the checkpoint `damaged`, which run_folder.check_checkpoint could not read (`error`); `intact`:
    the last intact checkpoint before it, or None."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    remove = f"gcloud storage rm '{damaged}.*'" if damaged.startswith("gs://") else f"rm {damaged}.*"
    return (f"the checkpoint {damaged} is damaged: {reason} ({type(error).__name__}). Its files were cut short or "
            "changed (a full disk, an interrupted copy). "
            + (f"The checkpoint before it, {intact}, is intact: to resume or export from it, delete the damaged "
               f"checkpoint's files (`{remove}`), then run the same command again. Its steps after "
               f"{intact.rsplit('-', 1)[-1]} are lost; nothing goes back to an earlier step unless you ask."
               if intact else "No earlier checkpoint is intact: start the run over (run_mlm.py --overwrite), or "
               "export a model folder saved before."))


def describe_chips(chips):
    return ", ".join(f"{count} x TPU {generation}" for generation, count in chips.items())


def tpu_holders(root="/"):
    """{pid: command line} of the processes, this one left out, that hold a TPU device file open, read from /proc
    (psutil's open_files lists regular files only)."""
    holders = {}
    for fd in glob.glob(os.path.join(root, "proc/[0-9]*/fd/*")):
        pid = int(fd.split(os.sep)[-3])
        with contextlib.suppress(OSError):  # The process ended, or is not ours to look at.
            if pid != os.getpid() and TPU_DEVICE_FILE.search(os.readlink(fd)):
                holders[pid] = "?"  # Unless its command line can be read.
                with open(os.path.join(root, f"proc/{pid}/cmdline"), "rb") as f:
                    holders[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    return holders


# TensorFlow's TPU builds find the TPU runtime, libtpu.so, through this environment variable (or in the libtpu
# package); the code that reads it is compiled into TPU builds only, and the CPU/GPU builds hold no such string.
TPU_RUNTIME_LOADER = b"TPU_LIBRARY_PATH"

TensorFlowBuild = collections.namedtuple("TensorFlowBuild", "distribution version tpu_support installed")


def tensorflow_build(path=None):
    """The installed TensorFlow as a TensorFlowBuild, None when there is none; `path`: a fake site-packages folder.

    - `distribution`, `version`: of the distribution that owns the `tensorflow` package folder. The CPU/GPU and TPU
      builds write the same folder, and pip lets both be installed (tf-keras depends on `tensorflow`): the one
      installed last owns the files, and its shared libraries have, on disk, the sizes its RECORD gives.
    - `tpu_support`: whether its libraries can load the TPU runtime (`tensorflow-tpu`, and the `tensorflow` of
      Google's tpu-vm-tf-* images; not PyPI's `tensorflow`).
    - `installed`: every distribution that pip lists as providing the `tensorflow` package.
    """
    from importlib import metadata

    installed, owner = [], None
    for dist in metadata.distributions(**({"path": path} if path else {})):
        files = dist.files or []
        if not any(str(file) == "tensorflow/__init__.py" for file in files):
            continue
        installed.append(dist.metadata["Name"])
        libraries = [file for file in files if file.parts[0] == "tensorflow" and ".so" in file.name and file.size]
        if libraries and all(os.path.isfile(dist.locate_file(file))
                             and os.path.getsize(dist.locate_file(file)) == file.size for file in libraries):
            owner = dist
    if owner is None:
        return None
    libraries = glob.glob(os.path.join(owner.locate_file("tensorflow"), "**", "*.so*"), recursive=True)
    tpu_support = any(file_contains(library, TPU_RUNTIME_LOADER) for library in libraries)
    return TensorFlowBuild(owner.metadata["Name"], owner.version, tpu_support, sorted(installed))


def file_contains(path, data):
    """Whether the file `path` holds the bytes `data`, searched in place through mmap: TensorFlow's libraries are
    large."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as contents:
            return contents.find(data) >= 0


def build_problem(build):
    """Why a TensorFlow `build` (see tensorflow_build) cannot drive a TPU, and what to do; None when it can."""
    if build is None:
        return f"no installed TensorFlow owns the files of the `tensorflow` package folder. {INSTALL_TPU_ADVICE}"
    if build.tpu_support:
        return None
    shadowed = [name for name in build.installed if name != build.distribution]
    return (f"the installed TensorFlow, {build.distribution} {build.version}, is built for CPUs and GPUs only: it "
            "cannot load the TPU runtime. "
            + (f"pip also lists {', '.join(shadowed)}, but its files were replaced by {build.distribution}'s, "
               "installed after it (tf-keras, for one, depends on the plain `tensorflow`). " if shadowed else "")
            + INSTALL_TPU_ADVICE)


def explain_unusable_tpu(chips, error, build, holders):
    """Why TensorFlow could not use this machine's TPU `chips`, and what to do, as an error message: from the
    `build` (see tensorflow_build) and the processes that hold the TPU (see tpu_holders)."""
    cause = build_problem(build)
    if cause is None and holders:
        processes = "; ".join(f"PID {pid}: {command}" for pid, command in holders.items())
        cause = (f"another process holds the TPU ({processes}). A TPU serves one process at a time: stop it "
                 "(`kill PID`), or wait for it to end. `sudo lsof -w /dev/accel* /dev/vfio/*` lists them too.")
    elif cause is None:
        cause = (f"TensorFlow failed to start it: {type(error).__name__}: {error}\n"
                 "Check the installation with `python devices.py check-tpu`.")
    return (f"this machine has TPU chips ({describe_chips(chips)}), but TensorFlow cannot use them: {cause}\n"
            "To train on this machine's CPU instead (much slower), pass --no_tpu.")


def explain_tpu_error(tpu_name, chips, error, root="/"):
    """The message for a TPU that TensorFlow could not start: `tpu_name` ("local" on a TPU VM), this machine's
    `chips` (devices.local_tpu_chips) and the `error` raised."""
    if tpu_name == "local" and chips:
        return explain_unusable_tpu(chips, error, tensorflow_build(), tpu_holders(root))
    return (f"cannot use the TPU {tpu_name!r}: {type(error).__name__}: {error}\n"
            + ("This machine has no TPU chips: --tpu_name local works on a TPU VM only. " if tpu_name == "local" else
               "Check the name, --tpu_zone and --gcp_project, and that the TPU is READY "
               "(`gcloud compute tpus tpu-vm list`). ")
            + "To train on GPUs or the CPU instead, leave out --tpu_name or pass --no_tpu.")


def check_tpu_setup(chips, root="/"):
    """What `python devices.py check-tpu` prints on a TPU VM: the TensorFlow build and libtpu installed, this machine's
    TPU `chips` (devices.local_tpu_chips), and whether TensorFlow starts them. Returns the exit status: 0 when all is
    well."""
    from importlib import metadata

    build = tensorflow_build()
    try:
        libtpu = f"libtpu {metadata.version('libtpu')}"
    except metadata.PackageNotFoundError:  # Google's tpu-vm-tf-* images ship it as a plain file.
        libtpu = os.environ.get("TPU_LIBRARY_PATH") or next(iter(glob.glob("/lib/libtpu.so")), None)
    problems = []
    if (problem := build_problem(build)) is not None:
        problems.append(problem)
    elif libtpu is None:
        problems.append(f"{build.distribution} {build.version} finds no TPU runtime: libtpu is not installed. "
                        + INSTALL_TPU_ADVICE)
    if not chips:
        problems.append("this machine has no TPU chips (no PCI device of vendor 0x1ae0): run this on the TPU VM.")
    if problems:
        print("\n".join(f"error: {problem}" for problem in problems))
        return 1
    import tensorflow as tf

    try:  # Starting the TPU is the one proof that the runtime and the chips work together.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver("local")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as err:  # Each TPU set-up failure has its own type.
        print(f"error: {explain_unusable_tpu(chips, err, build, tpu_holders(root))}")
        return 1
    print(f"TPU build of TensorFlow {build.version} ({build.distribution}), {libtpu}: {describe_chips(chips)}, "
          f"{len(tf.config.list_logical_devices('TPU'))} TPU devices started.")
    return 0


def main(chips):
    """`python devices.py check-tpu`; `chips`: this machine's TPU chips (devices.local_tpu_chips)."""
    parser = argparse.ArgumentParser(description="Checks of the set-up. `check-tpu`: on a TPU VM, whether the "
                                                 "TensorFlow installed drives its TPU.")
    parser.add_argument("check", choices=["check-tpu"])
    parser.parse_args()
    sys.exit(check_tpu_setup(chips))
