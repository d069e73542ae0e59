"""A TF 1.x script that reads MNIST from the folder given as its first argument."""

import sys

from tensorflow.examples.tutorials.mnist import input_data

mnist = input_data.read_data_sets(sys.argv[1], one_hot=True)
print("train", mnist.train.num_examples)
