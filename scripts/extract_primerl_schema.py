"""Extract prime-rl's config schema (pydantic models) at a pinned commit into a JSON fixture.

Reads ``packages/prime-rl-configs/src/prime_rl/configs/*.py`` straight from a git directory (the
``fetch``ed mirror of PrimeIntellect-ai/prime-rl), AST-parses every model class and writes, for each
field: its type (models, unions with their discriminator, ``Literal`` choices, lists, dicts, scalars),
whether it is required, its default, numeric bounds (``ge``/``le``/``gt``/``lt``) and validation
aliases; plus every key path reachable from the ``rl`` entrypoint's ``RLConfig``. Nothing is
imported: prime-rl needs Python 3.12 and GPU packages.

    .venv/bin/python scripts/extract_primerl_schema.py \\
        --git-dir PATH/TO/prime-rl/.git --commit 38494ccb \\
        --out tests/data/primerl_v0.6.0_schema.json
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CONFIG_DIR = "packages/prime-rl-configs/src/prime_rl/configs"
MODULES = ("shared", "trainer", "orchestrator", "inference", "rl")
ROOT = "rl.RLConfig"
PACKAGE_PREFIX = "prime_rl.configs."
SCALARS = {"int", "float", "str", "bool", "Path", "Any", "object"}
BOUND_KEYS = ("ge", "le", "gt", "lt")


def git_show(git_dir: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def resolve_commit(git_dir: Path, commit: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-parse", f"{commit}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


class Module:
    """One parsed config module: its classes, type aliases and imports from sibling modules."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.tree = ast.parse(source)
        self.classes: dict[str, ast.ClassDef] = {}
        self.aliases: dict[str, ast.expr] = {}
        self.imports: dict[str, str] = {}  # local name -> "module.Name"
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE_PREFIX):
                mod = (node.module or "").removeprefix(PACKAGE_PREFIX)
                for a in node.names:
                    self.imports[a.asname or a.name] = f"{mod}.{a.name}"
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                self.aliases[node.target.id] = node.value
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Subscript | ast.BinOp)
            ):
                self.aliases[node.targets[0].id] = node.value


class Extractor:
    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        self.models: dict[str, dict[str, Any]] = {}

    # -- names -------------------------------------------------------------------------------
    def lookup(self, module: Module, name: str) -> tuple[str, str] | None:
        """('class'|'alias', qualified name) for a name visible in ``module``."""
        if name in module.classes:
            return "class", f"{module.name}.{name}"
        if name in module.aliases:
            return "alias", f"{module.name}.{name}"
        target = module.imports.get(name)
        if target is None:
            return None
        mod_name, attr = target.split(".", 1)
        mod = self.modules.get(mod_name)
        return self.lookup(mod, attr) if mod is not None else None

    # -- types -------------------------------------------------------------------------------
    def type_of(self, module: Module, node: ast.expr) -> dict[str, Any]:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {"kind": "none"}
            if isinstance(node.value, str):  # forward reference
                return self.type_of(module, ast.parse(node.value, mode="eval").body)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._union([self.type_of(module, node.left), self.type_of(module, node.right)])
        if isinstance(node, ast.Name):
            return self._named(module, node.id)
        if isinstance(node, ast.Attribute):
            return {"kind": "external", "name": ast.unparse(node)}
        if isinstance(node, ast.Subscript):
            head = ast.unparse(node.value)
            args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head == "Literal":
                return {"kind": "literal", "values": [ast.literal_eval(a) for a in args]}
            if head == "Annotated":
                inner = self.type_of(module, args[0])
                for extra in args[1:]:
                    if isinstance(extra, ast.Call) and ast.unparse(extra.func) == "Field":
                        kw = {k.arg: k.value for k in extra.keywords if k.arg}
                        if "discriminator" in kw:
                            inner = {**inner, "discriminator": ast.literal_eval(kw["discriminator"])}
                        inner.update(self._bounds(kw))
                return inner
            if head in ("list", "List", "Sequence", "tuple", "set"):
                return {"kind": "list", "item": self.type_of(module, args[0])}
            if head in ("dict", "Dict", "Mapping"):
                return {"kind": "dict", "value": self.type_of(module, args[1]) if len(args) > 1 else None}
            if head == "Optional":
                return self._union([self.type_of(module, args[0]), {"kind": "none"}])
            if head == "Union":
                return self._union([self.type_of(module, a) for a in args])
        return {"kind": "external", "name": ast.unparse(node)}

    def _named(self, module: Module, name: str) -> dict[str, Any]:
        if name == "None":
            return {"kind": "none"}
        if name in ("dict", "list"):
            return {"kind": name, **({"value": None} if name == "dict" else {"item": {"kind": "any"}})}
        if name in SCALARS:
            return {"kind": "scalar", "name": {"Path": "str", "object": "Any"}.get(name, name)}
        found = self.lookup(module, name)
        if found is None:
            return {"kind": "external", "name": name}
        kind, qual = found
        if kind == "class":
            self.model(qual)
            return {"kind": "model", "name": qual}
        mod_name, alias = qual.split(".", 1)
        alias_mod = self.modules[mod_name]
        return self.type_of(alias_mod, alias_mod.aliases[alias])

    @staticmethod
    def _union(options: list[dict[str, Any]]) -> dict[str, Any]:
        flat: list[dict[str, Any]] = []
        for o in options:
            flat.extend(o["options"] if o["kind"] == "union" and "discriminator" not in o else [o])
        return {"kind": "union", "options": flat}

    @staticmethod
    def _bounds(kw: dict[str, ast.expr]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in BOUND_KEYS:
            if key in kw:
                out[key] = ast.literal_eval(kw[key])
        return out

    # -- models ------------------------------------------------------------------------------
    def model(self, qual: str) -> dict[str, Any]:
        if qual in self.models:
            return self.models[qual]
        mod_name, cls_name = qual.split(".", 1)
        module = self.modules[mod_name]
        cls = module.classes[cls_name]
        entry: dict[str, Any] = {"bases": [], "fields": {}}
        self.models[qual] = entry  # before recursing: models may refer to each other
        fields: dict[str, Any] = {}
        for base in cls.bases:
            found = self.lookup(module, ast.unparse(base))
            if found and found[0] == "class":
                entry["bases"].append(found[1])
                fields.update(self.model(found[1])["fields"])
            else:
                entry["bases"].append(ast.unparse(base))
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            name = node.target.id
            if name.startswith("_") or name == "model_config" or "ClassVar" in ast.unparse(node.annotation):
                continue
            fields[name] = self.field(module, node)
        entry["fields"] = fields
        return entry

    def field(self, module: Module, node: ast.AnnAssign) -> dict[str, Any]:
        info: dict[str, Any] = {"type": self.type_of(module, node.annotation)}
        value = node.value
        if value is None:
            info["required"] = True
            return info
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
            kw = {k.arg: k.value for k in value.keywords if k.arg}
            default = value.args[0] if value.args else kw.get("default")
            required = (default is None and "default_factory" not in kw) or (
                isinstance(default, ast.Constant) and default.value is Ellipsis
            )
            info["required"] = required
            if not required and default is not None:
                info["default"] = _literal(default)
            info.update(self._bounds(kw))
            alias = kw.get("validation_alias")
            if isinstance(alias, ast.Call) and ast.unparse(alias.func) == "AliasChoices":
                info["aliases"] = [ast.literal_eval(a) for a in alias.args]
            return info
        info["required"] = False
        info["default"] = _literal(value)
        return info


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return {"expr": ast.unparse(node)}


def key_paths(models: dict[str, dict[str, Any]], root: str) -> list[str]:
    """Every dotted key path reachable from ``root`` (list items as ``[]``)."""
    out: set[str] = set()

    def model_refs(t: dict[str, Any]) -> list[tuple[str, str]]:
        if t["kind"] == "model":
            return [(t["name"], "")]
        if t["kind"] == "union":
            return [r for o in t["options"] for r in model_refs(o)]
        if t["kind"] == "list":
            return [(name, "[]") for name, _ in model_refs(t["item"])]
        return []

    def walk(qual: str, prefix: str, stack: tuple[str, ...]) -> None:
        if qual in stack:
            return
        for name, f in models[qual]["fields"].items():
            path = f"{prefix}{name}"
            out.add(path)
            for ref, suffix in model_refs(f["type"]):
                walk(ref, f"{path}{suffix}.", (*stack, qual))

    walk(root, "", ())
    return sorted(out)


def extract(git_dir: Path, commit: str) -> dict[str, Any]:
    full = resolve_commit(git_dir, commit)
    modules = {m: Module(m, git_show(git_dir, full, f"{CONFIG_DIR}/{m}.py")) for m in MODULES}
    ex = Extractor(modules)
    ex.model(ROOT)
    return {
        "source": {
            "repository": "PrimeIntellect-ai/prime-rl",
            "commit": full,
            "version": "0.6.0",
            "files": [f"{CONFIG_DIR}/{m}.py" for m in MODULES],
            "generated_by": "scripts/extract_primerl_schema.py",
        },
        "root": ROOT,
        "models": dict(sorted(ex.models.items())),
        "paths": key_paths(ex.models, ROOT),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", type=Path, required=True, help="a clone of prime-rl (its git dir)")
    parser.add_argument("--commit", default="38494ccb")
    parser.add_argument("--out", type=Path, default=Path("tests/data/primerl_v0.6.0_schema.json"))
    args = parser.parse_args(argv)
    schema = extract(args.git_dir, args.commit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n")
    print(f"{len(schema['models'])} models, {len(schema['paths'])} key paths -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
