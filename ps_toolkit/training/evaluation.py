"""Evaluation through the model_fn's ``eval_metric_ops``: its graph, the final evaluation hook and its summaries.

Design: docs/design.md, "One replica's step".
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base import session_close
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import PS
from ps_toolkit.placement.strategies import VARIABLE_OPS
from ps_toolkit.training.model_api import ModeKeys, ModelDefinition, function_name
from ps_toolkit.training.model_calls import call_input_fn, call_model_fn

log = logging.getLogger(__name__)
# The longest wait at the end for a warm-up still running (without a watchdog bound).
WARM_UP_WAIT_SECS = 30.0


@dataclasses.dataclass(frozen=True)
class EvalGraph:
    """The ops of one evaluation pass: start the data, reset the metrics, update them per batch, read them."""

    initializer: tf.Operation
    updates: list
    values: dict
    batches: tf.Tensor  # the dataset's cardinality: negative when infinite or unknown

    def run(
        self,
        session,
        max_batches: int | None = None,
        bound_secs: float | None = None,
        on_batch=None,
        initialized: bool = False,
    ) -> dict:
        """Every metric over the eval dataset (at most ``max_batches`` batches), as floats.

        A dataset that repeats forever is refused; one whose length is unknown (a generator,
        a filter) is evaluated for at most ``bound_secs`` and refused past it. ``on_batch()``
        is called after each batch (the watchdog counts it as progress). With ``initialized``,
        the data and the metrics were started in ``session`` already (``initializer``).
        """
        if not initialized:
            session.run(self.initializer)
        cardinality = session.run(self.batches)
        if max_batches is None and cardinality == tf.data.INFINITE_CARDINALITY:
            raise ConfigError("the eval_input_fn's dataset repeats forever; end it or give --eval_steps")
        bounded = max_batches is None and cardinality < 0 and bound_secs
        deadline = time.monotonic() + bound_secs if bounded else None
        done = 0
        while max_batches is None or done < max_batches:
            try:
                session.run(self.updates)
            except tf.errors.OutOfRangeError:
                break
            done += 1
            if on_batch is not None:
                on_batch()
            if deadline is not None and time.monotonic() > deadline:
                raise ConfigError(
                    f"the eval_input_fn's dataset did not end within {bound_secs:g} s ({done} batches; its length "
                    "is unknown, as a generator's is): end it or give --eval_steps"
                )
        return {name: float(value) for name, value in session.run(self.values).items()}


def build_eval_graph(definition: ModelDefinition, partitioner=None, reuse=None) -> EvalGraph:
    """The model in EVAL mode on the eval_input_fn's dataset, in the default graph and device scope."""
    name = function_name(definition.eval_input_fn)
    dataset = call_input_fn(definition.eval_input_fn, name, params=definition.params)
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    features, labels = iterator.get_next()
    graph = tf.compat.v1.get_default_graph()
    local_before = set(graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES))
    spec = call_model_fn(definition, features, labels, ModeKeys.EVAL, partitioner=partitioner, reuse=reuse)
    metrics = dict(spec.eval_metric_ops or {})
    if "loss" not in metrics:
        metrics["loss"] = tf.compat.v1.metrics.mean(spec.loss)
    metric_variables = [
        v for v in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES) if v not in local_before
    ]
    initializer = tf.group(iterator.initializer, tf.compat.v1.variables_initializer(metric_variables))
    return EvalGraph(
        initializer=initializer,
        updates=[update for _, update in metrics.values()],
        values={metric: value for metric, (value, _) in metrics.items()},
        batches=dataset.cardinality(),
    )


@dataclasses.dataclass(frozen=True)
class _BuiltEvaluation:
    """The evaluation's graph, its ops, the initializer of the variables only it makes, and whether the
    warm-up may start its data and metrics for the end (no training variable shares a metric's name here)."""

    graph: tf.Graph
    eval_graph: EvalGraph
    own_variables_init: tf.Operation
    reset_at_warm_up: bool


class FinalEvaluationHook(tf.compat.v1.train.SessionRunHook):
    """Evaluates the trained model once, when the session ends normally; ``metrics`` holds the result.

    The evaluation has a graph of its own, run in a session of its own on the
    training session's ``target``: the training graph, which every replica
    builds before its first step, does not carry it. It is built after this
    replica's first run, so an EVAL mode that breaks the model_fn contract
    stops the task then, not when training ends. Its variables are the
    training graph's global variables, each placed on the device training
    placed it on, where the servers share it by name. A global variable only
    the EVAL mode creates was never trained: it is made on this replica and
    initialized there, like the metrics' local variables, which are this
    replica's alone even when TRAIN mode made some of the same name on a ps
    (one of the same name on this task is the same variable: the metrics
    are then reset when the evaluation starts, after training).
    """

    def __init__(
        self,
        definition: ModelDefinition,
        target: str,
        *,
        device: str,
        partitioner=None,
        session_config=None,
        max_batches: int | None = None,
        bound_secs: float | None = None,
        bound_close: bool = False,
    ):
        self._definition, self._target, self._device = definition, target, device
        self._partitioner, self._session_config, self._max_batches = partitioner, session_config, max_batches
        self._bound_secs = bound_secs
        # Told when the end starts to wait for the warm-up, when the evaluation starts and after each
        # batch (the task's watchdog: what the task waits for, and progress that is not a step).
        self.on_warm_up_wait = self.on_start = self.on_batch = None
        self._variable_devices: dict[str, str] = {}
        self._table_devices = None
        self._built: _BuiltEvaluation | None = None
        self._training_graph = None
        # Close the session within session_close's bound: only in a task process that ends with os._exit.
        self._bound_close = bound_close
        self._warm = _WarmSession(bound_close)
        # Evaluated on a thread (start, finish) instead of in end(): FinalEvaluationStart sets it.
        self.background = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.metrics: dict | None = None

    def warm_up(self) -> None:
        """Opens the evaluation's session and runs one batch, on a thread, while training goes on.

        A session's first run of a graph registers its parts on every task
        and makes their executors: about 1 s of the final evaluation of a
        model with many tables, otherwise paid after the last step. Right
        after the warm-up batch the eval data starts again (its file names
        and other inputs are read then, halfway through training) and so do
        the metrics, unless training holds variables of their names on this
        task: then the metrics are reset when the evaluation starts.
        """
        if self._built is not None:
            built = self._built
            self._warm.start(
                lambda: self._new_session(built),
                lambda session: session.run(built.own_variables_init),
                built.eval_graph,
                built.reset_at_warm_up,
            )

    def begin(self):
        # Global variables only: a metric the model also builds in TRAIN mode has local
        # variables of the same names, placed on a ps by the device setter; shared there,
        # every replica's evaluation would count into the same totals.
        self._variable_devices = {v.op.name: v.device for v in tf.compat.v1.global_variables()}
        self._training_graph = tf.compat.v1.get_default_graph()
        # The training graph's dynamic tables are read where they live, shard by shard.
        tables = dynamic_embedding.tables_of_graph()
        self._table_devices = tables[0].devices if tables else None

    def after_run(self, run_context, run_values):
        if self._built is None:
            self._built = self._build()

    def end(self, session):
        """Evaluates now, unless ``background``: then ``start`` and ``finish`` do it."""
        if not self.background:
            self._evaluate()

    def start(self) -> None:
        """Starts evaluating on a thread; ``finish`` waits for it."""
        self._thread = threading.Thread(target=self._evaluate_keeping_error, name="final evaluation", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """Waits for an evaluation started in the background; raises what it raised.

        Unbounded here: the task's watchdog bounds a stalled evaluation (its batches are its progress).
        """
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error

    def _evaluate_keeping_error(self) -> None:
        try:
            self._evaluate()
        except BaseException as err:  # raised in the caller's thread by finish()
            self._error = err

    def _evaluate(self) -> None:
        started = time.monotonic()
        built = self._built or self._build()
        eval_graph = built.eval_graph
        if self.on_warm_up_wait is not None:
            self.on_warm_up_wait()
        warmed = self._warm.take(self._bound_secs or WARM_UP_WAIT_SECS)
        if warmed is not None:
            try:
                self._run_and_close(
                    warmed, eval_graph, started, "warmed during training", initialized=self._warm.initialized
                )
                return
            except (tf.errors.AbortedError, tf.errors.UnavailableError, tf.errors.CancelledError) as err:
                # A task restarted since the warm-up (a ps, with the variables restored from a checkpoint):
                # the warmed session's handles on it are gone (TensorFlow says so with a CancelledError,
                # "Session handle is not found"). A session opened now sees the new task.
                if isinstance(err, tf.errors.CancelledError) and "Session handle is not found" not in str(err):
                    raise
                log.info("the final evaluation's warmed session failed (%s); evaluating in a new session", err)
        self._run_and_close(self._open_session(built), eval_graph, started, "opened at the end")

    def _run_and_close(
        self, eval_session, eval_graph: EvalGraph, started: float, how_opened: str, initialized: bool = False
    ) -> None:
        """Runs the evaluation in ``eval_session`` into ``metrics`` (its data and metrics already started
        if ``initialized``), closes the session, logs the times."""
        opened = time.monotonic()
        if self.on_start is not None:
            self.on_start()
        try:
            self.metrics = eval_graph.run(
                eval_session, self._max_batches, self._bound_secs, self.on_batch, initialized=initialized
            )
        finally:
            _close(eval_session, self._bound_close, "closing the final evaluation's session")
        log.info(
            "final evaluation: session %.2f s (%s), batches %.2f s",
            opened - started,
            how_opened,
            time.monotonic() - opened,
        )

    def _new_session(self, built: _BuiltEvaluation):
        return tf.compat.v1.Session(self._target, graph=built.graph, config=self._session_config)

    def _open_session(self, built: _BuiltEvaluation):
        session = self._new_session(built)
        session.run(built.own_variables_init)
        return session

    def _build(self) -> _BuiltEvaluation:
        graph = tf.Graph()
        with (
            graph.as_default(),
            tf.compat.v1.device(self._place),
            dynamic_embedding.shard_devices(self._table_devices or [None]),
        ):
            tf.compat.v1.train.get_or_create_global_step()
            eval_graph = build_eval_graph(self._definition, self._partitioner)
            own = [v for v in tf.compat.v1.global_variables() if v.op.name not in self._variable_devices]
            own_variables_init = tf.compat.v1.variables_initializer(own)
            metric_names = {v.op.name for v in tf.compat.v1.local_variables()}
        graph.finalize()
        # The evaluation's metric variables live on this task, where a training variable of the same
        # name is the same variable: if training may update it, the metrics are reset at the end only.
        shared = sorted(metric_names & self._training_variables_here())
        if shared:
            log.info("the final evaluation resets its metrics when it starts: training holds %s here", shared)
        return _BuiltEvaluation(graph, eval_graph, own_variables_init, reset_at_warm_up=not shared)

    def _training_variables_here(self) -> set:
        """Names of the training graph's variables not on a ps (placed on this task, or not placed)."""
        if self._training_graph is None:
            return set()
        return {
            op.name
            for op in self._training_graph.get_operations()
            if op.type in VARIABLE_OPS and tf.DeviceSpec.from_string(op.device).job != PS
        }

    def _place(self, op) -> str:
        if op.type in VARIABLE_OPS:
            return self._variable_devices.get(op.name, self._device)
        return self._device


def write_summary(writer, step: int, metrics: dict) -> None:
    """One summary event of every metric at ``step`` (what TensorBoard's eval run shows)."""
    summary = tf.compat.v1.Summary(
        value=[tf.compat.v1.Summary.Value(tag=name, simple_value=value) for name, value in metrics.items()]
    )
    writer.add_summary(summary, step)
    writer.flush()


class _WarmSession:
    """An evaluation session opened and run once on a thread of its own, then (``reset``) its data and
    metrics started again for the evaluation; taken at the end, or not at all.

    The data and metrics start here rather than at the end because at the end that run, local to
    the replica, sometimes waited seconds while the other replica was ending (cause not found;
    docs/bench/ctr-2026-11-27.md).

    A warm-up not done when the end takes it is abandoned: its session is closed, which fails its
    runs from then on and cancels the one under way, and the end waits for its thread to end. It
    must not run on beside the evaluation that replaces it: both sessions share the metrics'
    variables (one name on one task is one variable), and its reset or its batch would undo or add
    to the evaluation's counts. A cancelled run still finishes the kernels already running (a
    py_function's input, say), and those may feed its metric updates: hence the wait.
    """

    def __init__(self, bound_close: bool = False):
        self._bound_close = bound_close  # its closes within session_close's bound (``FinalEvaluationHook``)
        self._thread: threading.Thread | None = None
        self._session = None
        self._lock = threading.Lock()  # orders the warm-up's session against ``_abandon``
        self._abandoned = False
        self.initialized = False  # the session's data and metrics were started for the evaluation

    def start(self, new_session, prepare, eval_graph: EvalGraph, reset: bool) -> None:
        """Warms, on a thread, a session ``new_session()`` makes and ``prepare(session)`` readies."""
        if self._thread is not None:
            return

        def warm():
            session = None
            try:
                session = new_session()  # runs nothing: the session's first run is prepare's
                with self._lock:
                    if self._abandoned:  # before its first run: nothing to cancel
                        session.close()
                        return
                    self._session = session
                prepare(session)
                eval_graph.run(session, max_batches=1)
                if reset:
                    session.run(eval_graph.initializer)
                    self.initialized = True
            except Exception as err:  # the end opens a session of its own and meets the error there
                with self._lock:  # an abandoned warm-up's session is closed by ``_abandon``, which failed it
                    failed_here = not self._abandoned
                    self._session = None
                if failed_here:
                    log.info("the final evaluation's warm-up failed (the evaluation will run cold): %s", err)
                    if session is not None:
                        self._close_quietly(session, "closing the final evaluation's failed warm-up")

        self._thread = threading.Thread(target=warm, name="final evaluation warm-up", daemon=True)
        self._thread.start()

    def take(self, bound_secs: float | None):
        """The warmed session, once the warm-up is done (waiting at most ``bound_secs``); None if none.

        A warm-up still running then is abandoned, and its run waited for (``bound_secs`` more at most).
        """
        if self._thread is None:
            return None
        self._thread.join(bound_secs)
        if not self._thread.is_alive():
            return self._session
        log.info("the final evaluation's warm-up is still running; the evaluation opens its own session")
        self._abandon()
        self._thread.join(bound_secs)
        if self._thread.is_alive():
            log.warning(
                "the final evaluation's abandoned warm-up is still in its run after %.0f s more: its batch "
                "may be counted in the evaluation's metrics",
                bound_secs,
            )
        return None

    def _abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            session, self._session = self._session, None
        if session is not None:
            # The close cancels the run under way at once; ``take`` then waits for the warm-up to end.
            self._close_quietly(session, "closing the final evaluation's warm-up")

    def _close_quietly(self, session, what: str) -> None:
        """Closes a session being given up: an error in its close is logged, not raised."""
        try:
            _close(session, self._bound_close, what)
        except Exception as err:  # the session is being given up: its close's error changes nothing
            log.info("%s: %s", what, err)


def _close(session, bounded: bool, what: str) -> None:
    """``session.close()``; with ``bounded``, waiting at most session_close's bound (a close held by a slow
    peer must not hold the end of a task that exits with os._exit; one left running aborts a normal exit)."""
    if bounded:
        session_close.call_within(session.close, what=what)
    else:
        session.close()


class FinalEvaluationStart(tf.compat.v1.train.SessionRunHook):
    """Starts the final evaluation in the background in its ``end``: put first, the evaluation runs while
    the later hooks' ends (the final checkpoint) do; ``FinalEvaluationJoin``, put last, waits for it."""

    def __init__(self, evaluation: FinalEvaluationHook):
        evaluation.background = True
        self._evaluation = evaluation

    def end(self, session):
        self._evaluation.start()


class FinalEvaluationJoin(tf.compat.v1.train.SessionRunHook):
    """Waits, in its ``end``, for the final evaluation ``FinalEvaluationStart`` started."""

    def __init__(self, evaluation: FinalEvaluationHook):
        self._evaluation = evaluation

    def end(self, session):
        self._evaluation.finish()
