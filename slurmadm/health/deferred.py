"""A module imported on first use, for the hook's entry point (`__main__`).

Every job start pays for the prolog's imports. `dataclasses` imports `inspect` (with ast, dis and
tokenize: about a fifth of a healthy prolog's imports) only to give a class without a docstring a
signature as its docstring; every dataclass on the prolog path has a docstring, so `inspect` can
stand in as a module that imports the real one when something first uses it (a traceback, a check
that does need it): from then on it behaves exactly as the real module.

Python 3.12 and 3.13's `dataclasses` call `inspect.get_annotations` for every class it makes, so
there the first dataclass imports the real `inspect` (3.11 reads `__annotations__` itself, 3.14
asks `annotationlib`): the deferral saves nothing on those two and costs nothing either.
"""

from __future__ import annotations

import sys
import types


# whether `dataclasses` imports the real `inspect` when a class is made (see above)
INSPECT_AT_CLASS_CREATION = (3, 12) <= sys.version_info[:2] < (3, 14)


class DeferredModule(types.ModuleType):
    def __getattr__(self, attr):
        import importlib

        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        real = importlib.import_module(self.__name__)
        return getattr(real, attr)


def defer(name: str) -> None:
    """Import `name` on first use (nothing to do when it is already imported)."""
    if name not in sys.modules:
        sys.modules[name] = DeferredModule(name)
