"""`@record`: a dataclass whose methods are built without `exec`, for the health hook's path.

Slurm starts a fresh Python for every job's prolog and epilog, so import time is the hook's time.
`dataclasses.dataclass` writes each class's `__init__`, `__repr__`, `__eq__` (and, when frozen,
`__setattr__`, `__delattr__`, `__hash__`) as source text and compiles it: about 1 ms per class,
1.8 ms frozen, on the 2-core dev VM. The 23 records a healthy prolog imports took 32 ms of its
90 ms of imports (measured with a wrapped `dataclasses._process_class`).

`record` asks `dataclass` only for what is cheap (the fields: `dataclasses.fields`, `asdict`
and `replace` keep working) and adds the methods as closures over the field list: about 0.15 ms a
class. The methods behave as dataclass's do for what this package uses: positional or keyword
arguments in field order, defaults and `default_factory`, `__post_init__`, `frozen` (assignment
raises `FrozenInstanceError`, instances hash by value), `eq` by value between instances of the
same class, `repr`/`compare` per field. Refused at decoration: `field(init=False)` and
keyword-only fields. Not supported: `InitVar` (none of these records has one).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, FrozenInstanceError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any

_OBJECT_SETATTR = object.__setattr__


def record(cls: type | None = None, /, *, frozen: bool = False) -> Any:
    """Decorate like `@dataclass` or `@dataclass(frozen=True)`."""
    if cls is None:
        return lambda c: _build(c, frozen)
    return _build(cls, frozen)


def _build(cls: type, frozen: bool) -> type:
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    for f in fields:
        if not f.init or f.kw_only:
            raise TypeError(f"@record {cls.__qualname__}.{f.name}: init=False and kw_only are not supported")
    names = tuple(f.name for f in fields)
    defaults = [(f.name, f.default, f.default_factory) for f in fields]
    post_init = getattr(cls, "__post_init__", None)
    setter = _OBJECT_SETATTR if frozen else setattr
    qualname = cls.__qualname__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{qualname}() takes {len(names)} positional arguments but {len(args)} were given")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{qualname}() got multiple values for argument '{name}'")
            setter(self, name, value)
        for name, default, factory in defaults[len(args):]:
            if name in kwargs:
                setter(self, name, kwargs.pop(name))
            elif default is not MISSING:
                setter(self, name, default)
            elif factory is not MISSING:
                setter(self, name, factory())
            else:
                raise TypeError(f"{qualname}() missing required argument: '{name}'")
        if kwargs:
            raise TypeError(f"{qualname}() got an unexpected keyword argument '{next(iter(kwargs))}'")
        if post_init is not None:
            self.__post_init__()

    shown = tuple(f.name for f in fields if f.repr)
    compared = tuple(f.name for f in fields if f.compare)

    def __repr__(self: Any) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"

    def _key(self: Any) -> tuple:
        return tuple(getattr(self, n) for n in compared)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return _key(self) == _key(other)
        return NotImplemented

    methods: dict[str, Any] = {
        "__init__": __init__, "__repr__": __repr__, "__eq__": __eq__}
    if frozen:
        def __setattr__(self: Any, name: str, value: Any) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self: Any, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

        def __hash__(self: Any) -> int:
            return hash(_key(self))

        methods.update(__setattr__=__setattr__, __delattr__=__delattr__, __hash__=__hash__)
    else:
        methods["__hash__"] = None  # as dataclass: eq without frozen makes instances unhashable
    for name, fn in methods.items():
        if fn is not None:
            fn.__qualname__ = f"{qualname}.{name}"
        setattr(cls, name, fn)
    return cls
