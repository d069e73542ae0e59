"""The forms of TensorFlow's multi-line messages whose later lines the console hides with the first."""

from __future__ import annotations

import re

# The second lines of TensorFlow's multi-line messages (deprecations, CPU features, gRPC errors).
INSTRUCTIONS = "Instructions for updating:"
# gRPC's error details follow on lines of their own, each starting with ":" (":UNKNOWN:Error received ...").
CONTINUATIONS = (
    INSTRUCTIONS,
    "To enable the following instructions",
    "Additional GRPC error information",
    ":",
    "failed to connect to all addresses",  # a gRPC error's text, on the line after the message that quotes it
    # tf_should_use's "Object was never used" warning (an assert or an op the script built and dropped).
    "Object was never used (type ",
    "<tf.",
    'If you want to mark it as used call its "mark_used()" method.',
    "It was originally created here:",
    "==================================",
    # The placer's colocation dump ("Failed to place the graph without changing the devices of some resources").
    "See below for details of this colocation group:",
    "Colocation Debug Info:",
    "Colocation group had the following types and supported devices:",
    "Root Member(",
    "Colocation members, user-requested devices, and framework assigned devices, if any:",
    # meta_graph's "Issue encountered when serializing resources." (a graph with shared resources, as a
    # dynamic table's markers, written to an events file): its reason follows on lines of their own.
    "Type is unsupported, or the types of the items don't match field type in CollectionDef",
    "'_Resource' object has no attribute",
    # TensorFlow 2.22's trace after some C++ log lines: this header, source paths (SOURCE_LOCATION), a blank line.
    "=== Source Location Trace: ===",
)
# A colocation dump's "op type: the device types with its kernels" line ("VariableV2: CPU GPU ").
KERNEL_DEVICES = re.compile(r"^[A-Za-z0-9_]+: (?:[A-Z][A-Z0-9_]* )*$")
# log_device_placement's print (its log line, placer.cc, follows): "mul: (Mul): /job:worker/replica:0/task:0/...".
PLACEMENT = re.compile(r"^\S+: \([A-Za-z0-9_]+\): /job:\S+$")
# A line of that trace: a TensorFlow source file and line ("./tensorflow/core/common_runtime/eager/x.h:111").
SOURCE_LOCATION = re.compile(r"^(?:\./)?(?:[\w.+-]+/)+[\w.+-]+\.(?:h|hh|hpp|c|cc|cpp|inc):\d+$")
