"""Which devices a training script runs on, and how well it uses them (run_mlm.py and run_classification.py):

- the hardware flags; this machine's TPU chips, read from sysfs, and each generation's peak FLOP/s beside it; the
  paper peak of the CPU cores the process may use, from /proc/cpuinfo; the tf.distribute strategy, the seeds, XLA,
  the optimizer's state created before the first step, the hosts;
- run_mlm.py's plan: its global batch and steps, split over the hosts and replicas (plan_training);
- the FLOPs of a training step, MFU and throughput, and the input check, which times an input pipeline alone.

`python devices.py check-tpu` says whether the TensorFlow installed drives this machine's TPU (diagnostics.py).
TensorFlow is imported inside the functions: check-tpu explains a broken install instead of failing to import it.
"""

import contextlib
import dataclasses
import glob
import logging
import os
import random
import re
import time

from utils import UserError, check_gcs_path, is_gcs_path, positive_int, refuse_an_output_that_is_read

logger = logging.getLogger("devices")


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
                               "off on a CPU, where XLA measured slower for these models (benchmarks/speed.md); "
                               "pass it there to rehearse a TPU's compilation. TPUs compile everything with XLA, "
                               "whatever the flag.")
    hardware.add_argument("--no_jit_compile", "--no-jit_compile", dest="jit_compile", action="store_false",
                          help="Run the forward and backward pass without XLA, on GPUs too.")


# ----------------------------------------------------------------------------------------------------------------
# TPU chips, CPU cores, and the peak of each device


# Every TPU chip is a PCI device of Google's vendor id, its device id naming the generation (v2 and v3 share one,
# told apart by the subsystem id): the ids that Google's tpu-info tool reads.
GOOGLE_PCI_VENDOR_ID = "0x1ae0"
TPU_GENERATIONS = {("0x0027", "0x004e"): "v2", ("0x0027", "0x004f"): "v3", "0x005e": "v4", "0x0062": "v5p",
                   "0x0063": "v5e", "0x006f": "v6e", "0x0076": "7x"}
# Published peak dense throughput, FLOP/s. TPUs, per chip, in bfloat16 (Google Cloud's pages on each generation:
# cloud.google.com/tpu/docs/v2, v3, v4, v5e, v5p, v6e); a TPU multiplies float32 matrices in bfloat16 passes.
TPU_PEAK_FLOPS = {"v2": 45e12, "v3": 123e12, "v4": 275e12, "v5e": 197e12, "v5p": 459e12, "v6e": 918e12}
# TensorCores per chip that TensorFlow drives as replicas of their own: two on v2 and v3; one on v5e and v6e, and
# on v4 and v5p, whose two cores act as one (megacore).
TPU_REPLICAS_PER_CHIP = {"v2": 2, "v3": 2}
# NVIDIA GPUs, dense (without sparsity): (bfloat16, TF32, float32), from NVIDIA's A100, H100, L4, L40 and L40S
# data sheets, by the exact name TensorFlow reports (get_device_details' "device_name"): a substring would match
# "NVIDIA L40S" to the L4's peaks, a third of its own. A GPU not named here gets no MFU. TensorFlow multiplies
# float32 matrices in TF32 on these GPUs, unless tf.config.experimental.enable_tensor_float_32_execution turns it off.
A100_PEAKS, H100_SXM_PEAKS = (312e12, 156e12, 19.5e12), (989e12, 495e12, 67e12)
GPU_PEAK_FLOPS = {"NVIDIA A100-SXM4-80GB": A100_PEAKS, "NVIDIA A100-SXM4-40GB": A100_PEAKS,
                  "NVIDIA A100-PCIE-40GB": A100_PEAKS, "NVIDIA A100 80GB PCIe": A100_PEAKS,
                  "NVIDIA H100 80GB HBM3": H100_SXM_PEAKS,  # The SXM module.
                  "NVIDIA H100 PCIe": (756e12, 378e12, 51e12), "NVIDIA H100 NVL": (835e12, 418e12, 60e12),
                  "NVIDIA L4": (121e12, 60e12, 30.3e12), "NVIDIA L40": (181.05e12, 90.5e12, 90.5e12),
                  "NVIDIA L40S": (362.05e12, 183e12, 91.6e12)}
# x86 CPUs: the FMA units of a core, by the microarchitecture that /proc/cpuinfo's vendor_id, "cpu family" and
# "model" name, as written there (other architectures' "model" is no number): (name, units, bits each), from AMD's
# software optimization guides and Intel's optimization reference manual. A CPU not named here is assumed to have
# ASSUMED_FMA_UNITS of the widest vectors its flags show (widest_vector_bits), and its peak is logged as assumed: x86
# cores multiply-add at most that many FLOPs per cycle, so a wrong guess makes the peak too high and MFU err low. The
# table names the CPUs whose units are narrower than their widest instructions (Zen runs AVX2 on its 128-bit units
# and Zen 4 AVX-512 on its 256-bit ones, in two halves), and others checked, whose log then names them. Left out,
# among others: Skylake-SP and Cascade Lake (Intel's model 85), whose Xeons have one or two AVX-512 FMA units per core
# by SKU, which cpuinfo does not tell: assumed two.
CPU_FMA_UNITS = {("AuthenticAMD", "23", "1"): ("Zen", 2, 128),  # EPYC 7001 (Naples)
                 ("AuthenticAMD", "23", "49"): ("Zen 2", 2, 256),  # EPYC 7002 (Rome)
                 ("AuthenticAMD", "25", "1"): ("Zen 3", 2, 256),  # EPYC 7003 (Milan)
                 ("AuthenticAMD", "25", "17"): ("Zen 4", 2, 256),  # EPYC 9004 (Genoa)
                 ("AuthenticAMD", "25", "160"): ("Zen 4c", 2, 256),  # EPYC 97x4 (Bergamo)
                 ("GenuineIntel", "6", "63"): ("Haswell", 2, 256),  # Xeon E5 v3
                 ("GenuineIntel", "6", "79"): ("Broadwell", 2, 256),  # Xeon E5 v4
                 ("GenuineIntel", "6", "106"): ("Ice Lake", 2, 512),  # Xeon Scalable, 3rd generation
                 ("GenuineIntel", "6", "143"): ("Sapphire Rapids", 2, 512),  # 4th
                 ("GenuineIntel", "6", "207"): ("Emerald Rapids", 2, 512)}  # 5th
ASSUMED_FMA_UNITS = 2
# bfloat16 products per cycle and core: Intel's AMX multiplies tiles at 1,024 FLOPs (Intel's figure for Sapphire
# Rapids); AVX512-BF16's dot product does two multiply-adds in each float32 lane, twice float32's FLOPs on the same
# units. Without either, bfloat16 is multiplied in float32.
AMX_BFLOAT16_FLOPS_PER_CYCLE = 1024


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


def peak_flops(strategy, on_tpu, bfloat16):
    """(The peak FLOP/s of all replicas, what they are): TPUs' and GPUs' published peaks, the paper peak of the CPU
    cores; (None, what they are) where no peak is known."""
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    if on_tpu:
        generation = next(iter(local_tpu_chips()), "of unknown generation")  # A TPU Node's chips are not local.
        if generation not in TPU_PEAK_FLOPS:
            return None, f"TPU {generation}"
        per_chip = TPU_REPLICAS_PER_CHIP.get(generation, 1)
        return (replicas / per_chip * TPU_PEAK_FLOPS[generation],
                f"{replicas // per_chip} x TPU {generation} at {TPU_PEAK_FLOPS[generation] / 1e12:g} TFLOP/s in "
                "bfloat16")
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return cpu_peak_flops(bfloat16, intra_op_threads())
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    if name not in GPU_PEAK_FLOPS:
        return None, name
    peaks = GPU_PEAK_FLOPS[name]
    precision = 0 if bfloat16 else 1 if tf.config.experimental.tensor_float_32_execution_enabled() else 2
    return (replicas * peaks[precision], f"{replicas} x {name} at {peaks[precision] / 1e12:g} TFLOP/s in "
                                         f"{('bfloat16', 'TF32', 'float32')[precision]}")


def cpu_peak_flops(bfloat16, threads=0, root="/"):
    """(The paper peak FLOP/s of the CPU cores this process may use, what it is made of); (None, why) where it is
    not known. Cores x the FLOPs per cycle of their widest FMA units (CPU_FMA_UNITS's, else assumed from the flags)
    x the clock, all read from the machine. The cores: the physical ones among the CPUs the process may run on (two
    hyperthreads share one core's units), at most `threads` (TensorFlow's intra-op threads; 0: one per CPU). `root`
    lets tests point at a fake tree."""
    processors = read_cpuinfo(root)
    if not processors:
        return None, "this CPU, which has no /proc/cpuinfo to read"
    first = processors[0]
    key = (first.get("vendor_id"), first.get("cpu family"), first.get("model"))
    cpu = f"{first.get('model name', 'CPU')} ({key[0]} family {key[1]} model {key[2]})"
    flags = set(first.get("flags", "").split())
    widest_bits = widest_vector_bits(flags)
    if not widest_bits:
        return None, f"{cpu}, whose FMA units are not in devices.CPU_FMA_UNITS and which shows no x86 vector flags"
    if key in CPU_FMA_UNITS:
        microarchitecture, units, unit_bits = CPU_FMA_UNITS[key]
        bits = min(unit_bits, widest_bits)  # A virtual machine may hide the widest instructions its CPU has.
        assumption = ""
    else:
        microarchitecture, units, bits = "assumed from its flags", ASSUMED_FMA_UNITS, widest_bits
        assumption = f"; {cpu} is not in devices.CPU_FMA_UNITS"
    flops_per_cycle, units_used = units * 2 * bits // 32, f"{units} x {bits}-bit FMA, float32"
    if bfloat16 and "amx_bf16" in flags:
        flops_per_cycle, units_used = AMX_BFLOAT16_FLOPS_PER_CYCLE, "AMX, bfloat16"
    elif bfloat16 and "avx512_bf16" in flags:
        flops_per_cycle, units_used = 2 * flops_per_cycle, f"{units} x {bits}-bit FMA, bfloat16 dot products"
    allowed = os.sched_getaffinity(0)
    cores = len({(processor.get("physical id"), processor.get("core id", processor["processor"]))
                 for processor in processors if int(processor["processor"]) in allowed})
    cores = min(cores, threads or cores)
    clock, source = cpu_clock(first, root)
    if clock is None:
        return None, f"{cpu}, whose clock is not known"
    return (cores * flops_per_cycle * clock,
            f"{cores} {'core' if cores == 1 else 'cores'} x {flops_per_cycle} FLOP/cycle ({microarchitecture}: "
            f"{units_used}) x {clock / 1e9:.3g} GHz ({source}){assumption}")


def widest_vector_bits(flags):
    """The widest vectors whose multiply-adds an x86 CPU's cpuinfo flags show it runs, in bits; 0 for flags of no x86
    CPU. SSE's 128 bits where it shows no FMA instructions (an older CPU, or a virtual machine that hides them): its
    multiply-adds take two instructions each, a multiply and an add, and MFU errs low."""
    if "avx512f" in flags:
        return 512
    if {"avx2", "fma"} <= flags:
        return 256
    return 128 if "sse" in flags else 0


def intra_op_threads():
    """The threads TensorFlow splits one op into on the CPU (0: one per CPU): as tf.config.threading sets them, else
    TF_NUM_INTRAOP_THREADS, which TensorFlow reads at start-up without showing it in tf.config."""
    import tensorflow as tf

    return tf.config.threading.get_intra_op_parallelism_threads() or int(os.environ.get("TF_NUM_INTRAOP_THREADS", 0))


def read_cpuinfo(root):
    """/proc/cpuinfo's processors, each a dict of its "name : value" lines; [] where there is no such file."""
    with contextlib.suppress(OSError), open(os.path.join(root, "proc/cpuinfo")) as f:
        return [dict(map(str.strip, line.split(":", 1)) for line in block.splitlines() if ":" in line)
                for block in f.read().split("\n\n") if block.strip()]
    return []


def cpu_clock(processor, root):
    """The clock of a CPU's paper peak, in Hz, and where it was read; (None, None) where it is not known. The
    nominal clock where the model name states it (Intel's "@ 2.70GHz"); else the highest cpufreq lets the core run
    at (which all cores at once may not hold: MFU errs low, not high); else cpuinfo's "cpu MHz", which a virtual
    machine without cpufreq shows fixed: the rate of its time-stamp counter, which x86 CPUs tick at about their
    nominal clock. Cores that boost above the nominal clock make MFU err high: benchmarks/matmul_peak.py shows how
    far one core's matmuls go past the peak."""
    nominal = re.search(r"@ *([\d.]+) *GHz", processor.get("model name", ""))
    if nominal:
        return float(nominal[1]) * 1e9, "nominal, from the model name"
    cpufreq = f"sys/devices/system/cpu/cpu{processor.get('processor')}/cpufreq/cpuinfo_max_freq"
    with contextlib.suppress(OSError, ValueError), open(os.path.join(root, cpufreq)) as f:
        return int(f.read()) * 1e3, "cpufreq's highest"
    if "cpu MHz" in processor:
        return float(processor["cpu MHz"]) * 1e6, "cpuinfo's cpu MHz"
    return None, None


# ----------------------------------------------------------------------------------------------------------------
# The strategy, seeds and XLA


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
        # TensorFlow's default strategy: the code path of the others (scope, distributed datasets, replica context,
        # all-reduce) without their machinery. OneDeviceStrategy and MirroredStrategy feed each device through an
        # iterator of their own whose pipeline always autotunes: deleting it, at the end of every fit call, waited
        # up to a minute for its tuning thread (masked_lm.make_dataset's options say why).
        return tf.distribute.get_strategy(), False
    return tf.distribute.MirroredStrategy(devices), False


def set_up_training(args, input_paths):
    """What both training scripts do first, in this order; returns (strategy, on_tpu, jit_compile). The paths
    first: an --output_dir among `input_paths` (what the run reads) and a missing bucket must not wait for a TPU to
    start. Then the strategy, before any TensorFlow op; then the seeds and the precision, before any model is
    built."""
    import tf_keras as keras

    refuse_an_output_that_is_read(args.output_dir, input_paths)
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


def create_optimizer_state(optimizer, variables):
    """Creates the optimizer's state for `variables` (Adam's moments) now, as Keras would in the first training step,
    where creating variables makes TensorFlow trace the step twice (seconds per run). 🤗's AdamWeightDecay is a
    legacy Keras optimizer, the Adam of a weight decay of 0 a current one: each has its own method."""
    (getattr(optimizer, "_create_all_weights", None) or optimizer.build)(variables)


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


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    num_hosts: int
    replicas_per_host: int
    batch_per_replica_step: int  # Samples a replica reads per optimizer step: all its micro-batches.
    global_batch_size: int
    train_samples: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    eval_every: int  # Steps per round; each round ends with an evaluation.
    eval_samples: int
    eval_steps: int


def plan_training(args, strategy, train_sizes, eval_sizes):
    """Batch sizes and step counts, from the shard sizes and the hosts and replicas. Every host reads its own shards
    (see make_dataset), so an epoch is as many steps as the host with the fewest samples fills."""
    num_hosts = count_hosts(strategy)
    replicas_per_host = strategy.num_replicas_in_sync // num_hosts
    batch_per_replica_step = args.per_replica_batch_size * args.gradient_accumulation_steps

    def steps(sizes, batch_size, what):
        if len(sizes) < num_hosts:
            raise UserError(f"{num_hosts} hosts need at least {num_hosts} shard files, one per host, but "
                            f"there are {len(sizes)}. Write the shards again with a smaller --shard_size.")
        count = min(sum(sizes[host::num_hosts]) for host in range(num_hosts)) // batch_size // replicas_per_host
        if count == 0:
            raise UserError(f"the {sum(sizes)} {what} samples do not fill one global batch of "
                            f"{batch_size * strategy.num_replicas_in_sync}. Lower --per_replica_batch_size, or "
                            "prepare more data.")
        return count

    steps_per_epoch = steps(train_sizes, batch_per_replica_step, "training")
    total_steps = args.max_steps or args.num_epochs * steps_per_epoch
    warmup_steps = args.warmup_steps if args.warmup_steps is not None else int(args.warmup_ratio * total_steps)
    if warmup_steps >= total_steps:
        raise UserError(f"{warmup_steps} warmup steps leave nothing of the {total_steps} steps.")
    return TrainingPlan(
        num_hosts=num_hosts, replicas_per_host=replicas_per_host, batch_per_replica_step=batch_per_replica_step,
        global_batch_size=batch_per_replica_step * strategy.num_replicas_in_sync, train_samples=sum(train_sizes),
        steps_per_epoch=steps_per_epoch, total_steps=total_steps, warmup_steps=warmup_steps,
        eval_every=args.eval_every_steps or steps_per_epoch, eval_samples=sum(eval_sizes),
        eval_steps=steps(eval_sizes, args.per_replica_batch_size, "evaluation") if eval_sizes else 0)


def host_addresses(strategy):
    """The addresses of a multi-host strategy's hosts, as its cluster resolver gives them ([] for none)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return [*cluster.get("chief", []), *cluster.get("worker", [])]


def host_index(strategy):
    """This process's host among count_hosts(strategy): its task index in a multi-worker cluster, else 0 (one
    process drives every host of a TPU pod slice, from host 0)."""
    resolver = strategy.cluster_resolver  # None on one machine.
    return resolver.task_id if resolver is not None and resolver.task_id is not None else 0


def check_paths_for_pod(args, num_hosts):
    """Refuses paths that the hosts of a TPU pod slice cannot all reach. One process on worker 0 drives them all,
    but each host runs its own input pipeline and saves its own part of each checkpoint: a local path means each
    host's own disk."""
    if num_hosts == 1:
        return
    local_shards = [path for path in (args.train_dataset, args.eval_dataset) if path and not is_gcs_path(path)]
    if local_shards and not args.shards_on_every_host:
        raise UserError(
            f"this TPU has {num_hosts} hosts, and each reads its own shards, but {local_shards[0]!r} is a "
            "local path, which the other hosts cannot see. Copy the shards to a bucket (`gcloud storage cp -r "
            f"{local_shards[0]} gs://BUCKET/...`) and pass the gs:// path; or, if you copied them to this same path "
            "on every host, pass --shards_on_every_host.")
    if not is_gcs_path(args.output_dir):
        raise UserError(f"this TPU has {num_hosts} hosts, and each saves its own part of every checkpoint, "
                        f"but --output_dir {args.output_dir!r} is a local path. Pass a gs:// folder.")


def strategy_name(strategy):
    # The public names of the classes that TensorFlow calls CollectiveAllReduceStrategy and
    # _DefaultDistributionStrategy.
    name = type(strategy).__name__
    return {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
            "_DefaultDistributionStrategy": "the default strategy"}.get(name, name)


# ----------------------------------------------------------------------------------------------------------------
# How well the devices are used: FLOPs, MFU, throughput, and whether the input pipeline keeps up


def training_flops_per_token(config, max_length, max_predictions):
    """Floating-point operations of a training step (forward and backward) per token, counted from a BERT-style
    `config` (BERT, RoBERTa and the like) for samples of `max_length` tokens and an LM head that runs at
    `max_predictions` positions per sample (0: at every one).

    A multiply-add is 2 FLOPs, and the backward pass costs twice the forward one (gradients for the activations and
    for the weights): 6 FLOPs per multiply-add of the forward pass, that is 6 per weight that multiplies each token's
    vector, plus attention. Per token, with hidden size h, feed-forward size f, L tokens per sample, vocabulary V
    and K head positions per sample, the forward pass does these multiply-adds:
        each layer   4 h^2 + 2 h f          query, key, value and output projections; the two feed-forward ones
                     + 2 L h                attention: scores against L keys, then the sum of L values
        LM head      K / L x (h^2 + h V)    its dense layer and the projection onto the vocabulary, at K of L
    Embeddings are looked up (the vocabulary projection reuses the word embeddings, counted in the head); biases,
    layer norms, activations, softmaxes and the optimizer update are left out: a few percent. DeBERTa's
    relative-position attention and ConvBERT's convolutions are counted as BERT's attention: roughly.
    """
    hidden, embedding = config.hidden_size, embedding_size(config)
    head = (max_predictions or max_length) / max_length * (hidden * embedding + embedding * config.vocab_size)
    return 6 * (encoder_multiply_adds(config, max_length) + head)


def electra_training_flops_per_token(config, generator_config, max_length, max_predictions):
    """training_flops_per_token for ELECTRA's replaced-token detection: the generator's, a masked LM with its head at
    `max_predictions` positions, plus the discriminator's encoder and its head, which runs at every position: a
    dense layer h x h, then h x 1 for the one logit. The Gumbel sampling is left out with the softmaxes."""
    hidden = config.hidden_size
    discriminator = encoder_multiply_adds(config, max_length) + hidden**2 + hidden
    return training_flops_per_token(generator_config, max_length, max_predictions) + 6 * discriminator


def embedding_size(config):
    """ALBERT, ELECTRA and ConvBERT embed in a smaller size e, projected to h for every token; the LM head's dense
    layer maps h to e before the vocabulary projection."""
    return getattr(config, "embedding_size", None) or config.hidden_size


def encoder_multiply_adds(config, max_length):
    """Multiply-adds of the forward pass per token from the embeddings to the last layer (training_flops_per_token)."""
    hidden, embedding = config.hidden_size, embedding_size(config)
    feed_forward = getattr(config, "intermediate_size", None) or config.hidden_dim  # DistilBERT's name for it.
    projection = hidden * embedding if embedding != hidden else 0
    per_layer = 4 * hidden**2 + 2 * hidden * feed_forward + 2 * max_length * hidden
    return projection + config.num_hidden_layers * per_layer


def model_flops_utilization(flops_per_second, peak_flops):
    """MFU, in percent: the model's FLOPs per second (counted as above, not what the device executes, which
    includes recomputation and other overhead) over the devices' peak."""
    return 100 * flops_per_second / peak_flops


@dataclasses.dataclass
class Throughput:
    """Turns the steps of a round and their time into what they mean for the hardware: tokens and samples per
    second (all replicas), the model's FLOP/s and, where the devices' peak is known, MFU."""
    flops_per_token: float
    tokens_per_step: int
    samples_per_step: int
    num_hosts: int
    peak_flops: float | None
    devices: str
    input_samples_per_second: float | None = None  # One host's input pipeline alone: check_input_pipeline.

    @classmethod
    def of(cls, args, config, plan, strategy, on_tpu, generator_config=None):
        """The figures of a masked-LM run, or (with `generator_config`) of an ELECTRA one."""
        flops_per_token = training_flops_per_token(config, args.max_length, args.max_predictions_per_seq) \
            if generator_config is None else electra_training_flops_per_token(
                config, generator_config, args.max_length, args.max_predictions_per_seq)
        return cls(flops_per_token,
                   plan.global_batch_size * args.max_length, plan.global_batch_size, plan.num_hosts,
                   *peak_flops(strategy, on_tpu, args.bfloat16))

    def describe_peak(self):
        if self.peak_flops is None:
            return f"no peak is known for {self.devices}: rounds show TFLOP/s, no MFU"
        return (f"peak {self.peak_flops / 1e12:,.0f} TFLOP/s" if self.peak_flops >= 1e12 else
                f"peak {self.peak_flops / 1e9:,.0f} GFLOP/s") + f" ({self.devices})"

    def figures(self, steps, seconds):
        tokens_per_second = steps * self.tokens_per_step / seconds
        figures = {"tokens_per_second": tokens_per_second,
                   "samples_per_second": steps * self.samples_per_step / seconds,
                   "flops_per_token": self.flops_per_token, "tflops": tokens_per_second * self.flops_per_token / 1e12}
        if self.peak_flops:
            figures["mfu_percent"] = model_flops_utilization(figures["tflops"] * 1e12, self.peak_flops)
        return figures

    @staticmethod
    def describe(figures):
        text = (f"{figures['tokens_per_second']:,.0f} tokens/s, {figures['samples_per_second']:,.1f} samples/s, "
                f"{figures['flops_per_token'] / 1e6:.4g} MFLOP/token, {figures['tflops']:.3g} TFLOP/s")
        return text + (f", MFU {figures['mfu_percent']:.1f} %" if "mfu_percent" in figures else "")

    def compare_with_input(self, figures):
        """Logs how much of what one host's input pipeline delivers alone training takes; warns when it takes so
        much that the steps likely wait for their input. Returns that share."""
        taken = figures["samples_per_second"] / self.num_hosts
        share = taken / self.input_samples_per_second
        logger.info("Input pipeline: %s samples/s per host alone, before training; training takes %s (%.1f %%)",
                    f"{self.input_samples_per_second:,.0f}", f"{taken:,.1f}", 100 * share)
        if share > INPUT_BOUND_SHARE:
            logger.warning(
                "Training takes %.0f %% of what the input pipeline delivers alone: the steps likely wait for their "
                "input, and the devices idle. Give each host more shards to read in parallel (at least 8: a "
                "smaller --shard_size in prepare_tfrecord_shards.py, or more data), keep gs:// shards in the "
                "devices' region, use hosts with more CPU cores; a larger --shuffle_buffer_size evens out slow "
                "reads.", 100 * share)
        return share


# Above this share of the input pipeline's own speed, training is likely held back by it: the pipeline shares the
# host's cores with the rest of the step, and its speed varies with the files it reads.
INPUT_BOUND_SHARE = 0.8


def check_input_pipeline(dataset, seconds, samples_per_batch, throughput):
    """Times one host's input pipeline alone (`dataset`, as training builds it, with no model) for about `seconds`,
    after its shuffle buffer has filled; logs its samples/s and, where the devices' peak is known, what training
    would take at that peak. Returns the samples/s, which `throughput` keeps, to compare with training's."""
    import tensorflow as tf

    @tf.function
    def pull_batches(iterator, num_batches):  # Inside TensorFlow: no Python runs per batch.
        for _ in tf.range(num_batches):
            iterator.get_next()

    with tf.device("/cpu:0"):  # The host's CPU, wherever the devices are.
        iterator = iter(dataset)
        pull_batches(iterator, tf.constant(1))  # Waits for the shuffle buffer to fill.
        batches, start, elapsed = 0, time.perf_counter(), 0.0
        while elapsed < seconds or not batches:  # Some batches, however short the time asked.
            pull_batches(iterator, tf.constant(INPUT_CHECK_BATCHES))
            batches += INPUT_CHECK_BATCHES
            elapsed = time.perf_counter() - start
    samples_per_second = throughput.input_samples_per_second = batches * samples_per_batch / elapsed
    tokens_per_sample = throughput.tokens_per_step // throughput.samples_per_step
    at_peak = "" if throughput.peak_flops is None else (
        "; at the devices' peak, training would take "
        f"{throughput.peak_flops / throughput.flops_per_token / tokens_per_sample / throughput.num_hosts:,.0f} "
        "per host")
    logger.info("Input pipeline alone, on this host: %s samples/s (%s tokens/s), over %.1f s%s",
                f"{samples_per_second:,.0f}", f"{samples_per_second * tokens_per_sample:,.0f}", elapsed, at_peak)
    return samples_per_second


INPUT_CHECK_BATCHES = 20  # Per call of pull_batches: a few milliseconds on a fast host.


if __name__ == "__main__":
    from diagnostics import main  # `python devices.py check-tpu`, as the README and the Makefile say.

    main(local_tpu_chips())
