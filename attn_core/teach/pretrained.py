"""The book's pretrained model: a small byte-level language model trained on Shakespeare.

Every trained map elsewhere in the book comes from a synthetic task; this one comes from
a :class:`~attn_core.DecoderLM` trained on ten of Shakespeare's plays (``make weights``,
``tools/train_shakespeare.py``) and shipped with the package, so that ``pip install``
brings it along (Colab included).

* :func:`load_shakespeare` returns the model and its :class:`ByteCodec`.
* :func:`shakespeare_info` returns what the training command recorded beside the weights
  (settings, losses, parameter count, wall time, a greedy sample).
* :func:`shakespeare_text` returns the validation play (shipped) or the training plays
  (in the repository only).
* :func:`attention_maps` runs the model on a text and returns every layer's and head's
  attention weights, with one label per byte.
* :func:`bits_per_char` measures a model on a text: the cross-entropy in bits per byte
  (= per character: the corpus is ASCII).

A real pretrained LLM, SmolLM2-135M-Instruct, is :func:`load_smollm2` (re-exported here;
it lives in :mod:`attn_core.hf.smollm2`, with its fetching and conversion).

The codec is UTF-8 bytes: 256 token ids, nothing to download, any text a reader types is
valid input (a non-ASCII character becomes two or more bytes).

Shape legend:
    T    bytes of text (tokens)
    L    layers, H heads
    V    vocabulary size, 256
"""

from __future__ import annotations

import json
import math
import pickle
import zipfile
from dataclasses import fields
from pathlib import Path

import torch
import torch.nn.functional as F

from ..config import DecoderConfig
from ..hf.smollm2 import load_smollm2
from ..model.decoder import DecoderLM

__all__ = [
    "ByteCodec",
    "load_shakespeare",
    "load_smollm2",
    "shakespeare_info",
    "shakespeare_text",
    "shakespeare_config",
    "attention_maps",
    "bits_per_char",
    "DATA_DIR",
    "WEIGHTS_PATH",
    "INFO_PATH",
]

#: Folder of the shipped corpus, weights and their record.
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "shakespeare"
#: The trained weights (a ``state_dict``, loaded with ``weights_only=True``).
WEIGHTS_PATH = DATA_DIR / "model.pt"
#: What the training command recorded beside the weights (JSON).
INFO_PATH = DATA_DIR / "model.json"
SPLITS = ("train", "val")


class ByteCodec:
    """Text <-> token ids, one token per UTF-8 byte (vocabulary 256).

    Shapes:
        encode(text): ``(T,)`` int64; decode(ids): ids of shape ``(T,)`` or a list
    """

    vocab_size = 256

    def encode(self, text: str) -> torch.Tensor:
        """The UTF-8 bytes of ``text`` as a ``(T,)`` int64 tensor."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)

    def decode(self, ids) -> str:
        """Bytes back to text; an incomplete multi-byte character becomes U+FFFD."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids must have shape (T,), got {tuple(ids.shape)}")
            ids = ids.tolist()
        values = [int(i) for i in ids]
        bad = [i for i in values if not 0 <= i < 256]
        if bad:
            raise ValueError(f"byte ids must be in [0, 256), got {bad[:5]}")
        return bytes(values).decode("utf-8", errors="replace")

    def labels(self, ids) -> list[str]:
        """One readable label per token, for plots: ``␣`` for a space, ``⏎`` for a newline.

        A byte that is not printable ASCII is shown as ``\\xNN``.
        """
        if isinstance(ids, str):
            ids = self.encode(ids)
        out = []
        for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
            i = int(i)
            if i == 32:
                out.append("␣")
            elif i == 10:
                out.append("⏎")
            elif 32 < i < 127:
                out.append(chr(i))
            else:
                out.append(f"\\x{i:02x}")
        return out

    def __repr__(self) -> str:
        return "ByteCodec(vocab_size=256)"


def _read_info(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the pretrained model's record is missing (run `make weights`, "
            f"or reinstall attn_core so that its package data comes along)"
        )
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); it may be truncated: run `make weights`") from e
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise ValueError(f"{path} has no 'config' object: it is not a record written by tools/train_shakespeare.py")
    return info


def shakespeare_info(path: str | Path | None = None) -> dict:
    """What ``make weights`` recorded: settings, corpus, losses (bits/char), parameters, wall time, sample.

    Args:
        path: The JSON record; default :data:`INFO_PATH`.

    Raises:
        FileNotFoundError: The record is missing.
        ValueError: It is not valid JSON or has no ``config``.
    """
    return _read_info(Path(INFO_PATH if path is None else path))


def shakespeare_config(info: dict | None = None) -> DecoderConfig:
    """The :class:`~attn_core.DecoderConfig` of the shipped model (from its record)."""
    info = shakespeare_info() if info is None else info
    known = {f.name for f in fields(DecoderConfig)}
    unknown = sorted(set(info["config"]) - known)
    if unknown:
        raise ValueError(f"the record's config has fields DecoderConfig does not know: {unknown}")
    return DecoderConfig(**info["config"])


def load_shakespeare(
    weights: str | Path | None = None, *, info: str | Path | None = None, dtype: torch.dtype = torch.float32
) -> tuple[DecoderLM, ByteCodec]:
    """Load the shipped Shakespeare model, in eval mode, and its byte codec.

    Args:
        weights: A ``state_dict`` file; default :data:`WEIGHTS_PATH`.
        info: Its JSON record (for the configuration); default :data:`INFO_PATH`.
        dtype: ``torch.float32``, or ``torch.float64`` for results that are the same on
            every CPU (the book's notebooks use float64).

    Returns:
        ``(model, codec)``.

    Raises:
        FileNotFoundError: The weights or the record are missing.
        ValueError: The file is truncated or not a ``state_dict``, or its tensors do not
            match the configuration (a missing, unexpected or wrongly shaped entry is named).
        TypeError: ``dtype`` is not a floating-point dtype.

    Shapes:
        model(ids): ids ``(B, T)`` with ``T <= config.max_len`` -> logits ``(B, T, 256)``
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got dtype={dtype!r}")
    path = Path(WEIGHTS_PATH if weights is None else weights)
    config = shakespeare_config(shakespeare_info(info))
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the pretrained weights are missing (run `make weights`)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as e:
        raise ValueError(f"{path} could not be read as a PyTorch state_dict (truncated or corrupt?): {e}") from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a state_dict of tensors")
    model = DecoderLM(config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path} does not match the configuration: missing {missing}, unexpected {unexpected}")
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise ValueError(
                f"{path}: {name} has shape {tuple(state[name].shape)}, the configuration needs {tuple(tensor.shape)}"
            )
    model.load_state_dict(state)
    return model.to(dtype).eval(), ByteCodec()


def shakespeare_text(split: str = "val") -> str:
    """The corpus text: ``"val"`` (The Tempest, shipped) or ``"train"`` (ten plays, repository only).

    Raises:
        ValueError: Unknown ``split``.
        FileNotFoundError: The file is not there (the training text is not in the wheel).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got split={split!r}")
    path = DATA_DIR / f"{split}.txt"
    if not path.is_file():
        in_repo_only = " (the training text is in the book's repository, not in the installed package)"
        hint = in_repo_only if split == "train" else ""
        raise FileNotFoundError(f"{path} not found{hint}")
    return path.read_text(encoding="utf-8")


def _ids_2d(model: DecoderLM, ids) -> torch.Tensor:
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if isinstance(ids, str):
        ids = ByteCodec().encode(ids)
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"ids must be a str or a tensor of token ids, got {type(ids).__name__}")
    if ids.dim() == 1:
        ids = ids[None]  # (T,) -> (1, T)
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(f"ids must have shape (T,) or (B, T) with T >= 1, got {tuple(ids.shape)}")
    if ids.shape[1] > model.config.max_len:
        raise ValueError(f"{ids.shape[1]} tokens exceed the model's max_len={model.config.max_len}")
    return ids


@torch.no_grad()
def attention_maps(model: DecoderLM, text) -> tuple[torch.Tensor, list[str]]:
    """Every layer's and head's attention weights on ``text``, and a label per byte.

    Args:
        model: A :class:`~attn_core.DecoderLM` (e.g. from :func:`load_shakespeare`).
        text: A string (encoded as bytes) or token ids of shape ``(T,)`` or ``(1, T)``.

    Returns:
        ``(weights, labels)``: ready for ``viz.attention_grid`` and ``viz.explorer``.

    Shapes:
        weights: ``(L, H, T, T)`` in the model's dtype; labels: ``T`` strings
    """
    ids = _ids_2d(model, text)
    if ids.shape[0] != 1:
        raise ValueError(f"attention_maps takes one text, got a batch of {ids.shape[0]}")
    was_training = model.training
    model.eval()
    try:
        _, weights = model(ids, return_weights=True)  # L tensors (1, H, T, T)
    finally:
        model.train(was_training)
    return torch.cat(weights, dim=0), ByteCodec().labels(ids[0])  # (L, H, T, T)


@torch.no_grad()
def bits_per_char(model: DecoderLM, text, *, context: int | None = None, batch_size: int = 32) -> float:
    """Cross-entropy of next-byte prediction on ``text``, in bits per byte (= per character for ASCII).

    The text is cut into non-overlapping windows of ``context + 1`` bytes; each window
    predicts its last ``context`` bytes from the ones before (the first byte of each
    window is context only). A leftover tail shorter than a window is scored as a
    shorter window.

    Args:
        model: A :class:`~attn_core.DecoderLM`.
        text: A string or token ids of shape ``(N,)``.
        context: Window length; default ``model.config.max_len``.
        batch_size: Windows per forward pass.

    Shapes:
        text: ``N`` bytes, ``N >= 2``
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    ids = ByteCodec().encode(text) if isinstance(text, str) else text
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.numel() < 2:
        raise ValueError("text must be a str or a (N,) tensor of token ids with N >= 2")
    context = model.config.max_len if context is None else context
    if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= model.config.max_len:
        raise ValueError(f"context must be an int in [1, max_len={model.config.max_len}], got context={context!r}")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        n_full = (ids.numel() - 1) // context
        if n_full:
            windows = ids[: n_full * context + 1].unfold(0, context + 1, context)  # (n_full, context + 1)
            for start in range(0, n_full, batch_size):
                chunk = windows[start : start + batch_size]
                logits = model(chunk[:, :-1])  # (b, context, V)
                total += F.cross_entropy(logits.flatten(0, 1).double(), chunk[:, 1:].flatten(), reduction="sum").item()
                count += chunk[:, 1:].numel()
        tail = ids[n_full * context :]  # the bytes after the last full window (its first byte is context)
        if tail.numel() >= 2:
            logits = model(tail[None, :-1])  # (1, t, V)
            total += F.cross_entropy(logits[0].double(), tail[1:], reduction="sum").item()
            count += tail.numel() - 1
    finally:
        model.train(was_training)
    return total / count / math.log(2)
