"""run_mlm.py's speed figures: the FLOP count of a training step against a hand count, MFU against a given peak, and
the devices' peaks."""

import types

import pytest
from transformers import DistilBertConfig, ElectraConfig, RobertaConfig, TFAutoModelForMaskedLM

import devices
from devices import Throughput, model_flops_utilization, peak_flops, training_flops_per_token

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


def test_peaks_of_tpus_per_replica_and_none_for_a_cpu(monkeypatch):
    # A v3 chip runs 2 replicas (one per TensorCore), a v4 chip one (its cores act as one).
    for chips, replicas, peak in (({"v3": 4}, 8, 4 * 123e12), ({"v4": 4}, 4, 4 * 275e12),
                                  ({"v5e": 8}, 8, 8 * 197e12)):
        monkeypatch.setattr(devices, "local_tpu_chips", lambda: chips)
        strategy = types.SimpleNamespace(num_replicas_in_sync=replicas)
        assert peak_flops(strategy, on_tpu=True, bfloat16=True)[0] == pytest.approx(peak)
    monkeypatch.setattr(devices, "local_tpu_chips", lambda: {})  # A TPU Node: its chips are elsewhere.
    assert peak_flops(strategy, on_tpu=True, bfloat16=True)[0] is None
    assert peak_flops(types.SimpleNamespace(num_replicas_in_sync=1), on_tpu=False, bfloat16=False) == (None, "CPU")


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
