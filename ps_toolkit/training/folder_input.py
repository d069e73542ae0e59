"""A training input that follows a folder: record files read as they land, each once, its position checkpointed.

    def input_fn(context):
        records = ps_toolkit.follow_folder("/data/clicks/part-*.tfrecord", context)
        return records.map(parse).batch(64)

Files matching the pattern are read in order of arrival (modification time,
then name), each by exactly one replica (a stable hash of its name picks it),
and never again: which files are done and how many records of the current one
were taken are kept in a string variable per replica, saved in the chief's
checkpoint. A restart reads the positions back and goes on from there, so no
record is skipped or read twice. A producer writes each file under another name
and renames it into the pattern: a matching file is taken as complete.

The position counts records as the dataset hands them on: a shuffle or prefetch
buffer after ``follow_folder`` holds records it counts as taken, and a stop
loses them. The dataset ends only when the job is asked to stop
(``stop_request``) or, with ``on_bad_file="stop"``, at a file that is not a
complete record file; ``on_bad_file="skip"`` logs the file and goes on.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import threading
import zlib

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.training import stop_request
from ps_toolkit.training.model_api import InputContext

log = logging.getLogger(__name__)
BAD_FILE_CHOICES = ("skip", "stop")
# Graph collection of the FolderInputs built in a graph: the trainer adds their hooks.
FOLDER_INPUTS = "ps_toolkit_folder_inputs"
POSITION_READ_BOUND_SECS = 600.0  # how long a reader waits for its session to read the saved position


def follow_folder(
    pattern: str,
    context: InputContext,
    *,
    name: str = "folder_input",
    poll_secs: float = 1.0,
    on_bad_file: str = "skip",
) -> tf.data.Dataset:
    """A dataset of the serialized records of the files matching ``pattern``, this replica's share, endless.

    Args:
        pattern: A glob such as ``/data/clicks/part-*.tfrecord``; its folder must exist.
        context: The input_fn's InputContext: which replica reads which files.
        name: The position variables' scope; one per follow_folder of a graph.
        poll_secs: How often the folder is listed when every file has been read.
        on_bad_file: ``skip`` a truncated or non-record file (one warning naming it) or ``stop`` the job.

    Returns:
        A ``tf.string`` dataset of records, ending only when the job is asked to stop.

    Raises:
        ConfigError: the folder does not exist, or a bad ``on_bad_file`` / ``poll_secs``.
    """
    folder_input = FolderInput(pattern, context.num_input_pipelines, context.input_pipeline_id, name=name)
    folder_input.configure(poll_secs=poll_secs, on_bad_file=on_bad_file)
    tf.compat.v1.add_to_collection(FOLDER_INPUTS, folder_input)
    return folder_input.dataset()


def exact_position_options() -> tf.data.Options:
    """Options for a training dataset built on a followed folder: no prefetch that tf.data would add by
    itself after the user's last step, which would take records ahead of the steps that train them."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.autotune.enabled = False
    return options


def replica_of(file_name: str, num_replicas: int) -> int:
    """The replica that reads ``file_name``: a hash of its base name, the same in every process."""
    return zlib.crc32(os.path.basename(file_name).encode()) % num_replicas


class FolderInput:
    """One replica's reader of a folder pattern and its position variables (one per replica, all saved)."""

    def __init__(self, pattern: str, num_replicas: int, replica: int, *, name: str = "folder_input"):
        folder = os.path.dirname(pattern) or "."
        if not os.path.isdir(folder):
            raise ConfigError(f"input folder {folder} (of the pattern {pattern}) does not exist")
        self.pattern, self._num_replicas, self._replica = pattern, num_replicas, replica
        self.poll_secs, self.on_bad_file = 1.0, "skip"
        self.failure: str | None = None  # set when on_bad_file="stop" met a bad file
        self._lock = threading.Lock()
        self._position_read = threading.Event()
        self._done: set[str] = set()  # base names of the files every replica finished
        self._mine_done: list[str] = []  # this replica's, in order: what its variable holds
        self._current: tuple[str, int] | None = None  # (file, records taken) of the file being read
        self._pushed: str | None = None
        self._tokens: dict[int, tuple[str, int, bool]] = {}  # token -> (file, records taken after it, last?)
        self._next_token = 0
        with tf.compat.v1.variable_scope(name):
            self._variables = [
                tf.compat.v1.get_variable(
                    f"position_replica_{index}",
                    shape=[],
                    dtype=tf.string,
                    initializer=tf.constant_initializer(""),
                    trainable=False,
                )
                for index in range(num_replicas)
            ]
            self._new_position = tf.compat.v1.placeholder(tf.string, shape=[], name="new_position")
            self._assign = self._variables[replica].assign(self._new_position)

    def configure(self, *, poll_secs: float, on_bad_file: str) -> None:
        if on_bad_file not in BAD_FILE_CHOICES:
            raise ConfigError(f"on_bad_file={on_bad_file!r} for {self.pattern}; valid: {', '.join(BAD_FILE_CHOICES)}")
        if not poll_secs > 0:
            raise ConfigError(f"poll_secs={poll_secs} for {self.pattern} must be positive")
        self.poll_secs, self.on_bad_file = poll_secs, on_bad_file

    def dataset(self) -> tf.data.Dataset:
        """The records; each counts as taken when the map after the generator hands it on (the generator
        itself is read ahead by TensorFlow, so a record it yields may never reach a step)."""
        signature = (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64))
        generated = tf.data.Dataset.from_generator(self._records, output_signature=signature)

        def taken(record, token):
            handed = tf.numpy_function(self._take, [record, token], tf.string, stateful=True)
            return tf.ensure_shape(handed, [])

        return generated.map(taken)

    def hook(self) -> tf.compat.v1.train.SessionRunHook:
        return FolderPositionHook(self)

    # Position: JSON {"done": [...], "file": name, "records": n} per replica, "" before the first.

    def position_json(self) -> str:
        with self._lock:
            file, records = self._current or (None, 0)
            return json.dumps({"done": self._mine_done, "file": file, "records": records})

    def read_position(self, session) -> None:
        """Reads every replica's saved position: files any replica finished are never read again."""
        self._position_read.clear()
        saved = [json.loads(text) if text else {} for text in (v.decode() for v in session.run(self._variables))]
        mine = saved[self._replica] if self._replica < len(saved) else {}
        with self._lock:
            self._done = {name for position in saved for name in position.get("done", ())}
            self._mine_done = list(mine.get("done", ()))
            self._current = (mine["file"], int(mine["records"])) if mine.get("file") else None
            self._pushed = self.position_json_unlocked()
        self._position_read.set()
        log.info(
            "%s: %d files done by every replica; this replica resumes at %s",
            self.pattern,
            len(self._done),
            self._current,
        )

    def position_json_unlocked(self) -> str:
        file, records = self._current or (None, 0)
        return json.dumps({"done": self._mine_done, "file": file, "records": records})

    def push_args(self):
        """(assign op, feed) when the position changed since the last push, else None."""
        text = self.position_json()
        if text == self._pushed or not self._position_read.is_set():  # never the default over a saved one
            return None
        self._pushed = text
        return self._assign, {self._new_position: text}

    # Reading.

    def _pending(self) -> list[str]:
        """This replica's unread files, oldest first."""
        files = []
        for path in glob.glob(self.pattern):
            base = os.path.basename(path)
            if base in self._done or replica_of(base, self._num_replicas) != self._replica:
                continue
            try:
                files.append((os.stat(path).st_mtime_ns, base, path))
            except FileNotFoundError:  # removed since it was listed
                continue
        return [path for _, _, path in sorted(files)]

    def _records(self):
        if not self._position_read.wait(POSITION_READ_BOUND_SECS):
            raise RuntimeError(f"{self.pattern}: the session never read the input's saved position")
        with self._lock:
            resume = self._current
        started = set()  # files this generator began: read ahead of the records taken, not yet done
        if resume is not None:
            started.add(resume[0])
            path = os.path.join(os.path.dirname(self.pattern), resume[0])
            yield from self._file_records(path, skip=resume[1])
        while not stop_request.requested():
            pending = [path for path in self._pending() if os.path.basename(path) not in started]
            if not pending:
                stop_request.wait(self.poll_secs)
                continue
            for path in pending:
                if stop_request.requested() or self.failure:
                    return
                started.add(os.path.basename(path))
                yield from self._file_records(path, skip=0)
            if self.failure:
                return

    def _file_records(self, path: str, skip: int):
        """The records of one file after the first ``skip``; the whole file is checked before its first record."""
        base = os.path.basename(path)
        problem, count = _check_record_file(path)
        if problem is not None:
            if self.on_bad_file == "stop":  # not marked done: a restart meets it again
                self.failure = f"input file {path} {problem}; stopping (on_bad_file='stop')"
                return
            log.warning("input file %s %s; skipped", path, problem)
            self._finish(base)
            return
        if skip >= count:
            self._finish(base)
            return
        for number, record in enumerate(_records_after(path, skip), start=skip + 1):
            with self._lock:
                token = self._next_token
                self._next_token += 1
                self._tokens[token] = (base, number, number == count)
            yield record, token

    def _take(self, record, token):
        """A record handed on to the batch: the position moves past it (the file is done after its last)."""
        with self._lock:
            base, taken, last = self._tokens.pop(int(token))
            self._current = (base, taken)
        if last:
            self._finish(base)
            log.info("input file %s: every record taken", base)
        return record

    def _finish(self, base: str) -> None:
        with self._lock:
            self._done.add(base)
            if base not in self._mine_done:
                self._mine_done.append(base)
            self._current = None


def _records_after(path: str, skip: int):
    for index, record in enumerate(tf.compat.v1.io.tf_record_iterator(path)):
        if index >= skip:
            yield record


def _check_record_file(path: str) -> tuple[str | None, int]:
    """(None, its record count) for a complete TFRecord file, else (what is wrong with it, 0)."""
    count = 0
    try:
        for _ in tf.compat.v1.io.tf_record_iterator(path):
            count += 1
    except tf.errors.DataLossError:
        return "is truncated or not a TFRecord file", 0
    except (tf.errors.OpError, OSError) as err:
        return f"cannot be read ({type(err).__name__})", 0
    return None, count


class FolderPositionHook(tf.compat.v1.train.SessionRunHook):
    """Reads the saved positions when a session starts; writes this replica's as it changes.

    The position goes with the next step's run (no extra round trip), so the
    variable trails by one run; ``save_listener`` writes it exactly before each
    of the chief's saves, and ``end`` once more at the end.
    """

    def __init__(self, folder_input: FolderInput):
        self._input = folder_input

    def after_create_session(self, session, coord):
        self._input.read_position(session)

    def before_run(self, run_context):
        args = self._input.push_args()
        if args is None:
            return None
        return tf.compat.v1.train.SessionRunArgs(args[0], feed_dict=args[1])

    def end(self, session):
        self.push_now(session)

    def push_now(self, session) -> None:
        args = self._input.push_args()
        if args is not None:
            session.run(args[0], feed_dict=args[1])

    def save_listener(self) -> tf.compat.v1.train.CheckpointSaverListener:
        hook = self

        class _PushBeforeSave(tf.compat.v1.train.CheckpointSaverListener):
            def before_save(self, session, global_step_value):
                hook.push_now(session)

        return _PushBeforeSave()
