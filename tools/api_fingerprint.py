"""A fingerprint of attn_core's public API and numbers, to prove that a reorganisation changed nothing.

Moving ``attn_core``'s modules into subpackages is meant to change no behaviour. This tool
records, from one checkout, what such a move must keep:

* ``api``: every name in the ``__all__`` of every module under ``attn_core`` (module, kind,
  signature, hashes of its source: the code with docstrings stripped, the docstrings, the
  text; a class's method signatures);
* ``attention``: :func:`attn_core.attention` over a grid of dtypes, masks, windows, sinks,
  soft-caps, weights, dropout, GQA and ``T_q < T_k``, with the Triton and Flex kernels forced
  ``"always"`` or left at their default: which backend ran (explicit, SDPA, flash, flex,
  or the error raised) and hashes of the output, the weights and the gradients;
* ``backend_modes``: the kernel modes read back while each setting is in force;
* ``hf_configs``: ``config_from_hf`` of the default ``transformers`` config of every supported model type;
* ``state_dicts``: keys, shapes and dtypes of ``DecoderLM`` for every config preset (built on
  the meta device; the toy ones also on the CPU, seeded, and hashed), the shipped Shakespeare
  model and SmolLM2 (from an existing cache only: nothing is downloaded or converted);
* ``host_work``: the counts of ``python -m benchmarks.host_work`` (kernel launches, Python calls).

Usage::

    python tools/api_fingerprint.py BEFORE.json --root /path/to/old/checkout
    python tools/api_fingerprint.py AFTER.json
    python tools/api_fingerprint.py --diff BEFORE.json AFTER.json --map move_map.py

``--map`` names a Python file defining ``MAP``, old module -> new module (dotted, relative to
``attn_core``; a package maps with its submodules). The diff maps BEFORE's module paths
through it (and the absolute names a function's own imports import), so a name that only moved
is no difference; it prints every differing row and exits with 1 if there is any.
``--code-only`` ignores docstrings and comments; ``--allow-added`` prints rows only in AFTER
(a new package's ``__all__``, a new API) without counting them.

Backends are forced through ``attn_core.ops.backends`` (``use``/``set_mode``) where it exists,
else through the old ``set_flash_mode`` and ``set_flex_mode``, wherever they are; which backend
ran is logged by wrapping the functions named in :data:`SPY_NAMES`, wherever they are.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
import os
import pkgutil
import re
import runpy
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import warnings
from pathlib import Path

SECTIONS = ("api", "attention", "backend_modes", "hf_configs", "state_dicts", "host_work")
#: The functions attention() enters on each backend, by name (searched in every attn_core module).
# Before the backend table and after it; "module.name" only in a module of that name. A call that
# passes through two spied functions of one backend (the old flash entry calls _attention) logs it once.
SPY_NAMES = {
    "_explicit": "explicit",
    "_fast": "sdpa",
    "_flash_attention_checked": "flash",
    "flex_attention": "flex",
    "explicit_attention": "explicit",
    "sdpa_attention": "sdpa",
    "flash._attention": "flash",
    "flex._flex_attention": "flex",
}
#: The grid's kernel settings: (name, modes to force).
SETTINGS = (("default", {}), ("flash_always", {"flash": "always"}), ("flex_always", {"flex": "always"}))
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_DOTTED = re.compile(r"\battn_core(?:\.\w+)+")  # a dotted attn_core path in text: the diff maps it


def sha(data: bytes | str) -> str:
    """A short sha256 of bytes or text."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def error_name(error: BaseException) -> str:
    return f"error: {type(error).__name__}"


def tensor_hash(t) -> str | None:
    """sha256 of a tensor's dtype, shape and bytes (exact: any bit that differs changes it)."""
    if t is None:
        return None
    import torch

    t = t.detach().cpu().contiguous()
    flat = t.reshape(-1).view(torch.uint8) if t.numel() else t.reshape(-1)
    return sha(f"{t.dtype}{tuple(t.shape)}".encode() + flat.numpy().tobytes())


# --------------------------------------------------------------------------------------- loading


def load_attn_core(root: Path):
    """Import attn_core from ``root`` (first on sys.path), and check that it came from there."""
    sys.path.insert(0, str(root))
    import attn_core

    where = Path(attn_core.__file__).resolve()
    if root.resolve() not in where.parents:
        sys.exit(f"attn_core was imported from {where}, not from {root}: check PYTHONPATH and --root")
    return attn_core


def walk_modules(attn_core, root: Path) -> tuple[dict, dict]:
    """Every module under attn_core (``__main__`` skipped), imported: ({name: module}, {name: error})."""
    modules, errors = {"attn_core": attn_core}, {}
    for info in pkgutil.walk_packages(
        attn_core.__path__, "attn_core.", onerror=lambda name: errors.setdefault(name, "walk")
    ):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                modules[info.name] = importlib.import_module(info.name)
        except Exception as error:  # noqa: BLE001 - recorded
            errors[info.name] = f"{error_name(error)}: {error}"
    for name, mod in modules.items():
        file = getattr(mod, "__file__", None)
        if file and root.resolve() not in Path(file).resolve().parents:
            sys.exit(f"{name} was imported from {file}, not from {root}")
    return dict(sorted(modules.items())), errors


def find_function(modules: dict, name: str):
    """The function called ``name`` defined in some attn_core module (the first found), or None."""
    for mod in modules.values():
        fn = vars(mod).get(name)
        if inspect.isfunction(fn) and fn.__module__ == mod.__name__:
            return fn
    return None


# --------------------------------------------------------------------------------------- 1. API


def stable_repr(value, depth: int = 0) -> str:
    """A repr without memory addresses or module paths (functions and classes by qualified name)."""
    if depth > 4:
        return "..."
    if inspect.ismodule(value):
        return "<module>"
    if inspect.isclass(value) or inspect.isroutine(value):
        return f"<{getattr(value, '__qualname__', type(value).__name__)}>"
    if isinstance(value, dict):
        items = ", ".join(f"{stable_repr(k, depth + 1)}: {stable_repr(v, depth + 1)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [stable_repr(v, depth + 1) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort()
        return f"{type(value).__name__}({', '.join(items)})"
    if type(value).__name__ == "Tensor":
        return f"tensor{tuple(value.shape)}:{value.dtype}:{tensor_hash(value)}"
    if isinstance(value, (str, int, float, bool, complex, bytes, type(None))) or dataclasses.is_dataclass(value):
        return _ADDRESS.sub("", repr(value))
    return f"<{type(value).__name__} instance>"


def source_hashes(obj) -> dict:
    """Hashes of ``obj``'s source: ``code`` (the AST without docstrings and without where imports come from),
    ``doc`` (the docstrings), ``text``; and ``imports``, what its own import statements import, absolute
    (``attn_core.masks.causal_mask``), so that the diff can map them."""
    for target in (obj, getattr(obj, "fn", None), getattr(obj, "__func__", None)):  # .fn: a Triton kernel
        if target is None:
            continue
        try:
            source = inspect.getsource(target)
            break
        except (TypeError, OSError):
            continue
    else:
        return {}
    source = textwrap.dedent(source)
    docs = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {"text": sha(source)}
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docs.append(first.value.value)
                node.body = body[1:] or [ast.Pass()]
    imports = []
    package = getattr(sys.modules.get(getattr(obj, "__module__", None) or ""), "__package__", None)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                relative = "." * node.level + base
                base = importlib.util.resolve_name(relative, package) if package else relative
            imports += [f"{base}.{alias.name}" for alias in node.names]
            node.module, node.level = "", 0
        elif isinstance(node, ast.Import):
            imports += [alias.name for alias in node.names]
            for alias in node.names:
                alias.name = ""
    for node in ast.walk(tree):  # paths named in strings (messages, commands): out of the hash, into "imports"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.search(node.value):
            imports += [f"(text) {name}" for name in _DOTTED.findall(node.value)]
            node.value = _DOTTED.sub("attn_core.*", node.value)
    hashes = {"code": sha(ast.dump(tree, include_attributes=False)), "doc": sha("\0".join(docs)), "text": sha(source)}
    return {**hashes, **({"imports": sorted(imports)} if imports else {})}


def signature(obj) -> str | None:
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return None


def kind_of(obj) -> str:
    if inspect.isclass(obj):
        return "class"
    if inspect.isroutine(obj) or isinstance(obj, functools.partial):
        return "function"
    return "other"


def class_methods(cls) -> dict:
    """Signatures of what the class itself defines: methods, class/static methods, properties."""
    methods = {}
    for name, member in vars(cls).items():
        if isinstance(member, (staticmethod, classmethod)):
            methods[name] = f"{type(member).__name__} {signature(member.__func__)}"
        elif isinstance(member, property):
            methods[name] = "property"
        elif inspect.isfunction(member):
            methods[name] = signature(member)
    return dict(sorted(methods.items()))


def api_rows(modules: dict, errors: dict) -> dict:
    rows = {}
    for mod_name, error in errors.items():
        rows[f"{mod_name}:<import>"] = {"module": mod_name, "name": "<import>", "error": error}
    for mod_name, mod in modules.items():
        for name in getattr(mod, "__all__", ()):
            row = {"module": mod_name, "name": name}
            if not hasattr(mod, name):
                rows[f"{mod_name}:{name}"] = {**row, "error": "missing"}
                continue
            obj = getattr(mod, name)
            kind = kind_of(obj)
            row["kind"] = kind
            if kind != "other":
                row["defined_in"] = getattr(obj, "__module__", None)
                row["signature"] = signature(obj)
            else:
                row["type"] = type(obj).__name__
                value = stable_repr(obj)
                row["value"] = value if len(value) <= 200 else sha(value)
            if kind == "class":
                row["bases"] = [b.__qualname__ for b in obj.__bases__]
                row["methods"] = class_methods(obj)
            row.update(source_hashes(obj) if kind != "other" or hasattr(obj, "fn") else {})
            rows[f"{mod_name}:{name}"] = row
    return rows


# --------------------------------------------------------------------------------------- 2. attention()


class Spy:
    """Wraps each backend's entry function, in every attn_core module that holds it, to log which ran."""

    def __init__(self, modules: dict):
        self.calls: list[str] = []
        self.found: dict[str, list[str]] = {}
        self._patched: list[tuple] = []
        targets = {}
        for mod in modules.values():
            for spec, label in SPY_NAMES.items():
                owner, _, name = spec.rpartition(".")
                if owner and not mod.__name__.endswith("." + owner):
                    continue
                fn = vars(mod).get(name)
                if inspect.isfunction(fn) and fn.__module__ == mod.__name__:
                    targets[id(fn)] = (fn, label)
        for mod in modules.values():
            for attr, value in list(vars(mod).items()):
                if id(value) in targets and targets[id(value)][0] is value:
                    fn, label = targets[id(value)]
                    self._patched.append((mod, attr, fn))
                    setattr(mod, attr, self._wrap(fn, label))
                    self.found.setdefault(label, []).append(f"{mod.__name__}.{attr}")
        for label in sorted(set(SPY_NAMES.values()) - set(self.found)):
            print(f"warning: no backend function for {label!r} (looked for {SPY_NAMES})", file=sys.stderr)

    def _wrap(self, fn, label):
        @functools.wraps(fn)
        def spied(*args, **kwargs):
            if not self.calls or self.calls[-1] != label:
                self.calls.append(label)
            return fn(*args, **kwargs)

        return spied

    def restore(self):
        for mod, attr, fn in self._patched:
            setattr(mod, attr, fn)


class Backends:
    """Forces the kernels' modes: ``attn_core.ops.backends.use``/``set_mode`` (new API), else the old setters."""

    def __init__(self, modules: dict):
        try:
            table = importlib.import_module("attn_core.ops.backends")
        except ImportError:
            table = None
        self.table = table if table is not None and hasattr(table, "set_mode") and hasattr(table, "mode") else None
        self.old = {name: find_function(modules, f"set_{name}_mode") for name in ("flash", "flex")}
        self.old_get = {name: find_function(modules, f"{name}_mode") for name in ("flash", "flex")}
        if self.table is not None:
            self.api = f"{table.__name__}.{'use' if hasattr(table, 'use') else 'set_mode'}"
        else:
            self.api = ", ".join(f"{fn.__module__}.{fn.__name__}" for fn in self.old.values() if fn)

    def mode(self, name: str) -> str:
        if self.table is not None:
            return self.table.mode(name)
        getter = self.old_get[name]
        return getter() if getter else "unknown"

    @contextlib.contextmanager
    def forced(self, **modes):
        if self.table is not None and hasattr(self.table, "use"):
            with self.table.use(**modes):
                yield
            return
        if self.table is not None:
            previous = {name: self.table.set_mode(name, mode) for name, mode in modes.items()}
            restore = lambda: [self.table.set_mode(name, mode) for name, mode in previous.items()]
        else:
            previous = {name: self.old[name](mode) for name, mode in modes.items()}
            restore = lambda: [self.old[name](mode) for name, mode in previous.items()]
        try:
            yield
        finally:
            restore()


def attention_inputs(dtype, gqa: bool, short_q: bool, grad: bool):
    """Tiny seeded q, k, v (B=1, H=4, H_kv=2 or 4, T_k=8, T_q=5 or 8, D=16) and sinks (H,), leaves if ``grad``."""
    import torch

    g = torch.Generator().manual_seed(0)
    H, H_kv, T_k, D = 4, 2 if gqa else 4, 8, 16
    T_q = 5 if short_q else T_k
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_(grad)
    return make(1, H, T_q, D), make(1, H_kv, T_k, D), make(1, H_kv, T_k, D), make(H), T_q, T_k


def make_mask(kind: str, T_q: int, T_k: int, dtype):
    import torch

    if kind in ("none", "causal"):
        return None
    g = torch.Generator().manual_seed(1)
    allowed = torch.rand(T_q, T_k, generator=g) > 0.4
    allowed[0] = False  # one query with every key masked
    if kind == "bool":
        return allowed
    bias = torch.randn(T_q, T_k, generator=g, dtype=torch.float64).to(dtype)
    return bias.masked_fill(~allowed, float("-inf"))


def attention_rows(attn_core, modules: dict) -> tuple[dict, dict, dict]:
    import torch

    spy, backends = Spy(modules), Backends(modules)
    rows, modes = {}, {}
    dtypes = (torch.float32, torch.float64, torch.bfloat16)
    grid = itertools.product(
        dtypes, ("none", "bool", "float", "causal"), (None, 3), (False, True), (None, 5.0), (False, True), (0.0, 0.1),
        (False, True), (False, True),
    )  # fmt: skip
    grid = list(grid)
    try:
        for setting, forced in SETTINGS:
            with backends.forced(**forced), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                modes[setting] = {name: backends.mode(name) for name in ("flash", "flex")}
                for dtype, mask_kind, window, with_sinks, softcap, weights, dropout, gqa, short_q in grid:
                    key = (
                        f"{setting}|{str(dtype).removeprefix('torch.')}|mask={mask_kind}|window={window}|"
                        f"sinks={with_sinks}|softcap={softcap}|weights={weights}|dropout={dropout}|gqa={gqa}|"
                        f"T_q<T_k={short_q}"
                    )
                    point = (dtype, mask_kind, window, with_sinks, softcap, weights, dropout, gqa, short_q)
                    rows[key] = one_attention(attn_core.attention, spy, *point)
    finally:
        spy.restore()
    return rows, modes, {"spied": spy.found, "forced_with": backends.api}


def one_attention(attention, spy, dtype, mask_kind, window, with_sinks, softcap, weights, dropout, gqa, short_q):
    """One grid point: the backend and the output (inputs without grad: eager FlexAttention has no backward on
    the CPU), then, in float32/float64, the gradients of ``output.sum()`` from a second call on leaves."""
    import torch

    row = {}
    for grad in (False, True) if dtype in (torch.float32, torch.float64) else (False,):
        q, k, v, sinks, T_q, T_k = attention_inputs(dtype, gqa, short_q, grad)
        kwargs = dict(
            mask=make_mask(mask_kind, T_q, T_k, dtype), is_causal=mask_kind == "causal", window=window,
            sinks=sinks if with_sinks else None, softcap=softcap, return_weights=weights, dropout_p=dropout,
        )  # fmt: skip
        spy.calls.clear()
        try:
            torch.manual_seed(1234)
            result = attention(q, k, v, **kwargs)
            out, w = result if weights else (result, None)
            if grad:
                out.sum().backward()
        except Exception as error:  # noqa: BLE001 - recorded
            row["grad_backend" if grad else "backend"] = "+".join(spy.calls) or "none"
            row["grads" if grad else "result"] = error_name(error)
            if not grad:
                return row
            continue
        backend = "+".join(spy.calls) or "none"
        if not grad:
            row.update(backend=backend, out=tensor_hash(out), **({"weights": tensor_hash(w)} if weights else {}))
            continue
        leaves = dict(q=q, k=k, v=v, **({"sinks": sinks} if with_sinks else {}))
        row["grads"] = {name: tensor_hash(t.grad) for name, t in leaves.items()}
        if backend != row["backend"] or tensor_hash(out) != row["out"]:
            row.update(grad_backend=backend, grad_out=tensor_hash(out))  # the call with grad went elsewhere
    return row


# --------------------------------------------------------------------------------------- 3. HF configs


def hf_config_rows(modules: dict) -> tuple[dict, dict]:
    config_from_hf = find_function(modules, "config_from_hf")
    if config_from_hf is None:
        return {"<config_from_hf>": "error: not found"}, {}
    # The module that lists SUPPORTED_MODEL_TYPES in its __all__ (the family registry), else config_from_hf's.
    listing = (m for m in modules.values() if "SUPPORTED_MODEL_TYPES" in getattr(m, "__all__", ()))
    home = next(listing, modules[config_from_hf.__module__])
    model_types = getattr(home, "SUPPORTED_MODEL_TYPES", None)
    if model_types is None:
        return {"<SUPPORTED_MODEL_TYPES>": f"error: not in {home.__name__}"}, {}
    from transformers import AutoConfig

    rows = {"<SUPPORTED_MODEL_TYPES>": list(model_types)}
    for model_type in model_types:
        try:
            hf = AutoConfig.for_model(model_type)
        except Exception as error:  # noqa: BLE001 - recorded
            rows[model_type] = f"{error_name(error)} (transformers: {error})"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows[model_type] = stable_repr(config_from_hf(hf))
        except Exception as error:  # noqa: BLE001 - recorded
            rows[model_type] = f"{error_name(error)}: {error}"
    return rows, {"config_from_hf": f"{config_from_hf.__module__}.config_from_hf"}


# --------------------------------------------------------------------------------------- 4. state_dicts


def describe_state(state: dict, *, values: bool) -> dict:
    shapes = {name: f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for name, t in state.items()}
    row = {"n": len(state), "numel": sum(t.numel() for t in state.values()), "shapes": shapes}
    if values:
        row["values"] = sha("".join(f"{name}={tensor_hash(t)};" for name, t in state.items()))
    return row


def state_dict_rows(attn_core, modules: dict, models: Path | None) -> tuple[dict, dict]:
    import torch

    rows, meta = {}, {}
    presets = importlib.import_module("attn_core.config.presets")
    for name in presets.__all__:
        try:
            config = getattr(attn_core.DecoderConfig, name)()
            with torch.device("meta"):
                model = attn_core.DecoderLM(config)
            row = describe_state(model.state_dict(), values=False)
            row["parameter_count"] = attn_core.parameter_count(config)
            if row["numel"] < 5_000_000:  # a toy: also its seeded initial values
                torch.manual_seed(0)
                row["values"] = describe_state(attn_core.DecoderLM(config).state_dict(), values=True)["values"]
            rows[f"preset:{name}"] = row
        except Exception as error:  # noqa: BLE001 - recorded
            rows[f"preset:{name}"] = f"{error_name(error)}: {error}"
    ids = torch.arange(1, 9)[None]
    try:
        model, _codec = attn_core.load_shakespeare()
        rows["shakespeare"] = describe_state(model.state_dict(), values=True)
        with torch.no_grad():
            rows["shakespeare"]["logits"] = tensor_hash(model(ids))
    except Exception as error:  # noqa: BLE001 - recorded
        rows["shakespeare"] = f"{error_name(error)}: {error}"
    rows["smollm2"], meta["smollm2"] = smollm2_row(attn_core, modules, models, ids)
    return rows, meta


def smollm2_row(attn_core, modules: dict, models: Path | None, ids):
    """SmolLM2 from an existing cache, seen through a temporary folder that holds only a link to it:
    without the GGUF file there, load_smollm2 cannot convert (nor write) anything."""
    import torch

    if models is None or not (models / "smollm2" / "cache" / "model.pt").is_file():
        return {"skipped": "no SmolLM2 cache"}, f"skipped: no cache in {models}"
    home = modules[attn_core.load_smollm2.__module__]
    env_var = getattr(home, "ENV_VAR", "ATTN_CORE_MODELS")
    saved = os.environ.get(env_var)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "smollm2").mkdir()
        (Path(tmp) / "smollm2" / "cache").symlink_to((models / "smollm2" / "cache").resolve())
        os.environ[env_var] = tmp
        try:
            model, _tokenizer = attn_core.load_smollm2()
            row = describe_state(model.state_dict(), values=True)
            with torch.no_grad():
                row["logits"] = tensor_hash(model(ids))
            return row, f"read from {models / 'smollm2' / 'cache'}"
        except Exception as error:  # noqa: BLE001 - recorded
            return f"{error_name(error)}: {error}", traceback.format_exc(limit=3)
        finally:
            if saved is None:
                os.environ.pop(env_var, None)
            else:
                os.environ[env_var] = saved


# --------------------------------------------------------------------------------------- 5. host_work


_HOST_WORK = "import json; from benchmarks.host_work import run; print(json.dumps(run()))"


def host_work_rows(root: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    rows = {}
    for name, cmd in (("table", ["-m", "benchmarks.host_work"]), ("run", ["-c", _HOST_WORK])):
        try:
            done = subprocess.run(
                [sys.executable, *cmd], cwd=root, env=env, capture_output=True, text=True, timeout=120
            )
        except subprocess.TimeoutExpired:
            rows[name] = "error: timeout (120 s)"
            continue
        if done.returncode:
            rows[name] = f"error: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        elif name == "table":
            rows[name] = [line for line in done.stdout.splitlines() if line.startswith("|")]
        else:
            for r in json.loads(done.stdout.strip().splitlines()[-1]):
                rows[f"run:{r['dtype']}"] = r
    return rows


# --------------------------------------------------------------------------------------- record


def record(out: Path, root: Path, models: Path | None, sections: tuple[str, ...]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    start = time.perf_counter()
    attn_core = load_attn_core(root)
    import torch

    modules, errors = walk_modules(attn_core, root)
    meta = dict(root=str(root), attn_core=attn_core.__file__, torch=torch.__version__, seconds={})
    meta.update(threads=torch.get_num_threads(), modules=len(modules), import_errors=errors)
    fp = {"meta": meta}
    timings = fp["meta"]["seconds"]

    def timed(name, fn):
        t0 = time.perf_counter()
        result = fn()
        timings[name] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {timings[name]} s", file=sys.stderr)
        return result

    if "api" in sections:
        fp["api"] = timed("api", lambda: api_rows(modules, errors))
    if "attention" in sections:
        fp["attention"], fp["backend_modes"], fp["meta"]["attention"] = timed(
            "attention", lambda: attention_rows(attn_core, modules)
        )
    if "hf_configs" in sections:
        fp["hf_configs"], fp["meta"]["hf_configs"] = timed("hf_configs", lambda: hf_config_rows(modules))
    if "state_dicts" in sections:
        fp["state_dicts"], fp["meta"]["state_dicts"] = timed(
            "state_dicts", lambda: state_dict_rows(attn_core, modules, models)
        )
    if "host_work" in sections:
        fp["host_work"] = timed("host_work", lambda: host_work_rows(root))
    timings["total"] = round(time.perf_counter() - start, 1)
    counts = {s: len(fp[s]) for s in SECTIONS if s in fp}
    fp["meta"]["rows"] = counts
    out.write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}: {counts}, {timings['total']} s", file=sys.stderr)


# --------------------------------------------------------------------------------------- diff


def mapper(move_map: dict):
    """Old dotted module path -> new, by the longest prefix of ``move_map`` (paths relative to attn_core)."""

    def new(path):
        if not isinstance(path, str) or not path.startswith("attn_core."):
            return path
        parts = path.split(".")[1:]
        for n in range(len(parts), 0, -1):
            old = ".".join(parts[:n])
            if old in move_map:
                return ".".join(["attn_core", *move_map[old].split("."), *parts[n:]])
        return path

    return new


def diff(before_path: Path, after_path: Path, map_file: Path | None, code_only: bool, allow_added: bool) -> int:
    before = json.loads(before_path.read_text(encoding="utf-8"))
    after = json.loads(after_path.read_text(encoding="utf-8"))
    new = mapper(runpy.run_path(str(map_file))["MAP"] if map_file else {})
    ignored = {"doc", "text"} if code_only else set()
    api = {}
    for row in before.get("api", {}).values():
        row = {**row, "module": new(row["module"])}
        if "defined_in" in row:
            row["defined_in"] = new(row["defined_in"])
        for field in ("signature", "value"):
            if isinstance(row.get(field), str):
                row[field] = _DOTTED.sub(lambda m: new(m.group()), row[field])
        if "methods" in row:
            row["methods"] = {k: _DOTTED.sub(lambda m: new(m.group()), v or "") or v for k, v in row["methods"].items()}
        if "imports" in row:
            row["imports"] = sorted(_DOTTED.sub(lambda m: new(m.group()), name) for name in row["imports"])
        api[f"{row['module']}:{row['name']}"] = row
    before["api"] = api
    differences = 0
    for section in SECTIONS:
        old_rows, new_rows = before.get(section), after.get(section)
        if old_rows is None or new_rows is None:
            if old_rows is not None or new_rows is not None:
                print(f"{section}: only in {'BEFORE' if new_rows is None else 'AFTER'}")
                differences += 1
            continue
        for key in sorted(set(old_rows) | set(new_rows)):
            if key not in new_rows:
                print(f"- {section} {key}: {json.dumps(old_rows[key])[:300]}")
            elif key not in old_rows:
                print(f"+ {section} {key}: {json.dumps(new_rows[key])[:300]}")
                if allow_added:
                    continue
            else:
                a, b = old_rows[key], new_rows[key]
                if isinstance(a, dict) and isinstance(b, dict):
                    fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f) and f not in ignored)
                    if not fields:
                        continue
                    changes = "; ".join(
                        f"{f}: {json.dumps(a.get(f))[:200]} -> {json.dumps(b.get(f))[:200]}" for f in fields
                    )
                elif a == b:
                    continue
                else:
                    changes = f"{json.dumps(a)[:300]} -> {json.dumps(b)[:300]}"
                print(f"~ {section} {key}: {changes}")
            differences += 1
    for key in sorted(set(before.get("meta", {})) | set(after.get("meta", {}))):
        a, b = before.get("meta", {}).get(key), after.get("meta", {}).get(key)
        if a != b and key not in ("seconds", "root", "attn_core"):
            print(f"(meta, not counted) {key}: {json.dumps(a)[:300]} -> {json.dumps(b)[:300]}")
    print(f"{differences} differing rows", file=sys.stderr)
    return 1 if differences else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="the fingerprint to write (JSON)")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"), help="compare two fingerprints")
    parser.add_argument("--map", type=Path, help="a Python file defining MAP, old module -> new (for --diff)")
    parser.add_argument("--code-only", action="store_true", help="--diff: ignore docstring and comment changes")
    parser.add_argument("--allow-added", action="store_true", help="--diff: print rows only in AFTER, not counted")
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--root", type=Path, default=here, help="the checkout to read (default: this tool's)")
    parser.add_argument(
        "--models", type=Path, help="a .models folder with smollm2/cache (default: $ATTN_CORE_MODELS or ROOT/.models)"
    )
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ",".join(SECTIONS)
    )
    args = parser.parse_args(argv)
    if args.diff:
        return diff(*args.diff, args.map, args.code_only, args.allow_added)
    if args.out is None:
        parser.error("give OUT.json or --diff BEFORE AFTER")
    root = args.root.resolve()
    models = args.models or Path(os.environ.get("ATTN_CORE_MODELS") or root / ".models")
    sections = tuple(s for s in args.sections.split(",") if s)
    unknown = set(sections) - set(SECTIONS) - {"backend_modes"}
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}")
    record(args.out, root, models, sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
