#!/usr/bin/env python
"""Step 3: pre-train a masked language model on the TFRecord shards of step 2, from scratch or from a model.

The model is a 🤗 Transformers TF…ForMaskedLM (RoBERTa by default) built from a config, or (--model_name_or_path)
one that exists, which continues pre-training with its own weights and LM head, on the shards of its tokenizer. It
trains with Keras `model.fit` under a tf.distribute strategy: TPUStrategy on a TPU VM (its chips are
found in sysfs) or a TPU Node or pod slice (--tpu_name); MultiWorkerMirroredStrategy when TF_CONFIG describes a
cluster; MirroredStrategy over several GPUs (or --num_cpu_replicas CPU devices); TensorFlow's default on one. The
training step, the input pipeline and the masking are in masked_lm.py, the file to copy into your own program.
With --objective electra, ELECTRA's replaced-token detection (electra.py) trains a discriminator, the model saved,
and a smaller generator beside it, from an ELECTRA config or continuing such a pair. With --objective nsp or sop, a
BERT or ALBERT (…ForPreTraining) trains on sentence pairs, its masked LM beside BERT's next-sentence prediction or
ALBERT's sentence-order prediction (masked_lm.py's SentencePairTrainer and make_pairs).

Training runs in rounds of --eval_every_steps, each ending with an evaluation: metrics at the masked positions
(loss, masked_accuracy, perplexity, and against a table of token frequencies) to the log, TensorBoard
({output_dir}/logs) and {output_dir}/training_results.json. Checkpoints go to {output_dir}/checkpoints; the same
command run again resumes from the last one (run_folder.py). At the end, the model and tokenizer are saved to
--output_dir for `pipeline("fill-mask", model=output_dir, framework="tf")`, with a copy for 🤗 Transformers 5 and
PyTorch in {output_dir}/pytorch. Every path may be gs://; each is checked before anything else starts.

TensorFlow, and the modules that import it (masked_lm.py, run_folder.py, 🤗's TF models), are imported in the
functions that use them, once the flags are parsed: --help and a mistyped flag answer at once, not after the seconds
that TensorFlow takes to start.

Example (a small model on a CPU):
    python run_mlm.py --train_dataset tfrecords/train --eval_dataset tfrecords/validation \\
        --tokenizer unigram-tokenizer --config_overrides hidden_size=256,num_hidden_layers=4,... --no_tpu
"""

import argparse
import logging
import os
import sys
import time

from devices import (Throughput, add_hardware_arguments, check_input_pipeline, check_paths_for_pod, host_addresses,
                     host_index, plan_training, set_up_training, strategy_name)
from models import (ARCHITECTURES, ELECTRA_GENERATOR, check_max_length, config_overrides, count_parameters,
                    load_config, load_pretrained_model, load_tokenizer, override_config,
                    refuse_a_tokenizer_not_the_models, saved_generator, weights_fingerprint, with_typed_pairs)
from shards import (MIN_MAX_LENGTH, TOKEN_COUNTS_NAME, damaged_shards_named, find_shards, read_token_counts,
                    shards_word_segmenter)
from utils import (UserError, fraction, non_negative_float, non_negative_int, positive_float, positive_int,
                   probability, share)

logger = logging.getLogger("run_mlm")

# The objectives on sentence pairs, for the architectures with a pair head (masked_lm.PAIR_HEADS).
PAIR_OBJECTIVES = {"nsp": "next-sentence prediction", "sop": "sentence-order prediction"}
# The weights that a model continued on pairs may lack, a masked LM's: they start anew (TensorFlow's names, PyTorch's).
PAIR_HEAD_LAYERS = ("pooler", "nsp___cls", "seq_relationship", "sop_classifier")


def main(args):
    import tensorflow as tf

    from run_folder import (CheckpointAndStop, OutputDirLease, ResultsFile, RoundEnd, check_where_the_run_starts,
                            data_stream, format_metrics, refuse_an_unfinished_pretraining_run, restore_last_checkpoint,
                            save_checkpoints_config, save_model, warn_if_nothing_learned_from_context)

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    strategy, on_tpu, jit_compile = set_up_training(
        args, input_paths=(args.train_dataset, args.eval_dataset, args.tokenizer, args.pretrained_model_config,
                           args.model_name_or_path))
    is_chief = strategy.extended.should_checkpoint  # Only the chief writes into --output_dir.
    if is_chief:
        OutputDirLease(args.output_dir).hold()  # At once: a second run into this folder stops here.

    # The data and the config, checked before anything is built: mistakes cost seconds, not minutes.
    if args.model_name_or_path:
        refuse_an_unfinished_pretraining_run(args.model_name_or_path)
    tokenizer = load_tokenizer(args.tokenizer, "--tokenizer")
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise UserError(f"the tokenizer {args.tokenizer!r} has no mask or pad token; train one with "
                        "train_unigram.py.")
    train_files, train_sizes = find_shards(args.train_dataset, args.max_length, tokenizer, args.tokenizer)
    eval_files, eval_sizes = find_shards(args.eval_dataset, args.max_length, tokenizer, args.tokenizer) \
        if args.eval_dataset else ([], [])
    config = model_config(args, tokenizer)
    if args.objective in PAIR_OBJECTIVES and config.type_vocab_size > 1:  # Saved with the model, for fine-tuning.
        tokenizer = with_typed_pairs(tokenizer)
    generator = generator_config(args, config) if args.objective == "electra" else None
    plan = plan_training(args, strategy, train_sizes, eval_sizes)
    if on_tpu:
        check_paths_for_pod(args, plan.num_hosts)
    log_plan(args, strategy, plan, on_tpu, jit_compile, train_files, eval_files)

    # Where the run starts: nothing left to do, from scratch, or from the last checkpoint.
    results = ResultsFile(args.output_dir, is_chief, args.overwrite)
    stream = data_stream(args, train_files, train_sizes)  # The recipe of the batches and masks: a resumed run keeps it.
    if not check_where_the_run_starts(args, plan, results, is_chief, config, generator, stream):
        return
    with strategy.scope():  # Every variable (weights, optimizer slots) is created on every replica.
        trainer, learning_rate = build_trainer(args, config, tokenizer, plan, jit_compile, train_files, generator)
        checkpoints = restore_last_checkpoint(args, trainer, is_chief)
    if is_chief:
        save_checkpoints_config(args.output_dir, trainer.networks, tokenizer)
    start_step = int(trainer.optimizer.iterations.numpy())
    throughput = Throughput.of(args, config, plan, strategy, on_tpu, generator)
    logger.info("Model: %s with %.1fM parameters, %.4g MFLOP per token to train (LM head at %s); %s",
                describe_model(config, generator), count_parameters(*trainer.networks.values()) / 1e6,
                throughput.flops_per_token / 1e6, f"{args.max_predictions_per_seq} of {args.max_length} positions"
                if args.max_predictions_per_seq else "every position", throughput.describe_peak())
    if start_step == 0:
        results.clear()  # Nothing of an earlier run that left no checkpoint.
    results.record(global_batch_size=plan.global_batch_size, per_replica_batch_size=args.per_replica_batch_size,
                   num_replicas=strategy.num_replicas_in_sync, data_stream=stream,
                   gradient_accumulation_steps=args.gradient_accumulation_steps,
                   started_from=args.model_name_or_path, objective=args.objective)  # None: random weights.

    # Train in rounds, each ending with an evaluation, checkpointing as it goes.
    # Once: the word-start table reads the whole vocabulary.
    data = data_arguments(args, tokenizer, shards_word_segmenter(train_files, eval_files))
    training_data, eval_data = distributed_datasets(args, strategy, plan, data, train_files, eval_files)
    round_end = RoundEnd(results, os.path.join(args.output_dir if is_chief else checkpoints.directory, "logs"),
                         learning_rate, throughput)
    stopper = CheckpointAndStop(checkpoints, args.checkpoint_every_steps, strategy, start_step, is_chief)
    with damaged_shards_named(train_files + eval_files):
        masked_share = state_the_masking(args, data, train_files)
        results.record(masked_share=masked_share)
        round_end.write_tensorboard("train", {"masked_share": masked_share}, step=start_step)
        if args.input_check_seconds:  # This host's pipeline alone, as training builds it.
            this_host = tf.distribute.InputContext(plan.num_hosts, host_index(strategy), plan.replicas_per_host)
            speed = check_input_pipeline(host_dataset(args, plan, data, train_files)(this_host),
                                         args.input_check_seconds, plan.batch_per_replica_step, throughput)
            results.record(input_pipeline_samples_per_second=speed)
        if start_step == 0 and eval_files:
            metrics = trainer.evaluate(eval_data, steps=plan.eval_steps, return_dict=True, verbose=0)
            logger.info("Evaluation before training: %s", format_metrics(metrics))
            round_end.write_tensorboard("eval", metrics, step=0)
            results.record(step_0_eval=metrics)
        train(trainer, training_data, eval_data, plan, start_step, stopper, round_end)
    stopper.finish(int(trainer.optimizer.iterations.numpy()))  # Exits after a stop signal or a NaN loss.

    logger.info("Weights fingerprint: %s", weights_fingerprint(*trainer.networks.values()))  # The same on every host.
    warn_if_nothing_learned_from_context(results)
    if is_chief:
        save_model(args, trainer, tokenizer, config, results, plan, PAIR_OBJECTIVES.get(args.objective))


def log_plan(args, strategy, plan, on_tpu, jit_compile, train_files, eval_files):
    """What will run where: a user reads here whether the hardware, batch and steps are the ones meant."""
    logger.info("Strategy: %s with %d replica(s) on %d host(s); global batch %d (%d per replica x %d replicas x %d "
                "accumulation steps); XLA %s; %s", strategy_name(strategy), strategy.num_replicas_in_sync,
                plan.num_hosts, plan.global_batch_size, args.per_replica_batch_size, strategy.num_replicas_in_sync,
                args.gradient_accumulation_steps, "implicit (TPU)" if on_tpu else "on" if jit_compile else "off",
                "bfloat16 mixed precision" if args.bfloat16 else "float32")
    if plan.num_hosts > 1:
        logger.info("Hosts, each with an input pipeline of its own: %s", ", ".join(host_addresses(strategy)))
    logger.info("Training: %d samples in %d shards, %d steps per epoch, %d steps in all; evaluation: %s; "
                "LM head at %s", plan.train_samples, len(train_files), plan.steps_per_epoch, plan.total_steps,
                f"{plan.eval_samples} samples, {plan.eval_steps} steps" if eval_files else "none",
                f"{args.max_predictions_per_seq} positions per sequence" if args.max_predictions_per_seq
                else "every position")


def train(trainer, training_data, eval_data, plan, start_step, stopper, round_end):
    """Trains from `start_step` to plan.total_steps, in the model.fit calls of fit_calls. Each call takes the run's
    one stream of batches (a function of --seed) from its first step on: a resumed run trains on the batches and
    masks that the run never stopped trains on at the same steps."""
    start_time = time.perf_counter()
    for first, round_steps, num_rounds in fit_calls(start_step, plan.total_steps, plan.eval_every):
        logger.info("Steps %d to %d of %d, in %d round(s) of %d steps, each ending with an evaluation", first + 1,
                    first + round_steps * num_rounds, plan.total_steps, num_rounds, round_steps)
        first_round = first // plan.eval_every  # Keras' epochs are the run's rounds, in its progress lines too.
        trainer.fit(training_data(first), steps_per_epoch=round_steps, initial_epoch=first_round,
                    epochs=first_round + num_rounds, validation_data=eval_data, validation_steps=plan.eval_steps,
                    callbacks=[stopper, round_end], verbose=1 if sys.stdout.isatty() else 2)
        if trainer.stop_training:
            return
    steps = int(trainer.optimizer.iterations.numpy()) - start_step
    if steps:
        end = time.perf_counter()
        logger.info("Trained %d steps in %.0f s (%.1f samples/s); model.fit returned %.1f s after the last round's "
                    "line", steps, end - start_time, steps * plan.global_batch_size / (end - start_time),
                    end - round_end.ended_at)


# ----------------------------------------------------------------------------------------------------------------
# The data


def data_arguments(args, tokenizer, segmenter=None):
    """make_dataset's `masking` (mask_tokens' arguments), `pairs` (make_pairs', or None) and
    `word_starts_in_shards`, from the flags, the tokenizer and the word segmenter of the shards (or None)."""
    from masked_lm import pair_template, word_start_table

    try:
        word_starts = None if args.masking == "token" else word_start_table(tokenizer)
    except ValueError as err:  # A tokenizer whose pieces do not show where words begin.
        raise UserError(str(err)) from err
    if args.masking != "token":
        logger.info("Whole words: %s", f"those of the word segmenter {segmenter}, stored in the shards" if segmenter
                    else "a piece that follows a space begins one, and so does each piece of a script written "
                         "without spaces (prepare_tfrecord_shards.py --word_segmenter cuts finer words)")
    # ELECTRA's replacement: a chosen token becomes <mask> (85 %) or stays, never a random token: the generator
    # is what replaces tokens. A masked LM's: <mask>, else half a random token, half unchanged (BERT's 80/10/10).
    electra = args.objective == "electra"
    mask_share = args.mask_share or (0.85 if electra else 0.8)
    masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                   vocab_size=len(tokenizer), mlm_probability=args.mlm_probability, mask_share=mask_share,
                   random_share=0.0 if electra else (1 - mask_share) / 2, max_predictions=args.max_predictions_per_seq,
                   spans=args.masking == "span", word_starts=word_starts)
    if args.cls_bag_of_words and tokenizer.cls_token_id is None:
        raise UserError(f"--cls_bag_of_words trains the token a classification head reads, but the tokenizer "
                        f"{args.tokenizer} has none (no cls_token). Drop the flag, or use a tokenizer that has one.")
    pairs = dict(template=pair_template(tokenizer), sentence_order=args.objective == "sop") \
        if args.objective in PAIR_OBJECTIVES else None
    return dict(masking=dict(masking, summary_token_id=tokenizer.cls_token_id) if args.cls_bag_of_words else masking,
                pairs=pairs, word_starts_in_shards=segmenter is not None)


# Batches of the first shards that state_the_masking masks: thousands of samples, a second or two of the host's CPU.
MASKING_CHECK_BATCHES = 16


def state_the_masking(args, data, train_files):
    """The share of the training tokens chosen for prediction, measured on the first batches of the training shards
    (masked as evaluation batches are: no shuffle buffer to fill), logged beside --mlm_probability, with a warning
    that names the cause when it falls short by more than a fifth. Returns the share."""
    import tensorflow as tf

    from masked_lm import default_max_predictions, make_dataset, masked_share

    def share(masking):
        return masked_share(make_dataset(
            train_files, tf.distribute.InputContext(), batch_size=args.per_replica_batch_size, seed=args.seed,
            max_length=args.max_length, training=False, num_batches=MASKING_CHECK_BATCHES,
            **dict(data, masking=masking)).take(MASKING_CHECK_BATCHES), masking["special_token_ids"])

    with tf.device("/cpu:0"):
        done = share(data["masking"])
        logger.info("Masking: %.1f %% of the tokens chosen for prediction, for --mlm_probability %g (--masking %s)",
                    100 * done, args.mlm_probability, args.masking)
        if done < 0.8 * args.mlm_probability:
            cap = args.max_predictions_per_seq
            uncapped = share(dict(data["masking"], max_predictions=0)) if cap else done
            needed = default_max_predictions(args.mlm_probability, args.max_length, args.masking)
            if uncapped <= 1.1 * done:
                cause = "the samples hold few tokens that can be masked"
            elif cap < needed:
                cause = (f"--max_predictions_per_seq {cap} is below the {needed} positions per sequence that "
                         f"--masking {args.masking} needs here (without the cap: {100 * uncapped:.1f} %). Leave it "
                         "to its default")
            else:
                cause = (f"whole words of many tokens do not fit under --max_predictions_per_seq {cap} and are left "
                         f"out (without the cap: {100 * uncapped:.1f} %). In a language written without spaces, write "
                         "the shards with a --word_segmenter, or use --masking token")
            logger.warning("Only %.1f %% of the tokens are masked, where --mlm_probability asks %g %%: %s.",
                           100 * done, 100 * args.mlm_probability, cause)
    return done


def host_dataset(args, plan, data, files, training=True, first_step=0):
    """One host's data, as a function of its input context: make_dataset over its own shards. A training batch holds
    every micro-batch of a step, for one of the host's replicas, from `first_step` on; evaluation is the
    plan.eval_steps batches of every round. `data`: data_arguments."""
    from masked_lm import make_dataset

    size = dict(batch_size=plan.batch_per_replica_step, shuffle_buffer_size=args.shuffle_buffer_size,
                skip_batches=first_step * plan.replicas_per_host) if training \
        else dict(batch_size=args.per_replica_batch_size, num_batches=plan.eval_steps * plan.replicas_per_host)
    return lambda input_context: make_dataset(files, input_context, max_length=args.max_length, seed=args.seed,
                                              training=training, **data, **size)


def distributed_datasets(args, strategy, plan, data, train_files, eval_files):
    """(training(first_step), evaluation): on each host, its own shards, for its own replicas."""
    def training(first_step):
        return strategy.distribute_datasets_from_function(
            host_dataset(args, plan, data, train_files, first_step=first_step))

    return training, strategy.distribute_datasets_from_function(
        host_dataset(args, plan, data, eval_files, training=False)) if eval_files else None


# ----------------------------------------------------------------------------------------------------------------
# The model


def model_config(args, tokenizer):
    """The model config: --pretrained_model_config, --config_overrides, and the tokenizer's vocabulary and ids; or
    that of --model_name_or_path, whose weights fix every shape: dropout overrides only, and its own tokenizer."""
    from masked_lm import PAIR_HEADS

    start = args.model_name_or_path
    config = load_config(start or args.pretrained_model_config,
                         "--model_name_or_path" if start else "--pretrained_model_config",
                         "Pass a Hub model id (online), or a local folder holding config.json"
                         + ("." if start else ", or a config file."))
    changed = override_config(config, args.config_overrides)
    if config.model_type == "deberta" and config.relative_attention:
        raise UserError("DeBERTa (v1) with relative_attention=True does not train under XLA, which TPUs always use "
                        "(TensorFlow's DeBERTa: a gradient in its attention fails to compile). Use deberta-v2 "
                        "(configs/deberta-v3-base.json), or add relative_attention=False to --config_overrides.")
    if args.objective == "electra" and config.model_type != "electra":
        raise UserError(f"--objective electra trains an ELECTRA discriminator and generator, but "
                        f"{start or args.pretrained_model_config!r} is a {config.model_type} config. Pass an ELECTRA "
                        "config (model_type electra), e.g. a folder with ElectraConfig(...).save_pretrained().")
    if args.objective in PAIR_OBJECTIVES and config.model_type not in PAIR_HEADS:
        raise UserError(f"--objective {args.objective} trains a sentence-pair head, which 🤗's TensorFlow models "
                        f"have for {' and '.join(sorted(PAIR_HEADS))} only, but "
                        f"{start or args.pretrained_model_config!r} is a {config.model_type} config. Pass a BERT or "
                        "ALBERT config (configs/bert-base.json, configs/albert-base.json), or train a masked LM "
                        "(--objective mlm).")
    if config.model_type not in ARCHITECTURES:
        logger.warning("%s is not among the architectures tested with this pipeline (README, \"Architectures\"): it "
                       "may fail at its first step, and it gets no PyTorch copy.", config.model_type)
    if not start:
        config.update(dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
        check_max_length(config, args.max_length, can_override=True)
        return config
    if changed:
        field, held = next(iter(changed.items()))
        raise UserError(f"--config_overrides sets {field}, but the model of --model_name_or_path {start!r} "
                        f"has {field}={held!r} in its weights: starting from a model, "
                        "only dropout may change. Drop it, or train a new model of that shape from scratch "
                        "(--pretrained_model_config).")
    refuse_a_tokenizer_not_the_models(start, args.tokenizer, config, tokenizer)
    check_max_length(config, args.max_length, weights_from=start)
    return config


def generator_config(args, config):
    """The config of ELECTRA's generator: continuing a pair (--model_name_or_path), that of the generator saved
    beside it, with the same dropout overrides; else a new generator's (electra.generator_config), a
    --generator_hidden_size fraction of the discriminator's `config`. A discriminator without its generator (from
    elsewhere, or a partial copy) continues with a new one: said in a warning, before anything is built."""
    from electra import GENERATOR_HIDDEN_SIZE, generator_config as scaled_config

    saved = saved_generator(args.model_name_or_path)
    if saved:
        if args.generator_hidden_size is not None:
            logger.warning("--generator_hidden_size has no effect: the generator saved in %s continues, its size "
                           "fixed by its weights.", saved)
        generator = load_config(saved, "--model_name_or_path", f"--objective electra continues the generator "
                                f"saved in {ELECTRA_GENERATOR}/ beside the discriminator. Copy that folder whole "
                                "from the pair's folder, or remove it to start a new generator.")
        if args.config_overrides:  # Dropout only: model_config checked them.
            generator.update_from_string(args.config_overrides)
        return generator
    fraction = args.generator_hidden_size or GENERATOR_HIDDEN_SIZE
    try:
        generator = scaled_config(config, fraction)
    except ValueError as err:
        raise UserError(f"bad --generator_hidden_size {fraction}: {err}.") from err
    if args.model_name_or_path:
        logger.warning("%s has no %s/ folder, where run_mlm.py saves the generator beside its discriminator: a new "
                       "generator starts from random weights, of hidden size %d (--generator_hidden_size %s of the "
                       "discriminator's %d), and its first steps replace tokens almost at random. To continue a "
                       "pair that has its generator, copy its %s/ folder there too.", args.model_name_or_path,
                       ELECTRA_GENERATOR, generator.hidden_size, fraction, config.hidden_size, ELECTRA_GENERATOR)
    return generator


def build_trainer(args, config, tokenizer, plan, jit_compile, train_files, generator_config=None):
    """The model (new, or that of --model_name_or_path) in a compiled MaskedLMTrainer (a SentencePairTrainer for
    --objective nsp or sop), and its learning-rate schedule; or, with `generator_config` (--objective electra), an
    ELECTRA discriminator and generator (new, or those of --model_name_or_path: its generator if it has one, see
    generator_config) in an ElectraTrainer. Call it in the strategy's scope. The token counts beside the shards give
    the frequency baseline, and (--output_bias) a new LM head's starting output bias: a loaded one keeps its own."""
    from transformers import (TFAutoModelForMaskedLM, TFAutoModelForPreTraining, TFElectraForMaskedLM,
                              TFElectraForPreTraining, create_optimizer)

    from electra import DISCRIMINATOR_WEIGHT, ElectraTrainer
    from masked_lm import MaskedLMTrainer, SentencePairTrainer, frequency_log_probs, start_from_token_frequencies

    def start(model_class, model_config, weights_from):
        if weights_from:  # On pairs, a masked LM continues with a new pooler and pair head.
            return load_pretrained_model(model_class, weights_from, "--model_name_or_path", model_config,
                                         new_head=PAIR_HEAD_LAYERS if args.objective in PAIR_OBJECTIVES else False)
        model = model_class.from_config(model_config)
        model.build_in_name_scope()  # The weights now, with the names that save_pretrained expects.
        return model

    # The network with the LM head (a masked LM, or ELECTRA's generator), and the folder of its weights (None: new).
    lm_weights = args.model_name_or_path if generator_config is None else saved_generator(args.model_name_or_path)
    if args.output_bias and lm_weights:  # Given, not defaulted (None): refused rather than ignored, before loading.
        raise UserError(f"--output_bias sets a new LM head's starting bias, but the LM head of {lm_weights} is "
                        "loaded with the bias it learned. Drop --output_bias.")
    if generator_config is None:
        model_class = TFAutoModelForPreTraining if args.objective in PAIR_OBJECTIVES else TFAutoModelForMaskedLM
        mlm = lm = start(model_class, config, lm_weights)
    else:  # ElectraTrainer then has the generator read the discriminator's embeddings, dropping its own.
        mlm = start(TFElectraForPreTraining, config, args.model_name_or_path)
        generator = lm = start(TFElectraForMaskedLM, generator_config, lm_weights)
    optimizer, learning_rate = create_optimizer(init_lr=args.learning_rate, num_train_steps=plan.total_steps,
                                                num_warmup_steps=plan.warmup_steps,
                                                weight_decay_rate=args.weight_decay_rate,
                                                adam_global_clipnorm=args.max_grad_norm)
    token_counts, frequency_table = read_token_counts(train_files), None
    if token_counts is not None:
        frequency_table = frequency_log_probs(token_counts, tokenizer.all_special_ids)
        if args.output_bias != "zeros" and not lm_weights:  # A checkpoint restored later replaces it.
            start_from_token_frequencies(lm, frequency_table)
    elif args.output_bias == "frequencies":
        raise UserError(f"--output_bias frequencies reads the token counts written beside the training shards "
                        f"({TOKEN_COUNTS_NAME}), and {os.path.dirname(train_files[0])} has none (shards of the "
                        "original example). Write the shards with prepare_tfrecord_shards.py, or drop --output_bias.")
    else:
        logger.warning("No %s beside the training shards (shards of the original example): the metrics leave out "
                       "the token-frequency baseline, and the LM head's bias starts at zeros.", TOKEN_COUNTS_NAME)
    if generator_config is not None:
        trainer = ElectraTrainer(mlm, generator, args.discriminator_weight or DISCRIMINATOR_WEIGHT,
                                 args.gradient_accumulation_steps, jit_compile, seed=args.seed)
    else:
        trainer_class = SentencePairTrainer if args.objective in PAIR_OBJECTIVES else MaskedLMTrainer
        pair_loss = {name: vars(args)[name] for name in ("pair_loss_weight", "pair_loss_ramp")
                     if vars(args)[name] is not None}  # None: SentencePairTrainer's defaults.
        trainer = trainer_class(mlm, tokenizer.mask_token_id, args.gradient_accumulation_steps, jit_compile,
                                frequency_log_probs=frequency_table, **pair_loss)
    trainer.compile(optimizer=optimizer, steps_per_execution=args.steps_per_execution)
    return trainer, learning_rate


# ----------------------------------------------------------------------------------------------------------------
# The rounds of training


def fit_calls(start_step, total_steps, round_steps):
    """The model.fit calls from `start_step` to `total_steps`, each (first step, steps per round, rounds). Rounds
    line up on multiples of `round_steps`: the whole rounds share one call, a round begun before an interruption
    and a shorter last one get a call each. So every run ends at `total_steps`, evaluating at the same steps as a
    run never interrupted."""
    head = min(-start_step % round_steps, total_steps - start_step)
    whole_rounds, tail = divmod(total_steps - start_step - head, round_steps)
    calls = [(start_step, head, 1), (start_step + head, round_steps, whole_rounds), (total_steps - tail, tail, 1)]
    return [(first, steps, rounds) for first, steps, rounds in calls if steps and rounds]


# ----------------------------------------------------------------------------------------------------------------
# What it says of its model


def describe_model(config, generator_config):
    return config.model_type if generator_config is None else (
        f"ELECTRA discriminator (hidden size {config.hidden_size}) and generator (hidden size "
        f"{generator_config.hidden_size}), sharing their embeddings")


# ----------------------------------------------------------------------------------------------------------------
# Flags


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hardware_arguments(parser)

    data = parser.add_argument_group("data")
    data.add_argument("--train_dataset", default="tfrecords/train",
                      help="Folder or glob of training shards, local or gs:// (default: %(default)s).")
    data.add_argument("--eval_dataset", help="Folder or glob of evaluation shards (default: no evaluation).")
    data.add_argument("--shards_on_every_host", action="store_true",
                      help="On a TPU pod slice, accept local shards, copied to the same path on every host (else "
                           "they must be on gs://: each host reads its own).")
    data.add_argument("--max_length", type=positive_int, default=128,
                      help=f"Tokens per sample, as in the shards; at least {MIN_MAX_LENGTH} (default: %(default)s).")
    data.add_argument("--shuffle_buffer_size", type=positive_int, default=10_000,
                      help="Samples in the shuffle buffer: more mixes better, in more host memory "
                           "(default: %(default)s).")
    data.add_argument("--mlm_probability", type=probability, default=0.15,
                      help="Fraction of the non-special tokens to mask (default: %(default)s).")
    data.add_argument("--mask_share", type=share,
                      help="Of the chosen tokens, the share that becomes <mask>; of the rest, half a random token, "
                           "half unchanged (ELECTRA: all unchanged). Default: 0.8, BERT's 80/10/10; ELECTRA 0.85.")
    data.add_argument("--cls_bag_of_words", action="store_true",
                      help="Open every sample with <s> (the classification token, in place of the first token), "
                           "labelled with a random token of the sample: a summary where classifiers read (MLM only).")
    data.add_argument("--masking", choices=["token", "whole_word", "span"], default="token",
                      help="What is masked at once: a token, a whole word (all its tokens), or SpanBERT's spans of "
                           "whole words (default: %(default)s).")
    data.add_argument("--max_predictions_per_seq", type=non_negative_int,
                      help="Masked positions per sequence at most, where the LM head computes logits (0: at every "
                           "position). Default: the expected number plus a margin, 32 for 0.15 x 128.")

    model = parser.add_argument_group("model")
    model.add_argument("--tokenizer",
                       help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id (default: "
                            "that of --model_name_or_path, else unigram-tokenizer).")
    start = model.add_mutually_exclusive_group()
    start.add_argument("--pretrained_model_config", default="FacebookAI/roberta-base",
                       help="Architecture to train from scratch: a Hub model id, a folder holding config.json or a "
                            "config file (local or gs://); weights are never read (default: %(default)s).")
    start.add_argument("--model_name_or_path",
                       help="Continue pre-training this model instead: a folder saved by this pipeline or "
                            "save_pretrained (TensorFlow or PyTorch safetensors weights, local or gs://), or a Hub "
                            "model id. A fresh optimizer and schedule; the shards must use its tokenizer.")
    model.add_argument("--config_overrides", type=config_overrides,
                       help="Changes to the config, e.g. hidden_size=256,num_hidden_layers=4,num_attention_heads=4 "
                            "(with --model_name_or_path, dropout only).")
    model.add_argument("--objective", choices=["mlm", "electra", *PAIR_OBJECTIVES], default="mlm",
                       help="What trains: masked-LM; ELECTRA's replaced-token detection, a discriminator (the model "
                            "saved) and a smaller generator (saved in generator/), from an ELECTRA config, or "
                            "continuing such a pair (--model_name_or_path); or, for BERT and ALBERT, masked-LM on "
                            "sentence pairs with BERT's next-sentence prediction (nsp) or ALBERT's sentence-order "
                            "prediction (sop) (default: %(default)s).")
    model.add_argument("--generator_hidden_size", type=positive_float,
                       help="ELECTRA's new generator: its hidden size, feed-forward size and attention heads as a "
                            "fraction of the discriminator's (default: 0.25).")
    model.add_argument("--discriminator_weight", type=positive_float,
                       help="ELECTRA: the weight of the discriminator's loss against the generator's (default: 50).")
    model.add_argument("--pair_loss_weight", type=non_negative_float, help="--objective nsp or sop: the pair "
                       "loss's weight, added to the masked LM's (0: the masked LM alone, on pairs; default: 1).")
    model.add_argument("--pair_loss_ramp", type=non_negative_int, nargs=2, metavar=("FIRST", "LAST"),
                       help="--objective nsp or sop: the pair loss joins after step FIRST, its weight rising linearly "
                            "to --pair_loss_weight at step LAST (default: the whole weight from the first step).")
    model.add_argument("--output_bias", choices=["frequencies", "zeros"],
                       help="A new LM head's initial output bias: each token's log-frequency in the training shards "
                            "(their token_counts.json), so that the first steps need not learn it; or zeros, as 🤗 "
                            "Transformers initialises it. Default: frequencies where the shards have their counts; a "
                            "loaded LM head keeps its own.")

    training = parser.add_argument_group("training")
    training.add_argument("--per_replica_batch_size", type=positive_int, default=8,
                          help="Samples per replica and micro-batch; the global batch is this x replicas x "
                               "--gradient_accumulation_steps (default: %(default)s).")
    training.add_argument("--gradient_accumulation_steps", type=positive_int, default=1,
                          help="Micro-batches per step, their gradients added up: a larger batch in the same "
                               "memory (default: %(default)s).")
    training.add_argument("--learning_rate", type=positive_float, default=1e-4,
                          help="AdamW's peak learning rate (default: %(default)s).")
    training.add_argument("--weight_decay_rate", type=non_negative_float, default=1e-3,
                          help="AdamW's decoupled weight decay, never on LayerNorm weights and biases "
                               "(default: %(default)s).")
    training.add_argument("--max_grad_norm", type=positive_float, help="Clip each step's gradient, summed over the "
                          "replicas, to this global norm (BERT's: 1.0; default: no clipping).")
    warmup = training.add_mutually_exclusive_group()
    warmup.add_argument("--warmup_steps", type=non_negative_int,
                        help="Steps of linear warmup before the linear decay to 0.")
    warmup.add_argument("--warmup_ratio", type=fraction, default=0.05,
                        help="Warmup as a fraction of all steps (default: %(default)s).")
    length = training.add_mutually_exclusive_group()
    length.add_argument("--num_epochs", type=positive_int, default=1,
                        help="Passes over the training data (default: %(default)s).")
    length.add_argument("--max_steps", type=positive_int, help="Optimizer steps to train for, instead of --num_epochs.")
    training.add_argument("--eval_every_steps", type=positive_int,
                          help="Steps per round; each ends with an evaluation (default: an epoch).")
    training.add_argument("--checkpoint_every_steps", type=positive_int, default=1000,
                          help="Steps between checkpoints to resume from (default: %(default)s).")
    training.add_argument("--input_check_seconds", type=non_negative_float, default=3.0,
                          help="Before training, time one host's input pipeline alone for this long, to compare "
                               "with what training takes from it (0: skip) (default: %(default)s).")
    training.add_argument("--seed", type=int, default=42,
                          help="Seed of the weights, the data order, the masks and dropout. A resumed run trains on "
                               "the batches and masks of the run never stopped, reading past those already trained "
                               "(a million samples of 128 tokens: about 4 s from local disk, 40 s from gs://); "
                               "dropout's draws start over (no checkpoint holds their state), and under XLA (TPUs; "
                               "GPUs by default) the same seed does not repeat them (default: %(default)s).")

    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", default="mlm-model",
                        help="Folder for checkpoints, TensorBoard logs and the model, local or gs:// (gs:// on a "
                             "pod slice or a multi-host job) (default: %(default)s).")
    output.add_argument("--overwrite", action="store_true",
                        help="Start from scratch even if --output_dir holds checkpoints or other files.")
    output.add_argument("--hub_model_id", help="Push the final model and tokenizer to this Hub repository.")
    args = parser.parse_args()

    if args.max_length < MIN_MAX_LENGTH:
        parser.error(f"--max_length must be at least {MIN_MAX_LENGTH}, got {args.max_length}: shorter samples leave "
                     "too few tokens to mask, with too little context. Write shards of 128 tokens, or at least "
                     f"{MIN_MAX_LENGTH}, with prepare_tfrecord_shards.py.")
    # One objective's flag with another: that objective was most likely meant (the flags default to None to tell).
    for flag, objectives in (("--generator_hidden_size", ["electra"]), ("--discriminator_weight", ["electra"]),
                             ("--pair_loss_weight", list(PAIR_OBJECTIVES)),
                             ("--pair_loss_ramp", list(PAIR_OBJECTIVES))):
        if getattr(args, flag.removeprefix("--")) is not None and args.objective not in objectives:
            parser.error(f"{flag} is a flag of --objective {' or '.join(objectives)}, and this command trains "
                         f"--objective {args.objective}: add --objective {objectives[0]}, or drop {flag}.")
    if args.pair_loss_ramp and args.pair_loss_ramp[0] > args.pair_loss_ramp[1]:
        parser.error("--pair_loss_ramp FIRST LAST: the weight rises from step FIRST to step LAST, so FIRST must not "
                     f"be after LAST, got {' '.join(map(str, args.pair_loss_ramp))}.")
    if args.cls_bag_of_words and args.objective != "mlm":
        parser.error(f"--cls_bag_of_words is a masked LM's loss at <s>, and --objective {args.objective} trains "
                     f"{'ELECTRA' if args.objective == 'electra' else 'a pair head there'}: drop one of the two.")
    if args.objective == "nsp" and args.per_replica_batch_size < 2:
        parser.error("--objective nsp takes the second text of a random pair from the next sample of the batch, and "
                     "--per_replica_batch_size 1 has none: give it 2 or more.")
    if args.generator_hidden_size is not None and args.generator_hidden_size > 1:
        parser.error(f"--generator_hidden_size is a fraction of the discriminator's hidden size, at most 1, got "
                     f"{args.generator_hidden_size}.")
    args.tokenizer = args.tokenizer or args.model_name_or_path or "unigram-tokenizer"
    if args.max_predictions_per_seq is None:  # After the types checked --mlm_probability: a rate in (0, 1).
        from masked_lm import default_max_predictions

        args.max_predictions_per_seq = default_max_predictions(args.mlm_probability, args.max_length, args.masking)
    if args.max_predictions_per_seq > args.max_length:
        parser.error(f"--max_predictions_per_seq must be from 0 to --max_length ({args.max_length}), got "
                     f"{args.max_predictions_per_seq}.")
    return args


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
