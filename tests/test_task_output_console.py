"""The console shows the toolkit's lines; TensorFlow's start-up and shutdown noise goes to the task logs only."""

from ps_toolkit.launch.task_output import LOG, ConsoleFilter, TaskOutput

# (stream, line, shown on the console), in the order a quick-start worker prints them.
QUICK_START_LINES = [
    ("stderr", "I1123 06:12:52.011063 139824639929216 run_task.py:62] /job:worker/task:0 of TF_CONFIG", True),
    ("stderr", "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR", False),
    ("stderr", "I0000 00:00:1795414372.426789   10729 port.cc:153] oneDNN custom operations are on.", False),
    ("stderr", "I0000 00:00:1795414372.518758   10729 cpu_feature_guard.cc:227] This TensorFlow binary is", False),
    ("stderr", "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild", False),
    ("stderr", "E0000 00:00:1795414374.483985   10729 cuda_platform.cc:52] failed call to cuInit: INTERNAL", False),
    ("stderr", "I1123 06:12:58.513796 139824639929216 server.py:103] started /job:worker/task:0 at localhost:1", True),
    ("stderr", "W1123 06:12:58.910455 139824639929216 deprecation.py:50] From fast_path.py:67: calling", False),
    ("stderr", "Instructions for updating:", False),
    ("stderr", "back_prop=False is deprecated. Consider using tf.stop_gradient instead.", False),
    ("stderr", "I1123 06:12:59.110145 139824639929216 placement.py:258] ps task   variables   bytes", True),
    ("stderr", "I1123 06:12:59.123905 139824639929216 basic_session_run_hooks.py:557] Create a hook.", False),
    ("stderr", "W0000 00:00:1795414379.780371   11162 local_rendezvous.cc:412] Local rendezvous is aborting", False),
    ("stdout", 'ps_toolkit progress: {"job": "worker", "task": 0, "global_step": 280}', False),
    ("stderr", "W0000 00:00:1795414382.050966   11283 master_session.cc:2166] UNAVAILABLE: Socket closed", False),
    ("stderr", "Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling", False),
    ("stdout", '{"job": "worker", "task": 0, "global_step": 1001, "local_steps": 580, "final_loss": 0.1}', True),
]


def test_console_shows_the_toolkits_lines_and_hides_tensorflows():
    console = ConsoleFilter()
    for stream, line, shown in QUICK_START_LINES:
        assert console.shows(stream, line) == shown, line


def test_errors_tracebacks_and_plain_output_are_shown_even_after_hidden_lines():
    console = ConsoleFilter()
    assert not console.shows("stderr", "W0000 00:00:1795414379.780371   11162 local_rendezvous.cc:412] ABORTED")
    assert console.shows("stderr", "Traceback (most recent call last):")
    assert console.shows("stderr", '  File "x.py", line 3, in <module>')  # the traceback goes on
    assert not console.shows("stderr", "E0000 00:00:1795414374.483985   10729 cuda_platform.cc:52] cuInit")
    assert console.shows("stderr", "run_task.py: error: --train_steps=0 must be positive")
    assert console.shows("stderr", "watchdog: /job:worker/task:1: no progress for 300s")
    assert console.shows("stderr", "F0000 00:00:1795414374.483985   10729 some_op.cc:52] Check failed: x")
    assert console.shows("stdout", "Step: 100, accuracy 0.91")  # a legacy script's print
    # A legacy script's own logging is its own, not TensorFlow's.
    assert console.shows("stderr", "I1123 06:12:59.110145 1398 mnist_softmax_async.py:80] step 100")


# An old script's graph: tf_should_use's warning on an assert it dropped (Python logging, then absl's form), the
# placer's colocation dump, log_device_placement's prints; then the script's own print, a read later.
OLD_SCRIPT_NOISE = [
    "ERROR:tensorflow:==================================",
    "Object was never used (type <class 'tensorflow.python.framework.ops.Operation'>):",
    "<tf.Operation 'assert_positive/assert_less/Assert/AssertGuard/Identity' type=Identity>",
    'If you want to mark it as used call its "mark_used()" method.',
    "It was originally created here:",
    '  File "/tf/python/ops/check_ops.py", line 955, in assert_less',
    "==================================",
    "E1126 18:07:20.428783 140 tf_should_use.py:288] ==================================",
    "Object was never used (type <class 'tensorflow.python.framework.ops.Tensor'>):",
    "==================================",
    "W0000 00:00:1795716278.428783   20545 colocation_graph.cc:1218] Failed to place the graph without changing the "
    "devices of some resources. Some of the operations (that had to be colocated with resource generating "
    "operations) are not supported on the resources' devices. Current candidate devices are [",
    "  /job:ps/replica:0/task:0/device:CPU:0].",
    "See below for details of this colocation group:",
    "Colocation Debug Info:",
    "Colocation group had the following types and supported devices: ",
    "Root Member(assigned_device_name_index_=-1 requested_device_name_='/job:ps/task:0' assigned_device_name_=''",
    "VariableV2: CPU GPU ",
    "Assign: CPU ",
    "",
    "Colocation members, user-requested devices, and framework assigned devices, if any:",
    "  hidden1/weights (VariableV2) /job:ps/task:0",
    "mul: (Mul): /job:worker/replica:0/task:0/device:CPU:0",
    "INFO:tensorflow:An error was raised. This may be due to a preemption in a connected worker or parameter server."
    " The current session will be closed and a new session will be created. Error: UNAVAILABLE: From /job:master:",
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:29619: Failed to connect to remote host",
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling /tensorflow.Wo",
    ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"failed to connect to all addresses"}',
    "I0000 00:00:1795716449.241979    5871 placer.cc:162] mul: (Mul): /job:worker/replica:0/task:0/device:CPU:0",
    # A graph with shared resources (a dynamic table's markers) written to an events file.
    "W1126 23:20:03.226649 140693859310464 meta_graph.py:448] Issue encountered when serializing resources.",
    "Type is unsupported, or the types of the items don't match field type in CollectionDef. Note this is a "
    "warning and probably safe to ignore.",
    "'_Resource' object has no attribute 'name'",
]


def test_an_old_scripts_tensorflow_warnings_and_dumps_go_to_the_log_only():
    console = ConsoleFilter()
    for line in OLD_SCRIPT_NOISE:
        assert not console.shows("log", line), line
    console.end_of_read("log")
    assert console.shows("log", "Accuracy: 0.91")
    assert console.shows("log", "==================================")  # the script's own, in a read of its own
    assert console.shows("log", "Step: 3")  # a plain line right after a shown one


def test_the_log_file_keeps_every_line(tmp_path):
    echoed = []
    path = tmp_path / "worker-0.log"
    output = TaskOutput("worker:0", open(path, "ab"), echoed.append)  # noqa: SIM115 - closed below
    for stream, line, _shown in QUICK_START_LINES:
        output.feed(stream, line.encode() + b"\n")
    output.close()
    assert path.read_text().splitlines() == [line for _s, line, _shown in QUICK_START_LINES]
    assert echoed == [f"[worker:0] {line}" for _s, line, shown in QUICK_START_LINES if shown]


def test_a_legacy_scripts_printed_steps_and_accuracy_are_picked_up(tmp_path):
    output = TaskOutput("worker:1", open(tmp_path / "log", "ab"), None)  # noqa: SIM115 - closed below
    output.feed("stdout", b"worker=1,epoch=9,global_step=121, local_step=61, loss = 0.31\n")
    output.feed("stdout", b"worker 1: done after 580 local steps, test accuracy 0.9132\n")
    output.close()
    assert output.result is None
    assert output.steps == 580 and output.printed_accuracy == 0.9132


def test_an_evaluators_metrics_are_its_printed_result(tmp_path):
    """An estimator evaluator's record (compat.progress_hook.print_evaluation) feeds the verdict's accuracy."""
    output = TaskOutput("evaluator:0", open(tmp_path / "log", "ab"), None)  # noqa: SIM115 - closed below
    output.feed("stdout", b'ps_toolkit progress: {"global_step": 40, "loss": 0.5, "time": 1.0}\n')
    assert output.printed_accuracy is None and output.printed_loss is None  # a training record is no result
    record = b'ps_toolkit progress: {"evaluation": true, "global_step": 60, "accuracy": 0.994, "loss": 0.02}\n'
    output.feed("stdout", record)
    output.close()
    assert (output.printed_accuracy, output.printed_loss, output.global_step) == (0.994, 0.02, 60)


def test_tensorflow_2_22s_source_location_trace_goes_to_the_log_only():
    console = ConsoleFilter()
    trace = [
        "W0000 00:00:1795414379.780371   11162 rendezvous_cache.cc:93] Local rendezvous recv item cancelled.",
        "=== Source Location Trace: ===",
        "./tensorflow/core/common_runtime/eager/rendezvous_cache.h:111",
        "tensorflow/core/framework/local_rendezvous.cc:412",
        "",
    ]
    assert [line for line in trace if console.shows(LOG, line)] == []
    assert console.shows(LOG, "worker 0 printed this")  # the task's own next line is shown


def test_a_source_path_of_the_tasks_own_is_shown_when_no_hidden_message_precedes_it():
    console = ConsoleFilter()
    assert console.shows(LOG, "I1123 06:12:52.011063 139824639929216 run_task.py:62] /job:worker/task:0 started")
    assert console.shows(LOG, "./src/model.cc:12")
