"""Makes ``import tensorflow_recommenders_addons`` give the compat layer's TFRA surface (run_legacy does it).

    from ps_toolkit_compat.tfra import install
    install.install()        # before the script's ``import tensorflow_recommenders_addons as tfra``

The package, its ``dynamic_embedding`` module and the private module paths TFRA's
code imports from (``private_modules``) are built on first import, by a
finder placed first on ``sys.meta_path`` (so an installed TFRA, whose C++ ops are
built for TensorFlow 2.16 only, is not loaded instead). Importing any other module
below the package is one line naming it (``refused.NotServedModuleError``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types

from ps_toolkit_compat.tfra import refused

PACKAGE = "tensorflow_recommenders_addons"
DYNAMIC_EMBEDDING = PACKAGE + ".dynamic_embedding"
# The TFRA release whose API this layer follows; the local label says who serves it.
VERSION = "0.8.0+ps_toolkit"


class Namespace(types.ModuleType):
    """A served module: its members, then a one-line NotServedError for any other public name."""

    def __init__(self, name: str, members: dict):
        super().__init__(name, members.get("__doc__"))
        self.__dict__.update(members)
        self.__path__ = []  # a package, so ``import x.y`` reaches the finder and its one-line refusal

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise refused.NotServedError(f"{self.__name__[len(PACKAGE) + 1 :]}.{name}".lstrip("."))


def register_all(keras_objects=True, custom_kernels=True):
    """TFRA registers its Keras objects and C++ kernels here; the compat layer has neither to register."""
    del keras_objects, custom_kernels


@contextlib.contextmanager
def _real_tensorflow():
    """``import tensorflow`` gives TensorFlow 2's own module inside: the adapter and the tables are written for it,
    and run_legacy's legacy module (tf.compat.v1: ``tf.where`` without broadcasting...) replaced it before."""
    legacy_tf = sys.modules.get("ps_toolkit_compat.legacy_tf")  # not imported: not installed either
    current = sys.modules.get("tensorflow")
    if legacy_tf is None or not isinstance(current, legacy_tf.LegacyModule):
        yield
        return
    sys.modules["tensorflow"] = legacy_tf.real_tensorflow()
    try:
        yield
    finally:
        sys.modules["tensorflow"] = current


def build() -> dict[str, types.ModuleType]:
    """The served modules by name. Imports the adapter and the tables only now, against TensorFlow 2's API."""
    with _real_tensorflow():
        from ps_toolkit_compat.tfra import checkpoint_import, private_modules, surface

        checkpoint_import.install()  # a TFRA model_dir's checkpoints restore into the tables

    public = surface.members()
    dynamic_embedding = Namespace(DYNAMIC_EMBEDDING, public)
    package = Namespace(
        PACKAGE,
        {
            "__doc__": "TFRA's graph-mode dynamic_embedding API, served by ps_toolkit's dynamic tables.",
            "__version__": VERSION,
            "dynamic_embedding": dynamic_embedding,
            "register_all": register_all,
        },
    )
    modules = {PACKAGE: package, DYNAMIC_EMBEDDING: dynamic_embedding}
    for name, members in private_modules.members_by_module(public).items():
        modules[f"{PACKAGE}.{name}"] = Namespace(f"{PACKAGE}.{name}", members)
    return modules


class _Loader(importlib.abc.Loader):
    def __init__(self, modules: dict):
        self._modules = modules

    def create_module(self, spec):
        return self._modules[spec.name]

    def exec_module(self, module):
        pass  # built whole by build()


class TfraFinder(importlib.abc.MetaPathFinder):
    """Serves the package, ``dynamic_embedding`` and the private modules of ``private_modules``; refuses the rest."""

    def __init__(self):
        self._modules: dict | None = None

    def find_spec(self, fullname, path=None, target=None):
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        if self._modules is None:
            self._modules = build()
        if fullname not in self._modules:
            raise refused.NotServedModuleError(fullname[len(PACKAGE) + 1 :])
        return importlib.machinery.ModuleSpec(fullname, _Loader(self._modules), is_package=True)


def install() -> None:
    """Puts the finder first on ``sys.meta_path``; idempotent. Builds nothing until the first import."""
    if not any(isinstance(finder, TfraFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, TfraFinder())


def uninstall() -> None:
    """Removes the finder and the modules it served (tests)."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, TfraFinder)]
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
        del sys.modules[name]
