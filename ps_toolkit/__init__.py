"""ps_toolkit: TF1-style parameter-server training on today's TensorFlow.

The public API, re-exported on purpose. Importing this package does not
import TensorFlow; the submodules that need it import it themselves.
"""

from ps_toolkit.api import train
from ps_toolkit.cluster import ClusterConfig, resolve
from ps_toolkit.errors import ConfigError, RetryableError, ToolkitError
from ps_toolkit.local_cluster import InProcessCluster, LocalCluster, TaskFailedError
from ps_toolkit.model_api import InputContext, ModeKeys, ModelDefinition, ModelSpec
from ps_toolkit.train_config import TrainConfig

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "InProcessCluster",
    "InputContext",
    "LocalCluster",
    "ModeKeys",
    "ModelDefinition",
    "ModelSpec",
    "RetryableError",
    "TaskFailedError",
    "ToolkitError",
    "TrainConfig",
    "resolve",
    "train",
]
__version__ = "0.1.0"
