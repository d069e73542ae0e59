"""The SavedModel of a trained model: its PREDICT graph with a placeholder per feature, from the newest checkpoint.

Loadable with ``tf.saved_model.load`` (``.signatures["serving_default"]``)
and with ``tf.compat.v1.saved_model.loader.load(session, ["serve"], path)``.
The signature's inputs are the features the input_fn yields, batch dimension
left open; its outputs are ``export_outputs`` when the model gives them, else
its ``predictions``.
"""

from __future__ import annotations

import os

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base import environment_errors
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.training import export_swap
from ps_toolkit.training.model_api import ModeKeys, ModelDefinition, function_name
from ps_toolkit.training.model_calls import call_input_fn, call_model_fn

SERVING_KEY = "serving_default"


def export_saved_model(
    definition: ModelDefinition, input_context, checkpoint_dir: str, export_dir: str, partitioner=None
) -> str:
    """Writes the SavedModel to ``export_dir`` (replacing one there) and returns the path.

    Its inputs are the features the input_fn yields for ``input_context``. The model is
    written to a staging folder beside ``export_dir`` (export_swap), and a full disk or a
    refused write is one line naming ``export_dir``.
    """
    checkpoint = tf.train.latest_checkpoint(checkpoint_dir)
    if checkpoint is None:
        raise ConfigError(f"no checkpoint in {checkpoint_dir} to export")
    with (
        environment_errors.reported(f"exporting the SavedModel to --export_dir={export_dir}"),
        export_swap.staging_folder(export_dir) as staging,
    ):
        _write(definition, input_context, checkpoint, os.path.join(staging, "model"), partitioner)
        export_swap.swap_in(os.path.join(staging, "model"), export_dir)
    return export_dir


def predict_spec(definition: ModelDefinition, input_context, partitioner=None) -> tuple[dict, object]:
    """(placeholders by feature name, ModelSpec) of the model in PREDICT mode, in the default graph."""
    feature_spec = call_input_fn(
        definition.input_fn, function_name(definition.input_fn), input_context, definition.params
    ).element_spec[0]
    inputs = _placeholders(feature_spec)
    features = inputs["features"] if isinstance(feature_spec, tf.TensorSpec) else inputs
    return inputs, call_model_fn(definition, features, None, ModeKeys.PREDICT, partitioner=partitioner)


def _write(definition, input_context, checkpoint: str, path: str, partitioner) -> None:
    with tf.Graph().as_default():
        inputs, spec = predict_spec(definition, input_context, partitioner)
        signatures = {
            key: tf.compat.v1.saved_model.predict_signature_def(inputs, outputs)
            for key, outputs in _signature_outputs(spec).items()
        }
        with tf.compat.v1.Session() as session:
            # The checkpoint's newest delta merged in; its ops only where one may be (they go into the SavedModel).
            state = os.path.join(os.path.dirname(checkpoint), dynamic_embedding.delta_files.STATE_FILE)
            saver = dynamic_embedding.DeltaMergingSaver(deltas=os.path.exists(state))
            saver.restore(session, checkpoint)
            # Dynamic tables ride in the saver (their rows restored into one shard); the collections of Python
            # objects that found them would not survive the meta graph.
            tables_saver = saver if dynamic_embedding.clear_graph_collections() else None
            builder = tf.compat.v1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(
                session,
                [tf.saved_model.SERVING],
                signature_def_map=signatures,
                strip_default_attrs=True,
                saver=tables_saver,
            )
            builder.save()


def _placeholders(feature_spec) -> dict:
    specs = {"features": feature_spec} if isinstance(feature_spec, tf.TensorSpec) else dict(feature_spec)
    return {
        name: tf.compat.v1.placeholder(spec.dtype, [None, *spec.shape[1:]], name=name) for name, spec in specs.items()
    }


def _signature_outputs(spec) -> dict:
    """Signature key -> {output name: tensor}: the model's export_outputs, else its predictions."""
    if spec.export_outputs:
        outputs = {key: _as_dict(getattr(output, "outputs", output)) for key, output in spec.export_outputs.items()}
        if SERVING_KEY not in outputs and len(outputs) == 1:
            outputs[SERVING_KEY] = next(iter(outputs.values()))
        return outputs
    return {SERVING_KEY: _as_dict(spec.predictions)}


def _as_dict(outputs) -> dict:
    return dict(outputs) if isinstance(outputs, dict) else {"output": outputs}
