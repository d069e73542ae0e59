"""TF2's ParameterServerStrategy + ClusterCoordinator with default settings: one step per scheduled function.

The ps and worker tasks are plain ``tf.distribute.Server`` processes that join
forever (TF2 has no way for them to end by themselves); the coordinator
(``--job_name=chief``) builds the model, schedules every step and times them.

    python -m benchmarks.tf2_pss --chief_host=... --ps_hosts=... --worker_hosts=... --job_name=chief
"""

import tensorflow as tf
from absl import app, flags

from benchmarks import protocol, task_flags
from benchmarks.synthetic import MODELS, make_data

_CHIEF_HOST = flags.DEFINE_string("chief_host", "", "The coordinator's address.")


def cluster_spec() -> tf.train.ClusterSpec:
    return tf.train.ClusterSpec(
        {
            "chief": [_CHIEF_HOST.value],
            "ps": task_flags.hosts(task_flags.PS_HOSTS),
            "worker": task_flags.hosts(task_flags.WORKER_HOSTS),
        }
    )


def serve() -> None:
    server = tf.distribute.Server(
        cluster_spec(), job_name=task_flags.JOB_NAME.value, task_index=task_flags.TASK_INDEX.value, protocol="grpc"
    )
    server.join()


def _coordinate() -> None:
    spec = MODELS[task_flags.MODEL.value]
    data = make_data()
    strategy, coordinator = make_coordinator()
    sizes = (784, *spec.layers)
    with strategy.scope():
        glorot = tf.keras.initializers.GlorotUniform(seed=0)
        weights = [
            tf.Variable(glorot([a, b]), name=f"w{i}") for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False))
        ]
        biases = [tf.Variable(tf.zeros([b]), name=f"b{i}") for i, b in enumerate(sizes[1:])]
    variables = weights + biases

    def logits_of(images):
        net = images
        for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
            net = tf.matmul(net, w) + b
            if i < len(weights) - 1:
                net = tf.nn.relu(net)
        return net

    iterator = per_worker_batches(
        coordinator, lambda: (data.train_images, data.train_labels), len(data.train_images), spec.batch_size
    )

    @tf.function
    def train_step(iterator):
        def replica_fn(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits_of(images))
                )
            for variable, grad in zip(variables, tape.gradient(loss, variables), strict=True):
                variable.assign_sub(spec.learning_rate * grad)
            return loss

        images, labels = next(iterator)
        return strategy.run(replica_fn, args=(images, labels))

    clock, last = run_timed(coordinator, train_step, iterator)
    accuracy = tf.reduce_mean(
        tf.cast(tf.equal(tf.argmax(logits_of(data.test_images), 1), data.test_labels), tf.float32)
    )
    clock.finish(loss=float(last.fetch()), accuracy=float(accuracy))


def make_coordinator(variable_partitioner=None):
    """The chief's ParameterServerStrategy over the --*_hosts cluster and its ClusterCoordinator."""
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster_spec(), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=variable_partitioner)
    return strategy, tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


def per_worker_batches(coordinator, arrays_fn, shuffle_buffer: int, batch_size: int):
    """An iterator over each worker's own shuffled, repeated batches of ``arrays_fn()``'s examples."""

    def dataset_fn():
        return (
            tf.data.Dataset.from_tensor_slices(arrays_fn())
            .shuffle(shuffle_buffer)
            .repeat()
            .batch(batch_size, drop_remainder=True)
            .prefetch(2)
        )

    return iter(coordinator.create_per_worker_dataset(dataset_fn))


def run_timed(coordinator, train_step, iterator):
    """Schedules ``--train_steps`` steps, timed by the harness's clock; returns (clock, the last step's result)."""
    steps = task_flags.TRAIN_STEPS.value
    clock = protocol.StepClock(steps)
    done = 0
    # Join at the first step, at the end of warm-up and at the end: the timing
    # window never waits on a half-empty queue.
    for target in (1, max(2, int(steps * protocol.WARMUP_FRACTION)), steps):
        for _ in range(target - done):
            last = coordinator.schedule(train_step, args=(iterator,))
        coordinator.join()
        done = target
        clock.observe(done)
    return clock, last


def main(_):
    if task_flags.JOB_NAME.value == "chief":
        _coordinate()
    else:
        serve()


if __name__ == "__main__":
    app.run(main)
