"""One registry style for every extension point: estimators, losses, task sources and verifiers
(CONTRIBUTING.md).

A component is registered by a decorator next to its definition; ``names()`` lists the
registered names and ``get(name, **cfg)`` builds one. Registering a taken name raises unless
``replace=True``. The built-in components are the modules of the registry's package, imported
on first use; other packages add theirs through a Python entry-point group
(``hista.estimators``, ``hista.losses``, ``hista.tasks``, ``hista.verifiers``), loaded on first
use as verl loads ``verl.plugins``. An entry point may name a module, whose ``@register``
decorators do the work when it is imported, or an object, which (unless its module's decorators
registered it already) is registered under the entry point's name with the kind's own
``register``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import threading
import types
import warnings
from typing import Any, Callable, Optional

from .errors import InputError


class Registry:
    """Named components of one kind (``kind``, e.g. "estimator"), the built-ins being the modules
    of ``package``, plugins coming from the entry-point group ``group``. ``build(obj, name, cfg)``
    turns a registered object and keyword configuration into what ``get`` returns (default: the
    object itself, which then takes no configuration); ``adopt(name, obj)`` registers an object
    an entry point names (default: :meth:`register`), so a kind can check it as its decorator
    does."""

    def __init__(self, kind: str, package: str, group: str,
                 build: Optional[Callable[[Any, str, dict], Any]] = None,
                 adopt: Optional[Callable[[str, Any], Any]] = None):
        self.kind, self.package, self.group = kind, package, group
        self._build, self._adopt = build, adopt
        self._items: dict[str, Any] = {}
        # what is loaded for good, and what this thread is loading (the others wait on the lock)
        self._loaded: set[str] = set()
        self._loading: set[str] = set()
        self._lock = threading.RLock()

    def register(self, name: str, obj: Any = None, *, replace: bool = False) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, a decorator. A taken name raises a
        ValueError unless ``replace=True`` (re-importing the same definition is not a clash)."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")

        def add(item: Any) -> Any:
            if not str(getattr(item, "__module__", "")).startswith(self.package + "."):
                self._load_builtins()  # a plugin's clash with a built-in is caught whatever the import order
            old = self._items.get(name)
            if old is not None and not replace and _origin(old) != _origin(item):
                raise ValueError(f"{self.kind} {name!r} is already registered ({_origin(old)}); "
                                 f"pass replace=True to replace it")
            self._items[name] = item
            return item

        return add if obj is None else add(obj)

    def names(self) -> list[str]:
        """The registered names, sorted, built-ins and plugins (CONTRIBUTING.md "From
        another package")."""
        self._load()
        return sorted(self._items)

    def lookup(self, name: str) -> Any:
        """The object registered under ``name``; an InputError listing the valid names if none
        (errors name what is valid)."""
        self._load()
        if not isinstance(name, str) or name not in self._items:
            raise InputError(f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self._items))}")
        return self._items[name]

    def get(self, name: str, **cfg: Any) -> Any:
        """Build the component ``name`` with keyword configuration ``cfg``."""
        obj = self.lookup(name)
        if self._build is not None:
            return self._build(obj, name, cfg)
        if cfg:
            raise InputError(f"{self.kind} {name!r} takes no parameters, got {', '.join(sorted(cfg))}")
        return obj

    def _once(self, part: str, load: Callable[[], None]) -> None:
        """Run ``load`` once per registry, the first time any thread needs ``part``; a thread that
        needs it meanwhile waits until it is done (imports may register from another thread)."""
        if part in self._loaded:
            return
        with self._lock:
            if part in self._loaded or part in self._loading:  # done, or this very thread is at it
                return
            self._loading.add(part)
            try:
                load()
            finally:
                self._loaded.add(part)

    def _load_builtins(self) -> None:
        self._once("builtins", self._import_builtins)

    def _import_builtins(self) -> None:
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{self.package}.{module.name}")

    def _load(self) -> None:
        self._once("all", self._load_all)

    def _load_all(self) -> None:
        self._load_builtins()
        for entry in importlib.metadata.entry_points(group=self.group):
            try:
                obj = entry.load()
                if not isinstance(obj, types.ModuleType) and not any(obj is v for v in self._items.values()):
                    (self._adopt or self.register)(entry.name, obj)
            except Exception as exc:  # a broken plugin must not break hista; say which one
                warnings.warn(f"hista: cannot load the {self.kind} plugin {entry.name} = {entry.value} "
                              f"(entry point group {self.group}): {type(exc).__name__}: {exc}", stacklevel=2)


def _origin(obj: Any) -> str:
    """Where a registered class or function was defined (module and qualified name)."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
