"""The single-process limit: the same model, input pipeline and SGD in one process, no servers.

python -m benchmarks.single_process --model=mlp --train_steps=2000
"""

import tensorflow as tf
from absl import app

from benchmarks import protocol, task_flags
from benchmarks.synthetic import MODELS, make_data
from ps_toolkit.models.classifiers import classifier_model_fn
from ps_toolkit.models.mnist_data import train_input_fn
from ps_toolkit.training.model_api import InputContext, ModeKeys


def main(_):
    spec = MODELS[task_flags.MODEL.value]
    data = make_data()
    clock = protocol.StepClock(task_flags.TRAIN_STEPS.value)
    with tf.Graph().as_default():
        dataset = train_input_fn(data, InputContext(1, 0, spec.batch_size))
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        features, labels = iterator.get_next()
        loss = classifier_model_fn(features, labels, ModeKeys.TRAIN, {"network": spec.name}).loss
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(spec.learning_rate).minimize(loss, global_step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(iterator.initializer)
            for step in range(1, task_flags.TRAIN_STEPS.value + 1):
                session.run(train_op)
                clock.observe(step)
            final_loss = float(session.run(loss))
    clock.finish(loss=final_loss, accuracy=None)


if __name__ == "__main__":
    app.run(main)
