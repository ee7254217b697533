"""Diagrams as Hugging Face models: ``ncdc export --hf DIR`` writes a folder that
``transformers`` loads with ``trust_remote_code=True`` (docs/hf-export.md).

:mod:`ncdc.hf.kind` decides from the IR whether a diagram is a causal language model,
:mod:`ncdc.hf.fields` reads the generated module's sizes and constants (the config's fields),
:mod:`ncdc.hf.folder` writes the folder's files and :mod:`ncdc.hf.export` puts them together.
The code written into the folder is in ``templates/``; it imports torch, transformers and the
standard library only.
"""
