"""A TF 1.x script whose helper module uses a tf.contrib name the compat layer does not provide."""

import removed_helper

removed_helper.model()
