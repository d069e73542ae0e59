"""Writes Kubernetes manifests for a parameter-server cluster: a Kubeflow TFJob, or plain objects.

The checkout's form of ``ps-make-tfjob`` (installed) and ``python -m ps_toolkit.tools.make_tfjob``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.make_tfjob import main  # noqa: E402

if __name__ == "__main__":
    main()
