"""Time, randomness and ids are injected, never defaulted (STYLE 9, issue 27 item 5).

A component that falls back to the system clock or the process's random source when its
caller passes none turns a forgotten injection into a silently nondeterministic simulation.
So the packages' sources are read with `ast`, and outside the composition roots listed
below nothing may:

- construct a real source: `SystemClock()`, `Random()` (broker.randomness.Random is
  random.Random), or use the process's own `PROCESS_RANDOM` / `process_uuid`;
- take a real source as a parameter or dataclass field default, or as a fallback
  (`x or ...`, `... if x is None else x`, `if x is None: x = ...`): the constructions
  above, the functions ruff's TID251 bans (time.time, uuid.uuid4, os.urandom, random.*,
  secrets.*), or the loop's clock (`loop.time`);
- let a clock, random source or id source be omitted (`clock: Clock | None = None`).

ruff bans the stdlib functions themselves; this catches what it cannot see: the project's
own real sources, and where they hide (defaults and fallbacks)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "walfiles", "tiering", "spark_jobs")

# Where the real sources are made: (file, qualified name; "<module>" for module level).
COMPOSITION_ROOTS = {
    ("broker/randomness.py", "<module>"),  # PROCESS_RANDOM itself
    ("broker/environment.py", "Environment.for_process"),  # a broker process's sources
    ("broker/broker.py", "Broker.__init__"),  # env=None: Environment.for_process (a clock may override)
    ("spark_jobs/assemble_segments.py", "_open_store"),  # a Spark task's object store
}

CONSTRUCTORS = {"SystemClock", "Random", "SystemRandom"}  # a real clock or random generator
PROCESS_SOURCES = {"PROCESS_RANDOM", "process_uuid"}
BANNED_FUNCTIONS = {
    "time.time",
    "time.time_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.perf_counter",
    "time.perf_counter_ns",
    "uuid.uuid1",
    "uuid.uuid4",
    "os.urandom",
}
BANNED_MODULES = {"random", "secrets"}
SOURCE_NAMES = {"clock", "rng", "random", "new_uuid", "sleep"}  # parameters and fields
SOURCE_TYPES = {"Clock", "Random"}


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _constructions(expr: ast.AST) -> Iterator[ast.AST]:
    """Nodes in `expr` that construct a real source or use the process's own."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and _name(node.func) in CONSTRUCTORS:
            yield node
        elif isinstance(node, (ast.Name, ast.Attribute)) and _name(node) in PROCESS_SOURCES:
            yield node


def _sources(expr: ast.AST) -> Iterator[ast.AST]:
    """Nodes in `expr` that read a real source of time, randomness or ids (for defaults and
    fallbacks, where even the loop's own clock is a hidden source)."""
    yield from _constructions(expr)
    for node in ast.walk(expr):
        if not isinstance(node, ast.Attribute):
            continue
        dotted = _dotted(node)
        if dotted in BANNED_FUNCTIONS or (dotted and dotted.split(".")[0] in BANNED_MODULES and "." in dotted):
            yield node
        elif node.attr == "time" and (
            (isinstance(node.value, ast.Name) and node.value.id == "loop")
            or (isinstance(node.value, ast.Call) and _name(node.value.func) in ("get_running_loop", "get_event_loop"))
        ):
            yield node


def _is_none_test(test: ast.expr, op: type[ast.cmpop]) -> bool:
    """`test` is `x is None` (op ast.Is) or `x is not None` (ast.IsNot)."""
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], op)
        and _is_none(test.comparators[0])
    )


def _mentions_source_type(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(
        isinstance(node, (ast.Name, ast.Attribute)) and _name(node) in SOURCE_TYPES for node in ast.walk(annotation)
    )


def _is_none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


class _Finder(ast.NodeVisitor):
    """Collects the offenders of one file, each node reported once (its first label)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.scope: list[str] = []
        self.found: dict[tuple[int, int], str] = {}  # (line, column) -> what

    def report(self, node: ast.expr | ast.arg, what: str) -> None:
        qualname = ".".join(self.scope) or "<module>"
        if (self.path, qualname) not in COMPOSITION_ROOTS:
            text = f"{self.path}:{node.lineno} {qualname}: {what} {ast.unparse(node)}"
            self.found.setdefault((node.lineno, node.col_offset), text)

    def default(self, name: str, annotation: ast.expr | None, value: ast.expr, kind: str) -> None:
        for source in _sources(value):
            self.report(source, f"{kind} {name!r} defaults to")

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        args = node.args
        positional = args.posonlyargs + args.args
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
        pairs += [(arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is not None]
        self.scope.append(node.name)
        for arg, default in pairs:
            self.default(arg.arg, arg.annotation, default, "parameter")
            if _is_none(default) and (arg.arg in SOURCE_NAMES or _mentions_source_type(arg.annotation)):
                self.report(arg, "optional source parameter")
        for statement in node.body:
            self.visit(statement)
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and statement.value is not None:
                name = ast.unparse(statement.target)
                self.default(name, statement.annotation, statement.value, "field")
                if _is_none(statement.value) and (name in SOURCE_NAMES or _mentions_source_type(statement.annotation)):
                    self.report(statement.target, "optional source field")
        self.generic_visit(node)
        self.scope.pop()

    def visit_If(self, node: ast.If) -> None:
        if _is_none_test(node.test, ast.Is):
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                    for source in _sources(statement.value):
                        self.report(source, "falls back to")
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        if not isinstance(node, ast.expr):
            super().generic_visit(node)
            return
        for inner in ast.walk(node):  # an expression holds no statements: walk it once, here
            fallbacks: list[ast.expr] = []
            if isinstance(inner, ast.BoolOp) and isinstance(inner.op, ast.Or):
                fallbacks = inner.values[1:]
            elif isinstance(inner, ast.IfExp) and _is_none_test(inner.test, ast.Is):
                fallbacks = [inner.body]
            elif isinstance(inner, ast.IfExp) and _is_none_test(inner.test, ast.IsNot):
                fallbacks = [inner.orelse]
            for fallback in fallbacks:
                for source in _sources(fallback):
                    self.report(source, "falls back to")
        for source in _constructions(node):
            self.report(source, "constructs")


def _sources_by_file() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def _offenders() -> list[str]:
    found = []
    for path, tree in _sources_by_file():
        finder = _Finder(path)
        finder.visit(tree)
        found += [finder.found[key] for key in sorted(finder.found)]
    return found


def test_no_component_falls_back_to_a_real_clock_or_random_source() -> None:
    offenders = _offenders()
    assert not offenders, "inject these from the composition root instead:\n" + "\n".join(offenders)


def test_the_composition_roots_exist() -> None:
    """A root that was renamed or removed must leave this list too (else it exempts nothing)."""
    defined = set()
    for path, tree in _sources_by_file():
        defined.add((path, "<module>"))
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    defined.add((path, name))
                    stack.append((child, f"{name}."))
    assert COMPOSITION_ROOTS <= defined, sorted(COMPOSITION_ROOTS - defined)


def test_the_guard_sees_each_kind_of_hidden_source() -> None:
    """The patterns this guard exists for, each reported once."""
    sample = """
import time
class Store:
    def __init__(self, clock: Clock | None = None, rng=PROCESS_RANDOM, now=time.monotonic) -> None:
        self.clock = clock or SystemClock()
        self.rng = Random() if rng is None else rng
        if now is None:
            now = loop.time
        self.ids = process_uuid

@dataclass
class Policy:
    sleep: object = field(default=SystemClock().sleep)
    clock: Clock = SystemClock()

def fine(clock: Clock, now_ms: int = 0, rng: Random | None = None) -> None:
    return clock.now_ms()
"""
    finder = _Finder("sample.py")
    finder.visit(ast.parse(sample))
    assert [finder.found[key] for key in sorted(finder.found)] == [
        "sample.py:4 Store.__init__: optional source parameter clock: Clock | None",
        "sample.py:4 Store.__init__: parameter 'rng' defaults to PROCESS_RANDOM",
        "sample.py:4 Store.__init__: parameter 'now' defaults to time.monotonic",
        "sample.py:5 Store.__init__: falls back to SystemClock()",
        "sample.py:6 Store.__init__: falls back to Random()",
        "sample.py:8 Store.__init__: falls back to loop.time",
        "sample.py:9 Store.__init__: constructs process_uuid",
        "sample.py:13 Policy: field 'sleep' defaults to SystemClock()",
        "sample.py:14 Policy: field 'clock' defaults to SystemClock()",
        "sample.py:16 fine: optional source parameter rng: Random | None",
    ]
