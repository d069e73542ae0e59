"""Network protection: private namespaces, the port guard, the open-port decision and the step-tamper guards.

TensorFlow's gRPC servers listen on every interface without authentication;
these modules keep a task's port private and refuse a global step moved by
someone else. They import only the standard library, ``base`` and ``cluster``
(and TensorFlow for the chief's step hook), so the task and the launcher
layers above both use them.
"""
