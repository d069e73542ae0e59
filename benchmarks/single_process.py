"""The single-process limit: the same model, input pipeline and SGD in one process, no servers.

python -m benchmarks.single_process --model=mlp --train_steps=2000
"""

import tensorflow as tf
from absl import app

from benchmarks import protocol, task_flags
from benchmarks.synthetic import MODELS, make_data
from ps_toolkit.data import make_train_input
from ps_toolkit.models import build_model


def main(_):
    spec = MODELS[task_flags.MODEL.value]
    data = make_data()
    clock = protocol.StepClock(task_flags.TRAIN_STEPS.value)
    with tf.Graph().as_default():
        next_batch, input_hook = make_train_input(
            data.train_images, data.train_labels, batch_size=spec.batch_size, replica_index=0, num_replicas=1, seed=0
        )
        images, labels = next_batch()
        logits = build_model(spec.name, images)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(spec.learning_rate).minimize(loss, global_step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            input_hook.after_create_session(session, None)
            for step in range(1, task_flags.TRAIN_STEPS.value + 1):
                session.run(train_op)
                clock.observe(step)
            final_loss = float(session.run(loss))
    clock.finish(loss=final_loss, accuracy=None)


if __name__ == "__main__":
    app.run(main)
