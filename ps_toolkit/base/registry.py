"""Named functions of one kind (placement strategies, cluster sources, ...): the built-in ones and a user's own."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ps_toolkit.base.errors import ConfigError


class Registry:
    """The functions of one kind by name; a user adds one with a single ``register`` call.

    Args:
        kind: What the functions are, for messages ("placement strategy").
        flag: The flag that names one, for messages ("--placement").
        signature: The arguments a function takes, for messages ("(num_ps, seed)").
        built_in: The toolkit's own functions by name; their names cannot be taken.
    """

    def __init__(self, kind: str, flag: str, signature: str, built_in: Mapping[str, Callable]):
        self.kind = kind
        self.flag = flag
        self.signature = signature
        self.built_in = tuple(built_in)
        self._functions = dict(built_in)

    def register(self, name: str, function: Callable) -> None:
        """Makes ``function`` the one called ``name``.

        Raises:
            ValueError: ``name`` is empty or a built-in one's, or ``function`` is not callable.
        """
        if not name or not isinstance(name, str):
            raise ValueError(f"a {self.kind} needs a name, not {name!r}")
        if name in self.built_in:
            raise ValueError(f"{self.kind} {name!r} is built in; register yours under another name")
        if not callable(function):
            raise ValueError(f"{self.kind} {name!r} must be a function {self.signature}, not {function!r}")
        self._functions[name] = function

    def unregister(self, name: str) -> None:
        """Removes a function registered with ``register``; a built-in one stays."""
        if name not in self.built_in:
            self._functions.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """The registered names: the built-in ones first, then the user's in the order registered."""
        return tuple(self._functions)

    def check(self, name: str, given_by: str | None = None) -> None:
        """Raises ConfigError (one line naming where ``name`` came from and every registered name) if unknown."""
        if name not in self._functions:
            raise ConfigError(
                f"unknown {self.kind} {name!r} (from {given_by or self.flag}); registered: {', '.join(self._functions)}"
            )

    def get(self, name: str, given_by: str | None = None) -> Callable:
        """The function registered as ``name``.

        Raises:
            ConfigError: ``name`` is not registered (see ``check``).
        """
        self.check(name, given_by)
        return self._functions[name]
