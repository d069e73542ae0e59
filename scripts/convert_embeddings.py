"""Turns a TF1 checkpoint's fixed embedding tables into dynamic tables' rows, in a new checkpoint.

The checkout's form of ``ps-convert-embeddings`` (installed) and ``python -m ps_toolkit.tools.convert_embeddings``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.convert_embeddings import main  # noqa: E402

if __name__ == "__main__":
    main()
