"""One run_mlm.py run per --output_dir, and what a run keeps there as it goes:

- the lease (running.json): a second run into the same folder stops at once, and a run that was killed is taken over;
- where a run starts: nothing left to do, from scratch, or from the last usable checkpoint (last_checkpoint, which
  every script that looks for a checkpoint uses), read whole before it is restored; the config and tokenizer the
  checkpoints belong to, beside them;
- checkpoints every N steps and before stopping on SIGTERM or SIGINT (a preempted VM, Ctrl-C), the hosts of a
  multi-worker run agreeing on the step; a NaN loss stops the run (and a fine-tuning run: StopAtNonFiniteLoss);
- training_results.json and the logs at the end of each round (TensorBoard, speed, MFU), and at the run's end a
  warning when the model learned next to nothing from the context; a full disk named with what is safe;
- at the run's end, the model, its tokenizer, a PyTorch copy and its model card (save_model): a finished run.

Keras' BackupAndRestore and tf.distribute's PreemptionCheckpointHandler do not fit TPU preemption (CheckpointAndStop
says why).
"""

import atexit
import copy
import contextlib
import json
import logging
import math
import os
import signal
import socket
import tempfile
import threading
import time
import uuid

import tensorflow as tf
import tf_keras as keras

from devices import count_hosts, create_optimizer_state
from models import (ELECTRA_GENERATOR, config_changes, load_config, load_tokenizer, save_model_folder,
                    save_tokenizer, tokenizer_difference, write_model_card)
from utils import UserError, check_output_dir, delete, gcs_blob, is_gcs_path, out_of_space_named, \
    refuse_a_file_as_output_dir, save_folder

logger = logging.getLogger("run_mlm")  # What it logs are the lines of a run_mlm.py run (its rounds, its stop).


# What a run writes into --output_dir before its end: a folder holding only these is a run to resume.
RUN_STATE = ("checkpoints", "logs", "training_results.json")


class OutputDirLease:
    """One run at a time per --output_dir: {output_dir}/running.json names the run that writes there (host, process,
    start) and when it last renewed its claim. The chief holds it (the other hosts of a multi-host run write only
    to scratch folders), renews it every RENEW_SECONDS from a thread, and deletes it when its process exits.

    A run killed with SIGKILL, or on a lost VM, cannot delete it. A later run takes over when the holder is gone:
    on the holder's host, once its process no longer lives; elsewhere (a gs:// folder, or a local one shared across
    hosts), once the claim has not been renewed for LEASE_SECONDS. Deleting the file takes over at once. Claims are
    atomic (a file created only if absent, a rename; in a bucket, a write conditional on the object's generation):
    of two runs that start together, one wins."""

    NAME = "running.json"
    LEASE_SECONDS = 600  # Ten missed renewals: a slow bucket or a long pause is not taken for a lost VM.
    RENEW_SECONDS = 60

    def __init__(self, output_dir):
        self.output_dir, self.path = output_dir, os.path.join(output_dir, self.NAME)
        self.claim = {"host": socket.gethostname(), "pid": os.getpid(), "process_start": process_start(os.getpid()),
                      "started": time.time(), "renewed": time.time(), "run": uuid.uuid4().hex}
        self.generation = None  # In a bucket: the object's generation, as this run last wrote it.
        self.stopped = threading.Event()

    def hold(self):
        """Claims the folder, or raises UserError naming the run that holds it; released when the process exits."""
        refuse_a_file_as_output_dir(self.output_dir)
        holder, generation = self.read()
        if holder is not None and self.holder_is_running(holder):
            raise UserError(self.held_message(holder))
        if holder is not None:
            logger.warning("%s names a run that ended without releasing it (%s): this run takes over.", self.path,
                           describe_run(holder))
        if not self.claim_folder(holder is not None, generation):
            raise UserError(self.held_message(self.read()[0] or {}))  # Another run claimed it first.
        atexit.register(self.release)
        threading.Thread(target=self.renew_until_stopped, daemon=True, name="output-dir-lease").start()

    def holder_is_running(self, holder):
        if holder.get("host") == self.claim["host"]:
            started = process_start(holder.get("pid"))
            if started is not None:  # /proc says whether its process lives, and whether it is the same one.
                return started == holder.get("process_start")
        return time.time() - holder.get("renewed", 0) < self.LEASE_SECONDS

    def held_message(self, holder):
        here = holder.get("host") == self.claim["host"]
        return (f"another run is writing into --output_dir {self.output_dir!r}: {describe_run(holder)}. Two runs "
                "in one folder would overwrite each other's checkpoints and model. Wait for it to end, or stop it "
                f"(Ctrl-C, or `kill {holder.get('pid')}` on host {holder.get('host')}: it saves a checkpoint, and "
                "the same command resumes from it), or choose another --output_dir."
                + ("" if here else " If that run is gone (its VM lost), a new run takes over once its claim expires, "
                   f"at {utc(holder.get('renewed', 0) + self.LEASE_SECONDS)} ({self.LEASE_SECONDS // 60} minutes "
                   f"after it was last renewed), or at once if you delete {self.path}."))

    def read(self):
        """(the claim in the folder, its generation in a bucket), or (None, None) when there is none; {} for a file
        that is not a claim (cut short by a full disk, say), which names no run and has expired."""
        if is_gcs_path(self.path):
            blob = gcs_blob(self.path)
            from google.api_core.exceptions import NotFound

            try:
                blob.reload()  # Its generation, then the bytes of that generation.
                data = blob.download_as_bytes(if_generation_match=blob.generation)
            except NotFound:
                return None, None
            generation = blob.generation
        else:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                return None, None
            generation = None
        try:
            claim = json.loads(data)
        except ValueError:
            claim = None
        return claim if isinstance(claim, dict) else {}, generation

    def claim_folder(self, replacing, generation):
        """Writes this run's claim where there was none, or over the ended run's; False if another run won."""
        data = json.dumps(self.claim, indent=2).encode()
        if is_gcs_path(self.path):
            return self.write_to_bucket(data, expected_generation=generation or 0)  # 0: only if there is none.
        os.makedirs(self.output_dir, exist_ok=True)
        if replacing:  # A rename is atomic: of two runs taking over, one moves the ended run's claim away.
            try:
                os.rename(self.path, f"{self.path}.{self.claim['run']}")
            except FileNotFoundError:
                return False
            os.remove(f"{self.path}.{self.claim['run']}")
        # Only if there is none, and whole: a file opened with "x" is empty until written, and a run that read it
        # then would take it for an ended run's claim and take over (seen: two runs started in the same second). A
        # hard link to the written claim appears whole or not at all.
        def link_where_there_is_none(written, path):
            try:
                os.link(written, path)
            except FileExistsError:
                raise
            except OSError:  # A filesystem without hard links (gcsfuse): created, then written, as before.
                with open(path, "xb") as f:
                    f.write(data)

        try:
            self.write_whole(data, link_where_there_is_none)
        except FileExistsError:
            return False
        return True

    def write_whole(self, data, put_in_place):
        """Writes the claim beside its place, then `put_in_place(written, self.path)` (os.replace, os.link): never
        seen half-written there, and no stray file left beside it, even after a full disk."""
        written = f"{self.path}.{self.claim['run']}.new"
        try:
            with open(written, "wb") as f:
                f.write(data)
            put_in_place(written, self.path)
        finally:
            with contextlib.suppress(OSError):  # Gone once replaced.
                os.remove(written)

    def write_to_bucket(self, data, expected_generation):
        from google.api_core.exceptions import PreconditionFailed

        blob = gcs_blob(self.path)
        try:
            blob.upload_from_string(data, if_generation_match=expected_generation)
        except PreconditionFailed:
            return False
        self.generation = blob.generation
        return True

    def renew(self):
        """Writes the claim again with the time now; False when another run has taken the folder over."""
        self.claim["renewed"] = time.time()
        data = json.dumps(self.claim, indent=2).encode()
        if is_gcs_path(self.path):
            return self.write_to_bucket(data, expected_generation=self.generation)
        if (self.read()[0] or {}).get("run") != self.claim["run"]:
            return False
        self.write_whole(data, os.replace)
        return True

    def renew_until_stopped(self):
        while not self.stopped.wait(self.RENEW_SECONDS):
            try:
                if not self.renew():
                    logger.error("Another run has taken over %s: two runs now write into %s. Stop one of them.",
                                 self.path, self.output_dir)
                    return
            except Exception as err:  # One failed renewal (a full disk, the network) must not end the run.
                logger.warning("Could not renew %s: %s", self.path, err)

    def release(self):
        self.stopped.set()
        if (self.read()[0] or {}).get("run") == self.claim["run"]:  # Never another run's claim.
            delete(self.path)


def describe_run(claim):
    return (f"process {claim.get('pid', '?')} on host {claim.get('host', '?')}, started "
            f"{utc(claim.get('started', 0))}, its claim last renewed {utc(claim.get('renewed', 0))}")


def process_start(pid):
    """When the process `pid` started, in clock ticks since boot (so that a new process given the same id is not
    taken for it); "gone" when there is no such process; None where /proc cannot say."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]  # Field 22; the name before ")" may hold spaces.
    except FileNotFoundError:
        return "gone"
    except (OSError, TypeError, ValueError, IndexError):
        return None


def utc(seconds):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


# ----------------------------------------------------------------------------------------------------------------
# Where a run starts, and its checkpoints


def check_where_the_run_starts(args, plan, recorded, is_chief, config, generator_config, stream):
    """False when an earlier run of this command (`recorded`: its results) trained `plan.total_steps` and saved its
    model: nothing left to do. Else refuses an --output_dir that holds something other than a run to resume (with
    --overwrite, clears it), and a checkpoint that this command would not continue: of another global batch, of
    more steps, of another model than `config` (and ELECTRA's `generator_config`), another tokenizer than
    --tokenizer, or another data `stream` (data_stream)."""
    saved_at = recorded.get("saved_model_step")
    if saved_at is not None and saved_at >= plan.total_steps:
        logger.info("The run in %s is already complete at step %d%s, and its model is saved there. Nothing to do. "
                    "To train longer, raise --max_steps or --num_epochs; to start over, pass --overwrite.",
                    args.output_dir, saved_at,
                    f" (this command asks for {plan.total_steps})" if saved_at > plan.total_steps else "")
        return False
    if is_chief and saved_at is None:  # A folder with a model this script saved is this script's.
        check_output_dir(args.output_dir, args.overwrite, resumable=(*RUN_STATE, OutputDirLease.NAME),
                         stale=RUN_STATE)
    latest = None if args.overwrite else last_checkpoint(os.path.join(args.output_dir, "checkpoints"))
    step = latest and int(latest.rsplit("-", 1)[1])  # Checkpoints are numbered by their step.
    if latest and recorded.get("global_batch_size", plan.global_batch_size) != plan.global_batch_size:
        raise UserError(
            f"{args.output_dir!r} holds a run, checkpointed at step {step}, that trained on global batches "
            f"of {recorded['global_batch_size']} samples ({recorded['per_replica_batch_size']} per replica x "
            f"{recorded['num_replicas']} replicas x {recorded['gradient_accumulation_steps']} accumulation steps), "
            f"but this command's global batch is {plan.global_batch_size}. Its steps, learning-rate schedule and "
            "place in the data count batches of that size. To resume it, run it with the same global batch "
            "(--per_replica_batch_size x replicas x --gradient_accumulation_steps); to train with this one, start "
            "over with --overwrite, or choose another --output_dir.")
    if latest and step > plan.total_steps:
        raise UserError(
            f"{args.output_dir!r} holds an unfinished run, checkpointed at step {step}, beyond the "
            f"{plan.total_steps} steps this command asks for. To finish it, run it with --max_steps {step} or more "
            "(or as many --num_epochs as it had); to start over, pass --overwrite.")
    if latest:
        refuse_another_model(args.output_dir, step, config, generator_config, args.objective,
                             recorded.get("objective"))
        refuse_another_tokenizer(args.output_dir, step, args.tokenizer)
        refuse_another_data_stream(args.output_dir, step, recorded, stream)
    return True


# The flags that decide the batches and masks of each step, beside the training shards (make_dataset's stream is a
# function of them): a run resumed with other values would go on as no run never stopped would, in silence.
STREAM_FLAGS = ("seed", "shuffle_buffer_size", "mlm_probability", "mask_share", "masking", "max_predictions_per_seq")


def data_stream(args, train_files, train_sizes):
    """What decides a run's batches and masks, for training_results.json: the flags of STREAM_FLAGS, and the training
    shards by name and size (not by folder: a run's shards may move, e.g. to gs://)."""
    return {**{flag: vars(args)[flag] for flag in STREAM_FLAGS},
            "shards": dict(zip(map(os.path.basename, train_files), train_sizes))}


def refuse_another_data_stream(output_dir, step, recorded, stream):
    """Stops when the run in `output_dir` (the last checkpoint at `step`) trained on another data_stream than this
    command's `stream`, as `recorded` (its results) says; runs from before it was recorded pass."""
    was = recorded.get("data_stream", stream)
    changed = next((flag for flag in STREAM_FLAGS if was[flag] != stream[flag]), None)
    if changed:
        difference = f"--{changed} {stream[changed]} (the run's: {was[changed]})"
    elif was["shards"] != stream["shards"]:
        difference = (f"other training shards, {len(stream['shards'])} files of {sum(stream['shards'].values())} "
                      f"samples (the run's: {len(was['shards'])} files of {sum(was['shards'].values())})")
    else:
        return
    raise UserError(
        f"{output_dir!r} holds a run, checkpointed at step {step}, that trained on other batches or masks than this "
        f"command would: {difference}. Resumed so, it would not be the run it was. To resume it, run it with the "
        "run's values and shards; to train with these, start over with --overwrite, or choose another --output_dir.")


def refuse_another_model(output_dir, step, config, generator_config, objective, recorded_objective):
    """Stops when the checkpoints in `output_dir` (the last at `step`) hold another model than `config` (and
    ELECTRA's `generator_config`), as the config saved beside them says (save_checkpoints_config), or were trained
    with another `objective` than this command's (`recorded_objective`, in the run's results): restoring would
    end in TensorFlow's traceback on the first weight of another shape, leave weights at random, or go on with
    another loss. Only dropout may change."""
    config_dir = os.path.join(output_dir, "checkpoints", "config")
    generator_dir = os.path.join(config_dir, ELECTRA_GENERATOR)
    if not tf.io.gfile.exists(os.path.join(config_dir, "config.json")):
        return  # Saved by a run before save_checkpoints_config: nothing to compare with.
    # Runs before the objective was recorded trained a masked LM or, with a generator beside them, ELECTRA.
    was = recorded_objective or ("electra" if tf.io.gfile.exists(os.path.join(generator_dir, "config.json"))
                                 else "mlm")
    if was != objective:
        differences = [f"--objective {was} (this command: {objective})"]
    else:
        differences = []
        for whose, folder, new_config in (("", config_dir, config),
                                          ("the generator's ", generator_dir, generator_config)):
            if new_config is None:
                continue
            saved = load_config(folder, "--output_dir", "Start over with --overwrite, or choose another "
                                "--output_dir.").to_dict()
            new = new_config.to_dict()
            differences += [f"{whose}{key}={saved.get(key)!r} (this command: {new.get(key)!r})"
                            for key in config_changes(saved, new)]
    if differences:
        raise UserError(
            f"{output_dir!r} holds a run, checkpointed at step {step}, of another model than this command's: "
            f"{', '.join(differences[:5])}{', ...' if len(differences) > 5 else ''}, as the config beside its "
            f"checkpoints says ({config_dir}). Its weights would not fit this model. To resume it, run it with the "
            "same model flags (--pretrained_model_config or --model_name_or_path, --config_overrides, --objective, "
            "--generator_hidden_size, --tokenizer); to train this model, start over with --overwrite, or choose "
            "another --output_dir.")


def refuse_another_tokenizer(output_dir, step, tokenizer_name):
    """Stops when the checkpoints in `output_dir` (the last at `step`) were trained with another tokenizer than
    --tokenizer `tokenizer_name`, as the one saved beside them says (save_checkpoints_config). Of the same size, it
    gives the same config, and the weights would fit: but every id would mean another token than the one its
    embedding learned, and the run would train on in silence."""
    config_dir = os.path.join(output_dir, "checkpoints", "config")
    if not tf.io.gfile.exists(os.path.join(config_dir, "config.json")):
        return  # Saved by a run before save_checkpoints_config: nothing to compare with.
    difference = tokenizer_difference(
        load_tokenizer(tokenizer_name, "--tokenizer"),
        load_tokenizer(config_dir, "--output_dir", "Start over with --overwrite, or choose another --output_dir."),
        "the run's")
    if difference:
        raise UserError(
            f"{output_dir!r} holds a run, checkpointed at step {step}, trained with another tokenizer than this "
            f"command's --tokenizer {tokenizer_name!r}: {difference}, as the tokenizer beside its checkpoints says "
            f"({config_dir}). Its ids would mean other tokens to the model. To resume it, run it with the run's "
            "tokenizer and the shards written with it; to train with this one, start over with --overwrite, or "
            "choose another --output_dir.")


def save_checkpoints_config(output_dir, networks, tokenizer):
    """The config and tokenizer beside the checkpoints: with them, export_model.py makes a model folder of any
    checkpoint, while the run is still going or after it was interrupted. The config of each of the trainer's
    `networks` names its class (`architectures`): the model (a masked LM, with a pair head or not, or ELECTRA's
    discriminator); an ELECTRA run's generator in its generator/ folder."""
    def write(folder):
        for name, network in networks.items():
            config = copy.deepcopy(network.config)
            config.architectures = [type(network).__name__.removeprefix("TF")]  # BertForPreTraining
            config.save_pretrained(folder if name == "model" else os.path.join(folder, ELECTRA_GENERATOR))
        save_tokenizer(tokenizer, folder, type(networks["model"]))  # The inputs of the model export_model.py builds.

    save_folder(os.path.join(output_dir, "checkpoints", "config"), write, "The checkpoints' config and tokenizer")


def last_checkpoint(directory):
    """The last checkpoint that CheckpointManager listed in `directory` (its file "checkpoint") whose files are
    still there; None for none. Deleting a damaged checkpoint's files so makes the one before it the last, where
    tf.train.latest_checkpoint would find none, and a run would silently start over."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    paths = list(state.all_model_checkpoint_paths) if state else []
    return next((path for path in reversed(paths) if tf.io.gfile.exists(path + ".index")), None)


def refuse_an_unfinished_pretraining_run(path):
    """Stops when `path` (local or gs://), given as a model to start from (run_mlm.py, run_classification.py), is a
    run_mlm.py run that did not finish: checkpoints, but no saved model (no config.json). 🤗's own answer, that
    config.json has no model_type, is true but does not say what to do."""
    if not tf.io.gfile.isdir(path) or tf.io.gfile.exists(os.path.join(path, "config.json")):
        return
    latest = last_checkpoint(os.path.join(path, "checkpoints"))
    if latest is None:
        return
    step = int(latest.rsplit("-", 1)[1])  # run_mlm.py numbers its checkpoints by step.
    raise UserError(
        f"{path!r} holds a pre-training run that did not finish: checkpoints (the latest at step {step}) "
        "but no saved model. Finish it by running the same run_mlm.py command again, then pass this folder; or "
        f"turn its latest checkpoint into a model folder with `python export_model.py {path} --output_dir "
        "NEW_FOLDER` and pass --model_name_or_path NEW_FOLDER.")


def check_checkpoint(path, directory):
    """Reads every tensor of the checkpoint `path`; if one cannot be read (a file cut short by a full disk or an
    interrupted copy, a corrupted byte), raises UserError naming it and the last intact checkpoint before it in
    `directory`. Neither script goes back to an earlier step unasked: the user deletes the damaged files, and the
    same command takes the one before (see last_checkpoint). Restoring reads lazily (the optimizer's slots only
    once the first step creates them): a damaged file would otherwise fail deep inside training."""
    error = checkpoint_read_error(path)
    if error is None:
        return
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    earlier = [other for other in (state.all_model_checkpoint_paths if state else []) if other != path]
    intact = next((other for other in reversed(earlier)
                   if tf.io.gfile.exists(other + ".index") and checkpoint_read_error(other) is None), None)
    from diagnostics import damaged_checkpoint_message

    raise UserError(damaged_checkpoint_message(path, error, intact))


def checkpoint_read_error(path):
    """Why the checkpoint `path` cannot be read whole, or None."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError) as error:  # IndexError: "Read less bytes than requested".
        return error
    return None


def restore_last_checkpoint(args, trainer, is_chief):
    """Restores the last checkpoint in --output_dir, if any: weights, optimizer state and step, hence the
    learning-rate schedule. Returns the CheckpointManager that saves the next ones; the other hosts of a
    multi-worker job take part in saving (a collective operation), into a scratch folder."""
    directory = os.path.join(args.output_dir, "checkpoints")
    latest = None if args.overwrite else last_checkpoint(directory)
    if latest:
        check_checkpoint(latest, directory)
    # Adam's moments now, in a new run too: created in the first step, they would make TensorFlow trace it twice; and
    # each one created after a restore would read the checkpoint again (over gs://, a minute for the tests' model).
    create_optimizer_state(trainer.optimizer, trainer.trained_variables)
    checkpoint = tf.train.Checkpoint(**trainer.networks, optimizer=trainer.optimizer)
    if latest:
        checkpoint.restore(latest)
        logger.info("Resuming from %s, at step %d", latest, int(trainer.optimizer.iterations.numpy()))
    return tf.train.CheckpointManager(checkpoint, directory if is_chief else tempfile.mkdtemp(), max_to_keep=3)


class StopAtNonFiniteLoss(keras.callbacks.Callback):
    """Stops training at the end of the first step whose loss is NaN or infinite, and records that step in
    `diverged_at_step` (None while the loss is finite): the script then stops with a UserError that says what to do,
    and saves nothing of the weights after it. The hosts of a multi-worker job agree on that step, whichever saw it:
    one that left alone would leave the others waiting in a collective operation. Pre-training (CheckpointAndStop)
    and fine-tuning both stop so. (Keras' TerminateOnNaN neither says that it stopped nor agrees across hosts.)"""

    def __init__(self, strategy):
        super().__init__()
        self.strategy = strategy
        # One process drives every host of a TPU pod slice; a multi-worker job has a process per host.
        self.hosts_must_agree = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) \
            and count_hosts(strategy) > 1
        self.diverged_at_step = None

    def on_train_batch_end(self, batch, logs=None):
        self.check(diverged=not math.isfinite(float(logs["loss"])))

    def check(self, diverged):
        [diverged] = self.on_any_host([diverged])
        if diverged:
            self.diverged_at_step = int(self.model.optimizer.iterations.numpy())
            self.model.stop_training = True

    def on_any_host(self, flags):
        """Each of `flags` true where it is true on any host: one small all-reduce per step."""
        if not self.hosts_must_agree:
            return flags
        values = self.strategy.run(lambda: tf.constant([float(flag) for flag in flags]))
        return [bool(total > 0) for total in self.strategy.reduce("SUM", values, axis=None)]


class CheckpointAndStop(StopAtNonFiniteLoss):
    """Saves a checkpoint at every multiple of `every_steps` steps (a resumed run too, whichever step it starts from)
    and at the last one. SIGTERM (a preempted VM) and SIGINT (Ctrl-C) take effect at the end of the step: a checkpoint
    is saved, then the script exits with the shell's code for the signal; during a round's evaluation, the checkpoint
    comes at the end of its batch, and the evaluation finishes before the exit. The hosts of a multi-worker job agree
    on that step, whichever was signalled. A NaN or infinite loss stops training with no checkpoint after it. (Keras'
    BackupAndRestore refuses OneDeviceStrategy and numbers checkpoints by save, not step; tf.distribute's
    PreemptionCheckpointHandler ignores SIGTERM on Cloud TPU, CPU and GPU VMs.)"""

    def __init__(self, manager, every_steps, strategy, start_step, is_chief):
        super().__init__(strategy)
        self.manager, self.every_steps, self.is_chief = manager, every_steps, is_chief
        self.last_saved_step = start_step
        self.received_signal = None  # The name of the signal this process received, if any.
        self.stop_requested = False  # By a signal, to this host or to another.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum, frame):
        self.received_signal = signal.Signals(signum).name

    def on_test_batch_end(self, batch, logs=None):
        # A signal in the middle of a round's evaluation: the checkpoint now, not once the evaluation is over (which
        # can take longer than the 30 s a preempted VM is given); the evaluation changes no weight.
        self.check(diverged=False)

    def check(self, diverged):
        """Saves a checkpoint when one is due or a signal came (to any host), and stops training then or after a
        NaN or infinite loss."""
        step = int(self.model.optimizer.iterations.numpy())
        self.stop_requested, diverged = self.on_any_host([self.received_signal is not None, diverged])
        if diverged:
            self.diverged_at_step = step
        elif step > self.last_saved_step and (self.stop_requested or
                                              step // self.every_steps > self.last_saved_step // self.every_steps):
            self.save(step)
        if self.stop_requested or diverged:  # Never lowered here: a round's evaluation follows a stop in training.
            self.model.stop_training = True

    def save(self, step):
        directory = self.manager.directory
        try:
            with out_of_space_in_run(directory, f"the checkpoint of step {step}", directory):
                self.manager.save(checkpoint_number=step)
        except UserError:  # The files of the failed save go, giving their space back; the last good one stays.
            for leftover in tf.io.gfile.glob(os.path.join(directory, f"ckpt-{step}[._]*")):
                delete(leftover)
            raise
        self.last_saved_step = step

    def finish(self, step):
        """After training: exits after a NaN loss or a stop signal, else saves the last step's checkpoint."""
        if self.diverged_at_step is not None:
            latest = self.manager.latest_checkpoint
            raise UserError(f"the loss became NaN or infinite at step {self.diverged_at_step}. " + (
                f"The last good checkpoint, {latest}, is kept. Lower --learning_rate or raise --warmup_steps, then "
                "run the same command again to resume from it." if latest else "No checkpoint was written yet: lower "
                "--learning_rate or raise --warmup_steps, then run the same command again; it starts over."))
        if step > self.last_saved_step:
            self.save(step)  # The final step, whatever the interval.
        if not self.is_chief:
            tf.io.gfile.rmtree(self.manager.directory)  # Its scratch folder.
        if self.stop_requested or self.received_signal:
            logger.info("Stopped by %s at step %d, after saving checkpoint %s. Run the same command to resume.",
                        self.received_signal or "a signal to another host", step, self.manager.latest_checkpoint)
            # The shell's code for "killed by that signal"; another host's signal counts as a SIGTERM.
            raise SystemExit(128 + signal.Signals[self.received_signal or "SIGTERM"])


# ----------------------------------------------------------------------------------------------------------------
# What a run records as it goes


class ResultsFile(dict):
    """training_results.json in --output_dir, rewritten by the chief at every record: the run's batch (checked when
    it resumes), its metrics so far, and, once saved, the step of its model (a finished run)."""

    def __init__(self, output_dir, is_chief, overwrite):
        self.path, self.is_chief = os.path.join(output_dir, "training_results.json"), is_chief
        super().__init__({} if overwrite or not tf.io.gfile.exists(self.path) else self.read())

    def read(self):
        with tf.io.gfile.GFile(self.path) as f:
            try:
                results = json.load(f)
            except json.JSONDecodeError:  # Not this script's: check_output_dir refuses the folder.
                return {}
        return results if isinstance(results, dict) else {}

    def record(self, **fields):
        self.update(fields)
        if self.is_chief:
            tf.io.gfile.makedirs(os.path.dirname(self.path))  # The first record comes before any checkpoint.
            with out_of_space_in_run(os.path.dirname(self.path), os.path.basename(self.path),
                                     os.path.join(os.path.dirname(self.path), "checkpoints")):
                try:  # Written whole, then renamed: a full disk leaves the last complete file.
                    with tf.io.gfile.GFile(self.path + ".tmp", "w") as f:
                        json.dump(self, f, indent=2)
                    tf.io.gfile.rename(self.path + ".tmp", self.path, overwrite=True)
                except Exception:
                    delete(self.path + ".tmp")
                    raise


class RoundEnd(keras.callbacks.Callback):
    """At the end of each round (a Keras epoch), its training and evaluation metrics and its speed to the log, to
    `results` and to TensorBoard, at the optimizer step they belong to, with the learning rate. The speed counts
    from the end of the round's first execution (which, in a fit call's first round, also traces and compiles the
    step and fills the input pipeline) to the end of its last; a round of one execution counts from its start."""

    def __init__(self, results, log_dir, learning_rate_schedule, throughput):
        super().__init__()
        self.results, self.learning_rate_schedule, self.throughput = results, learning_rate_schedule, throughput
        self.log_dir, self.checkpoint_dir = log_dir, os.path.join(os.path.dirname(log_dir), "checkpoints")
        with out_of_space_in_run(log_dir, "TensorBoard logs", self.checkpoint_dir):
            self.writers = {part: tf.summary.create_file_writer(os.path.join(log_dir, part))
                            for part in ("train", "eval")}
        self.execution_ends = []  # (time, steps done in the round) at the end of each execution of the round.
        self.compared_with_input = False
        self.ended_at = None  # When the last round's figures were written.

    def write_tensorboard(self, part, metrics, step):
        with out_of_space_in_run(self.log_dir, "TensorBoard logs", self.checkpoint_dir):
            with self.writers[part].as_default(step=step):
                for name, value in metrics.items():
                    tf.summary.scalar(name, value)
                if part == "train":
                    tf.summary.scalar("learning_rate", self.learning_rate_schedule(step))
            self.writers[part].flush()

    def on_epoch_begin(self, epoch, logs=None):
        self.execution_ends = [(time.perf_counter(), 0)]

    def on_train_batch_end(self, batch, logs=None):
        self.execution_ends.append((time.perf_counter(), batch + 1))  # `batch`: the execution's last step.

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        train = {name: value for name, value in logs.items() if not name.startswith("val_")}
        evaluation = {name.removeprefix("val_"): value for name, value in logs.items() if name.startswith("val_")}
        ends = self.execution_ends
        (first_time, first_steps), (last_time, last_steps) = ends[1] if len(ends) > 2 else ends[0], ends[-1]
        speed = self.throughput.figures(last_steps - first_steps, last_time - first_time)
        logger.info("Step %d: %s; %s", step, format_metrics(logs), self.throughput.describe(speed))
        if self.throughput.input_samples_per_second and not self.compared_with_input:
            self.results.record(input_pipeline_share=self.throughput.compare_with_input(speed))
            self.compared_with_input = True
        self.results.record(step=step, final_train=train, speed=speed,
                            **({"final_eval": evaluation} if evaluation else {}))
        self.write_tensorboard("train", {**train, **speed}, step)
        self.write_tensorboard("eval", evaluation, step)
        self.ended_at = time.perf_counter()


def save_model(args, trainer, tokenizer, config, results, plan, pair_objective):
    """At a run's end, the model, its tokenizer, a PyTorch copy and a model card into --output_dir (and to the Hub
    with --hub_model_id); then, in training_results.json, the step it was saved at: the run is finished.
    `pair_objective`: the name of --objective nsp or sop, None for the others."""
    step, model = int(trainer.optimizer.iterations.numpy()), trainer.networks["model"]
    electra = args.objective == "electra"
    results.record(step=step, model_type=config.model_type, vocab_size=config.vocab_size,
                   train_samples=plan.train_samples)
    metrics = "\n".join(f"| {name} | {value:.4f} |" for name, value in results.get("final_eval", {}).items())
    origin = (f"continued from `{args.model_name_or_path}`" if args.model_name_or_path
              else f"`{args.pretrained_model_config}` from scratch")
    first, last = getattr(trainer, "pair_loss_ramp", (0, 0))
    ramp = f", rising from 0 at step {first} to it at step {last}" if last else ""
    clipping = f", gradients clipped to a norm of {args.max_grad_norm}" if args.max_grad_norm else ""
    what = (f"An ELECTRA discriminator pre-trained by replaced-token detection (`--objective electra`, a generator "
            f"of hidden size {trainer.generator.config.hidden_size}, saved in `{ELECTRA_GENERATOR}/` as a fill-mask "
            f"model; discriminator weight {trainer.discriminator_weight})" if electra
            else f"A {config.model_type} masked language model pre-trained on sentence pairs with "
            f"{pair_objective} (`--objective {args.objective}`, pair loss weight "
            f"{trainer.pair_loss_weight}{ramp}), its pair head kept,"
            if pair_objective else f"A {config.model_type} masked language model pre-trained")
    description = f"""{what} with TensorFlow (`run_mlm.py` of a TF + 🤗 Transformers TPU pre-training pipeline),
{origin}.

- Training data: `{args.train_dataset}`, {plan.train_samples} samples of {args.max_length} tokens
- Evaluation data: `{args.eval_dataset}`
- Tokenizer: `{args.tokenizer}`, vocabulary of {config.vocab_size}
- Config overrides: `{args.config_overrides or 'none'}`
- Steps: {step} at a global batch of {plan.global_batch_size} samples ({results['num_replicas']} replicas),
  learning rate {args.learning_rate}, weight decay {args.weight_decay_rate}{clipping}

## Final evaluation

{ELECTRA_METRICS if electra else MLM_METRICS + (PAIR_METRICS if pair_objective else "")}

| metric | value |
|---|---|
{metrics or '| (no evaluation data) | |'}"""

    def write(folder):
        save_model_folder(model, tokenizer, folder)
        if electra:  # The discriminator has no pipeline of its own; its encoder extracts features.
            write_model_card(folder, args.output_dir, "feature-extraction", "The capital of France is Paris.",
                             description)
            generator_dir = os.path.join(folder, ELECTRA_GENERATOR)
            save_model_folder(trainer.generator, tokenizer, generator_dir)
            write_model_card(generator_dir, args.output_dir.rstrip("/") + "-generator", "fill-mask",
                             "The capital of France is <mask>.", "The generator of an ELECTRA run, saved with "
                             "its discriminator (the folder above), whose embeddings it shares.")
        else:
            write_model_card(folder, args.output_dir, "fill-mask", "The capital of France is <mask>.", description)

    save_folder(args.output_dir, write, "Model, tokenizer and model card", args.hub_model_id,  # Logs go to the Hub.
                f"Pre-trained for {step} steps", ignore_patterns=["checkpoints/*", OutputDirLease.NAME])
    results.record(saved_model_step=step)


MLM_METRICS = """\
`loss`, `perplexity` and `masked_accuracy` cover every position chosen for prediction; the `..._at_mask` metrics
only those whose input was `<mask>`, for the model and for a table of the training tokens' frequencies
(`frequency_...`); `nats_beyond_frequency` is how much lower the model's cross-entropy is there than the table's."""
PAIR_METRICS = """ The masked LM's loss is `masked_lm_loss`; the pair head's `pair_loss` and `pair_accuracy` (half the
pairs changed: 0.5 is chance); `loss`, the masked LM's loss plus the pair loss times its weight."""
ELECTRA_METRICS = """The generator's `generator_loss` and `generator_accuracy` at the masked positions; the
discriminator's `discriminator_loss` and `discriminator_accuracy` over every real token, its accuracy on the tokens
the generator replaced (`replaced_accuracy`) and on the others (`original_accuracy`); `replaced_share`, the share of
tokens replaced; `nats_beyond_prior`, how much lower the discriminator's loss is than that of a constant guess of that
share (0: nothing learned from the context); `loss`, the generator's loss plus the weighted discriminator's."""


def out_of_space_in_run(folder, what, checkpoint_dir):
    """utils.out_of_space_named for what a run writes as it goes: its checkpoints stay, and after space is freed,
    the same command resumes from the last one."""
    def then():
        latest = last_checkpoint(checkpoint_dir)
        return (f"The checkpoints in {checkpoint_dir!r} are intact, the last {latest!r}: free space, then run the "
                "same command again; it resumes from there." if latest else "No checkpoint was saved yet: free "
                "space, then run the same command again; it starts over.")

    return out_of_space_named(folder, what, then)


def warn_if_nothing_learned_from_context(results):
    """Below a tenth of a nat at <mask> (a masked LM), or a tenth of the loss of a constant guess (an ELECTRA
    discriminator), the model has learned next to nothing from the context."""
    final = results.get("final_eval", {})
    beyond = final.get("nats_beyond_frequency")
    if beyond is not None and beyond < 0.1:
        logger.warning("At <mask> positions, the model predicts tokens %s a table of token frequencies does "
                       "(%+.3f nats): it has learned next to nothing from the context yet. Train longer, or with "
                       "another recipe (learning rate, batch size, masking rate).",
                       "worse than" if beyond < 0 else "barely better than", beyond)
    beyond, share = final.get("nats_beyond_prior"), final.get("replaced_share")
    if beyond is not None and 0 < share < 1:
        constant_guess = -share * math.log(share) - (1 - share) * math.log(1 - share)
        if beyond < 0.1 * constant_guess:
            logger.warning("The discriminator tells replaced tokens from original ones %s a constant guess of their "
                           "share does (%+.3f nats per token, %.0f %% of the guess's loss): it has learned next to "
                           "nothing from the context yet, and fine-tuned, its encoder does worse than random weights. "
                           "A small model can stay there for thousands of steps (benchmarks/electra.md); a "
                           "masked LM (--objective mlm) learns from the context sooner.",
                           "worse than" if beyond < 0 else "barely better than", beyond,
                           100 * beyond / constant_guess)


def format_metrics(metrics):
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
