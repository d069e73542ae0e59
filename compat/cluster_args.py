"""The cluster flags a launcher appended never break a script that does not define them (absl or argparse).

``scripts/launch_local.py`` appends ``--ps_hosts=... --worker_hosts=... --job_name=...
--task_index=...`` to every task's command and lists them in
``PS_TOOLKIT_CLUSTER_ARGS`` (ps_toolkit.launch.task_plan). A TF_CONFIG script
with its own strict parsing (``argparse``'s ``parse_args()``, absl's
``app.run``) would stop at the first one it does not define:

    old_estimator.py: error: unrecognized arguments: --chief_hosts=...
    FATAL Flags parsing error: Unknown command line flag 'chief_hosts'

``install()`` makes both parsers skip exactly those appended arguments when
the script's parser does not define them; a flag the script defines still
gets its value, and any other unknown argument is refused as before. Without
the variable (a script run by hand) nothing changes.
"""

from __future__ import annotations

import argparse
import json
import os
from gettext import gettext

from absl import flags

from ps_toolkit.base.progress_lines import CLUSTER_ARGS_ENV

_installed: frozenset[str] | None = None


def appended_args(environ=os.environ) -> frozenset[str]:
    """The arguments the launcher appended, from ``CLUSTER_ARGS_ENV``; empty when unset or not a JSON list."""
    try:
        values = json.loads(environ.get(CLUSTER_ARGS_ENV) or "[]")
    except ValueError:
        return frozenset()
    return frozenset(v for v in values if isinstance(v, str)) if isinstance(values, list) else frozenset()


def _flag_name(arg: str) -> str:
    return arg.lstrip("-").split("=", 1)[0]


def install(environ=os.environ) -> None:
    """Patches argparse's ``parse_args`` and absl's flag parsing (see the module docstring). Idempotent."""
    global _installed
    appended = appended_args(environ)
    if not appended or _installed is not None:
        return
    _installed = appended
    original_parse_args = argparse.ArgumentParser.parse_args
    original_flags_call = flags.FlagValues.__call__

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        unknown = [arg for arg in extras if arg not in appended]
        if unknown:
            self.error(gettext("unrecognized arguments: %s") % " ".join(unknown))  # argparse's own words, exit 2
        return namespace

    def flags_call(self, argv, known_only=False):
        kept = [argv[0], *(arg for arg in argv[1:] if arg not in appended or _flag_name(arg) in self)]
        return original_flags_call(self, kept, known_only)

    parse_args.__doc__ = original_parse_args.__doc__
    argparse.ArgumentParser.parse_args = parse_args
    flags.FlagValues.__call__ = flags_call
