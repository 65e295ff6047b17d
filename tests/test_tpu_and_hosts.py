"""TPU machines without a TPU: chips found in a fake sysfs, the installed TensorFlow build told apart, the refusal to
fall back to the CPU of a machine that has TPU chips, and the rules for the hosts of a pod slice."""

import argparse
import os
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest
import tensorflow as tf

from devices import check_paths_for_pod, choose_strategy, local_tpu_chips, use_jit_compile
from diagnostics import TensorFlowBuild, explain_unusable_tpu, tensorflow_build, tpu_holders
from helpers import MAX_LENGTH, REPO
from masked_lm import make_dataset
from shards import find_shards
from utils import UserError

MASKING = dict(mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4], vocab_size=1000, mlm_probability=0.15)


def fake_pci_device(root, address, vendor, device, subsystem="0x0000"):
    folder = root / "sys" / "bus" / "pci" / "devices" / address
    folder.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("subsystem_device", subsystem)):
        (folder / name).write_text(value + "\n")


def fake_v4_host(root):
    """The PCI devices of a TPU v4 host: four TPU chips, a Google network card, and an Intel device."""
    for index in range(4):
        fake_pci_device(root, f"0000:00:0{index + 4}.0", "0x1ae0", "0x005e")
    fake_pci_device(root, "0000:00:03.0", "0x1ae0", "0x0042")  # Google's, but not a TPU.
    fake_pci_device(root, "0000:00:01.0", "0x8086", "0x7110")
    return root


def hardware_args(**flags):
    return argparse.Namespace(**{"tpu_name": None, "tpu_zone": None, "gcp_project": None, "no_tpu": False,
                                 "num_cpu_replicas": 1, **flags})


@pytest.mark.fast
def test_tpu_chips_are_found_in_sysfs(tmp_path):
    assert local_tpu_chips(fake_v4_host(tmp_path / "v4")) == {"v4": 4}
    v2_and_v3 = tmp_path / "v3"
    fake_pci_device(v2_and_v3, "0000:00:04.0", "0x1ae0", "0x0027", "0x004f")  # v2 and v3 share a device id.
    assert local_tpu_chips(v2_and_v3) == {"v3": 1}
    v5e = tmp_path / "v5e"
    for index in range(8):
        fake_pci_device(v5e, f"0000:00:{index + 4:02x}.0", "0x1ae0", "0x0063")
    assert local_tpu_chips(v5e) == {"v5e": 8}
    # Device files alone count too, as chips of unknown generation; a machine with neither has none.
    (tmp_path / "accel" / "dev").mkdir(parents=True)
    (tmp_path / "accel" / "dev" / "accel0").write_text("")
    assert local_tpu_chips(tmp_path / "accel") == {"unknown generation": 1}
    assert local_tpu_chips(tmp_path / "nothing") == {}
    assert local_tpu_chips() == {}  # This machine.


@pytest.mark.fast
def test_a_machine_with_tpu_chips_never_trains_on_its_cpu_by_default(tmp_path):
    # TensorFlow here is the plain build: it cannot use the (fake) chips, and the script must say so, and why.
    root = fake_v4_host(tmp_path)
    with pytest.raises(UserError) as stopped:
        choose_strategy(hardware_args(), root=root)
    message = str(stopped.value)
    assert message.startswith("this machine has TPU chips (4 x TPU v4), but TensorFlow cannot use them")
    assert f"the installed TensorFlow, tensorflow {metadata.version('tensorflow')}, is built for CPUs and GPUs " \
           "only: it cannot load the TPU runtime" in message
    assert "make install-tpu" in message and "--no_tpu" in message
    # --no_tpu is the user's explicit choice of the CPU: one device, so no MirroredStrategy, and no XLA by default.
    strategy, on_tpu = choose_strategy(hardware_args(no_tpu=True), root=root)
    assert strategy is tf.distribute.get_strategy() and not on_tpu  # TensorFlow's default strategy.
    assert use_jit_compile(hardware_args(jit_compile=None), on_tpu) is False
    assert use_jit_compile(hardware_args(jit_compile=True), on_tpu) is True  # Rehearsing a TPU's XLA on the CPU.
    assert use_jit_compile(hardware_args(jit_compile=True), on_tpu=True) is False  # All of it is XLA there.
    # Without chips, GPUs or the CPU, as before; a TPU named on such a machine must be found.
    assert not choose_strategy(hardware_args(), root=tmp_path / "nothing")[1]
    with pytest.raises(UserError, match="This machine has no TPU chips: --tpu_name local works on a TPU VM only"):
        choose_strategy(hardware_args(tpu_name="local"), root=tmp_path / "nothing")


@pytest.mark.fast
def test_why_the_tpu_cannot_be_used(tmp_path):
    chips, error = {"v5e": 8}, RuntimeError("TPU initialization failed")
    plain = explain_unusable_tpu(chips, error, TensorFlowBuild("tensorflow", "2.18.0", False, ["tensorflow"]), {})
    assert "the installed TensorFlow, tensorflow 2.18.0, is built for CPUs and GPUs only" in plain
    assert "make install-tpu" in plain and "pip also lists" not in plain
    replaced = explain_unusable_tpu(chips, error, TensorFlowBuild("tensorflow", "2.18.0", False,
                                                                  ["tensorflow", "tensorflow-tpu"]), {})
    assert "pip also lists tensorflow-tpu, but its files were replaced by tensorflow's, installed after it" in replaced
    tpu_build = TensorFlowBuild("tensorflow-tpu", "2.18.0", True, ["tensorflow-tpu"])
    held = explain_unusable_tpu(chips, error, tpu_build, {4242: "python3 train.py"})
    assert "another process holds the TPU (PID 4242: python3 train.py)" in held and "kill PID" in held
    other = explain_unusable_tpu(chips, error, tpu_build, {})
    assert "RuntimeError: TPU initialization failed" in other and "python devices.py check-tpu" in other
    assert all(text.startswith("this machine has TPU chips (8 x TPU v5e)") and "--no_tpu" in text
               for text in (plain, replaced, held, other))

    # The processes holding a TPU device file open, from /proc.
    for pid, target, command in ((4242, "/dev/accel0", b"python3\0train.py\0"), (4343, "/dev/null", b"bash\0"),
                                 (4444, "/dev/vfio/3", b"python3\0-c\0import jax\0")):
        (tmp_path / "proc" / str(pid) / "fd").mkdir(parents=True)
        os.symlink(target, tmp_path / "proc" / str(pid) / "fd" / "7")
        (tmp_path / "proc" / str(pid) / "cmdline").write_bytes(command)
    assert tpu_holders(tmp_path) == {4242: "python3 train.py", 4444: "python3 -c import jax"}


def fake_site_packages(root, files_on_disk, recorded_sizes):
    """A site-packages folder holding tensorflow/ ({file name: bytes}), which two distributions say they wrote, with
    the sizes `recorded_sizes` ({distribution: {file name: size}})."""
    (root / "tensorflow").mkdir(parents=True)
    (root / "tensorflow" / "__init__.py").write_text("")
    for name, data in files_on_disk.items():
        (root / "tensorflow" / name).write_bytes(data)
    for distribution, sizes in recorded_sizes.items():
        info = root / f"{distribution.replace('-', '_')}-2.18.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 2.18.0\n")
        (info / "RECORD").write_text("tensorflow/__init__.py,,0\n" + "".join(
            f"tensorflow/{name},sha256=unchecked,{size}\n" for name, size in sizes.items()))
    return str(root)


def test_the_installed_tensorflow_build(tmp_path):
    build = tensorflow_build()  # This environment's: PyPI's CPU/GPU build.
    assert build == ("tensorflow", metadata.version("tensorflow"), False, ["tensorflow"])
    # tf-keras pulled in the plain build; the TPU build installed after it replaced its files: the TPU build owns
    # them, and its libraries can load the TPU runtime.
    plain = {"libtensorflow_framework.so.2": b"\0" * 10, "_pywrap.so": b"\1" * 20}
    tpu = {"libtensorflow_framework.so.2": b"getenv TPU_LIBRARY_PATH libtpu.so", "_pywrap.so": b"\2" * 25}
    recorded = {"tensorflow": {name: len(data) for name, data in plain.items()},
                "tensorflow-tpu": {name: len(data) for name, data in tpu.items()}}
    assert tensorflow_build([fake_site_packages(tmp_path / "tpu-last", tpu, recorded)]) == (
        "tensorflow-tpu", "2.18.0", True, ["tensorflow", "tensorflow-tpu"])
    # The other way round, the plain build's files win: no TPU runtime, whatever pip lists.
    assert tensorflow_build([fake_site_packages(tmp_path / "plain-last", plain, recorded)]) == (
        "tensorflow", "2.18.0", False, ["tensorflow", "tensorflow-tpu"])
    # A TPU-enabled build named `tensorflow`, as Google's tpu-vm-tf-* images have: what counts is the libraries.
    image = fake_site_packages(tmp_path / "image", tpu, {"tensorflow": recorded["tensorflow-tpu"]})
    assert tensorflow_build([image]) == ("tensorflow", "2.18.0", True, ["tensorflow"])


def test_check_tpu_says_what_is_wrong_on_a_machine_without_a_tpu():
    # -X importtime lists every module imported: devices.py runs as __main__, and nothing may load it again as devices.
    result = subprocess.run([sys.executable, "-X", "importtime", str(REPO / "devices.py"), "check-tpu"],
                            capture_output=True, text=True)
    assert result.returncode == 1
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import")]
    assert "diagnostics" in imported and "devices" not in imported
    assert f"error: the installed TensorFlow, tensorflow {metadata.version('tensorflow')}, is built for CPUs and " \
           "GPUs only" in result.stdout and "make install-tpu" in result.stdout
    assert "error: this machine has no TPU chips" in result.stdout
    # The command of earlier versions of the README answers the same.
    earlier = subprocess.run([sys.executable, str(REPO / "utils.py"), "check-tpu"], capture_output=True, text=True)
    assert (earlier.returncode, earlier.stdout) == (result.returncode, result.stdout)


def pod_args(**flags):
    return argparse.Namespace(**{"train_dataset": "gs://bucket/tfrecords/train", "eval_dataset": None,
                                 "output_dir": "gs://bucket/model", "shards_on_every_host": False, **flags})


def test_a_pod_slice_reads_and_writes_where_every_host_can():
    check_paths_for_pod(pod_args(), num_hosts=4)
    check_paths_for_pod(pod_args(train_dataset="tfrecords/train", output_dir="model"), num_hosts=1)
    with pytest.raises(UserError, match="this TPU has 4 hosts, and each reads its own shards, but 'tfrecords/valid' "
                                         "is a local path.*--shards_on_every_host"):
        check_paths_for_pod(pod_args(eval_dataset="tfrecords/valid"), num_hosts=4)
    check_paths_for_pod(pod_args(eval_dataset="tfrecords/valid", shards_on_every_host=True), num_hosts=4)
    with pytest.raises(UserError, match="each saves its own part of every checkpoint, but --output_dir 'model' is "
                                         "a local path. Pass a gs:// folder"):
        check_paths_for_pod(pod_args(output_dir="model", shards_on_every_host=True), num_hosts=2)


def original_rows(files):
    rows = set()
    for file in files:
        for record in tf.data.TFRecordDataset(file):
            example = tf.train.Example.FromString(record.numpy())
            rows.add(tuple(example.features.feature["input_ids"].int64_list.value))
    return rows


@pytest.mark.parametrize("num_pipelines", [1, 2, 4])
def test_every_shard_is_read_by_exactly_one_input_pipeline(shards_dir, num_pipelines):
    files, sizes = find_shards(str(shards_dir / "train"), MAX_LENGTH)
    assert len(files) >= 4
    read_by = []
    for pipeline in range(num_pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=num_pipelines, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=num_pipelines)
        num_samples = sum(sizes[pipeline::num_pipelines])
        dataset = make_dataset(files, context, batch_size=1, max_length=MAX_LENGTH, masking=MASKING, seed=0,
                               training=False, num_batches=num_samples).take(num_samples)
        # Undo the masking: the labels hold the original token wherever the input was changed.
        rows = [tuple(np.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])[0])
                for batch in dataset.as_numpy_iterator()]
        assert set(rows) == original_rows(files[pipeline::num_pipelines])  # Pipeline i: shards i, i + n, ...
        read_by.append(set(rows))
    assert set().union(*read_by) == original_rows(files)
    assert sum(map(len, read_by)) == len(set().union(*read_by))  # No sample read twice.
