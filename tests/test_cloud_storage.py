"""The pipeline with every path on gs://, against a Cloud Storage emulator on 127.0.0.1 (tests/gcs_emulator.py).

Each script that reaches gs:// runs in its own process with the emulator's environment (TensorFlow reaches it through
a loopback TLS proxy, google-cloud-storage directly), under strace: a test fails if any process connected anywhere
but 127.0.0.1 or ::1, whether to Google, to a metadata server or to a DNS server.
"""

import http.server
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from gcs_emulator import GcsEmulator
from helpers import MAX_LENGTH, REPO, WIKITEXT, run_main, run_script, write_compressed

CONNECTED_ADDRESS = re.compile(r'connect\(\d+, \{sa_family=AF_INET6?, .*?(?:inet_addr\("([^"]+)"\)|'
                               r'inet_pton\(AF_INET6, "([^"]+)")')


@pytest.fixture(scope="module")
def gcs():
    with GcsEmulator() as emulator:
        yield emulator


def strace(log_file):
    """A command prefix that records every connect() of a process and its children into `log_file`."""
    return ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", str(log_file)]


def addresses_outside_loopback(log_file):
    """The addresses, other than 127.0.0.0/8 and ::1, that a process traced by strace() connected to."""
    addresses = {ipaddress.ip_address(next(filter(None, match.groups())))
                 for match in CONNECTED_ADDRESS.finditer(log_file.read_text())}
    mapped = {address: getattr(address, "ipv4_mapped", None) for address in addresses}  # ::ffff:127.0.0.1
    return sorted(str(address) for address in addresses
                  if not (address.is_loopback or mapped[address] and mapped[address].is_loopback))


def traced_child(strace_pid):
    """The process that strace started (strace itself blocks SIGTERM while it writes to a file)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{strace_pid}/task/{strace_pid}/children") as f:
            children = f.read().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("strace started no process")


def run_traced(tmp_path, script, *args, env, expect_failure=False):
    """run_script under strace, with `env` as the environment; fails the test if anything left the machine."""
    log_file = tmp_path / f"connect-{time.monotonic_ns()}.log"
    result = run_script(script, *args, env=env, expect_failure=expect_failure, prefix=strace(log_file))
    assert addresses_outside_loopback(log_file) == []
    return result


def upload_lines(bucket, name, source, num_lines, local_copy):
    """The first `num_lines` lines of `source`, uploaded to `name` in the bucket and written to `local_copy`."""
    with open(source, encoding="utf-8") as f:
        text = "".join(f.readline() for _ in range(num_lines))
    bucket.blob(name).upload_from_string(text.encode())
    local_copy.write_text(text, encoding="utf-8")


def objects(gcs, bucket, prefix):
    """{name below prefix: bytes} of the files (not the folder markers) under a prefix."""
    return {blob.name[len(prefix):]: blob.download_as_bytes() for blob in gcs.client().list_blobs(bucket, prefix=prefix)
            if not blob.name.endswith("/")}


def test_whole_pipeline_on_cloud_storage(gcs, tiny_config_dir, tmp_path):
    bucket = gcs.create_bucket("pipeline")
    env = gcs.env()
    # All of the shipped training text (shards of 500 samples), a little of the validation text (one shard, quick
    # to evaluate).
    upload_lines(bucket, "data/train.txt", WIKITEXT / "train.txt", 1500, tmp_path / "train.txt")
    upload_lines(bucket, "data/validation.txt", WIKITEXT / "validation.txt", 150, tmp_path / "validation.txt")
    bucket.blob("config/config.json").upload_from_filename(str(tiny_config_dir / "config.json"))

    # Step 1: text from gs://, tokenizer to gs://.
    run_traced(tmp_path, "train_unigram.py", "--train_file", "gs://pipeline/data/train.txt", "--vocab_size", 1000,
               "--output_dir", "gs://pipeline/tokenizer", env=env)
    tokenizer_dir = tmp_path / "tokenizer"
    tokenizer_dir.mkdir()
    for name, data in objects(gcs, "pipeline", "tokenizer/").items():
        (tokenizer_dir / name).write_bytes(data)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert len(tokenizer) == 1000 and tokenizer.mask_token_id == 4 and tokenizer.pad_token_id == 1
    assert tokenizer("The game").input_ids[0] == 0 and tokenizer("The game").input_ids[-1] == 2

    # Step 2: text and tokenizer from gs://, shards to gs://: the same bytes as shards written locally from the
    # same text with the same tokenizer.
    shard_args = ["--max_length", MAX_LENGTH, "--shard_size", 500]
    run_traced(tmp_path, "prepare_tfrecord_shards.py", "--tokenizer_name_or_path", "gs://pipeline/tokenizer",
               "--train_file", "gs://pipeline/data/train.txt", "--validation_file", "gs://pipeline/data/validation.txt",
               *shard_args, "--output_dir", "gs://pipeline/tfrecords", env=env)
    run_main("prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir, "--train_file",
             tmp_path / "train.txt", "--validation_file", tmp_path / "validation.txt", *shard_args,
             "--output_dir", tmp_path / "tfrecords")
    for split in ("train", "validation"):
        on_gcs = objects(gcs, "pipeline", f"tfrecords/{split}/")
        local = {path.name: path.read_bytes() for path in (tmp_path / "tfrecords" / split).iterdir()}
        manifest, local_manifest = json.loads(on_gcs.pop("manifest.json")), json.loads(local.pop("manifest.json"))
        assert on_gcs == local and len(on_gcs) >= 2  # No temporary file left behind either.
        assert manifest["tokenizer"] == "gs://pipeline/tokenizer"
        assert {**manifest, "tokenizer": None} == {**local_manifest, "tokenizer": None}

    # Step 3: everything from and to gs://. Stopped by SIGTERM, which saves a checkpoint, then resumed. (Saving a
    # checkpoint to gs:// takes TensorFlow over 100 requests: no periodic ones here, only that one and the last.)
    # The signal comes as training begins: the run stops after its first step.
    train_args = ["--train_dataset", "gs://pipeline/tfrecords/train", "--eval_dataset",
                  "gs://pipeline/tfrecords/validation", "--tokenizer", "gs://pipeline/tokenizer",
                  "--pretrained_model_config", "gs://pipeline/config", "--max_length", MAX_LENGTH, "--no_tpu",
                  "--per_replica_batch_size", 8, "--learning_rate", 3e-3, "--warmup_steps", 2, "--max_steps", 40,
                  "--eval_every_steps", 20, "--checkpoint_every_steps", 1000, "--input_check_seconds", 0,
                  "--output_dir", "gs://pipeline/model"]
    log_file = tmp_path / "connect-interrupted.log"
    process = subprocess.Popen([*strace(log_file), sys.executable, str(REPO / "run_mlm.py"), *map(str, train_args)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if "Steps 1 to 40 of 40" in line:
            break
    os.kill(traced_child(process.pid), signal.SIGTERM)
    stderr = process.communicate(timeout=300)[1]
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert addresses_outside_loopback(log_file) == []
    stopped_at = int(re.search(r"Stopped by SIGTERM at step (\d+)", stderr).group(1))
    assert 0 < stopped_at < 40 and bucket.blob(f"model/checkpoints/ckpt-{stopped_at}.index").exists()
    assert not bucket.blob("model/tf_model.h5").exists()
    # The interrupted run's last checkpoint becomes a model folder, from gs:// to gs://.
    run_traced(tmp_path, "export_model.py", "gs://pipeline/model", "--output_dir", "gs://pipeline/exported", env=env)
    exported = objects(gcs, "pipeline", "exported/")
    assert {"tf_model.h5", "tokenizer.json", "pytorch/model.safetensors", "pytorch/tokenizer.json"} <= set(exported)

    result = run_traced(tmp_path, "run_mlm.py", *train_args, env=env)
    assert f"Resuming from gs://pipeline/model/checkpoints/ckpt-{stopped_at}, at step {stopped_at}" in result.stderr
    model = objects(gcs, "pipeline", "model/")
    assert {"tf_model.h5", "config.json", "tokenizer.json", "README.md", "checkpoints/ckpt-40.index",
            "pytorch/model.safetensors"} <= set(model)
    assert json.loads(model["training_results.json"])["step"] == 40
    assert any(name.startswith("logs/eval/events.out.tfevents.") for name in model)
    assert "# model" in model["README.md"].decode()  # Named after the gs:// folder, not a temporary one.

    # The final model, copied from gs://, serves the fill-mask pipeline.
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name, data in model.items():
        if "/" not in name:  # The saved model, without checkpoints and logs.
            (model_dir / name).write_bytes(data)
    from transformers import pipeline

    predictions = pipeline("fill-mask", model=str(model_dir), framework="tf", dtype=None)(
        "The game was released in <mask> .")
    assert len(predictions) == 5 and all(p["sequence"].startswith("The game was released in") for p in predictions)


def test_missing_bucket_fails_at_once_with_how_to_create_it(gcs, tokenizer_dir, shards_dir, tiny_config_dir,
                                                            tmp_path):
    env = gcs.env()
    missing = "gs://no-such-bucket/folder"
    advice = "gcloud storage buckets create gs://no-such-bucket"
    result = run_traced(tmp_path, "train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--output_dir",
                        missing, env=env, expect_failure=True)
    assert f"the bucket of '{missing}' does not exist" in result.stderr and advice in result.stderr
    result = run_traced(tmp_path, "prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                        "--train_file", f"{missing}/train.txt", "--output_dir", tmp_path / "shards", env=env,
                        expect_failure=True)
    assert f"the bucket of '{missing}/train.txt' does not exist" in result.stderr and advice in result.stderr
    result = run_traced(tmp_path, "run_mlm.py", "--train_dataset", shards_dir / "train", "--tokenizer",
                        tokenizer_dir, "--pretrained_model_config", tiny_config_dir, "--max_length", MAX_LENGTH,
                        "--no_tpu", "--output_dir", missing, env=env, expect_failure=True)
    assert f"the bucket of '{missing}' does not exist" in result.stderr and advice in result.stderr
    assert "Strategy:" not in result.stderr  # Before anything was set up.


def test_missing_object_and_files_read_from_local_disk_only(gcs, tokenizer_dir, tmp_path):
    # train.jsonl exists, refused by its format; train.txt does not.
    gcs.create_bucket("inputs").blob("train.jsonl").upload_from_string(b'{"text": "hello"}\n')
    env = gcs.env()
    result = run_traced(tmp_path, "train_unigram.py", "--train_file", "gs://inputs/train.txt", "--output_dir",
                        tmp_path / "tokenizer", env=env, expect_failure=True)
    assert "the train file 'gs://inputs/train.txt' does not exist" in result.stderr
    result = run_traced(tmp_path, "prepare_tfrecord_shards.py", "--tokenizer_name_or_path", tokenizer_dir,
                        "--train_file", "gs://inputs/train.jsonl", "--output_dir", tmp_path / "shards", env=env,
                        expect_failure=True)
    assert "JSON-lines and Parquet files are read from local disk only" in result.stderr


def test_text_that_is_not_utf8_and_an_output_dir_that_is_a_file_on_cloud_storage(gcs, tmp_path):
    bucket = gcs.create_bucket("bad-input")
    bucket.blob("latin1.txt").upload_from_string(b"first line\nun caf\xe9\n")
    bucket.blob("a-file").upload_from_string(b"not a folder")
    env = gcs.env()
    result = run_traced(tmp_path, "train_unigram.py", "--train_file", "gs://bad-input/latin1.txt", "--output_dir",
                        tmp_path / "tokenizer", env=env, expect_failure=True)
    assert "'gs://bad-input/latin1.txt' is not UTF-8: the first invalid byte is at line 2, byte offset 17 " \
           "(byte 0xe9)" in result.stderr and "Traceback" not in result.stderr
    result = run_traced(tmp_path, "train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--output_dir",
                        "gs://bad-input/a-file", env=env, expect_failure=True)
    assert "error: --output_dir 'gs://bad-input/a-file' is a file, not a folder" in result.stderr


def test_compressed_text_is_read_from_cloud_storage_as_it_is_stored(gcs, tokenizer_dir, tmp_path, monkeypatch):
    import corpus
    import utils
    from utils import UserError

    monkeypatch.setattr(utils, "gcs_client", gcs.client)  # In this process: utils' client, on the emulator.
    bucket = gcs.create_bucket("compressed")
    compressed = write_compressed(tmp_path / "validation.txt.gz", (WIKITEXT / "validation.txt").read_bytes())
    bucket.blob("validation.txt.gz").upload_from_filename(str(compressed))
    # Stored with Content-Encoding: gzip, as `gcloud storage cp -Z` stores a file: google-cloud-storage would
    # decompress it itself, before corpus.py does.
    encoded = bucket.blob("encoded.txt.gz")
    encoded.content_encoding = "gzip"
    encoded.upload_from_filename(str(compressed))
    bucket.blob("truncated.txt.gz").upload_from_string(compressed.read_bytes()[:-8])
    bucket.blob("part-00000.gz").upload_from_filename(str(compressed))  # Named as a data job names it: --file_format.
    args = ["--tokenizer_name_or_path", tokenizer_dir, "--max_length", MAX_LENGTH, "--shard_size", 100]
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", WIKITEXT / "validation.txt",
             "--validation_file", WIKITEXT / "validation.txt", "--test_file", WIKITEXT / "validation.txt",
             "--output_dir", tmp_path / "from-text")
    run_main("prepare_tfrecord_shards.py", *args, "--train_file", "gs://compressed/validation.txt.gz",
             "--validation_file", "gs://compressed/encoded.txt.gz", "--test_file", "gs://compressed/part-*",
             "--file_format", "text", "--output_dir", tmp_path / "from-gcs")
    for split in ("train", "validation", "test"):
        written = {path.name: path.read_bytes() for path in (tmp_path / "from-text" / split).iterdir()}
        assert {path.name: path.read_bytes() for path in (tmp_path / "from-gcs" / split).iterdir()} == written
    (batches,) = corpus.text_batches(text_column="text", batch_size=100,
                                     data_files={"train": ["gs://compressed/truncated.txt.gz"]}).values()
    with pytest.raises(UserError, match="^cannot read 'gs://compressed/truncated.txt.gz' as gzip-compressed, .* test "
                                        "it with `gcloud storage cat gs://compressed/truncated.txt.gz | gzip -t`"):
        list(batches)


def test_outputs_on_cloud_storage_are_not_overwritten_without_asking(gcs, tokenizer_dir, shards_dir,
                                                                     tiny_config_dir, tmp_path):
    bucket = gcs.create_bucket("outputs")
    bucket.blob("shards/notes.txt").upload_from_string(b"keep me")
    bucket.blob("model/notes.txt").upload_from_string(b"keep me too")
    env = gcs.env()
    shard_args = ["--tokenizer_name_or_path", tokenizer_dir, "--train_file", WIKITEXT / "validation.txt",
                  "--limit", 300, "--max_length", MAX_LENGTH, "--output_dir", "gs://outputs/shards"]
    result = run_traced(tmp_path, "prepare_tfrecord_shards.py", *shard_args, env=env, expect_failure=True)
    assert "the output folder 'gs://outputs/shards' is not empty" in result.stderr and "--overwrite" in result.stderr
    result = run_traced(tmp_path, "run_mlm.py", "--train_dataset", shards_dir / "train", "--tokenizer",
                        tokenizer_dir, "--pretrained_model_config", tiny_config_dir, "--max_length", MAX_LENGTH,
                        "--no_tpu", "--output_dir", "gs://outputs/model", env=env, expect_failure=True)
    assert "the output folder 'gs://outputs/model' holds files that are not a checkpoint" in result.stderr
    assert set(objects(gcs, "outputs", "")) == {"shards/notes.txt", "model/notes.txt"}  # Nor any probe left.

    # --overwrite replaces the split folders it writes, and keeps what else is there.
    run_traced(tmp_path, "prepare_tfrecord_shards.py", *shard_args, "--overwrite", env=env)
    written = set(objects(gcs, "outputs", "shards/"))
    assert "notes.txt" in written and "train/manifest.json" in written


def test_no_credentials_and_no_permission_are_explained(tmp_path):
    # No emulator, no credentials, and no metadata server to ask (NO_GCE_CHECK): as on a laptop without gcloud.
    cloudsdk_config = tmp_path / "gcloud"
    cloudsdk_config.mkdir()
    env = {"NO_GCE_CHECK": "true", "CLOUDSDK_CONFIG": str(cloudsdk_config)}
    result = run_traced(tmp_path, "train_unigram.py", "--train_file", WIKITEXT / "validation.txt", "--output_dir",
                        "gs://bucket/tokenizer", env=env, expect_failure=True)
    assert "no Google Cloud credentials found to access 'gs://bucket/tokenizer'" in result.stderr
    assert "gcloud auth application-default login" in result.stderr

    # A Cloud Storage that refuses every request, as it does an account without a role on the bucket.
    class Forbidden(http.server.BaseHTTPRequestHandler):
        def refuse(self):
            body = json.dumps({"error": {"code": 403, "message": "caller does not have storage.objects.list "
                                                                 "access to the bucket"}}).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = refuse

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{server.server_port}"}
        result = run_traced(tmp_path, "train_unigram.py", "--train_file", WIKITEXT / "validation.txt",
                            "--output_dir", "gs://bucket/tokenizer", env=env, expect_failure=True)
    finally:
        server.shutdown()
    assert "no permission to write to 'gs://bucket/tokenizer'" in result.stderr
    assert "storage.objects.list" in result.stderr and "roles/storage.objectAdmin" in result.stderr
