"""slurmadm.record: the hook path's dataclasses without exec must behave as dataclasses do."""

import dataclasses
import json
import subprocess
import sys

import pytest

from slurmadm.record import record

pytestmark = pytest.mark.unit


@record
class Mutable:
    """a mutable record"""

    a: int
    b: str = "x"
    c: list = dataclasses.field(default_factory=list)
    hidden: str = dataclasses.field(default="", repr=False, compare=False)


@record(frozen=True)
class Frozen:
    """a frozen record"""

    a: int
    b: tuple = ()


@record
class Posted:
    """with __post_init__"""

    a: int
    doubled: int = 0

    def __post_init__(self):
        self.doubled = self.a * 2


def test_init_takes_positional_and_keyword_arguments_with_defaults_and_factories():
    m = Mutable(1)
    assert (m.a, m.b, m.c, m.hidden) == (1, "x", [], "")
    assert Mutable(1, "y", [2]).c == [2] and Mutable(a=3, b="z").b == "z"
    assert Mutable(1).c is not Mutable(1).c  # a fresh list each time, as default_factory gives
    assert Posted(4).doubled == 8


@pytest.mark.parametrize("call, message", [
    (lambda: Mutable(), "missing required argument: 'a'"),
    (lambda: Mutable(1, b="y", z=3), "unexpected keyword argument 'z'"),
    (lambda: Mutable(1, a=2), "multiple values for argument 'a'"),
    (lambda: Mutable(1, "b", [], "h", 5), "takes 4 positional arguments but 5 were given"),
])
def test_bad_arguments_raise_type_error_as_dataclass_would(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_eq_repr_and_hash_follow_the_fields():
    assert Mutable(1, hidden="p") == Mutable(1, hidden="q")  # compare=False
    assert Mutable(1) != Mutable(2) and Mutable(1) != Frozen(1)
    assert repr(Mutable(1, hidden="secret")) == "Mutable(a=1, b='x', c=[])"
    assert Frozen(1, (2,)) == Frozen(1, (2,)) and hash(Frozen(1, (2,))) == hash(Frozen(1, (2,)))
    assert len({Frozen(1), Frozen(1), Frozen(2)}) == 2
    with pytest.raises(TypeError):
        hash(Mutable(1))  # eq without frozen: unhashable, as dataclass makes it


def test_frozen_refuses_assignment_and_deletion():
    f = Frozen(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del f.a
    m = Mutable(1)
    m.a = 5
    assert m.a == 5


def test_dataclasses_helpers_keep_working():
    f = Frozen(1, (2,))
    assert dataclasses.is_dataclass(f)
    assert [x.name for x in dataclasses.fields(Frozen)] == ["a", "b"]
    assert dataclasses.asdict(Mutable(1, c=[Frozen(3)])) == {"a": 1, "b": "x", "c": [{"a": 3, "b": ()}], "hidden": ""}
    assert dataclasses.replace(f, a=7) == Frozen(7, (2,))


def test_unsupported_field_kinds_are_refused_at_decoration():
    with pytest.raises(TypeError, match="init=False"):
        @record
        class Bad:
            """bad"""

            a: int = dataclasses.field(default=0, init=False)


def test_the_health_records_are_built_without_exec():
    """The point of it (slurmadm/record.py): importing the prolog's modules compiles no method
    from source (Python 3.13's dataclass still execs one empty function per class: allowed)."""
    probe = "\n".join([
        "import builtins, json, re",
        "methods = []",
        "real = builtins.exec",
        "def spy(code, *a, **k):",
        "    if isinstance(code, str):",
        "        methods.extend(re.findall(r'def (__\\w+__)\\(', code))",
        "    return real(code, *a, **k)",
        "builtins.exec = spy",
        "import dataclasses",
        "@dataclasses.dataclass",
        "class Control:",
        "    'the spy sees what dataclass compiles'",
        "    x: int",
        "seen = sorted(set(methods) - {'__create_fn__'})",
        "methods.clear()",
        "import slurmadm.health.engine, slurmadm.health.hook, slurmadm.store, slurmadm.jobmap",
        "print(json.dumps([seen, sorted(set(methods) - {'__create_fn__'})]))",
    ])
    p = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
    control, ours = json.loads(p.stdout or "null") or (None, None)
    assert control and "__init__" in control, (p.stdout, p.stderr)  # the probe sees a dataclass compile
    assert ours == [], ours
