"""The check tools: the generated PyTorch module against the numpy reference interpreter.

They sit above both backends (``ncdc.interpreter`` and ``ncdc.codegen``), which never import each
other. :mod:`.check` compares one morphism's outputs block by block (``ncdc check``),
:mod:`.tolerance` derives each block's tolerance in a narrower dtype, :mod:`.recorded` records the
inputs each block meets in its context, and :mod:`.decoder_check` compares token-by-token decoding
with the whole-sequence outputs (``ncdc check --incremental``).
"""
