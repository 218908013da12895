"""The house as the code has it: components, what each imports, and the size limits.

``python bench/architecture_map.py`` prints the map; ``--write`` puts it into
docs/architecture.md between its markers (the section is generated, never typed);
``--check`` exits 1 when the docs differ from the code or a limit is broken. Everything
comes from the source text (ast), nothing is imported or run."""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {
    "domain": "ctxledger.domain",
    "projections": "ctxledger.projections",
    "adapters": "ctxledger.adapters",
}
DOC = ROOT / "docs" / "architecture.md"
START, END = "<!-- architecture-map:start -->", "<!-- architecture-map:end -->"
MODULE_LINES = 600
SHARED = frozenset({"clock", "extras", "logs", "tokens"})
"""Small modules directly in adapters/ that every component may use."""
FUNCTION_LINES = 80
DOMAIN_EXCEPTIONS: dict[str, str] = {}
"""Domain modules over the module limit, each with why (listed in the docs, not hidden)."""
DOMAIN_LONG_FUNCTIONS: dict[str, str] = {}
"""Domain functions over the function limit (``module.function``), each with why; none left."""


@dataclass
class Module:
    name: str  # dotted, e.g. ctxledger.adapters.engine.build
    path: Path
    lines: int
    doc: str
    imports: set[str] = field(default_factory=set)  # dotted modules imported (first-party)
    private: list[str] = field(default_factory=list)  # "name from module" imported across modules
    long_functions: list[tuple[str, int]] = field(default_factory=list)


def _dotted(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    parts[0] = LAYERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
            doc = (ast.get_docstring(tree) or "").strip().split("\n\n")[0].replace("\n", " ")
            mod = Module(_dotted(path), path, text.count("\n"), doc)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    if node.module.startswith("ctxledger."):
                        for alias in node.names:
                            if alias.name.startswith("_") and not alias.name.startswith("__"):
                                mod.private.append(f"{alias.name} from {node.module}")
                            # `from package import submodule` imports the submodule; any other
                            # name is the module's own (resolved against the modules below)
                            mod.imports.add(f"{node.module}.{alias.name}")
                            mod.imports.add(f"{node.module}:{alias.name}")
                elif isinstance(node, ast.Import):
                    mod.imports.update(
                        a.name for a in node.names if a.name.startswith("ctxledger.")
                    )
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > FUNCTION_LINES:
                        mod.long_functions.append((node.name, size))
            found[mod.name] = mod
    for mod in found.values():  # `from m import name`: the submodule m.name, else m itself
        wanted = set()
        for i in mod.imports:
            if ":" in i:
                base, name = i.split(":")
                if f"{base}.{name}" not in found:
                    wanted.add(base)
            else:
                wanted.add(i)
        mod.imports = {i for i in wanted if i in found and i != mod.name}
    return found


def component(name: str) -> str:
    """The component a module belongs to: ``domain``, ``projections``, or an adapters
    subpackage (``adapters.engine``); a module directly in adapters/ is its own."""
    parts = name.split(".")
    if parts[1] != "adapters":
        return parts[1]
    if len(parts) == 2:
        return "adapters (public face)"
    return "adapters.shared" if parts[2] in SHARED else "adapters." + parts[2]


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected module groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(mods[v].imports):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return out


def render(mods: dict[str, Module]) -> str:
    comps: dict[str, list[Module]] = defaultdict(list)
    for m in mods.values():
        comps[component(m.name)].append(m)
    edges: dict[tuple[str, str], int] = defaultdict(int)
    for m in mods.values():
        for i in m.imports:
            a, b = component(m.name), component(i)
            if a.startswith("adapters") and b in ("domain", "projections"):
                continue  # every adapters component may use the pure core: not drawn
            if a != b:
                edges[(a, b)] += 1
    lines = [
        START,
        "",
        "Generated by `python bench/architecture_map.py --write` from the source; "
        "`make test` fails when it differs from the code.",
        "",
    ]
    lines += ["```mermaid", "flowchart TD"]
    ident = {c: "".join(ch if ch.isalnum() else "_" for ch in c) for c in comps}
    for c in sorted(comps):
        size = sum(m.lines for m in comps[c])
        count = f"{len(comps[c])} module" + ("s" if len(comps[c]) != 1 else "")
        lines.append(f'    {ident[c]}["{c}<br/>{count}, {size:,} lines"]')
    for a, b in sorted(edges):
        lines.append(f"    {ident[a]} --> {ident[b]}")
    lines += ["```", "", "| component | module | lines | what it is |", "|---|---|---:|---|"]
    for c in sorted(comps, key=lambda c: (c.split(".")[0] != "adapters", c)):
        for m in sorted(comps[c], key=lambda m: m.name):
            short = m.name.removeprefix("ctxledger.")
            what = (m.doc[:110] + ("…" if len(m.doc) > 110 else "")).replace("|", "\\|")
            lines.append(f"| {c} | `{short}` | {m.lines} | {what} |")
    problems = limits(mods)
    lines += [
        "",
        f"Import cycles: {len(cycles(mods))}. Private names imported across modules: "
        f"{sum(len(m.private) for m in mods.values())}. Limits: no module over "
        f"{MODULE_LINES} lines and no function over {FUNCTION_LINES} lines in adapters/, "
        f"projections/ and domain/ (domain exceptions, if any, listed below) — "
        f"{'kept' if not problems else f'{len(problems)} over'}.",
        "",
    ]
    over = [m for m in mods.values() if m.name in DOMAIN_EXCEPTIONS and m.lines > MODULE_LINES]
    if over:
        lines += ["Domain modules over the module limit:", ""]
        lines += [
            f"- `{m.name.removeprefix('ctxledger.')}` ({m.lines} lines): {DOMAIN_EXCEPTIONS[m.name]}"
            for m in sorted(over, key=lambda m: m.name)
        ]
        lines.append("")
    domain_long = [
        (m.name, f, n)
        for m in mods.values()
        if component(m.name) == "domain"
        for f, n in m.long_functions
    ]
    if domain_long:
        lines += ["Domain functions over the function limit:", ""]
        lines += [
            f"- `{mod.removeprefix('ctxledger.')}.{f}` ({n} lines): "
            f"{DOMAIN_LONG_FUNCTIONS.get(f'{mod}.{f}', 'not allowed')}"
            for mod, f, n in sorted(domain_long)
        ]
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def limits(mods: dict[str, Module]) -> list[str]:
    """Every broken limit, one line each (the listed domain exceptions are not broken)."""
    out = []
    for m in sorted(mods.values(), key=lambda m: m.name):
        outer = component(m.name) != "domain"
        if m.lines > MODULE_LINES and m.name not in DOMAIN_EXCEPTIONS:
            out.append(f"{m.path.relative_to(ROOT)}: {m.lines} lines (limit {MODULE_LINES})")
        out += [
            f"{m.path.relative_to(ROOT)}: {f}() {n} lines (limit {FUNCTION_LINES})"
            for f, n in m.long_functions
            if outer or f"{m.name}.{f}" not in DOMAIN_LONG_FUNCTIONS
        ]
        out += [f"{m.path.relative_to(ROOT)}: imports private {p}" for p in m.private]
    out += ["import cycle: " + " → ".join(c) for c in cycles(mods)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help="write the map into docs/architecture.md"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the docs or a limit differ")
    args = parser.parse_args()
    mods = _modules()
    text = render(mods)
    doc = DOC.read_text(encoding="utf-8")
    if START not in doc or END not in doc:
        print(f"{DOC}: no {START} … {END} markers", file=sys.stderr)
        return 1
    current = doc[doc.index(START) : doc.index(END) + len(END)]
    if args.write:
        DOC.write_text(doc.replace(current, text), encoding="utf-8")
    if args.check:
        broken = limits(mods)
        for line in broken:
            print(line, file=sys.stderr)
        if current != text:
            print(
                f"{DOC} is not the map of the code: run python bench/architecture_map.py --write",
                file=sys.stderr,
            )
            return 1
        return 1 if broken else 0
    if not args.write:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
