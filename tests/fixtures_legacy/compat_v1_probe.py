"""A script written against tf.compat.v1 (TF 2.0-2.15 era) that imports a TensorFlow-internal module TF 2.21 dropped."""

import tensorflow.compat.v1 as tf
from tensorflow.python.data.experimental.ops import threadpool

tf.disable_v2_behavior()
classes = (tf.train.Server, tf.Session, tf.train.MonitoredTrainingSession, tf.train.Supervisor)
print("classes", " ".join(c.__module__ for c in classes))
dataset = threadpool.override_threadpool(tf.data.Dataset.range(3), threadpool.PrivateThreadPool(2, display_name="io"))
with tf.Session() as session:
    element = tf.data.make_one_shot_iterator(dataset).get_next()
    print("values", [int(session.run(element)) for _ in range(3)])
