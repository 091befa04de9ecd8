"""A clone's spelling of the installed command: `python -m apps.X` runs
`keras-transformer X` (keras_transformer.cli), `_` for `-` in the command's name."""
