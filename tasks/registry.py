"""Name → factory registries for datasets, models and algorithms, open to code outside Mooring.

A config names a built-in by its name (`fedprox`), or anything importable by a reference `module:attribute`
(`my_pkg.my_method:MyMethod`: from the working directory or the environment). An installed package can also
give its own names through an entry-point group (`mooring.algorithms`, `mooring.models`, `mooring.datasets`:
`name = "module:attribute"`). Every way in is checked the same way (the registry's `check`), and a bad
reference is one line saying what is wrong with it, so a config error can list exactly what is allowed.

Naming a reference runs its module's code; a config or run directory from someone else may name a module of
theirs beside it (the working directory is importable). `refuse_references()` (`mooring run --no-outside-code`)
makes every reference one line instead, before anything is imported: built-in names and installed packages'
entry points only.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class PluginError(ValueError):
    """A reference that cannot be used (no such module or attribute, the wrong kind of object, a name clash),
    said in one line without the reference, which the caller names."""


class RegistryError(ValueError):
    """What a config names is not usable, in one line: an unknown name (with what is allowed) or a bad reference."""


def is_reference(name: str) -> bool:
    return ":" in name


class OutsideCode:
    """Whether this process imports the modules `module:attribute` references name (see `refuse_references`)."""

    refused = False


def refuse_references() -> None:
    """From now on in this process, a `module:attribute` reference is refused in one line, nothing imported."""
    OutsideCode.refused = True


def import_reference(reference: str) -> object:
    """The object `module:attribute` names, the working directory importable as it is for `python -m`."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise PluginError("a reference is module:attribute, e.g. my_pkg.my_method:MyMethod")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not (module_name == e.name or module_name.startswith(e.name + ".")):  # one it imports
            raise PluginError(import_failure(module_name, e)) from None
        raise PluginError(f"cannot import {module_name} ({e})") from None
    except TypeError as e:  # a relative name (".x") outside a package
        raise PluginError(f"cannot import {module_name} ({e})") from None
    except (Exception, SystemExit) as e:  # the module's own code: a syntax error, any exception, sys.exit()
        raise PluginError(import_failure(module_name, e)) from None
    obj = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{module_name} has no {attribute}")
        obj = getattr(obj, part)
    return obj


def import_failure(module_name: str, err: BaseException) -> str:
    """What importing a module's own code raised, in one line: the exception and the file and line it came from."""
    text = (str(err.msg) if isinstance(err, SyntaxError) else str(err)).strip().splitlines()
    where = ""
    if isinstance(err, SyntaxError) and err.filename:
        where = f" ({err.filename}, line {err.lineno})"
    else:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith("<frozen ")]
        # the deepest line of the user's own code (not the environment's libraries), else the deepest of all
        own = [f for f in frames if not f.filename.startswith((sys.prefix, sys.base_prefix))]
        if frames:
            frame = (own or frames)[-1]
            where = f" ({frame.filename}, line {frame.lineno})"
    what = f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__
    return f"cannot import {module_name}: {what}{where}"


def not_a_function_of_one(obj: object, kind: str) -> str | None:
    """Why `obj` cannot be a function a config names as a `kind` (None: it can): a Python function taking one
    argument, defined outside the standard library (`os:system`, `builtins:exec` and their like are refused)."""
    if not inspect.isfunction(obj):
        return f"not {kind}"
    module = obj.__module__ or ""
    name = f"{module}.{obj.__qualname__}"
    if module.partition(".")[0] in sys.stdlib_module_names:
        return f"not {kind}: {name} is the standard library's; name a function of your own"
    try:
        inspect.signature(obj).bind(None)
    except TypeError:
        return f"not {kind}: {name} takes ({', '.join(inspect.signature(obj).parameters)}), not one argument"
    return None


class Registry(Generic[T]):
    """`check(obj)` says why an object is not one of this registry's kind (None: it is)."""

    def __init__(self, kind: str, group: str, check: Callable[[object], str | None] = lambda obj: None,
                 reserved: tuple[str, ...] = ()):
        self.kind, self.group, self.check = kind, group, check
        # built-in names whose objects live elsewhere (the partition kinds the partitioner runs itself): listed
        # and not to be taken by an entry point, but never returned by `get`
        self.reserved = reserved
        self._entries: dict[str, T] = {}
        self._resolved: dict[str, T] = {}  # references and entry-point names, once imported and checked

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        """The built-in `name`, the object a reference names, or an installed package's entry point; KeyError
        listing what is allowed, PluginError saying what is wrong with a reference."""
        if name in self._entries:
            return self._entries[name]
        if is_reference(name) and OutsideCode.refused:
            raise PluginError("a module:attribute reference runs outside code, which --no-outside-code refuses; "
                              "only built-in names and installed packages' entry points")
        if name not in self._resolved:
            self._resolved[name] = self._resolve(name)
        return self._resolved[name]

    def find(self, name: str) -> T:
        """`get`, with every way it can fail as one RegistryError line (without the name, which the caller states)."""
        try:
            return self.get(name)
        except KeyError:
            raise RegistryError(f"unknown {self.kind}; allowed: {', '.join(self.names())}, or module:attribute") from None
        except PluginError as e:
            raise RegistryError(str(e)) from None

    def _resolve(self, name: str) -> T:
        if is_reference(name):
            return self._checked(name)
        reference = self.installed().get(name)
        if reference is None:
            raise KeyError(f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())}, or module:attribute")
        try:
            return self._checked(reference)
        except PluginError as e:
            raise PluginError(f"entry point {name} = {reference} ({self.group}): {e}") from None

    def _checked(self, reference: str) -> T:
        obj = import_reference(reference)
        problem = self.check(obj)
        if problem is not None:
            raise PluginError(problem)
        return obj

    def installed(self) -> dict[str, str]:
        """Names given by installed packages' entry points: {name: module:attribute} (a built-in's name is not
        theirs to take)."""
        found = {ep.name: ep.value for ep in entry_points(group=self.group)}
        for name in found:
            if name in self._entries or name in self.reserved:
                raise PluginError(f"entry point {name} = {found[name]} ({self.group}): {name!r} is a built-in "
                                  f"{self.kind}'s name; give it another")
        return found

    def resolved(self) -> list[T]:
        """What references and entry points this process has imported so far."""
        return list(self._resolved.values())

    def names(self) -> list[str]:
        return sorted([*self._entries, *self.reserved]) + sorted(self.installed())

    def __contains__(self, name: object) -> bool:
        return name in self._entries
