"""An absl script that defines no cluster flags and reads its role from TF_CONFIG (app.run(main))."""

import json
import os

from absl import app, flags

flags.DEFINE_integer("train_steps", 10, "Steps to report.")
FLAGS = flags.FLAGS


def main(argv):
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    print(f"{task['type']}:{task['index']} local_steps={FLAGS.train_steps}")


if __name__ == "__main__":
    app.run(main)
