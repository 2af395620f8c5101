"""Which GPUs ftui counts, samples and validates against: only those CUDA_VISIBLE_DEVICES
leaves (ordinals, UUID prefixes, MIG instances; empty: none; unset: all), numbered as the
run numbers them (cuda:N), with nvidia-smi's number kept for the dashboard. NVML is faked."""

import pytest
import yaml

from ftui.machine import gpu
from ftui.config.preflight import validate_config
from tests.fake_nvml import FakeGpu, four_gpus, use_fake_nvml


@pytest.mark.parametrize("value, parsed", [
    (None, None),
    ("", []),
    ("1", [1]),
    ("3, 1", [3, 1]),
    ("1,1", []),            # a repeated entry hides every GPU
    ("0,-1,2", [0]),        # an invalid entry ends the list
    ("1gpu,2", [1, 2]),     # read like strtoul
    ("GPU-abc,GPU-def", ["GPU-abc", "GPU-def"]),
    ("GPU-abc,2", ["GPU-abc"]),
    ("MIG-xyz", ["MIG-xyz"]),
])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, parsed):
    assert gpu.parse_visible_devices(value) == parsed


def machine(monkeypatch, gpus, cuda_visible_devices=None):
    """NVML shows ``gpus``; CUDA_VISIBLE_DEVICES is set to the value (None: unset)."""
    use_fake_nvml(monkeypatch, gpus)
    if cuda_visible_devices is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible_devices)


def visible(monkeypatch, value, gpus=None):
    """(cuda index, nvidia-smi index, name) of each GPU sampled under CUDA_VISIBLE_DEVICES=value."""
    machine(monkeypatch, gpus or four_gpus(), value)
    return [(s.index, s.nvml_index, s.name) for s in gpu.sample_gpus()]


def test_unset_means_every_gpu_numbered_as_nvidia_smi_does(monkeypatch):
    assert visible(monkeypatch, None) == [(i, i, f"GPU model {i}") for i in range(4)]
    assert gpu.gpu_count() == 4
    assert [s.label for s in gpu.sample_gpus()] == ["0", "1", "2", "3"]


def test_an_ordinal_shows_that_gpu_as_cuda_0(monkeypatch):
    assert visible(monkeypatch, "1") == [(0, 1, "GPU model 1")]
    assert gpu.gpu_count() == 1 and gpu.gpu_names() == ["GPU model 1"]
    assert gpu.sample_gpus()[0].label == "0 (nvidia-smi 1)"
    assert gpu.device_choices() == [("GPU 0 (nvidia-smi 1)", "cuda:0")]


def test_a_uuid_prefix_picks_its_gpu(monkeypatch):
    assert visible(monkeypatch, "GPU-cccc") == [(0, 2, "GPU model 2")]
    assert visible(monkeypatch, "GPU-dddd,GPU-aaaa") == [(0, 3, "GPU model 3"), (1, 0, "GPU model 0")]
    assert visible(monkeypatch, "GPU-bbbb,GPU-nope,GPU-aaaa") == [(0, 1, "GPU model 1")]  # CUDA stops at the unknown one
    assert visible(monkeypatch, "GPU-aaaa,GPU-aaaaaaaa") == []  # the same GPU twice


def test_empty_means_no_gpu_and_a_cpu_run(monkeypatch):
    assert visible(monkeypatch, "") == []
    assert gpu.gpu_count() == 0 and gpu.device_choices() == []
    cfg, problems = validate_config({"model_name_or_path": "org/m", "dataset": "x", "fp16": True})
    assert cfg is None and "fp16 needs a CUDA GPU" in problems[0].message
    assert "0 of 4 GPUs visible" in gpu.visibility_note()


def test_ordinals_past_the_last_gpu_end_the_list(monkeypatch):
    assert visible(monkeypatch, "2,7,0") == [(0, 2, "GPU model 2")]


def test_mig_instances_are_sampled_as_themselves(monkeypatch):
    mig = FakeGpu(name="NVIDIA A100 MIG 3g.40gb", uuid="MIG-1234-5678", mem_total=40 << 30)
    gpus = [FakeGpu(name="NVIDIA H100", uuid="GPU-aaaa"), FakeGpu(name="NVIDIA A100", uuid="GPU-bbbb", migs=[mig])]
    assert visible(monkeypatch, "MIG-1234", gpus) == [(0, 1, "NVIDIA A100 MIG 3g.40gb")]
    assert gpu.sample_gpus()[0].mem_total == 40 << 30


def test_bf16_check_looks_only_at_the_gpus_the_run_uses(monkeypatch):
    mixed = [FakeGpu(name="Tesla V100-SXM2-16GB", uuid="GPU-aaaa", capability=(7, 0)),
             FakeGpu(name="NVIDIA A100", uuid="GPU-bbbb", capability=(8, 0))]
    machine(monkeypatch, mixed)
    reason = gpu.bf16_unsupported_reason()
    assert "cuda:0 (Tesla V100-SXM2-16GB, nvidia-smi GPU 0)" in reason and "7.0" in reason
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu.bf16_unsupported_reason() is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert gpu.bf16_unsupported_reason(1) is None  # one process uses cuda:0 only
    assert "cuda:1 (Tesla V100" in gpu.bf16_unsupported_reason(2)


def bf16_config(**kw):
    return {"model_name_or_path": "org/m", "dataset": "x", "bf16": True, **kw}


def test_bf16_on_a_pre_ampere_gpu_is_refused_naming_it_and_fp16(monkeypatch):
    machine(monkeypatch, [FakeGpu(name="Tesla T4", uuid="GPU-aaaa", capability=(7, 5))])
    cfg, problems = validate_config(bf16_config())
    assert cfg is None
    (p,) = problems
    assert p.field == "bf16" and "Tesla T4" in p.message and "7.5" in p.message and "use fp16" in p.message
    assert validate_config(bf16_config(device="cpu"))[0] is not None  # a CPU run does bf16 through autocast
    assert validate_config({**bf16_config(), "bf16": False, "fp16": True})[0] is not None


def test_bf16_on_ampere_is_accepted(monkeypatch):
    machine(monkeypatch, [FakeGpu(capability=(8, 0))])
    cfg, problems = validate_config(bf16_config())
    assert cfg is not None and problems == []


def test_ftui_train_refuses_bf16_on_a_volta_gpu(monkeypatch, tmp_path, capsys):
    from ftui.cli.main import main

    machine(monkeypatch, [FakeGpu(name="Tesla V100-SXM2-32GB", uuid="GPU-aaaa", capability=(7, 0))])
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"model_name_or_path": "ftui-demo", "dataset": "x.json", "bf16": True,
                                    "output_dir": str(tmp_path / "runs")}))
    assert main(["train", str(conf)]) == 2
    err = " ".join(capsys.readouterr().err.split())  # Rich wraps lines
    assert "Tesla V100-SXM2-32GB" in err and "compute capability 7.0" in err and "fp16" in err
    assert not (tmp_path / "runs").exists()
    assert main(["plan", str(conf)]) == 2  # the same validation


# --- gpus: the GPUs a run uses, picked in the form or the config (issue 13, item 13)

def gpus_config(**kw):
    return {"model_name_or_path": "org/m", "dataset": "x", "engine": "ddp", **kw}


@pytest.mark.parametrize("value, stored", [("2,3", "2,3"), (" 2, 3 ", "2,3"), ([2, 3], "2,3"), (1, "1"), ("", None),
                                           ("GPU-cccc,GPU-aaaa", "GPU-cccc,GPU-aaaa")])
def test_gpus_takes_yaml_numbers_lists_and_text(monkeypatch, value, stored):
    machine(monkeypatch, four_gpus())
    cfg, problems = validate_config(gpus_config(gpus=value, nproc_per_node=1))
    assert problems == [] and cfg.gpus == stored


@pytest.mark.parametrize("value, words", [("x", "expected nvidia-smi's GPU numbers"), ("1,1", "GPU 1 is named twice"),
                                          ("0,7", "GPU 7 is not on this machine (nvidia-smi numbers its 4 GPU(s) 0-3)"),
                                          ("GPU-zzzz", "GPU GPU-zzzz is not on this machine")])
def test_gpus_that_cuda_would_misread_or_this_machine_lacks_are_refused(monkeypatch, value, words):
    machine(monkeypatch, four_gpus())
    cfg, problems = validate_config(gpus_config(gpus=value, nproc_per_node=1))
    assert cfg is None and [p.field for p in problems] == ["gpus"] and words in problems[0].message


def test_more_processes_than_picked_gpus_is_refused_naming_both(monkeypatch):
    machine(monkeypatch, four_gpus())
    cfg, problems = validate_config(gpus_config(gpus="1,2", nproc_per_node=3))
    assert cfg is None and [p.field for p in problems] == ["nproc_per_node"]
    assert "3 processes need a GPU each, but gpus picks 2 (1,2)" in problems[0].message
    machine(monkeypatch, [])  # no NVML (a login node): the count is still checked
    assert validate_config(gpus_config(gpus="1,2", nproc_per_node=3))[0] is None
    assert validate_config(gpus_config(gpus="1,2", nproc_per_node=2))[0].gpus == "1,2"


def test_picked_gpus_replace_cuda_visible_devices_for_checks_and_sampling(monkeypatch):
    mixed = [FakeGpu(name="Tesla V100-SXM2-16GB", uuid="GPU-aaaa", capability=(7, 0)),
             FakeGpu(name="NVIDIA A100", uuid="GPU-bbbb", capability=(8, 0))]
    machine(monkeypatch, mixed, "0")
    assert validate_config(bf16_config())[0] is None  # the environment's GPU 0: a V100
    assert validate_config(bf16_config(gpus="1"))[0].gpus == "1"  # the picked A100
    assert [(s.index, s.nvml_index) for s in gpu.sample_gpus("1")] == [(0, 1)]
    assert gpu.gpu_count("0,1") == 2 and gpu.gpu_count() == 1
    assert validate_config(gpus_config(gpus="0", device="cpu"))[1][0].field == "gpus"


def test_the_machine_list_names_gpus_as_nvidia_smi_does(monkeypatch):
    machine(monkeypatch, four_gpus(), "")  # the environment's CUDA_VISIBLE_DEVICES does not hide any from the list
    listed = gpu.machine_gpus()
    assert [key for key, _ in listed] == ["0", "1", "2", "3"]
    assert listed[2][1] == "GPU model 2, 41 of 42 GiB free"


def test_the_inventory_is_asked_without_waiting_and_answers_the_checks_without_nvml(monkeypatch):
    """inventory_read() is what the UI thread asks before a check: it must not wait while a
    worker is inside a slow nvmlInit (it took the lock the worker held). Once the inventory is
    read, the bf16 check and a MIG pick ask NVML nothing more (they ran on every keystroke)."""
    import threading

    mig = FakeGpu(name="NVIDIA A100 MIG 3g.40gb", uuid="MIG-1234-5678")
    fake = use_fake_nvml(monkeypatch, [FakeGpu(uuid="GPU-aaaa", capability=(7, 0)), FakeGpu(uuid="GPU-bbbb", migs=[mig])])
    entered, release = threading.Event(), threading.Event()

    def slow_init():
        entered.set()
        release.wait(30)

    monkeypatch.setattr(fake, "nvmlInit", slow_init, raising=False)
    worker = threading.Thread(target=gpu.gpu_count)
    worker.start()
    try:
        assert entered.wait(30)
        asked = threading.Thread(target=gpu.inventory_read)
        asked.start()
        asked.join(5)
        assert not asked.is_alive(), "inventory_read waited for nvmlInit"
        assert gpu.inventory_read() is False  # not read yet: the form waits for the worker
    finally:
        release.set()
        worker.join(30)
    assert gpu.inventory_read() is True

    def no_nvml(*_args):
        raise AssertionError("an NVML call after the inventory was read")

    for name in ("nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
                 "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetCount", "nvmlDeviceGetUUID"):
        monkeypatch.setattr(fake, name, no_nvml, raising=False)
    assert "7.0" in gpu.bf16_unsupported_reason()
    assert gpu.bf16_unsupported_reason(picked="MIG-1234") is None
    assert [g.nvml_index for g in gpu.visible_gpus("MIG-1234")] == [1]
