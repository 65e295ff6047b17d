"""run_mlm.py's speed figures: the FLOP count of a training step against a hand count, MFU against a given peak, and
the devices' peaks: TPUs' and GPUs' published ones, a CPU's paper peak from its /proc/cpuinfo."""

import functools
import os
import types

import pytest
from transformers import DistilBertConfig, ElectraConfig, RobertaConfig, TFAutoModelForMaskedLM

import devices
from devices import Throughput, cpu_peak_flops, model_flops_utilization, peak_flops, training_flops_per_token
from helpers import ZEN3_EPYC, write_cpuinfo

# Hidden 4, feed-forward 8, 2 layers, vocabulary 10; samples of 16 tokens, the LM head at 4 of them.
CONFIG = RobertaConfig(vocab_size=10, hidden_size=4, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8,
                       max_position_embeddings=18, type_vocab_size=1)
LENGTH, HEAD_POSITIONS = 16, 4


def test_flops_per_token_against_a_hand_count():
    # Multiply-adds of the forward pass per token, by hand:
    #   embeddings: looked up, none
    #   each layer: query, key, value, output 4 x 4x4 = 64; feed-forward 4x8 + 8x4 = 64; attention 2 x 16 x 4 = 128
    #   LM head: dense 4x4 = 16 and vocabulary 4x10 = 40 at 4 of 16 positions: 56 / 4 = 14 per token
    # Training: 6 FLOPs per multiply-add (2 per multiply-add, forward plus a backward pass of twice its cost).
    layers, head = 2 * (64 + 64 + 128), 14
    assert training_flops_per_token(CONFIG, LENGTH, HEAD_POSITIONS) == 6 * (layers + head) == 3156
    assert training_flops_per_token(CONFIG, LENGTH, 0) == 6 * (layers + 56)  # The head at every position.

    # The hand count's matrices are the model's: the layers' kernels, and the head's dense kernel and the word
    # embeddings it projects onto. The other embeddings are only looked up.
    mlm = TFAutoModelForMaskedLM.from_config(CONFIG)
    mlm.build_in_name_scope()
    sizes = {weight.name: int(weight.shape.num_elements()) for weight in mlm.weights}
    layer_kernels = sum(size for name, size in sizes.items()
                        if "/encoder/layer_" in name and name.endswith("kernel:0"))
    assert layer_kernels == 2 * (64 + 64)
    head_matrices = [size for name, size in sizes.items()
                     if "lm_head/dense/kernel" in name or "word_embeddings" in name]
    assert sorted(head_matrices) == [16, 40]


def test_flops_per_token_of_smaller_embeddings_and_distilbert_names():
    # ELECTRA embeds in 2 here: 4x2 to project each token's embedding to the hidden size; the head's dense layer
    # maps 4 to 2, then 2x10 onto the vocabulary: (8 + 20) / 4 = 7 per token. DistilBERT names the same sizes
    # otherwise: the count of CONFIG.
    electra = ElectraConfig(vocab_size=10, embedding_size=2, hidden_size=4, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=8)
    assert training_flops_per_token(electra, LENGTH, HEAD_POSITIONS) == 6 * (8 + 2 * (64 + 64 + 128) + 7)
    distilbert = DistilBertConfig(vocab_size=10, dim=4, n_layers=2, n_heads=2, hidden_dim=8)
    assert training_flops_per_token(distilbert, LENGTH, HEAD_POSITIONS) == 3156


def test_figures_and_mfu_against_a_given_peak():
    assert model_flops_utilization(2.5e12, peak_flops=10e12) == 25.0
    # 100 steps of 32 samples of 128 tokens in 4 s, 600 MFLOP per token: 102,400 tokens/s, 800 samples/s,
    # 61.44 TFLOP/s; against a peak of 122.88 TFLOP/s, 50 %.
    throughput = Throughput(flops_per_token=600e6, tokens_per_step=32 * 128, samples_per_step=32, num_hosts=1,
                            peak_flops=122.88e12, devices="a device")
    figures = throughput.figures(steps=100, seconds=4.0)
    assert figures == pytest.approx({"tokens_per_second": 102_400, "samples_per_second": 800,
                                     "flops_per_token": 600e6, "tflops": 61.44, "mfu_percent": 50.0})
    assert Throughput.describe(figures) == "102,400 tokens/s, 800.0 samples/s, 600 MFLOP/token, 61.4 TFLOP/s, " \
                                          "MFU 50.0 %"
    throughput.peak_flops = None  # A CPU: no MFU.
    assert "mfu_percent" not in throughput.figures(steps=100, seconds=4.0)


def test_peaks_of_tpus_per_replica(monkeypatch):
    # A v3 chip runs 2 replicas (one per TensorCore), a v4 chip one (its cores act as one).
    for chips, replicas, peak in (({"v3": 4}, 8, 4 * 123e12), ({"v4": 4}, 4, 4 * 275e12),
                                  ({"v5e": 8}, 8, 8 * 197e12)):
        monkeypatch.setattr(devices, "local_tpu_chips", lambda: chips)
        strategy = types.SimpleNamespace(num_replicas_in_sync=replicas)
        assert peak_flops(strategy, on_tpu=True, bfloat16=True)[0] == pytest.approx(peak)
    monkeypatch.setattr(devices, "local_tpu_chips", lambda: {})  # A TPU Node: its chips are elsewhere.
    assert peak_flops(strategy, on_tpu=True, bfloat16=True)[0] is None


def test_peaks_of_gpus_by_the_exact_name_tensorflow_reports(monkeypatch):
    import tensorflow as tf

    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    strategy = types.SimpleNamespace(num_replicas_in_sync=2)

    def peak(name, bfloat16=True, tf32=True):
        monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda device: {"device_name": name})
        monkeypatch.setattr(tf.config.experimental, "tensor_float_32_execution_enabled", lambda: tf32)
        return peak_flops(strategy, on_tpu=False, bfloat16=bfloat16)

    # "NVIDIA L4" is a substring of the L40's and L40S's names, each of which has a peak of its own.
    assert peak("NVIDIA L4") == (2 * 121e12, "2 x NVIDIA L4 at 121 TFLOP/s in bfloat16")
    assert peak("NVIDIA L40")[0] == pytest.approx(2 * 181.05e12)
    assert peak("NVIDIA L40S")[0] == pytest.approx(2 * 362.05e12)
    assert peak("NVIDIA A100-SXM4-40GB")[0] == peak("NVIDIA A100 80GB PCIe")[0] == 2 * 312e12
    assert peak("NVIDIA H100 80GB HBM3")[0] == 2 * 989e12 and peak("NVIDIA H100 PCIe")[0] == 2 * 756e12
    # float32 matrices: in TF32 unless it is turned off.
    assert peak("NVIDIA L40S", bfloat16=False) == (2 * 183e12, "2 x NVIDIA L40S at 183 TFLOP/s in TF32")
    assert peak("NVIDIA L40S", bfloat16=False, tf32=False)[0] == pytest.approx(2 * 91.6e12)
    assert peak("NVIDIA L4", bfloat16=False, tf32=False)[0] == pytest.approx(2 * 30.3e12)
    # A GPU whose name is not in the table gets no MFU, whatever its name contains.
    assert peak("NVIDIA L4 Future Edition") == (None, "NVIDIA L4 Future Edition")
    assert peak("NVIDIA GeForce RTX 4090") == (None, "NVIDIA GeForce RTX 4090")


# The processors of an AVX-512 Xeon (Sapphire Rapids, with AMX) in a virtual machine, and of a Zen 4 EPYC on bare
# metal, whose model name states no clock.
SAPPHIRE_RAPIDS = {"vendor_id": "GenuineIntel", "cpu family": 6, "model": 143,
                   "model name": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu MHz": "2699.998",
                   "flags": "fpu sse sse2 ht avx fma avx2 avx512f avx512dq avx512_bf16 amx_bf16 amx_tile"}
ZEN4_EPYC = {"vendor_id": "AuthenticAMD", "cpu family": 25, "model": 17,
             "model name": "AMD EPYC 9654 96-Core Processor", "cpu MHz": "1500.000",
             "flags": "fpu sse sse2 ht avx fma avx2 avx512f avx512dq avx512_bf16"}


def test_cpu_paper_peak_from_cpuinfo(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    # Issue #66's machine: 2 cores x two 256-bit FMA units x 8 float32 lanes x 2 FLOPs x 2.45 GHz, the clock that
    # cpuinfo shows in a virtual machine without cpufreq. Without bfloat16 units, bfloat16's peak is float32's.
    epyc = write_cpuinfo(tmp_path / "epyc", ZEN3_EPYC, cores=2)
    peak, description = cpu_peak_flops(bfloat16=False, root=epyc)
    assert peak == pytest.approx(156.8e9) and cpu_peak_flops(bfloat16=True, root=epyc)[0] == peak
    assert description == "2 cores x 32 FLOP/cycle (Zen 3: 2 x 256-bit FMA, float32) x 2.45 GHz (cpuinfo's cpu MHz)"
    # The cores TensorFlow may use: at most its intra-op threads, among the CPUs this process may run on.
    assert cpu_peak_flops(bfloat16=False, threads=1, root=epyc)[0] == pytest.approx(78.4e9)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1})
    assert cpu_peak_flops(bfloat16=False, root=epyc)[0] == pytest.approx(78.4e9)

    # Two AVX-512 FMA units per core: twice the FLOPs per cycle. Two hyperthreads share a core's units: 4 CPUs, 2
    # cores. The model name's nominal clock counts, not cpufreq's highest. bfloat16 runs on AMX.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    xeon = write_cpuinfo(tmp_path / "xeon", SAPPHIRE_RAPIDS, cores=2, threads_per_core=2)
    (xeon / "sys/devices/system/cpu/cpu0/cpufreq").mkdir(parents=True)
    (xeon / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").write_text("3800000\n")
    peak, description = cpu_peak_flops(bfloat16=False, root=xeon)
    assert peak == pytest.approx(2 * 64 * 2.7e9)
    assert description == ("2 cores x 64 FLOP/cycle (Sapphire Rapids: 2 x 512-bit FMA, float32) x 2.7 GHz "
                           "(nominal, from the model name)")
    peak, description = cpu_peak_flops(bfloat16=True, root=xeon)
    assert peak == pytest.approx(2 * 1024 * 2.7e9) and "(Sapphire Rapids: AMX, bfloat16)" in description
    # A virtual machine that hides AVX-512: 256 bits of each unit.
    hidden = write_cpuinfo(tmp_path / "hidden", {**SAPPHIRE_RAPIDS, "flags": "fpu sse sse2 avx fma avx2"}, cores=2)
    assert cpu_peak_flops(bfloat16=True, root=hidden)[0] == pytest.approx(2 * 32 * 2.7e9)
    # One that shows no FMA instructions at all: SSE's 128 bits.
    no_fma = write_cpuinfo(tmp_path / "no-fma", {**ZEN3_EPYC, "flags": "fpu sse sse2 avx"}, cores=2)
    assert cpu_peak_flops(bfloat16=False, root=no_fma)[1].startswith("2 cores x 16 FLOP/cycle (Zen 3: 2 x 128-bit ")

    # Zen 4 runs AVX-512 in two halves on its 256-bit units: AVX2's FLOPs per cycle; its bfloat16 dot products twice
    # that. On bare metal, without a clock in the model name: cpufreq's highest, not the clock of the moment.
    zen4 = write_cpuinfo(tmp_path / "zen4", ZEN4_EPYC, cores=4)
    (zen4 / "sys/devices/system/cpu/cpu0/cpufreq").mkdir(parents=True)
    (zen4 / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").write_text("3709000\n")
    peak, description = cpu_peak_flops(bfloat16=False, root=zen4)
    assert peak == pytest.approx(4 * 32 * 3.709e9) and description.endswith("x 3.71 GHz (cpufreq's highest)")
    peak, description = cpu_peak_flops(bfloat16=True, root=zen4)
    assert peak == pytest.approx(4 * 64 * 3.709e9)
    assert "(Zen 4: 2 x 256-bit FMA, bfloat16 dot products)" in description


def test_cpu_peak_assumed_from_flags_where_the_table_does_not_know_the_cpu(tmp_path, monkeypatch):
    # Issue #87's Zen 5 EPYC, AVX-512 on 512-bit units, newer than the table: two units of the widest vectors its
    # flags show, 2 x 512 / 32 x 2 = 64 FLOP/cycle, and bfloat16 dot products twice that. The peak says it is assumed,
    # and every round states MFU against it.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    zen5 = write_cpuinfo(tmp_path / "zen5", {**ZEN4_EPYC, "cpu family": 26, "model": 2,
                                             "model name": "AMD EPYC 9575F 64-Core Processor"}, cores=4)
    peak, description = cpu_peak_flops(bfloat16=False, root=zen5)
    assert peak == pytest.approx(4 * 64 * 1.5e9)
    assert description == ("4 cores x 64 FLOP/cycle (assumed from its flags: 2 x 512-bit FMA, float32) x 1.5 GHz "
                           "(cpuinfo's cpu MHz); AMD EPYC 9575F 64-Core Processor (AuthenticAMD family 26 model 2) is "
                           "not in devices.CPU_FMA_UNITS")
    throughput = Throughput(flops_per_token=1e6, tokens_per_step=4096, samples_per_step=32, num_hosts=1,
                            peak_flops=peak, devices=description)
    assert throughput.describe_peak() == f"peak 384 GFLOP/s ({description})"
    assert throughput.figures(steps=100, seconds=10.0)["mfu_percent"] == pytest.approx(100 * 40.96 / 384)
    assert cpu_peak_flops(bfloat16=True, root=zen5)[0] == pytest.approx(4 * 128 * 1.5e9)
    # The widest the flags show: AVX2 and FMA, 256 bits; neither, SSE's 128. A Cascade Lake Xeon, whose SKUs have one
    # or two AVX-512 units: two.
    for flags, flops_per_cycle in (("fpu sse sse2 avx fma avx2", 32), ("fpu sse sse2 avx", 16)):
        cpu = write_cpuinfo(tmp_path / flags, {**ZEN4_EPYC, "cpu family": 26, "flags": flags}, cores=4)
        assert cpu_peak_flops(bfloat16=True, root=cpu)[0] == pytest.approx(4 * flops_per_cycle * 1.5e9)
    cascade_lake = write_cpuinfo(tmp_path / "cascade-lake", {**SAPPHIRE_RAPIDS, "model": 85}, cores=2)
    peak, description = cpu_peak_flops(bfloat16=False, root=cascade_lake)
    assert peak == pytest.approx(2 * 64 * 2.7e9) and "FLOP/cycle (assumed from its flags: " in description


def test_no_cpu_peak_where_it_is_not_known(tmp_path):
    # Another architecture, whose "model" is no number and which shows no x86 flags; no /proc/cpuinfo. Each says why.
    power = write_cpuinfo(tmp_path / "power", {"cpu": "POWER9, altivec supported", "model": "IBM,9006-22P"}, cores=2)
    assert cpu_peak_flops(bfloat16=False, root=power) == (
        None, "CPU (None family None model IBM,9006-22P), whose FMA units are not in devices.CPU_FMA_UNITS and which "
              "shows no x86 vector flags")
    assert cpu_peak_flops(bfloat16=False, root=tmp_path / "nothing") == (
        None, "this CPU, which has no /proc/cpuinfo to read")


def test_peak_of_the_cpu_cores_tensorflow_uses(tmp_path, monkeypatch):
    # On a machine without GPUs: the paper peak of the cores, at most TensorFlow's intra-op threads, which it takes
    # from TF_NUM_INTRAOP_THREADS without showing them in tf.config. Every round then states MFU.
    epyc = write_cpuinfo(tmp_path, ZEN3_EPYC, cores=max(os.sched_getaffinity(0)) + 1)
    monkeypatch.setattr(devices, "cpu_peak_flops", functools.partial(devices.cpu_peak_flops, root=epyc))
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    peak, description = peak_flops(types.SimpleNamespace(num_replicas_in_sync=1), on_tpu=False, bfloat16=False)
    assert peak == pytest.approx(78.4e9) and description.startswith("1 core x 32 FLOP/cycle (Zen 3")
    # 100 steps of 4,096 tokens in 10 s at 1 MFLOP per token: 40.96 GFLOP/s, 52 % of 78.4.
    throughput = Throughput(flops_per_token=1e6, tokens_per_step=32 * 128, samples_per_step=32, num_hosts=1,
                            peak_flops=peak, devices=description)
    assert throughput.describe_peak() == f"peak 78 GFLOP/s ({description})"
    assert throughput.figures(steps=100, seconds=10.0)["mfu_percent"] == pytest.approx(100 * 40.96 / 78.4)


def test_input_pipeline_compared_with_what_training_takes(caplog):
    # Two hosts, each pipeline alone 1,000 samples/s: training at 600 samples/s takes 300 per host, 30 %; at 1,800,
    # 90 %: the steps likely wait for their input.
    throughput = Throughput(flops_per_token=1e6, tokens_per_step=128, samples_per_step=1, num_hosts=2,
                            peak_flops=None, devices="CPU", input_samples_per_second=1000.0)
    with caplog.at_level("INFO", logger="devices"):
        assert throughput.compare_with_input({"samples_per_second": 600.0}) == pytest.approx(0.3)
        assert not [record for record in caplog.records if record.levelname == "WARNING"]
        assert throughput.compare_with_input({"samples_per_second": 1800.0}) == pytest.approx(0.9)
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1 and "Training takes 90 % of what the input pipeline delivers alone" in warnings[0]
    assert "--shard_size" in warnings[0] and "--shuffle_buffer_size" in warnings[0]
