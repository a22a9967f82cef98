"""Measure attn_core's shape as a reader of the code meets it.

Prints the figures the architecture issues quote: the largest modules, the longest
functions, MultiHeadAttention's constructor parameters and forward branches, the
configuration's fields, the public names, and how many library modules one must open to
follow ``DecoderLM.forward`` (the transitive closure of ``attn_core.model.decoder``'s imports).

Usage: ``python tools/arch_metrics.py [package_dir]`` (default: attn_core).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

BRANCHES = (ast.If, ast.IfExp, ast.For, ast.While, ast.Try, ast.Match, ast.BoolOp)


def modules(root: Path) -> dict[str, Path]:
    """Map dotted module names (relative to the package) to their files."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def functions(tree: ast.AST):
    """Yield (qualified name, node) for every function, methods as Class.method."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item
    for node in tree.body if isinstance(tree, ast.Module) else []:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node


def local_imports(name: str, tree: ast.AST, known: set[str]) -> set[str]:
    """Modules of the package that module ``name`` imports at module level or inside functions."""
    package = name.split(".")[:-1] if name else []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("attn_core"):
                mod = node.module.removeprefix("attn_core").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}" if mod else alias.name
                found.add(sub if sub in known else mod)
    return {m for m in found if m in known and m != name}


def executed_modules(build) -> set[str]:
    """The attn_core modules whose functions run during one forward pass of ``build()``'s model."""
    import torch

    import attn_core

    root = Path(attn_core.__file__).parent
    model, idx = build()
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if root in path.parents:
                seen.add(".".join(path.relative_to(root).with_suffix("").parts))

    sys.setprofile(profile)
    try:
        with torch.no_grad():
            model(idx)
    finally:
        sys.setprofile(None)
    return seen


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "attn_core")
    mods = modules(root)
    trees = {name: ast.parse(path.read_text()) for name, path in mods.items()}
    sizes = sorted(((len(p.read_text().splitlines()), n) for n, p in mods.items()), reverse=True)
    print("largest modules:", ", ".join(f"{n or '__init__'} {s}" for s, n in sizes[:5]))
    print("modules over 400 lines:", sum(s > 400 for s, _ in sizes))
    longest = sorted(
        ((f.end_lineno - f.lineno + 1, f"{n}:{q}") for n, t in trees.items() for q, f in functions(t)),
        reverse=True,
    )
    print("longest functions:", ", ".join(f"{q} {s}" for s, q in longest[:5]))
    for n, t in trees.items():
        for q, f in functions(t):
            if q in ("MultiHeadAttention.__init__", "MultiHeadAttention.forward"):
                if q.endswith("__init__"):
                    a = f.args
                    count = len(a.args) - 1 + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                    print(f"{n}:{q}: {count} parameters, {f.end_lineno - f.lineno + 1} lines")
                else:
                    b = sum(isinstance(x, BRANCHES) for x in ast.walk(f))
                    print(f"{n}:{q}: {f.end_lineno - f.lineno + 1} lines, {b} branches")
    for n, t in trees.items():
        for node in ast.walk(t):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", "") == "dataclass" for d in node.decorator_list
            ):
                if n.startswith("config") or "Config" in node.name:
                    fields = sum(isinstance(s, ast.AnnAssign) for s in node.body)
                    print(f"dataclass {n}:{node.name}: {fields} fields")
    init = trees.get("")
    for node in ast.walk(init):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if getattr(target, "id", "") == "__all__" and isinstance(node.value, ast.List):
                print(f"__all__ entry: {len(node.value.elts)} names")
    known = set(mods)
    graph = {n: local_imports(n, t, known) for n, t in trees.items()}
    seen, todo = {"model.decoder"}, ["model.decoder"]
    while todo:
        for m in graph[todo.pop()]:
            if m not in seen and m != "":
                seen.add(m)
                todo.append(m)
    print(f"modules reached from model/decoder.py's imports: {len(seen)} ({', '.join(sorted(seen))})")
    if root.resolve() == Path(__import__("attn_core").__file__).parent.resolve():
        import torch

        from attn_core import DecoderConfig, DecoderLM

        def tiny(config):
            torch.manual_seed(0)
            return DecoderLM(config), torch.randint(0, config.vocab_size, (1, 8))

        gpt2 = DecoderConfig.gpt2_like(vocab_size=32, n_layers=2, d_model=16, n_heads=2)
        plain = executed_modules(lambda: tiny(gpt2))
        print(f"modules that run in a plain MHA forward (GPT-2-like): {len(plain)} ({', '.join(sorted(plain))})")


if __name__ == "__main__":
    main()
