"""Weights from files into generated modules: lazy readers of (sharded) safetensors files,
declarative checkpoint maps from an external checkpoint's tensor names to ncdc's parameter keys,
and modules built on the meta device and filled one tensor at a time (docs/checkpoints.md)."""
