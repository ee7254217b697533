"""Hand-written numpy oracles, each written from a block's own description and formula
(``spec.block(t).tag.description`` / ``.formula``) and docs/format.md §14.2 — never from the
interpreter's code. Every function takes plain float64/int64 arrays of one unlifted block
(or a leading batch where stated)."""
