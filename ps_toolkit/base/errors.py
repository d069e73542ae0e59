"""The exit-status contract and the error types that map onto it.

Every process the toolkit starts ends with one of these statuses, so restart
policies can tell a bad configuration (do not retry) from a transient fault
(retry). Kubeflow's ExitCode restart policy treats 1-127 as permanent and
128-255 as retryable; Slurm's RequeueExit can list EXIT_RETRYABLE.
"""

EXIT_OK = 0
# An unexpected error: a bug, reported with its traceback.
EXIT_UNEXPECTED = 1
# Bad input: flags, TF_CONFIG, cluster file, data, checkpoints. Permanent.
EXIT_CONFIG = 2
# A parameter server whose workers left and never came back. Permanent: the job is over.
EXIT_ORPHANED = 3
# This task's port is taken. Permanent for a fixed address; a launcher that
# chose the port picks new ones and starts again.
EXIT_PORT_IN_USE = 4
# The environment refused: disk full, read-only file system, a path of the wrong
# type, no permission. Permanent until someone fixes the machine: a restart in
# place would only fail again (or train steps that are never saved).
EXIT_ENVIRONMENT = 5
# No progress within the watchdog bound, or a peer unreachable for too long.
# Above 128 so Kubeflow retries it, and above 128 + 64 so it never reads as a signal.
EXIT_RETRYABLE = 200

EXIT_CODE_MEANINGS = {
    EXIT_OK: "success",
    EXIT_UNEXPECTED: "unexpected error (a bug; see the traceback in the task's log)",
    EXIT_CONFIG: "configuration or input error (permanent: fix the input, do not retry)",
    EXIT_ORPHANED: "parameter server gave up: its workers were gone too long (permanent)",
    EXIT_PORT_IN_USE: "the task's port is already in use (a launcher that chose it retries)",
    EXIT_ENVIRONMENT: "the environment refused: disk full, read-only, wrong file type or permission (permanent)",
    EXIT_RETRYABLE: "transient failure: no progress or unreachable peer (retry the task)",
}


class ToolkitError(Exception):
    """An error with a one-line message meant for the user, and an exit status."""

    exit_code = EXIT_UNEXPECTED


class ConfigError(ToolkitError):
    """Bad input: the message names the bad value and where it came from."""

    exit_code = EXIT_CONFIG


class RetryableError(ToolkitError):
    """A transient failure: restarting the task may well succeed."""

    exit_code = EXIT_RETRYABLE


class OrphanedError(ToolkitError):
    """A parameter server whose workers are gone and did not come back."""

    exit_code = EXIT_ORPHANED


# How long a ps waits with no unfinished worker reachable before it ends with OrphanedError (every entry's default).
PS_ORPHAN_TIMEOUT_SECS = 300.0


class EnvironmentProblem(ToolkitError):
    """The machine refused what the task needs: the message names the path and the reason."""

    exit_code = EXIT_ENVIRONMENT


class PortInUseError(ConfigError):
    """This task's port is taken."""

    exit_code = EXIT_PORT_IN_USE


# What TensorFlow 2.x puts on the first line of an error raised by a graph's run: the cause follows.
_GRAPH_EXECUTION_ERROR = "Graph execution error:"


def error_summary(message: str) -> str:
    """The first line of a TensorFlow error that says what went wrong.

    Not its "Graph execution error:" header, nor a rule of "=" signs.

    Args:
        message: An error's text (``OpError.message`` or ``str(error)``).

    Returns:
        Its first line with a word in it other than TensorFlow's header.
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    telling = [line for line in lines if line != _GRAPH_EXECUTION_ERROR and any(c.isalnum() for c in line)]
    return (telling or lines or [""])[0]
